"""Token-budget batches (§5.1: "sentence pairs were batched together by approximate sequence
length", about 25,000 source and 25,000 target tokens a batch)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .text import DataError


@dataclass(frozen=True)
class ShapeBuckets:
    """Not in the paper (train.shape_buckets): every batch padded to one of a few shapes, so
    that a compiled step (and a CUDA graph) is made once per shape instead of once per batch.
    A batch's sentences and targets are padded to the first of `lengths` that holds its longest
    side, and its rows to as many as max_tokens allows at that length (all-padding rows add
    nothing to the loss). Like fairseq's --num-batch-buckets (for TPUs)."""

    lengths: np.ndarray  # (N,) ascending; the last holds the longest sentence of the data
    max_tokens: int
    multiple: int = 8  # lengths are multiples of it (tensor cores', AMX's tile sizes)

    @classmethod
    def of(cls, src_lengths: np.ndarray, tgt_lengths: np.ndarray, *, n: int, max_tokens: int,
           limit: int) -> ShapeBuckets:
        """n buckets at quantiles of the sentences' longer sides, rounded up to a multiple of 8
        but not past `limit` (the model's positions) where the sentences fit below it."""
        longest = np.maximum(src_lengths, tgt_lengths)
        edges = np.percentile(longest, np.linspace(0, 100, n + 1)[1:], method="higher")
        return cls(np.unique([_round_up(int(e), cls.multiple, limit) for e in edges]),
                   max_tokens)

    def length(self, longest: int) -> int:
        """The padded length of a batch whose longest side has `longest` tokens: the first
        bucket that holds it (beyond the last, e.g. after BPE-dropout, the next multiple)."""
        i = int(np.searchsorted(self.lengths, longest))
        return int(self.lengths[i]) if i < len(self.lengths) else \
            _round_up(longest, self.multiple, longest)

    def shape(self, longest: int) -> tuple[int, int]:
        """(rows, length) of a batch whose longest side has `longest` tokens."""
        length = self.length(longest)
        return max(1, self.max_tokens // length), length


def _round_up(n: int, multiple: int, limit: int) -> int:
    """n rounded up to a multiple of `multiple`, but not above max(limit, n)."""
    return max(n, min(-(-n // multiple) * multiple, limit))


def token_batches(src_lengths: np.ndarray, tgt_lengths: np.ndarray, *, max_tokens: int,
                  seed: int, epoch: int, shuffle: bool = True,
                  buckets: ShapeBuckets | None = None) -> list[np.ndarray]:
    """Sentence indices grouped into batches whose padded size B * max length stays within
    max_tokens on both sides (with `buckets`: B * the bucket length). Sentences are sorted by
    length (ties broken at random) so padding stays small; the batch order is shuffled. Same
    (seed, epoch), same batches."""
    rng = np.random.default_rng([seed, epoch])
    n = len(src_lengths)
    order = rng.permutation(n) if shuffle else np.arange(n)
    order = order[np.lexsort((src_lengths[order], tgt_lengths[order]))]
    batches, start, longest_src, longest_tgt = [], 0, 0, 0
    for pos, i in enumerate(order):
        s, t = int(src_lengths[i]), int(tgt_lengths[i])
        if max(s, t) > max_tokens:
            raise DataError(f"sentence {i} ({s} source / {t} target tokens) does not fit in "
                            f"max_tokens={max_tokens}")
        longest_src, longest_tgt = max(longest_src, s), max(longest_tgt, t)
        longest = max(longest_src, longest_tgt)
        padded = buckets.length(longest) if buckets else longest
        if pos > start and (pos + 1 - start) * padded > max_tokens:
            batches.append(order[start:pos])
            start, longest_src, longest_tgt = pos, s, t
    if start < n:
        batches.append(order[start:])
    if shuffle:
        rng.shuffle(batches)
    return batches

