"""Exact re-layouts of a model's weights that other formats need, and the layer names the
fairseq family (fairseq, BART, Hugging Face Marian) gives our tensors.

`interleaved` and `split` sinusoids (config.ModelConfig.sinusoid_layout) are the same table
with the model dimensions in another order: split[:, j] = interleaved[:, SPLIT_ORDER[j]]. A
Transformer whose residual stream is permuted computes the same function if every weight that
reads the stream is permuted on its input side and every weight that writes it on its output
side; LayerNorm's mean and variance do not depend on the order. So a model trained with the
paper's interleaved positions becomes, exactly, one with Marian's split positions, and back.
"""

from __future__ import annotations

import torch

from ..config import ModelConfig

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


def _layer_names(stack: str, i: int, decoder: bool, prefix: str) -> dict[str, str]:
    """fairseq's tensor names (without .weight/.bias) of one layer -> ours."""
    ours, theirs = f"{stack}.layers.{i}", f"{prefix}{stack}.layers.{i}"
    names = {f"{theirs}.self_attn.{p}_proj": f"{ours}.self_attn.w_{q}"
             for p, q in (("q", "q"), ("k", "k"), ("v", "v"), ("out", "o"))}
    names[f"{theirs}.self_attn_layer_norm"] = f"{ours}.sublayer1.norm"
    names[f"{theirs}.fc1"], names[f"{theirs}.fc2"] = f"{ours}.ff.w_1", f"{ours}.ff.w_2"
    if decoder:
        names.update({f"{theirs}.encoder_attn.{p}_proj": f"{ours}.cross_attn.w_{q}"
                      for p, q in (("q", "q"), ("k", "k"), ("v", "v"), ("out", "o"))})
        names[f"{theirs}.encoder_attn_layer_norm"] = f"{ours}.sublayer2.norm"
    names[f"{theirs}.final_layer_norm"] = f"{ours}.sublayer{3 if decoder else 2}.norm"
    return names


def layer_names(cfg: ModelConfig, prefix: str = "") -> dict[str, str]:
    """fairseq's names of every layer's tensors (without .weight/.bias), which Hugging Face's
    Marian (after BART) keeps under the prefix "model.", -> ours."""
    names: dict[str, str] = {}
    for i in range(cfg.n_encoder_layers):
        names.update(_layer_names("encoder", i, False, prefix))
    for i in range(cfg.n_decoder_layers):
        names.update(_layer_names("decoder", i, True, prefix))
    return names
