"""Attention weights, for looking inside a model (the paper's Figures 3-5) and for word
alignments (alignment.py). Forward hooks on each attention module recompute its weights
softmax(Q K^T / sqrt(d_k)) (eq. 1, the reference attention) from the module's own inputs, so
the forward pass itself is untouched (capturing changes no output bit) and costs nothing when
not asked for.

Layers are numbered from 0 in the arrays; the paper's "layer 5 of 6" is index 4.
"""

# N layers  B batch  H heads  S source len  T target len

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from ..model.attention import MultiHeadAttention
from ..model.transformer import Transformer

KINDS = ("encoder", "decoder", "cross")  # encoder self-, decoder self-, encoder-decoder


@dataclass
class AttentionMaps:
    """Every layer's and head's weights: encoder (N, B, H, S, S), decoder (N, B, H, T, T) and
    cross (N, B, H, T, S). Rows are queries and sum to 1; masked keys are 0."""

    encoder: Tensor
    decoder: Tensor
    cross: Tensor


def _weights(module: MultiHeadAttention, x_BTD: Tensor, kv: tuple[Tensor, Tensor],
             mask: Tensor | None, q_BHTK: Tensor | None = None) -> Tensor:
    """(B, H, T, L) the weights `module` applied to x's queries (q_BHTK where the caller
    projected them) and keys kv[0]."""
    B, T, _ = x_BTD.shape
    k_BHLK = kv[0].float()
    if q_BHTK is None:
        q_BHTK = module.w_q(x_BTD).view(B, T, module.n_heads, module.d_k).transpose(1, 2)
    q_BHTK = q_BHTK.float()
    scores_BHTL = q_BHTK @ k_BHLK.transpose(-2, -1) / math.sqrt(module.d_k)
    if mask is not None:
        scores_BHTL = scores_BHTL.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores_BHTL, dim=-1)


@contextlib.contextmanager
def recording(model: Transformer, kinds: tuple[str, ...] = KINDS
              ) -> Iterator[dict[str, list[Tensor]]]:
    """Within the block, every call of the model's attention modules of `kinds` adds its
    weights to {kind: [per layer, in call order]} (the other modules are not hooked)."""
    found: dict[str, list[Tensor]] = {kind: [] for kind in kinds}
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, MultiHeadAttention):
            kind = "encoder" if name.startswith("encoder.") else \
                "cross" if name.endswith("cross_attn") else "decoder"
            if kind not in kinds:
                continue

            def hook(module, args, _output, kind=kind):
                with torch.no_grad():
                    found[kind].append(_weights(module, *args))

            handles.append(module.register_forward_hook(hook))
    try:
        yield found
    finally:
        for handle in handles:
            handle.remove()


@torch.inference_mode()
def attention_maps(model: Transformer, src_BS: Tensor, tgt_in_BT: Tensor
                   ) -> tuple[Tensor, AttentionMaps]:
    """Teacher-forced logits (B, T, V) of `tgt_in` (BOS + target) and every attention weight."""
    with recording(model) as found:
        logits_BTV = model(src_BS, tgt_in_BT)
    maps = AttentionMaps(*(torch.stack(found[kind]) for kind in KINDS))
    return logits_BTV, maps

