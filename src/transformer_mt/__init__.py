"""transformer-mt: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

The names below are imported when first used (PEP 562), not with the package, so that the
command line starts without torch where it needs none (`transformer-mt --help`)."""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# each public name -> the module that defines it
_HOMES = {
    "Config": "config", "DecodeConfig": "config", "ModelConfig": "config",
    "load_config": "config",
    "Vocabulary": "data.vocab", "train_vocabulary": "data.vocab",
    "Ensemble": "inference.ensemble",
    "DecodingModel": "inference.search", "Hypothesis": "inference.search",
    "beam_search": "inference.search", "generate": "inference.search",
    "greedy_search": "inference.search", "sample": "inference.search",
    "Translation": "inference.translator", "Translator": "inference.translator",
    "Memory": "model.transformer", "Transformer": "model.transformer",
    "ModelLoadError": "storage.model_dir", "load_model": "storage.model_dir",
    "save_model": "storage.model_dir",
    "average_checkpoints": "training.checkpoint",
    "train": "training.loop",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'transformer_mt' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])

