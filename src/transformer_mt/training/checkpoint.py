"""Training checkpoints and their averaging (§6.1).

A checkpoint is a directory `RUN_DIR/checkpoints/step_00001000/`: it is a model directory
(`model.safetensors`, `config.json`, `sentencepiece.model`) plus `optimizer.safetensors` (Adam
moments, torch's CPU and CUDA random states) and `state.json` (the caller's training state: step,
epoch, position in the epoch..., with the Python and NumPy random states added as "rng").
`MANIFEST.sha256` lists the sha256 of every other file.

Write protocol: the files go into a temporary directory beside the final place; every file and
the directory are fsynced; the directory is renamed into place; the parent is fsynced. A crash
therefore never leaves a half-written checkpoint under a final name, and the latest checkpoint is
the highest step whose manifest verifies. Temporaries left by a crash are removed at the next
start; pruning to the last K never deletes the newest valid checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..model.transformer import Transformer
from ..storage.files import atomic_dir, fsync_path, sha256_file
from ..storage.model_dir import (
    ModelLoadError,
    assign_weights,
    check_weights,
    load_config_json,
    read_config_json,
    read_weights,
    unique_state_dict,
    write_model_files,
)
from ..storage.names import CONFIG_FILE, MANIFEST_FILE, OPTIMIZER_FILE, STATE_FILE, WEIGHTS_FILE
from ..storage.run_dir import TMP_PREFIX, step_dirs
from . import rng_state

log = logging.getLogger(__name__)


class CheckpointError(OSError):
    """A checkpoint could not be written; the message names the path and the reason."""


def clean_temporaries(run_dir: Path) -> None:
    """Remove half-written checkpoints left by a crash."""
    root = Path(run_dir) / "checkpoints"
    if root.is_dir():
        for path in root.iterdir():
            if path.name.startswith(TMP_PREFIX):
                log.info("removing unfinished checkpoint %s", path)
                shutil.rmtree(path, ignore_errors=True)


def optimizer_tensors(model: Transformer, optimizer: torch.optim.Adam) -> dict[str, torch.Tensor]:
    """Adam state keyed by parameter name, so that it is independent of parameter order."""
    names = {id(p): n for n, p in model.named_parameters()}  # tied parameters listed once
    tensors = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            for key, value in optimizer.state.get(p, {}).items():
                tensors[f"{key}.{names[id(p)]}"] = torch.as_tensor(value).detach().clone()
    return tensors


def load_optimizer_tensors(model: Transformer, optimizer: torch.optim.Adam,
                           tensors: dict[str, torch.Tensor], path: Path) -> None:
    # the step count lives where torch.optim.Adam keeps it: beside the parameter for the fused
    # (and capturable) update, on the CPU otherwise
    on_device = {id(p): bool(group.get("fused") or group.get("capturable"))
                 for group in optimizer.param_groups for p in group["params"]}
    for name, p in model.named_parameters():
        keys = ("step", "exp_avg", "exp_avg_sq")
        missing = [k for k in keys if f"{k}.{name}" not in tensors]
        if missing:
            raise ModelLoadError(f"{path}: no optimizer state {missing} for parameter '{name}'")
        step_device = p.device if on_device[id(p)] else torch.device("cpu")
        optimizer.state[p] = {"step": tensors[f"step.{name}"].to(step_device, copy=True),
                              "exp_avg": tensors[f"exp_avg.{name}"].to(p.device, copy=True),
                              "exp_avg_sq": tensors[f"exp_avg_sq.{name}"].to(p.device, copy=True)}


def save_checkpoint(*, run_dir: Path, model: Transformer, optimizer: torch.optim.Adam,
                    state: dict, config: dict, vocab_dir: Path, keep_last: int,
                    extra_tensors: dict[str, torch.Tensor] | None = None) -> Path:
    """Write checkpoint `state["step"]` with the protocol above, then prune to keep_last.
    `extra_tensors` go into optimizer.safetensors too (the other ranks' random states).
    On any OS error (disk full, I/O error) the temporary is removed, earlier checkpoints are
    untouched, and CheckpointError names the path."""
    root = Path(run_dir) / "checkpoints"
    final = root / f"step_{state['step']:08d}"
    tmp = root / f"{TMP_PREFIX}{final.name}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        write_model_files(tmp, unique_state_dict(model), config, vocab_dir)
        rng_json, rng_tensors = rng_state.capture()
        save_file(optimizer_tensors(model, optimizer) | rng_tensors | (extra_tensors or {}),
                  str(tmp / OPTIMIZER_FILE))
        state = state | {"rng": rng_json}
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        names = sorted(p.name for p in tmp.iterdir())
        manifest = "".join(f"{sha256_file(tmp / n)}  {n}\n" for n in names)
        (tmp / MANIFEST_FILE).write_text(manifest, encoding="utf-8")
        for name in [*names, MANIFEST_FILE]:
            fsync_path(tmp / name)
        fsync_path(tmp)
        if final.exists():  # a re-save of the same step (e.g. after a resume)
            shutil.rmtree(final)
        os.replace(tmp, final)
        fsync_path(root)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"{final}: could not save checkpoint: {err}") from err
    prune(run_dir, keep_last=keep_last, keep=final)
    return final


def prune(run_dir: Path, *, keep_last: int, keep: Path) -> None:
    """Delete all but the last keep_last checkpoints; never `keep` (the one just verified)."""
    for old in step_dirs(run_dir)[:-keep_last]:
        if old != keep:
            shutil.rmtree(old)


def load_checkpoint(path: Path, model: Transformer, optimizer: torch.optim.Adam, *,
                    rank: int = 0) -> dict:
    """Restore model, optimizer and every random generator from checkpoint `path` (torch's
    generator: the one saved for `rank` of a distributed run); returns its training state
    (without the random states)."""
    assign_weights(model, read_weights(path / WEIGHTS_FILE), path / WEIGHTS_FILE)
    extra = read_weights(path / OPTIMIZER_FILE)
    load_optimizer_tensors(model, optimizer, extra, path / OPTIMIZER_FILE)
    state = read_state(path)
    if "rng" not in state:
        raise ModelLoadError(f"{path / STATE_FILE}: missing key 'rng' (the random states)")
    if rank > 0:
        key = f"rng.torch.rank{rank}"
        if key not in extra:
            raise ModelLoadError(f"{path / OPTIMIZER_FILE}: no '{key}' random state")
        extra = extra | {"rng.torch": extra[key]}
    try:
        rng_state.restore(state.pop("rng"), extra, str(path))
    except KeyError as err:
        raise ModelLoadError(err.args[0]) from None
    return state


def read_state(path: Path) -> dict:
    """The JSON training state of checkpoint `path`."""
    try:
        return json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ModelLoadError(f"{path / STATE_FILE}: {err}") from None


def average_checkpoints(paths: list[Path], out_dir: Path) -> Path:
    """Average the weights of `paths` (§6.1: the last 5 checkpoints for base, 20 for big) into a
    model directory with the config and vocabulary of the last one."""
    if not paths:
        raise ValueError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for path in paths:
        state = read_weights(path / WEIGHTS_FILE)
        check_weights(load_config_json(path / CONFIG_FILE)[0], state, path / WEIGHTS_FILE)
        if total and state.keys() != total.keys():
            raise ModelLoadError(f"{path / WEIGHTS_FILE}: tensors differ from {paths[0]}")
        for name, tensor in state.items():
            total[name] = total.get(name, 0) + tensor.double()
    averaged = {name: (t / len(paths)).float() for name, t in total.items()}
    config = read_config_json(paths[-1] / CONFIG_FILE)
    config["averaged_from"] = [p.name for p in paths]
    with atomic_dir(out_dir) as tmp:
        write_model_files(tmp, averaged, config, paths[-1])
    return Path(out_dir)
