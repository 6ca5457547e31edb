"""`transformer-mt translate`: one sentence per line in, its translation per line out."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from itertools import islice
from pathlib import Path

from ..config import DecodeConfig
from ..data.text import iter_lines
from ..inference.alignment import (
    DEFAULT_LAYER_FROM_TOP,
    QUERIES,
    AlignmentChoice,
    format_hard,
    format_soft,
    hard_alignment,
    word_pairs,
)
from ..storage.files import atomic_output
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
    p.add_argument("--output", type=Path,
                   help="where to write translations (default stdout); written to a temporary "
                        "file beside it and renamed when complete, so a failure leaves an "
                        "existing file as it was")
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
    p.add_argument("--too-long", choices=("error", "truncate", "skip"), default="error",
                   help="a sentence longer than the model takes: error (the default) stops "
                        "and names its line; truncate cuts it to fit; skip writes an empty "
                        "line for it (n-best and alignment output: no line); both warn with a "
                        "count")
    p.add_argument("--chunk", type=int, default=10_000, metavar="N",
                   help="sentences read, translated and written at a time (default 10000): "
                        "memory stays bounded on a file of any size and output appears as it "
                        "goes, in input order")
    add_config_options(p, DecodeConfig, "decode")
    p.set_defaults(run=run, overrides=[])


def heads(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(h) for h in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated head numbers, e.g. 0,2"
                                         ) from None


def run(args: argparse.Namespace) -> int:
    from ..inference.translator import best_text  # here: `--help` needs no torch

    overrides = section_overrides(args.overrides, DecodeConfig, "decode") | given(args, "decode")
    if args.chunk < 1:
        raise ValueError(f"--chunk must be at least 1, got {args.chunk}")
    translator, model_dirs = open_translator(args, overrides)
    choice = AlignmentChoice(args.alignment_layer, args.alignment_heads, args.alignment_query)
    if args.print_alignment:
        translator.alignment_choice(choice)  # refuses before any work
        if args.alignment_words and args.print_alignment == "soft":
            raise ValueError("--alignment-words: word alignments are hard ones")
    log.info("translating with %s (%s)", ", ".join(str(d) for d in model_dirs), args.engine)
    with_scores = "n_best" in overrides
    progress = Progress(unit="sentence", enabled=sys.stderr.isatty())
    done, too_long, start = 0, 0, time.perf_counter()
    lines = iter_lines(args.input)
    with atomic_output(args.output) as out, contextlib.closing(progress):
        for sentences in iter(lambda: list(islice(lines, args.chunk)), []):
            sources, cut = encode(translator, sentences, done, args.too_long)
            too_long += cut
            kept = [i for i, ids in enumerate(sources) if ids is not None]
            found = translator.translate_ids(
                [sources[i] for i in kept], translator.decode_cfg,
                progress=lambda n, first=done: progress.update(first + n))
            # a skipped sentence, an empty or a blank one: no n-best, an empty line
            results: list[list] = [[] for _ in sentences]
            for i, nbest in zip(kept, found, strict=True):
                results[i] = nbest
            if args.print_alignment:
                aligned = [i for i, nbest in enumerate(results) if nbest]
                weights = dict(zip(aligned, translator.alignments(
                    [sources[i] for i in aligned], [results[i][0] for i in aligned], choice),
                    strict=True))
            for i, nbest in enumerate(results):
                n = done + i
                if args.print_alignment and nbest:
                    line = alignment_line(args, translator, sources[i], nbest[0], weights[i])
                    out.write(f"H-{n}\t{nbest[0].score:.4f}\t{nbest[0].text}\nA-{n}\t{line}\n")
                elif args.print_alignment or with_scores:
                    out.writelines(f"{n}\t{t.score:.4f}\t{t.text}\n" for t in nbest)
                else:
                    out.write(f"{best_text(nbest)}\n")
            out.flush()
            done += len(sentences)
            seconds = time.perf_counter() - start
            log.info("translated %d sentences in %.1f s (%.1f sentences/s)", done, seconds,
                     done / max(seconds, 1e-9))
    if too_long:
        what = "cut to the model's length" if args.too_long == "truncate" else \
            "skipped (an empty line each)"
        log.warning("%d of %d sentences were longer than the model takes: %s", too_long, done,
                    what)
    return 0


def encode(translator, sentences: list[str], first: int, too_long: str
           ) -> tuple[list[list[int] | None], int]:
    """Each sentence's ids (None: skipped) and how many were too long for the model; with
    --too-long error the first such sentence stops everything, named by its line."""
    from ..inference.translator import SourceTooLong

    sources, cut = [], 0
    for i, sentence in enumerate(sentences):
        try:
            sources.append(translator.encode_source(sentence, first + i))
        except SourceTooLong as err:
            if too_long == "error":
                raise
            cut += 1
            sources.append(err.truncated if too_long == "truncate" else None)
    return sources, cut


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
