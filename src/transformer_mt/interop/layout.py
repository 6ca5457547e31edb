"""Exact re-layouts of a model's weights that other formats need.

`interleaved` and `split` sinusoids (config.ModelConfig.sinusoid_layout) are the same table
with the model dimensions in another order: split[:, j] = interleaved[:, SPLIT_ORDER[j]]. A
Transformer whose residual stream is permuted computes the same function if every weight that
reads the stream is permuted on its input side and every weight that writes it on its output
side; LayerNorm's mean and variance do not depend on the order. So a model trained with the
paper's interleaved positions becomes, exactly, one with Marian's split positions, and back.
"""

from __future__ import annotations

import torch

_READ = (".tokens.weight", "generator.weight", ".w_q.weight", ".w_k.weight", ".w_v.weight",
         ".w_1.weight")  # (out, D): columns are model dimensions
_WRITE = (".w_o.weight", ".w_o.bias", ".w_2.weight", ".w_2.bias")  # rows are model dimensions
_NORM = ("norm.weight", "norm.bias")


def split_order(d_model: int) -> torch.Tensor:
    """The interleaved table's columns in split order: 0, 2, 4, ..., 1, 3, 5, ..."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def permute_model_dims(state: dict[str, torch.Tensor], order: torch.Tensor
                       ) -> dict[str, torch.Tensor]:
    """Our state dict with the residual stream's dimension j taken from dimension order[j]."""
    out = {}
    for name, tensor in state.items():
        if name.endswith(_READ):
            tensor = tensor[:, order]
        elif name.endswith(_WRITE) or name.endswith(_NORM):
            tensor = tensor[order]
        out[name] = tensor.contiguous()
    return out


def relayout_sinusoids(state: dict[str, torch.Tensor], d_model: int, src: str, dst: str
                       ) -> dict[str, torch.Tensor]:
    """`state` of a model with `src` sinusoids as the same function with `dst` sinusoids
    (interleaved <-> split; the identity when they are equal)."""
    if src == dst:
        return dict(state)
    order = split_order(d_model)
    if (src, dst) == ("split", "interleaved"):
        order = torch.argsort(order)
    elif (src, dst) != ("interleaved", "split"):
        raise ValueError(f"no exact re-layout from {src} to {dst} sinusoids")
    return permute_model_dims(state, order)
