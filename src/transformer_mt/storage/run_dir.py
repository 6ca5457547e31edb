"""A run directory on disk: its checkpoints `RUN_DIR/checkpoints/step_00001000/` (model
directories with the optimizer and training state beside, listed in a manifest: written by
training/checkpoint.py), which of them verify, and the model a path names (a model directory,
or a run's latest checkpoint)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from .files import sha256_file
from .model_dir import ModelLoadError
from .names import (
    CONFIG_FILE,
    MANIFEST_FILE,
    OPTIMIZER_FILE,
    STATE_FILE,
    WEIGHTS_FILE,
    vocabulary_files,
)

log = logging.getLogger(__name__)

STEP_DIR = re.compile(r"^step_(\d{8})$")
TMP_PREFIX = ".tmp-"  # a checkpoint being written, under the final name once complete


def step_dirs(run_dir: Path) -> list[Path]:
    """Directories under final checkpoint names, oldest first (not verified)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if STEP_DIR.match(p.name)), key=lambda p: p.name)


def manifest_problem(path: Path) -> str | None:
    """Why checkpoint `path` is not valid (missing or damaged file), or None if it verifies."""
    try:
        lines = (path / MANIFEST_FILE).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        return f"no readable {MANIFEST_FILE} ({err})"
    listed = {}
    for line in lines:
        digest, _, name = line.partition("  ")
        listed[name] = digest
    for required in (WEIGHTS_FILE, OPTIMIZER_FILE, CONFIG_FILE, *vocabulary_files(path),
                     STATE_FILE):
        if required not in listed:
            return f"{MANIFEST_FILE} does not list {required}"
    for name, digest in listed.items():
        try:
            actual = sha256_file(path / name)
        except OSError as err:
            return f"{name}: {err.strerror}"
        if actual != digest:
            return f"{name}: sha256 mismatch"
    return None


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """Checkpoints of a run whose manifest verifies, oldest first; invalid ones are logged."""
    valid = []
    for path in step_dirs(run_dir):
        problem = manifest_problem(path)
        if problem:
            log.warning("ignoring damaged checkpoint %s: %s", path, problem)
        else:
            valid.append(path)
    return valid


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The highest step whose manifest verifies, or None."""
    for path in reversed(step_dirs(run_dir)):
        problem = manifest_problem(path)
        if problem is None:
            return path
        log.warning("ignoring damaged checkpoint %s: %s", path, problem)
    return None


def resolve_model_dir(path: Path) -> Path:
    """A model directory, or the latest checkpoint of a run directory."""
    path = Path(path)
    if (path / WEIGHTS_FILE).exists():
        return path
    latest = latest_checkpoint(path)
    if latest is not None:
        return latest
    raise ModelLoadError(f"{path}: neither a model directory nor a run with checkpoints")
