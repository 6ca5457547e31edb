"""`transformer-mt translate`: one sentence per line in, its translation per line out."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from ..config import DecodeConfig
from ..evaluation.bleu import read_text
from ..training.progress import Progress
from .options import (
    add_config_options,
    add_model_options,
    given,
    open_translator,
    section_overrides,
)

log = logging.getLogger(__name__)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "translate", help="translate sentences with a model or run directory",
        description="Translate one sentence per line from --input (default stdin) to --output "
                    "(default stdout), in input order. --model is a model directory (e.g. from "
                    "average) or a run directory (its latest checkpoint); several --model "
                    "directories with one vocabulary decode as an ensemble (their next-token "
                    "probabilities averaged). Decoding options default to what the model "
                    "directory's config.json says (the paper's: beam 4, alpha 0.6); each "
                    "can also be given as --decode.key=value.")
    add_model_options(p)
    p.add_argument("--input", type=Path, help="source file, one sentence per line")
    p.add_argument("--output", type=Path, help="where to write translations")
    p.add_argument("--print-alignment", action="store_true",
                   help="write fairseq's H-/A- lines: 'H-i<TAB>score<TAB>text', then "
                        "'A-i<TAB>src-tgt ...' (0-based subword positions, EOS left out), hard "
                        "alignments from encoder-decoder attention (docs/decoding.md)")
    p.add_argument("--alignment-layer", type=int, metavar="N",
                   help="the decoder layer (0-based) whose heads, averaged, align; default "
                        "the penultimate")
    add_config_options(p, DecodeConfig, "decode")
    p.set_defaults(run=run, overrides=[])


def run(args: argparse.Namespace) -> int:
    overrides = section_overrides(args.overrides, DecodeConfig, "decode") | given(args, "decode")
    translator, model_dirs = open_translator(args, overrides)
    if args.print_alignment:
        translator.align([], [], layer=args.alignment_layer)  # refuses before any work
    log.info("translating with %s (%s)", ", ".join(str(d) for d in model_dirs), args.engine)
    if args.input:
        sentences = read_text(args.input)
    else:
        sentences = [line.rstrip("\n").removesuffix("\r") for line in sys.stdin]
    progress = Progress(total=len(sentences), unit="sentence", enabled=sys.stderr.isatty())
    start = time.perf_counter()
    try:
        results = translator.translate_nbest(sentences, progress=progress.update)
    finally:
        progress.close()
    seconds = time.perf_counter() - start
    log.info("translated %d sentences in %.1f s (%.1f sentences/s)", len(sentences), seconds,
             len(sentences) / max(seconds, 1e-9))
    with_scores = "n_best" in overrides
    alignments = translator.align([translator.encode_source(s, i) for i, s in
                                   enumerate(sentences)], [n[0] for n in results],
                                  layer=args.alignment_layer) if args.print_alignment else None
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for i, nbest in enumerate(results):
            if alignments is not None:
                pairs = " ".join(f"{s}-{t}" for s, t in alignments[i])
                out.write(f"H-{i}\t{nbest[0].score:.4f}\t{nbest[0].text}\nA-{i}\t{pairs}\n")
                continue
            for t in nbest:
                out.write(f"{i}\t{t.score:.4f}\t{t.text}\n" if with_scores else f"{t.text}\n")
    finally:
        if out is not sys.stdout:
            out.close()
    return 0
