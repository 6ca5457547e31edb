"""`decode.bf16: auto`: bfloat16 autocast only where it decodes faster than float32, measured
for the model, the search and the batch size at hand.

A CPU without bf16 matrix units (hardware/cpu_speed.py's probe) decodes in float32 without
measuring. Elsewhere the search as configured is timed on a synthetic source, forced to
PROBE_TOKENS output tokens, in both precisions at batch 1 and at decode.batch_size (best of
ROUNDS after a warm-up); a batch takes the choice of the nearer of the two sizes (on a log
scale). Batch 1 and batch 64 can differ: on a 2-core Xeon with AMX, bf16 beam search of the
small shape ran 85 against 62 sentences/s at batch 64, but took 190 against 130 ms for one
sentence.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time

import torch

from ..config import DecodeConfig
from ..hardware.cpu_speed import bf16_pays
from .search import DecodingModel, generate

log = logging.getLogger(__name__)

PROBE_TOKENS = 16  # output tokens a probe decodes
SOURCE_TOKENS = 20
ROUNDS = 3


@dataclasses.dataclass(frozen=True)
class Bf16Choice:
    """Whether to decode in bf16 at batch 1 and at `batch_size`, from measured speedups."""

    batch_size: int
    speedup: dict[int, float]  # batch size -> float32 time / bf16 time

    def for_batch(self, size: int) -> bool:
        nearer = 1 if math.log(max(size, 1)) < math.log(self.batch_size) / 2 else self.batch_size
        return self.speedup.get(nearer, 0.0) > 1.0


def choose_bf16(model: DecodingModel, cfg: DecodeConfig, device: torch.device) -> Bf16Choice:
    """Measure, or skip measuring where bf16 cannot pay, and log the choice."""
    sizes = sorted({1, cfg.batch_size})
    if not bf16_pays(device):
        log.info("decode.bf16 auto: float32 at every batch size (no bf16 units in use here)")
        return Bf16Choice(cfg.batch_size, {size: 0.0 for size in sizes})
    speedup = {size: time_search(model, cfg, device, size, bf16=False) /
               time_search(model, cfg, device, size, bf16=True) for size in sizes}
    log.info("decode.bf16 auto: %s", ", ".join(
        f"{'bf16' if s > 1 else 'float32'} at batch {b} (bf16 {s:.2f}x)"
        for b, s in speedup.items()))
    return Bf16Choice(cfg.batch_size, speedup)


def time_search(model: DecodingModel, cfg: DecodeConfig, device: torch.device, batch: int, *,
                bf16: bool) -> float:
    """Seconds the search takes for `batch` synthetic sentences (best of ROUNDS, warmed up)."""
    probe = dataclasses.replace(cfg, bf16=False, min_length=PROBE_TOKENS,
                                max_length=PROBE_TOKENS, batch_size=batch)
    generator = torch.Generator().manual_seed(0)
    low = max(model.cfg.eos_id, model.cfg.pad_id, model.cfg.bos_id) + 1
    src_BS = torch.randint(low, model.cfg.vocab_size, (batch, SOURCE_TOKENS),
                           generator=generator)
    src_BS[:, -1] = model.cfg.eos_id
    src_BS = src_BS.to(device)
    best = math.inf
    for round_ in range(ROUNDS + 1):
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            generate(model, src_BS, probe)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if round_:  # the first is the warm-up
            best = min(best, time.perf_counter() - start)
    return best
