"""Does our scorer (research/evalb.py) give EVALB's numbers on real trees?

Gold: every tree of ../shared/data/ptb-sample (3,914, the unlabeled root written TOP, function
tags and -NONE- left for the scorers to handle). Test: each gold tree perturbed at random
(seeded) as a parser would get it wrong: constituents relabelled, removed or added, POS tags
changed, and now and then a word changed or dropped (an error sentence) or the line left empty
(a skipped one). Both scorers read the same files with COLLINS.prm (MAX_ERROR raised, so that
EVALB does not stop early); every sentence's line and both summaries are compared.

    make -C EVALB   # EVALB's source, e.g. from a mirror of any repository vendoring it
    python benchmarks/compat/evalb_parity.py --evalb EVALB/evalb --prm EVALB/COLLINS.prm \\
        --data ../shared/data --out benchmarks/results/evalb-parity/results.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import tempfile
from pathlib import Path

from transformer_mt.research.evalb import EVALB_NAMES, EvalbParams, score_files, summary
from transformer_mt.research.trees import Tree, parse_tree

LABELS = ("NP", "VP", "PP", "S", "SBAR", "ADJP", "ADVP", "PRT", "QP", "WHNP")


def constituents(tree: Tree) -> list[Tree]:
    return [] if tree.word is not None else \
        [tree] + [c for child in tree.children for c in constituents(child)]


def perturb(tree: Tree, rng: random.Random) -> str:
    """One wrong parse of `tree` (a copy), as a line."""
    tree = parse_tree(str(tree))
    for _ in range(rng.randint(0, 4)):
        nodes = constituents(tree)[1:]  # not TOP
        kind = rng.random()
        if kind < 0.3 and nodes:
            rng.choice(nodes).label = rng.choice(LABELS)
        elif kind < 0.55 and nodes:
            node = rng.choice(nodes)
            parent = next(p for p in constituents(tree) if node in p.children)
            at = parent.children.index(node)
            parent.children[at:at + 1] = node.children
        elif kind < 0.8:
            parent = rng.choice(constituents(tree))
            if len(parent.children) >= 2:
                i = rng.randrange(len(parent.children) - 1)
                j = rng.randrange(i + 1, len(parent.children)) + 1
                parent.children[i:j] = [Tree(rng.choice(LABELS), parent.children[i:j])]
        else:
            leaves = [n for n in walk(tree) if n.word is not None]
            rng.choice(leaves).label = rng.choice(("NN", "VB", "JJ", "IN", "DT"))
    for leaf in walk(tree):  # a quote or possessive mark tagged the other way (nk.prm's case)
        if leaf.word == "'" and rng.random() < 0.5:
            leaf.label = "''" if leaf.label == "POS" else "POS"
    line = str(tree)
    roll = rng.random()
    if roll < 0.02:
        return ""
    if roll < 0.04:
        return line.replace(f" {tree.words()[0]})", " WRONG)", 1)
    if roll < 0.06:
        return re.sub(r"\([^\s()]+ [^\s()]+\)", "", line, count=1)
    return line


def walk(tree: Tree):
    yield tree
    for child in tree.children:
        yield from walk(child)


def evalb_lines(program: str, prm: Path, gold: Path, test: Path) -> tuple[list, dict]:
    out = subprocess.run([program, "-p", str(prm), str(gold), str(test)], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    rows = [line.split() for line in out if re.match(r"^\s*\d+\s+\d+\s+[012]\s", line)]
    summaries, current = {}, None
    for line in out:
        if line.startswith("-- "):
            current = summaries.setdefault(line.strip("- "), {})
        elif current is not None and "=" in line:
            key, value = line.split("=")
            current[key.strip()] = float(value)
    return rows, summaries


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--evalb", required=True)
    p.add_argument("--prm", required=True, type=Path, help="EVALB's COLLINS.prm")
    p.add_argument("--data", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = random.Random(args.seed)
    gold_trees = []
    for split in ("train", "dev", "test"):
        for line in (args.data / "ptb-sample" / f"{split}.trees").read_text().splitlines():
            tree = parse_tree(line)
            tree.label = "TOP"  # the unlabeled root
            gold_trees.append(tree)
    work = Path(tempfile.mkdtemp())
    gold, test, prm = work / "gold.txt", work / "test.txt", work / "collins.prm"
    gold.write_text("".join(f"{t}\n" for t in gold_trees))
    test.write_text("".join(f"{perturb(t, rng)}\n" for t in gold_trees))
    prm.write_text(re.sub(r"MAX_ERROR\s+\d+", "MAX_ERROR 1000000", args.prm.read_text()))
    rows, theirs = evalb_lines(args.evalb, prm, gold, test)
    scores = score_files(gold, test, EvalbParams.read(prm))
    ours_rows = [[s.length, s.status, *([s.matched, s.gold, s.test, s.crossing, s.words,
                                         s.correct_tags] if s.status == 0 else [0] * 6)]
                 for s in scores]
    their_rows = [[int(r[1]), int(r[2]), *(int(x) for x in r[5:11])] if r[2] == "0"
                  else [int(r[1]), int(r[2]), *[0] * 6] for r in rows]
    differing = [i + 1 for i, (a, b) in enumerate(zip(ours_rows, their_rows, strict=True))
                 if a != b]
    keys = {text: key for text, key in EVALB_NAMES.items() if text != "Number of sentence"}
    compared = {}
    for section, cutoff in (("All", None), ("len<=40", 40)):
        ours = summary(scores, cutoff=cutoff)
        compared[section] = {key: [round(ours[name], 2), theirs[section][key]]
                             for key, name in keys.items()}
    same = not differing and all(a == b for sec in compared.values() for a, b in sec.values())
    report = {"question": "does research/evalb.py give EVALB's numbers", "trees": len(scores),
              "sentence_lines_differing": differing[:20], "n_differing": len(differing),
              "summaries [ours, EVALB]": compared, "identical": same,
              "strict_f1_all": round(summary(scores, strict=True)["f1"], 2),
              "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                       capture_output=True, text=True).stdout.strip()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
