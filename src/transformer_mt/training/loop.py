"""The training loop (§5): for each update, the learning rate of eq. (3), forward and backward
over a token-budget batch, Adam, logging; periodic validation and checkpoints; an exact resume
from the latest checkpoint. "Is it time to validate / save / stop" and the cooldown's plan are
the small pieces below (`Budget`, `Clock`, `Cooldown`, `LossWindow`); setting a run up and
saving it are `Run`'s."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..config import Config, ConfigError, TrainConfig, config_to_dict
from ..data.batching import ShapeBuckets, token_batches
from ..data.dataset import ParallelData
from ..data.prepare import load_meta, load_vocab
from ..data.vocab import Vocabulary
from ..hardware.cpu_speed import cpu_model, probed_gflops, warn_if_bf16_is_slow
from ..hardware.onednn import bound_onednn_caches
from ..model.transformer import Transformer
from ..storage.model_dir import assign_weights, read_weights
from ..storage.names import CONFIG_FILE, WEIGHTS_FILE, split_file
from ..storage.run_dir import latest_checkpoint
from .checkpoint import clean_temporaries, save_checkpoint
from .distributed import World, all_sum, gather_rng, init_world, shutdown
from .fine_tune import check_init_data
from .metrics import MetricsLog, plot_curves, resident_mib
from .precision import auto_bf16, precision
from .progress import Progress
from .resume import initialised_as, new_state, resume
from .schedule import (
    cooldown_save_due,
    cooldown_steps,
    learning_rate,
    patience_cooldown,
    plan_cooldown,
    replan_cooldown,
)
from .state import TrainingState
from .step import apply_update, compiled, first_nonfinite_gradient, forward_backward, make_optimizer
from .validation import COLLAPSED_SPREAD, validate, validation_bleu

log = logging.getLogger(__name__)


class TrainingDiverged(RuntimeError):
    """train.max_nonfinite steps in a row had a non-finite loss or gradient."""


def train(cfg: Config, *, data_dir: Path, run_dir: Path, ignore_mismatch: bool = False,
          init_from: Path | None = None) -> TrainingState:
    """Train on a prepared data directory into run_dir; resume exactly if run_dir has
    checkpoints (refusing, unless ignore_mismatch, if config, vocabulary or data differ from the
    checkpoint's). `init_from`: a model directory whose weights a new run starts from (cfg.model
    must be its config: `init_model_config`; the data prepared with its vocabulary). Under
    torchrun, one process per device (distributed.py). Returns the final state."""
    bound_onednn_caches()  # bf16 steps in bounded memory; before this process's first product
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    world, device = init_world(cfg.train.device)
    clean = False
    try:
        run = Run.start(cfg, data_dir=Path(data_dir), run_dir=Path(run_dir),
                        ignore_mismatch=ignore_mismatch, world=world, device=device,
                        init_from=init_from)
        state = run_loop(run)
        clean = True
        return state
    finally:
        shutdown(world, clean=clean)


def run_loop(run: Run) -> TrainingState:
    """Updates until a budget, the clock or patience stops the run; validate and save on
    their cadence and at the end. Returns the final state."""
    tcfg, state, world = run.tcfg, run.state, run.world
    budget, cooldown = Budget(tcfg), Cooldown(tcfg)
    clock = Clock(tcfg, state, world, run.device, budget=budget)
    window = LossWindow(clock.started)
    stop = budget.spent(state) or clock.check(state).stop
    while not stop:
        data, batches = run.epoch(state)
        while state.batch_in_epoch < len(batches) and not stop:
            first = state.batch_in_epoch
            group = batches[first : first + tcfg.accumulate * world.size]
            lr = learning_rate(state.step + 1, tcfg, run.cfg.model.d_model,
                               cooldown_steps(tcfg, state))
            n_target, loss, nll, applied, culprit = run.update(data, group, lr)
            state.step += 1
            state.batch_in_epoch = first + len(group)
            state.tokens += n_target
            window.add(n_target, loss, nll, applied)
            if applied:
                state.nonfinite_in_a_row = 0
            else:
                run.record_nonfinite(loss, culprit)
            if state.step % tcfg.log_every == 0:
                run.log_train(window.flush(lr, state))
            state.train_seconds = clock.seconds()
            if state.nonfinite_in_a_row >= tcfg.max_nonfinite:
                run.diverged(culprit)
            if state.step % tcfg.valid_every == 0:
                run.validate()
            due = clock.check(state)
            cooldown.update(state, due, log_it=world.is_main)
            stop = due.stop or budget.spent(
                state, epoch_finished=state.batch_in_epoch >= len(batches))
            if stop and run.validated_step != state.step:
                run.validate()  # the last step's scores, in its checkpoint's state
            in_cooldown = cooldown_save_due(tcfg, state)
            if stop or (state.step % tcfg.save_every == 0 or due.save
                        if in_cooldown is None else in_cooldown):
                run.save()
                clock.saved()
        if state.batch_in_epoch >= len(batches):
            state.epoch += 1
            state.batch_in_epoch = 0
            stop = stop or budget.spent(state)  # a resumed run whose last epoch had ended
    run.progress.close()
    if budget.out_of_patience(state) and not tcfg.patience_cooldown:
        log.info("stopping: no better validation score for %d validations (best at step %s)",
                 tcfg.patience, state.best_step)
    cooldown.warn_if_unfinished(state)
    state.train_seconds = clock.seconds()
    if run.saved_step != state.step:  # a run that stopped before its first step
        run.save()
    run.finish()
    return state


@dataclass
class Budget:
    """When the run's step, epoch, cooldown or patience budget is spent."""

    tcfg: TrainConfig

    def out_of_patience(self, state: TrainingState) -> bool:
        return self.tcfg.patience > 0 and state.bad_validations >= self.tcfg.patience

    def spent(self, state: TrainingState, *, epoch_finished: bool = False) -> bool:
        """Step, epoch or cooldown budget spent; `epoch_finished`: the step just taken was the
        epoch's last (its counter moves on after the step is saved)."""
        tcfg, cooldown = self.tcfg, cooldown_steps(self.tcfg, state)
        return (tcfg.max_steps > 0 and state.step >= tcfg.max_steps) or \
            (tcfg.max_epochs > 0 and state.epoch + epoch_finished >= tcfg.max_epochs) or \
            (cooldown is not None and state.step >= cooldown[1])


