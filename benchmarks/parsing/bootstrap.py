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

from transformer_mt.evaluation.evalb import EvalbParams, score_files


def f1_of(counts_N3: np.ndarray) -> np.ndarray:
    """(..., 3) summed matched, gold and test brackets -> F1 in percent (...,)."""
    matched, gold, test = np.moveaxis(counts_N3, -1, 0)
    recall, precision = matched / np.maximum(gold, 1), matched / np.maximum(test, 1)
    return 100 * np.where(recall + precision > 0,
                          2 * recall * precision / np.maximum(recall + precision, 1e-12), 0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gold", required=True, type=Path)
    p.add_argument("--test", required=True, type=Path, nargs="+")
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = p.parse_args()
    # per file and sentence: matched, gold, test brackets; a sentence EVALB leaves out (other
    # words) counts with no bracket matched, as in the strict summary (`parse score`)
    counts = [[(s.matched, s.gold, s.test) for s in score_files(args.gold, path, EvalbParams())]
              for path in args.test]
    counts_FN3 = np.array(counts, dtype=np.float64)
    n = counts_FN3.shape[1]
    picks_RN = np.random.default_rng(args.seed).integers(0, n, size=(args.resamples, n))
    f1_FR = f1_of(counts_FN3[:, picks_RN].sum(axis=2))  # (files, resamples)
    found = []
    for i, path in enumerate(args.test):
        row = {"test": str(path), "f1": float(f1_of(counts_FN3[i].sum(axis=0))),
               "interval": [float(x) for x in np.percentile(f1_FR[i], [2.5, 97.5])]}
        if i:
            diff_R = f1_FR[i] - f1_FR[0]
            row["minus_first"] = row["f1"] - found[0]["f1"]
            row["minus_first_interval"] = [float(x) for x in np.percentile(diff_R, [2.5, 97.5])]
        found.append(row)
        low, high = row["interval"]
        line = f"{path}: F1 {row['f1']:.2f} [{low:.2f}, {high:.2f}]"
        if i:
            low, high = row["minus_first_interval"]
            line += f"; minus the first {row['minus_first']:+.2f} [{low:+.2f}, {high:+.2f}]"
        print(line)
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
