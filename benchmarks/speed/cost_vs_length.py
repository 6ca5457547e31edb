"""How cost grows with sentence length (the paper's Table 1, measured): a training step at a
fixed token budget (batches of tokens/length sentences, source and target `length` tokens
each), decoding latency (one sentence of `length` tokens, greedy, its output forced to `length`
tokens) and the peak resident memory of each, as the length goes from 8 to the model's maximum,
for ours and Hugging Face's Marian at the same shape with random weights (engines.py).

At a fixed token budget a step's matrix products cost A + B * length FLOPs per token
(model/stats.py: A the projections, feed-forward layers and output layer, O(n d^2) a sentence;
B * length the attention scores and their weighted sums, O(n^2 d)); the FLOP model says
attention's share passes one half at length A / B. The measured step times are fitted the same
way (t = c0 + c1 * length, least squares) and their crossover c0 / c1 is where attention starts
to dominate on this CPU.

Each (engine, task, length) cell runs in its own process, so that its peak RSS is its own:

    python benchmarks/speed/cost_vs_length.py --out benchmarks/results/cost-vs-length-zen4 \\
        [--shape base] [--lengths 8 16 32 64 128 256 512 1024] [--tokens 4096]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from engines import build, emit, git_commit

from transformer_mt.config import ModelConfig, load_config
from transformer_mt.hardware.cpu_speed import cpu_model
from transformer_mt.model.stats import forward_flops_per_token
from transformer_mt.training.metrics import resident_mib

ENGINES = {"ours": "transformer-mt", "marian": "hf-marian"}


def shape_config(shape: str, max_length: int) -> ModelConfig:
    """Preset `shape` with an 8k vocabulary, no dropout and positions for `max_length` tokens
    and the decoder's start token."""
    return load_config(shape, ["model.vocab_size=8000", "model.dropout=0.0",
                               f"model.max_positions={max_length + 8}"]).model


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def random_ids(cfg: ModelConfig, rows: int, length: int, generator: torch.Generator):
    # ids clear of our padding (0), BOS/EOS and Marian's padding (the last id)
    return torch.randint(4, cfg.vocab_size - 1, (rows, length), generator=generator)


