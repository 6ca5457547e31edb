"""Before / after in one process (the machine's speed drifts by +-10 % between processes):
commit b0b1e82's KV-cache reorder (index_select of the whole buffer) and attention dispatch
(fused except for bf16 training) against this commit's, alternating, ROUNDS rounds over the
1,014 val sentences (batch 64, 30 forced tokens, random weights; shape small unless given).

    PYTHONPATH=src python benchmarks/archive/kv_tight_ab.py DATA int8 4 [base]
"""

import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "speed"))  # engines.py
from engines import build, decoding_batches, decoding_config  # noqa: E402

from transformer_mt.model import attention  # noqa: E402


def reorder_before(self, index_B):
    if self.k_BHCK is not None:
        self.k_BHCK = self.k_BHCK.index_select(0, index_B)
        self.v_BHCV = self.v_BHCV.index_select(0, index_B)


def written_out_before(q):
    return q.device.type == "cpu" and q.dtype == torch.bfloat16 and q.requires_grad


def main() -> None:
    data_dir, dtype, beam = sys.argv[1], sys.argv[2], int(sys.argv[3])
    shape = sys.argv[4] if len(sys.argv) > 4 else "small"
    variants = {"before": (reorder_before, written_out_before),
                "after": (attention.KVCache.reorder, attention.written_out)}
    torch.manual_seed(0)
    engine = build("ours", decoding_config(shape), dtype=dtype, threads=torch.get_num_threads())
    batches = decoding_batches(data_dir, 64)
    n = sum(len(b) for b in batches)
    engine.decode(batches[8], beam=beam, length=30)
    speeds = {name: [] for name in variants}
    for _ in range(int(os.environ.get("ROUNDS", 5))):
        for name, (reorder, written_out) in variants.items():
            attention.KVCache.reorder, attention.written_out = reorder, written_out
            start = time.perf_counter()
            for batch in batches:
                engine.decode(batch, beam=beam, length=30)
            speeds[name].append(n / (time.perf_counter() - start))
    before, after = (statistics.median(speeds[n]) for n in variants)
    rounded = {name: [round(x, 1) for x in values] for name, values in speeds.items()}
    print(f"{shape} {dtype} beam {beam}: sentences/s before {before:.1f} {rounded['before']}, "
          f"after {after:.1f} {rounded['after']}: after/before {after / before:.3f}")


if __name__ == "__main__":
    main()