@dataclass(frozen=True)
class Due:
    stop: bool  # out of time, or of patience (without train.patience_cooldown)
    save: bool  # train.save_every_minutes have passed since the last save
    out_of_patience: bool
    seconds: float  # train seconds so far, the ranks' mean


class Clock:
    """Train seconds across resumes, and the clock's decisions, agreed by all ranks."""

    def __init__(self, tcfg: TrainConfig, state: TrainingState, world: World,
                 device: torch.device, *, budget: Budget):
        self.tcfg, self.world, self.device, self.budget = tcfg, world, device, budget
        self.started = self.last_save = time.monotonic()
        self.seconds_before = state.train_seconds

    def seconds(self) -> float:
        return self.seconds_before + time.monotonic() - self.started

    def saved(self) -> None:
        self.last_save = time.monotonic()

    def check(self, state: TrainingState) -> Due:
        now = time.monotonic()
        seconds = self.seconds_before + now - self.started
        tcfg = self.tcfg
        out_of_time = bool(tcfg.max_minutes) and seconds >= 60 * tcfg.max_minutes
        minutes_due = bool(tcfg.save_every_minutes) and \
            now - self.last_save >= 60 * tcfg.save_every_minutes
        patience_out = self.budget.out_of_patience(state)  # known on rank 0, which validates
        stop, due, patience_out, seconds_sum = all_sum(
            [float(out_of_time or patience_out and not tcfg.patience_cooldown),
             float(minutes_due), float(patience_out), seconds], self.world, self.device)
        return Due(stop > 0, due > 0, patience_out > 0, seconds_sum / self.world.size)


