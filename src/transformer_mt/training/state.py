"""Where a training run is: the state a checkpoint's state.json holds besides the random states,
all that an exact resume needs with the weights and Adam's moments."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass
class TrainingState:
    step: int = 0  # updates taken
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of the epoch's order consumed
    tokens: int = 0  # target tokens trained on
    shuffle_seed: int = 0  # with the epoch, seeds the epoch's batch order
    best_score: float | None = None  # the best validation score (BLEU, else -loss)
    best_step: int | None = None
    bad_validations: int = 0  # validations since the best, for train.patience
    nonfinite_steps: int = 0  # updates skipped for a non-finite loss or gradient
    nonfinite_in_a_row: int = 0
    grad_scaler: dict = field(default_factory=dict)  # fp16's loss scale
    world_size: int = 1  # processes (torchrun) that trained it
    train_seconds: float = 0.0  # wall time spent training, across resumes
    # [first, last] step of a cooldown planned during the run (timed, or when patience ran
    # out), and [step, train seconds] when a timed one was planned; absent from checkpoints
    # older than those options
    cooldown: list[float] | None = None
    cooldown_since: list[float] | None = None
    fingerprint: dict = field(default_factory=dict)  # what a resumed run must share (resume.py)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, saved: dict) -> TrainingState:
        """A checkpoint's state (its keys checked by resume.py; "rng" is the checkpoint's)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in saved.items() if k in names})


# what a checkpoint's state.json must hold for an exact resume (the cooldown's plan may be absent)
STATE_KEYS = tuple(f.name for f in dataclasses.fields(TrainingState)
                   if f.name not in ("cooldown", "cooldown_since"))
