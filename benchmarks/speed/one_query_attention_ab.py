"""Eq. (1) for one query row (a decoding step) compiled by torch.compile, against the fused
kernel decoding uses, in one process: the 1,014 Multi30k validation sentences in batches of 64,
30 output tokens forced (as decode_speed.py), the two paths taking turns batch by batch. The
compiled form computes q . k for every cached position, the softmax and the weighted sum of the
values in one generated loop (dynamic shapes: one graph for every cache length). A prototype
measured before a change: it only patches `attention.attention` for float32 single-query calls.

    python benchmarks/speed/one_query_attention_ab.py --data runs/m30k/data --shape base \\
        --dtype int8 --beam 1 --rounds 2
"""

from __future__ import annotations

import math
import time

import torch
from decode_speed import decode_parser
from engines import build, decoding_batches, decoding_config
from torch import Tensor

from transformer_mt.model import attention

fused = attention.attention


def one_query(q_BH1K: Tensor, k_BHLK: Tensor, v_BHLV: Tensor, mask: Tensor | None) -> Tensor:
    """softmax(q K^T / sqrt(d_k)) V for one query row, as products and sums inductor fuses."""
    scores_BH1L = (q_BH1K * k_BHLK).sum(-1, keepdim=True).transpose(-1, -2) \
        * (1 / math.sqrt(q_BH1K.size(-1)))
    if mask is not None:
        scores_BH1L = scores_BH1L.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores_BH1L, -1) @ v_BHLV


compiled_one_query = torch.compile(one_query, dynamic=True)


def with_compiled(q_BHTK, k_BHLK, v_BHLV, mask, dropout_p=0.0):
    if q_BHTK.size(2) == 1 and not q_BHTK.requires_grad and q_BHTK.dtype == torch.float32:
        return compiled_one_query(q_BHTK, k_BHLK, v_BHLV, mask)
    return fused(q_BHTK, k_BHLK, v_BHLV, mask, dropout_p)


def main() -> None:
    parser = decode_parser(__doc__, default_dtype="int8")
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    engine = build("ours", decoding_config(args.shape), dtype=args.dtype,
                   threads=torch.get_num_threads())
    batches = decoding_batches(args.data, args.batch_size)
    paths = {"fused": fused, "compiled": with_compiled}

    def run(path: str, batch: Tensor) -> float:
        attention.attention = paths[path]
        start = time.perf_counter()
        engine.decode(batch, beam=args.beam, length=args.length)
        return time.perf_counter() - start

    start = time.perf_counter()
    for batch in (batches[0], batches[len(batches) // 2], batches[-1]):
        run("compiled", batch)
    print(f"compiling and warm-up: {time.perf_counter() - start:.1f} s")
    run("fused", batches[len(batches) // 2])
    seconds = dict.fromkeys(paths, 0.0)
    for r in range(args.rounds):
        for i, batch in enumerate(batches):
            for path in sorted(paths, reverse=(i + r) % 2 == 1):
                seconds[path] += run(path, batch)
        n = (r + 1) * sum(len(b) for b in batches)
        print(f"round {r + 1}: fused {n / seconds['fused']:.1f} sent/s, compiled "
              f"{n / seconds['compiled']:.1f} sent/s, compiled/fused speed "
              f"{seconds['fused'] / seconds['compiled']:.3f}", flush=True)
    attention.attention = fused
    with torch.no_grad():  # the two paths agree (checked on the last batch's shapes)
        q, k, v = (torch.randn(64, 8, n, 64) for n in (1, 30, 30))
        mask = torch.rand(64, 1, 1, 30) > 0.1
        print("max |compiled - fused|:",
              (compiled_one_query(q, k, v, mask) - fused(q, k, v, mask)).abs().max().item())


if __name__ == "__main__":
    main()
