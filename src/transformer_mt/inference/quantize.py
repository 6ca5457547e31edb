"""int8 inference on CPUs (not in the paper): linear layers with int8 weights and dynamically
quantised activations, through PyTorch's fbgemm kernels."""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from ..model.transformer import Transformer


def quantize_int8(model: Transformer) -> Transformer:
    """An inference copy of `model` whose linear layers (the projections, the FFN and the
    pre-softmax linear) hold int8 weights and quantise their inputs per batch (PyTorch's dynamic
    quantisation, CPU only); embeddings, LayerNorm and attention stay float32."""
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("decode.int8 runs on the CPU only; use bf16 on a GPU")
    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao
        warnings.simplefilter("ignore")
        from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear
        from torch.ao.quantization import quantize_dynamic

        quantized = quantize_dynamic(copy.deepcopy(model).eval(), {nn.Linear}, dtype=torch.qint8)
    for parent in list(quantized.modules()):
        for name, child in parent.named_children():
            if isinstance(child, DynamicQuantizedLinear):
                setattr(parent, name, Int8Linear(child))
    return quantized


class Int8Linear(nn.Module):
    """A linear layer of `quantize_dynamic` (int8 weights packed for fbgemm, each input quantised
    per call with reduce_range), calling its operator overload directly: torch.ao's module and
    the operator packet add ~13 us of Python a call, a third of each call when beam 4 decodes
    one sentence. Outputs are bitwise those of the torch.ao module."""

    def __init__(self, quantized: nn.Module):
        super().__init__()
        self.in_features, self.out_features = quantized.in_features, quantized.out_features
        self.packed = quantized._packed_params._packed_params  # weight and bias, prepacked

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic.default(x, self.packed, True)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, dtype=qint8"
