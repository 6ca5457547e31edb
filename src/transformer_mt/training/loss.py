"""The label-smoothed loss (§5.4), fused with the pre-softmax linear so that the (N, V) logits
never exist whole; R-Drop's consistency term (not in the paper) in the same pass."""

# N target positions  D d_model  V vocab  R rows of a block

from __future__ import annotations

import torch
from torch import Tensor

from ..model.transformer import matmul_dtype


def label_smoothed_nll(x_ND: Tensor, weight_VD: Tensor, target_N: Tensor, *, eps: float,
                       pad_id: int, rdrop: float = 0.0, bias_V: Tensor | None = None
                       ) -> tuple[Tensor, Tensor, int]:
    """Label-smoothed cross-entropy (§5.4, Szegedy et al.) of the logits x W^T (+ b, the
    output bias of models that have one, e.g. Marian's) of the pre-softmax linear: the target
    distribution puts 1 - eps on the reference token and eps
    spread uniformly over the vocabulary. Returns (smoothed loss summed over non-pad targets,
    their NLL sum, their count).

    With rdrop = alpha > 0 (R-Drop, Liang et al., 2021; not in the paper) the rows are two
    passes of one batch under independent dropout, the second pass's N/2 rows after the
    first's, and the loss adds alpha/2 (KL(P1 || P2) + KL(P2 || P1)) for each pair of rows."""
    keep_N = target_N.ne(pad_id)
    loss, nll = ProjectedLabelSmoothedNLL.apply(x_ND, weight_VD, target_N, keep_N, eps, rdrop,
                                                bias_V)
    return loss, nll, int(keep_N.sum())


