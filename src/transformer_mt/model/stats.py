"""Size and cost of a configuration: parameter counts and forward FLOPs per token."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import ModelConfig
from .transformer import Transformer


@dataclass(frozen=True)
class ModelStats:
    parameters: int  # unique parameters (a tied matrix counts once)
    non_embedding_parameters: int  # without token embeddings, positions and output matrix
    forward_flops_per_token: int  # see forward_flops_per_token()
    seq_len: int


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(total, non-embedding) unique parameters of a Transformer."""
    params = list(model.parameters())  # each shared (tied) Parameter is listed once
    total = sum(p.numel() for p in params)
    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    embedding_ids.add(id(model.generator.weight))
    embedding = sum(p.numel() for p in params if id(p) in embedding_ids)
    return total, total - embedding


def forward_flops_per_token(cfg: ModelConfig, seq_len: int) -> int:
    """Matmul FLOPs (2 per multiply-add) of one forward pass over a source and a target of
    `seq_len` tokens each, divided by seq_len: the cost per translated token. Attention scores
    count the full seq_len x seq_len product (as kernels compute it), softmax, norms and biases
    are left out, like torch.utils.flop_counter."""
    D, F, L, V = cfg.d_model, cfg.d_ff, seq_len, cfg.tgt_vocab_size
    HK, HV = cfg.n_heads * cfg.head_dim_k, cfg.n_heads * cfg.head_dim_v
    q_proj, kv_proj, out_proj = 2 * D * HK, 2 * D * (HK + HV), 2 * HV * D
    scores_and_mix = 2 * L * (HK + HV)  # QK^T and weights @ V, per query
    attention = q_proj + kv_proj + out_proj + scores_and_mix  # per query token, keys of L tokens
    ffn = 2 * 2 * D * F
    encoder = cfg.n_encoder_layers * (attention + ffn)
    decoder = cfg.n_decoder_layers * (2 * attention + ffn)  # self- and cross-attention
    return encoder + decoder + 2 * D * V  # + pre-softmax linear


def model_stats(cfg: ModelConfig, seq_len: int = 32) -> ModelStats:
    with torch.device("meta"):
        model = Transformer(cfg)
    total, non_embedding = count_parameters(model)
    return ModelStats(total, non_embedding, forward_flops_per_token(cfg, seq_len), seq_len)
