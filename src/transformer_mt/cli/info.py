"""`transformer-mt info`: parameters and FLOPs of a configuration."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from ..config import Config, ModelConfig, config_data, load_config, preset_names
from .options import add_config_options, add_overrides, as_overrides, given, overrides_given


def add_parser(sub) -> None:
    p = sub.add_parser("info", help="parameter count and FLOPs of a configuration",
                       description="Print total and non-embedding parameters and forward FLOPs "
                                   "per token. Override any config key with --section.key=value, "
                                   "e.g. --model.n_heads=4 (train --help lists them).")
    p.add_argument("--config", default="base",
                   help=f"preset ({', '.join(preset_names())}) or YAML file (default: base)")
    p.add_argument("--data", type=Path, metavar="DATA_DIR",
                   help="a prepared data directory: its vocabulary's size, as train uses it "
                        "(default: the config's data.vocab_size where it sets one, which "
                        "prepare --config builds, else model.vocab_size)")
    p.add_argument("--seq-len", type=int, default=32,
                   help="source and target length for the attention FLOPs (default: 32)")
    add_overrides(p)
    add_config_options(p, ModelConfig, "model", only=("vocab_size",))
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..model.stats import model_stats  # here: `--help` needs no torch

    overrides = overrides_given(args) + as_overrides(given(args, "model"), "model")
    cfg = load_config(args.config, overrides)
    vocab, source = vocabulary_size(args, cfg, overrides)
    cfg = dataclasses.replace(cfg.model, vocab_size=vocab)
    stats = model_stats(cfg, seq_len=args.seq_len)
    print(f"config: {args.config} (vocabulary: {source})")
    print(f"  layers {cfg.n_encoder_layers}+{cfg.n_decoder_layers}, d_model {cfg.d_model}, "
          f"d_ff {cfg.d_ff}, heads {cfg.n_heads}, vocab {cfg.vocab_size}, "
          f"tying {cfg.weight_tying}")
    print(f"parameters:               {stats.parameters:,} ({stats.parameters / 1e6:.1f}M)")
    print(f"non-embedding parameters: {stats.non_embedding_parameters:,} "
          f"({stats.non_embedding_parameters / 1e6:.1f}M)")
    print(f"forward FLOPs per token:  {stats.forward_flops_per_token:,} "
          f"({stats.forward_flops_per_token / 1e6:.1f} MFLOP; source and target of "
          f"{stats.seq_len} tokens)")
    return 0


def vocabulary_size(args: argparse.Namespace, cfg: Config, overrides: list[str]
                    ) -> tuple[int, str]:
    """The vocabulary the model trained from this config has, and where that comes from:
    train takes it from the data directory, which prepare --config builds at data.vocab_size."""
    if args.data is not None:
        from ..data.prepare import load_vocab

        return len(load_vocab(args.data)), f"{args.data}"
    if "model.vocab_size" in {o.split("=")[0] for o in overrides}:
        return cfg.model.vocab_size, "model.vocab_size"
    if "vocab_size" in config_data(args.config, overrides)[1].get("data", {}):
        return cfg.data.vocab_size, "data.vocab_size, as prepare --config builds it"
    return cfg.model.vocab_size, "model.vocab_size"
