"""`transformer-mt parse`: English constituency parsing as sequence transduction (§6.3):
Treebank trees to training pairs, sentences to trees, trees scored as EVALB scores them."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from ..config import DecodeConfig
from ..data.text import read_text
from ..research.evalb import evalb_params, score_files, summary
from ..research.trees import (
    DEFAULT_SLOTS,
    SLOTS,
    TreeError,
    is_bracket,
    parsing_pair,
    restore,
)
from ..storage.files import atomic_dir, atomic_write_text
from .options import (
    add_config_options,
    add_model_options,
    given,
    open_translator,
    section_overrides,
)

SPLITS = {"train": "train", "valid": "dev", "test": "test"}  # ours: the Treebank sample's
SYMBOLS_FILE = "symbols.txt"


def add_parser(sub) -> None:
    p = sub.add_parser("parse", help="constituency parsing (§6.3): corpus, trees, score",
                       description="Parsing as translation from words to linearised trees "
                                   "(Vinyals et al. 2015). `corpus` writes training pairs "
                                   "from Treebank trees (then `prepare` and `train`, e.g. "
                                   "--config parsing-cpu), `trees` parses sentences with a "
                                   "model, `score` scores trees as EVALB does. docs/parsing.md.")
    commands = p.add_subparsers(dest="parse_command", required=True)
    c = commands.add_parser("corpus", help="Treebank trees -> words and linearised trees")
    c.add_argument("--trees-dir", required=True, type=Path,
                   help="train.trees, dev.trees, test.trees: one bracketed tree per line "
                        "(../shared/data/ptb-sample)")
    c.add_argument("--out", required=True, type=Path,
                   help="directory to write SPLIT.words, SPLIT.tree, SPLIT.gold and the "
                        "targets' symbols into")
    c.add_argument("--slots", choices=SLOTS, default=DEFAULT_SLOTS,
                   help="what stands for a word in the target: its POS tag (the default, as "
                        "the paper's code wrote its trees), the placeholder XX (Vinyals et al. "
                        "2015) or (not in the paper) the word itself, copied from the source; "
                        "parse with `trees` given the same")
    c.add_argument("--reverse", action="store_true",
                   help="also write SPLIT.reversed, the words last to first, as the model's "
                        "source (Vinyals et al. 2015); parse with `trees --reverse`")
    c.set_defaults(run=run_corpus)
    t = commands.add_parser("trees", help="parse sentences (one per line, tokenised as the "
                                          "Treebank) into bracketed trees")
    add_model_options(t)
    t.add_argument("--input", required=True, type=Path,
                   help="sentences, one per line, words separated by spaces")
    t.add_argument("--output", required=True, type=Path,
                   help="where to write one bracketed tree per input line")
    t.add_argument("--reverse", action="store_true",
                   help="the model reads words last to first (trained on `corpus --reverse`'s "
                        "SPLIT.reversed); --input stays in reading order")
    t.add_argument("--slots", choices=SLOTS, default=DEFAULT_SLOTS,
                   help="as the model's corpus was written (`corpus --slots`); with words, "
                        "the copied words are read as slots (tagged XX) and a miscopied one is "
                        "counted as a repair")
    t.add_argument("--word-slots", action="store_true",
                   help="not in the paper: the search writes exactly one word slot (XX or a "
                        "tag) per word of the sentence, no more and no fewer, instead of "
                        "leaving the count to the repairs; exact with a vocabulary that keeps "
                        "each bracket whole (prepare --whole-words)")
    t.add_argument("--balanced", action="store_true",
                   help="not in the paper: the search closes a constituent only where one is "
                        "open and not empty, and ends only once every one is closed (the "
                        "repairs then mend closing labels and extra roots only); with a "
                        "vocabulary that keeps each bracket whole")
    add_config_options(t, DecodeConfig, "decode")
    t.set_defaults(run=run_trees, overrides=[])
    s = commands.add_parser("score", help="EVALB's bracket scores of test trees against gold")
    s.add_argument("--gold", required=True, type=Path,
                   help="the gold trees, one bracketed tree per line (parse corpus's SPLIT.gold)")
    s.add_argument("--test", required=True, type=Path,
                   help="the parses to score, one per line in the gold file's order "
                        "(parse trees' --output)")
    s.add_argument("--prm", default="collins",
                   help="EVALB's parameters: collins (COLLINS.prm, the default), nk (nk.prm) "
                        "or a .prm file")
    s.add_argument("--json", type=Path, help="also write the scores as JSON")
    s.set_defaults(run=run_score)


def run_corpus(args: argparse.Namespace) -> int:
    splits = {}
    for ours, theirs in SPLITS.items():  # every tree is read and checked before any is written
        path = args.trees_dir / f"{theirs}.trees"
        pairs = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                pairs.append(parsing_pair(line, slots=args.slots))
            except TreeError as err:
                raise ValueError(f"{path}:{number}: {err}") from None
        splits[ours] = (path, pairs)
    # the targets' brackets, labels and tags (not words), for prepare --whole-words: one
    # piece each
    symbols = sorted({token for _, tree, _ in splits["train"][1] for token in tree.split()
                      if args.slots != "words" or is_bracket(token)})
    with atomic_dir(args.out) as tmp:
        for ours, (path, pairs) in splits.items():
            files = {"words": [p[0] for p in pairs], "tree": [p[1] for p in pairs],
                     "gold": [str(p[2]) for p in pairs]}
            if args.reverse:
                files["reversed"] = [" ".join(reversed(p[0].split())) for p in pairs]
            for suffix, lines in files.items():
                (tmp / f"{ours}.{suffix}").write_text("\n".join(lines) + "\n",
                                                     encoding="utf-8")
            print(f"{ours}: {len(pairs)} trees from {path}")
        (tmp / SYMBOLS_FILE).write_text("\n".join(symbols) + "\n", encoding="utf-8")
    source = "reversed" if args.reverse else "words"
    print(f"wrote {args.out}/{{train,valid,test}}.{{{','.join(files)}}} and {SYMBOLS_FILE}; "
          f"next: transformer-mt prepare --train-src {args.out}/train.{source} --train-tgt "
          f"{args.out}/train.tree --whole-words {args.out}/{SYMBOLS_FILE} ...")
    return 0


def run_trees(args: argparse.Namespace) -> int:
    overrides = section_overrides(args.overrides, DecodeConfig, "decode") | given(args, "decode")
    translator, _ = open_translator(args, overrides)
    if args.word_slots or args.balanced:
        from ..research.tree_search import tree_constraints  # here: `--help` needs no torch

        translator.logits_processor = tree_constraints(
            translator.vocab, slots=args.word_slots, balanced=args.balanced)
    sentences = read_text(args.input)
    outputs = translator.translate([" ".join(reversed(s.split())) for s in sentences]
                                   if args.reverse else sentences)
    repairs: Counter[str] = Counter()
    repaired = fitting = 0
    lines = []
    for sentence, output in zip(sentences, outputs, strict=True):
        restored = restore(output.split(), sentence.split(), slots=args.slots)
        repaired += bool(restored.repairs)
        fitting += restored.one_slot_per_word
        repairs.update(r.split(":")[0] for r in restored.repairs)
        lines.append(str(restored.tree))
    atomic_write_text(args.output, "\n".join(lines) + "\n")
    print(f"{len(lines)} trees to {args.output}; {repaired} needed repair"
          + (f" ({', '.join(f'{k} {n}' for k, n in sorted(repairs.items()))})" if repairs
             else "") + f"; {fitting} had one word slot per word", file=sys.stderr)
    return 0


def run_score(args: argparse.Namespace) -> int:
    params = evalb_params(args.prm)
    scores = score_files(args.gold, args.test, params)
    found = {"all": summary(scores), f"len<={params.cutoff_len}":
             summary(scores, cutoff=params.cutoff_len), "strict": summary(scores, strict=True)}
    for name, figures in found.items():
        print(f"-- {name} --")
        for key, value in figures.items():
            print(f"{key:22s} {value:8.2f}" if isinstance(value, float) else
                  f"{key:22s} {value:8d}")
    if args.json:
        atomic_write_text(args.json, json.dumps(found, indent=1) + "\n")
    return 0