class ProjectedLabelSmoothedNLL(torch.autograd.Function):
    """The pre-softmax linear and the loss in one, with the gradient written out:
    d loss_n / d logit_nv = g_nv = softmax_nv - (1 - eps) [v = target_n] - eps / V, so
    d/dx = g W and d/dW = g^T x. A block of rows at a time, the logits are made, give the loss
    and (when a gradient is wanted) their share of both gradients, and are dropped: the (N, V)
    logits and their gradient never exist whole (for a 4k-token batch and an 8k vocabulary,
    131 MB each in fp32), and each block's softmax passes stay near the cache (autograd through
    log_softmax, gather and mean made about eight passes over the whole array: 30 % of a
    Transformer-tiny step on the 2-core CPU, where the block-wise loss took 8 %). The gradients
    are made in the forward pass and scaled by the incoming gradient in the backward one. The
    matmuls run in the autocast dtype when autocast is on, the softmax in fp32. The NLL (for
    perplexity) carries no gradient.

    R-Drop's term alpha/2 D, D = KL(P || Q) + KL(Q || P) = sum_v (p_v - q_v)(log p_v - log q_v)
    for the logits a and b of a pair of rows, has dD/da = p (log p - log q - KL(P || Q)) + p - q
    and dD/db = q (log q - log p - KL(Q || P)) + q - p; both rows of a pair are in one block."""

    @staticmethod
    def forward(ctx, x_ND: Tensor, weight_VD: Tensor, target_N: Tensor, keep_N: Tensor,
                eps: float, rdrop: float, bias_V: Tensor | None):
        device, dtype = x_ND.device.type, matmul_dtype(x_ND)
        want_x, want_w = ctx.needs_input_grad[:2]
        want_b = bias_V is not None and ctx.needs_input_grad[6]
        x, w = x_ND.to(dtype), weight_VD.to(dtype)
        b = bias_V.float() if bias_V is not None else None
        V = w.size(0)
        passes = 2 if rdrop else 1
        M = len(x) // passes  # the rows of one pass
        nll_N = x_ND.new_empty(len(target_N), dtype=torch.float32)
        loss_N = torch.empty_like(nll_N)
        grad_x = torch.empty_like(x_ND) if want_x else None
        grad_w = torch.zeros_like(weight_VD, dtype=torch.float32) if want_w else None
        grad_b = torch.zeros_like(bias_V, dtype=torch.float32) if want_b else None
        with torch.autocast(device, enabled=False):  # the dtypes are chosen above
            for block in row_blocks(M, passes * V, dtype, device):
                rows = [slice(block.start + k * M, block.stop + k * M) for k in range(passes)]
                # float() first: log_softmax(dtype=float32) of bf16 logits took 1.5x as long
                logits_RV = [(x[r] @ w.t()).float() for r in rows]
                if b is not None:
                    logits_RV = [logit_RV.add_(b) for logit_RV in logits_RV]
                logps_RV = [torch.log_softmax(logit_RV, dim=-1) for logit_RV in logits_RV]
                for r, logp_RV in zip(rows, logps_RV, strict=True):
                    nll_R = -logp_RV.gather(1, target_N[r, None]).squeeze(1)
                    nll_N[r], loss_N[r] = nll_R, (1.0 - eps) * nll_R - eps * logp_RV.mean(-1)
                if rdrop:
                    p_RV, q_RV = logps_RV[0].exp(), logps_RV[1].exp()
                    diff_RV = logps_RV[0] - logps_RV[1]
                    kl_pq_R1 = (p_RV * diff_RV).sum(-1, keepdim=True)
                    kl_qp_R1 = -(q_RV * diff_RV).sum(-1, keepdim=True)
                    loss_N[rows[0]] += rdrop / 2 * (kl_pq_R1 + kl_qp_R1).squeeze(1)
                if not (want_x or want_w or want_b):
                    continue
                if rdrop:  # its share of the gradient, before the softmaxes are reused below
                    kl_grads_RV = [rdrop / 2 * (p_RV * (diff_RV - kl_pq_R1) + p_RV - q_RV),
                                   rdrop / 2 * (q_RV * (-diff_RV - kl_qp_R1) + q_RV - p_RV)]
                gs_RV = [p_RV, q_RV] if rdrop else [logps_RV[0].exp_()]
                for k, (r, g_RV) in enumerate(zip(rows, gs_RV, strict=True)):
                    target_R1 = target_N[r, None]
                    g_RV.sub_(eps / V)  # softmax - the smoothed target
                    g_RV.scatter_add_(1, target_R1, g_RV.new_full(target_R1.shape, eps - 1.0))
                    if rdrop:
                        g_RV += kl_grads_RV[k]
                    g_RV = g_RV.mul_(keep_N[r, None])  # padding: no gradient
                    if want_b:
                        grad_b += g_RV.sum(0)
                    g_RV = g_RV.to(dtype)
                    if want_x:
                        grad_x[r] = g_RV @ w
                    if want_w and dtype == torch.float32:
                        grad_w.addmm_(g_RV.t(), x[r])
                    elif want_w:
                        grad_w += g_RV.t() @ x[r]
        ctx.grads = grad_x, grad_w, grad_b
        zero = loss_N.new_zeros(())  # where(), not indexing: no sync, no data-dependent shape
        nll = torch.where(keep_N, nll_N, zero).sum()
        ctx.mark_non_differentiable(nll)
        return torch.where(keep_N, loss_N, zero).sum(), nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor):
        grad_x, grad_w, grad_b = ctx.grads
        ctx.grads = None
        if grad_x is not None:
            grad_x = grad_x.mul_(grad_loss.to(grad_x.dtype))
        if grad_w is not None:
            grad_w = grad_w.mul_(grad_loss)
        if grad_b is not None:
            grad_b = grad_b.mul_(grad_loss)
        return grad_x, grad_w, None, None, None, None, grad_b


def row_blocks(n: int, width: int, dtype: torch.dtype, device: str) -> list[slice]:
    """Row slices whose logits take about 16 MB in the matmul's dtype on CPU (1,048 rows of an
    8k vocabulary in bf16, 524 in fp32: as fast as larger blocks, less memory;
    benchmarks/results/archive/speed-fused). One slice on GPUs, where the extra kernel launches
    would cost more."""
    size = n if device == "cuda" else max(1, (16 << 20) // (width * dtype.itemsize))
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]
