"""Training (§5): the warmup learning-rate schedule, label-smoothed loss, the train loop with
validation, logging and checkpoints, and resuming a run from its latest checkpoint."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import random
import time
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.parallel import DistributedDataParallel

from .attention import attention_kernels
from .checkpoint import (
    STATE_FILE,
    clean_temporaries,
    latest_checkpoint,
    load_checkpoint,
    read_state,
    save_checkpoint,
)
from .config import Config, ModelConfig, TrainConfig, config_to_dict, without_retired
from .cpu_speed import bf16_pays, cpu_model, probed_gflops, warn_if_bf16_is_slow
from .data import VOCAB_FILE, ParallelData, load_meta, load_vocab, token_batches
from .distributed import World, all_sum, gather_rng, init_world, shutdown
from .evaluate import sacrebleu_scores
from .metrics import MetricsLog, plot_curves, resident_mib
from .model import Transformer, matmul_dtype
from .progress import Progress
from .translator import Translator

log = logging.getLogger(__name__)


def noam_lr(step: int, *, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) (§5.3, eq. 3);
    step counts from 1."""
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def learning_rate(step: int, tcfg: TrainConfig, d_model: int,
                  cooldown: tuple[float, int] | None = None) -> float:
    """The rate of update `step` (from 1): eq. (3) times train.lr_scale; over a cooldown
    (first, last) (`cooldown_steps`), times min(1, (last - step + 1) / (last - first + 1)),
    falling linearly to 1/(last - first + 1) of eq. (3) at its last step (a re-planned
    cooldown's `first` is where its line would start: `replan_cooldown`)."""
    lr = noam_lr(step, d_model=d_model, warmup_steps=tcfg.warmup_steps, scale=tcfg.lr_scale)
    if cooldown is not None:
        first, last = cooldown
        lr *= min(1.0, (last - step + 1) / (last - first + 1))
    return lr


def cooldown_steps(tcfg: TrainConfig, state: dict) -> tuple[float, int] | None:
    """The first and last step of the rate's cooldown, if any: the last
    train.lr_cooldown_steps of train.max_steps, or the steps `plan_cooldown` chose when
    train.lr_cooldown_minutes were left of train.max_minutes (kept in the run's state)."""
    if tcfg.lr_cooldown_steps:
        return tcfg.max_steps - tcfg.lr_cooldown_steps + 1, tcfg.max_steps
    planned = state.get("cooldown")  # absent from checkpoints older than the option
    return (planned[0], planned[1]) if planned else None


def plan_cooldown(tcfg: TrainConfig, state: dict) -> list[int] | None:
    """With train.lr_cooldown_minutes, once no more than that is left of train.max_minutes:
    the cooldown's [first, last] step, as many steps as the run's mean pace so far (train
    seconds per step, validations and saves included) fits into 97 % of the time left, so that
    it ends before the budget does. None before then, or once planned."""
    left = 60 * tcfg.max_minutes - state["train_seconds"]
    if not tcfg.lr_cooldown_minutes or state.get("cooldown") or not state["step"] \
            or left > 60 * tcfg.lr_cooldown_minutes:
        return None
    pace = state["train_seconds"] / state["step"]
    return [state["step"] + 1, state["step"] + max(1, int(0.97 * left / pace))]


def replan_cooldown(tcfg: TrainConfig, state: dict) -> list[float] | None:
    """A timed cooldown planned at step s0 after t0 train seconds (state "cooldown_since"),
    re-planned at a later step s (a checkpoint step: `train`) because a machine's speed drifts:
    its last step becomes the one that the pace since s0 fits into 97 % of the time left, and
    the rate falls on in a straight line from its value at step s + 1 to that step. Returns
    [first, last] of the new line (`first`, where it would reach eq. (3)'s full rate, need not
    be a whole step); None for a cooldown by steps, one not planned, over or older than this,
    and until a fifth of train.lr_cooldown_minutes has passed: a shorter pace is one event's
    (a validation's 6 s in the first 20 steps once cut a 4,557-step plan to 2,077)."""
    cooldown, since = state.get("cooldown"), state.get("cooldown_since")
    if not tcfg.lr_cooldown_minutes or not cooldown or not since:
        return None
    (first, last), (s0, t0) = cooldown, since
    step, seconds = state["step"], state["train_seconds"]
    if not s0 < step < last or seconds - t0 < 60 * tcfg.lr_cooldown_minutes / 5:
        return None
    pace = (seconds - t0) / (step - s0)
    new_last = step + max(1, int(0.97 * (60 * tcfg.max_minutes - seconds) / pace))
    rate = (last - step) / (last - first + 1)  # of eq. (3), at step + 1
    return [new_last + 1 - (new_last - step) / rate, new_last]


