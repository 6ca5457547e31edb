"""How far would F1 move on another sample of sentences? EVALB's F1 (the strict summary's)
of each --test file against --gold with a 95 % bootstrap interval (sentences resampled with
replacement, --resamples times, the same resamples for every file); with several files, each
one's difference from the first with its paired interval.

    PYTHONPATH=src python benchmarks/parsing/bootstrap.py --gold runs/parse/corpus/test.gold \\
        --test runs/parse/test.balanced.parsed runs/parse/test.last.balanced.parsed
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from transformer_mt.research.evalb import EvalbParams, score_files, summary


def interval(values) -> list[float]:
    """The central 95 % of `values`."""
    return [float(x) for x in np.percentile(values, [2.5, 97.5])]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gold", required=True, type=Path)
    p.add_argument("--test", required=True, type=Path, nargs="+")
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = p.parse_args()
    # the strict summary of `parse score`: a sentence EVALB leaves out (other words) counts
    # with no bracket matched
    scores = [score_files(args.gold, path, EvalbParams()) for path in args.test]
    n = len(scores[0])
    picks_RN = np.random.default_rng(args.seed).integers(0, n, size=(args.resamples, n))
    f1_FR = np.array([[summary([file[j] for j in picks], strict=True)["f1"]
                       for picks in picks_RN.tolist()] for file in scores])
    found = []
    for i, (path, file) in enumerate(zip(args.test, scores, strict=True)):
        row = {"test": str(path), "f1": summary(file, strict=True)["f1"],
               "interval": interval(f1_FR[i])}
        line = f"{path}: F1 {row['f1']:.2f} [{row['interval'][0]:.2f}, {row['interval'][1]:.2f}]"
        if i:
            row["minus_first"] = row["f1"] - found[0]["f1"]
            row["minus_first_interval"] = low, high = interval(f1_FR[i] - f1_FR[0])
            line += f"; minus the first {row['minus_first']:+.2f} [{low:+.2f}, {high:+.2f}]"
        found.append(row)
        print(line)
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
