"""glibc malloc settings for PyTorch on the CPU.

PyTorch's CPU allocator keeps no cache: every training step allocates and frees the same large
tensors (for a 4k-token batch the base shape's FFN activations are 32 MB each in fp32, the
loss's fp32 blocks 16 MB; before the loss was fused, the bf16 logits and their gradient were
64 MB each). glibc serves blocks above its mmap threshold with mmap and
unmaps them when freed, and returns the top of its heap to the kernel past the trim threshold, so
each step page-faults the same memory in again. Raising both thresholds keeps freed memory in the
process for the next step, the effect of the jemalloc / tcmalloc LD_PRELOAD that PyTorch's CPU
performance guide recommends, without another library: fewer page faults and faster steps, at
the cost of memory that stays with the process (benchmarks/results/archive/speed-malloc,
benchmarks/results/training-memory-growth). Opt out where memory matters more.

Skipped where the C library is not glibc, where the user set MALLOC_MMAP_THRESHOLD_ or
MALLOC_TRIM_THRESHOLD_ themselves, and with TRANSFORMER_MT_MALLOC=default.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
M_MMAP_THRESHOLD = -3
THRESHOLD = 1 << 30  # blocks up to 1 GiB come from the heap and stay there when freed
OPT_OUT = "TRANSFORMER_MT_MALLOC"


def tune_malloc() -> bool:
    """Raise glibc's mmap and trim thresholds to 1 GiB for this process (see the module
    docstring). Returns whether they were set."""
    if os.environ.get(OPT_OUT, "") == "default":
        return False
    if any(name in os.environ for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")):
        return False
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)  # this process's symbols, glibc's among them (find_library would
    # run ldconfig in a subprocess)
    ok = bool(libc.mallopt(M_MMAP_THRESHOLD, THRESHOLD)) and \
        bool(libc.mallopt(M_TRIM_THRESHOLD, THRESHOLD))
    if not ok:
        log.warning("glibc refused the malloc thresholds; CPU steps may page-fault more")
    return ok
