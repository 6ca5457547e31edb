"""One training update (§5.3): forward and backward over the batches of an update (gradient
accumulation, DDP), skipping non-finite updates; Adam; torch.compile."""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor, nn

from ..config import TrainConfig
from ..model.transformer import Transformer
from .loss import label_smoothed_nll


def make_optimizer(model: nn.Module, tcfg: TrainConfig) -> torch.optim.Adam:
    """Adam (§5.3); the learning rate is set before every step. fused: one pass over each
    parameter for the whole update and no temporaries, several times faster than torch's
    default on CPUs (benchmarks/results/archive/speed-xeon-adam)."""
    return torch.optim.Adam(model.parameters(), lr=0.0, betas=(tcfg.adam_beta1, tcfg.adam_beta2),
                            eps=tcfg.adam_eps, fused=True)


def compiled(model: nn.Module, *, shapes: int = 0, cuda_graphs: bool = False) -> nn.Module:
    """`model` compiled by torch.compile for training steps; it shares its parameters, and its
    attributes read through. Without `shapes`, shapes are symbolic from the start
    (dynamic=True): token-budget batches differ in every dimension, and a graph per shape would
    recompile all the time. With `shapes` (train.shape_buckets: batches come in at most that
    many shapes), a graph per shape, static; cuda_graphs: replayed as CUDA graphs ("reduce-
    overhead": one launch a graph instead of one a kernel; on a CPU, plain compiled graphs)."""
    if not shapes:
        return torch.compile(model, dynamic=True)
    # a recompile per shape; +1 for a length past the last bucket (BPE-dropout)
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, shapes + 1)
    return torch.compile(model, dynamic=False, mode="reduce-overhead" if cuda_graphs else None)


def forward_backward(model: nn.Module, batches: list[tuple[Tensor, Tensor, Tensor]], *,
                     scale: float, eps: float, pad_id: int, rdrop: float = 0.0,
                     scaler: torch.amp.GradScaler | None = None) -> tuple[float, float]:
    """Accumulate the gradients of several batches (src, tgt_in, tgt_out) of the summed loss
    times `scale`: 1 / (target tokens of the whole update), so that accumulation equals one
    large batch (times the world size under DistributedDataParallel, which averages; 0 for a
    rank with no batch of its own). The fp16 `scaler` scales the loss further. With DDP the
    gradients are summed across ranks at the last batch only. With rdrop (R-Drop's alpha) each
    batch runs twice in one forward pass, under independent dropout, and the loss is per target
    token of both passes (fairseq's normalisation). Returns the summed smoothed loss and NLL
    (per pass)."""
    passes = 2 if rdrop else 1
    loss_total = nll_total = 0.0
    for i, batch in enumerate(batches):
        src, tgt_in, tgt_out = (t.repeat(2, 1) for t in batch) if rdrop else batch
        last = i == len(batches) - 1
        sync = model.no_sync() if hasattr(model, "no_sync") and not last else \
            contextlib.nullcontext()
        with sync:
            states = model(src, tgt_in, project=False)
            generator = getattr(model, "module", model).generator  # DDP wraps the model
            loss, nll, _ = label_smoothed_nll(states.flatten(0, 1), generator.weight,
                                              tgt_out.flatten(), eps=eps, pad_id=pad_id,
                                              rdrop=rdrop, bias_V=generator.bias)
            scaled = loss * (scale / passes)
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        loss_total, nll_total = loss_total + loss.item() / passes, nll_total + nll.item() / passes
    return loss_total, nll_total



def apply_update(model: Transformer, optimizer: torch.optim.Optimizer,
                 scaler: torch.amp.GradScaler, *, clip_norm: float, loss_finite: bool) -> bool:
    """One optimizer update from the accumulated gradients, unless the loss or the gradient is
    not finite (then the parameters and Adam's moments stay as they are). Returns whether the
    update was applied."""
    scaler.unscale_(optimizer)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)
    applied = loss_finite and bool(torch.isfinite(norm))
    if applied:
        if clip_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(model.parameters(), clip_norm, norm)
        scaler.step(optimizer)
    scaler.update()  # fp16: a non-finite gradient lowers the loss scale
    return applied


def first_nonfinite_gradient(model: Transformer) -> str | None:
    """The first parameter (in definition order) whose gradient has a NaN or an infinity."""
    for name, p in model.named_parameters():
        if p.grad is not None and not bool(torch.isfinite(p.grad).all()):
            return name
    return None
