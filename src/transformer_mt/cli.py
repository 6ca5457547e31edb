"""`transformer-mt` command line: parse, call one package function, format the output."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .config import ConfigError, load_config, preset_names


def _info(args: argparse.Namespace) -> int:
    from .model_stats import model_stats

    overrides = list(args.overrides)
    if args.vocab_size is not None:
        overrides.append(f"model.vocab_size={args.vocab_size}")
    cfg = load_config(args.config, overrides).model
    stats = model_stats(cfg, seq_len=args.seq_len)
    print(f"config: {args.config}")
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


def _translate(args: argparse.Namespace) -> int:
    from .translator import Translator

    overrides = {k: v for k, v in (("beam_size", args.beam_size), ("n_best", args.n_best),
                                   ("strategy", args.strategy),
                                   ("batch_size", args.batch_size)) if v is not None}
    translator = Translator.from_dir(args.model, device=args.device, **overrides)
    source = open(args.input, encoding="utf-8") if args.input else sys.stdin
    with source:
        sentences = [line.rstrip("\n").removesuffix("\r") for line in source]
    results = translator.translate_nbest(sentences)
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    with out:
        for i, nbest in enumerate(results):
            for t in nbest:
                out.write(f"{i}\t{t.score:.4f}\t{t.text}\n" if args.n_best else f"{t.text}\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transformer-mt",
        description="The Transformer of 'Attention Is All You Need': inspect, translate.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    info = sub.add_parser(
        "info", help="parameter count and FLOPs of a configuration",
        description="Print total and non-embedding parameters and forward FLOPs per token.",
    )
    info.add_argument("--config", default="base",
                      help=f"preset ({', '.join(preset_names())}) or YAML file (default: base)")
    info.add_argument("--vocab-size", type=int, help="shared vocabulary size (default: 37000)")
    info.add_argument("--seq-len", type=int, default=32,
                      help="source and target length for the attention FLOPs (default: 32)")
    info.add_argument("overrides", nargs="*", metavar="section.key=value",
                      help="config overrides, e.g. model.n_heads=4")
    info.set_defaults(func=_info)

    tr = sub.add_parser(
        "translate", help="translate sentences with a model directory",
        description="Translate one sentence per line from --input (default stdin) to --output "
                    "(default stdout), in input order.",
    )
    tr.add_argument("--model", required=True, type=Path, help="model directory")
    tr.add_argument("--input", type=Path, help="source file, one sentence per line")
    tr.add_argument("--output", type=Path, help="where to write translations")
    tr.add_argument("--beam-size", type=int, help="beam size (model default: 4)")
    tr.add_argument("--n-best", type=int,
                    help="print N hypotheses per sentence as 'index<TAB>score<TAB>text'")
    tr.add_argument("--strategy", choices=["beam", "greedy", "sample"])
    tr.add_argument("--batch-size", type=int, help="sentences per batch (default: 64)")
    tr.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    tr.set_defaults(func=_translate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, ValueError, OSError) as err:
        print(f"transformer-mt {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
