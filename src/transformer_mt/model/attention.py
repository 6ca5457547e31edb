"""Multi-head attention (§3.2), the key/value cache of incremental decoding, and the masks.

Boolean masks mean "may attend" (True = the query may look at that key), as
`F.scaled_dot_product_attention` reads them. Padding indicators are named `*_is_pad`.
"""

# B batch  S source len  T target (query) len  L key len  D d_model  H heads  K d_k  V d_v

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .dropout import dropout


def reference_attention(q_BHTK: Tensor, k_BHLK: Tensor, v_BHLV: Tensor, mask: Tensor | None):
    """softmax(Q K^T / sqrt(d_k)) V, written out (eq. 1). The fast path is tested against it."""
    scores_BHTL = q_BHTK @ k_BHLK.transpose(-2, -1) / math.sqrt(q_BHTK.size(-1))
    if mask is not None:
        scores_BHTL = scores_BHTL.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores_BHTL, dim=-1) @ v_BHLV


def attention(q_BHTK: Tensor, k_BHLK: Tensor, v_BHLV: Tensor, mask: Tensor | None,
              dropout_p: float = 0.0) -> Tensor:
    """Eq. (1) with dropout on the weights: torch's fused `scaled_dot_product_attention`, or
    written out where that is faster (`written_out`)."""
    if written_out(q_BHTK):
        return written_out_attention(q_BHTK, k_BHLK, v_BHLV, mask, dropout_p)
    return F.scaled_dot_product_attention(q_BHTK, k_BHLK, v_BHLV, attn_mask=mask,
                                          dropout_p=dropout_p)


def written_out_attention(q_BHTK: Tensor, k_BHLK: Tensor, v_BHLV: Tensor, mask: Tensor | None,
                          dropout_p: float = 0.0) -> Tensor:
    """Eq. (1) in matrix products, the softmax in fp32. The weights' dropout is the model's
    (dropout.py), cheaper than F.dropout's (benchmarks/results/archive/speed-tiny-step)."""
    scores_BHTL = (q_BHTK @ k_BHLK.transpose(-2, -1)).mul_(1 / math.sqrt(q_BHTK.size(-1)))
    if mask is not None:  # an additive -inf bias: adding is faster here than masked_fill
        bias = torch.zeros(mask.shape, dtype=scores_BHTL.dtype, device=mask.device)
        scores_BHTL = scores_BHTL + bias.masked_fill_(~mask, float("-inf"))
    weights_BHTL = torch.softmax(scores_BHTL, dim=-1, dtype=torch.float32).to(v_BHLV.dtype)
    return dropout(weights_BHTL, dropout_p) @ v_BHLV


def written_out(q_BHTK: Tensor) -> bool:
    """Whether eq. (1) is written out instead of fused: on CPUs, in bf16 training (torch's
    fused CPU backward is slow there) and, without autograd, from 1,024 query rows (batch x
    heads x queries) in fp32 and 256 in bf16, where the written-out products ran faster;
    fused for fewer rows, in fp32 training and on GPUs. Measured by
    `benchmarks/speed/attention_paths.py` (benchmarks/results/archive/speed-kv-tight,
    archive/speed-train-bf16attn); the best choice may differ by CPU."""
    if q_BHTK.device.type != "cpu":
        return False
    if q_BHTK.requires_grad:
        return q_BHTK.dtype == torch.bfloat16
    B, H, T, _ = q_BHTK.shape
    return B * H * T >= (256 if q_BHTK.dtype == torch.bfloat16 else 1024)


