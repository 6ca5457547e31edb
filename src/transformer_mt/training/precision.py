"""Autocast and attention kernels for training steps; train.bf16=auto's choice."""

from __future__ import annotations

import contextlib
import logging

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..config import TrainConfig
from ..hardware.cpu_speed import bf16_pays
from ..model.attention import attention_kernels
from .distributed import World, all_sum

log = logging.getLogger(__name__)


def precision(tcfg: TrainConfig, device: torch.device) -> contextlib.ExitStack:
    """Autocast (bf16, or fp16 with the loss scaler) and the attention kernels."""
    stack = contextlib.ExitStack()
    stack.enter_context(torch.autocast(device.type, enabled=tcfg.bf16 or tcfg.fp16,
                                       dtype=torch.float16 if tcfg.fp16 else torch.bfloat16))
    if device.type == "cpu":
        # The math backend trained 1.3x faster than the CPU flash kernel in bf16 and as fast in
        # fp32 (small shape, commit 9263229); the model keeps plain SDPA, the choice is here.
        stack.enter_context(sdpa_kernel(SDPBackend.MATH))
    else:
        stack.enter_context(attention_kernels(device))
    return stack


def auto_bf16(device: torch.device, world: World) -> bool:
    """train.bf16=auto: bf16 autocast where it pays (cpu_speed.bf16_pays), as rank 0 finds it,
    so that every rank of a run computes alike."""
    choice = world.is_main and bf16_pays(device)
    choice = all_sum([float(choice)], world, device)[0] > 0
    if world.is_main:
        log.info("train.bf16=auto: %s", "bf16 autocast" if choice else "float32")
    return choice
