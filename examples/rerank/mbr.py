"""Minimum-Bayes-risk choice among a beam's finished hypotheses (not in the paper).

Beam search returns the hypothesis the model ranks first. MBR decoding (Kumar & Byrne, 2004;
Freitag et al., 2022) returns instead the one that agrees most, by a translation metric, with
the others, each weighted by its probability under the model: the candidates stand in for the
model's distribution over translations, and the expected metric of hypothesis h is

    E[u(h)] = sum_c p(c) u(h, c),   p(c) = softmax over the candidates of their beam scores,

with u sentence-level BLEU or chrF from sacrebleu on the detokenised text (h scored against c
as its reference). Beam scores are log P(Y|X) / lp(Y), the ranking of §6.1.

Usage: mbr.py --nbest FILE (from `transformer-mt translate --n-best N`) [--utility bleu|chrf]
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Sequence
from pathlib import Path

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


def read_nbest(path: Path) -> list[list[tuple[float, str]]]:
    """`translate --n-best` output: 'index<TAB>score<TAB>text' lines, grouped by sentence."""
    groups: list[list[tuple[float, str]]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        parts = line.split("\t", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            raise ValueError(f"{path}:{number}: not an 'index<TAB>score<TAB>text' line")
        index, score, text = int(parts[0]), float(parts[1]), parts[2]
        if index == len(groups):
            groups.append([])
        elif index != len(groups) - 1:
            raise ValueError(f"{path}:{number}: sentence {index} out of order")
        groups[index].append((score, text))
    return groups


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Choose each sentence's translation from a "
                                     "`transformer-mt translate --n-best` list by MBR.")
    parser.add_argument("--nbest", required=True, type=Path, help="translate --n-best output")
    parser.add_argument("--utility", choices=UTILITIES, default="bleu")
    parser.add_argument("--output", type=Path, help="the chosen translations (default: stdout)")
    args = parser.parse_args(argv)
    chosen = []
    for group in read_nbest(args.nbest):
        scores, texts = [s for s, _ in group], [t for _, t in group]
        chosen.append(texts[mbr_order(texts, scores, args.utility)[0]])
    lines = "".join(text + "\n" for text in chosen)
    if args.output:
        args.output.write_text(lines, encoding="utf-8")
    else:
        sys.stdout.write(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
