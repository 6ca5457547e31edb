"""`transformer-mt prepare`: parallel text to a prepared data directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import DataConfig, load_config
from ..data.corpora import CORPORA, locate
from ..data.prepare import SplitFiles, language_of, prepare
from ..data.wmt14 import archives
from .options import add_config_options, add_overrides, as_overrides, given, overrides_given


def add_parser(sub) -> None:
    p = sub.add_parser(
        "prepare", help="clean parallel text, learn the vocabulary, write binary data",
        description="Read parallel files (plain or .gz, strict UTF-8), drop empty, too long and "
                    "over-ratio training pairs (counted in report.json), train a joint "
                    "SentencePiece vocabulary, and write memory-mapped token files to --out. "
                    "Either give the files, or --dataset with --pair and --data-dir. Each data "
                    "option below can also be given as --data.key=value.")
    p.add_argument("--train-src", type=Path, metavar="FILE",
                   help="your own training source text, one sentence per line (plain or .gz; "
                        "instead of --dataset)")
    p.add_argument("--train-tgt", type=Path, metavar="FILE",
                   help="its target text: line i is the translation of --train-src's line i")
    p.add_argument("--valid-src", type=Path, metavar="FILE",
                   help="validation source text (train reports its loss and BLEU on it)")
    p.add_argument("--valid-tgt", type=Path, metavar="FILE",
                   help="validation target text, line for line with --valid-src")
    p.add_argument("--src-lang", metavar="CODE",
                   help="source language code (en, pt-BR, ...), recorded with the model for the "
                        "server's LibreTranslate endpoint (default: --train-src's file "
                        "suffix, as in train.en, where it is one)")
    p.add_argument("--tgt-lang", metavar="CODE",
                   help="target language code (default: --train-tgt's file suffix, as in "
                        "train.de, where it is one)")
    p.add_argument("--dataset",
                   help=f"a known corpus ({', '.join(sorted(CORPORA))}; multi30k-tok is "
                        "Multi30k's lowercased Moses-tokenized copy, en/de/fr; wmt14: the "
                        "paper's training corpora, newstest2013 as valid and 2014 as test)")
    p.add_argument("--pair", default="en-de", help="SRC-TGT, e.g. en-de (default)")
    p.add_argument("--data-dir", type=Path, default=Path("data"),
                   help="where the corpus files are, or go with --download (default: data)")
    p.add_argument("--download", action="store_true",
                   help="download a --dataset missing from --data-dir (checks sha256)")
    p.add_argument("--config", default="base", help="preset or YAML for the data section")
    p.add_argument("--out", required=True, type=Path, help="prepared data directory")
    p.add_argument("--vocabulary", type=Path, metavar="MODEL_DIR",
                   help="encode with this model's vocabulary (and its special ids) instead of "
                        "learning one: to fine-tune it with train --init-from MODEL_DIR")
    add_overrides(p)
    add_config_options(p, DataConfig, "data")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    overrides = as_overrides(given(args, "data"), "data") + overrides_given(args)
    cfg = load_config(args.config, overrides).data
    if args.dataset:
        files = {f.name: f for f in locate(args.dataset, args.pair, args.data_dir,
                                           download=args.download)}
        if "train" not in files:
            hint = "use it with translate / evaluate"
            if args.dataset == "wmt14":
                hint = (f"its training archives ({', '.join(a.name for a in archives(args.pair))}"
                        f") are not in {files['test'].src.parent}: pass --download, or put "
                        "them there (docs/wmt14.md)")
            raise ValueError(f"{args.dataset} {args.pair} has no training split (only "
                             f"{', '.join(files)}): {hint}")
        src_lang, tgt_lang = args.pair.split("-")
    else:
        if not (args.train_src and args.train_tgt):
            raise ValueError("give --train-src and --train-tgt, or --dataset")
        files = {"train": SplitFiles("train", args.train_src, args.train_tgt)}
        if args.valid_src or args.valid_tgt:
            files["valid"] = SplitFiles("valid", args.valid_src, args.valid_tgt)
        src_lang = args.src_lang or language_of(args.train_src)
        tgt_lang = args.tgt_lang or language_of(args.train_tgt)
        if not (src_lang and tgt_lang):
            print("languages: not known (the file names end in no language code, as train.en "
                  "would): give --src-lang and --tgt-lang to record them; the server's "
                  "LibreTranslate endpoint needs them")
    vocabulary = None
    if args.vocabulary:
        from ..storage.model_dir import load_config_json  # torch: only here
        from ..storage.names import CONFIG_FILE

        model_cfg, _ = load_config_json(args.vocabulary / CONFIG_FILE)
        vocabulary = (args.vocabulary, {"pad": model_cfg.pad_id, "bos": model_cfg.bos_id,
                                        "eos": model_cfg.eos_id})
    report = prepare(train=files.pop("train"), others=list(files.values()), out_dir=args.out,
                     cfg=cfg, src_lang=src_lang, tgt_lang=tgt_lang, vocabulary=vocabulary)
    for name, split in report["splits"].items():
        dropped = ", ".join(f"{k} {v}" for k, v in split["dropped"].items()) or "none"
        print(f"{name}: {split['kept']:,} pairs kept of {split['read']:,} "
              f"(dropped: {dropped}); {split['src_tokens']:,} source / "
              f"{split['tgt_tokens']:,} target tokens")
    print(f"prepared data in {args.out} (report.json, meta.json)")
    return 0