@dataclass
class Cooldown:
    """A planned cooldown: when patience runs out (train.patience_cooldown), or when a timed
    cooldown's time (train.lr_cooldown_minutes or _share) is left, the latter re-planned at each
    save step from the pace since it began (schedule.py); logs each plan."""

    tcfg: TrainConfig

    def update(self, state: TrainingState, due: Due, *, log_it: bool) -> None:
        tcfg, now = self.tcfg, dataclasses.replace(state, train_seconds=due.seconds)
        if due.out_of_patience and tcfg.patience_cooldown and \
                (planned := patience_cooldown(tcfg, state)):
            state.cooldown = planned
            if log_it:
                log.info("no better validation score for %d validations (best at step %s): "
                         "the learning rate falls linearly over steps %d-%d, the last of this "
                         "run", tcfg.patience, state.best_step, *planned)
        elif planned := plan_cooldown(tcfg, now):
            state.cooldown, state.cooldown_since = planned, [state.step, due.seconds]
            if log_it:
                log.info("%.1f minutes left of train.max_minutes: the learning rate falls "
                         "linearly over steps %d-%d, the last of this run",
                         tcfg.max_minutes - due.seconds / 60, *planned)
        elif state.step % tcfg.save_every == 0 and (replanned := replan_cooldown(tcfg, now)):
            if log_it and replanned[1] != state.cooldown[1]:
                log.info("%.1f minutes left of train.max_minutes: at the pace since the "
                         "cooldown began, it ends at step %d (planned: %d)",
                         tcfg.max_minutes - due.seconds / 60, replanned[1],
                         state.cooldown[1])
            state.cooldown = replanned

    def warn_if_unfinished(self, state: TrainingState) -> None:
        tcfg, cooldown = self.tcfg, cooldown_steps(self.tcfg, state)
        if cooldown is None or state.step >= cooldown[1]:
            return
        if tcfg.cooldown_steps:
            budget = f"train.max_steps={tcfg.max_steps}"
            advice = "run train again on this run directory to finish it, or lower " \
                "train.max_steps to fit the time budget"
        else:
            budget = f"train.max_minutes={tcfg.max_minutes:g}"
            advice = "the steps ran slower than planned; run train again on this run " \
                "directory with a larger train.max_minutes to finish it" \
                if state.train_seconds >= 60 * tcfg.max_minutes else \
                "train.max_steps, train.max_epochs or train.patience stopped it first; run " \
                "train again on this run directory with a larger one to finish it"
        log.warning("stopped at step %d of %s: the learning rate's cooldown (to step %d) has "
                    "not finished; %s", state.step, budget, cooldown[1], advice)


@dataclass
class LossWindow:
    """Tokens, loss and NLL since the last log line; averages per target token over the
    updates that were applied."""

    start: float
    tokens: int = 0
    loss_tokens: int = 0
    loss: float = 0.0
    nll: float = 0.0

    def add(self, n_target: int, loss: float, nll: float, applied: bool) -> None:
        self.tokens += n_target
        if applied:
            self.loss_tokens += n_target
            self.loss += loss
            self.nll += nll

    def flush(self, lr: float, state: TrainingState) -> dict:
        now = time.monotonic()
        n = max(self.loss_tokens, 1)
        values = {"loss": self.loss / n, "nll": self.nll / n, "lr": lr,
                  "tokens_per_s": self.tokens / (now - self.start),
                  "epoch": state.epoch, "nonfinite_steps": state.nonfinite_steps}
        self.start, self.tokens, self.loss_tokens, self.loss, self.nll = now, 0, 0, 0.0, 0.0
        return values


