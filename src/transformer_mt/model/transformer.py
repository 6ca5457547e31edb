"""The Transformer of "Attention Is All You Need" (§3), in the paper's order:
embeddings and positional encoding -> encoder -> decoder -> linear + softmax.

Faithful by default (post-norm, sinusoidal positions, sqrt(d_model) embedding scale, three-way
tying); every departure is a `ModelConfig` field marked as a deviation.
"""

# B batch  S source len  T target len  L key len  D d_model  F d_ff  V vocab

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig
from .attention import KVCache, MultiHeadAttention, causal_mask, padding_mask
from .dropout import Dropout


def sinusoidal_positions(n_positions: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """(n_positions, D) table of §3.5.

    interleaved: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).
    concat: tensor2tensor's get_timing_signal_1d: d/2 sines then d/2 cosines, with
    frequencies 10000^(-i / (d/2 - 1)), i = 0 .. d/2 - 1.
    split: the paper's frequencies 10000^(-2i/d), d/2 sines then d/2 cosines (Marian).
    """
    if d_model % 2:
        raise ValueError(f"sinusoidal positions need an even d_model, got {d_model}")
    cpu = torch.device("cpu")  # also under torch.device("meta"), where these cost seconds
    pos_P1 = torch.arange(n_positions, dtype=torch.float64, device=cpu)[:, None]
    half = d_model // 2
    paper_inv_freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64, device=cpu)
                                 / d_model)
    if layout == "interleaved":
        table = torch.zeros(n_positions, d_model, dtype=torch.float64, device=cpu)
        table[:, 0::2] = torch.sin(pos_P1 * paper_inv_freq)
        table[:, 1::2] = torch.cos(pos_P1 * paper_inv_freq)
    elif layout in ("concat", "split"):
        inv_freq = paper_inv_freq if layout == "split" else \
            10000.0 ** (-torch.arange(half, dtype=torch.float64, device=cpu) / max(half - 1, 1))
        table = torch.cat([torch.sin(pos_P1 * inv_freq), torch.cos(pos_P1 * inv_freq)], dim=1)
    else:
        raise ValueError(f"unknown sinusoid layout {layout!r}")
    return table.float()


def embedding(n: int, d: int) -> nn.Embedding:
    """nn.Embedding(n, d); under torch.device("meta") without its own draw, which costs
    seconds there the first time (torch's normal_ for meta tensors imports its compiler)."""
    if torch.empty(0).is_meta:
        return nn.Embedding(n, d, _weight=torch.empty(n, d))
    return nn.Embedding(n, d)


