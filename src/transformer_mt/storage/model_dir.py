"""A model on disk is a directory: `model.safetensors` (weights), `config.json` (model and
decoding config) and `sentencepiece.model` (the vocabulary) beside them.

Nothing is pickled and loading never executes code: weights are read only with safetensors, the
config only with json. A wrong or damaged file raises `ModelLoadError` naming the file and the
reason, before large allocations. The one audited exception is `load_torch_file`, for other
toolkits' PyTorch `.bin`/`.pt` files: `torch.load(weights_only=True)`, no fallback.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..config import (
    ConfigError,
    DecodeConfig,
    ModelConfig,
    config_from_dict,
    config_to_dict,
    without_retired,
)
from ..model.transformer import Transformer
from .files import atomic_dir
from .names import CONFIG_FILE, VOCAB_FILE, WEIGHTS_FILE, copy_vocabulary

MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit on the JSON header


class ModelLoadError(ValueError):
    """A model file is missing, damaged or not what it claims; the message names the file."""


def unique_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """State dict with each tied tensor once, under its first name."""
    seen: set[int] = set()
    state = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) not in seen:
            seen.add(id(tensor))
            state[name] = tensor.detach().contiguous()
    return state


def save_model(model: Transformer, out_dir: str | Path, *, vocab_path: str | Path | None = None,
               decode: DecodeConfig | None = None) -> Path:
    """Write `model` (and optionally its vocabulary, a SentencePiece model file or a model
    directory, and its decoding defaults) to `out_dir`; other files there are left alone."""
    config = {"model": config_to_dict(model.cfg),
              "decode": config_to_dict(decode or DecodeConfig())}
    with atomic_dir(Path(out_dir)) as tmp:
        write_model_files(tmp, unique_state_dict(model), config, vocab_path)
    return Path(out_dir)


def write_model_files(directory: Path, weights: dict[str, torch.Tensor], config: dict,
                      vocab_from: str | Path | None = None) -> None:
    """The one writer of a model directory's files, into `directory`: a temporary one that
    `files.atomic_dir` (save_model, average) or the checkpoint protocol (training/checkpoint.py)
    moves into place. The weights (on the CPU), the config and the vocabulary of `vocab_from`
    (a model or data directory, or a SentencePiece model file)."""
    save_file({k: v.cpu() for k, v in weights.items()}, str(directory / WEIGHTS_FILE),
              metadata={"format": "pt"})
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    if vocab_from is not None and Path(vocab_from).is_dir():
        copy_vocabulary(Path(vocab_from), directory)
    elif vocab_from is not None:
        shutil.copyfile(vocab_from, directory / VOCAB_FILE)


def read_config_json(path: Path) -> dict:
    """A model directory's (or checkpoint's) config.json as written, the one place it is read:
    an object with a 'model' section, else ModelLoadError naming the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelLoadError(f"{path}: missing (a model directory needs {CONFIG_FILE})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelLoadError(f"{path}: not a valid JSON config: {err}") from None
    if not isinstance(data, dict) or "model" not in data:
        raise ModelLoadError(f"{path}: expected an object with a 'model' section")
    return data


def load_config_json(path: Path) -> tuple[ModelConfig, DecodeConfig]:
    """The model and decoding configs of a config.json (`read_config_json`), checked."""
    data = read_config_json(path)
    try:  # the sections read here: a training run's whole config has others beside them
        data = without_retired({k: v for k, v in data.items() if k in ("model", "decode")},
                               str(path))
        model_cfg = config_from_dict(ModelConfig, data["model"], "model")
        decode_cfg = config_from_dict(DecodeConfig, data.get("decode", {}), "decode")
    except ConfigError as err:
        raise ModelLoadError(f"{path}: {err}") from None
    return model_cfg, decode_cfg


def check_safetensors_header(path: Path) -> None:
    """Refuse files that are not safetensors before reading them: pickles and torch.save zips,
    truncated files, and headers larger than the file or the format's limit."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
    except OSError as err:
        raise ModelLoadError(f"{path}: cannot read: {err.strerror}") from None
    if len(head) < 8:
        raise ModelLoadError(f"{path}: truncated ({size} bytes), not a safetensors file")
    (header_len,) = struct.unpack("<Q", head)
    if header_len > MAX_HEADER_BYTES or header_len > size - 8:
        if head[:1] == b"\x80" or head[:2] == b"PK":  # pickle protocol 2+, torch.save zip
            raise ModelLoadError(
                f"{path}: looks like a pickle or torch.save archive; only safetensors is accepted")
        raise ModelLoadError(
            f"{path}: header length {header_len} does not fit in a file of {size} bytes "
            "(truncated or not safetensors)"
        )


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, after the header checks."""
    check_safetensors_header(path)
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise ModelLoadError(f"{path}: damaged safetensors file: {err}") from None


FOREIGN_SUFFIXES = (".bin", ".pt", ".pth")


def read_foreign_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """A flat name -> tensor mapping from another toolkit's weights file: safetensors, or a
    PyTorch `.bin`/`.pt`/`.pth` state dict (`load_torch_file`). Anything but a flat dict of
    tensors is refused."""
    path = Path(path)
    if path.suffix == ".safetensors":
        return read_weights(path)
    obj = load_torch_file(path)
    if not isinstance(obj, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()):
        raise ModelLoadError(f"{path}: not a flat mapping of names to tensors")
    return obj


def load_torch_file(path: Path, allowed_globals: tuple[type, ...] = ()) -> object:
    """The object in another toolkit's `.bin`/`.pt`/`.pth` file. The only unpickling in the
    package: torch's restricted `weights_only` unpickler, which builds tensors and plain
    containers and no other class, so no code runs, plus exactly `allowed_globals` (fairseq's
    argparse.Namespace); no fallback to a full unpickle. A refused global is named."""
    if path.suffix not in FOREIGN_SUFFIXES:
        raise ModelLoadError(f"{path}: expected .safetensors or one of {FOREIGN_SUFFIXES}")
    try:
        with torch.serialization.safe_globals(list(allowed_globals)):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - whatever the unpickler refuses, we refuse
        text = str(err)
        found = re.search(r"GLOBAL (\S+) (was not an allowed global|whose module)", text)
        reason = f"it holds the global {found.group(1)}, which is not allowed (no code is run " \
            "to build it)" if found else (text.splitlines()[0] if text else type(err).__name__)
        raise ModelLoadError(f"{path}: refused by torch.load(weights_only=True): {reason}") \
            from None


def check_weights(cfg: ModelConfig, state: dict[str, torch.Tensor], path: Path) -> None:
    """Require exactly the tensors, shapes and floating-point dtypes of a model with config
    `cfg` (built on the meta device: nothing is allocated)."""
    with torch.device("meta"):
        expected = unique_state_dict(Transformer(cfg))
    _check_against(expected, state, path)


def _check_against(expected: dict[str, torch.Tensor], state: dict[str, torch.Tensor],
                   path: Path) -> None:
    missing = sorted(expected.keys() - state.keys())
    unexpected = sorted(state.keys() - expected.keys())
    if missing or unexpected:
        raise ModelLoadError(
            f"{path}: tensors do not match the config: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    for name, tensor in state.items():
        want = expected[name]
        if tensor.shape != want.shape or not tensor.is_floating_point():
            raise ModelLoadError(
                f"{path}: tensor '{name}' is {tuple(tensor.shape)} {tensor.dtype}, "
                f"expected {tuple(want.shape)} floating point"
            )


def assign_weights(model: Transformer, state: dict[str, torch.Tensor], path: Path) -> None:
    """Copy `state` (read from `path`) into `model`, requiring exactly its tensors and shapes."""
    _check_against(unique_state_dict(model), state, path)
    model.load_state_dict(state, strict=False)  # tied aliases are filled through the tie


def model_from_weights(cfg: ModelConfig, state: dict[str, torch.Tensor], path: Path
                       ) -> Transformer:
    """The model of config `cfg` whose parameters are `state`'s tensors (read from `path`),
    requiring exactly its tensors and shapes: built on the meta device and handed the tensors,
    so that no random initialisation is paid for (a second for the base model)."""
    with torch.device("meta"):
        model = Transformer(cfg)
    _check_against(unique_state_dict(model), state, path)
    model.load_state_dict({name: tensor.float() for name, tensor in state.items()},
                          strict=False, assign=True)
    model.tie_weights()  # the tied aliases, which `state` holds once
    return model


def load_model(model_dir: str | Path, *, device: str | torch.device = "cpu"
               ) -> tuple[Transformer, DecodeConfig]:
    """Read a model directory; returns the model in eval mode and its decoding defaults."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ModelLoadError(f"{model_dir}: not a model directory")
    model_cfg, decode_cfg = load_config_json(model_dir / CONFIG_FILE)
    weights = model_dir / WEIGHTS_FILE
    if not weights.exists():
        raise ModelLoadError(f"{weights}: missing (a model directory needs {WEIGHTS_FILE})")
    state = read_weights(weights)
    model = model_from_weights(model_cfg, state, weights)
    return model.to(device).eval(), decode_cfg
