"""Eq. (1) fused (`F.scaled_dot_product_attention`) against written out (`attention.py`'s other
path) at the shapes decoding, validation and training give it, one process, this machine's
threads: the measurements behind `attention.written_out`.

    python benchmarks/speed/attention_paths.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from transformer_mt.hardware.malloc import tune_malloc
from transformer_mt.model.attention import padding_mask, written_out, written_out_attention


def microseconds(fn, repeats: int) -> float:
    for _ in range(max(3, repeats // 10)):
        fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e6


def case(rows: int, queries: int, keys: int, *, dtype: torch.dtype, masked: bool,
         grad: bool, repeats: int) -> dict:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(rows, 4, n, 64, generator=g).to(dtype).requires_grad_(grad)
               for n in (queries, keys, keys))
    mask = padding_mask(torch.rand(rows, keys, generator=g) < 0.1) if masked else None

    def timed(path) -> float:
        def call():
            out = path(q, k, v, mask)
            if grad:
                out.sum().backward()
        return microseconds(call, repeats)

    with torch.set_grad_enabled(grad):
        t_fused = timed(F.scaled_dot_product_attention)
        t_written = timed(written_out_attention)
    return {"rows": rows, "heads": 4, "queries": queries, "keys": keys, "d_k": 64,
            "dtype": str(dtype).removeprefix("torch."), "mask": masked, "backward": grad,
            "fused_us": round(t_fused, 1), "written_out_us": round(t_written, 1),
            "fused_over_written_out": round(t_fused / t_written, 2),
            "attention_py_writes_out": written_out(q)}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    tune_malloc()  # as the transformer-mt command does; glibc's default mmap threshold makes
    # the fused kernel's scratch allocations page-fault, by an amount that depends on history
    results = []
    # inference: decoder self-attention (one query), beam search's cross-attention (beams as
    # queries), the encoder (as many queries as keys); one sentence, greedy and beam 4 at 64
    for dtype in (torch.float32, torch.bfloat16):
        for rows, queries, keys, masked in [
            (1, 1, 20, False), (4, 1, 20, False), (1, 4, 20, True),
            (64, 1, 6, False), (64, 1, 20, False), (64, 1, 50, False),
            (256, 1, 6, False), (256, 1, 20, False), (256, 1, 50, False),
            (16, 4, 20, True), (64, 4, 20, True), (64, 4, 50, True), (64, 20, 20, True),
        ]:
            results.append(case(rows, queries, keys, dtype=dtype, masked=masked, grad=False,
                                repeats=args.repeats))
            print(json.dumps(results[-1]), flush=True)
    for rows, length in [(160, 26), (80, 50)]:  # fp32 training: forward and backward
        results.append(case(rows, length, length, dtype=torch.float32, masked=True, grad=True,
                            repeats=max(5, args.repeats // 10)))
        print(json.dumps(results[-1]), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"threads": torch.get_num_threads(),
                                         "torch": torch.__version__, "cases": results},
                                        indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