class Embeddings(nn.Module):
    """Token embedding * sqrt(d_model) + positional encoding, then dropout (§3.4, §3.5, §5.4).
    Deviation when word_dropout > 0 (an option of either side): in training, zero a token's
    embedding with this probability, leaving its position; the rest are not rescaled."""

    def __init__(self, cfg: ModelConfig, tokens: nn.Embedding, word_dropout: float = 0.0):
        super().__init__()
        self.tokens = tokens  # may be shared with the other stack and the output layer (§3.4)
        self.scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        if cfg.positional == "learned":  # Table 3 row (E)
            self.learned_positions = embedding(cfg.max_positions, cfg.d_model)
        else:
            self.register_buffer("sinusoids", self.sinusoid_table(cfg), persistent=False)
        self.max_positions = cfg.max_positions
        self.drop = Dropout(cfg.dropout)
        self.word_dropout = word_dropout

    @staticmethod
    def sinusoid_table(cfg: ModelConfig) -> Tensor:
        offset = cfg.position_offset  # fairseq's first position is padding_idx + 1
        return sinusoidal_positions(offset + cfg.max_positions, cfg.d_model,
                                    cfg.sinusoid_layout)[offset:]

    def positions(self, start: int | Tensor, length: int) -> Tensor:
        """(T, D) for positions start .. start+T-1, or (B, T, D) where start is (B,): each
        row's own first position."""
        table = self.learned_positions.weight if hasattr(self, "learned_positions") else \
            self.sinusoids
        if isinstance(start, Tensor):
            return table[start[:, None] + torch.arange(length, device=start.device)]
        return table[start : start + length]

    def forward(self, ids_BT: Tensor, start: int | Tensor = 0) -> Tensor:
        """ids (B, T) at positions start .. start+T-1 -> (B, T, D); start may be one per row
        (B,)."""
        last = int(start.max()) if isinstance(start, Tensor) else start
        if last + ids_BT.size(1) > self.max_positions:
            raise ValueError(
                f"sequence of {last + ids_BT.size(1)} positions exceeds "
                f"model.max_positions={self.max_positions}"
            )
        tokens_BTD = self.tokens(ids_BT)
        if self.training and self.word_dropout:  # B*T draws: cheap beside the (B, T, D) ones
            keep_BT1 = torch.rand(*ids_BT.shape, 1, device=ids_BT.device) >= self.word_dropout
            tokens_BTD = tokens_BTD * keep_BT1
        x_BTD = tokens_BTD * self.scale + self.positions(start, ids_BT.size(1))
        return self.drop(x_BTD)


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (§3.3, eq. 2); GELU/SiLU selectable."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w_1 = nn.Linear(cfg.d_model, cfg.d_ff)
        self.w_2 = nn.Linear(cfg.d_ff, cfg.d_model)
        self.activation = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}[cfg.activation]
        self.drop = Dropout(cfg.activation_dropout)  # extra, not in the paper; default 0

    def forward(self, x_BTD: Tensor) -> Tensor:
        return self.w_2(self.drop(self.activation(self.w_1(x_BTD))))  # (B, T, F) inside


class SublayerConnection(nn.Module):
    """LayerNorm(x + Dropout(Sublayer(x))) (§3.1, §5.4).
    Deviation when norm_first: x + Dropout(Sublayer(LayerNorm(x))) (pre-norm)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.drop = Dropout(cfg.dropout)
        self.norm_first = cfg.norm_first

    def forward(self, x_BTD: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.norm_first:
            return x_BTD + self.drop(sublayer(self.norm(x_BTD)))
        return self.norm(x_BTD + self.drop(sublayer(x_BTD)))


def matmul_dtype(x: Tensor) -> torch.dtype:
    """The dtype a matrix product with `x` runs in here: autocast's when it is on."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


def _attention(cfg: ModelConfig) -> MultiHeadAttention:
    return MultiHeadAttention(
        d_model=cfg.d_model, n_heads=cfg.n_heads, d_k=cfg.head_dim_k, d_v=cfg.head_dim_v,
        dropout=cfg.attention_dropout, bias=cfg.attention_bias,
    )


