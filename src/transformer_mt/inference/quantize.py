"""int8 inference on CPUs (not in the paper): linear layers with int8 weights and dynamically
quantised activations, through PyTorch's fbgemm kernels."""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from ..model.transformer import Transformer


def quantize_int8(model: Transformer, scales: str = "batch") -> Transformer:
    """An inference copy of `model` whose linear layers (the projections, the FFN and the
    pre-softmax linear) hold int8 weights and quantise their inputs as they come; embeddings,
    LayerNorm and attention stay float32. CPU only. scales="batch": PyTorch's dynamic
    quantisation (fbgemm), one input range per call, so a row's output depends on the rows beside
    it; "row": one range per row (Int8RowLinear), a row's output depends on that row alone."""
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("decode.int8 runs on the CPU only; use bf16 on a GPU")
    if scales == "row":
        quantized = stack_qkv(copy.deepcopy(model).eval())
        swap = (nn.Linear, Int8RowLinear)
    elif scales == "batch":
        with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao
            warnings.simplefilter("ignore")
            from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear
            from torch.ao.quantization import quantize_dynamic

            quantized = quantize_dynamic(copy.deepcopy(model).eval(), {nn.Linear},
                                         dtype=torch.qint8)
        swap = (DynamicQuantizedLinear, Int8Linear)
    else:
        raise ValueError(f"int8 scales: 'batch' or 'row', not {scales!r}")
    for parent in list(quantized.modules()):
        for name, child in parent.named_children():
            if isinstance(child, swap[0]):
                setattr(parent, name, swap[1](child))
    return quantized


def stack_qkv(model: Transformer) -> Transformer:
    """Give every self-attention module of `model` a `w_qkv`: W^Q, W^K and W^V stacked into one
    linear layer, so that a step projects its queries, keys and values in one product (one
    quantisation of the input, one call instead of three). With per-row scales this is exact:
    each output feature keeps its own weight scale, each row its own input range.
    (Encoder-decoder attention projects its keys and values once per source, its queries each
    step: nothing to stack.)"""
    for layer in (*model.encoder.layers, *model.decoder.layers):
        module = layer.self_attn
        if module.w_qkv is None:
            parts = (module.w_q, module.w_k, module.w_v)
            stacked = nn.Linear(parts[0].in_features, sum(p.out_features for p in parts),
                                bias=parts[0].bias is not None)
            with torch.no_grad():
                stacked.weight.copy_(torch.cat([p.weight for p in parts]))
                if stacked.bias is not None:
                    stacked.bias.copy_(torch.cat([p.bias for p in parts]))
            module.w_qkv = stacked
    return model


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


class Int8RowLinear(nn.Module):
    """A linear layer with int8 weights (one scale per output feature) whose input is quantised
    with one scale per row: x (rows, in) -> round(127 x / max|x_row|), multiplied by the weights
    exactly in int32 (torch._int_mm), then rescaled. Each row's output is a function of that row
    alone, so a sentence translates the same whatever is batched with it; several more operators
    a call than fbgemm's fused dynamic quantisation (Int8Linear)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().float()
        scale_O = weight.abs().amax(dim=1).clamp_min(1e-30) / 127
        # (in, out), the transpose of the (out, in) int8 weights laid out anew: torch._int_mm
        # multiplied by a transposed view up to 2x slower (the FFN's W2 at a few rows,
        # benchmarks/results/int8-kernels-zen4)
        weight_OI = torch.round(weight / scale_O[:, None]).to(torch.int8)
        self.register_buffer("weight_IO", weight_OI.t().contiguous())
        self.register_buffer("scale_O", scale_O / 127)  # times the input's max|x_row|
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_RI = x.reshape(-1, self.in_features).float()
        # abs().amax() and in-place rescaling: 1.2-5x faster here than vector_norm(inf) and an
        # (R, O) product of the scales
        max_R1 = x_RI.abs().amax(dim=-1, keepdim=True).clamp_min_(1e-30)
        x_int8_RI = (x_RI * (127 / max_R1)).round_().to(torch.int8)
        y_RO = torch._int_mm(x_int8_RI, self.weight_IO).float()
        y_RO.mul_(max_R1).mul_(self.scale_O)
        if self.bias is not None:
            y_RO.add_(self.bias)
        return y_RO.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                "dtype=qint8, scales=row")
