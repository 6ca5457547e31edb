import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_mt.model.attention import (
    KVCache,
    MultiHeadAttention,
    attention,
    causal_mask,
    padding_mask,
    reference_attention,
    written_out,
)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), t=st.integers(1, 9), s=st.integers(1, 9),
       d_k=st.integers(1, 8), d_v=st.integers(1, 8))
def test_sdpa_equals_reference_attention(seed, t, s, d_k, d_v):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, t, d_k, generator=g)
    k = torch.randn(2, 3, s, d_k, generator=g)
    v = torch.randn(2, 3, s, d_v, generator=g)
    is_pad = torch.rand(2, s, generator=g) < 0.3
    is_pad[:, 0] = False
    mask = padding_mask(is_pad)
    fast = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(fast, reference_attention(q, k, v, mask), atol=1e-5, rtol=1e-5)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), t=st.integers(1, 9), s=st.integers(1, 9),
       causal=st.booleans())
def test_bf16_cpu_attention_is_the_fp32_reference_to_bf16_precision(seed, t, s, causal):
    """The written-out bf16 path: outputs and gradients within bf16 rounding of the fp32
    reference, with padding or causal masks (and a fully padded row finite)."""
    g = torch.Generator().manual_seed(seed)
    s = t if causal else s
    q, k, v = (torch.randn(3, 2, n, 8, generator=g) for n in (t, s, s))
    if causal:
        mask = causal_mask(t)
    else:
        is_pad = torch.rand(3, s, generator=g) < 0.4
        is_pad[0] = True  # attends everywhere (padding_mask), never NaN
        mask = padding_mask(is_pad)
    leaves = [x.bfloat16().requires_grad_() for x in (q, k, v)]
    out = attention(*leaves, mask)
    assert out.dtype == torch.bfloat16
    out.float().square().sum().backward()
    exact = [x.bfloat16().float().requires_grad_() for x in (q, k, v)]
    want = reference_attention(*exact, mask)
    want.square().sum().backward()
    torch.testing.assert_close(out.float(), want, atol=0.05, rtol=0.02)
    for got, ref in zip(leaves, exact, strict=True):
        torch.testing.assert_close(got.grad.float(), ref.grad, atol=0.1, rtol=0.05)


def test_bf16_cpu_attention_drops_whole_weights_with_the_models_dropout():
    """Written out, dropout on the attention weights is the model's (dropout.py): each weight
    zeroed with probability p, the others the fp32 softmax's scaled by 1 / (1 - p); the same
    seed draws the same mask."""
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(8, 4, 30, 16, generator=g).bfloat16().requires_grad_() for _ in range(2))
    eye = torch.eye(30, dtype=torch.bfloat16).expand(8, 4, 30, 30)  # out = the weights
    torch.manual_seed(3)
    weights = attention(q, k, eye, None, dropout_p=0.25)
    torch.manual_seed(3)
    assert torch.equal(attention(q, k, eye, None, dropout_p=0.25), weights)
    dropped = weights == 0
    n = dropped.numel()
    assert abs(dropped.float().mean() - 0.25) < 4 * (0.25 * 0.75 / n) ** 0.5  # 4 sigma
    softmax = reference_attention(q.float(), k.float(), torch.eye(30), None)
    torch.testing.assert_close(weights[~dropped].float(), softmax[~dropped] / 0.75,
                               atol=1e-3, rtol=1e-2)
    weights.float().sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_attention_dispatch_keeps_sdpa_for_small_inference_batches_and_fp32_training():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4, generator=g) for _ in range(3))
    mask = causal_mask(5)
    assert not written_out(q)  # 2 x 2 x 5 query rows: one sentence's worth, fused
    assert torch.equal(attention(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, mask))
    q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    assert torch.equal(attention(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, mask))
    big = torch.randn(64, 4, 20, 8, requires_grad=True)
    assert not written_out(big)  # fp32 training: fused
    assert written_out(big.detach()) and written_out(big.bfloat16())  # decoding at batch; bf16
    one_query = torch.randn(64, 4, 1, 8)  # the decoder's self-attention, one step, greedy
    assert not written_out(one_query) and written_out(one_query.bfloat16())
    assert written_out(torch.randn(256, 4, 1, 8))  # ... beam 4


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), t=st.integers(1, 6), s=st.integers(1, 9),
       rows=st.sampled_from([16, 64, 256]))