class EncoderLayer(nn.Module):
    """Multi-head self-attention, then the feed-forward network (§3.1, Figure 1 left)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = _attention(cfg)
        self.ff = FeedForward(cfg)
        self.sublayer1 = SublayerConnection(cfg)
        self.sublayer2 = SublayerConnection(cfg)

    def forward(self, x_BSD: Tensor, mask: Tensor) -> Tensor:
        def self_attention(h_BSD: Tensor) -> Tensor:
            q_BHSK, k_BHSK, v_BHSV = self.self_attn.project_qkv(h_BSD)
            return self.self_attn(h_BSD, (k_BHSK, v_BHSV), mask, q_BHSK)

        x_BSD = self.sublayer1(x_BSD, self_attention)
        return self.sublayer2(x_BSD, self.ff)


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, feed-forward (§3.1, Figure 1 right)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = _attention(cfg)
        self.cross_attn = _attention(cfg)
        self.ff = FeedForward(cfg)
        self.sublayer1 = SublayerConnection(cfg)
        self.sublayer2 = SublayerConnection(cfg)
        self.sublayer3 = SublayerConnection(cfg)

    def forward(self, x_BTD: Tensor, *, cross_kv: tuple[Tensor, Tensor], self_mask: Tensor | None,
                cross_mask: Tensor, cache: KVCache | None = None, beams: int = 1) -> Tensor:
        """cross_kv: the encoder output projected by `cross_attn.project_kv`. With a cache,
        x holds only the new positions and attends to the cached ones as well. beams: x has
        `beams` consecutive rows per source row of cross_kv (beam search)."""

        def self_attention(h_BTD: Tensor) -> Tensor:
            q_BHTK, *kv = self.self_attn.project_qkv(h_BTD)
            if cache is not None:
                kv = cache.extend(*kv)
            return self.self_attn(h_BTD, tuple(kv), self_mask, q_BHTK)

        def cross_attention(h_XTD: Tensor) -> Tensor:  # X = B * beams
            # Cross-attention has no mask between queries, so the beams of a sentence can be
            # queries of one row: the source is never copied per beam.
            X, T, D = h_XTD.shape
            out_BQD = self.cross_attn(h_XTD.reshape(X // beams, beams * T, D), cross_kv,
                                      cross_mask)
            return out_BQD.reshape(X, T, D)

        x_BTD = self.sublayer1(x_BTD, self_attention)
        x_BTD = self.sublayer2(x_BTD, cross_attention)
        return self.sublayer3(x_BTD, self.ff)


class Encoder(nn.Module):
    """A stack of N identical layers (§3.1). Post-norm has no final LayerNorm."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        # Deviation (pre-norm only): the stack output is normalised once more.
        self.final_norm = nn.LayerNorm(cfg.d_model, cfg.layer_norm_eps) if cfg.norm_first else None

    def forward(self, x_BSD: Tensor, mask: Tensor) -> Tensor:
        for layer in self.layers:
            x_BSD = layer(x_BSD, mask)
        return x_BSD if self.final_norm is None else self.final_norm(x_BSD)


