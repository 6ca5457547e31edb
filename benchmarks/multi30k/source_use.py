"""How much does a model read its source? The validation split's per-token NLL (nats, no label
smoothing, teacher-forced) with each target beside its own source, and beside another
sentence's source (the sources permuted among the split's sentences, one fixed permutation):
the difference is what the source is worth to the decoder. A decoder that barely reads its
source (the post-norm stall) scores nearly the same both ways. Also each decoder layer's
encoder-decoder attention entropy (nats, heads and target positions averaged; log S for
uniform attention), with S the source length. Usage:

    python benchmarks/multi30k/source_use.py DATA_DIR RUN_OR_MODEL_DIR [...] --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch

from transformer_mt.data.batching import token_batches
from transformer_mt.data.dataset import ParallelData
from transformer_mt.inference.attention_maps import attention_maps
from transformer_mt.storage.model_dir import load_model
from transformer_mt.storage.run_dir import resolve_model_dir


@torch.inference_mode()
def source_use(model, data: ParallelData, *, max_tokens: int = 4096, seed: int = 0) -> dict:
    """NLL per target token with the true and the permuted sources, and cross-attention
    entropy per decoder layer (true sources)."""
    permutation = np.random.default_rng(seed).permutation(len(data))
    nll = {"true": 0.0, "permuted": 0.0}
    tokens = 0
    entropy_sum = np.zeros(model.cfg.n_decoder_layers)
    uniform_sum = 0.0
    rows = 0
    for batch in token_batches(data.src_lengths, data.tgt_lengths, max_tokens=max_tokens,
                               seed=0, epoch=0, shuffle=False):
        src, tgt_in, tgt_out = data.collate(batch)
        for name, source in (("true", src), ("permuted", permuted_sources(data, batch,
                                                                           permutation))):
            logp = model(source, tgt_in).log_softmax(-1)
            mask = tgt_out.ne(model.cfg.pad_id)
            nll[name] -= float(logp.gather(-1, tgt_out[..., None])[..., 0][mask].sum())
        tokens += int(tgt_out.ne(model.cfg.pad_id).sum())
        _, maps = attention_maps(model, src, tgt_in)
        for layer, weights in enumerate(maps.cross):  # (B, H, T, S)
            w = weights.clamp_min(1e-12)
            h = -(w * w.log()).sum(-1).mean(1)  # (B, T)
            entropy_sum[layer] += float(h[mask].sum())
        src_len = src.ne(model.cfg.pad_id).sum(1, keepdim=True).expand_as(tgt_out)
        uniform_sum += float(src_len[mask].float().log().sum())
        rows += int(mask.sum())
    result = {k: v / tokens for k, v in nll.items()}
    result["source_worth"] = result["permuted"] - result["true"]
    result["cross_entropy_by_layer"] = (entropy_sum / rows).round(3).tolist()
    result["uniform_entropy"] = round(uniform_sum / rows, 3)
    return result


def permuted_sources(data: ParallelData, batch, permutation) -> torch.Tensor:
    """The sources of sentences permutation[batch], padded, each ending in EOS."""
    src, _, _ = data.collate(permutation[np.asarray(batch)])
    return src


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path, help="a prepared data directory (valid split)")
    parser.add_argument("models", type=Path, nargs="+", help="run or model directories")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = ParallelData(args.data, "valid")
    results = {}
    for path in args.models:
        model, _ = load_model(resolve_model_dir(path))
        results[str(path)] = r = source_use(model, data)
        print(f"{path}: NLL/token true {r['true']:.3f}, permuted {r['permuted']:.3f}, the "
              f"source is worth {r['source_worth']:.3f} nats ({r['source_worth'] / math.log(2):.2f}"
              f" bits) a token; cross-attention entropy by layer {r['cross_entropy_by_layer']} "
              f"(uniform {r['uniform_entropy']})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
