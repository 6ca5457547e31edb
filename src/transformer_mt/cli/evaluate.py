"""`transformer-mt evaluate`: sacreBLEU, chrF and tokenized BLEU of a translation file."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from ..storage.files import atomic_write_text


def add_parser(sub) -> None:
    p = sub.add_parser(
        "evaluate", help="sacreBLEU, chrF and tokenized BLEU of a translation file",
        description="Score detokenised hypotheses with sacreBLEU and chrF (signatures printed). "
                    "With --lang, also tokenized BLEU (Moses tokenizer; German compounds split "
                    "as tensor2tensor's get_ende_bleu.sh unless --tok-ref is given). For "
                    "Multi30k's literature protocol: --lang de --lowercase --tok-ref "
                    "test_2016_flickr.lc.norm.tok.de.gz. With --baseline, another "
                    "translation of the same source: is the difference more than the luck of "
                    "this test set? Paired bootstrap resampling (Koehn, 2004; sacrebleu "
                    "--paired-bs) of each BLEU, with 95 % intervals and p-values. "
                    "docs/evaluation.md says which BLEU is which.")
    p.add_argument("--hyp", required=True, type=Path, help="translations, one per line")
    p.add_argument("--ref", required=True, type=Path, help="detokenised reference (.gz ok)")
    p.add_argument("--lang", help="target language: also compute tokenized BLEU")
    p.add_argument("--tok-ref", type=Path, help="an already tokenized reference for tokBLEU")
    p.add_argument("--lowercase", action="store_true",
                   help="tokBLEU: lowercase and normalise punctuation first (Multi30k tok/)")
    p.add_argument("--hyp-tokenized", action="store_true",
                   help="tokBLEU: the hypotheses (and --baseline) are tokenized like --tok-ref "
                        "already, e.g. from a model trained on Multi30k's tok/*.lc.norm.tok "
                        "files: score them as they are (multi-bleu.perl)")
    p.add_argument("--compound-split", action=argparse.BooleanOptionalAction, default=None,
                   help="tokBLEU: split hyphenated compounds (default: on for de without "
                        "--tok-ref)")
    p.add_argument("--baseline", type=Path,
                   help="a baseline's translations of the same source: paired bootstrap test")
    p.add_argument("--bootstrap-samples", type=int, default=1000,
                   help="resamples of the test sentences for --baseline (default: 1000)")
    p.add_argument("--json", type=Path, help="also write the scores as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..evaluation.bleu import evaluate_files  # sacreBLEU: imported by the command alone

    scores = evaluate_files(hyp=args.hyp, ref=args.ref, lang=args.lang, tok_ref=args.tok_ref,
                            lowercase=args.lowercase, compound_split=args.compound_split,
                            hyp_tokenized=args.hyp_tokenized, baseline=args.baseline,
                            bootstrap_samples=args.bootstrap_samples)
    print("\n".join(scores.lines()))
    if args.json:
        atomic_write_text(args.json, json.dumps(dataclasses.asdict(scores), indent=2) + "\n")
    return 0
