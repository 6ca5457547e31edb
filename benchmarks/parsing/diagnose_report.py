"""The table of diagnose.sh's runs: for each slot kind and norm, dev F1 (EVALB's summary and the
strict one) with the paper's search and with --word-slots --balanced, the share of outputs with
one word slot per word before any repair, the tagging accuracy where tags are predicted, the
teacher-forced nll per piece with the sentence's own source, another's and none, the spread of
the encoder's output (0: one vector for every word) and the last validation loss.

    python benchmarks/parsing/diagnose_report.py runs/parse-diagnose --json results.json > table.md
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

FITTING = re.compile(r"^(\d+) trees to .*; (\d+) had one word slot per word$", re.M)
SEARCHES = {"plain": "the paper's search", "balanced": "--word-slots --balanced"}


def parse_figures(run: Path, search: str) -> dict | None:
    """EVALB's and the strict F1, tagging accuracy and the one-slot-per-word share of a dev
    parse; None where that parse did not finish."""
    if not (run / f"valid.{search}.scores.json").exists():
        return None
    scores = json.loads((run / f"valid.{search}.scores.json").read_text(encoding="utf-8"))
    trees, fitting = map(int, FITTING.findall(
        (run / f"valid.{search}.log").read_text(encoding="utf-8"))[-1])
    return {"f1": scores["all"]["f1"], "strict_f1": scores["strict"]["f1"],
            "tagging_accuracy": scores["all"]["tagging_accuracy"],
            "one_slot_per_word": fitting / trees}


def last_validation_loss(run: Path) -> tuple[int, float]:
    records = [json.loads(line) for line in
               (run / "run" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    last = [r for r in records if r["kind"] == "valid"][-1]
    return last["step"], last["loss"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="diagnose.sh's OUT")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    rows = []
    for run in sorted(d for d in args.out.iterdir() if (d / "reliance.json").exists()):
        slots, norm = run.name.split("-", 1)  # norm: postnorm or prenorm, and diagnose's NAME
        step, loss = last_validation_loss(run)
        rows.append({"slots": slots, "norm": norm, "steps": step, "valid_loss": loss,
                     "reliance": json.loads((run / "reliance.json").read_text(encoding="utf-8")),
                     **{s: parse_figures(run, s) for s in SEARCHES}})
    print("| slots | norm | steps | val loss | nll own / another's / no source | encoder spread | "
          + " | ".join(f"dev F1 / strict, {name}; one slot per word" for name in
                       SEARCHES.values()) + " | tagging accuracy |")
    print("|---" * (7 + len(SEARCHES)) + "|")
    for r in rows:
        nll = r["reliance"]
        cells = [f"{r[s]['f1']:.1f} / {r[s]['strict_f1']:.1f}; "
                 f"{100 * r[s]['one_slot_per_word']:.0f} %" if r[s] else "unfinished"
                 for s in SEARCHES]
        tagging = f"{r['plain']['tagging_accuracy']:.1f}" if r["slots"] == "tags" and \
            r["plain"] else "-"
        print(f"| {r['slots']} | {r['norm']} | {r['steps']} | {r['valid_loss']:.3f} | "
              f"{nll['own sources']:.3f} / {nll['sources rotated by one']:.3f} / "
              f"{nll['empty sources']:.3f} | {nll['encoder spread']:.2g} | " + " | ".join(cells)
              + f" | {tagging} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
