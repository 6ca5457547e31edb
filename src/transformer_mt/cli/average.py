"""`transformer-mt average`: the last N checkpoints of a run averaged into a model directory."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ..training.checkpoint import average_checkpoints, checkpoint_dirs

log = logging.getLogger(__name__)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "average", help="average the last N checkpoints into a model directory",
        description="Average the weights of the last N checkpoints of a run (§6.1: 5 for "
                    "base, 20 for big) into a model directory usable by translate.")
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--last", type=int, default=5, help="how many checkpoints (default: 5)")
    p.add_argument("--out", required=True, type=Path, help="model directory to write")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    checkpoints = checkpoint_dirs(args.run_dir)
    if not checkpoints:
        raise ValueError(f"{args.run_dir}: no checkpoints")
    chosen = checkpoints[-args.last:]
    if len(chosen) < args.last:
        log.warning("only %d checkpoints in %s, averaging them all", len(chosen), args.run_dir)
    average_checkpoints(chosen, args.out)
    print(f"averaged {', '.join(p.name for p in chosen)} into {args.out}")
    return 0
