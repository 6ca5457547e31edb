"""The cheap non-neural baseline of the parsing table: a treebank PCFG (Charniak 1996), read off
the sample's training trees, parent-annotated and markovised as Klein & Manning (2003) do, and
parsed by Viterbi CKY in torch; scored by the same scorer as our parser (research/evalb.py).

    python benchmarks/parsing/pcfg.py --data ../shared/data \\
        --out benchmarks/results/parsing-baselines/pcfg.json

Every grammar (vertical order v: 1 or 2 with the parent's label; horizontal order h: siblings
remembered when binarising) is scored on dev; test is parsed with each too and reported beside
it, so the choice on dev can be read off. Words: P(tag | word) from the training counts,
smoothed with P(tag | the word's shape signature) learned from words seen once; unknown words
use the signature alone. A sentence the grammar cannot cover gets a flat tree (counted).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

from transformer_mt.hardware.cpu_speed import cpu_model
from transformer_mt.research.evalb import EvalbParams, score_files, summary
from transformer_mt.research.trees import Tree, parsing_pair

SUFFIXES = ("ing", "ed", "ly", "ion", "er", "est", "al", "ity", "ic", "able", "ive", "ous",
            "s", "y")


def signature(word: str, first: bool) -> str:
    """The shape of an unknown word: case, digits, hyphen, a common suffix."""
    shape = ["C" if word[:1].isupper() else "c", "F" if first else ""]
    shape += ["D" if any(ch.isdigit() for ch in word) else "",
              "H" if "-" in word else "", "U" if word.isupper() else ""]
    lower = word.lower()
    shape.append(next((s for s in SUFFIXES if lower.endswith(s) and len(lower) > len(s) + 2),
                      ""))
    return "|".join(shape)


def binarise(tree: Tree, parent: str, v: int, h: int) -> Tree:
    """The tree as the grammar sees it: unary chains of constituents collapsed to one label
    (S+VP), the parent's label appended (NP^S) when v = 2, and constituents of more than two
    children right-factored into @-nodes that remember h siblings to their left."""
    if tree.word is not None:
        return tree
    labels, children = [tree.label], tree.children
    while len(children) == 1 and children[0].word is None:
        labels.append(children[0].label)
        children = children[0].children
    label = "+".join(labels) + (f"^{parent}" if v == 2 else "")
    kids = [binarise(child, labels[-1], v, h) for child in children]
    raw = [child.label for child in children]
    while len(kids) > 2:  # fold from the right: @label|left siblings
        cut = len(kids) - 2
        context = ",".join(raw[max(0, cut - h + 1):cut + 1]) if h else ""
        kids = kids[:cut] + [Tree(f"@{label}|{context}", kids[cut:])]
    return Tree(label, kids)


def debinarise(tree: Tree) -> list[Tree]:
    """binarise undone: @-nodes spliced into their parent, collapsed chains unfolded, parent
    labels dropped. A list: an @-node gives its children."""
    if tree.word is not None:
        return [tree]
    children = [t for child in tree.children for t in debinarise(child)]
    if tree.label.startswith("@"):
        return children
    labels = tree.label.split("^")[0].split("+")
    node = Tree(labels[-1], children)
    for label in reversed(labels[:-1]):
        node = Tree(label, [node])
    return [node]


@dataclass
class Grammar:
    symbols: list[str]
    index: dict[str, int]
    binary: torch.Tensor  # (R, 3): parent, left, right
    binary_lp: torch.Tensor  # (R,)
    by_parent: torch.Tensor  # (N, Rmax): rule ids of each parent, R where none (-inf)
    unary: torch.Tensor  # (U, 2): parent, child
    unary_lp: torch.Tensor  # (U,)
    unary_by_parent: torch.Tensor  # (N, Umax)
    root_lp: torch.Tensor  # (N,)
    tags: list[int]
    tag_given_word: dict[str, Counter]
    tag_given_sig: dict[str, dict[str, float]]
    tag_prior: dict[str, float]
    word_count: Counter


def read_grammar(trees: list[Tree], v: int, h: int) -> Grammar:
    """Relative-frequency rule probabilities and the smoothed lexicon of the training trees."""
    binary, unary, roots, parents = Counter(), Counter(), Counter(), Counter()
    tag_word, word_count = defaultdict(Counter), Counter()

    def walk(node: Tree) -> None:
        if node.word is not None:
            return
        kids = tuple(child.label for child in node.children)
        (binary if len(kids) == 2 else unary)[(node.label, *kids)] += 1
        parents[node.label] += 1
        for child in node.children:
            walk(child)

    for tree in trees:
        for tag, word in zip(tree.tags(), tree.words(), strict=True):
            tag_word[word][tag] += 1
            word_count[word] += 1
        btree = binarise(tree, "TOP", v, h)
        roots[btree.label] += 1
        walk(btree)
    tags = sorted({t for counts in tag_word.values() for t in counts})
    symbols = tags + sorted(set(parents) - set(tags))
    index = {s: i for i, s in enumerate(symbols)}

    def table(rules: Counter, arity: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids = torch.tensor([[index[s] for s in rule] for rule in rules],
                           dtype=torch.long).reshape(len(rules), 1 + arity)
        lp = torch.tensor([math.log(c / parents[rule[0]]) for rule, c in rules.items()],
                          dtype=torch.float32)
        groups = defaultdict(list)
        for r, rule in enumerate(rules):
            groups[index[rule[0]]].append(r)
        width = max((len(g) for g in groups.values()), default=1)  # a grammar may lack unaries
        by_parent = torch.full((len(symbols), width), len(rules), dtype=torch.long)
        for p, g in groups.items():
            by_parent[p, :len(g)] = torch.tensor(g)
        return ids, lp, by_parent

    b_ids, b_lp, b_by = table(binary, 2)
    u_ids, u_lp, u_by = table(unary, 1)
    root_lp = torch.full((len(symbols),), -math.inf)
    for label, c in roots.items():
        root_lp[index[label]] = math.log(c / len(trees))
    # the lexicon: P(tag | signature) from words seen once, P(tag) over all tokens
    total = sum(word_count.values())
    tag_count = Counter()
    for counts in tag_word.values():
        tag_count.update(counts)
    prior = {t: c / total for t, c in tag_count.items()}
    once = Counter(t for w, counts in tag_word.items() if word_count[w] == 1 for t in counts)
    n_once = sum(once.values())
    by_sig = defaultdict(Counter)
    for tree in trees:
        for i, (tag, word) in enumerate(zip(tree.tags(), tree.words(), strict=True)):
            if word_count[word] == 1:
                by_sig[signature(word, i == 0)][tag] += 1
    sig_prior = {t: (once[t] + 1e-3 * prior[t]) / (n_once + 1e-3) for t in tags}
    tag_given_sig = {s: {t: (c[t] + sig_prior[t]) / (sum(c.values()) + 1.0) for t in tags}
                     for s, c in by_sig.items()}
    tag_given_sig[""] = sig_prior
    return Grammar(symbols, index, b_ids, b_lp, b_by, u_ids, u_lp, u_by, root_lp,
                   [index[t] for t in tags], tag_word, tag_given_sig, prior, word_count)


def emissions(g: Grammar, words: list[str]) -> torch.Tensor:
    """(n, N) log P(word | tag) up to a constant of the word: log P(tag | word) - log P(tag)."""
    out = torch.full((len(words), len(g.symbols)), -math.inf)
    for i, word in enumerate(words):
        sig = g.tag_given_sig.get(signature(word, i == 0), g.tag_given_sig[""])
        counts, n = g.tag_given_word.get(word, Counter()), g.word_count[word]
        for tag, p_prior in g.tag_prior.items():
            p = (counts[tag] + sig[tag]) / (n + 1.0)
            if p > 0:
                out[i, g.index[tag]] = math.log(p) - math.log(p_prior)
    return out


def cky(g: Grammar, words: list[str], lex: torch.Tensor) -> Tree | None:
    """The Viterbi parse of `words` given their emissions `lex` (n, N), or None when the grammar
    covers no tree of them. Unary
    rules only rewrite a tag (binarise collapsed the other chains), so they apply at the
    leaves."""
    n, size = len(words), len(g.symbols)
    chart = torch.full((n + 1, n + 1, size), -math.inf)  # [i, j, symbol]: best log-prob
    split = torch.zeros((n + 1, n + 1, size), dtype=torch.long)
    rule = torch.full((n + 1, n + 1, size), -1, dtype=torch.long)
    never = torch.tensor([-math.inf])
    cand = torch.cat([lex[:, g.unary[:, 1]] + g.unary_lp, never.expand(n, 1)], 1)
    best, arg = cand[:, g.unary_by_parent].max(-1)  # (n, N)
    use = best > lex
    leaves = torch.arange(n)
    chart[leaves, leaves + 1] = torch.where(use, best, lex)
    via = torch.where(use, g.unary_by_parent[torch.arange(size), arg], -1)  # (n, N)
    for length in range(2, n + 1):
        starts = leaves[:n - length + 1]  # (S,)
        ends = starts + length
        mids = starts[:, None] + torch.arange(1, length)  # (S, K)
        left, right = chart[starts[:, None], mids], chart[mids, ends[:, None]]  # (S, K, N)
        scores = left[..., g.binary[:, 1]] + right[..., g.binary[:, 2]] + g.binary_lp
        best_k, arg_k = scores.max(1)  # (S, R)
        padded = torch.cat([best_k, never.expand(len(starts), 1)], 1)[:, g.by_parent]
        chart[starts, ends], arg_r = padded.max(-1)  # (S, N)
        rule_ids = g.by_parent.gather(1, arg_r.T).T  # (S, N); R (no rule) where -inf
        k_of = torch.cat([arg_k, torch.zeros(len(starts), 1, dtype=torch.long)], 1)
        split[starts, ends] = starts[:, None] + 1 + k_of.gather(1, rule_ids)
        rule[starts, ends] = rule_ids
    top = chart[0, n] + g.root_lp
    if not torch.isfinite(top.max()):
        return None
    return build(g, words, 0, n, int(top.argmax()), split, rule, via)


def build(g: Grammar, words: list[str], i: int, j: int, sym: int, split, rule, via) -> Tree:
    """The tree the back-pointers give for `sym` over words i..j."""
    if j == i + 1:
        if via[i, sym] >= 0:
            tag = g.symbols[int(g.unary[via[i, sym], 1])]
            return Tree(g.symbols[sym], [Tree(tag, word=words[i])])
        return Tree(g.symbols[sym], word=words[i])
    r, k = int(rule[i, j, sym]), int(split[i, j, sym])
    left, right = int(g.binary[r, 1]), int(g.binary[r, 2])
    return Tree(g.symbols[sym], [build(g, words, i, k, left, split, rule, via),
                                 build(g, words, k, j, right, split, rule, via)])


def parse(g: Grammar, words: list[str]) -> tuple[Tree, bool]:
    """The parse as a Treebank tree, and whether the grammar covered the sentence (if not: a
    flat S over the most likely tags)."""
    lex = emissions(g, words)  # (n, N)
    tree = cky(g, words, lex)
    if tree is None:
        return Tree("S", [Tree(g.symbols[int(lex[i].argmax())], word=w)
                          for i, w in enumerate(words)]), False
    (out,) = debinarise(tree)
    return out, True


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--grammars", nargs="+", default=["1,1", "2,1", "2,2"],
                   help="v,h pairs (default: 1,1 2,1 2,2)")
    p.add_argument("--limit", type=int, help="parse only the first N sentences of each split")
    args = p.parse_args()
    torch.set_num_threads(1)
    read = {split: [parsing_pair(line)[2] for line in
                    (args.data / "ptb-sample" / f"{split}.trees").read_text().splitlines()]
            for split in ("train", "dev", "test")}
    work, results = Path(tempfile.mkdtemp()), {}
    for spec in args.grammars:
        v, h = map(int, spec.split(","))
        start = time.monotonic()
        g = read_grammar(read["train"], v, h)
        sizes = {"symbols": len(g.symbols), "binary_rules": len(g.binary_lp),
                 "unary_rules": len(g.unary_lp)}
        for split in ("dev", "test"):
            gold_trees = read[split][:args.limit]
            parsed = [parse(g, t.words()) for t in gold_trees]
            gold, test = work / f"{split}.gold", work / f"{split}.pcfg"
            gold.write_text("".join(f"{t}\n" for t in gold_trees))
            test.write_text("".join(f"{t}\n" for t, _ in parsed))
            found = summary(score_files(gold, test, EvalbParams()))
            results[f"{split} PCFG v={v} h={h}"] = {
                **{k: round(x, 2) if isinstance(x, float) else x for k, x in found.items()},
                "not_covered": sum(not ok for _, ok in parsed), **sizes}
            r = results[f"{split} PCFG v={v} h={h}"]
            print(f"{split} v={v} h={h}: F1 {r['f1']:.2f} (R {r['recall']:.2f}, P "
                  f"{r['precision']:.2f}), tags {r['tagging_accuracy']:.2f}, not covered "
                  f"{r['not_covered']}, {time.monotonic() - start:.0f} s", flush=True)
    report = {"question": "what does a treebank PCFG (the cheap non-neural parser) score on the "
                          "Treebank sample with our EVALB-compatible scorer (COLLINS.prm)",
              "results": results, "machine": cpu_model(),
              "torch": torch.__version__,
              "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                       capture_output=True, text=True).stdout.strip()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
