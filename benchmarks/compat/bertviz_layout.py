"""Is our bertviz.json what bertviz itself builds from the same weights?

`transformer-mt attention` writes attention.npz and bertviz.json. This script gives the .npz to
bertviz's own head_view (the snippet of docs/attention.md), captures the params it hands to its
head_view.js, and compares them with bertviz.json: names, token lists, layers and every weight.
bertviz is not a dependency of ours (it pulls transformers); install it aside:

    pip install --no-deps --target /tmp/bertviz bertviz==1.4.1   # needs IPython and torch
    transformer-mt attention --model MODEL --source "..." --out /tmp/view
    PYTHONPATH=/tmp/bertviz python benchmarks/compat/bertviz_layout.py /tmp/view \\
        --out benchmarks/results/bertviz-layout/results.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch


def bertviz_params(npz: Path) -> dict:
    """The params bertviz's head_view builds from attention.npz (docs/attention.md's snippet)."""
    from bertviz import head_view

    module = sys.modules["bertviz.head_view"]  # the module, which the package's name hides
    captured = {}
    dumps = module.json.dumps

    def capture(obj, *args, **kwargs):
        captured.update(obj)
        return dumps(obj, *args, **kwargs)

    module.json.dumps = capture
    try:
        with np.load(npz, allow_pickle=False) as d:
            def layers(kind):
                return [torch.from_numpy(w[None]) for w in d[kind]]

            head_view(encoder_attention=layers("encoder"), decoder_attention=layers("decoder"),
                      cross_attention=layers("cross"), encoder_tokens=list(d["source"]),
                      decoder_tokens=list(d["target"]), prettify_tokens=False,
                      html_action="return")
    finally:
        module.json.dumps = dumps
    return captured


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("view", type=Path, help="a directory transformer-mt attention wrote")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    theirs = bertviz_params(args.view / "attention.npz")
    ours = json.loads((args.view / "bertviz.json").read_text(encoding="utf-8"))
    checks = {
        "keys": sorted(ours) == sorted(theirs),
        "names": [a["name"] for a in ours["attention"]] == [a["name"] for a in theirs["attention"]],
        "tokens": all(a["left_text"] == b["left_text"] and a["right_text"] == b["right_text"]
                      for a, b in zip(ours["attention"], theirs["attention"], strict=True)),
        "include_layers": ours["include_layers"] == theirs["include_layers"],
        "default_filter": ours["default_filter"] == theirs["default_filter"],
    }
    max_diff = max(float(np.abs(np.array(a["attn"]) - np.array(b["attn"])).max())
                   for a, b in zip(ours["attention"], theirs["attention"], strict=True))
    report = {"question": "is bertviz.json the params bertviz's head_view builds itself",
              "bertviz": version("bertviz"), "checks": checks,
              "max_weight_difference": max_diff, "our_rounding": 1e-6,
              "shapes": {a["name"]: list(np.array(a["attn"]).shape) for a in ours["attention"]},
              "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                       capture_output=True, text=True).stdout.strip()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=1))
    if not all(checks.values()) or max_diff > 1e-6:
        raise SystemExit("bertviz.json differs from bertviz's own params")


if __name__ == "__main__":
    main()
