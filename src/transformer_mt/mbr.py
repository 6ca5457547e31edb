"""Minimum-Bayes-risk choice among a beam's finished hypotheses (not in the paper).

Beam search returns the hypothesis the model ranks first. MBR decoding (Kumar & Byrne, 2004;
Freitag et al., 2022) returns instead the one that agrees most, by a translation metric, with
the others, each weighted by its probability under the model: the candidates stand in for the
model's distribution over translations, and the expected metric of hypothesis h is

    E[u(h)] = sum_c p(c) u(h, c),   p(c) = softmax over the candidates of their beam scores,

with u sentence-level BLEU or chrF from sacrebleu on the detokenised text (h scored against c
as its reference). Beam scores are log P(Y|X) / lp(Y), the ranking of §6.1.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

UTILITIES = ("bleu", "chrf")


@functools.cache
def _metric(utility: str):
    """The sacrebleu metric of `utility`, made once (its sentence_score keeps no state)."""
    if utility not in UTILITIES:
        raise ValueError(f"unknown MBR utility {utility!r}; choose from {', '.join(UTILITIES)}")
    from sacrebleu.metrics import BLEU, CHRF

    return BLEU(effective_order=True) if utility == "bleu" else CHRF()


def expected_utilities(texts: Sequence[str], scores: Sequence[float], utility: str) -> list[float]:
    """E[u(h)] for each candidate h of `texts`, the model's weights a softmax of `scores`."""
    metric = _metric(utility)
    top = max(scores)
    weights = [math.exp(s - top) for s in scores]
    total = sum(weights)
    return [sum(w / total * metric.sentence_score(h, [c]).score
                for c, w in zip(texts, weights, strict=True)) for h in texts]


def mbr_order(texts: Sequence[str], scores: Sequence[float], utility: str) -> list[int]:
    """Indices of the candidates by expected utility, highest first (ties keep beam order)."""
    gains = expected_utilities(texts, scores, utility)
    return sorted(range(len(texts)), key=lambda i: -gains[i])
