"""Bidirectional training data (Ding et al. 2021, "Improving Neural Machine Translation by
Bidirectional Training"): a copy of a prepared data directory whose train split holds every pair
twice, once as source -> target and once as target -> source. Valid and test stay as they are.
The joint vocabulary is shared, so the same model can first learn both directions and then be
tuned on the original one (run.sh's BIDIRECTIONAL_EPOCHS).

    python benchmarks/multi30k/bidirectional_data.py runs/multi30k-en-de/data OUT_DIR
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from transformer_mt.data.dataset import ParallelData
from transformer_mt.data.prepare import load_meta, write_side
from transformer_mt.storage.files import sha256_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path, help="prepared data directory (transformer-mt prepare)")
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for path in args.data.iterdir():
        if not path.name.startswith("train."):
            shutil.copy2(path, args.out / path.name)
    train = ParallelData(args.data, "train")
    meta = load_meta(args.data)
    ids = {s: [train.ids(s, i) for i in range(len(train))] for s in ("src", "tgt")}
    text = {s: (args.data / f"train.{s}.txt").read_text(encoding="utf-8") for s in ids}
    record = meta["inputs"]["train"]
    for name, (first, second) in {"src": ("src", "tgt"), "tgt": ("tgt", "src")}.items():
        write_side(args.out, "train", name, ids[first] + ids[second], meta["vocab_size"])
        (args.out / f"train.{name}.txt").write_text(text[first] + text[second], encoding="utf-8")
        record[name] = f"both directions of {args.data / 'train'}"
        record[f"{name}_sha256"] = sha256_file(args.out / f"train.{name}.tokens.npy")
    meta["splits"]["train"] *= 2
    meta["bidirectional"] = True
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"{args.out}: {meta['splits']['train']} training pairs, both directions")


if __name__ == "__main__":
    main()
