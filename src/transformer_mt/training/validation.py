"""Validation during training: loss and perplexity over the validation split, the spread of
the encoder's output, and the BLEU of its beam-search translations."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor

from ..config import Config
from ..data.batching import token_batches
from ..data.dataset import ParallelData
from ..data.prepare import load_vocab
from ..evaluation.bleu import sacrebleu_scores
from ..inference.translator import Translator
from ..model.transformer import Memory, Transformer
from ..storage.names import split_file
from .loss import label_smoothed_nll

COLLAPSED_SPREAD = 0.05  # a fresh model's is about 0.6, a trained translation model's 0.9


def encoder_spread(memory: Memory) -> Tensor:
    """Per sentence (B,): the sd of the encoder's output over the sentence's positions (each
    dimension's, averaged) over the output's root mean square. 0 when the encoder writes one
    vector for every word of every sentence: a collapse that leaves the decoder nothing to
    read (benchmarks/results/parsing-encoder-collapse)."""
    states_BSD = memory.states_BSD.float()
    real_BS1 = (~memory.src_is_pad_BS).unsqueeze(-1).float()
    n_B11 = real_BS1.sum(1, keepdim=True)
    mean_B1D = (states_BSD * real_BS1).sum(1, keepdim=True) / n_B11
    var_B1D = ((states_BSD - mean_B1D).pow(2) * real_BS1).sum(1, keepdim=True) / \
        (n_B11 - 1).clamp(min=1)
    rms_B = ((states_BSD.pow(2) * real_BS1).sum((1, 2)) /
             (n_B11.flatten() * states_BSD.shape[-1])).sqrt()
    return var_B1D.sqrt().mean((1, 2)) / rms_B


@torch.inference_mode()
def validate(model: Transformer, data: ParallelData, *, max_tokens: int, eps: float) -> dict:
    """Loss and perplexity over a whole split, and the encoder's mean spread over its
    sentences, dropout off."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    loss_sum = nll_sum = spread_sum = 0.0
    n_tokens = n_sentences = 0
    for batch in token_batches(data.src_lengths, data.tgt_lengths, max_tokens=max_tokens,
                               seed=0, epoch=0, shuffle=False):
        src, tgt_in, tgt_out = (t.to(device) for t in data.collate(batch))
        memory = model.encode(src)
        states = model.decode(tgt_in, memory, project=False)
        loss, nll, n = label_smoothed_nll(states.flatten(0, 1), model.generator.weight,
                                          tgt_out.flatten(), eps=eps, pad_id=model.cfg.pad_id,
                                          bias_V=model.generator.bias)
        loss_sum, nll_sum, n_tokens = loss_sum + float(loss), nll_sum + float(nll), n_tokens + n
        spread_sum, n_sentences = spread_sum + float(encoder_spread(memory).sum()), \
            n_sentences + src.shape[0]
    model.train(was_training)
    return {"loss": loss_sum / n_tokens, "nll": nll_sum / n_tokens,
            "ppl": math.exp(nll_sum / n_tokens), "encoder_spread": spread_sum / n_sentences}


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
