"""Resuming a run exactly: the training state a checkpoint must hold, and the fingerprint
(model, optimisation settings, vocabulary, data) a resumed run must share with it."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import torch

from ..config import (
    Config,
    ModelConfig,
    TrainConfig,
    config_to_dict,
    fields_where,
    without_retired,
)
from ..model.transformer import Transformer
from ..storage.model_dir import read_config_json
from ..storage.names import CONFIG_FILE, STATE_FILE
from .checkpoint import load_checkpoint, read_state
from .distributed import World
from .state import STATE_KEYS, TrainingState

log = logging.getLogger(__name__)

# Train settings that may change when a run is resumed (declared `resumable` in config.py):
# budgets, cadence, device and threads, and how the cooldown that ends a budget is given (a
# timed one, once planned, is kept in the run's state).
RESUMABLE_TRAIN_KEYS = fields_where(TrainConfig, "resumable")

# Model settings that only initialise a fresh model (a resumed one has its checkpoint's
# weights), with the value a checkpoint written before the setting existed began with
# (declared `initialises` in config.py).
INIT_ONLY_MODEL_KEYS = {f.name: f.metadata["initialises"] for f in dataclasses.fields(ModelConfig)
                        if "initialises" in f.metadata}

SINGLE_PROCESS = World()


class ResumeMismatch(ValueError):
    """A run directory's checkpoint was trained with another config, vocabulary or data."""


class ResumeError(ValueError):
    """A checkpoint lacks part of the state that an exact resume needs."""


def fingerprint(cfg: Config, meta: dict) -> dict:
    """What a resumed run must share with its checkpoint: the model, the optimisation
    settings, the vocabulary and the data (sha256 of the prepared inputs)."""
    return {"model": {k: v for k, v in config_to_dict(cfg.model).items()
                      if k not in INIT_ONLY_MODEL_KEYS},
            "train": optimisation_settings(cfg.train),
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
    upgraded = saved | {section: values | saved.get(section, {})
                        for section, values in defaults.items()}
    upgraded["model"] = {k: v for k, v in upgraded["model"].items()
                         if k not in INIT_ONLY_MODEL_KEYS}
    return upgraded


def initialised_as(cfg: Config, checkpoint: Path | None) -> Config:
    """`cfg` with the initialisation settings (INIT_ONLY_MODEL_KEYS) that the run resumed
    from `checkpoint` began with, so that its records say how its weights were initialised
    (a setting the checkpoint lacks: the value its code had); `cfg` for a fresh run."""
    if checkpoint is None:
        return cfg
    saved = read_config_json(checkpoint / CONFIG_FILE)["model"]
    began = {k: saved.get(k, before) for k, before in INIT_ONLY_MODEL_KEYS.items()}
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **began))


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


def new_state(cfg: Config, meta: dict, world: World) -> TrainingState:
    return TrainingState(shuffle_seed=cfg.train.seed, world_size=world.size,
                         fingerprint=fingerprint(cfg, meta))


def resume(path: Path, model: Transformer, optimizer: torch.optim.Optimizer,
           scaler: torch.amp.GradScaler, fresh: TrainingState, *, ignore_mismatch: bool,
           world: World = SINGLE_PROCESS) -> TrainingState:
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
        brought_up_to_date(saved["fingerprint"], str(path / STATE_FILE)), fresh.fingerprint)
    if differences and not ignore_mismatch:
        raise ResumeMismatch(
            f"cannot resume {path.parent.parent} from {path.name}: " + "; ".join(differences) +
            " (use another --run-dir, or --ignore-mismatch to resume anyway)")
    if differences:
        log.warning("resuming despite differences: %s", "; ".join(differences))
    state = TrainingState.from_json(load_checkpoint(path, model, optimizer, rank=world.rank))
    if state.grad_scaler and scaler.is_enabled():
        scaler.load_state_dict(state.grad_scaler)
    log.info("resuming from %s (step %d)", path, state.step)
    return dataclasses.replace(state, fingerprint=fresh.fingerprint)
