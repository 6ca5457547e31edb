"""Does the pipeline hold at the paper's scale? A synthetic parallel corpus of WMT14 en-de's size
(4.5M pairs; sentence lengths drawn to match news text: log-normal, a mean of about 23 words,
the target's length near the source's), with Zipf-distributed words, run through `prepare`
(the wmt14-base preset's 37,000-piece vocabulary) and then one epoch of the training batches
(25,000 tokens each, as `train` makes and pads them): wall time and peak resident memory of
each, measured in its own process, and the time projected for WMT14 en-fr's 36M pairs.

    python benchmarks/scale/wmt14_simulation.py --work /tmp/wmt14-sim \\
        --out benchmarks/results/prepare-at-wmt14-scale/results.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from transformer_mt.hardware.cpu_speed import cpu_model

EPOCH = """
import sys, time
from transformer_mt.data.batching import token_batches
from transformer_mt.data.dataset import ParallelData
data = ParallelData(sys.argv[1], "train")
start = time.perf_counter()
batches = token_batches(data.src_lengths, data.tgt_lengths, max_tokens=25000, seed=1, epoch=0)
planned = time.perf_counter() - start
tokens = 0
for batch in batches:
    src, tgt_in, tgt_out = data.collate(batch)
    tokens += int((tgt_out != data.pad_id).sum())
print(len(batches), tokens, planned, time.perf_counter() - start)
"""


def words(rng: np.random.Generator, n: int, letters: str) -> list[str]:
    """n distinct made-up words of 2-12 letters."""
    found: dict[str, None] = {}
    while len(found) < n:
        length = int(rng.integers(2, 13))
        found["".join(rng.choice(list(letters), length))] = None
    return list(found)


def write_corpus(src: Path, tgt: Path, pairs: int, seed: int = 0) -> None:
    """`pairs` lines a side, in chunks: Zipf words over a 60,000-word vocabulary a language."""
    rng = np.random.default_rng(seed)
    vocab = {"en": words(rng, 60_000, "abcdefghijklmnopqrstuvwxyz"),
             "de": words(rng, 60_000, "abcdefghijklmnopqrstuvwxyzäöüß")}
    with open(src, "w", encoding="utf-8") as fs, open(tgt, "w", encoding="utf-8") as ft:
        for start in range(0, pairs, 100_000):
            n = min(100_000, pairs - start)
            src_len = np.clip(rng.lognormal(3.0, 0.55, n).astype(int), 1, 150)
            tgt_len = np.clip((src_len * rng.lognormal(0.05, 0.2, n)).astype(int), 1, 150)
            for out, lengths, lang in ((fs, src_len, "en"), (ft, tgt_len, "de")):
                ids = np.minimum(rng.zipf(1.3, int(lengths.sum())) - 1, 59_999)
                table = vocab[lang]
                cut = np.cumsum(lengths)[:-1]
                out.write("".join(" ".join(table[i] for i in sentence) + " .\n"
                                  for sentence in np.split(ids, cut)))


def measured(command: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB, stdout) of a command in its own process."""
    probe = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
             "r = subprocess.run(sys.argv[1:], check=True, capture_output=True, text=True); "
             "print(time.perf_counter() - t, "
             "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(r.stdout)")
    out = subprocess.run([sys.executable, "-c", probe, *command], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    seconds, rss_kib = out[0].split()
    return float(seconds), int(rss_kib) / 1024, "\n".join(out[1:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--pairs", type=int, default=4_500_000)
    p.add_argument("--note", default="", help="what else ran on the machine, for the record")
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    src, tgt, data = args.work / "train.en", args.work / "train.de", args.work / "data"
    start = time.perf_counter()
    write_corpus(src, tgt, args.pairs)
    generated = time.perf_counter() - start
    print(f"generated {args.pairs:,} pairs in {generated:.0f} s", flush=True)
    prep_s, prep_rss, prep_out = measured(
        ["transformer-mt", "prepare", "--config", "wmt14-base", "--train-src", str(src),
         "--train-tgt", str(tgt), "--out", str(data)])
    print(f"prepare: {prep_s:.0f} s, peak RSS {prep_rss:.0f} MiB\n{prep_out}", flush=True)
    epoch_s, epoch_rss, epoch_out = measured([sys.executable, "-c", EPOCH, str(data)])
    n_batches, tokens, planned, total = epoch_out.split()
    report = json.loads((data / "report.json").read_text())["splits"]["train"]
    results = {
        "question": "does prepare hold WMT14 en-de's size in bounded memory, and how long do "
                    "prepare and one epoch of batching take",
        "pairs": args.pairs, "text_bytes": src.stat().st_size + tgt.stat().st_size,
        "prepare": {"seconds": round(prep_s, 1), "peak_rss_mib": round(prep_rss, 1),
                    "report": report},
        "epoch_of_batches": {"seconds": round(epoch_s, 1), "peak_rss_mib": round(epoch_rss, 1),
                             "batches": int(n_batches), "target_tokens": int(tokens),
                             "planning_seconds": round(float(planned), 1),
                             "planning_and_collating_seconds": round(float(total), 1)},
        "projected_prepare_hours_for_36M_pairs": round(prep_s * 36e6 / args.pairs / 3600, 2),
        "machine": cpu_model(), "cores": len(os.sched_getaffinity(0)),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip(),
        "note": args.note,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
