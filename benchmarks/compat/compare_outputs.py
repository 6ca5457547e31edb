"""Marian's translations against ours, line by line (marian_parity.sh's OUT): how many are
identical, greedy and beam 4, with the differing lines, and each side's sacreBLEU; and the
4-best lists of the first 100 sentences: how many are identical in order (text, the end's
whitespace aside: Marian keeps a trailing "▁" piece's space, Hugging Face's tokenizer and ours
strip it), and the largest difference between the scores of the same hypothesis.

    python benchmarks/compat/compare_outputs.py OUT REFERENCE > parity.json
"""

import json
import sys
from pathlib import Path

from transformer_mt.evaluation.bleu import sacrebleu_scores


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def marian_nbest(path: Path) -> list[list[tuple[str, float]]]:
    """Marian's n-best file: `i ||| text ||| F0= log P ||| normalized score` lines."""
    lists: list[list[tuple[str, float]]] = []
    for line in lines(path):
        index, text, _, score = (field.strip() for field in line.split("|||"))
        if int(index) == len(lists):
            lists.append([])
        lists[int(index)].append((text, float(score)))
    return lists


def our_nbest(path: Path) -> list[list[tuple[str, float]]]:
    """`translate --n-best`'s file: `index<TAB>score<TAB>text` lines."""
    lists: list[list[tuple[str, float]]] = []
    for line in lines(path):
        index, score, text = line.split("\t", 2)
        if int(index) == len(lists):
            lists.append([])
        lists[int(index)].append((text.strip(), float(score)))
    return lists


def compare_nbest(out: Path) -> dict:
    marian, ours = marian_nbest(out / "marian.nbest4.txt"), our_nbest(out / "ours.nbest4.txt")
    same = [i for i, (a, b) in enumerate(zip(marian, ours, strict=True))
            if [t for t, _ in a] == [t for t, _ in b]]
    gaps = [abs(sa - sb) for i in same for (_, sa), (_, sb) in zip(marian[i], ours[i],
                                                                    strict=True)]
    return {"sentences": len(marian), "identical_lists": len(same),
            "max_score_difference": max(gaps, default=None),
            "differing": [{"line": i + 1, "marian": marian[i], "ours": ours[i]}
                          for i in range(len(marian)) if i not in same][:5]}


def main(out: Path, reference: Path) -> None:
    refs = lines(reference)
    result = {}
    for search in ("greedy", "beam4"):
        marian, ours = (lines(out / f"{who}.{search}.de") for who in ("marian", "ours"))
        differing = [i for i, (a, b) in enumerate(zip(marian, ours, strict=True)) if a != b]
        result[search] = {
            "sentences": len(marian), "identical": len(marian) - len(differing),
            "identical_but_trailing_space": sum(marian[i].rstrip() == ours[i]
                                                for i in differing),
            "marian_sacrebleu": round(sacrebleu_scores(marian, refs)[0], 2),
            "ours_sacrebleu": round(sacrebleu_scores(ours, refs)[0], 2),
            "differences": [{"line": i + 1, "marian": marian[i], "ours": ours[i]}
                            for i in differing[:10]]}
    result["nbest4_first_100"] = compare_nbest(out)
    print(json.dumps(result, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