class Decoder(nn.Module):
    """A stack of N identical layers with masked self-attention (§3.1)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model, cfg.layer_norm_eps) if cfg.norm_first else None

    def forward(self, x_BTD: Tensor, *, cross_kvs: list[tuple[Tensor, Tensor]],
                self_mask: Tensor | None, cross_mask: Tensor,
                caches: list[KVCache] | None = None, beams: int = 1) -> Tensor:
        for i, layer in enumerate(self.layers):
            cache = caches[i] if caches is not None else None
            x_BTD = layer(x_BTD, cross_kv=cross_kvs[i], self_mask=self_mask,
                          cross_mask=cross_mask, cache=cache, beams=beams)
        return x_BTD if self.final_norm is None else self.final_norm(x_BTD)


@dataclass
class Memory:
    """The encoder output and which source positions are padding."""

    states_BSD: Tensor
    src_is_pad_BS: Tensor


class DecoderCache:
    """State of incremental decoding: cross-attention keys/values, computed once per source, and
    one self-attention KVCache per layer. With beams, the decoder's rows are `beams` hypotheses
    per source; only the self-attention caches move when hypotheses do."""

    def __init__(self, cross_kvs: list[tuple[Tensor, Tensor]], cross_mask: Tensor, n_layers: int,
                 beams: int = 1, kv_dtype: torch.dtype | None = None,
                 pre_softmax_DV: Callable[[], Tensor] | None = None):
        """kv_dtype: keep every key and value (cross and self) in that dtype. pre_softmax_DV:
        makes the pre-softmax weight transposed (see Transformer.pre_softmax), at the first
        step (a cache merged into another never makes it), or None."""
        self._make_pre_softmax_DV = pre_softmax_DV
        self._pre_softmax_DV: Tensor | None = None
        self.cross_kvs = cross_kvs if kv_dtype is None else \
            [(k.to(kv_dtype), v.to(kv_dtype)) for k, v in cross_kvs]
        self.cross_mask = cross_mask
        self.beams = beams
        self.self_kv = [KVCache(kv_dtype) for _ in range(n_layers)]
        # (B,) the cached position where each row's output begins, once rows have joined
        # later than others (`merge`); None while all begin at 0
        self.first_B: Tensor | None = None

    @property
    def pre_softmax_DV(self) -> Tensor | None:
        if self._pre_softmax_DV is None and self._make_pre_softmax_DV is not None:
            self._pre_softmax_DV = self._make_pre_softmax_DV()
        return self._pre_softmax_DV

    def __len__(self) -> int:
        """Number of target positions decoded so far (by the rows decoding longest)."""
        return len(self.self_kv[0])

    def positions(self) -> int | Tensor:
        """The position of the next target token: one for all rows, or (B,) one per row."""
        return len(self) if self.first_B is None else len(self) - self.first_B

    def step_mask(self) -> Tensor | None:
        """(B, 1, 1, len + 1) the keys a row's next position may attend to, its own output's;
        None where every row may attend to all."""
        if self.first_B is None:
            return None
        keys_L = torch.arange(len(self) + 1, device=self.first_B.device)
        return (keys_L >= self.first_B[:, None])[:, None, None, :]

    def merge(self, other: DecoderCache) -> None:
        """Take in the rows of `other`, a new cache of other sources with nothing decoded yet:
        their outputs begin at the next position (continuous batching: sentences join a
        running search). Sources are padded to the longer of the two, and masked."""
        if len(other) or other.beams != self.beams:
            raise ValueError("a merged cache must be new and have as many rows per source")
        rows, new_rows = (c.cross_mask.size(0) * c.beams for c in (self, other))
        first_B = self.first_B if self.first_B is not None else \
            torch.zeros(rows, dtype=torch.long, device=self.cross_mask.device)
        self.first_B = torch.cat([first_B, first_B.new_full((new_rows,), len(self))])
        S = max(self.cross_mask.size(-1), other.cross_mask.size(-1))
        self.cross_kvs = [(_cat_padded(k, k2, S, dim=2), _cat_padded(v, v2, S, dim=2))
                          for (k, v), (k2, v2) in zip(self.cross_kvs, other.cross_kvs,
                                                      strict=True)]
        self.cross_mask = _cat_padded(self.cross_mask, other.cross_mask, S, dim=3)
        for cache in self.self_kv:
            cache.add_rows(new_rows)

    def drop_front(self, m: int) -> None:
        """Forget the first m cached positions, which no row's output holds any more."""
        for cache in self.self_kv:
            cache.drop_front(m)
        if self.first_B is not None:
            self.first_B = self.first_B - m

    def reorder(self, index_B: Tensor, beams: int | None = None) -> None:
        """Row i now continues the hypothesis that was in row index_B[i] (same sentence).
        beams: the rows per source from now on, where that changes (beam search's first step
        turns each sentence's one row into beam_size)."""
        for cache in self.self_kv:
            cache.reorder(index_B)
        if self.first_B is not None:
            self.first_B = self.first_B[index_B]
        if beams is not None:
            self.beams = beams

    def keep_sources(self, index_A: Tensor) -> None:
        """Keep only sources index_A (and their `beams` rows each): finished sentences leave.
        Where sentences joined (`merge`), source positions that only the leaving ones had are
        dropped too."""
        S = self.cross_mask.size(-1)
        if self.first_B is not None and len(index_A):
            S = int(self.cross_mask[index_A].sum(-1).max())  # sources are padded at the end
        self.cross_kvs = [(k[:, :, :S].index_select(0, index_A),
                           v[:, :, :S].index_select(0, index_A)) for k, v in self.cross_kvs]
        self.cross_mask = self.cross_mask[..., :S].index_select(0, index_A)
        beam_A1 = torch.arange(self.beams, device=index_A.device)[None, :]
        self.reorder((index_A[:, None] * self.beams + beam_A1).view(-1))