def label_smoothed_nll(x_ND: Tensor, weight_VD: Tensor, target_N: Tensor, *, eps: float,
                       pad_id: int, rdrop: float = 0.0) -> tuple[Tensor, Tensor, int]:
    """Label-smoothed cross-entropy (§5.4, Szegedy et al.) of the logits x W^T of the
    pre-softmax linear: the target distribution puts 1 - eps on the reference token and eps
    spread uniformly over the vocabulary. Returns (smoothed loss summed over non-pad targets,
    their NLL sum, their count).

    With rdrop = alpha > 0 (R-Drop, Liang et al., 2021; not in the paper) the rows are two
    passes of one batch under independent dropout, the second pass's N/2 rows after the
    first's, and the loss adds alpha/2 (KL(P1 || P2) + KL(P2 || P1)) for each pair of rows."""
    keep_N = target_N.ne(pad_id)
    loss, nll = ProjectedLabelSmoothedNLL.apply(x_ND, weight_VD, target_N, keep_N, eps, rdrop)
    return loss, nll, int(keep_N.sum())


class ProjectedLabelSmoothedNLL(torch.autograd.Function):
    """The pre-softmax linear and the loss in one, with the gradient written out:
    d loss_n / d logit_nv = g_nv = softmax_nv - (1 - eps) [v = target_n] - eps / V, so
    d/dx = g W and d/dW = g^T x. A block of rows at a time, the logits are made, give the loss
    and (when a gradient is wanted) their share of both gradients, and are dropped: the (N, V)
    logits and their gradient never exist whole (for a 4k-token batch and an 8k vocabulary,
    131 MB each in fp32), and each block's softmax passes stay near the cache (autograd through
    log_softmax, gather and mean made about eight passes over the whole array: 30 % of a
    Transformer-tiny step on the 2-core CPU, where the block-wise loss took 8 %). The gradients
    are made in the forward pass and scaled by the incoming gradient in the backward one. The
    matmuls run in the autocast dtype when autocast is on, the softmax in fp32. The NLL (for
    perplexity) carries no gradient.

    R-Drop's term alpha/2 D, D = KL(P || Q) + KL(Q || P) = sum_v (p_v - q_v)(log p_v - log q_v)
    for the logits a and b of a pair of rows, has dD/da = p (log p - log q - KL(P || Q)) + p - q
    and dD/db = q (log q - log p - KL(Q || P)) + q - p; both rows of a pair are in one block."""

    @staticmethod
    def forward(ctx, x_ND: Tensor, weight_VD: Tensor, target_N: Tensor, keep_N: Tensor,
                eps: float, rdrop: float):
        device, dtype = x_ND.device.type, matmul_dtype(x_ND)
        want_x, want_w = ctx.needs_input_grad[:2]
        x, w = x_ND.to(dtype), weight_VD.to(dtype)
        V = w.size(0)
        passes = 2 if rdrop else 1
        M = len(x) // passes  # the rows of one pass
        nll_N = x_ND.new_empty(len(target_N), dtype=torch.float32)
        loss_N = torch.empty_like(nll_N)
        grad_x = torch.empty_like(x_ND) if want_x else None
        grad_w = torch.zeros_like(weight_VD, dtype=torch.float32) if want_w else None
        with torch.autocast(device, enabled=False):  # the dtypes are chosen above
            for block in row_blocks(M, passes * V, dtype, device):
                rows = [slice(block.start + k * M, block.stop + k * M) for k in range(passes)]
                # float() first: log_softmax(dtype=float32) of bf16 logits took 1.5x as long
                logps_RV = [torch.log_softmax((x[r] @ w.t()).float(), dim=-1) for r in rows]
                for r, logp_RV in zip(rows, logps_RV, strict=True):
                    nll_R = -logp_RV.gather(1, target_N[r, None]).squeeze(1)
                    nll_N[r], loss_N[r] = nll_R, (1.0 - eps) * nll_R - eps * logp_RV.mean(-1)
                if rdrop:
                    p_RV, q_RV = logps_RV[0].exp(), logps_RV[1].exp()
                    diff_RV = logps_RV[0] - logps_RV[1]
                    kl_pq_R1 = (p_RV * diff_RV).sum(-1, keepdim=True)
                    kl_qp_R1 = -(q_RV * diff_RV).sum(-1, keepdim=True)
                    loss_N[rows[0]] += rdrop / 2 * (kl_pq_R1 + kl_qp_R1).squeeze(1)
                if not (want_x or want_w):
                    continue
                if rdrop:  # its share of the gradient, before the softmaxes are reused below
                    kl_grads_RV = [rdrop / 2 * (p_RV * (diff_RV - kl_pq_R1) + p_RV - q_RV),
                                   rdrop / 2 * (q_RV * (-diff_RV - kl_qp_R1) + q_RV - p_RV)]
                gs_RV = [p_RV, q_RV] if rdrop else [logps_RV[0].exp_()]
                for k, (r, g_RV) in enumerate(zip(rows, gs_RV, strict=True)):
                    target_R1 = target_N[r, None]
                    g_RV.sub_(eps / V)  # softmax - the smoothed target
                    g_RV.scatter_add_(1, target_R1, g_RV.new_full(target_R1.shape, eps - 1.0))
                    if rdrop:
                        g_RV += kl_grads_RV[k]
                    g_RV = g_RV.mul_(keep_N[r, None]).to(dtype)  # padding: no gradient
                    if want_x:
                        grad_x[r] = g_RV @ w
                    if want_w and dtype == torch.float32:
                        grad_w.addmm_(g_RV.t(), x[r])
                    elif want_w:
                        grad_w += g_RV.t() @ x[r]
        ctx.grads = grad_x, grad_w
        zero = loss_N.new_zeros(())  # where(), not indexing: no sync, no data-dependent shape
        nll = torch.where(keep_N, nll_N, zero).sum()
        ctx.mark_non_differentiable(nll)
        return torch.where(keep_N, loss_N, zero).sum(), nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor):
        grad_x, grad_w = ctx.grads
        ctx.grads = None
        if grad_x is not None:
            grad_x = grad_x.mul_(grad_loss.to(grad_x.dtype))
        if grad_w is not None:
            grad_w = grad_w.mul_(grad_loss)
        return grad_x, grad_w, None, None, None, None