def cell(args: argparse.Namespace) -> dict:
    """One engine, task and length, measured in this process."""
    cfg = shape_config(args.shape, args.max_length)
    torch.manual_seed(0)
    engine = build(args.engine, cfg, dtype="fp32", threads=torch.get_num_threads())
    generator = torch.Generator().manual_seed(1)
    built_mib = resident_mib()
    times = []
    if args.task == "train":
        rows = max(1, args.tokens // args.length)
        batch = [random_ids(cfg, rows, args.length, generator) for _ in range(3)]
        for step in range(args.warmup + args.repeats):
            start = time.perf_counter()
            engine.train_step(*batch, rows * args.length)
            if step >= args.warmup:
                times.append(time.perf_counter() - start)
    else:
        rows = 1
        src = random_ids(cfg, 1, args.length, generator)
        engine.decode(src[:, : min(args.length, 16)], beam=1, length=min(args.length, 16))
        for _ in range(args.repeats):
            start = time.perf_counter()
            engine.decode(src, beam=1, length=args.length)
            times.append(time.perf_counter() - start)
    return {"engine": engine.name, "task": args.task, "shape": args.shape,
            "length": args.length, "sentences": rows, "threads": torch.get_num_threads(),
            "torch": torch.__version__, "seconds": times,
            "median_s": statistics.median(times), "rss_after_build_mib": built_mib,
            "peak_rss_mib": peak_rss_mib()}


def series(cells: list[dict], engine: str, task: str) -> list[dict]:
    """One engine's cells of one task, by length."""
    return sorted((c for c in cells if c["engine"] == engine and c["task"] == task),
                  key=lambda c: c["length"])


def fit(lengths: list[int], seconds: list[float]) -> tuple[float, float]:
    """(c0, c1) of seconds = c0 + c1 * length, least squares."""
    c1, c0 = np.polyfit(np.asarray(lengths, float), np.asarray(seconds, float), 1)
    return float(c0), float(c1)


def summarise(cells: list[dict], cfg: ModelConfig, tokens: int) -> dict:
    """The FLOP model's crossover and each engine's fitted one, from the training cells."""
    a = forward_flops_per_token(cfg, 0)
    b = forward_flops_per_token(cfg, 1) - a
    out = {"flop_model": {"per_token_flops_A": a, "per_length_flops_B": b,
                          "attention_dominates_from_length": a / b}}
    for name in ENGINES.values():
        train = series(cells, name, "train")
        if len(train) >= 2:
            c0, c1 = fit([c["length"] for c in train], [c["median_s"] for c in train])
            out[name] = {"step_s_at_length_0": c0, "step_s_per_length": c1,
                         "attention_dominates_from_length": c0 / c1 if c1 > 0 else None,
                         "tokens_per_step": tokens}
    return out


def table(cells: list[dict]) -> str:
    """Markdown: a row per length, each engine's step time, latency and peaks side by side."""
    by = {(c["engine"], c["task"], c["length"]): c for c in cells}
    names = list(ENGINES.values())
    head = ["length", "sentences/step"]
    for task, unit in (("train", "step s"), ("decode", "latency s")):
        head += [f"{task} {unit}: {n}" for n in names] + [f"{task} peak MiB: {n}" for n in names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for length in sorted({c["length"] for c in cells}):
        row = [str(length), str(next((c["sentences"] for c in cells if c["length"] == length
                                      and c["task"] == "train"), ""))]
        for task in ("train", "decode"):
            got = [by.get((n, task, length)) for n in names]
            row += [f"{c['median_s']:.3f}" if c else "" for c in got]
            row += [f"{c['peak_rss_mib']:.0f}" if c else "" for c in got]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def plot(cells: list[dict], summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for name, colour in zip(ENGINES.values(), ("tab:blue", "tab:orange"), strict=True):
        for task, marker in (("train", "o-"), ("decode", "s--")):
            got = series(cells, name, task)
            if not got:
                continue
            lengths = [c["length"] for c in got]
            axes[0 if task == "train" else 1].plot(lengths, [c["median_s"] for c in got],
                                                   marker, color=colour, label=name)
            axes[2].plot(lengths, [c["peak_rss_mib"] - c["rss_after_build_mib"] for c in got],
                         marker, color=colour, label=f"{name} ({task})")
        if name in summary:
            c0, c1 = summary[name]["step_s_at_length_0"], summary[name]["step_s_per_length"]
            lengths = np.geomspace(min(c["length"] for c in cells),
                                   max(c["length"] for c in cells), 50)
            axes[0].plot(lengths, c0 + c1 * lengths, ":", color=colour,
                         label=f"{name} fit: {c0:.3g} s + {c1:.3g} s x n")
    model = summary["flop_model"]
    axes[0].axvline(model["attention_dominates_from_length"], color="grey", ls="--",
                    label="FLOPs: attention = rest")
    titles = ("training step at a fixed token budget", "one sentence, greedy, n tokens out",
              "peak resident memory above the built model")
    for ax, title, ylabel in zip(axes, titles, ("seconds", "seconds", "MiB"), strict=True):
        ax.set(xscale="log", yscale="linear" if ax is axes[2] else "log", title=title,
               xlabel="sentence length n (tokens)", ylabel=ylabel)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="results folder (the driver)")
    parser.add_argument("--shape", default="base", help="a preset (default: the paper's base)")
    parser.add_argument("--lengths", type=int, nargs="+",
                        default=[8, 16, 32, 64, 128, 256, 512, 1024])
    parser.add_argument("--tokens", type=int, default=4096,
                        help="source (and target) tokens per training step")
    parser.add_argument("--engines", nargs="+", choices=sorted(ENGINES),
                        default=sorted(ENGINES))
    parser.add_argument("--tasks", nargs="+", choices=["train", "decode"],
                        default=["train", "decode"])
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    # one cell, in this process (what the driver runs)
    parser.add_argument("--engine", choices=sorted(ENGINES), help=argparse.SUPPRESS)
    parser.add_argument("--task", choices=["train", "decode"], help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--max-length", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.engine:
        return emit(cell(args), None)
    if args.out is None:
        parser.error("--out is required")
    args.out.mkdir(parents=True, exist_ok=True)
    cells = []
    for length in args.lengths:
        for task in args.tasks:
            for engine in args.engines:
                command = [sys.executable, __file__, "--engine", engine, "--task", task,
                           "--length", str(length), "--max-length", str(max(args.lengths)),
                           "--shape", args.shape, "--tokens", str(args.tokens),
                           "--warmup", str(args.warmup), "--repeats", str(args.repeats)]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                cells.append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(f"{engine} {task} n={length}: {cells[-1]['median_s']:.3f} s, "
                      f"peak {cells[-1]['peak_rss_mib']:.0f} MiB", flush=True)
    cfg = shape_config(args.shape, max(args.lengths))
    summary = summarise(cells, cfg, args.tokens)
    result = {"shape": args.shape, "tokens": args.tokens, "lengths": args.lengths,
              "cpu_model": cpu_model(), "commit": git_commit(), "summary": summary,
              "cells": cells}
    (args.out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "table.md").write_text(table(cells))
    plot(cells, summary, args.out / "cost-vs-length.png")
    return result


if __name__ == "__main__":
    main()
