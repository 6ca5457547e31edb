"""`transformer-mt import`: another toolkit's model as a transformer-mt model directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..interop.marian import import_marian

IMPORTERS = {"marian": import_marian}
COMMAND = "import"  # a keyword: not the module's name


def add_parser(sub) -> None:
    p = sub.add_parser(
        COMMAND, help="convert another toolkit's model into a model directory",
        description="Convert a model of another toolkit into a transformer-mt model directory "
                    "that translate, serve and evaluate take, decoding as that toolkit does. "
                    "marian: a Hugging Face Marian (OPUS-MT) directory with config.json, "
                    "model.safetensors or pytorch_model.bin, source.spm, target.spm and "
                    "vocab.json. docs/interop.md says what each format can carry.")
    p.add_argument("format", choices=sorted(IMPORTERS), help="the model's format")
    p.add_argument("source", type=Path, help="the model's directory")
    p.add_argument("--out", required=True, type=Path, help="model directory to write")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    out = IMPORTERS[args.format](args.source, args.out)
    print(f"{args.format} model {args.source} -> {out}")
    return 0
