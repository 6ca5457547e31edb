"""Training throughput: target tokens/s of full steps (forward, backward, Adam) on real Multi30k
batches, for transformer-mt or a peer at the same shape (engines.py). FLOPs are those of our
model on the same padded batches, counted by torch's FlopCounterMode on the meta device, so
every engine is credited with the same work; the fraction is of the machine's measured matmul
peak in the same dtype. One configuration per process.

    python benchmarks/speed/train_speed.py --data runs/multi30k-en-de/data --engine marian \\
        --shape small --dtype bf16 --json out.json

--data is a prepared data directory (`transformer-mt prepare`).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path

import torch
from engines import build, device_name, emit, sync
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from transformer_mt.config import Config, ModelConfig, load_config
from transformer_mt.data.batching import ShapeBuckets, token_batches
from transformer_mt.data.dataset import ParallelData
from transformer_mt.hardware.onednn import bound_onednn_caches

SHAPES = {"small": "small", "base": "base"}


def matmul_peak(dtype: torch.dtype, device: torch.device) -> float:
    """FLOP/s of a large square matrix product (2048 on CPU, 8192 on GPU), best of a few."""
    n = 8192 if device.type == "cuda" else 2048
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    best = 0.0
    for _ in range(5 if device.type == "cuda" else 3):
        sync(device)
        start = time.perf_counter()
        for _ in range(10 if device.type == "cuda" else 2):
            a @ b
        sync(device)
        reps = 10 if device.type == "cuda" else 2
        best = max(best, reps * 2 * n**3 / (time.perf_counter() - start))
    return best


def step_flops(cfg: ModelConfig, batch_shapes: list[tuple[int, int, int]]) -> list[int]:
    """Matmul FLOPs of one training step (forward + backward) per batch (B, S, T)."""
    from transformer_mt.model.transformer import Transformer

    with torch.device("meta"):
        model = Transformer(cfg).train()
    out = []
    for B, S, T in batch_shapes:
        src = torch.full((B, S), 5, dtype=torch.long, device="meta")
        tgt = torch.full((B, T), 5, dtype=torch.long, device="meta")
        counter = FlopCounterMode(display=False)
        with counter:  # the loss has no matmul: a plain sum stands in for it
            model(src, tgt).sum().backward()
        out.append(counter.get_total_flops())
    return out


def training_config(shape: str, dtype: str, vocab_size: int = 8000) -> Config:
    """The training benchmarks' configuration: preset `shape` with an 8k vocabulary."""
    return load_config(SHAPES[shape], [f"model.vocab_size={vocab_size}",
                                       f"train.bf16={dtype == 'bf16'}",
                                       f"train.fp16={dtype == 'fp16'}"])


def training_batches(data: ParallelData, *, max_tokens: int, n: int,
                     buckets: ShapeBuckets | None = None
                     ) -> list[tuple[Tensor, Tensor, Tensor, int]]:
    """The first n batches of the training set's first epoch (seed 1), collated, each with its
    number of target tokens: (src, tgt_in, tgt_out, n_target), the batches every training
    benchmark times."""
    batches = token_batches(data.src_lengths, data.tgt_lengths, max_tokens=max_tokens, seed=1,
                            epoch=0, buckets=buckets)[:n]
    return [(*data.collate(batch, buckets), int(data.tgt_lengths[batch].sum()))
            for batch in batches]


def minor_faults() -> int:
    """Page faults of this process so far that needed no disk: a freshly mapped page touched."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def step_parser(doc: str, *, dtypes: list[str], default_dtype: str) -> argparse.ArgumentParser:
    """The options of a script that times training steps of one engine on real batches."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--engine", choices=["ours", "marian", "torch", "fairseq"],
                        default="ours")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--dtype", choices=dtypes, default=default_dtype)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    return parser


def main(argv: list[str] | None = None) -> dict:
    parser = step_parser(__doc__, dtypes=["fp32", "bf16", "fp16"], default_dtype="fp32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--compile", nargs="?", const="true", choices=["true", "cuda_graphs"],
                        help="ours: the training step compiled (train.compile; cuda_graphs: "
                        "replayed as CUDA graphs, with --shape-buckets)")
    parser.add_argument("--shape-buckets", type=int, default=0,
                        help="batches padded to this many shapes (train.shape_buckets)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    cfg = training_config(args.shape, args.dtype, args.vocab_size)
    torch.manual_seed(0)
    if args.engine == "ours":
        bound_onednn_caches()  # as `train` does
    compile = {None: False, "true": True}.get(args.compile, args.compile)
    data = ParallelData(args.data, "train")
    buckets = ShapeBuckets.of(data.src_lengths, data.tgt_lengths, n=args.shape_buckets,
                              max_tokens=args.max_tokens, limit=cfg.model.max_positions) \
        if args.shape_buckets else None
    engine = build(args.engine, cfg.model, dtype=args.dtype, threads=torch.get_num_threads(),
                   device=args.device, compile=compile,
                   shapes=len(buckets.lengths) if buckets else 0)
    batches = training_batches(data, max_tokens=args.max_tokens, n=args.warmup + args.steps,
                               buckets=buckets)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, tokens, shapes, faults, compiled_shapes = [], [], [], 0, set()
    for i, (*cpu_tensors, n_target) in enumerate(batches):
        tensors = tuple(t.to(device) for t in cpu_tensors)
        sync(device)
        start, faults_before = time.perf_counter(), minor_faults()
        engine.train_step(*tensors, n_target)
        sync(device)
        # compiled graphs per shape (buckets): a shape's first step compiles, untimed
        new_graph = compile and buckets and tensors[0].shape not in compiled_shapes
        compiled_shapes.add(tensors[0].shape)
        if i >= args.warmup and not new_graph:
            times.append(time.perf_counter() - start)
            faults += minor_faults() - faults_before
            tokens.append(n_target)
            shapes.append((tensors[0].shape[0], tensors[0].shape[1], tensors[1].shape[1]))
    flops = step_flops(cfg.model, shapes)
    peak_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    peak = matmul_peak(peak_dtype[args.dtype], device)
    per_step_tok_s = [n / t for n, t in zip(tokens, times, strict=True)]
    achieved = sum(flops) / sum(times)
    result = {
        "engine": engine.name, "shape": args.shape, "dtype": args.dtype,
        "compile": compile, "shape_buckets": args.shape_buckets, "malloc": engine.malloc,
        "device": device_name(device),
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "max_tokens": args.max_tokens, "timed_steps": len(times),
        "median_step_s": statistics.median(times),
        "tokens_per_s": sum(tokens) / sum(times),
        "median_tokens_per_s": statistics.median(per_step_tok_s),
        "achieved_flops_per_s": achieved, "matmul_peak_flops_per_s": peak,
        "fraction_of_matmul_peak": achieved / peak,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "page_faults_per_step": faults / len(times),
        "peak_gpu_mib": torch.cuda.max_memory_allocated(device) / 2**20
        if device.type == "cuda" else None,
    }
    return emit(result, args.json)


if __name__ == "__main__":
    main()
