"""Where our beam search spends its time: the 1,014 Multi30k validation sentences in batches
of 64 sorted by length, outputs forced to `--length` tokens, random weights (as decode_speed.py),
with a wall-clock timer around each leaf of a decoding step: the linear layers (by rows x in x
out features), the pre-softmax linear, eq. (1), the KV caches' reorder and extend, LayerNorm,
and the search's log-softmax and top-k. `rest` is what is left (Python, embeddings, residual
additions, beam bookkeeping). A timed call inside another one counts for the outer one only.
torch.profiler's attribution moved between operators from run to run on the 2-core CPU; these
timers cost about a microsecond a call.

    PYTHONPATH=src python benchmarks/speed/decode_parts.py --data runs/multi30k-en-de/data \\
        --shape base --dtype int8 --json parts.json
"""

from __future__ import annotations

import collections
import functools
import time
from pathlib import Path

import torch
from decode_speed import decode_parser
from engines import build, decoding_batches, decoding_config, emit
from torch import nn

from transformer_mt.inference import quantize
from transformer_mt.inference import search as decoding
from transformer_mt.model import attention
from transformer_mt.model.transformer import Transformer

seconds: collections.Counter[str] = collections.Counter()
calls: collections.Counter[str] = collections.Counter()
_inside = False


def timed(name, fn, *, by_shape: bool = False):
    """fn with its wall time added to `seconds[name]` (linear layers: per input shape too)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        global _inside
        if _inside:
            return fn(*args, **kwargs)
        _inside = True
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            elapsed = time.perf_counter() - start
            _inside = False
            keys = [name]
            if by_shape:  # args: (module, x)
                module, x = args[0], args[1]
                keys.append(f"  {x.numel() // x.size(-1)} x {module.in_features} x "
                            f"{module.out_features}")
            for key in keys:
                seconds[key] += elapsed
                calls[key] += 1

    return wrapper


def instrument(dtype: str) -> None:
    """Wrap the leaves of a decoding step (for the rest of this process)."""
    linear = quantize.Int8Linear if dtype.startswith("int8") else nn.Linear
    linear.forward = timed("linear layers", linear.forward, by_shape=True)
    Transformer.pre_softmax = timed("pre-softmax linear", Transformer.pre_softmax)
    attention.attention = timed("attention, eq. (1)", attention.attention)
    attention.KVCache.reorder = timed("KV cache reorder", attention.KVCache.reorder)
    attention.KVCache.extend = timed("KV cache extend", attention.KVCache.extend)
    nn.LayerNorm.forward = timed("LayerNorm", nn.LayerNorm.forward)
    torch.log_softmax = timed("log-softmax", torch.log_softmax)
    decoding.topk_in_blocks = timed("top-k", decoding.topk_in_blocks)


def part(s: float, total: float, n: int = 0) -> dict:
    return {"seconds": round(s, 3), "share": round(s / total, 4)} | (
        {"calls": n, "us_per_call": round(1e6 * s / n, 1)} if n else {})


def describe(entry: dict) -> str:
    line = f"{entry['seconds']:7.2f} s {100 * entry['share']:5.1f} %"
    if "calls" in entry:
        line += f"  {entry['calls']:>7,} calls, {entry['us_per_call']:>7,.0f} us"
    return line


def main(argv: list[str] | None = None) -> dict:
    parser = decode_parser(__doc__, default_dtype="int8")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    engine = build("ours", decoding_config(args.shape), dtype=args.dtype,
                   threads=torch.get_num_threads())
    batches = decoding_batches(args.data, args.batch_size)
    n = sum(len(b) for b in batches)
    instrument(args.dtype)
    engine.decode(batches[len(batches) // 2], beam=args.beam, length=args.length)  # warm-up
    seconds.clear()
    calls.clear()
    start = time.perf_counter()
    for batch in batches:
        engine.decode(batch, beam=args.beam, length=args.length)
    total = time.perf_counter() - start
    parts = {name: part(s, total, calls[name]) for name, s in seconds.most_common()
             if not name.startswith(" ")}
    parts["rest"] = part(total - sum(p["seconds"] for p in parts.values()), total)
    shapes = [(name.strip(), s) for name, s in seconds.most_common() if name.startswith(" ")]
    major = {name: part(s, total, calls["  " + name]) for name, s in shapes if s >= 0.005 * total}
    minor = [s for name, s in shapes if name not in major]
    if minor:
        major[f"{len(minor)} other shapes"] = part(sum(minor), total)
    for name, entry in parts.items():
        print(f"{name:<28} {describe(entry)}")
        if name == "linear layers":
            for shape, entry in major.items():
                print(f"  {shape:<26} {describe(entry)}")
    return emit({"shape": args.shape, "dtype": args.dtype, "beam": args.beam,
                 "batch_size": args.batch_size, "output_tokens": args.length,
                 "threads": torch.get_num_threads(), "torch": torch.__version__,
                 "sentences": n, "sentences_per_s": round(n / total, 2),
                 "seconds": round(total, 3), "parts": parts,
                 "linear_layers_by_rows_in_out": major}, args.json)


if __name__ == "__main__":
    main()