def row_blocks(n: int, width: int, dtype: torch.dtype, device: str) -> list[slice]:
    """Row slices whose logits take about 16 MB in the matmul's dtype on CPU: 1,048 rows of an
    8k vocabulary in bf16 (with 524 the Transformer-tiny bf16 step was 6 % slower than with the
    unfused loss; with 1,048 as fast, in-process A/B), 524 in fp32 (less memory: base fp32 peak
    RSS 3,994 MiB against 4,031 with 1,048 rows). One slice on GPUs, where the extra kernel
    launches would cost more."""
    size = n if device == "cuda" else max(1, (16 << 20) // (width * dtype.itemsize))
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def make_optimizer(model: nn.Module, tcfg: TrainConfig) -> torch.optim.Adam:
    """Adam (§5.3); the learning rate is set before every step. fused: one pass over each
    parameter for the whole update, no temporaries (torch's default, foreach, makes one pass per
    operation over all parameters and a temporary the size of the model): on the 2-core Xeon
    36 ms a step against 162 at the base shape, 7 against 29 at the small shape, the same
    parameters to 3e-8 after 30 steps."""
    return torch.optim.Adam(model.parameters(), lr=0.0, betas=(tcfg.adam_beta1, tcfg.adam_beta2),
                            eps=tcfg.adam_eps, fused=True)


def compiled(model: nn.Module) -> nn.Module:
    """`model` compiled by torch.compile for training steps; it shares its parameters, and its
    attributes read through. Shapes are symbolic from the start (dynamic=True): token-budget
    batches differ in every dimension, and a graph per shape would recompile all the time."""
    return torch.compile(model, dynamic=True)


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
            weight = getattr(model, "module", model).generator.weight  # DDP wraps the model
            loss, nll, _ = label_smoothed_nll(states.flatten(0, 1), weight, tgt_out.flatten(),
                                              eps=eps, pad_id=pad_id, rdrop=rdrop)
            scaled = loss * (scale / passes)
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        loss_total, nll_total = loss_total + loss.item() / passes, nll_total + nll.item() / passes
    return loss_total, nll_total


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
                                          tgt_out.flatten(), eps=eps, pad_id=model.cfg.pad_id)
        loss_sum, nll_sum, n_tokens = loss_sum + float(loss), nll_sum + float(nll), n_tokens + n
    model.train(was_training)
    return {"loss": loss_sum / n_tokens, "nll": nll_sum / n_tokens,
            "ppl": math.exp(nll_sum / n_tokens)}


