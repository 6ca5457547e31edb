"""Why the PCFG baseline has its own CKY: NLTK's ViterbiParser (the maintained Python PCFG
parser) given the same grammar (pcfg.py's, v=1 h=1, read off the sample's training trees),
timed on dev sentences of 5, 10, 15, 20 and 25 words beside pcfg.py's CKY; both should find
the same tree.

    PYTHONPATH=/path/to/nltk python benchmarks/parsing/nltk_viterbi.py --data ../shared/data \\
        --out benchmarks/results/parsing-baselines/nltk-viterbi.json
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import time
from pathlib import Path

import nltk
import torch
from pcfg import cky, emissions, read_grammar

from transformer_mt.hardware.cpu_speed import cpu_model
from transformer_mt.research.trees import parsing_pair


def nltk_grammar(g, words: list[str]) -> nltk.PCFG:
    """pcfg.py's grammar as NLTK's: its rules, and per tag the sentence's words with their
    emission probabilities times one constant (which changes no tree's rank), the rest of each
    tag's mass on a word the sentence lacks."""
    sym = [nltk.Nonterminal(s) for s in g.symbols]
    top = nltk.Nonterminal("TOP")
    rules = [nltk.ProbabilisticProduction(top, [sym[a]], prob=math.exp(lp))
             for a, lp in enumerate(g.root_lp.tolist()) if math.isfinite(lp)]
    rules += [nltk.ProbabilisticProduction(sym[a], [sym[b], sym[c]], prob=math.exp(lp))
              for (a, b, c), lp in zip(g.binary.tolist(), g.binary_lp.tolist(), strict=True)]
    rules += [nltk.ProbabilisticProduction(sym[a], [sym[b]], prob=math.exp(lp))
              for (a, b), lp in zip(g.unary.tolist(), g.unary_lp.tolist(), strict=True)]
    distinct = list(dict.fromkeys(words))
    lex = emissions(g, distinct).exp()[:, g.tags]  # (words, tags)
    lex = lex * 0.5 / float(lex.sum(0).max())
    for j, tag in enumerate(g.tags):
        found = [(w, float(lex[i, j])) for i, w in enumerate(distinct) if lex[i, j] > 0]
        rules += [nltk.ProbabilisticProduction(sym[tag], [w], prob=p) for w, p in found]
        rules.append(nltk.ProbabilisticProduction(sym[tag], ["<other>"],
                                                  prob=1.0 - sum(p for _, p in found)))
    return nltk.PCFG(top, rules)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--limit", type=float, default=600.0, help="NLTK's time limit a sentence")
    p.add_argument("--lengths", type=int, nargs="+", default=[5, 10, 15, 20, 25])
    args = p.parse_args()
    torch.set_num_threads(1)
    read = lambda split: [parsing_pair(line)[2] for line in  # noqa: E731
                          (args.data / "ptb-sample" / f"{split}.trees").read_text().splitlines()]
    g = read_grammar(read("train"), 1, 1)
    dev = read("dev")
    rows = []
    for tree in [next(t for t in dev if len(t.words()) == n) for n in args.lengths]:
        words = tree.words()
        start = time.monotonic()
        ours = cky(g, words, emissions(g, words))
        ours_s = time.monotonic() - start
        grammar = nltk_grammar(g, words)
        start = time.monotonic()
        try:
            theirs = next(nltk.ViterbiParser(grammar, max_time=args.limit).parse(words))
        except TimeoutError:  # NLTK's own limit (5 s unless told)
            rows.append({"words": len(words), "ours_s": round(ours_s, 3),
                         "nltk_s": f"over {args.limit}"})
            print(rows[-1], flush=True)
            break
        theirs_s = time.monotonic() - start
        rows.append({"words": len(words), "ours_s": round(ours_s, 3),
                     "nltk_s": round(theirs_s, 2), "nltk_over_ours": round(theirs_s / ours_s),
                     "same_tree": theirs[0].pformat(margin=10**9) == str(ours)})
        print(rows[-1], flush=True)
    report = {"question": "how long does NLTK's ViterbiParser take with the PCFG baseline's "
                          "grammar, beside our CKY",
              "rows": rows, "grammar": {"binary_rules": len(g.binary_lp),
                                        "unary_rules": len(g.unary_lp)},
              "machine": cpu_model(), "nltk": nltk.__version__,
              "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                       capture_output=True, text=True).stdout.strip()}
    args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