def attention_kernels(device: torch.device) -> contextlib.AbstractContextManager:
    """The fused attention kernels allowed on `device`: on CUDA not cuDNN's, which plans each
    new shape on the CPU, and token-budget batches and decoding steps are new shapes all the
    time (benchmarks/results/gpu-training-throughput). Elsewhere torch's own choice."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                        SDPBackend.MATH])


def padding_mask(is_pad_BL: Tensor) -> Tensor:
    """Key mask (B, 1, 1, L) from padding indicators. A row that is all padding may attend to
    every key, so an empty sentence gives finite (ignored) outputs instead of NaN."""
    may_attend_BL = ~is_pad_BL | is_pad_BL.all(dim=-1, keepdim=True)
    return may_attend_BL[:, None, None, :]


def causal_mask(t: int, offset: int = 0, device: torch.device | None = None) -> Tensor:
    """(T, offset + T): query i (at absolute position offset + i) may attend to keys <= it."""
    q_pos = torch.arange(offset, offset + t, device=device)[:, None]
    k_pos = torch.arange(offset + t, device=device)[None, :]
    return k_pos <= q_pos


class KVCache:
    """Keys and values of one self-attention layer for the positions decoded so far. Appending a
    step copies only the new position, into a buffer that grows by doubling. Row changes (beam
    search moving hypotheses between rows, finished sentences leaving, new sentences joining,
    positions no row needs any more) are noted, and the next `extend` applies them all in one
    copy of the kept rows' positions into a new buffer with one position to spare, so that
    attention reads keys and values that are contiguous (benchmarks/results/archive/
    speed-kv-tight). dtype: kept in that dtype (e.g. bfloat16: half the bytes to move) instead
    of the projections'."""

    def __init__(self, dtype: torch.dtype | None = None):
        self.k_BHCK: Tensor | None = None  # C: capacity >= length
        self.v_BHCV: Tensor | None = None
        self.length = 0
        self.dtype = dtype
        # Changes not applied yet: the buffer row each row takes (-1: a new row of zeros)...
        self.rows_B: Tensor | None = None
        self.new_rows = False
        self.front = 0  # ... and the positions at the front that are dropped

    def __len__(self) -> int:
        return self.length

    def extend(self, k_BHTK: Tensor, v_BHTV: Tensor) -> tuple[Tensor, Tensor]:
        """Append the new positions; return keys and values of all positions so far."""
        if self.dtype is not None:
            k_BHTK, v_BHTV = k_BHTK.to(self.dtype), v_BHTV.to(self.dtype)
        if self.rows_B is not None or self.front:
            rows_B = self._rows()
            self.k_BHCK, self.v_BHCV = (self._changed(x, rows_B) for x in (self.k_BHCK,
                                                                           self.v_BHCV))
            self.rows_B, self.new_rows, self.front = None, False, 0
        end = self.length + k_BHTK.size(2)
        if self.k_BHCK is None or end > self.k_BHCK.size(2):
            capacity = max(2 * end, 16)
            self.k_BHCK = self._grown(self.k_BHCK, like=k_BHTK, capacity=capacity)
            self.v_BHCV = self._grown(self.v_BHCV, like=v_BHTV, capacity=capacity)
        self.k_BHCK[:, :, self.length : end] = k_BHTK
        self.v_BHCV[:, :, self.length : end] = v_BHTV
        self.length = end
        return self.k_BHCK[:, :, :end], self.v_BHCV[:, :, :end]

    def _grown(self, old_BHCX: Tensor | None, *, like: Tensor, capacity: int) -> Tensor:
        """A new buffer of `capacity` positions holding old's filled ones, shaped like `like`
        otherwise."""
        new_BHCX = like.new_empty(like.size(0), like.size(1), capacity, like.size(3))
        if old_BHCX is not None:
            new_BHCX[:, :, : self.length] = old_BHCX[:, :, : self.length]
        return new_BHCX

    def _changed(self, old_BHCX: Tensor, rows_B: Tensor) -> Tensor:
        """The noted row changes applied (row i takes old row rows_B[i]): a buffer of the
        rows' kept positions and one to spare."""
        kept = old_BHCX[:, :, self.front : self.front + self.length]
        new_BHCX = old_BHCX.new_empty(len(rows_B), old_BHCX.size(1), self.length + 1,
                                      old_BHCX.size(3))
        torch.index_select(kept, 0, rows_B.clamp(min=0), out=new_BHCX[:, :, : self.length])
        if self.new_rows:
            new_BHCX[:, :, : self.length].index_fill_(0, (rows_B < 0).nonzero().view(-1), 0)
        return new_BHCX

    def _rows(self) -> Tensor:
        """The buffer row each row takes, with the changes noted so far."""
        if self.rows_B is not None:
            return self.rows_B
        return torch.arange(self.k_BHCK.size(0), device=self.k_BHCK.device)

    def reorder(self, index_B: Tensor) -> None:
        """Row i now holds what row index_B[i] held."""
        if self.k_BHCK is not None:
            self.rows_B = self._rows()[index_B]

    def add_rows(self, n: int) -> None:
        """n rows more, after the others, whose positions so far hold zeros (sentences that
        join a running search; their attention masks those positions)."""
        if self.k_BHCK is not None:
            rows_B = self._rows()
            self.rows_B = torch.cat([rows_B, rows_B.new_full((n,), -1)])
            self.new_rows = True

    def drop_front(self, m: int) -> None:
        """Forget the first m positions of every row (no row attends to them any more)."""
        self.front += m
        self.length -= m


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K,
    V W_i^V) (§3.2.2). d_k and d_v may differ from d_model / h (Table 3 rows A, B).

    Keys and values are projected by `project_kv` so that callers can cache them: cross-attention
    projects the encoder output once per source, self-attention appends one position per step.
    """

    def __init__(self, *, d_model: int, n_heads: int, d_k: int, d_v: int, dropout: float = 0.0,
                 bias: bool = False):
        super().__init__()
        self.n_heads, self.d_k, self.d_v = n_heads, d_k, d_v
        self.dropout = dropout  # on attention weights; not in the paper, default 0
        self.w_q = nn.Linear(d_model, n_heads * d_k, bias=bias)
        self.w_k = nn.Linear(d_model, n_heads * d_k, bias=bias)
        self.w_v = nn.Linear(d_model, n_heads * d_v, bias=bias)
        self.w_o = nn.Linear(n_heads * d_v, d_model, bias=bias)
        # Not in the paper: W^Q, W^K and W^V stacked into one layer by an inference copy
        # (inference/quantize.py), so that self-attention projects in one product; None here
        self.w_qkv: nn.Module | None = None

    def project_kv(self, mem_BLD: Tensor) -> tuple[Tensor, Tensor]:
        """Keys (B, H, L, K) and values (B, H, L, V) of the attended-to sequence."""
        return self._heads(self.w_k(mem_BLD), self.d_k), self._heads(self.w_v(mem_BLD), self.d_v)

    def project_qkv(self, x_BTD: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention's queries (B, H, T, K), keys (B, H, T, K) and values (B, H, T, V)
        of x, in one product where `w_qkv` stacks the three projections."""
        if self.w_qkv is None:  # keys and values first: the order that training's gradients
            k_BHTK, v_BHTV = self.project_kv(x_BTD)  # of x were always summed in
            return self._heads(self.w_q(x_BTD), self.d_k), k_BHTK, v_BHTV
        HK = self.n_heads * self.d_k
        q_BTX, k_BTX, v_BTX = self.w_qkv(x_BTD).split([HK, HK, self.n_heads * self.d_v], -1)
        return self._heads(q_BTX, self.d_k), self._heads(k_BTX, self.d_k), \
            self._heads(v_BTX, self.d_v)

    def _heads(self, x_BTX: Tensor, d: int) -> Tensor:
        """(B, T, H * d) -> (B, H, T, d)."""
        B, T, _ = x_BTX.shape
        return x_BTX.view(B, T, self.n_heads, d).transpose(1, 2)

    def forward(self, x_BTD: Tensor, kv: tuple[Tensor, Tensor], mask: Tensor | None,
                q_BHTK: Tensor | None = None) -> Tensor:
        """Attend from x (B, T, D) to projected keys/values `kv` ((B, H, L, K), (B, H, L, V)).
        mask: True = may attend, broadcastable to (B, H, T, L). q_BHTK: x's queries where
        already projected (`project_qkv`). Returns (B, T, D). Keys and values kept in another
        dtype than the queries' (a bf16 decoding cache) set the dtype of eq. (1); W^O gets the
        queries' dtype back."""
        B, T, _ = x_BTD.shape
        k_BHLK, v_BHLV = kv
        if q_BHTK is None:
            q_BHTK = self._heads(self.w_q(x_BTD), self.d_k)
        out_BHTV = attention(q_BHTK.to(k_BHLK.dtype), k_BHLK, v_BHLV, mask,  # §3.2.1, eq. (1)
                             dropout_p=self.dropout if self.training else 0.0).to(q_BHTK.dtype)
        return self.w_o(out_BHTV.transpose(1, 2).reshape(B, T, self.n_heads * self.d_v))
