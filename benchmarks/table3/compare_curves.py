"""Table 3 runs side by side: dev BLEU, dev perplexity and encoder spread against step for
the run folders given (each with its metrics.jsonl; NAME-seedS folders are one line of S
seeds), in one panel: the protocol probes of the base row, or a row beside a check of it.

    python benchmarks/table3/compare_curves.py --out PNG --title TITLE RUN [RUN ...]
"""

import argparse
import re
from collections import defaultdict
from pathlib import Path

from transformer_mt.research.table3 import plot_curves
from transformer_mt.training.metrics import validations


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", type=Path, nargs="+", help="run folders, each with metrics.jsonl")
    p.add_argument("--out", type=Path, required=True, help="the figure (.png)")
    p.add_argument("--title", default="", help="the figure's title")
    args = p.parse_args()
    lines: dict[str, list[list[dict]]] = defaultdict(list)
    for run in args.runs:
        lines[re.sub(r"-seed\d+$", "", run.resolve().name)].append(validations(run))
    print(plot_curves({"": dict(lines)}, args.out, args.title))


if __name__ == "__main__":
    main()