@dataclass
class Run:
    """A training run's model, optimizer, data and records; `start` sets it up (or resumes)."""

    cfg: Config
    tcfg: TrainConfig  # cfg.train with train.bf16=auto resolved
    world: World
    device: torch.device
    run_dir: Path
    data_dir: Path
    config: dict  # what config.json and every checkpoint record
    vocab: Vocabulary
    train_data: ParallelData
    valid_data: ParallelData | None
    model: Transformer
    net: nn.Module  # the model as the steps run it: DDP-wrapped, compiled
    buckets: ShapeBuckets | None  # train.shape_buckets' shapes of the training batches
    optimizer: torch.optim.Adam
    scaler: torch.amp.GradScaler
    state: TrainingState
    metrics: MetricsLog
    progress: Progress
    saved_step: int | None  # the step on disk
    validated_step: int = field(init=False)

    def __post_init__(self):
        self.validated_step = self.state.step  # the step it starts from is not validated

    @classmethod
    def start(cls, cfg: Config, *, data_dir: Path, run_dir: Path, ignore_mismatch: bool,
              world: World, device: torch.device, init_from: Path | None = None) -> Run:
        vocab, meta = load_vocab(data_dir), load_meta(data_dir)
        if init_from is not None:
            check_init_data(cfg.model, init_from, data_dir, meta)
        else:
            cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model,
                                                                     vocab_size=len(vocab)))
        latest = latest_checkpoint(run_dir)
        cfg = initialised_as(cfg, latest)  # a resumed run records how its weights began
        if cfg.train.bpe_dropout and not isinstance(vocab, Vocabulary):
            raise ConfigError(f"train.bpe_dropout: {data_dir}'s vocabulary is not one "
                              "SentencePiece model (BPE-dropout resegments with it)")
        config = config_to_dict(cfg) | {"data_dir": str(data_dir),  # config.RUN_RECORD
                                        "languages": [meta["src_lang"], meta["tgt_lang"]]}
        if init_from is not None:
            config["init_from"] = str(init_from)
        if world.is_main:
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n",
                                            encoding="utf-8")
        tcfg = cfg.train
        random.seed(tcfg.seed)
        np.random.seed(tcfg.seed)
        torch.manual_seed(tcfg.seed + world.rank)  # the same initial weights are broadcast
        train_data = ParallelData(data_dir, "train")
        valid_data = ParallelData(data_dir, "valid") \
            if (data_dir / split_file("valid", "src", "txt")).exists() else None
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
        if latest is not None:
            state = resume(latest, model, optimizer, scaler, state,
                           ignore_mismatch=ignore_mismatch, world=world)
        elif init_from is not None:  # a new run from the model's weights
            weights = init_from / WEIGHTS_FILE
            assign_weights(model, read_weights(weights), weights)
            log.info("starting from the weights of %s", init_from)
        net = model if world.size == 1 else DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
        buckets = ShapeBuckets.of(train_data.src_lengths, train_data.tgt_lengths,
                                  n=tcfg.shape_buckets, max_tokens=tcfg.max_tokens,
                                  limit=cfg.model.max_positions) if tcfg.shape_buckets else None
        if tcfg.compile:
            cuda_graphs = tcfg.compile == "cuda_graphs"
            if cuda_graphs and device.type != "cuda" and world.is_main:
                log.warning("train.compile=cuda_graphs: CUDA graphs need a GPU; on %s the "
                            "steps run as compiled graphs without them", device)
            net = compiled(net, shapes=len(buckets.lengths) if buckets else 0,
                           cuda_graphs=cuda_graphs)
        model.train()
        resumed = state.step if latest is not None else None
        metrics = MetricsLog(run_dir, resume_step=resumed, enabled=world.is_main)
        if world.is_main:
            record_machine(metrics, state.step, device, bf16=tcfg.bf16)
        progress = Progress(start=state.step, total=tcfg.max_steps, enabled=world.is_main)
        return cls(cfg=cfg, tcfg=tcfg, world=world, device=device, run_dir=run_dir,
                   data_dir=data_dir, config=config, vocab=vocab, train_data=train_data,
                   valid_data=valid_data, model=model, net=net, buckets=buckets,
                   optimizer=optimizer,
                   scaler=scaler, state=state, metrics=metrics, progress=progress,
                   saved_step=resumed)

    def epoch(self, state: TrainingState) -> tuple[ParallelData, list[np.ndarray]]:
        """This epoch's data (segmented anew with BPE-dropout, from (seed, epoch)) and
        batches."""
        data = self.train_data
        if self.tcfg.bpe_dropout:
            seed = np.random.default_rng([state.shuffle_seed, state.epoch]).integers(2**31)
            data = data.resegmented(self.vocab, dropout=self.tcfg.bpe_dropout, seed=int(seed))
        return data, token_batches(data.src_lengths, data.tgt_lengths,
                                   max_tokens=self.tcfg.max_tokens,
                                   seed=state.shuffle_seed, epoch=state.epoch,
                                   buckets=self.buckets)

    def update(self, data: ParallelData, group: list[np.ndarray], lr: float
               ) -> tuple[int, float, float, bool, str | None]:
        """One update from the batches of `group` (this rank's share of them) at rate `lr`.
        Returns the group's target tokens, the summed loss and NLL over all ranks, whether the
        update was applied, and the first non-finite gradient's parameter where it was not."""
        tcfg, world = self.tcfg, self.world
        for param_group in self.optimizer.param_groups:
            param_group["lr"] = lr
        n_target = int(sum(data.tgt_lengths[b].sum() for b in group))
        # this rank's share; a rank left without one (end of epoch) adds zero gradient
        mine = group[world.rank :: world.size]
        scale = world.size / n_target if mine else 0.0
        tensors = [tuple(t.to(self.device, non_blocking=True)
                         for t in data.collate(b, self.buckets))
                   for b in (mine or group[:1])]
        with precision(tcfg, self.device):
            loss_local, nll_local = forward_backward(
                self.net, tensors, scale=scale, eps=tcfg.label_smoothing,
                pad_id=self.cfg.model.pad_id, rdrop=tcfg.rdrop_alpha, scaler=self.scaler)
        if not mine:
            loss_local = nll_local = 0.0
        loss, nll = all_sum([loss_local, nll_local], world, self.device)
        applied = apply_update(self.model, self.optimizer, self.scaler,
                               clip_norm=tcfg.clip_norm, loss_finite=math.isfinite(loss))
        culprit = None if applied else first_nonfinite_gradient(self.model)
        self.optimizer.zero_grad(set_to_none=True)
        return n_target, loss, nll, applied, culprit

    def record_nonfinite(self, loss: float, culprit: str | None) -> None:
        state = self.state
        state.nonfinite_steps += 1
        state.nonfinite_in_a_row += 1
        if self.world.is_main:
            log.warning("step %d: non-finite %s, update skipped (first non-finite gradient: %s)",
                        state.step, "gradient" if math.isfinite(loss) else "loss", culprit)
        self.metrics.write("nonfinite", state.step, loss=repr(loss), gradient=culprit,
                           in_a_row=state.nonfinite_in_a_row)

    def log_train(self, values: dict) -> None:
        if (rss := resident_mib()) is not None:
            values["rss_mib"] = round(rss)
        self.metrics.write("train", self.state.step, **values)
        self.progress.update(self.state.step, loss=values["loss"], lr=values["lr"],
                             tok_s=round(values["tokens_per_s"]), epoch=values["epoch"])

    def diverged(self, culprit: str | None) -> None:
        """Save the last finite parameters and raise TrainingDiverged."""
        state = self.state
        path = self.save()
        self.metrics.close()
        self.progress.close()
        raise TrainingDiverged(
            f"{state.nonfinite_in_a_row} steps in a row (up to step {state.step}) had a "
            f"non-finite loss or gradient (last: {culprit or 'the loss'}); stopped with "
            f"checkpoint {path}. Lower train.lr_scale, set train.clip_norm, or use bf16 "
            "instead of fp16.")

    def save(self) -> Path:
        """Collective: every rank's random state goes to rank 0, which writes."""
        state = self.state
        self.saved_step = state.step
        state.grad_scaler = self.scaler.state_dict() if self.scaler.is_enabled() else {}
        other_ranks_rng = gather_rng(self.world, self.device)
        path = self.run_dir / "checkpoints" / f"step_{state.step:08d}"
        if self.world.is_main:
            path = save_checkpoint(run_dir=self.run_dir, model=self.model,
                                   optimizer=self.optimizer, state=state.to_json(),
                                   config=self.config,
                                   vocab_dir=self.data_dir,
                                   keep_last=self.tcfg.keep_last, extra_tensors=other_ranks_rng)
            log.info("saved %s", path)
        return path

    def validate(self) -> None:
        """Validation loss, perplexity and (train.valid_bleu) BLEU, on rank 0; the best score
        and patience count in the state."""
        state = self.state
        self.validated_step = state.step
        if self.valid_data is None or not self.world.is_main:
            return
        values = validate(self.model, self.valid_data, max_tokens=self.tcfg.max_tokens,
                          eps=self.tcfg.label_smoothing)
        if self.tcfg.valid_bleu:
            values |= validation_bleu(self.model, self.data_dir, self.cfg)
        score = values["bleu"] if "bleu" in values else -values["loss"]
        if state.best_score is None or score > state.best_score:
            state.best_score, state.best_step, state.bad_validations = \
                score, state.step, 0
        else:
            state.bad_validations += 1
        self.metrics.write("valid", state.step, **values, best_step=state.best_step)
        log.info("validation at step %d: %s", state.step,
                 {k: round(v, 3) if isinstance(v, float) else v for k, v in values.items()})
        if values["encoder_spread"] < COLLAPSED_SPREAD:
            log.warning("the encoder's output has collapsed (spread %.2g; a fresh model's is "
                        "about 0.6): it writes nearly one vector for every word, and the "
                        "decoder has nothing to read. A lower train.lr_scale or "
                        "model.norm_first=true kept it apart in "
                        "benchmarks/results/parsing-encoder-collapse, a lower model.dropout in "
                        "benchmarks/results/table3-multi30k-scale4/big-dropout",
                        values["encoder_spread"])

    def finish(self) -> None:
        self.metrics.close()
        if self.world.is_main:
            plot_curves(self.run_dir)


def record_machine(metrics: MetricsLog, step: int, device: torch.device, *, bf16: bool) -> None:
    """Where the steps from `step` on run, in metrics.jsonl (kind "machine"), for comparing
    runs: the GPU's name, or this CPU and today's pace of its matrix products."""
    if device.type == "cuda":
        metrics.write("machine", step, gpu=torch.cuda.get_device_name(device), bf16=bf16)
        return
    if device.type != "cpu":
        return
    gflops, cpu = probed_gflops(), cpu_model()
    metrics.write("machine", step, cpu=cpu, threads=torch.get_num_threads(), bf16=bf16,
                  **{f"{dtype}_matmul_gflops": round(v, 1) for dtype, v in gflops.items()})
    log.info("%s multiplies matrices at %.0f GFLOP/s in float32 and %.0f in bfloat16 with "
             "%d threads", cpu, gflops["float32"], gflops["bfloat16"], torch.get_num_threads())
