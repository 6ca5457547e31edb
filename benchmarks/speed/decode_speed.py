"""Decoding throughput and latency: the 1,014 Multi30k validation sentences in batches of 64
sorted by length, greedy and beam 4, every output forced to `--length` tokens so that randomly
initialised engines do identical work; and single-sentence beam-4 latency. One engine and dtype
per process (engines.py).

    python benchmarks/speed/decode_speed.py --data runs/multi30k-en-de/data --engine ct2 \\
        --shape small --dtype int8 --json out.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from engines import build, decoding_batches, decoding_config, device_name, emit, sync


def timed(fn, device: torch.device) -> float:
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def decode_parser(doc: str, *, default_dtype: str) -> argparse.ArgumentParser:
    """The options of a script that decodes the validation batches at a benchmark shape."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--shape", choices=["small", "base"], default="small")
    parser.add_argument("--dtype", choices=["fp32", "bf16", "auto", "int8", "int8row", "fp32+kv",
                                            "int8+kv"],
                        default=default_dtype, help="ours: int8row: --int8 --int8-scales row, "
                        "auto: --bf16 auto, +kv: --kv-bf16")
    parser.add_argument("--length", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    return parser


def main(argv: list[str] | None = None) -> dict:
    parser = decode_parser(__doc__, default_dtype="fp32")
    parser.add_argument("--engine", choices=["ours", "marian", "torch", "fairseq", "ct2"],
                        default="ours")
    parser.add_argument("--latency-sentences", type=int, default=30)
    parser.add_argument("--device", default="cpu", help="cuda: ours and marian only")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    device = torch.device(args.device)
    engine = build(args.engine, decoding_config(args.shape), dtype=args.dtype,
                   threads=torch.get_num_threads(), device=args.device)
    batches = [b.to(device) for b in decoding_batches(args.data, args.batch_size)]
    n = sum(len(b) for b in batches)
    engine.decode(batches[len(batches) // 2], beam=1, length=args.length)  # warm-up
    result = {"engine": engine.name, "shape": args.shape, "dtype": args.dtype,
              "malloc": engine.malloc, "device": device_name(device),
              "threads": torch.get_num_threads(), "torch": torch.__version__,
              "sentences": n, "output_tokens": args.length, "batch_size": args.batch_size}
    for label, beam in (("greedy", 1), ("beam4", 4)):
        if args.engine == "torch" and beam > 1:
            continue  # the tutorial baseline has no beam search
        seconds = sum(timed(lambda b=b, k=beam: engine.decode(b, beam=k, length=args.length),
                            device) for b in batches)
        result[f"{label}_sentences_per_s"] = n / seconds
        result[f"{label}_tokens_per_s"] = n * args.length / seconds
    if args.engine != "torch":
        one_each = decoding_batches(args.data, 1)
        singles = [one_each[i].to(device)
                   for i in np.linspace(0, n - 1, args.latency_sentences).astype(int)]
        latencies = [timed(lambda s=s: engine.decode(s, beam=4, length=args.length), device)
                     for s in singles]
        result["beam4_latency_ms"] = 1000 * statistics.median(latencies)
    return emit(result, args.json)


if __name__ == "__main__":
    main()
