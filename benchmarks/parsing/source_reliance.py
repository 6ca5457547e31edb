"""Does a parsing model read its source? The teacher-forced nll per target piece (EOS included)
of the first --pairs dev pairs with their own sources, with each pair's source swapped for the
next pair's (rotated by one) and with empty sources (EOS alone). A decoder that ignores its
source scores the three alike. And can it: the spread of the encoder's output, its sd over the
sentence's positions relative to its root mean square (0: the encoder writes one vector for
every word of every sentence, and there is nothing to read).

    PYTHONPATH=src python benchmarks/parsing/source_reliance.py --model runs/parse/averaged \\
        --sources runs/parse/corpus/valid.words --targets runs/parse/corpus/valid.tree
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from transformer_mt.evaluation.bleu import read_text
from transformer_mt.inference.translator import Translator
from transformer_mt.training.validation import encoder_spread


@torch.inference_mode()
def nll_per_piece(translator: Translator, sources: list[str], targets: list[str]) -> float:
    """The summed nll of the targets' pieces (EOS included) over their count, one pair at a time."""
    model, vocab, cfg = translator.model, translator.vocab, translator.model.cfg
    total, pieces = 0.0, 0
    for source, target in zip(sources, targets, strict=True):
        src_1S = torch.tensor([vocab.encode(source) + [cfg.eos_id]])
        gold = vocab.encode_target(target) + [cfg.eos_id]
        tgt_1T = torch.tensor([[cfg.bos_id] + gold[:-1]])
        logits_1TV = model(src_1S, tgt_1T).float()
        total += F.cross_entropy(logits_1TV[0], torch.tensor(gold), reduction="sum").item()
        pieces += len(gold)
    return total / pieces


@torch.inference_mode()
def mean_spread(translator: Translator, sources: list[str]) -> float:
    """The encoder's spread (training.validation.encoder_spread) averaged over sentences, one
    sentence at a time."""
    model, vocab = translator.model, translator.vocab
    memories = (model.encode(torch.tensor([vocab.encode(source) + [model.cfg.eos_id]]))
                for source in sources)
    return sum(float(encoder_spread(memory)) for memory in memories) / len(sources)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, type=Path,
                   help="a model directory (averaged, or a checkpoint)")
    p.add_argument("--sources", required=True, type=Path, help="the model's sources, one a line")
    p.add_argument("--targets", required=True, type=Path, help="the linearised trees")
    p.add_argument("--pairs", type=int, default=60, help="how many pairs from the first")
    p.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = p.parse_args()
    translator = Translator.from_dir(args.model)
    sources = read_text(args.sources)[: args.pairs]
    targets = read_text(args.targets)[: args.pairs]
    found = {"pairs": len(sources),
             "own sources": nll_per_piece(translator, sources, targets),
             "sources rotated by one": nll_per_piece(translator, sources[1:] + sources[:1],
                                                     targets),
             "empty sources": nll_per_piece(translator, [""] * len(sources), targets),
             "encoder spread": mean_spread(translator, sources)}
    for name, value in found.items():
        print(f"{name:24s} {value:.5g}" if isinstance(value, float) else f"{name:24s} {value}")
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
