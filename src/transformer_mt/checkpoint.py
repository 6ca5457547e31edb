"""Training checkpoints and their averaging (§6.1).

A checkpoint is a directory `RUN_DIR/checkpoints/step_00001000/`: it is a model directory
(`model.safetensors`, `config.json`, `sentencepiece.model`) plus `optimizer.safetensors` (Adam
moments and the torch RNG state) and `state.json` (step, epoch, position in the epoch).
It is written into a temporary directory beside its final place and renamed into place, so a
crash never leaves a half-written checkpoint under a final name.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from .model import Transformer
from .model_io import (
    CONFIG_FILE,
    VOCAB_FILE,
    WEIGHTS_FILE,
    ModelLoadError,
    assign_weights,
    read_weights,
    unique_state_dict,
)

log = logging.getLogger(__name__)

OPTIMIZER_FILE = "optimizer.safetensors"
STATE_FILE = "state.json"
STEP_DIR = re.compile(r"^step_(\d{8})$")


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if STEP_DIR.match(p.name) and (p / STATE_FILE).exists()]
    return sorted(found, key=lambda p: p.name)


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
    for name, p in model.named_parameters():
        keys = ("step", "exp_avg", "exp_avg_sq")
        missing = [k for k in keys if f"{k}.{name}" not in tensors]
        if missing:
            raise ModelLoadError(f"{path}: no optimizer state {missing} for parameter '{name}'")
        optimizer.state[p] = {k: tensors[f"{k}.{name}"].clone() for k in keys}


def save_checkpoint(*, run_dir: Path, model: Transformer, optimizer: torch.optim.Adam,
                    state: dict, config: dict, vocab_path: Path, keep_last: int) -> Path:
    """Write checkpoint `state["step"]` atomically, then delete all but the last keep_last."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{state['step']:08d}"
    tmp = root / f".tmp-{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    weights = {k: v.cpu() for k, v in unique_state_dict(model).items()}
    save_file(weights, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
    extra = optimizer_tensors(model, optimizer)
    extra["rng.torch"] = torch.get_rng_state()
    save_file(extra, str(tmp / OPTIMIZER_FILE))
    (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    shutil.copyfile(vocab_path, tmp / VOCAB_FILE)
    (tmp / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in checkpoint_dirs(run_dir)[:-keep_last]:
        shutil.rmtree(old)
    return final


def load_checkpoint(path: Path, model: Transformer, optimizer: torch.optim.Adam) -> dict:
    """Restore model, optimizer and torch RNG from checkpoint `path`; returns its state."""
    assign_weights(model, read_weights(path / WEIGHTS_FILE), path / WEIGHTS_FILE)
    extra = read_weights(path / OPTIMIZER_FILE)
    load_optimizer_tensors(model, optimizer, extra, path / OPTIMIZER_FILE)
    torch.set_rng_state(extra["rng.torch"])
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
        if total and state.keys() != total.keys():
            raise ModelLoadError(f"{path / WEIGHTS_FILE}: tensors differ from {paths[0]}")
        for name, tensor in state.items():
            total[name] = total.get(name, 0) + tensor.double()
    averaged = {name: (t / len(paths)).float() for name, t in total.items()}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(averaged, str(out_dir / WEIGHTS_FILE), metadata={"format": "pt"})
    config = json.loads((paths[-1] / CONFIG_FILE).read_text(encoding="utf-8"))
    config["averaged_from"] = [p.name for p in paths]
    (out_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    shutil.copyfile(paths[-1] / VOCAB_FILE, out_dir / VOCAB_FILE)
    return out_dir


def resolve_model_dir(path: Path) -> Path:
    """A model directory, or the latest checkpoint of a run directory."""
    path = Path(path)
    if (path / WEIGHTS_FILE).exists():
        return path
    checkpoints = checkpoint_dirs(path)
    if checkpoints:
        return checkpoints[-1]
    raise ModelLoadError(f"{path}: neither a model directory nor a run with checkpoints")
