"""How fast this CPU multiplies matrices today, and does bfloat16 pay on it?

bf16 autocast makes CPU training and decoding faster only where oneDNN has fast bf16 matrix
instructions (AVX-512 BF16 on AMD Zen 4 and 5, AMX on Intel Xeon since Sapphire Rapids);
elsewhere bf16 products run no faster than float32, or far slower (docs/performance.md). About
60 ms of matrix products, once per process, tell which, so that `train.bf16` and `decode.bf16`
warn instead of silently running slower, and `train.bf16=auto` chooses. `train` records the
GFLOP/s it finds at each start in metrics.jsonl (kind "machine"): the same machine's speed
varies from day to day, and runs are compared at equal compute.
"""

from __future__ import annotations

import functools
import logging
import platform
import time
from pathlib import Path

import torch

log = logging.getLogger(__name__)

PROBE_SHAPE = (2048, 256, 1024)  # rows x inner x columns: a small model's FFN on a 2k-token batch
SLOW = 0.9  # warn below this speed-up
# train.bf16=auto chooses bf16 from this matmul speed-up on: a training step breaks even near
# 1.4 (benchmarks/results/archive/speed-zen4, archive/speed-xeon).
AUTO = 1.5


def cpu_model() -> str:
    """The CPU's model name and the bf16 matrix instructions it offers (which decide whether
    bf16 pays), from /proc/cpuinfo where there is one."""
    try:
        first = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    except OSError:
        return platform.processor() or platform.machine()
    info = dict(line.split(":", 1) for line in first.splitlines() if ":" in line)
    info = {key.strip(): value.strip() for key, value in info.items()}
    units = [flag for flag in ("amx_bf16", "avx512_bf16") if flag in info.get("flags", "").split()]
    return (f"{info.get('model name', platform.machine())}, family {info.get('cpu family')} "
            f"model {info.get('model')}, {' and '.join(units) or 'no bf16 instructions'}")


def matmul_gflops(rounds: int = 5) -> dict[str, float]:
    """GFLOP/s of one PROBE_SHAPE matrix product in float32 and bfloat16 on this CPU with the
    current threads: the best of `rounds` rounds alternating the two."""
    rows, inner, cols = PROBE_SHAPE
    generator = torch.Generator().manual_seed(0)
    a32 = torch.randn(rows, inner, generator=generator)
    b32 = torch.randn(inner, cols, generator=generator)
    pairs = {"float32": (a32, b32), "bfloat16": (a32.bfloat16(), b32.bfloat16())}
    best = dict.fromkeys(pairs, float("inf"))
    for _ in range(rounds):
        for dtype, (a, b) in pairs.items():
            start = time.perf_counter()
            torch.mm(a, b)
            best[dtype] = min(best[dtype], time.perf_counter() - start)
    return {dtype: 2 * rows * inner * cols / seconds / 1e9 for dtype, seconds in best.items()}


@functools.cache
def probed_gflops() -> dict[str, float]:
    """matmul_gflops(), measured once per process: what `train` records and what the bf16
    checks read."""
    return matmul_gflops()


@functools.cache
def bf16_matmul_speedup() -> float:
    """bfloat16 over float32 speed of matrix products on this CPU, measured once per process
    (above 1: bf16 is faster)."""
    gflops = probed_gflops()
    return gflops["bfloat16"] / gflops["float32"]


def bf16_pays(device: torch.device) -> bool:
    """Whether bf16 autocast should make training on `device` faster: on a CPU, by the probe;
    on a GPU, wherever it supports bfloat16."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    speedup = bf16_matmul_speedup()
    log.info("this CPU multiplies bfloat16 matrices at %.2fx the speed of float32; bf16 "
             "autocast pays from %gx", speedup, AUTO)
    return speedup >= AUTO


def warn_if_bf16_is_slow(device: torch.device, *, setting: str, instead: str) -> None:
    """Log a warning, once per process, when `setting` asks for bf16 autocast on a CPU that
    multiplies bf16 matrices more slowly than float32; `instead` says what to use."""
    if device.type != "cpu":
        return
    speedup = bf16_matmul_speedup()
    if speedup < SLOW:
        _warn_once(setting, instead, speedup)


@functools.cache
def _warn_once(setting: str, instead: str, speedup: float) -> None:
    log.warning("%s: this CPU multiplies bfloat16 matrices at %.2fx the speed of float32 "
                "(no bf16 matrix units in use), so bf16 autocast slows it down; %s",
                setting, speedup, instead)
