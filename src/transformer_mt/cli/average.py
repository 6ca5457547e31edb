"""`transformer-mt average`: the last N checkpoints of a run averaged into a model directory."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

log = logging.getLogger(__name__)
# §6.1 averaged the last 5 checkpoints of 100k steps, saved every 10 minutes: the last ~4 % of
# training. A warning where the first averaged checkpoint is below this share of the last's
# steps (a short run saving every 500 steps: its first checkpoints are still far from the end).
SPREAD = 0.8


def add_parser(sub) -> None:
    p = sub.add_parser(
        "average", help="average the last N checkpoints into a model directory",
        description="Average the weights of the last N checkpoints of a run (§6.1: 5 for "
                    "base, 20 for big) into a model directory usable by translate.")
    p.add_argument("--run-dir", required=True, type=Path,
                   help="the run directory (train --run-dir): its checkpoints/step_* are read")
    p.add_argument("--last", type=int, default=5, help="how many checkpoints (default: 5)")
    p.add_argument("--out", required=True, type=Path, help="model directory to write")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..storage.run_dir import checkpoint_dirs
    from ..training.checkpoint import average_checkpoints, read_state

    checkpoints = checkpoint_dirs(args.run_dir)
    if not checkpoints:
        raise ValueError(f"{args.run_dir}: no checkpoints")
    chosen = checkpoints[-args.last:]
    if len(chosen) < args.last:
        log.warning("only %d checkpoints in %s, averaging them all", len(chosen), args.run_dir)
    steps = [read_state(path)["step"] for path in chosen]
    if steps[0] < SPREAD * steps[-1]:
        log.warning("the %d checkpoints averaged span steps %s, more than %d %% of the run's "
                    "%d: the early ones pull the average back (fewer --last, or saves closer "
                    "together: train.save_every)", len(steps), ", ".join(map(str, steps)),
                    round(100 * (1 - SPREAD)), steps[-1])
    average_checkpoints(chosen, args.out)
    print(f"averaged {', '.join(p.name for p in chosen)} into {args.out}")
    return 0
