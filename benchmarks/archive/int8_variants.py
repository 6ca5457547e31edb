"""translate --int8's linear layer (fbgemm's dynamic quantisation: one 7-bit activation range
per call, `reduce_range`) against three variants, swapped into `Int8Linear.forward` in one
process:

- `8bit`: the same fbgemm call with the full 8-bit range (reduce_range off; exact on CPUs with
  AVX512-VNNI, where fbgemm's kernels do not saturate 16-bit pair sums);
- `rows`: each row scaled by its own absolute maximum before that call (a constant row [1, -1,
  0, ...] pins fbgemm's range), the scale multiplied back after: per-row ranges through fbgemm;
- `int_mm`: per-row symmetric int8 activations, `torch._int_mm` (int8 x int8 -> int32), then
  the row and weight scales and the bias.

`speed DATA SHAPE`: beam 4 at batch 64 over the 1,014 val sentences (random weights, 30 forced
tokens), the variants alternating for ROUNDS rounds (default 3).
`quality MODEL_DIR SRC REF`: a trained model's translations of SRC at batch sizes 32, 64 and 100
with each variant: sacreBLEU, lines that differ from float32's, lines that differ from the same
variant at batch 64.

    PYTHONPATH=src python benchmarks/archive/int8_variants.py speed DATA small
"""

import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

from transformer_mt.inference import quantize

Q = torch.ops.quantized


def unpacked(layer):
    """The layer's int8 weight and bias, cached on it: fbgemm packed without the bias, and the
    transposed integer matrix with its scale for _int_mm."""
    if not hasattr(layer, "no_bias"):
        w, layer.bias = layer.packed.unpack()
        layer.no_bias = Q.linear_prepack(w, None)
        layer.w_KN = w.int_repr().t().contiguous()
        layer.w_scale = w.q_scale()  # quantize_dynamic's default: one scale per tensor
    return layer


def fbgemm_7bit(layer, x):
    return Q.linear_dynamic.default(x, layer.packed, True)


def fbgemm_8bit(layer, x):
    return Q.linear_dynamic.default(x, layer.packed, False)


def rows_through_fbgemm(layer, x):
    layer = unpacked(layer)
    x_MK = x.reshape(-1, x.size(-1))
    M, K = x_MK.shape
    absmax_M1 = torch.linalg.vector_norm(x_MK, float("inf"), dim=-1, keepdim=True).clamp_(1e-30)
    scaled = torch.empty(M + 1, K)
    scaled[M].zero_()
    scaled[M, 0], scaled[M, 1] = 1.0, -1.0  # pins fbgemm's range to [-1, 1]
    torch.div(x_MK, absmax_M1, out=scaled[:M])
    y_MN = Q.linear_dynamic.default(scaled, layer.no_bias, False)[:M]
    y_MN = y_MN.mul_(absmax_M1) if layer.bias is None else torch.addcmul(layer.bias, y_MN,
                                                                         absmax_M1)
    return y_MN.view(*x.shape[:-1], -1)


def rows_int_mm(layer, x):
    layer = unpacked(layer)
    x_MK = x.reshape(-1, x.size(-1))
    scale_M1 = torch.linalg.vector_norm(x_MK, float("inf"), dim=-1,
                                        keepdim=True).clamp_(1e-30).div_(127)
    acc_MN = torch._int_mm(torch.round(x_MK / scale_M1).to(torch.int8), layer.w_KN)
    scale_M1 = scale_M1 * layer.w_scale
    y_MN = acc_MN.float().mul_(scale_M1) if layer.bias is None else \
        torch.addcmul(layer.bias, acc_MN.float(), scale_M1)
    return y_MN.view(*x.shape[:-1], -1)


VARIANTS = {"7bit (translate --int8)": fbgemm_7bit, "8bit": fbgemm_8bit,
            "rows": rows_through_fbgemm, "int_mm": rows_int_mm}


def speed(data_dir: str, shape: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "speed"))  # engines.py
    from engines import build, decoding_batches, decoding_config

    torch.manual_seed(0)
    engine = build("ours", decoding_config(shape), dtype="int8", threads=torch.get_num_threads())
    batches = decoding_batches(data_dir, 64)
    n = sum(len(b) for b in batches)
    speeds = {name: [] for name in VARIANTS}
    for forward in VARIANTS.values():  # warm-up, and the caches of `unpacked`
        quantize.Int8Linear.forward = forward
        engine.decode(batches[8], beam=4, length=30)
    for _ in range(int(os.environ.get("ROUNDS", 3))):
        for name, forward in VARIANTS.items():
            quantize.Int8Linear.forward = forward
            start = time.perf_counter()
            for batch in batches:
                engine.decode(batch, beam=4, length=30)
            speeds[name].append(n / (time.perf_counter() - start))
    first = statistics.median(next(iter(speeds.values())))
    for name, values in speeds.items():
        median = statistics.median(values)
        print(f"{shape} beam 4 batch 64, {name}: {median:.1f} sentences/s "
              f"{[round(v, 1) for v in values]}, {median / first:.3f}x")


def quality(model_dir: str, src: str, ref: str) -> None:
    import sacrebleu

    from transformer_mt.inference.translator import Translator

    sources = Path(src).read_text(encoding="utf-8").splitlines()
    refs = [Path(ref).read_text(encoding="utf-8").splitlines()]
    outputs = {"float32": Translator.from_dir(model_dir).translate(sources)}
    for name, forward in VARIANTS.items():
        quantize.Int8Linear.forward = forward
        for size in (32, 64, 100):
            model = Translator.from_dir(model_dir, int8=True, batch_size=size)
            outputs[f"{name}, batch {size}"] = model.translate(sources)

    def differ(a, b):
        return sum(x != y for x, y in zip(a, b, strict=True))

    print("| decoding | sacreBLEU | lines != float32 | lines != same at batch 64 |")
    print("|---|---|---|---|")
    for key, hyps in outputs.items():
        same = outputs.get(key.split(", batch")[0] + ", batch 64", hyps)
        print(f"| {key} | {sacrebleu.corpus_bleu(hyps, refs).score:.2f} | "
              f"{differ(hyps, outputs['float32'])} | {differ(hyps, same)} |")


if __name__ == "__main__":
    warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
    {"speed": speed, "quality": quality}[sys.argv[1]](*sys.argv[2:])
