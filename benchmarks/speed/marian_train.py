"""Training speed against Marian itself: target tokens per second of `pymarian train` (Marian's
own trainer; the words/s of its log) and `transformer-mt train` (the tokens_per_s of its
metrics.jsonl), each as its command line ships, on the same data, vocabulary, shape and threads,
the engines taking turns run after run.

The same work: both read the prepared directory's training text with its SentencePiece model
(Marian takes the .spm as its vocabulary, so both train on the same pieces) at a preset's shape
(post-norm, ReLU, all embeddings tied, dropout as the preset, label smoothing 0.1, Adam 0.9 /
0.98 / 1e-9, no clipping, eq. (3)'s schedule), in float32: Marian trains on a CPU in float32
only; ours also as it ships on a CPU that pays for bf16 (`--engine "ours bf16"`). Batches: ours
hold max_tokens padded tokens a side; Marian's `--mini-batch-words` counts a batch's real source
tokens (src/data/batch_generator.h), so it is set to the mean real source tokens of our batches
(epoch 0). Both logs count target tokens (EOS included) per update, which the result records so
that the batches can be compared. Threads: Marian's `--cpu-threads N` trains N workers on their
own batches, synchronously (`--sync-sgd`); ours runs each batch on N intra-op threads.

A run's speed: target tokens over seconds of its log's intervals after the first (which holds
start-up, graph building and memory reservation in both).

    python benchmarks/speed/marian_train.py --data runs/m30k/data --shape small \\
        --work runs/marian-train --rounds 3 --threads 1 --json out.json

Needs benchmarks/compat/marian_env.sh's environment ($MARIAN, default .venv-marian/bin/pymarian).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
from pathlib import Path

import numpy as np
from marian_decode import MARIAN

from transformer_mt.config import load_config
from transformer_mt.data.batching import token_batches
from transformer_mt.data.dataset import ParallelData
from transformer_mt.hardware.cpu_speed import cpu_model

MARIAN_INTERVAL = re.compile(r": Up\. (\d+) : .*: Cost [\d.]+ \* ([\d,]+) @ .* : Time ([\d.]+)s")


def source_tokens_per_batch(data: ParallelData, max_tokens: int) -> int:
    """The mean real source tokens (EOS included) of our batches in the first epoch."""
    batches = token_batches(data.src_lengths, data.tgt_lengths, max_tokens=max_tokens, seed=1,
                            epoch=0)
    return round(float(np.mean([data.src_lengths[b].sum() for b in batches])))


def marian_command(run: Path, data: Path, shape: str, *, steps: int, every: int, threads: int,
                   words: int) -> list[str]:
    """`pymarian train` at the preset `shape`, the options that make its work ours."""
    cfg = load_config(shape)
    m, t = cfg.model, cfg.train
    vocab = run / "vocab.spm"  # Marian knows a SentencePiece vocabulary by its suffix
    vocab.symlink_to((data / "sentencepiece.model").resolve())
    return [str(MARIAN), "train", "--type", "transformer", "--model", str(run / "model.npz"),
            "--train-sets", str(data / "train.src.txt"), str(data / "train.tgt.txt"),
            "--vocabs", str(vocab), str(vocab), "--max-length", "1000",
            "--dim-emb", str(m.d_model), "--transformer-dim-ffn", str(m.d_ff),
            "--transformer-heads", str(m.n_heads), "--enc-depth", str(m.n_encoder_layers),
            "--dec-depth", str(m.n_decoder_layers), "--tied-embeddings-all",
            "--transformer-ffn-activation", "relu", "--transformer-dropout", str(m.dropout),
            "--transformer-dropout-attention", str(m.attention_dropout),
            "--transformer-dropout-ffn", str(m.activation_dropout),
            "--label-smoothing", str(t.label_smoothing),
            "--optimizer-params", str(t.adam_beta1), str(t.adam_beta2), str(t.adam_eps),
            "--learn-rate", str(t.lr_scale * m.d_model ** -0.5 * t.warmup_steps ** -0.5),
            "--lr-warmup", str(t.warmup_steps), "--lr-decay-inv-sqrt", str(t.warmup_steps),
            "--clip-norm", "0", "--mini-batch-words", str(words), "--mini-batch", "10000",
            "--maxi-batch", "100", "--after-batches", str(steps), "--disp-freq", str(every),
            "--save-freq", str(10 * steps), "--valid-freq", str(10 * steps),
            "--cpu-threads", str(threads), "--sync-sgd", "-w", "2000", "--seed", "1",
            "--log", str(run / "train.log"), "--quiet"]


def ours_command(run: Path, data: Path, shape: str, *, steps: int, every: int, threads: int,
                 max_tokens: int, dtype: str) -> list[str]:
    return ["transformer-mt", "train", "--config", shape, "--data", str(data),
            "--run-dir", str(run / "run"), f"--train.max_steps={steps}",
            f"--train.log_every={every}", f"--train.valid_every={10 * steps}",
            "--train.valid_bleu=false",
            f"--train.save_every={10 * steps}", "--train.max_minutes=0",
            f"--train.threads={threads}", f"--train.max_tokens={max_tokens}",
            f"--train.bf16={dtype == 'bf16'}"]


def marian_intervals(log: Path) -> list[tuple[int, float]]:
    """(target tokens, seconds) of each display interval of Marian's training log."""
    found = MARIAN_INTERVAL.findall(log.read_text(encoding="utf-8"))
    return [(int(labels.replace(",", "")), float(seconds)) for _, labels, seconds in found]


