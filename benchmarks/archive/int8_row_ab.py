"""Before / after in one process (the machine's speed drifts between processes): per-row int8
decoding (--int8 --int8-scales row, the server's) as it was, with W^Q, W^K, W^V three products
and the int8 weights a transposed view, against stacked projections (`stack_qkv`) and
contiguous weights, alternating for ROUNDS rounds over the 1,014 val sentences (batch 64, 30
forced tokens, random weights), greedy and beam 4, and one-sentence beam-4 latency.

    PYTHONPATH=src python benchmarks/archive/int8_row_ab.py DATA [small|base]
"""

import copy
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "speed"))  # engines.py
from engines import build, decoding_batches, decoding_config  # noqa: E402

from transformer_mt.inference.quantize import Int8RowLinear  # noqa: E402
from transformer_mt.model.attention import MultiHeadAttention  # noqa: E402


def as_before(model: torch.nn.Module) -> torch.nn.Module:
    """A copy projecting separately, its int8 weights transposed views of (out, in) ones."""
    before = copy.deepcopy(model)
    for module in before.modules():
        if isinstance(module, MultiHeadAttention):
            module.w_qkv = None
        if isinstance(module, Int8RowLinear):
            module.weight_IO = module.weight_IO.t().contiguous().t()
    return before


def main() -> None:
    data_dir, shape = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "small"
    torch.manual_seed(0)
    engine = build("ours", decoding_config(shape), dtype="int8row",
                   threads=torch.get_num_threads())
    variants = {"before": as_before(engine.decoder_model), "after": engine.decoder_model}
    batches = decoding_batches(data_dir, 64)
    n = sum(len(b) for b in batches)
    singles = decoding_batches(data_dir, 1)
    singles = [singles[i] for i in np.linspace(0, n - 1, 30).astype(int)]
    results = {name: {"greedy": [], "beam4": [], "latency_ms": []} for name in variants}
    for model in variants.values():  # warm-up
        engine.decoder_model = model
        engine.decode(batches[8], beam=4, length=30)
    for _ in range(int(os.environ.get("ROUNDS", 3))):
        for name, model in variants.items():
            engine.decoder_model = model
            for label, beam in (("greedy", 1), ("beam4", 4)):
                start = time.perf_counter()
                for batch in batches:
                    engine.decode(batch, beam=beam, length=30)
                results[name][label].append(n / (time.perf_counter() - start))
            times = []
            for single in singles:
                start = time.perf_counter()
                engine.decode(single, beam=4, length=30)
                times.append(1000 * (time.perf_counter() - start))
            results[name]["latency_ms"].append(statistics.median(times))
    for label in ("greedy", "beam4", "latency_ms"):
        before, after = (statistics.median(results[v][label]) for v in variants)
        better = before / after if label == "latency_ms" else after / before
        print(f"{shape} int8row {label}: before {before:.1f} "
              f"{[round(x, 1) for x in results['before'][label]]}, after {after:.1f} "
              f"{[round(x, 1) for x in results['after'][label]]}: {better:.3f}x")


if __name__ == "__main__":
    main()