def validation_bleu(model: Transformer, data_dir: Path, cfg: Config) -> dict:
    """Beam-search translations of the validation sources scored against their references."""
    was_training = model.training
    translator = Translator(model, load_vocab(data_dir), cfg.decode)
    sources = (data_dir / "valid.src.txt").read_text(encoding="utf-8").splitlines()
    refs = (data_dir / "valid.tgt.txt").read_text(encoding="utf-8").splitlines()
    hyps = translator.translate(sources)
    model.train(was_training)
    bleu, signature, chrf, _ = sacrebleu_scores(hyps, refs)
    return {"bleu": bleu, "chrf": chrf, "bleu_signature": signature}


# Train settings that may change when a run is resumed: budgets, cadence, device and threads.
RESUMABLE_TRAIN_KEYS = {"max_steps", "max_epochs", "max_minutes", "log_every", "valid_every",
                        "valid_bleu", "save_every", "save_every_minutes", "keep_last", "threads",
                        "device", "compile", "patience", "max_nonfinite"}

# What an exact resume reads from a checkpoint's state.json besides the random states (which
# load_checkpoint checks). A checkpoint that lacks one is refused, naming it.
STATE_KEYS = ("step", "epoch", "batch_in_epoch", "tokens", "shuffle_seed", "best_score",
              "best_step", "bad_validations", "nonfinite_steps", "nonfinite_in_a_row",
              "grad_scaler", "world_size", "train_seconds", "fingerprint")


SINGLE_PROCESS = World()


class ResumeMismatch(ValueError):
    """A run directory's checkpoint was trained with another config, vocabulary or data."""


class ResumeError(ValueError):
    """A checkpoint lacks part of the state that an exact resume needs."""


class TrainingDiverged(RuntimeError):
    """train.max_nonfinite steps in a row had a non-finite loss or gradient."""


def fingerprint(cfg: Config, meta: dict) -> dict:
    """What a resumed run must share with its checkpoint: the model, the optimisation
    settings, the vocabulary and the data (sha256 of the prepared inputs)."""
    return {"model": config_to_dict(cfg.model), "train": optimisation_settings(cfg.train),
            "vocab_sha256": meta["vocab_sha256"],
            "data_sha256": {name: [f["src_sha256"], f["tgt_sha256"]]
                            for name, f in meta["inputs"].items()}}


def optimisation_settings(tcfg: TrainConfig) -> dict:
    return {k: v for k, v in config_to_dict(tcfg).items() if k not in RESUMABLE_TRAIN_KEYS}


def brought_up_to_date(saved: dict, source: str) -> dict:
    """A checkpoint's fingerprint as this code would write it. Model and train settings added
    since are filled in at their defaults: a new option arrives off, as the code that wrote the
    checkpoint behaved, so a run resumes across the upgrade unless the option is now on. Retired
    ones (`config.RETIRED`) are dropped where their value is what the code does now (another
    value stays, a difference)."""
    saved = without_retired(saved, source)
    defaults = {"model": config_to_dict(ModelConfig()),
                "train": optimisation_settings(TrainConfig())}
    return saved | {section: values | saved.get(section, {})
                    for section, values in defaults.items()}