def test_inference_attention_at_batch_equals_the_reference(seed, t, s, rows):
    """Decoding and validation batches take the written-out path (`written_out`): the same
    values as eq. (1) written naively, with padding masks."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(rows, 4, t, 8, generator=g)
    k, v = torch.randn(rows, 4, s, 8, generator=g), torch.randn(rows, 4, s, 8, generator=g)
    is_pad = torch.rand(rows, s, generator=g) < 0.3
    is_pad[0] = True  # a fully padded row attends everywhere
    mask = padding_mask(is_pad)
    assert written_out(q) == (rows * 4 * t >= 1024)
    torch.testing.assert_close(attention(q, k, v, mask), reference_attention(q, k, v, mask),
                               atol=1e-5, rtol=1e-5)


def test_multihead_attention_equals_torch_multihead_attention():
    torch.manual_seed(0)
    ours = MultiHeadAttention(d_model=16, n_heads=4, d_k=4, d_v=4, bias=True)
    ref = nn.MultiheadAttention(16, 4, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
        ref.out_proj.weight.copy_(ours.w_o.weight)
        ref.out_proj.bias.copy_(ours.w_o.bias)
    x, mem = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
    is_pad = torch.zeros(3, 7, dtype=torch.bool)
    is_pad[1, 4:] = True
    got = ours(x, ours.project_kv(mem), padding_mask(is_pad))
    want, _ = ref(x, mem, mem, key_padding_mask=is_pad)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_separate_dk_dv_shapes():
    attn = MultiHeadAttention(d_model=16, n_heads=2, d_k=3, d_v=5)
    k, v = attn.project_kv(torch.randn(4, 6, 16))
    assert k.shape == (4, 2, 6, 3) and v.shape == (4, 2, 6, 5)
    assert attn(torch.randn(4, 2, 16), (k, v), None).shape == (4, 2, 16)
    assert attn.w_o.weight.shape == (16, 10)


def test_fully_padded_row_attends_everywhere_instead_of_nan():
    is_pad = torch.tensor([[False, True, True], [True, True, True]])
    mask = padding_mask(is_pad)
    assert mask.shape == (2, 1, 1, 3)
    assert mask[0, 0, 0].tolist() == [True, False, False]
    assert mask[1, 0, 0].tolist() == [True, True, True]
    q, k, v = torch.randn(2, 1, 2, 4), torch.randn(2, 1, 3, 4), torch.randn(2, 1, 3, 4)
    assert F.scaled_dot_product_attention(q, k, v, attn_mask=mask).isfinite().all()


def test_causal_mask_with_offset():
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False],
                                       [True, True, True]]
    # two new queries at positions 2 and 3 over keys 0..3
    assert causal_mask(2, offset=2).tolist() == [[True, True, True, False], [True] * 4]


def test_kv_cache_extend_and_reorder():
    cache = KVCache()
    assert len(cache) == 0
    k1, v1 = torch.arange(2.0).view(2, 1, 1, 1), -torch.arange(2.0).view(2, 1, 1, 1)
    cache.extend(k1, v1)
    k, v = cache.extend(k1 + 10, v1 - 10)
    assert len(cache) == 2 and k[:, 0, :, 0].tolist() == [[0, 10], [1, 11]]
    cache.reorder(torch.tensor([1, 1]))
    k, v = cache.extend(k1 + 20, v1 - 20)
    assert k.is_contiguous() and v.is_contiguous()  # a reorder leaves one position to spare
    k, v = cache.extend(k1 + 25, v1 - 25)  # growing past it keeps everything
    assert k[:, 0, :, 0].tolist() == [[1, 11, 20, 25], [1, 11, 21, 26]]
    for _ in range(20):
        k, v = cache.extend(k1 + 30, v1 - 30)
    assert len(cache) == 24 and k.shape == (2, 1, 24, 1)
    assert k[:, 0, :3, 0].tolist() == [[1, 11, 20], [1, 11, 21]]
    assert v[:, 0, :3, 0].tolist() == [[-1, -11, -20], [-1, -11, -21]]


def test_kv_cache_equals_concatenation_through_growth_reorders_and_shrinking():
    # against a naive cache (cat + index_select): reorders, capacity growth and batches that
    # shrink (finished sentences leaving) never mix up rows
    g = torch.Generator().manual_seed(0)
    cache, ref_k, ref_v, rows = KVCache(), None, None, 6
    for step in range(40):
        k1, v1 = torch.randn(rows, 2, 1, 3, generator=g), torch.randn(rows, 2, 1, 5, generator=g)
        ref_k = k1 if ref_k is None else torch.cat([ref_k, k1], dim=2)
        ref_v = v1 if ref_v is None else torch.cat([ref_v, v1], dim=2)
        k, v = cache.extend(k1, v1)
        assert torch.equal(k, ref_k) and torch.equal(v, ref_v)
        keep = rows - 1 if step in (9, 25) else rows
        index = torch.randint(0, rows, (keep,), generator=g)
        cache.reorder(index)
        ref_k, ref_v, rows = ref_k[index], ref_v[index], keep
    assert len(cache) == 40 and rows == 4