def _cat_padded(x: Tensor, y: Tensor, size: int, *, dim: int) -> Tensor:
    """x and y concatenated along rows, each first padded with zeros (False) along `dim` to
    `size`."""
    def padded(t: Tensor) -> Tensor:
        if t.size(dim) == size:
            return t
        shape = list(t.shape)
        shape[dim] = size - t.size(dim)
        return torch.cat([t, t.new_zeros(shape)], dim=dim)

    return torch.cat([padded(x), padded(y)])


class Transformer(nn.Module):
    """Encoder-decoder Transformer (Figure 1) over one shared vocabulary."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        tgt_tokens = embedding(cfg.tgt_vocab_size, cfg.d_model)
        if cfg.weight_tying in ("three_way", "embeddings"):  # §3.4: one matrix for both
            src_tokens = tgt_tokens
        else:
            src_tokens = embedding(cfg.vocab_size, cfg.d_model)
        self.src_embed = Embeddings(cfg, src_tokens, cfg.source_word_dropout)
        self.tgt_embed = Embeddings(cfg, tgt_tokens, cfg.target_word_dropout)
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        # the pre-softmax linear
        self.generator = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=cfg.output_bias)
        self.init_weights()
        self.tie_weights()

    def tie_weights(self) -> None:
        """The pre-softmax linear shares the target embedding's matrix (§3.4) where
        cfg.weight_tying says so (the source side shares the embedding module itself)."""
        if self.cfg.weight_tying in ("three_way", "decoder"):
            self.generator.weight = self.tgt_embed.tokens.weight

    def init_weights(self) -> None:
        """The paper does not state an initialisation; this is its code's (tensor2tensor v1.0)
        and fairseq's: Glorot uniform for projections (W^Q, W^K, W^V with gain
        cfg.qkv_init_gain, 1/sqrt(2): one fused matrix for the three, ModelConfig says why),
        zero biases, N(0, d_model^-0.5) for embeddings (so that scaled by sqrt(d_model) they
        have unit variance), LayerNorm's gain 1 and bias 0."""
        if self.generator.weight.is_meta:
            return  # nothing to draw
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=self.cfg.d_model**-0.5)
        with torch.no_grad():  # Glorot with gain g is g x Glorot: the same random draws
            for module in self.modules():
                if isinstance(module, MultiHeadAttention):
                    for projection, gain in zip((module.w_q, module.w_k, module.w_v),
                                                self.qkv_init_gains(module), strict=True):
                        projection.weight.mul_(gain)

    def qkv_init_gains(self, attention: MultiHeadAttention) -> tuple[float, float, float]:
        """The Glorot gains of `attention`'s W^Q, W^K, W^V (cfg.qkv_init_gain,
        cfg.cross_attention_init). tensor2tensor v1.0's encoder-decoder attention: q at gain 1,
        k and v as slices of one Glorot matrix of width h d_k + h d_v."""
        cross = self.cfg.cross_attention_init == "tensor2tensor_v1" and any(
            attention is layer.cross_attn for layer in self.decoder.layers)
        if not cross:
            return (self.cfg.qkv_init_gain,) * 3
        d_in, d_k, d_v = attention.w_k.in_features, attention.w_k.out_features, \
            attention.w_v.out_features
        return (1.0, math.sqrt((d_in + d_k) / (d_in + d_k + d_v)),
                math.sqrt((d_in + d_v) / (d_in + d_k + d_v)))

    def encode(self, src_BS: Tensor) -> Memory:
        """Source ids (B, S), padded with pad_id -> Memory with states (B, S, D)."""
        src_is_pad_BS = src_BS.eq(self.cfg.pad_id)
        states_BSD = self.encoder(self.src_embed(src_BS), padding_mask(src_is_pad_BS))
        return Memory(states_BSD, src_is_pad_BS)

    def cross_kvs(self, memory: Memory) -> list[tuple[Tensor, Tensor]]:
        return [layer.cross_attn.project_kv(memory.states_BSD) for layer in self.decoder.layers]

    def new_cache(self, memory: Memory, beams: int = 1,
                  kv_dtype: torch.dtype | None = None) -> DecoderCache:
        """An empty decoding cache for `memory`, for `beams` target rows per source (rows
        b * beams .. b * beams + beams - 1 continue source b); projects the cross-attention
        keys/values once and, without autograd, copies the pre-softmax weight transposed
        (`pre_softmax`) at the first step. kv_dtype: keep keys and values in it (attention
        then runs in it)."""
        weight_DV = None
        if not torch.is_grad_enabled() and isinstance(self.generator, nn.Linear):
            dtype, weight = matmul_dtype(memory.states_BSD), self.generator.weight
            weight_DV = lambda: weight.detach().t().to(dtype).contiguous()  # noqa: E731
        return DecoderCache(self.cross_kvs(memory), padding_mask(memory.src_is_pad_BS),
                            len(self.decoder.layers), beams, kv_dtype, weight_DV)

    def decode(self, tgt_BT: Tensor, memory: Memory, cache: DecoderCache | None = None, *,
               project: bool = True) -> Tensor:
        """Target ids (B, T) starting with bos_id -> logits (B, T, V) of the next tokens
        (project=False: the decoder's output (B, T, D) before the pre-softmax linear). With a
        cache, tgt holds only the positions after those already decoded into it."""
        start = 0 if cache is None else len(cache)
        T = tgt_BT.size(1)
        if cache is not None and cache.first_B is not None and T > 1:
            raise ValueError("a cache that rows joined (merge) decodes one position at a time")
        # (T, start + T); one step: none, or the positions of each row's own output
        self_mask = cache.step_mask() if cache is not None and T == 1 else \
            causal_mask(T, start, device=tgt_BT.device)
        if cache is None:
            tgt_is_pad_BT = tgt_BT.eq(self.cfg.pad_id)
            tgt_is_pad_BT[:, 0] = False  # position 0 always holds BOS, even if bos_id == pad_id
            self_mask = self_mask[None, None] & ~tgt_is_pad_BT[:, None, None, :]  # (B, 1, T, T)
            cross_kvs, cross_mask = self.cross_kvs(memory), padding_mask(memory.src_is_pad_BS)
        else:
            cross_kvs, cross_mask = cache.cross_kvs, cache.cross_mask
        x_BTD = self.decoder(
            self.tgt_embed(tgt_BT, start if cache is None else cache.positions()),
            cross_kvs=cross_kvs, self_mask=self_mask,
            cross_mask=cross_mask, caches=None if cache is None else cache.self_kv,
            beams=1 if cache is None else cache.beams,
        )
        if not project:
            return x_BTD
        # (B, T, V); the softmax is in the loss / the search
        return self.pre_softmax(x_BTD, None if cache is None else cache.pre_softmax_DV)

    def pre_softmax(self, x_BTD: Tensor, weight_DV: Tensor | None = None) -> Tensor:
        """The pre-softmax linear (§3.4). Incremental decoding passes its cache's contiguous
        transposed copy of the weight, made once a batch by new_cache: x @ W^T then reads W^T
        row by row (benchmarks/results/archive/speed-decode). The copy
        lives no longer than its batch: a copy kept on the model went stale after updates by
        fused Adam, which does not bump the weight's version counter."""
        if weight_DV is None:  # autograd, no cache, or an int8 copy's quantised layer
            return self.generator(x_BTD)
        logits_BTV = x_BTD.to(weight_DV.dtype) @ weight_DV
        return logits_BTV if self.generator.bias is None else logits_BTV + self.generator.bias

    def forward(self, src_BS: Tensor, tgt_BT: Tensor, *, project: bool = True) -> Tensor:
        """Teacher forcing: source (B, S) and shifted target (B, T) -> logits (B, T, V); with
        project=False the states (B, T, D) for a loss that applies the pre-softmax linear itself
        (train.label_smoothed_nll)."""
        return self.decode(tgt_BT, self.encode(src_BS), project=project)
