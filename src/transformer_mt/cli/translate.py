"""`transformer-mt translate`: one sentence per line in, its translation per line out."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from ..config import DecodeConfig
from ..evaluation.bleu import read_text
from ..inference.alignment import (
    DEFAULT_LAYER_FROM_TOP,
    QUERIES,
    AlignmentChoice,
    format_hard,
    format_soft,
    hard_alignment,
    word_pairs,
)
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
    p.add_argument("--print-alignment", nargs="?", const="hard", choices=("hard", "soft"),
                   help="write fairseq's H-/A- lines: 'H-i<TAB>score<TAB>text', then "
                        "'A-i<TAB>...' from encoder-decoder attention, EOS left out: hard "
                        "(the default) 'src-tgt' pairs of 0-based subword positions, soft each "
                        "output token's weights over the source tokens (docs/attention.md)")
    p.add_argument("--alignment-layer", type=int, metavar="N",
                   help="the decoder layer (0-based) that aligns; default N - "
                        f"{DEFAULT_LAYER_FROM_TOP} of an N-layer decoder, the one measured "
                        "best (docs/attention.md)")
    p.add_argument("--alignment-heads", type=heads, metavar="H,H",
                   help="the heads averaged, 0-based (default: all)")
    p.add_argument("--alignment-query", choices=QUERIES, default="predicting",
                   help="read output token j's weights at the position that predicts it "
                        "(default) or at the one it is input to (shift-att)")
    p.add_argument("--alignment-words", action="store_true",
                   help="hard alignments between whitespace words instead of subwords")
    add_config_options(p, DecodeConfig, "decode")
    p.set_defaults(run=run, overrides=[])


def heads(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(h) for h in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated head numbers, e.g. 0,2"
                                         ) from None


def run(args: argparse.Namespace) -> int:
    overrides = section_overrides(args.overrides, DecodeConfig, "decode") | given(args, "decode")
    translator, model_dirs = open_translator(args, overrides)
    choice = AlignmentChoice(args.alignment_layer, args.alignment_heads, args.alignment_query)
    if args.print_alignment:
        translator.alignment_choice(choice)  # refuses before any work
        if args.alignment_words and args.print_alignment == "soft":
            raise ValueError("--alignment-words: word alignments are hard ones")
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
    if args.print_alignment:
        sources = [translator.encode_source(s, i) for i, s in enumerate(sentences)]
        weights = translator.alignments(sources, [n[0] for n in results], choice)
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for i, nbest in enumerate(results):
            if args.print_alignment:
                line = alignment_line(args, translator, sources[i], nbest[0], weights[i])
                out.write(f"H-{i}\t{nbest[0].score:.4f}\t{nbest[0].text}\nA-{i}\t{line}\n")
                continue
            for t in nbest:
                out.write(f"{i}\t{t.score:.4f}\t{t.text}\n" if with_scores else f"{t.text}\n")
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def alignment_line(args: argparse.Namespace, translator, source: list[int], best,
                   weights_TS) -> str:
    """What follows 'A-i<TAB>' for one sentence."""
    if args.print_alignment == "soft":
        return format_soft(weights_TS)
    pairs = hard_alignment(weights_TS)
    if args.alignment_words:
        vocab = translator.vocab
        pairs = word_pairs(pairs, [vocab.piece(i) for i in source[:-1]],
                           [vocab.piece(i, "target") for i in best.tokens])
    return format_hard(pairs)
