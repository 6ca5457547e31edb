"""The protocol probes' curves: the base row's dev BLEU and dev perplexity against step under
each protocol probed (one folder a probe and seed, PROBES/NAME[-seedS]/metrics.jsonl, as
the results folder's protocol-probes/ keeps them), one panel, a probe's seeds one colour.

    python benchmarks/table3/probe_curves.py \
        benchmarks/results/table3-multi30k-scale4/protocol-probes
"""

import argparse
import re
from collections import defaultdict
from pathlib import Path

from transformer_mt.research.table3 import plot_curves
from transformer_mt.training.metrics import read_metrics


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("probes", type=Path, help="the folder of probe folders; curves.png goes here")
    args = p.parse_args()
    probes: dict[str, list[list[dict]]] = defaultdict(list)
    for run in sorted(d for d in args.probes.iterdir() if (d / "metrics.jsonl").exists()):
        by_step = {r["step"]: r for r in read_metrics(run) if r["kind"] == "valid"}
        probes[re.sub(r"-seed\d+$", "", run.name)].append([by_step[s] for s in sorted(by_step)])
    path = plot_curves({"--scale 4": dict(probes)}, args.probes / "curves.png",
                       "Probes of the base row\n(sSTEPS-wuWARMUP: steps, warmup steps)")
    print(path)


if __name__ == "__main__":
    main()
