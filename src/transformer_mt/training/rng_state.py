"""The random states an exact resume needs: Python's, NumPy's global one, torch's CPU generator
and every CUDA device's. Python and NumPy states are JSON; torch's are byte tensors (safetensors).
"""

from __future__ import annotations

import random

import numpy as np
import torch
from torch import Tensor


def capture() -> tuple[dict, dict[str, Tensor]]:
    """(JSON-able states, tensors keyed "rng.torch", "rng.cuda.<i>")."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    states = {"python": [version, list(internal), gauss],
              "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)]}
    tensors = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = state
    return states, tensors


def restore(states: dict, tensors: dict[str, Tensor], where: str) -> None:
    """Set every generator from `capture`'s output; `where` names the file in errors."""
    for key in ("python", "numpy"):
        if key not in states:
            raise KeyError(f"{where}: state.json 'rng' has no '{key}' random state")
    if "rng.torch" not in tensors:
        raise KeyError(f"{where}: optimizer.safetensors has no 'rng.torch' random state")
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["rng.torch"])
    cuda = sorted(k for k in tensors if k.startswith("rng.cuda."))
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([tensors[f"rng.cuda.{i}"] for i in range(len(cuda))])
