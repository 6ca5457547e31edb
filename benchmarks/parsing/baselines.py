"""Parsing baselines scored by the same scorer as our parser (research/evalb.py): right-branching
trees, every constituent labelled S (labelled scores) and the same trees scored unlabelled, on
the Treebank sample's dev and test trees.

    python benchmarks/parsing/baselines.py --data ../shared/data \\
        --out benchmarks/results/parsing-baselines/results.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from transformer_mt.research.evalb import EvalbParams, score_files, summary
from transformer_mt.research.trees import PLACEHOLDER, PUNCTUATION_TAGS, Tree, parsing_pair


def right_branching(words: list[str]) -> Tree:
    """(S w1 (S w2 (S ... (S wn-1 wn)))), pre-terminals XX (punctuation tagged from the word)."""
    leaves = [Tree(PUNCTUATION_TAGS.get(w, PLACEHOLDER), word=w) for w in words]
    tree = leaves[-1] if len(leaves) == 1 else Tree("S", leaves[-2:])
    for leaf in reversed(leaves[:-2]):
        tree = Tree("S", [leaf, tree])
    return tree if tree.word is None else Tree("S", [tree])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp())
    results = {}
    for split in ("dev", "test"):
        lines = (args.data / "ptb-sample" / f"{split}.trees").read_text().splitlines()
        pairs = [parsing_pair(line) for line in lines]
        gold, test = work / f"{split}.gold", work / f"{split}.rb"
        gold.write_text("".join(f"{tree}\n" for _, _, tree in pairs))
        test.write_text("".join(f"{right_branching(w.split())}\n" for w, _, _ in pairs))
        for name, params in (("labelled", EvalbParams()), ("unlabelled",
                                                            EvalbParams(labeled=False))):
            found = summary(score_files(gold, test, params))
            results[f"{split} right-branching {name}"] = {
                k: round(v, 2) if isinstance(v, float) else v for k, v in found.items()}
    report = {"question": "what do trivial parses score with our EVALB-compatible scorer",
              "results": results,
              "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                       capture_output=True, text=True).stdout.strip()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for name, r in results.items():
        print(f"{name:34s} F1 {r['f1']:6.2f}  R {r['recall']:6.2f}  P {r['precision']:6.2f}  "
              f"valid {r['valid']}/{r['sentences']}")


if __name__ == "__main__":
    main()
