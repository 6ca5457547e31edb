"""`transformer-mt train`: train (or resume) a model on a prepared data directory."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import textwrap
from pathlib import Path

from ..config import Config, ModelConfig, load_config, preset_names
from .options import section_overrides


def add_parser(sub) -> None:
    p = sub.add_parser(
        "train", help="train a model on prepared data; resumes a run that has checkpoints",
        description="Train with Adam(0.9, 0.98, 1e-9), the warmup schedule of §5.3 and label "
                    "smoothing 0.1. Writes config.json, metrics.jsonl, tensorboard/, "
                    "checkpoints/ and curves.png to --run-dir. Run it again on the same "
                    "--run-dir to resume exactly where it stopped. Override any config key "
                    "with --section.key=value, e.g. --train.max_steps=100 (the keys are listed "
                    "below).",
        epilog=config_keys(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="base",
                   help=f"preset ({', '.join(preset_names())}) or YAML file (default: base)")
    p.add_argument("--data", required=True, type=Path, help="prepared data directory")
    p.add_argument("--run-dir", required=True, type=Path, help="where the run is written")
    p.add_argument("--init-from", type=Path, metavar="MODEL_DIR",
                   help="fine-tune: start a new run from this model directory's weights and "
                        "config (e.g. an imported OPUS-MT model), on data prepared with "
                        "prepare --vocabulary MODEL_DIR; only --model.*dropout may change")
    p.add_argument("--ignore-mismatch", action="store_true",
                   help="resume even if config, vocabulary or data differ from the checkpoint")
    p.set_defaults(run=run, overrides=[])


def config_keys() -> str:
    """The --section.key=value keys with the base preset's defaults, for --help."""
    lines = ["config keys (--section.key=value) with the dataclasses' defaults, the paper's base "
             "model; src/transformer_mt/config.py explains each:"]
    for section in dataclasses.fields(Config):
        values = dataclasses.asdict(getattr(Config(), section.name))
        keys = ", ".join(f"{key}={value}" for key, value in values.items())
        lines += textwrap.wrap(f"{section.name}: {keys}", width=96, initial_indent="  ",
                               subsequent_indent="      ")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from ..training.fine_tune import init_model_config  # here: `--help` needs no torch
    from ..training.loop import TrainingDiverged, train

    cfg = load_config(args.config, args.overrides)
    if args.init_from:
        given = section_overrides([o for o in args.overrides if o.startswith("model.")],
                                  ModelConfig, "model")
        cfg = dataclasses.replace(cfg, model=init_model_config(args.init_from, given))
    try:
        state = train(cfg, data_dir=args.data, run_dir=args.run_dir,
                      ignore_mismatch=args.ignore_mismatch, init_from=args.init_from)
    except TrainingDiverged as err:
        print(f"transformer-mt train: stopped: {err}", file=sys.stderr)
        return 3
    print(f"trained to step {state['step']} (epoch {state['epoch']}, "
          f"{state['train_seconds'] / 60:.1f} min); checkpoints in {args.run_dir}/checkpoints")
    return 0
