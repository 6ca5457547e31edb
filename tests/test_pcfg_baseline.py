"""The parsing table's non-neural baseline (benchmarks/parsing/pcfg.py): binarising a tree and
undoing it is the identity, and its CKY finds the Viterbi tree: on every training sentence no
tree scores above the parse, the gold tree included, and a grammar of one tree gives it back."""

import importlib.util
import math
import random
import sys

import pytest

from conftest import REPO
from transformer_mt.research.trees import Tree, parse_tree

spec = importlib.util.spec_from_file_location("pcfg", REPO / "benchmarks" / "parsing" / "pcfg.py")
pcfg = importlib.util.module_from_spec(spec)
sys.modules["pcfg"] = pcfg  # dataclasses look their module up
spec.loader.exec_module(pcfg)


def sentence(rng: random.Random) -> Tree:
    """PP attachment to the verb or the object, flat NPs, a unary chain: an ambiguous grammar."""
    def np() -> str:
        adjectives = "".join(f" (JJ {rng.choice(['big', 'red', 'old'])})"
                             for _ in range(rng.randrange(3)))
        noun = rng.choice(["dog", "ball", "park"])
        return f"(NP (DT {rng.choice(['a', 'the'])}){adjectives} (NN {noun}))"

    pp = f"(PP (IN {rng.choice(['with', 'in'])}) {np()})"
    if rng.random() < 0.5:
        vp = f"(VP (VBZ sees) {np()} {pp})"
    else:
        vp = f"(VP (VBZ sees) (NP {np()} {pp}))"
    if rng.random() < 0.2:
        vp = "(VP (VBZ runs))"
    subject = "(NP (PRP it))" if rng.random() < 0.3 else np()
    return parse_tree(f"(S {subject} {vp} (. .))")


def log_prob(g, tree: Tree, words: list[str]) -> float:
    """The grammar's log-probability of a binarised tree, rule by rule."""
    binary = {tuple(map(int, r)): i for i, r in enumerate(g.binary)}
    unary = {tuple(map(int, r)): i for i, r in enumerate(g.unary)}
    lex = pcfg.emissions(g, words)
    position = iter(range(len(words)))

    def walk(node: Tree) -> float:
        if node.word is not None:
            return float(lex[next(position), g.index[node.label]])
        ids = (g.index[node.label], *(g.index[c.label] for c in node.children))
        if len(ids) == 3:
            rule = float(g.binary_lp[binary[ids]]) if ids in binary else -math.inf
        else:
            rule = float(g.unary_lp[unary[ids]]) if ids in unary else -math.inf
        return rule + sum(walk(child) for child in node.children)

    return float(g.root_lp[g.index[tree.label]]) + walk(tree)


@pytest.mark.parametrize("v,h", [(1, 0), (1, 1), (2, 1), (2, 2)])
def test_binarising_is_undone_exactly(v, h):
    rng = random.Random(v * 10 + h)
    for _ in range(30):
        tree = sentence(rng)
        assert [str(t) for t in pcfg.debinarise(pcfg.binarise(tree, "TOP", v, h))] == [str(tree)]
    chain = parse_tree("(S (VP (VB go)) (ADVP (RB now) (RB then) (RB again) (RB too)))")
    binarised = pcfg.binarise(chain, "TOP", v, h)
    assert all(len(n.children) <= 2 for n in _nodes(binarised))
    assert str(pcfg.debinarise(binarised)[0]) == str(chain)


def _nodes(tree: Tree) -> list[Tree]:
    return [tree, *(n for child in tree.children for n in _nodes(child))]


@pytest.mark.parametrize("v,h", [(1, 1), (2, 1)])
def test_cky_finds_the_viterbi_tree(v, h):
    rng = random.Random(v)
    trees = [sentence(rng) for _ in range(60)]
    g = pcfg.read_grammar(trees, v, h)
    better = 0
    for tree in trees[:25]:
        words = tree.words()
        best = pcfg.cky(g, words, pcfg.emissions(g, words))
        assert best is not None and best.words() == words
        gold = log_prob(g, pcfg.binarise(tree, "TOP", v, h), words)
        found = log_prob(g, best, words)
        assert found >= gold - 1e-4, (str(tree), str(pcfg.debinarise(best)[0]))
        better += found > gold + 1e-4
    assert better > 0, "an ambiguous grammar prefers some other tree to some gold tree"
    one = trees[0]
    only = pcfg.read_grammar([one], v, h)
    assert str(pcfg.parse(only, one.words())[0]) == str(one)
