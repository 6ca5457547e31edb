"""Noisy-channel reranking on Multi30k (not in the paper; Yee et al., 2019): the forward model's
beam (n-best = beam size), each hypothesis rescored as

    log P(y | x) / lp(y)  +  lambda * log P(x | y) / n,

log P(x | y) from a model of the other direction (the channel), n either the source's tokens
under the channel model (`norm`) or the forward lp(y) (`lp`). Every (normalisation, alpha,
lambda) is scored on val and on test_2016_flickr; the setting with the best val sacreBLEU is the
one a user would pick, and its test score is the answer.

Usage: noisy_channel.py FORWARD_MODEL BACKWARD_MODEL OUT.json [--src en --tgt de --beam 8]
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU

from transformer_mt.evaluation.bleu import tokenized_bleu
from transformer_mt.inference.translator import Translator

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("TRANSFORMER_MT_DATA", REPO.parent / "shared" / "data")) / "multi30k"
SPLITS = ("val", "test_2016_flickr")
LAMBDAS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0)
ALPHAS = (0.6, 1.0, 1.4)


def read(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


@torch.inference_mode()
def channel_log_probs(channel: Translator, sources: list[str], targets: list[str],
                      batch: int = 256) -> list[tuple[float, int]]:
    """log P(target | source) under the channel model, teacher-forced, and the target's token
    count (EOS included), for each pair."""
    model, vocab, cfg = channel.model, channel.vocab, channel.model.cfg
    out = []
    for start in range(0, len(sources), batch):
        src = [channel.encode_source(s, start + i)
               for i, s in enumerate(sources[start : start + batch])]
        tgt = [vocab.encode(t) for t in targets[start : start + batch]]
        src_BS = torch.full((len(src), max(map(len, src))), cfg.pad_id)
        tgt_in_BT = torch.full((len(tgt), max(map(len, tgt)) + 1), cfg.pad_id)
        tgt_out_BT = torch.full_like(tgt_in_BT, cfg.pad_id)
        for row, (s, t) in enumerate(zip(src, tgt, strict=True)):
            src_BS[row, : len(s)] = torch.tensor(s)
            tgt_in_BT[row, : len(t) + 1] = torch.tensor([cfg.bos_id, *t])
            tgt_out_BT[row, : len(t) + 1] = torch.tensor([*t, cfg.eos_id])
        logp_BTV = model(src_BS, tgt_in_BT).float().log_softmax(-1)
        logp_BT = logp_BTV.gather(-1, tgt_out_BT[..., None]).squeeze(-1)
        logp_BT = logp_BT.masked_fill(tgt_out_BT.eq(cfg.pad_id), 0.0)
        out += [(float(lp), len(t) + 1) for lp, t in zip(logp_BT.sum(1), tgt, strict=True)]
    return out


def candidates(forward: Translator, channel: Translator, sources: list[str]) -> list[list[dict]]:
    """Each source's beam, with the forward log-prob and length and the channel's log-prob."""
    nbests = forward.translate_nbest(sources)
    flat = [(s, h) for s, nbest in zip(sources, nbests, strict=True) for h in nbest]
    scores = channel_log_probs(channel, [h.text for _, h in flat], [s for s, _ in flat])
    out, i = [], 0
    for nbest in nbests:
        out.append([{"text": h.text, "log_prob": h.log_prob,
                     "length": len(forward.vocab.encode(h.text)) + 1,
                     "channel": scores[i + j][0], "source_length": scores[i + j][1]}
                    for j, h in enumerate(nbest)])
        i += len(nbest)
    return out


def rerank(nbests: list[list[dict]], *, norm: str, alpha: float, lam: float) -> list[str]:
    def score(c: dict) -> float:
        lp = ((5 + c["length"]) / 6) ** alpha
        n = c["source_length"] if norm == "norm" else lp
        return c["log_prob"] / lp + lam * c["channel"] / n
    return [max(nbest, key=score)["text"] if nbest else "" for nbest in nbests]  # "": blank


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("forward")
    parser.add_argument("backward")
    parser.add_argument("out", type=Path)
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--beam", type=int, default=8)
    args = parser.parse_args()
    forward = Translator.from_dir(args.forward, beam_size=args.beam, n_best=args.beam)
    channel = Translator.from_dir(args.backward)
    grid = []
    nbests = {split: candidates(forward, channel, read(DATA / f"{split}.{args.src}.gz"))
              for split in SPLITS}
    for norm, alpha, lam in itertools.product(("norm", "lp"), ALPHAS, LAMBDAS):
        row = {"norm": norm, "alpha": alpha, "lambda": lam}
        for split in SPLITS:
            hyps = rerank(nbests[split], norm=norm, alpha=alpha, lam=lam)
            refs = read(DATA / f"{split}.{args.tgt}.gz")
            tok_refs = read(DATA / "tok" / f"{split}.lc.norm.tok.{args.tgt}.gz")
            row[f"{split}_sacrebleu"] = round(BLEU().corpus_score(hyps, [refs]).score, 2)
            row[f"{split}_tok_lc_bleu"] = round(tokenized_bleu(
                hyps, tok_refs, lang=args.tgt, lowercase=True, compound_split=False,
                refs_tokenized=True)[0], 2)
        print(json.dumps(row), flush=True)
        grid.append(row)
    chosen = max(grid, key=lambda r: r["val_sacrebleu"])
    baseline = max((r for r in grid if r["lambda"] == 0), key=lambda r: r["val_sacrebleu"])
    args.out.write_text(json.dumps({"forward": args.forward, "backward": args.backward,
                                    "beam": args.beam, "chosen_on_val": chosen,
                                    "without_channel_chosen_on_val": baseline, "grid": grid},
                                   indent=1) + "\n")
    print("chosen on val:", json.dumps(chosen))
    print("without the channel, chosen on val:", json.dumps(baseline))


if __name__ == "__main__":
    main()
