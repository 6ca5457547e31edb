"""Aggregate run.sh's raw JSONL (one line per process) into results.json and a markdown table:
medians and min-max over the runs, and our ratios to the peers.

    python benchmarks/speed/report.py benchmarks/results/archive/speed
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import torch
from engines import cpu_model

TRAIN_METRICS = ("tokens_per_s", "fraction_of_matmul_peak", "peak_rss_mib",
                 "page_faults_per_step")
DECODE_METRICS = ("greedy_sentences_per_s", "beam4_sentences_per_s", "beam4_latency_ms")


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] \
        if path.exists() else []


def aggregate(rows: list[dict], metrics: tuple[str, ...]) -> dict:
    groups = defaultdict(list)
    for row in rows:  # run.sh's malloc controls get rows of their own
        ours, malloc = row["engine"] == "transformer-mt", row.get("malloc")
        engine = row["engine"] + (" +malloc" if not ours and malloc == "tuned" else
                                  " -malloc" if ours and malloc == "default" else "")
        groups[(row["shape"], engine, row["dtype"])].append(row)
    out = {}
    for (shape, engine, dtype), runs in sorted(groups.items()):
        entry = {"runs": len(runs)}
        for metric in metrics:
            values = [r[metric] for r in runs if metric in r]
            if values:
                entry[metric] = {"median": statistics.median(values), "min": min(values),
                                 "max": max(values)}
        out[f"{shape}/{engine}/{dtype}"] = entry
    return out


def median(results: dict, key: str, metric: str) -> float | None:
    entry = results.get(key, {}).get(metric)
    return entry["median"] if entry else None


HF, TORCH, FAIRSEQ = "hf-marian", "torch.nn.Transformer", "fairseq"
# CTranslate2 as shipped (no suffix: MKL on Intel CPUs, oneDNN elsewhere) and with each backend
# forced by run.sh (CT2_USE_MKL=1 / 0); its best is whichever is fastest in the run
CT2 = [f"ctranslate2-{kind}{backend}/{dtype}" for kind, dtype in (("float32", "fp32"),
                                                                   ("int8", "int8"))
       for backend in ("", " mkl", " onednn")]
OURS_FP32, OURS_BF16 = "transformer-mt/fp32", "transformer-mt/bf16"
LOWER_IS_BETTER = {"beam4_latency_ms", "peak_rss_mib"}
# name, table, ours, peers (the best of them), metric, target of issue 44; every ratio is how
# many times better ours is than the best peer (peer / ours where lower is better)
RATIOS = [
    ("train_fp32_vs_fastest_peer_fp32", "train", OURS_FP32,
     [f"{HF}/fp32", f"{TORCH}/fp32", f"{FAIRSEQ}/fp32"], "tokens_per_s", ">= 1.2"),
    ("train_bf16_vs_fastest_peer_fp32", "train", OURS_BF16,
     [f"{HF}/fp32", f"{TORCH}/fp32", f"{FAIRSEQ}/fp32"], "tokens_per_s", ">= 3"),
    ("train_bf16_vs_fastest_peer_bf16", "train", OURS_BF16,
     [f"{HF}/bf16", f"{TORCH}/bf16", f"{FAIRSEQ}/bf16"], "tokens_per_s", ">= 1.3"),
    ("peak_rss_hf_fp32_over_ours", "train", OURS_FP32, [f"{HF}/fp32"], "peak_rss_mib",
     ">= 1.0"),
    ("train_fp32_vs_fastest_peer_fp32_same_malloc", "train", OURS_FP32,
     [f"{HF} +malloc/fp32", f"{TORCH} +malloc/fp32"], "tokens_per_s", "control"),
    ("train_bf16_vs_fastest_peer_bf16_same_malloc", "train", OURS_BF16,
     [f"{HF} +malloc/bf16", f"{TORCH} +malloc/bf16"], "tokens_per_s", "control"),
    ("train_fp32_malloc_tuned_vs_default", "train", OURS_FP32, ["transformer-mt -malloc/fp32"],
     "tokens_per_s", "control"),
    ("train_bf16_malloc_tuned_vs_default", "train", OURS_BF16, ["transformer-mt -malloc/bf16"],
     "tokens_per_s", "control"),
]
# each of our decoding precisions (--bf16, --bf16 auto, --int8, --int8 --int8-scales row,
# --int8 --kv-bf16) against CTranslate2's best engine and Hugging Face's best `generate`; "best":
# the fastest of them all, each of whose Multi30k test BLEU is within 0.2 of float32's and none
# lower by more than 0.03 (benchmarks/results/decode-precision-multi30k-zen4)
OURS_BEST = [f"transformer-mt/{dtype}"
             for dtype in ("fp32", "bf16", "auto", "int8", "int8row", "int8+kv")]
RATIOS += [(f"{label}_{name}", "decode", ours, peers, metric, target)
           for label, ours in (("fp32", OURS_FP32), ("bf16", OURS_BF16),
                               ("auto", "transformer-mt/auto"), ("int8", "transformer-mt/int8"),
                               ("int8row", "transformer-mt/int8row"),
                               ("int8kv", "transformer-mt/int8+kv"), ("best", OURS_BEST))
           for name, peers, metric, target in (
               ("beam4_vs_best_ctranslate2", CT2, "beam4_sentences_per_s", ">= 1.2"),
               ("greedy_vs_best_ctranslate2", CT2, "greedy_sentences_per_s", ">= 1.2"),
               ("latency_vs_best_ctranslate2", CT2, "beam4_latency_ms", ">= 1.2"),
               ("beam4_vs_best_hf_generate", [f"{HF}/fp32", f"{HF}/bf16"],
                "beam4_sentences_per_s", "control"))]


def ratios(tables: dict[str, dict], shapes: list[str]) -> dict:
    """How many times better ours (the best of several where a list) is than the best peer, per
    target of issue 44 (None where not measured)."""
    out = {}
    for shape in shapes:
        out[shape] = {}
        for name, table, ours, peers, metric, _ in RATIOS:
            mine, theirs = ([v for key in keys if (v := median(tables[table], f"{shape}/{key}",
                                                                metric))]
                            for keys in ([ours] if isinstance(ours, str) else ours, peers))
            if not (mine and theirs):
                out[shape][name] = None
            elif metric in LOWER_IS_BETTER:
                out[shape][name] = round(min(theirs) / min(mine), 3)
            else:
                out[shape][name] = round(max(mine) / max(theirs), 3)
    return out


def fmt(entry: dict | None, digits: int = 0) -> str:
    if not entry:
        return "—"
    m, lo, hi = entry["median"], entry["min"], entry["max"]
    return f"{m:,.{digits}f} ({lo:,.{digits}f}-{hi:,.{digits}f})"


def markdown(meta: dict, train: dict, decode: dict, rat: dict) -> str:
    lines = [f"# Speed, side by side ({meta['cpu']}, {meta['threads']} threads)", "",
             f"torch {meta['torch']}, transformers {meta['transformers']}, ctranslate2 "
             f"{meta['ctranslate2']}, commit {meta['commit']}. Medians (min-max) over "
             "separate processes. Random weights, 8k vocabulary, real Multi30k batches.", "",
             "## Training (4,096-token batches, full steps: forward, backward, Adam)", "",
             "| shape | engine | dtype | runs | target tok/s | of matmul peak | peak RSS MiB "
             "| page faults / step |",
             "|---|---|---|---|---|---|---|---|"]
    for key, e in train.items():
        shape, engine, dtype = key.split("/")
        peak = e.get("fraction_of_matmul_peak")
        peak_s = f"{100 * peak['median']:.0f} %" if peak else "—"
        lines.append(f"| {shape} | {engine} | {dtype} | {e['runs']} | "
                     f"{fmt(e.get('tokens_per_s'))} | {peak_s} | {fmt(e.get('peak_rss_mib'))} | "
                     f"{fmt(e.get('page_faults_per_step'))} |")
    lines += ["", "## Decoding (1,014 val sentences, batch 64 sorted by length, 30 output tokens "
              "each; latency: one sentence, beam 4)", "",
              "| shape | engine | dtype | runs | greedy sent/s | beam-4 sent/s "
              "| beam-4 latency ms |",
              "|---|---|---|---|---|---|---|"]
    for key, e in decode.items():
        shape, engine, dtype = key.split("/")
        lines.append(f"| {shape} | {engine} | {dtype} | {e['runs']} | "
                     f"{fmt(e.get('greedy_sentences_per_s'), 1)} | "
                     f"{fmt(e.get('beam4_sentences_per_s'), 1)} | "
                     f"{fmt(e.get('beam4_latency_ms'), 1)} |")
    lines += ["", "## Ratios (times better than the best peer; targets in brackets)", "",
              "| shape | ratio | value |", "|---|---|---|"]
    targets = {name: target for name, *_, target in RATIOS}
    for shape, values in rat.items():
        for name, value in values.items():
            lines.append(f"| {shape} | {name} [{targets[name]}] | {value} |")
    return "\n".join(lines) + "\n"


def main(out: Path) -> None:
    train = aggregate(load(out / "raw" / "train.jsonl"), TRAIN_METRICS)
    decode = aggregate(load(out / "raw" / "decode.jsonl"), DECODE_METRICS)
    shapes = sorted({k.split("/")[0] for k in [*train, *decode]})
    import ctranslate2
    import transformers

    meta = {"cpu": cpu_model(),
            "threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": transformers.__version__, "ctranslate2": ctranslate2.__version__,
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip()}
    rat = ratios({"train": train, "decode": decode}, shapes)
    results = {"machine": meta, "train": train, "decode": decode, "ratios": rat}
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "README.md").write_text(markdown(meta, train, decode, rat))
    print((out / "README.md").read_text())


if __name__ == "__main__":
    main(Path(sys.argv[1]))
