"""Validation during training: loss and perplexity over the validation split, and the BLEU
of its beam-search translations."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from ..config import Config
from ..data.batching import token_batches
from ..data.dataset import ParallelData
from ..data.prepare import load_vocab
from ..evaluation.bleu import sacrebleu_scores
from ..inference.translator import Translator
from ..model.transformer import Transformer
from ..storage.names import split_file
from .loss import label_smoothed_nll


@torch.inference_mode()
def validate(model: Transformer, data: ParallelData, *, max_tokens: int, eps: float) -> dict:
    """Loss and perplexity over a whole split, dropout off."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    loss_sum = nll_sum = 0.0
    n_tokens = 0
    for batch in token_batches(data.src_lengths, data.tgt_lengths, max_tokens=max_tokens,
                               seed=0, epoch=0, shuffle=False):
        src, tgt_in, tgt_out = (t.to(device) for t in data.collate(batch))
        states = model(src, tgt_in, project=False)
        loss, nll, n = label_smoothed_nll(states.flatten(0, 1), model.generator.weight,
                                          tgt_out.flatten(), eps=eps, pad_id=model.cfg.pad_id,
                                          bias_V=model.generator.bias)
        loss_sum, nll_sum, n_tokens = loss_sum + float(loss), nll_sum + float(nll), n_tokens + n
    model.train(was_training)
    return {"loss": loss_sum / n_tokens, "nll": nll_sum / n_tokens,
            "ppl": math.exp(nll_sum / n_tokens)}


def validation_bleu(model: Transformer, data_dir: Path, cfg: Config) -> dict:
    """Beam-search translations of the validation sources scored against their references."""
    was_training = model.training
    translator = Translator(model, load_vocab(data_dir), cfg.decode)
    sources, refs = ((data_dir / split_file("valid", side, "txt")).read_text(
        encoding="utf-8").splitlines() for side in ("src", "tgt"))
    hyps = translator.translate(sources)
    model.train(was_training)
    bleu, signature, chrf, _ = sacrebleu_scores(hyps, refs)
    return {"bleu": bleu, "chrf": chrf, "bleu_signature": signature}
