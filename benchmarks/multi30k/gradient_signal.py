"""Where does a fresh model's gradient carry signal? For each parameter group, over K training
batches of one model at its initialisation (the multi30k recipe's batches, dropout on as in
training): the gradient's norm, and its signal share ||mean g||^2 / mean ||g||^2 (1 when every
batch agrees, about 1/K when the batches' gradients are independent noise). Adam moves each
weight by about the learning rate where the gradient is consistent and less where it is noise,
so a group whose signal share is near 1/K learns slowly at this batch size. Usage:

    python benchmarks/multi30k/gradient_signal.py DATA_DIR NAME="OVERRIDES" [...] --json out.json

NAME="OVERRIDES": a label and the `train` overrides of a variant, e.g.
post6="--model.n_encoder_layers=6 --model.n_decoder_layers=6".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shlex
from pathlib import Path

import torch

from transformer_mt.config import load_config
from transformer_mt.data.batching import token_batches
from transformer_mt.data.dataset import ParallelData
from transformer_mt.model.transformer import Transformer
from transformer_mt.training.loss import label_smoothed_nll


def group_of(name: str) -> str:
    """encoder.layers.3.self_attn.w_q.weight -> enc3 self q; embeddings and norms apart."""
    found = re.match(r"(encoder|decoder)\.layers\.(\d+)\.(self_attn|cross_attn|ffn)\.(\w+)", name)
    if not found:
        return "embeddings" if "embed" in name or "generator" in name else "other"
    stack, layer, block, part = found.groups()
    part = part.removeprefix("w_") if block != "ffn" else "ffn"
    return f"{stack[:3]}{int(layer) + 1} {block.removesuffix('_attn')} {part}"


def gradient_signal(model: Transformer, data: ParallelData, batches: int, max_tokens: int,
                    eps: float) -> dict:
    model.train()
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    groups = sorted({group_of(n) for n in names})
    total = {g: 0.0 for g in groups}  # sum over batches of ||g_i||^2
    mean = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    plan = token_batches(data.src_lengths, data.tgt_lengths, max_tokens=max_tokens, seed=1,
                         epoch=0)[:batches]
    for batch in plan:
        model.zero_grad(set_to_none=True)
        src, tgt_in, tgt_out = data.collate(batch)
        states = model(src, tgt_in, project=False)
        loss, _, n = label_smoothed_nll(states.flatten(0, 1), model.generator.weight,
                                        tgt_out.flatten(), eps=eps, pad_id=model.cfg.pad_id)
        (loss / n).backward()
        for name, p in model.named_parameters():
            total[group_of(name)] += float(p.grad.pow(2).sum())
            mean[name] += p.grad / len(plan)
    signal = {g: 0.0 for g in groups}
    for name, g in mean.items():
        signal[group_of(name)] += float(g.pow(2).sum())
    return {g: {"grad_norm": (total[g] / len(plan)) ** 0.5,
                "signal_share": signal[g] / (total[g] / len(plan))} for g in groups}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path, help="a prepared data directory (train split)")
    parser.add_argument("variants", nargs="+", help='NAME="--section.key=value ..."')
    parser.add_argument("--config", default="multi30k")
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = ParallelData(args.data, "train")
    vocab = json.loads((args.data / "meta.json").read_text())["vocab_size"]
    results = {}
    for variant in args.variants:
        label, _, overrides = variant.partition("=")
        cfg = load_config(args.config, [o.removeprefix("--") for o in shlex.split(overrides)])
        torch.manual_seed(args.seed)
        model = Transformer(dataclasses.replace(cfg.model, vocab_size=vocab))
        results[label] = r = gradient_signal(model, data, args.batches, cfg.train.max_tokens,
                                             cfg.train.label_smoothing)
        print(f"== {label}: {overrides}")
        for group, v in r.items():
            print(f"{group:22s} norm {v['grad_norm']:.4f}  signal {v['signal_share']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
