"""BLEU and wall time of one model's test translations decoded in fp32, under bf16 autocast
(translate --bf16), with int8 linear layers (translate --int8: one input range per batch, and
--int8-scales row: per row), and with attention keys and values in bf16 (translate --kv-bf16,
in fp32 and with --int8), on this machine; and how many lines change when the same sentences
are decoded in batches of other sizes (--batch-sizes).

    python benchmarks/multi30k/decode_precision.py --model runs/multi30k-en-de/run \\
        --data ../shared/data --pair en-de \\
        --json benchmarks/results/multi30k-en-de-tiny-prenorm/decode_precision.json
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from pathlib import Path

import torch

from transformer_mt.evaluation.bleu import read_text, sacrebleu_scores, tokenized_bleu
from transformer_mt.inference.translator import Translator
from transformer_mt.storage.run_dir import resolve_model_dir

MODES = {"fp32": {}, "bf16_autocast": {"bf16": True}, "int8_dynamic": {"int8": True},
         "int8_row_scales": {"int8": True, "int8_scales": "row"},
         "fp32_kv_bf16": {"kv_bf16": True}, "int8_kv_bf16": {"int8": True, "kv_bf16": True}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="model or run directory")
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--pair", default="en-de")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--batch-sizes", type=int, nargs="*", default=[32, 100],
                        help="decode again at these batch sizes and count the lines that differ "
                             "from batch 64's (default: 32 100; none: skip)")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    args = parser.parse_args()
    src, tgt = args.pair.split("-")
    corpus = args.data / "multi30k"
    sentences = read_text(corpus / f"test_2016_flickr.{src}.gz")
    model_dir = resolve_model_dir(args.model)
    decode = Translator.from_dir(model_dir).decode_cfg  # the model's own settings
    out = {"model": str(model_dir), "test": f"test_2016_flickr {src}->{tgt}, "
           f"{len(sentences):,} sentences, {decode.strategy} {decode.beam_size}, "
           f"alpha {decode.length_penalty}, batch 64",
           "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], text=True,
                                    capture_output=True).stdout.strip(),
           "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, "
                      f"torch {torch.__version__}"}
    refs = read_text(corpus / f"test_2016_flickr.{tgt}.gz")
    tok_refs = read_text(corpus / "tok" / f"test_2016_flickr.lc.norm.tok.{tgt}.gz")
    hyps = {}
    for mode in args.modes:
        overrides = MODES[mode]
        translator = Translator.from_dir(model_dir, batch_size=64, **overrides)
        start = time.perf_counter()
        hyps[mode] = translator.translate(sentences)
        wall = time.perf_counter() - start
        bleu, _, chrf, _ = sacrebleu_scores(hyps[mode], refs)
        tok_bleu, _ = tokenized_bleu(hyps[mode], tok_refs, lang=tgt, lowercase=True,
                                     compound_split=False, refs_tokenized=True)
        out[mode] = {"sacrebleu": bleu, "chrf": chrf, "tok_bleu_lc": tok_bleu,
                     "wall_s": round(wall, 2),
                     "sentences_that_differ_from_fp32":
                         sum(a != b for a, b in zip(hyps[mode], hyps["fp32"], strict=True))
                         if "fp32" in hyps else None}
        for size in args.batch_sizes:
            again = Translator.from_dir(model_dir, batch_size=size, **overrides)
            out[mode][f"lines_that_change_at_batch_{size}"] = sum(
                a != b for a, b in zip(again.translate(sentences), hyps[mode], strict=True))
        print(mode, out[mode], flush=True)
    args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
