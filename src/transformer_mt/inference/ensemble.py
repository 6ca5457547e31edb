"""Ensembles: several models over one vocabulary decode as one, the next-token distribution being
the average of theirs, P(y | ...) = 1/M sum_m P_m(y | ...), as in fairseq, Marian and the
ensembles the paper compares with in Table 2. The search (decoding.py) sees one model: `encode`,
`new_cache` and `decode` here run every member and combine."""

# B batch  T target len  V vocab  M members

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..model.transformer import DecoderCache, Memory, Transformer


class EnsembleCache:
    """One DecoderCache per member, moved together."""

    def __init__(self, caches: list[DecoderCache]):
        self.caches = caches

    def __len__(self) -> int:
        return len(self.caches[0])

    def reorder(self, index_B: Tensor, beams: int | None = None) -> None:
        for cache in self.caches:
            cache.reorder(index_B, beams)

    def keep_sources(self, index_A: Tensor) -> None:
        for cache in self.caches:
            cache.keep_sources(index_A)

    def merge(self, other: EnsembleCache) -> None:
        for cache, theirs in zip(self.caches, other.caches, strict=True):
            cache.merge(theirs)

    def drop_front(self, m: int) -> None:
        for cache in self.caches:
            cache.drop_front(m)


class Ensemble(nn.Module):
    """Models with the same vocabulary and special ids, decoded together. `cfg` is the first
    member's, with max_positions the smallest of theirs."""

    def __init__(self, members: list[Transformer]):
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one model")
        first = members[0].cfg
        for i, member in enumerate(members[1:], start=2):
            for field in ("vocab_size", "tgt_vocab_size", "pad_id", "bos_id", "eos_id"):
                if getattr(member.cfg, field) != getattr(first, field):
                    raise ValueError(f"ensemble member {i} has {field} "
                                     f"{getattr(member.cfg, field)}, member 1 has "
                                     f"{getattr(first, field)}")
        self.members = nn.ModuleList(members)
        self.cfg: ModelConfig = dataclasses.replace(
            first, max_positions=min(m.cfg.max_positions for m in members))

    def encode(self, src_BS: Tensor) -> list[Memory]:
        return [member.encode(src_BS) for member in self.members]

    def new_cache(self, memories: list[Memory], beams: int = 1,
                  kv_dtype: torch.dtype | None = None) -> EnsembleCache:
        return EnsembleCache([member.new_cache(memory, beams, kv_dtype)
                              for member, memory in zip(self.members, memories, strict=True)])

    def decode(self, tgt_BT: Tensor, memories: list[Memory],
               cache: EnsembleCache | None = None) -> Tensor:
        """log of the members' mean next-token probabilities (B, T, V), in fp32: normalised
        already, so the search's log_softmax leaves it unchanged."""
        caches = cache.caches if cache is not None else [None] * len(self.members)
        logp_MBTV = torch.stack([
            torch.log_softmax(member.decode(tgt_BT, memory, c).float(), dim=-1)
            for member, memory, c in zip(self.members, memories, caches, strict=True)])
        return torch.logsumexp(logp_MBTV, dim=0) - math.log(len(self.members))
