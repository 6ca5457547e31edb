"""Dropout (§5.4) with masks cut from 16-bit random numbers: for the sub-layers and embeddings,
and for the attention weights where attention is written out."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def threshold(p: float) -> int:
    """Drop where the 16-bit random number is below this: p * 2^16, rounded (0.1 acts as
    0.1000061), and below 2^16 so that p < 1 never drops everything."""
    return min(round(p * 2**16), 2**16 - 1)


def dropout(x: Tensor, p: float) -> Tensor:
    """Zero each element of x with probability p (as `threshold` rounds it) and scale the rest by
    1 / (1 - p). The mask multiplies as uint8, so backward keeps 1 byte per element, not a float
    mask."""
    cut = threshold(p)
    if cut == 0:
        return x
    if torch.compiler.is_compiling():  # train.compile: Inductor fuses its own random numbers
        return F.dropout(x, p, training=True)  # into the kernels around the mask
    keep = keep_mask(x.shape, cut, x.device)
    return (x * keep.view(torch.uint8)).mul_(2**16 / (2**16 - cut))  # uint8 x float: fast


class Dropout(nn.Module):
    """Dropout (§5.4): in training, zero each element with probability p and scale the rest by
    1 / (1 - p); the identity in eval mode. The mask compares 16-bit random numbers with
    p * 2^16 (rounded: 0.1 acts as 0.1000061), four of them cut from each 64-bit draw of the
    generator: cheaper than a float per element (benchmarks/results/archive/speed-malloc)."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    @property
    def threshold(self) -> int:
        return threshold(self.p)

    def forward(self, x: Tensor) -> Tensor:
        if not self.training:
            return x
        return dropout(x, self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def keep_mask(shape: torch.Size, cut: int, device: torch.device) -> Tensor:
    """A boolean mask of `shape`, each element False with probability cut / 2^16 (cut in
    [0, 2^16)): the four 16-bit lanes of random int64s drawn from the whole 64-bit
    range are uniform on [-2^15, 2^15), and compared where they lie in memory (a contiguous
    compare; picking three lanes of a draw in [0, 2^63) took as long as drawing them)."""
    n = shape.numel()
    words = -(-n // 4)
    draws_W = torch.empty(words, dtype=torch.int64, device=device).random_(-2**63, None)
    return (draws_W.view(torch.int16)[:n] >= cut - 2**15).view(shape)
