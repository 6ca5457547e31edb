"""How fast could a training step be if only its matrix products took time? Records every
matrix product (mm, addmm, addmm_, bmm, baddbmm; those inside a fused attention kernel cannot
be told apart and count with the rest) of real training steps of an engine, then times each
product alone, on fresh tensors of the same shapes, strides and dtype, and sets their sum
beside the measured step. The ratio of target tokens to that sum is the step's ceiling on this
CPU with PyTorch's matrix kernels: what no work on the rest of the step (element-wise passes,
the loss, Adam, Python) can exceed. One configuration per process.

    python benchmarks/speed/gemm_floor.py --data runs/multi30k-en-de/data --engine ours \\
        --shape small --dtype bf16 --json out.json
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from pathlib import Path

import torch
from engines import build, emit
from torch.utils._python_dispatch import TorchDispatchMode
from train_speed import SHAPES, step_parser, training_batches

from transformer_mt.config import load_config
from transformer_mt.data.dataset import ParallelData

aten = torch.ops.aten
PRODUCTS = {aten.mm.default: "mm", aten.addmm.default: "addmm", aten.addmm_.default: "addmm_",
            aten.bmm.default: "bmm", aten.baddbmm.default: "baddbmm"}


class ProductRecorder(TorchDispatchMode):
    """Counts each matrix product by (op, shapes, strides, dtype) as it is dispatched, and times
    every operator (wall clock around the call: CPU kernels return when done)."""

    def __init__(self):
        super().__init__()
        self.seen: Counter = Counter()
        self.op_seconds: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in PRODUCTS:
            tensors = tuple((tuple(a.shape), tuple(a.stride()), a.dtype)
                            for a in args if isinstance(a, torch.Tensor))
            self.seen[(PRODUCTS[func], tensors)] += 1
        start = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        self.op_seconds[func.overloadpacket.__name__] += time.perf_counter() - start
        return out


def alone(name: str, tensors, repeats: int) -> float:
    """Seconds of one product on fresh tensors of the recorded layouts: the median of blocks."""
    args = [torch.empty_strided(shape, stride, dtype=dtype).normal_()
            for shape, stride, dtype in tensors]
    op = getattr(torch.Tensor, name)  # addmm_ accumulates into its first argument
    op(*args)
    blocks = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            op(*args)
        blocks.append((time.perf_counter() - start) / repeats)
    return statistics.median(blocks)


def main(argv: list[str] | None = None) -> dict:
    parser = step_parser(__doc__, dtypes=["fp32", "bf16"], default_dtype="bf16")
    parser.add_argument("--repeats", type=int, default=5, help="calls per timed block")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    cfg = load_config(SHAPES[args.shape], ["model.vocab_size=8000"])
    torch.manual_seed(0)
    engine = build(args.engine, cfg.model, dtype=args.dtype, threads=torch.get_num_threads())
    data = ParallelData(args.data, "train")
    batches = training_batches(data, max_tokens=args.max_tokens, n=args.warmup + args.steps)
    step_times, floor_times, tokens, op_seconds = [], [], [], Counter()
    unrecorded = set()
    for i, (*tensors, n_target) in enumerate(batches):
        start = time.perf_counter()
        engine.train_step(*tensors, n_target)
        elapsed = time.perf_counter() - start
        if i < args.warmup:
            continue
        recorder = ProductRecorder()
        with recorder:  # the same step again, recorded (its time is not taken)
            engine.train_step(*tensors, n_target)
        floor = sum(count * alone(name, layout, args.repeats)
                    for (name, layout), count in recorder.seen.items())
        op_seconds.update(recorder.op_seconds)
        unrecorded |= {name for name in recorder.op_seconds
                       if "mm" in name and name not in PRODUCTS.values()}
        step_times.append(elapsed)
        floor_times.append(floor)
        tokens.append(n_target)
        print(f"step {i}: {n_target} target tokens, {elapsed * 1e3:.0f} ms; its "
              f"{sum(recorder.seen.values())} matrix products alone {floor * 1e3:.0f} ms",
              flush=True)
    result = {
        "engine": engine.name, "shape": args.shape, "dtype": args.dtype,
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "max_tokens": args.max_tokens, "timed_steps": len(step_times),
        "tokens_per_s": sum(tokens) / sum(step_times),
        "products_alone_tokens_per_s": sum(tokens) / sum(floor_times),
        "products_share_of_step": sum(floor_times) / sum(step_times),
        "products_not_recorded": sorted(unrecorded),  # names with "mm" left out of PRODUCTS
        # inside the recorded steps: each operator's share of the time spent in operators
        "operator_shares": {name: round(t / sum(op_seconds.values()), 4)
                            for name, t in op_seconds.most_common(25)},
    }
    return emit(result, args.json)


if __name__ == "__main__":
    main()