def fingerprint_differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Dotted names of the entries that differ, with both values."""
    out = []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += fingerprint_differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key} (checkpoint: {a!r}, now: {b!r})")
    return out


def new_state(cfg: Config, meta: dict, world: World) -> dict:
    return {"step": 0, "epoch": 0, "batch_in_epoch": 0, "tokens": 0,
            "shuffle_seed": cfg.train.seed, "best_score": None, "best_step": None,
            "bad_validations": 0, "nonfinite_steps": 0, "nonfinite_in_a_row": 0,
            "grad_scaler": {}, "world_size": world.size, "train_seconds": 0.0,
            "cooldown": None, "cooldown_since": None, "fingerprint": fingerprint(cfg, meta)}


def resume(path: Path, model: Transformer, optimizer: torch.optim.Optimizer,
           scaler: torch.amp.GradScaler, fresh: dict, *, ignore_mismatch: bool,
           world: World = SINGLE_PROCESS) -> dict:
    """Restore everything from checkpoint `path`, after checking that its state is complete and
    that it was trained with the same config, vocabulary, data and world size as `fresh`."""
    saved = read_state(path)
    missing = [key for key in STATE_KEYS if key not in saved]
    if missing:
        raise ResumeError(f"{path / STATE_FILE}: missing {', '.join(missing)}; "
                          "cannot resume exactly from this checkpoint")
    if saved["world_size"] != world.size:
        raise ResumeMismatch(f"{path} was trained by {saved['world_size']} processes, this run "
                             f"has {world.size}: resume with the same torchrun --nproc-per-node "
                             "and --nnodes")
    differences = fingerprint_differences(
        brought_up_to_date(saved["fingerprint"], str(path / STATE_FILE)), fresh["fingerprint"])
    if differences and not ignore_mismatch:
        raise ResumeMismatch(
            f"cannot resume {path.parent.parent} from {path.name}: " + "; ".join(differences) +
            " (use another --run-dir, or --ignore-mismatch to resume anyway)")
    if differences:
        log.warning("resuming despite differences: %s", "; ".join(differences))
    state = load_checkpoint(path, model, optimizer, rank=world.rank)
    if state["grad_scaler"] and scaler.is_enabled():
        scaler.load_state_dict(state["grad_scaler"])
    log.info("resuming from %s (step %d)", path, state["step"])
    return state | {"fingerprint": fresh["fingerprint"]}


def precision(tcfg: TrainConfig, device: torch.device) -> contextlib.ExitStack:
    """Autocast (bf16, or fp16 with the loss scaler) and the attention kernels."""
    stack = contextlib.ExitStack()
    stack.enter_context(torch.autocast(device.type, enabled=tcfg.bf16 or tcfg.fp16,
                                       dtype=torch.float16 if tcfg.fp16 else torch.bfloat16))
    if device.type == "cpu":
        # Measured on a 2-core Zen 5, small shape, 4k-token Multi30k batches: the math backend
        # trains 1.3x faster than the CPU flash kernel in bf16 (3,660 vs 2,830 tok/s), the same
        # in fp32; the model keeps plain SDPA, the choice is made here.
        stack.enter_context(sdpa_kernel(SDPBackend.MATH))
    else:
        stack.enter_context(attention_kernels(device))
    return stack


def auto_bf16(device: torch.device, world: World) -> bool:
    """train.bf16=auto: bf16 autocast where it pays (cpu_speed.bf16_pays), as rank 0 finds it,
    so that every rank of a run computes alike."""
    choice = world.is_main and bf16_pays(device)
    choice = all_sum([float(choice)], world, device)[0] > 0
    if world.is_main:
        log.info("train.bf16=auto: %s", "bf16 autocast" if choice else "float32")
    return choice


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


def train(cfg: Config, *, data_dir: Path, run_dir: Path, ignore_mismatch: bool = False) -> dict:
    """Train on a prepared data directory into run_dir; resume exactly if run_dir has
    checkpoints (refusing, unless ignore_mismatch, if config, vocabulary or data differ from the
    checkpoint's). Under torchrun, one process per device (distributed.py). Returns the final
    state."""
    tcfg = cfg.train
    data_dir, run_dir = Path(data_dir), Path(run_dir)
    if tcfg.threads:
        torch.set_num_threads(tcfg.threads)
    world, device = init_world(tcfg.device)
    clean = False
    try:
        state = _train(cfg, data_dir, run_dir, ignore_mismatch, world, device)
        clean = True
        return state
    finally:
        shutdown(world, clean=clean)


def _train(cfg: Config, data_dir: Path, run_dir: Path, ignore_mismatch: bool, world: World,
           device: torch.device) -> dict:
    tcfg = cfg.train
    vocab = load_vocab(data_dir)
    meta = load_meta(data_dir)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=len(vocab)))
    config = config_to_dict(cfg) | {"data_dir": str(data_dir),
                                    "languages": [meta["src_lang"], meta["tgt_lang"]]}
    if world.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n",
                                             encoding="utf-8")

    random.seed(tcfg.seed)
    np.random.seed(tcfg.seed)
    torch.manual_seed(tcfg.seed + world.rank)  # the same initial weights are broadcast by DDP
    train_data = ParallelData(data_dir, "train")
    valid_data = ParallelData(data_dir, "valid") if (data_dir / "valid.src.txt").exists() else None
    model = Transformer(cfg.model).to(device)
    if tcfg.bf16 == "auto":  # the run's config keeps "auto"; this process uses the choice
        tcfg = dataclasses.replace(tcfg, bf16=auto_bf16(device, world))
    elif tcfg.bf16 and world.is_main:
        warn_if_bf16_is_slow(device, setting="train.bf16",
                             instead="train in float32 (--train.bf16=false)")
    optimizer = make_optimizer(model, tcfg)
    scaler = torch.amp.GradScaler(device.type, enabled=tcfg.fp16)
    state = new_state(cfg, meta, world)
    if world.is_main:
        clean_temporaries(run_dir)
    latest = latest_checkpoint(run_dir)
    if latest is not None:
        state = resume(latest, model, optimizer, scaler, state, ignore_mismatch=ignore_mismatch,
                       world=world)
    net = model if world.size == 1 else DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None)
    if tcfg.compile:
        net = compiled(net)
    model.train()
    metrics = MetricsLog(run_dir, resume_step=state["step"] if latest is not None else None,
                         enabled=world.is_main)
    if world.is_main and device.type == "cpu":  # today's pace of this machine, for comparisons
        gflops, cpu = probed_gflops(), cpu_model()
        metrics.write("machine", state["step"], cpu=cpu, threads=torch.get_num_threads(),
                      bf16=tcfg.bf16,
                      **{f"{dtype}_matmul_gflops": round(v, 1) for dtype, v in gflops.items()})
        log.info("%s multiplies matrices at %.0f GFLOP/s in float32 and %.0f in bfloat16 with "
                 "%d threads", cpu, gflops["float32"], gflops["bfloat16"], torch.get_num_threads())
    progress = Progress(start=state["step"], total=tcfg.max_steps, enabled=world.is_main)
    vocab_path = data_dir / VOCAB_FILE

    saved_step = state["step"] if latest is not None else None  # the step on disk

    def save() -> Path:
        """Collective: every rank's random state goes to rank 0, which writes."""
        nonlocal saved_step
        saved_step = state["step"]
        state["grad_scaler"] = scaler.state_dict() if scaler.is_enabled() else {}
        other_ranks_rng = gather_rng(world, device)
        path = run_dir / "checkpoints" / f"step_{state['step']:08d}"
        if world.is_main:
            path = save_checkpoint(run_dir=run_dir, model=model, optimizer=optimizer,
                                   state=state, config=config, vocab_path=vocab_path,
                                   keep_last=tcfg.keep_last, extra_tensors=other_ranks_rng)
            log.info("saved %s", path)
        return path

    validated_step = state["step"]  # the step this process starts from is not validated again

    def run_validation() -> None:
        nonlocal validated_step
        validated_step = state["step"]
        if valid_data is None or not world.is_main:
            return
        values = validate(model, valid_data, max_tokens=tcfg.max_tokens,
                          eps=tcfg.label_smoothing)
        if tcfg.valid_bleu:
            values |= validation_bleu(model, data_dir, cfg)
        score = values["bleu"] if "bleu" in values else -values["loss"]
        if state["best_score"] is None or score > state["best_score"]:
            state["best_score"], state["best_step"], state["bad_validations"] = \
                score, state["step"], 0
        else:
            state["bad_validations"] += 1
        metrics.write("valid", state["step"], **values, best_step=state["best_step"])
        log.info("validation at step %d: %s", state["step"],
                 {k: round(v, 3) if isinstance(v, float) else v for k, v in values.items()})

    started = time.monotonic()
    seconds_before = state["train_seconds"]
    last_save = started
    window = {"tokens": 0, "loss_tokens": 0, "loss": 0.0, "nll": 0.0, "start": started}

    def out_of_patience() -> bool:
        return tcfg.patience > 0 and state["bad_validations"] >= tcfg.patience

    def out_of_budget(*, epoch_finished: bool = False) -> bool:
        """Step, epoch or cooldown budget spent; `epoch_finished`: the step just taken was the
        epoch's last (its counter moves on after the step is saved)."""
        cooldown = cooldown_steps(tcfg, state)
        return (tcfg.max_steps > 0 and state["step"] >= tcfg.max_steps) or \
            (tcfg.max_epochs > 0 and state["epoch"] + epoch_finished >= tcfg.max_epochs) or \
            (cooldown is not None and state["step"] >= cooldown[1])

    def stop_and_save_due() -> tuple[bool, bool, float]:
        """Clock- and validation-based decisions and the train seconds (the ranks' mean),
        agreed by all ranks."""
        now = time.monotonic()
        seconds = seconds_before + now - started
        out_of_time = bool(tcfg.max_minutes) and seconds >= 60 * tcfg.max_minutes
        minutes_due = bool(tcfg.save_every_minutes) and \
            now - last_save >= 60 * tcfg.save_every_minutes
        stop, due, seconds_sum = all_sum(
            [float(out_of_time or out_of_patience()), float(minutes_due), seconds], world, device)
        return stop > 0, due > 0, seconds_sum / world.size

    stop = out_of_budget() or stop_and_save_due()[0]
    while not stop:
        epoch_data = train_data
        if tcfg.bpe_dropout:  # a segmentation per epoch, drawn from (seed, epoch)
            seed = np.random.default_rng([state["shuffle_seed"], state["epoch"]]).integers(2**31)
            epoch_data = train_data.resegmented(vocab, dropout=tcfg.bpe_dropout, seed=int(seed))
        batches = token_batches(epoch_data.src_lengths, epoch_data.tgt_lengths,
                                max_tokens=tcfg.max_tokens, seed=state["shuffle_seed"],
                                epoch=state["epoch"])
        while state["batch_in_epoch"] < len(batches) and not stop:
            first = state["batch_in_epoch"]
            group = batches[first : first + tcfg.accumulate * world.size]
            lr = learning_rate(state["step"] + 1, tcfg, cfg.model.d_model,
                               cooldown_steps(tcfg, state))
            for param_group in optimizer.param_groups:
                param_group["lr"] = lr
            n_target = int(sum(epoch_data.tgt_lengths[b].sum() for b in group))
            # this rank's share; a rank left without one (end of epoch) adds zero gradient
            mine = group[world.rank :: world.size]
            scale = world.size / n_target if mine else 0.0
            tensors = [tuple(t.to(device, non_blocking=True) for t in epoch_data.collate(b))
                       for b in (mine or group[:1])]
            with precision(tcfg, device):
                loss_local, nll_local = forward_backward(
                    net, tensors, scale=scale, eps=tcfg.label_smoothing,
                    pad_id=cfg.model.pad_id, rdrop=tcfg.rdrop_alpha, scaler=scaler)
            if not mine:
                loss_local = nll_local = 0.0
            loss_total, nll_total = all_sum([loss_local, nll_local], world, device)
            loss_finite = math.isfinite(loss_total)
            applied = apply_update(model, optimizer, scaler, clip_norm=tcfg.clip_norm,
                                   loss_finite=loss_finite)
            culprit = None if applied else first_nonfinite_gradient(model)
            optimizer.zero_grad(set_to_none=True)
            state["step"] += 1
            state["batch_in_epoch"] = first + len(group)
            state["tokens"] += n_target
            window["tokens"] += n_target
            if applied:
                state["nonfinite_in_a_row"] = 0
                window["loss_tokens"] += n_target
                window["loss"] += loss_total
                window["nll"] += nll_total
            else:
                state["nonfinite_steps"] += 1
                state["nonfinite_in_a_row"] += 1
                if world.is_main:
                    log.warning("step %d: non-finite %s, update skipped (first non-finite "
                                "gradient: %s)", state["step"],
                                "gradient" if loss_finite else "loss", culprit)
                metrics.write("nonfinite", state["step"], loss=repr(loss_total),
                              gradient=culprit, in_a_row=state["nonfinite_in_a_row"])
            if state["step"] % tcfg.log_every == 0:
                now = time.monotonic()
                # averages per target token over the finite steps since the last log line
                n = max(window["loss_tokens"], 1)
                values = {"loss": window["loss"] / n, "nll": window["nll"] / n, "lr": lr,
                          "tokens_per_s": window["tokens"] / (now - window["start"]),
                          "epoch": state["epoch"], "nonfinite_steps": state["nonfinite_steps"]}
                if (rss := resident_mib()) is not None:
                    values["rss_mib"] = round(rss)
                metrics.write("train", state["step"], **values)
                progress.update(state["step"], loss=values["loss"], lr=lr,
                                tok_s=round(values["tokens_per_s"]), epoch=state["epoch"])
                window = {"tokens": 0, "loss_tokens": 0, "loss": 0.0, "nll": 0.0, "start": now}
            state["train_seconds"] = seconds_before + time.monotonic() - started
            if state["nonfinite_in_a_row"] >= tcfg.max_nonfinite:
                path = save()  # the parameters are the last finite ones
                metrics.close()
                progress.close()
                raise TrainingDiverged(
                    f"{state['nonfinite_in_a_row']} steps in a row (up to step {state['step']}) "
                    f"had a non-finite loss or gradient (last: {culprit or 'the loss'}); "
                    f"stopped with checkpoint {path}. Lower train.lr_scale, set "
                    "train.clip_norm, or use bf16 instead of fp16.")
            if state["step"] % tcfg.valid_every == 0:
                run_validation()
            stop_now, minutes_due, seconds = stop_and_save_due()
            if planned := plan_cooldown(tcfg, state | {"train_seconds": seconds}):
                state["cooldown"], state["cooldown_since"] = planned, [state["step"], seconds]
                if world.is_main:
                    log.info("%.1f minutes left of train.max_minutes: the learning rate falls "
                             "linearly over steps %d-%d, the last of this run",
                             tcfg.max_minutes - seconds / 60, *planned)
            elif state["step"] % tcfg.save_every == 0 and \
                    (replanned := replan_cooldown(tcfg, state | {"train_seconds": seconds})):
                if world.is_main and replanned[1] != state["cooldown"][1]:
                    log.info("%.1f minutes left of train.max_minutes: at the pace since the "
                             "cooldown began, it ends at step %d (planned: %d)",
                             tcfg.max_minutes - seconds / 60, replanned[1], state["cooldown"][1])
                state["cooldown"] = replanned
            stop = stop_now or out_of_budget(
                epoch_finished=state["batch_in_epoch"] >= len(batches))
            if stop and validated_step != state["step"]:
                run_validation()  # the last step's scores, in its checkpoint's state
            if stop or state["step"] % tcfg.save_every == 0 or minutes_due:
                save()
                last_save = time.monotonic()
        if state["batch_in_epoch"] >= len(batches):
            state["epoch"] += 1
            state["batch_in_epoch"] = 0
            stop = stop or out_of_budget()  # a resumed run whose last epoch had ended
    progress.close()
    if out_of_patience():
        log.info("stopping: no better validation score for %d validations (best at step %s)",
                 tcfg.patience, state["best_step"])
    cooldown = cooldown_steps(tcfg, state)
    if cooldown is not None and state["step"] < cooldown[1]:
        if tcfg.lr_cooldown_steps:
            budget = f"train.max_steps={tcfg.max_steps}"
            advice = "run train again on this run directory to finish it, or lower " \
                "train.max_steps to fit the time budget"
        else:
            budget = f"train.max_minutes={tcfg.max_minutes:g}"
            advice = "the steps ran slower than planned; run train again on this run " \
                "directory with a larger train.max_minutes to finish it" \
                if state["train_seconds"] >= 60 * tcfg.max_minutes else \
                "train.max_steps, train.max_epochs or train.patience stopped it first; run " \
                "train again on this run directory with a larger one to finish it"
        log.warning("stopped at step %d of %s: the learning rate's cooldown (to step %d) has "
                    "not finished; %s", state["step"], budget, cooldown[1], advice)
    state["train_seconds"] = seconds_before + time.monotonic() - started
    if saved_step != state["step"]:  # a run that stopped before its first step
        save()
    metrics.close()
    if world.is_main:
        plot_curves(run_dir)
    return state
