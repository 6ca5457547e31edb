"""`transformer-mt import` and `transformer-mt export`: models between transformer-mt and
other toolkits' formats."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from ..interop import QUANTIZATIONS
from ..storage.files import atomic_dir

# format -> (module of interop/, its function), imported when used: `--help` needs no torch
IMPORTERS = {"marian": ("marian", "import_marian"), "fairseq": ("fairseq", "import_fairseq")}
EXPORTERS = {"marian": ("marian", "export_marian"), "ctranslate2": ("ct2", "export_ctranslate2")}
COMMANDS = ("import", "export")  # keywords: not the module's name

IMPORT_HELP = (
    "Convert a model of another toolkit into a transformer-mt model directory that translate, "
    "serve and evaluate take, decoding as that toolkit does. marian: a Hugging Face Marian "
    "(OPUS-MT) directory with config.json, model.safetensors or pytorch_model.bin, source.spm, "
    "target.spm and vocab.json. fairseq: a transformer checkpoint .pt (read with "
    "torch's weights_only unpickler, only argparse.Namespace allowed) with its dict.*.txt and "
    "SentencePiece *.model beside it. docs/interop.md says what each format can carry.")
EXPORT_HELP = (
    "Write a transformer-mt model directory in another toolkit's format, computing the same "
    "function. marian: a Hugging Face Marian directory that transformers' MarianMTModel and "
    "MarianTokenizer load with no custom code (the paper's interleaved positions are carried "
    "exactly; pre-norm, learned positions and LayerNorm eps other than 1e-5 are refused). "
    "ctranslate2: a CTranslate2 model (post- or pre-norm, any positions and eps), weights "
    "quantised with --quantization, that `translate --engine ctranslate2` and `serve "
    "--engine ctranslate2` take. docs/interop.md says what each format can carry.")


def add_parser(sub) -> None:
    _add(sub, "import", "convert another toolkit's model into a model directory", IMPORT_HELP,
         IMPORTERS, ("source", "the model's directory (fairseq: its checkpoint file)"))
    p = _add(sub, "export", "convert a model directory into another toolkit's format",
             EXPORT_HELP, EXPORTERS, ("model", "the model directory"))
    p.add_argument("--quantization", help="ctranslate2 only: the weights' type, one of "
                   f"{', '.join(QUANTIZATIONS)} (default float32)")


def _add(sub, command: str, summary: str, description: str,
         converters: dict[str, tuple[str, str]], source: tuple[str, str]
         ) -> argparse.ArgumentParser:
    p = sub.add_parser(command, help=summary, description=description)
    p.add_argument("format", choices=sorted(converters), help="the other toolkit's format")
    p.add_argument("source", metavar=source[0], type=Path, help=source[1])
    p.add_argument("--out", required=True, type=Path, help="directory to write")
    p.set_defaults(run=lambda args: run(args, converters))
    return p


def run(args: argparse.Namespace, converters: dict[str, tuple[str, str]]) -> int:
    options = {}
    if getattr(args, "quantization", None) is not None:
        if args.format != "ctranslate2":
            raise ValueError(f"--quantization applies to ctranslate2, not {args.format}")
        options["quantization"] = args.quantization
    module, function = converters[args.format]
    convert = getattr(importlib.import_module(f"..interop.{module}", __package__), function)
    with atomic_dir(args.out) as tmp:  # a failed conversion leaves --out as it was
        convert(args.source, tmp, **options)
    print(f"{args.command} {args.format}: {args.source} -> {args.out}")
    return 0
