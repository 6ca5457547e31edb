"""Marian's translations against ours, line by line (marian_parity.sh's OUT): how many are
identical, greedy and beam 4, with the first differing lines, and each side's sacreBLEU.

    python benchmarks/compat/compare_outputs.py OUT REFERENCE > parity.json
"""

import json
import sys
from pathlib import Path

from transformer_mt.evaluation.bleu import sacrebleu_scores


def main(out: Path, reference: Path) -> None:
    refs = reference.read_text(encoding="utf-8").splitlines()
    result = {}
    for search in ("greedy", "beam4"):
        marian, ours = ((out / f"{who}.{search}.de").read_text(encoding="utf-8").splitlines()
                        for who in ("marian", "ours"))
        differing = [i for i, (a, b) in enumerate(zip(marian, ours, strict=True)) if a != b]
        result[search] = {
            "sentences": len(marian), "identical": len(marian) - len(differing),
            "marian_sacrebleu": round(sacrebleu_scores(marian, refs)[0], 2),
            "ours_sacrebleu": round(sacrebleu_scores(ours, refs)[0], 2),
            "first_differences": [{"line": i + 1, "marian": marian[i], "ours": ours[i]}
                                  for i in differing[:5]]}
    print(json.dumps(result, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
