"""`transformer-mt` command line: parse, call one package function, format the output."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

from .config import ConfigError, load_config, preset_names
from .evaluate import read_text
from .malloc_tuning import tune_malloc
from .mbr import UTILITIES
from .progress import Progress

log = logging.getLogger("transformer_mt")


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
    from .checkpoint import resolve_model_dir
    from .translator import Translator

    overrides = {k: v for k, v in (("beam_size", args.beam_size), ("n_best", args.n_best),
                                   ("strategy", args.strategy), ("length_penalty", args.alpha),
                                   ("beam_stop", args.beam_stop),
                                   ("batch_size", args.batch_size), ("bf16", args.bf16),
                                   ("int8", args.int8), ("kv_bf16", args.kv_bf16),
                                   ("mbr", args.mbr), ("knn_k", args.knn_k),
                                   ("knn_temperature", args.knn_temperature),
                                   ("knn_lambda", args.knn_lambda), ("knn_probe", args.knn_probe))
                 if v is not None}
    knn_options = [k for k in overrides if k.startswith("knn_")]
    if knn_options and args.datastore is None:
        raise ValueError(f"--{knn_options[0].replace('_', '-')} sets kNN-MT, which needs "
                         "--datastore")
    model_dirs = [resolve_model_dir(m) for m in args.model]
    log.info("translating with %s%s", ", ".join(str(d) for d in model_dirs),
             f" and the datastore {args.datastore}" if args.datastore else "")
    translator = Translator.from_dirs(model_dirs, device=args.device, datastore=args.datastore,
                                      **overrides)
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
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for i, nbest in enumerate(results):
            for t in nbest:
                out.write(f"{i}\t{t.score:.4f}\t{t.text}\n" if args.n_best else f"{t.text}\n")
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def _datastore(args: argparse.Namespace) -> int:
    from .checkpoint import resolve_model_dir
    from .knn import build_datastore

    model_dir = resolve_model_dir(args.model)
    log.info("decoding the %s split of %s with %s", args.split, args.data, model_dir)
    progress = Progress(unit="sentence", enabled=sys.stderr.isatty())
    start = time.perf_counter()
    try:
        store = build_datastore(model_dir, args.data, split=args.split, nlist=args.nlist,
                                progress=progress.update)
    finally:
        progress.close()
    store.save(args.out, corpus=f"{args.data} {args.split}")
    print(f"datastore: {len(store):,} target positions, {store.index.nlist} cells, built in "
          f"{time.perf_counter() - start:.1f} s; written to {args.out} "
          f"(translate --model {model_dir} --datastore {args.out})")
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from .corpora import locate
    from .data import SplitFiles, prepare

    overrides = [f"data.vocab_size={args.vocab_size}"] if args.vocab_size else []
    if args.skip_invalid_utf8:
        overrides.append("data.skip_invalid_utf8=true")
    cfg = load_config(args.config, overrides + list(args.overrides)).data
    if args.dataset:
        files = {f.name: f for f in locate(args.dataset, args.pair, args.data_dir,
                                           download=args.download)}
        if "train" not in files:
            raise ValueError(f"{args.dataset} has no training split (only "
                             f"{', '.join(files)}); use it with translate / evaluate")
        src_lang, tgt_lang = args.pair.split("-")
    else:
        if not (args.train_src and args.train_tgt):
            raise ValueError("give --train-src and --train-tgt, or --dataset")
        files = {"train": SplitFiles("train", args.train_src, args.train_tgt)}
        if args.valid_src or args.valid_tgt:
            files["valid"] = SplitFiles("valid", args.valid_src, args.valid_tgt)
        src_lang, tgt_lang = args.src_lang, args.tgt_lang
    report = prepare(train=files.pop("train"), others=list(files.values()), out_dir=args.out,
                     cfg=cfg, src_lang=src_lang, tgt_lang=tgt_lang)
    for name, split in report["splits"].items():
        dropped = ", ".join(f"{k} {v}" for k, v in split["dropped"].items()) or "none"
        print(f"{name}: {split['kept']:,} pairs kept of {split['read']:,} "
              f"(dropped: {dropped}); {split['src_tokens']:,} / {split['tgt_tokens']:,} tokens")
    print(f"prepared data in {args.out} (report.json, meta.json)")
    return 0


def _train(args: argparse.Namespace) -> int:
    from .train import TrainingDiverged, train

    cfg = load_config(args.config, args.overrides)
    try:
        state = train(cfg, data_dir=args.data, run_dir=args.run_dir,
                      ignore_mismatch=args.ignore_mismatch)
    except TrainingDiverged as err:
        print(f"transformer-mt train: stopped: {err}", file=sys.stderr)
        return 3
    print(f"trained to step {state['step']} (epoch {state['epoch']}, "
          f"{state['train_seconds'] / 60:.1f} min); checkpoints in {args.run_dir}/checkpoints")
    return 0


def _average(args: argparse.Namespace) -> int:
    from .checkpoint import average_checkpoints, checkpoint_dirs

    checkpoints = checkpoint_dirs(args.run_dir)
    if not checkpoints:
        raise ValueError(f"{args.run_dir}: no checkpoints")
    chosen = checkpoints[-args.last:]
    if len(chosen) < args.last:
        log.warning("only %d checkpoints in %s, averaging them all", len(chosen), args.run_dir)
    average_checkpoints(chosen, args.out)
    print(f"averaged {', '.join(p.name for p in chosen)} into {args.out}")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from .evaluate import evaluate_files

    scores = evaluate_files(hyp=args.hyp, ref=args.ref, lang=args.lang, tok_ref=args.tok_ref,
                            lowercase=args.lowercase, compound_split=args.compound_split,
                            hyp_tokenized=args.hyp_tokenized, baseline=args.baseline,
                            bootstrap_samples=args.bootstrap_samples)
    print("\n".join(scores.lines()))
    if args.json:
        args.json.write_text(json.dumps(dataclasses.asdict(scores), indent=2) + "\n",
                             encoding="utf-8")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transformer-mt",
        description="The Transformer of 'Attention Is All You Need'. From two text files to "
                    "a BLEU score: prepare -> train -> average -> translate -> evaluate; "
                    "`transformer-mt COMMAND --help` for each.",
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

    prep = sub.add_parser(
        "prepare", help="clean parallel text, learn the vocabulary, write binary data",
        description="Read parallel files (plain or .gz, strict UTF-8), drop empty, too long and "
                    "over-ratio training pairs (counted in report.json), train a joint "
                    "SentencePiece vocabulary, and write memory-mapped token files to --out. "
                    "Either give the files, or --dataset with --pair and --data-dir.",
    )
    prep.add_argument("--train-src", type=Path)
    prep.add_argument("--train-tgt", type=Path)
    prep.add_argument("--valid-src", type=Path)
    prep.add_argument("--valid-tgt", type=Path)
    prep.add_argument("--src-lang", default="src", help="source language code, for the record")
    prep.add_argument("--tgt-lang", default="tgt", help="target language code, for the record")
    prep.add_argument("--dataset", help="multi30k, multi30k-tok (its lowercased Moses-tokenized "
                      "copy, en/de/fr), tatoeba-deu-eng (wmt14: test sets only)")
    prep.add_argument("--pair", default="en-de", help="SRC-TGT, e.g. en-de (default)")
    prep.add_argument("--data-dir", type=Path, default=Path("data"),
                      help="where the corpus files are, or go with --download (default: data)")
    prep.add_argument("--download", action="store_true",
                      help="download a --dataset missing from --data-dir (checks sha256)")
    prep.add_argument("--vocab-size", type=int, help="SentencePiece pieces (default: 8000)")
    prep.add_argument("--skip-invalid-utf8", action="store_true",
                      help="drop pairs with invalid UTF-8 (counted) instead of stopping")
    prep.add_argument("--config", default="base", help="preset or YAML for the data section")
    prep.add_argument("--out", required=True, type=Path, help="prepared data directory")
    prep.add_argument("overrides", nargs="*", metavar="data.key=value")
    prep.set_defaults(func=_prepare)

    tra = sub.add_parser(
        "train", help="train a model on prepared data; resumes a run that has checkpoints",
        description="Train with Adam(0.9, 0.98, 1e-9), the warmup schedule of §5.3 and label "
                    "smoothing 0.1. Writes config.json, metrics.jsonl, tensorboard/, "
                    "checkpoints/ and curves.png to --run-dir. Override any config key with "
                    "--section.key=value, e.g. --train.max_steps=100.",
    )
    tra.add_argument("--config", default="base",
                     help=f"preset ({', '.join(preset_names())}) or YAML file (default: base)")
    tra.add_argument("--data", required=True, type=Path, help="prepared data directory")
    tra.add_argument("--run-dir", required=True, type=Path, help="where the run is written")
    tra.add_argument("--ignore-mismatch", action="store_true",
                     help="resume even if config, vocabulary or data differ from the checkpoint")
    tra.set_defaults(func=_train, overrides=[])

    avg = sub.add_parser(
        "average", help="average the last N checkpoints into a model directory",
        description="Average the weights of the last N checkpoints of a run (§6.1: 5 for "
                    "base, 20 for big) into a model directory usable by translate.",
    )
    avg.add_argument("--run-dir", required=True, type=Path)
    avg.add_argument("--last", type=int, default=5, help="how many checkpoints (default: 5)")
    avg.add_argument("--out", required=True, type=Path, help="model directory to write")
    avg.set_defaults(func=_average)

    tr = sub.add_parser(
        "translate", help="translate sentences with a model or run directory",
        description="Translate one sentence per line from --input (default stdin) to --output "
                    "(default stdout), in input order. --model is a model directory (e.g. from "
                    "average) or a run directory (its latest checkpoint); several --model "
                    "directories with one vocabulary decode as an ensemble (their next-token "
                    "probabilities averaged).",
    )
    tr.add_argument("--model", required=True, type=Path, nargs="+", action="extend",
                    help="model or run directory; several: an ensemble")
    tr.add_argument("--input", type=Path, help="source file, one sentence per line")
    tr.add_argument("--output", type=Path, help="where to write translations")
    tr.add_argument("--beam-size", type=int, help="beam size (model default: 4)")
    tr.add_argument("--n-best", type=int,
                    help="print N hypotheses per sentence as 'index<TAB>score<TAB>text'")
    tr.add_argument("--strategy", choices=["beam", "greedy", "sample"])
    tr.add_argument("--alpha", type=float, help="length penalty alpha (model default: 0.6)")
    tr.add_argument("--beam-stop", choices=["n_finished", "bound"],
                    help="when a sentence's beam search ends: once --beam-size hypotheses have "
                         "finished (n_finished, as fairseq; the default), or only when no live "
                         "hypothesis can still outscore them under the length penalty (bound, "
                         "as tensor2tensor, the paper's code: longer outputs can win; slower)")
    tr.add_argument("--batch-size", type=int, help="sentences per batch (default: 64)")
    tr.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    tr.add_argument("--bf16", action="store_true", default=None,
                    help="decode under bfloat16 autocast (faster on CPUs with bf16 units; "
                         "benchmarks/results/speed gives its BLEU change)")
    tr.add_argument("--int8", action="store_true", default=None,
                    help="CPU only: int8 linear layers with dynamically quantised activations "
                         "(faster beam search; its BLEU change: benchmarks/results/multi30k-en-de*/"
                         "decode_precision.json). One quantisation range per batch: a "
                         "sentence's translation may change with the sentences batched with it")
    tr.add_argument("--kv-bf16", action="store_true", default=None,
                    help="keep attention keys and values in bfloat16 (with --int8 or in fp32): "
                         "beam search moves half the bytes; its BLEU change is in the same "
                         "decode_precision.json")
    tr.add_argument("--mbr", choices=["none", *UTILITIES],
                    help="not in the paper: return, of the beam's --beam-size finished "
                         "hypotheses, the one with the highest expected sentence BLEU or chrF "
                         "against the others, weighted by their model scores (minimum Bayes "
                         "risk; n-best lists are then ordered by it). Default: none")
    tr.add_argument("--datastore", type=Path,
                    help="not in the paper: decode with kNN-MT (Khandelwal et al., 2021), the "
                         "model's distribution mixed with the tokens that followed the nearest "
                         "decoder states of a corpus; a directory written by `datastore` for "
                         "this model")
    tr.add_argument("--knn-k", type=int, help="with --datastore: neighbours per step "
                                              "(default: 16)")
    tr.add_argument("--knn-temperature", type=float,
                    help="with --datastore: neighbours weigh softmax(-squared distance / this) "
                         "(default: 10)")
    tr.add_argument("--knn-lambda", type=float,
                    help="with --datastore: weight of the neighbours' distribution, in [0, 1) "
                         "(default: 0.25)")
    tr.add_argument("--knn-probe", type=int,
                    help="with --datastore: index cells searched per step; the datastore's "
                         "cell count searches all keys, exactly (default: 32)")
    tr.set_defaults(func=_translate)


    ev = sub.add_parser(
        "evaluate", help="sacreBLEU, chrF and tokenized BLEU of a translation file",
        description="Score detokenised hypotheses with sacreBLEU and chrF (signatures printed). "
                    "With --lang, also tokenized BLEU (Moses tokenizer; German compounds split "
                    "as tensor2tensor's get_ende_bleu.sh unless --tok-ref is given). For "
                    "Multi30k's literature protocol: --lang de --lowercase --tok-ref "
                    "test_2016_flickr.lc.norm.tok.de.gz. With --baseline, another "
                    "translation of the same source: is the difference more than the luck of "
                    "this test set? Paired bootstrap resampling (Koehn, 2004; sacrebleu "
                    "--paired-bs) of each BLEU, with 95 % intervals and p-values.",
    )
    ev.add_argument("--hyp", required=True, type=Path, help="translations, one per line")
    ev.add_argument("--ref", required=True, type=Path, help="detokenised reference (.gz ok)")
    ev.add_argument("--lang", help="target language: also compute tokenized BLEU")
    ev.add_argument("--tok-ref", type=Path, help="an already tokenized reference for tokBLEU")
    ev.add_argument("--lowercase", action="store_true",
                    help="tokBLEU: lowercase and normalise punctuation first (Multi30k tok/)")
    ev.add_argument("--hyp-tokenized", action="store_true",
                    help="tokBLEU: the hypotheses (and --baseline) are tokenized like --tok-ref "
                         "already, e.g. from a model trained on Multi30k's tok/*.lc.norm.tok "
                         "files: score them as they are (multi-bleu.perl)")
    ev.add_argument("--compound-split", action=argparse.BooleanOptionalAction, default=None,
                    help="tokBLEU: split hyphenated compounds (default: on for de without "
                         "--tok-ref)")
    ev.add_argument("--baseline", type=Path,
                    help="a baseline's translations of the same source: paired bootstrap test")
    ev.add_argument("--bootstrap-samples", type=int, default=1000,
                    help="resamples of the test sentences for --baseline (default: 1000)")
    ev.add_argument("--json", type=Path, help="also write the scores as JSON")
    ev.set_defaults(func=_evaluate)

    ds = sub.add_parser(
        "datastore", help="build a kNN-MT datastore of a model over prepared data",
        description="Not in the paper: decode a split of a prepared data directory with a "
                    "model by teacher forcing and store, for every target position, the "
                    "decoder's output state and the token that followed (kNN-MT, Khandelwal et "
                    "al., 2021), indexed with faiss. `translate --datastore` then mixes the "
                    "tokens of the nearest stored states into the model's distribution. The "
                    "datastore belongs to that model's weights.",
    )
    ds.add_argument("--model", required=True, type=Path, help="model or run directory")
    ds.add_argument("--data", required=True, type=Path, help="prepared data directory")
    ds.add_argument("--split", default="train", help="which split (default: train)")
    ds.add_argument("--out", required=True, type=Path, help="datastore directory to write")
    ds.add_argument("--nlist", type=int,
                    help="k-means cells of the index (default: about 4 sqrt(entries))")
    ds.set_defaults(func=_datastore)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    # `train --train.max_steps=100` style overrides: dotted options after the known ones
    dotted = [u for u in unknown if u.startswith("--") and "." in u.split("=")[0]]
    if len(dotted) != len(unknown) or (dotted and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if dotted:
        args.overrides = [*args.overrides, *(d.removeprefix("--") for d in dotted)]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    tune_malloc()
    try:
        return args.func(args)
    except (ConfigError, ValueError, OSError) as err:
        print(f"transformer-mt {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
