"""Bidirectional training data (Ding et al. 2021, "Improving Neural Machine Translation by
Bidirectional Training"): a copy of a prepared data directory whose train split holds every pair
twice, once as source -> target and once as target -> source. Valid and test stay as they are.
The joint vocabulary is shared, so the same model can first learn both directions and then be
tuned on the original one (run.sh's BIDIRECTIONAL_EPOCHS).

    python benchmarks/multi30k/bidirectional_data.py runs/multi30k-en-de/data OUT_DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np


def concatenated(first: tuple[np.ndarray, np.ndarray], second: tuple[np.ndarray, np.ndarray]):
    """(tokens, offsets) of the sentences of `first` followed by those of `second`."""
    tokens = np.concatenate([first[0], second[0]])
    offsets = np.concatenate([first[1], first[1][-1] + second[1][1:]])
    return tokens, offsets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path, help="prepared data directory (transformer-mt prepare)")
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for path in args.data.iterdir():
        if not path.name.startswith("train."):
            shutil.copy2(path, args.out / path.name)
    side = {s: tuple(np.load(args.data / f"train.{s}.{kind}.npy") for kind in ("tokens", "offsets"))
            for s in ("src", "tgt")}
    meta = json.loads((args.data / "meta.json").read_text())
    for name, (first, second) in {"src": ("src", "tgt"), "tgt": ("tgt", "src")}.items():
        tokens, offsets = concatenated(side[first], side[second])
        np.save(args.out / f"train.{name}.tokens.npy", tokens)
        np.save(args.out / f"train.{name}.offsets.npy", offsets)
        text = "".join((args.data / f"train.{s}.txt").read_text(encoding="utf-8")
                       for s in (first, second))
        (args.out / f"train.{name}.txt").write_text(text, encoding="utf-8")
        record = meta["inputs"]["train"]
        record[name] = f"both directions of {args.data / 'train'}"
        record[f"{name}_sha256"] = hashlib.sha256(tokens.tobytes()).hexdigest()
    meta["splits"]["train"] *= 2
    meta["bidirectional"] = True
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"{args.out}: {meta['splits']['train']} training pairs, both directions")


if __name__ == "__main__":
    main()
