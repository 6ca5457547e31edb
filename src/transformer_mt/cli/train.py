"""`transformer-mt train`: train (or resume) a model on a prepared data directory."""

from __future__ import annotations

import argparse
import dataclasses
import json
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
                   help=f"preset ({', '.join(preset_names())}) or YAML file, or a run's "
                        "config.json to train its config again (default: base)")
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
    """Every config key train reads, with its help and the dataclasses' default, for --help."""
    lines = textwrap.wrap("config keys (--section.key=value, a YAML value; in a --config file, "
                          "section: key: value); defaults: the paper's base model:", width=96)
    for name, what in TRAIN_SECTIONS.items():
        lines += ["", f"{name} ({what}):"]
        for f in dataclasses.fields(getattr(Config(), name)):
            lines.append(f"  --{name}.{f.name} (default: {json.dumps(f.default)})")
            lines += textwrap.wrap(f.metadata["help"], width=96, initial_indent=" " * 6,
                                   break_on_hyphens=False,
                                   subsequent_indent=" " * 6)
    return "\n".join(lines)


# the config sections train reads (data: prepare's; serve: serve's), and what each is
TRAIN_SECTIONS = {"model": "the architecture, Table 3's columns",
                  "train": "the optimisation and the run's budget, §5",
                  "decode": "how validation translates, and the model directory's default "
                            "for translate, §6.1"}


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
    print(f"trained to step {state.step} (epoch {state.epoch}, "
          f"{state.train_seconds / 60:.1f} min); checkpoints in {args.run_dir}/checkpoints")
    return 0
