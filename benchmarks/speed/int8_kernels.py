"""One linear layer's call, at the shapes decoding gives it, in each int8 kernel on offer: float32
(`nn.Linear`), fbgemm's dynamic quantisation with one range per call (`Int8Linear`, translate
--int8), per-row ranges through `torch._int_mm` (`Int8RowLinear`, --int8-scales row, the
server's) with its int8 weights laid out contiguously or as a transposed view, the same
compiled by `torch.compile` (the CPU's C++ backend, dynamic shapes), and torchao's
`Int8DynamicActivationInt8WeightConfig` (per-row activation scales; eager and compiled) where
torchao is installed. Median microseconds of `--repeats` timed loops, this machine's threads.

    python benchmarks/speed/int8_kernels.py --json out.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
import warnings
from pathlib import Path

import torch
from torch import nn

from transformer_mt.hardware.cpu_speed import cpu_model
from transformer_mt.inference.quantize import Int8Linear, Int8RowLinear

# (in, out) of the projections, W1 and W2 at the small (d_model 256) and base (512) shapes
SHAPES = [(256, 256), (256, 1024), (1024, 256), (512, 512), (512, 2048), (2048, 512)]
ROWS = [4, 64, 256]  # one sentence's beam of 4, greedy at batch 64, beam 4 at batch 64


def fbgemm(linear: nn.Linear) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.quantization import quantize_dynamic

        return Int8Linear(quantize_dynamic(nn.Sequential(linear), {nn.Linear},
                                           dtype=torch.qint8)[0])


def row_as_view(linear: nn.Linear) -> nn.Module:
    """Int8RowLinear with its (in, out) weights a transposed view of the (out, in) ones."""
    layer = Int8RowLinear(linear)
    layer.weight_IO = layer.weight_IO.t().contiguous().t()
    return layer


def torchao(linear: nn.Linear) -> nn.Module | None:
    try:
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    except ImportError:
        return None
    module = nn.Sequential(copy.deepcopy(linear)).eval()
    quantize_(module, Int8DynamicActivationInt8WeightConfig())
    return module


def kernels(linear: nn.Linear) -> dict[str, nn.Module]:
    out = {"float32": linear, "fbgemm, range per call": fbgemm(linear),
           "_int_mm, range per row": Int8RowLinear(linear),
           "_int_mm, range per row, weights a transposed view": row_as_view(linear)}
    out["_int_mm, range per row, compiled"] = torch.compile(Int8RowLinear(linear), dynamic=True)
    if (ao := torchao(linear)) is not None:
        out["torchao"] = ao
        out["torchao, compiled"] = torch.compile(torchao(linear), dynamic=True)
    return out


def microseconds(layer: nn.Module, x: torch.Tensor, repeats: int) -> float:
    loop = max(10, 20_000 // x.size(0))
    for _ in range(loop):  # warm-up (and compilation)
        layer(x)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loop):
            layer(x)
        times.append((time.perf_counter() - start) / loop * 1e6)
    return statistics.median(times)


@torch.inference_mode()
def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    results = []
    for d_in, d_out in SHAPES:
        layers = kernels(nn.Linear(d_in, d_out).eval())
        for rows in ROWS:
            x = torch.randn(rows, 1, d_in)
            us = {name: round(microseconds(layer, x, args.repeats), 1)
                  for name, layer in layers.items()}
            results.append({"in": d_in, "out": d_out, "rows": rows, "us": us})
            print(json.dumps(results[-1]), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"cpu": cpu_model(), "threads": torch.get_num_threads(),
                                         "torch": torch.__version__, "cases": results},
                                        indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
