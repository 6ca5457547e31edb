"""Bounds on oneDNN's caches, so that bf16 on the CPU runs in bounded memory.

Under bf16 autocast PyTorch's CPU matrix products go through oneDNN (ideep), which keeps the
primitives it builds for each new problem shape in two caches: oneDNN's own primitive cache
(`ONEDNN_PRIMITIVE_CACHE_CAPACITY`) and ideep's computation cache (`LRU_CACHE_CAPACITY`), 1,024
entries each by default, each entry holding its buffers. Token-budget batches have a new shape
almost every step, so a training run's resident memory grew with the number of shapes it had
met (the Multi30k tiny recipe in bf16: 2,566 MiB after 160 steps, against 943 MiB in fp32).
Capped at 32 entries each, the same run holds 945 MiB and was no slower than its uncapped twin
run beside it (benchmarks/results/bf16-memory-bounded). fp32 products do not use these caches.

`train` sets them at its start, before the process's first product; a capacity the user set in
the environment is kept. Decoding keeps torch's capacities: a beam search meets a new attention
shape at every step, and whether a small cache slows bf16 decoding is not measured yet.
"""

from __future__ import annotations

import os

CAPACITY = 32  # entries in each cache
CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")


def bound_onednn_caches(capacity: int = CAPACITY) -> dict[str, str]:
    """Cap both caches at `capacity` entries where the environment does not say otherwise;
    the capacities in effect."""
    return {name: os.environ.setdefault(name, str(capacity)) for name in CACHES}
