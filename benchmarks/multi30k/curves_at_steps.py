"""Validation BLEU and loss of several runs at equal steps, by recipe and seed: the table,
results.json and curves.png of a comparison (norm_at_equal_steps.sh writes such runs:
OUT/RECIPE-seedN/metrics.jsonl). Usage:

    python benchmarks/multi30k/curves_at_steps.py OUT --steps 500 1000 2000 4000 \
        --json results.json --plot curves.png
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

from transformer_mt.training.metrics import validations


def collect(out: Path) -> dict[str, dict[int, dict[int, dict]]]:
    """recipe -> seed -> step -> validation record."""
    found: dict[str, dict[int, dict[int, dict]]] = defaultdict(dict)
    for run in sorted(p for p in out.iterdir() if (p / "metrics.jsonl").exists()):
        match = re.fullmatch(r"(.+)-seed(\d+)", run.name)
        if match:
            found[match[1]][int(match[2])] = {r["step"]: r for r in validations(run)}
    return dict(found)


def table(found: dict, steps: list[int]) -> tuple[list[str], dict]:
    lines = [f"| recipe | seed | {' | '.join(f'BLEU / loss at {s:,}' for s in steps)} |",
             "|---|---|" + "---|" * len(steps)]
    summary = {}
    for recipe, seeds in found.items():
        for seed, records in sorted(seeds.items()):
            cells = [f"{records[s]['bleu']:.1f} / {records[s]['loss']:.3f}" if s in records
                     else "-" for s in steps]
            lines.append(f"| {recipe} | {seed} | {' | '.join(cells)} |")
        summary[recipe] = {}
        for s in steps:
            bleu = [r[s]["bleu"] for r in seeds.values() if s in r]
            loss = [r[s]["loss"] for r in seeds.values() if s in r]
            if bleu:
                summary[recipe][s] = {
                    "seeds": len(bleu), "bleu_mean": statistics.fmean(bleu),
                    "bleu_sd": statistics.stdev(bleu) if len(bleu) > 1 else None,
                    "loss_mean": statistics.fmean(loss), "bleu": bleu, "loss": loss}
        cells = [f"**{m['bleu_mean']:.1f}** / {m['loss_mean']:.3f}"
                 if (m := summary[recipe].get(s)) else "-" for s in steps]
        lines.append(f"| {recipe} | mean | {' | '.join(cells)} |")
    return lines, summary


def plot(found: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bleu_ax, loss_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for i, (recipe, seeds) in enumerate(found.items()):
        for seed, records in sorted(seeds.items()):
            steps = sorted(records)
            style = dict(color=f"C{i}", alpha=0.8, label=recipe if seed == min(seeds) else None)
            bleu_ax.plot(steps, [records[s]["bleu"] for s in steps], marker="o", **style)
            loss_ax.plot(steps, [records[s]["loss"] for s in steps], marker="o", **style)
    bleu_ax.set(xlabel="step", ylabel="validation BLEU (sacreBLEU)")
    loss_ax.set(xlabel="step", ylabel="validation loss (label-smoothed)")
    bleu_ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--steps", type=int, nargs="+", default=[500, 1000, 2000, 4000])
    p.add_argument("--json", type=Path)
    p.add_argument("--plot", type=Path)
    args = p.parse_args()
    found = collect(args.out)
    lines, summary = table(found, args.steps)
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    if args.plot:
        plot(found, args.plot)


if __name__ == "__main__":
    main()