def ours_intervals(metrics: Path) -> list[tuple[int, float]]:
    """(target tokens, seconds) of each log interval of our metrics.jsonl."""
    records = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines()]
    start = next(r["time"] for r in records if r["kind"] == "machine")
    out = []
    for r in (r for r in records if r["kind"] == "train"):
        seconds = r["time"] - start
        out.append((round(r["tokens_per_s"] * seconds), seconds))
        start = r["time"]
    return out


def one_run(engine: str, work: Path, args: argparse.Namespace, words: int) -> dict:
    """Train `engine` ("marian fp32", "ours fp32", "ours bf16") from scratch for --steps
    updates; its rate over the log intervals after the first."""
    name, dtype = engine.split()
    run = work / engine.replace(" ", "_")
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    common = dict(steps=args.steps, every=args.every, threads=args.threads)
    if name == "marian":
        cmd = marian_command(run, args.data, args.shape, words=words, **common)
    else:
        cmd = ours_command(run, args.data, args.shape, max_tokens=args.max_tokens, dtype=dtype,
                           **common)
    env = os.environ | {"OMP_NUM_THREADS": str(args.threads)}
    with (run / "stdout.log").open("w") as out:
        subprocess.run(cmd, env=env, check=True, stdout=out, stderr=subprocess.STDOUT)
    intervals = (marian_intervals(run / "train.log") if name == "marian"
                 else ours_intervals(run / "run" / "metrics.jsonl"))
    if len(intervals) != args.steps // args.every:
        raise RuntimeError(f"{engine}: {len(intervals)} log intervals, expected "
                           f"{args.steps // args.every} ({run})")
    tokens, seconds = map(sum, zip(*intervals[1:], strict=True))
    return {"tokens_per_s": tokens / seconds,
            "target_tokens_per_update": tokens / (args.every * (len(intervals) - 1)),
            "first_interval_s": intervals[0][1]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="a prepared data directory")
    p.add_argument("--shape", default="small", help="a preset: small, base, ...")
    p.add_argument("--work", type=Path, required=True, help="the runs' directories (replaced)")
    p.add_argument("--max-tokens", type=int, default=4096,
                   help="our batches' padded tokens a side; Marian's words match them")
    p.add_argument("--steps", type=int, default=120, help="updates a run")
    p.add_argument("--every", type=int, default=20, help="updates a log interval")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--engine", action="append", dest="engines",
                   help='"marian fp32", "ours fp32", "ours bf16" (default: all three)')
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    if args.steps % args.every or args.steps // args.every < 2:
        p.error("--steps must be a multiple of --every, at least two intervals")
    engines = args.engines or ["marian fp32", "ours fp32", "ours bf16"]
    words = source_tokens_per_batch(ParallelData(args.data, "train"), args.max_tokens)
    runs: dict[str, list[dict]] = {e: [] for e in engines}
    for r in range(args.rounds):
        for engine in engines[r % len(engines):] + engines[: r % len(engines)]:
            runs[engine].append(one_run(engine, args.work, args, words))
            print(f"round {r + 1} {engine}: {runs[engine][-1]['tokens_per_s']:.0f} target "
                  f"tokens/s", flush=True)
    result = {"question": "training speed against Marian itself", "machine": cpu_model(),
              "threads": args.threads, "shape": args.shape, "max_tokens": args.max_tokens,
              "marian_mini_batch_words": words, "steps": args.steps, "every": args.every,
              "runs": runs,
              "median_tokens_per_s": {e: round(statistics.median(x["tokens_per_s"] for x in v))
                                      for e, v in runs.items()}}
    for ours in (e for e in engines if e.startswith("ours")):
        for peer in (e for e in engines if e.startswith("marian")):
            ratios = [a["tokens_per_s"] / b["tokens_per_s"]
                      for a, b in zip(runs[ours], runs[peer], strict=True)]
            result.setdefault("ratios", {})[f"{ours} / {peer}"] = {
                "median": round(statistics.median(ratios), 3),
                "rounds": [round(x, 3) for x in ratios]}
    print(json.dumps({k: result.get(k) for k in ("median_tokens_per_s", "ratios")}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
