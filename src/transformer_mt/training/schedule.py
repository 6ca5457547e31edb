"""The learning rate (§5.3, eq. 3), and the linear cooldowns a run on a fixed step or time
budget, or one whose patience runs out, may end with (not in the paper)."""

from __future__ import annotations

import math

from ..config import TrainConfig
from .state import TrainingState


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


def cooldown_steps(tcfg: TrainConfig, state: TrainingState) -> tuple[float, int] | None:
    """The first and last step of the rate's cooldown, if any: the steps planned when the
    timed cooldown's minutes (TrainConfig.cooldown_minutes) were left of train.max_minutes
    (`plan_cooldown`) or when patience ran out (`patience_cooldown`), kept in the run's state;
    else the last TrainConfig.cooldown_steps of train.max_steps."""
    planned = state.cooldown
    if planned:
        return planned[0], planned[1]
    if tcfg.cooldown_steps:
        return tcfg.max_steps - tcfg.cooldown_steps + 1, tcfg.max_steps
    return None


def patience_cooldown(tcfg: TrainConfig, state: TrainingState) -> list[int] | None:
    """With train.patience_cooldown, once train.patience has run out at step s: the
    cooldown's [first, last] step, s * share / (1 - share) steps (share: train.lr_cooldown_share,
    the cooldown's share of the whole run). None when a cooldown is planned already or
    underway."""
    underway = cooldown_steps(tcfg, state)
    step, share = state.step, tcfg.lr_cooldown_share
    if state.cooldown or (underway is not None and step + 1 >= underway[0]):
        return None
    return [step + 1, step + max(1, round(step * share / (1 - share)))]


def cooldown_save_due(tcfg: TrainConfig, state: TrainingState) -> bool | None:
    """With train.cooldown_saves N, during the cooldown: whether the step just taken ends
    another 1/N of its steps (the last step always does); None before a cooldown or without
    the option, when train.save_every's cadence decides."""
    cooldown = cooldown_steps(tcfg, state)
    step = state.step
    if not tcfg.cooldown_saves or cooldown is None or step < cooldown[0]:
        return None
    first, last = cooldown
    def passed(s: int) -> int:  # whole Nths of the cooldown done after step s
        return math.floor(tcfg.cooldown_saves * max(0.0, s - first + 1) / (last - first + 1))
    return passed(step) > passed(step - 1)


def plan_cooldown(tcfg: TrainConfig, state: TrainingState) -> list[int] | None:
    """With a timed cooldown (TrainConfig.cooldown_minutes), once no more than that is left
    of train.max_minutes: the cooldown's [first, last] step, as many steps as the run's mean
    pace so far (train seconds per step, validations and saves included) fits into 97 % of
    the time left, so that it ends before the budget does. None before then, or once
    planned."""
    left = 60 * tcfg.max_minutes - state.train_seconds
    if not tcfg.cooldown_minutes or state.cooldown or not state.step \
            or left > 60 * tcfg.cooldown_minutes:
        return None
    pace = state.train_seconds / state.step
    return [state.step + 1, state.step + max(1, int(0.97 * left / pace))]


def replan_cooldown(tcfg: TrainConfig, state: TrainingState) -> list[float] | None:
    """A timed cooldown planned at step s0 after t0 train seconds (the state's cooldown_since),
    re-planned at a later step s (a checkpoint step: `train`) because a machine's speed drifts:
    its last step becomes the one that the pace since s0 fits into 97 % of the time left, and
    the rate falls on in a straight line from its value at step s + 1 to that step. Returns
    [first, last] of the new line (`first`, where it would reach eq. (3)'s full rate, need not
    be a whole step); None for a cooldown by steps, one not planned, over or older than this,
    and until a fifth of the cooldown's minutes has passed: a shorter pace is one event's
    (a validation's 6 s in the first 20 steps once cut a 4,557-step plan to 2,077)."""
    cooldown, since = state.cooldown, state.cooldown_since
    if not tcfg.cooldown_minutes or not cooldown or not since:
        return None
    (first, last), (s0, t0) = cooldown, since
    step, seconds = state.step, state.train_seconds
    if not s0 < step < last or seconds - t0 < 60 * tcfg.cooldown_minutes / 5:
        return None
    pace = (seconds - t0) / (step - s0)
    new_last = step + max(1, int(0.97 * (60 * tcfg.max_minutes - seconds) / pace))
    rate = (last - step) / (last - first + 1)  # of eq. (3), at step + 1
    return [new_last + 1 - (new_last - step) / rate, new_last]
