"""Training steps of the Multi30k recipe's model (Transformer-tiny, pre-norm, 2,048-token batches,
attention and activation dropout 0.1) on real batches, timed, optionally profiled: for A/B
comparisons of two source trees, one process each, alternating.

    PYTHONPATH=src python benchmarks/archive/recipe_step.py --data runs/multi30k-en-de/data \\
        --dtype bf16 --steps 40 [--profile]

Prints target tokens/s and ms a step over --steps steps after 10 warm-up steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

import transformer_mt
from transformer_mt.config import load_config
from transformer_mt.data.batching import token_batches
from transformer_mt.data.dataset import ParallelData
from transformer_mt.data.prepare import load_vocab
from transformer_mt.hardware.malloc import tune_malloc
from transformer_mt.model.transformer import Transformer
from transformer_mt.training.precision import precision
from transformer_mt.training.step import apply_update, forward_backward, make_optimizer

CONFIG = Path(__file__).resolve().parents[1] / "multi30k" / "multi30k-tiny-prenorm.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--profile", action="store_true", help="then profile as many steps")
    args = parser.parse_args()
    tune_malloc()  # as the transformer-mt command does
    cfg = load_config(CONFIG, [f"train.bf16={args.dtype == 'bf16'}", "train.max_tokens=2048",
                               "model.attention_dropout=0.1", "model.activation_dropout=0.1"])
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(
        cfg.model, vocab_size=len(load_vocab(args.data))))
    data = ParallelData(args.data, "train")
    torch.manual_seed(0)
    model = Transformer(cfg.model).train()
    optimizer = make_optimizer(model, cfg.train)
    for group in optimizer.param_groups:
        group["lr"] = 1e-4
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    batches = token_batches(data.src_lengths, data.tgt_lengths, max_tokens=2048, seed=1, epoch=0)

    def step(batch) -> int:
        n_target = int(data.tgt_lengths[batch].sum())
        with precision(cfg.train, torch.device("cpu")):
            forward_backward(model, [data.collate(batch)], scale=1 / n_target, eps=0.1,
                             pad_id=cfg.model.pad_id, scaler=scaler)
        apply_update(model, optimizer, scaler, clip_norm=0.0, loss_finite=True)
        optimizer.zero_grad(set_to_none=True)
        return n_target

    for batch in batches[:10]:
        step(batch)
    start, tokens = time.perf_counter(), 0
    for batch in batches[10 : 10 + args.steps]:
        tokens += step(batch)
    seconds = time.perf_counter() - start
    print(f"{Path(transformer_mt.__file__).parent} {args.dtype}: {tokens / seconds:.0f} target "
          f"tok/s, {seconds / args.steps * 1000:.1f} ms a step ({args.steps} steps)")
    if args.profile:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for batch in batches[10 + args.steps : 10 + 2 * args.steps]:
                step(batch)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


if __name__ == "__main__":
    main()
