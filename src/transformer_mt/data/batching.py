"""Token-budget batches (§5.1: "sentence pairs were batched together by approximate sequence
length", about 25,000 source and 25,000 target tokens a batch)."""

from __future__ import annotations

import numpy as np

from .text import DataError


def token_batches(src_lengths: np.ndarray, tgt_lengths: np.ndarray, *, max_tokens: int,
                  seed: int, epoch: int, shuffle: bool = True) -> list[np.ndarray]:
    """Sentence indices grouped into batches whose padded size B * max length stays within
    max_tokens on both sides. Sentences are sorted by length (ties broken at random) so padding
    stays small; the batch order is shuffled. Same (seed, epoch), same batches."""
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
        if (pos + 1 - start) * max(longest_src, longest_tgt) > max_tokens:
            batches.append(order[start:pos])
            start, longest_src, longest_tgt = pos, s, t
    if start < n:
        batches.append(order[start:])
    if shuffle:
        rng.shuffle(batches)
    return batches

