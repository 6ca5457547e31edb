import math

import pytest
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from conftest import random_batch, tiny_config, tiny_model
from transformer_mt import Transformer, load_config
from transformer_mt.config import ModelConfig, TrainConfig
from transformer_mt.model.attention import padding_mask
from transformer_mt.model.dropout import Dropout, keep_mask
from transformer_mt.model.stats import count_parameters, forward_flops_per_token, model_stats
from transformer_mt.model.transformer import DecoderLayer, EncoderLayer, sinusoidal_positions
from transformer_mt.training.step import make_optimizer


def copy_attention(ours, ref: nn.MultiheadAttention):
    ref.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
    ref.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
    ref.out_proj.weight.copy_(ours.w_o.weight)
    ref.out_proj.bias.copy_(ours.w_o.bias)


def copy_common(ours, ref, n_norms):
    copy_attention(ours.self_attn, ref.self_attn)
    ref.linear1.load_state_dict(ours.ff.w_1.state_dict())
    ref.linear2.load_state_dict(ours.ff.w_2.state_dict())
    for i in range(1, n_norms + 1):
        getattr(ref, f"norm{i}").load_state_dict(getattr(ours, f"sublayer{i}").norm.state_dict())


def randomize(module):
    """Non-trivial biases and norm parameters, so that copying them is actually checked."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_equals_torch(norm_first):
    cfg = tiny_config(attention_bias=True, norm_first=norm_first)
    torch.manual_seed(0)
    ours = EncoderLayer(cfg).eval()
    randomize(ours)
    ref = nn.TransformerEncoderLayer(cfg.d_model, cfg.n_heads, cfg.d_ff, dropout=0.0,
                                     layer_norm_eps=cfg.layer_norm_eps, batch_first=True,
                                     norm_first=norm_first).eval()
    with torch.no_grad():
        copy_common(ours, ref, 2)
    x = torch.randn(3, 7, cfg.d_model)
    is_pad = torch.zeros(3, 7, dtype=torch.bool)
    is_pad[0, 5:] = True
    got = ours(x, padding_mask(is_pad))
    want = ref(x, src_key_padding_mask=is_pad)
    torch.testing.assert_close(got[~is_pad], want[~is_pad], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_equals_torch(norm_first):
    cfg = tiny_config(attention_bias=True, norm_first=norm_first)
    torch.manual_seed(1)
    ours = DecoderLayer(cfg).eval()
    randomize(ours)
    ref = nn.TransformerDecoderLayer(cfg.d_model, cfg.n_heads, cfg.d_ff, dropout=0.0,
                                     layer_norm_eps=cfg.layer_norm_eps, batch_first=True,
                                     norm_first=norm_first).eval()
    with torch.no_grad():
        copy_common(ours, ref, 3)
        copy_attention(ours.cross_attn, ref.multihead_attn)
    x, mem = torch.randn(2, 6, cfg.d_model), torch.randn(2, 4, cfg.d_model)
    mem_is_pad = torch.tensor([[False] * 4, [False, False, True, True]])
    causal = nn.Transformer.generate_square_subsequent_mask(6)
    got = ours(x, cross_kv=ours.cross_attn.project_kv(mem),
               self_mask=torch.tril(torch.ones(6, 6, dtype=torch.bool)),
               cross_mask=padding_mask(mem_is_pad))
    want = ref(x, mem, tgt_mask=causal, memory_key_padding_mask=mem_is_pad)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_post_norm_stacks_have_no_final_norm_and_pre_norm_stacks_do():
    assert tiny_model().encoder.final_norm is None and tiny_model().decoder.final_norm is None
    pre = tiny_model(norm_first=True)
    assert isinstance(pre.encoder.final_norm, nn.LayerNorm)
    assert isinstance(pre.decoder.final_norm, nn.LayerNorm)


def test_future_target_tokens_do_not_change_earlier_logits():
    model = tiny_model()
    src = random_batch(0, 2, 6)
    tgt = random_batch(1, 2, 8)
    tgt[:, 0] = 2
    changed = tgt.clone()
    changed[:, 5:] = random_batch(2, 2, 3)
    a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :5], b[:, :5])
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_source_padding_does_not_change_outputs():
    model = tiny_model()
    src = random_batch(0, 2, 6)
    padded = torch.cat([src, torch.zeros(2, 5, dtype=torch.long)], dim=1)
    tgt = random_batch(1, 2, 5)
    tgt[:, 0] = 2
    torch.testing.assert_close(model(padded, tgt), model(src, tgt), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(model.encode(padded).states_BSD[:, :6],
                               model.encode(src).states_BSD, atol=1e-6, rtol=1e-5)


def test_target_padding_does_not_change_real_positions():
    model = tiny_model()
    src = random_batch(0, 1, 6)
    tgt = torch.tensor([[2, 7, 8, 9]])
    padded = torch.tensor([[2, 7, 8, 9, 0, 0]])
    torch.testing.assert_close(model(src, padded)[:, :4], model(src, tgt))


def test_empty_sentence_in_batch_gives_finite_outputs():
    model = tiny_model()
    src = random_batch(0, 3, 6)
    src[1] = 0  # a row that is all padding
    tgt = torch.full((3, 4), 2)
    logits = model(src, tgt)
    assert logits.isfinite().all()
    loss = nn.functional.cross_entropy(logits.view(-1, 50), torch.full((12,), 5))
    loss.backward()
    assert all(p.grad.isfinite().all() for p in model.parameters() if p.grad is not None)


def test_sinusoids_interleaved_pinned():
    table = sinusoidal_positions(3, 4, "interleaved")
    # PE(pos, 2i) = sin(pos / 10000^(2i/4)), PE(pos, 2i+1) = cos(pos / 10000^(2i/4))
    want = [[0, 1, 0, 1],
            [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
            [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)]]
    torch.testing.assert_close(table, torch.tensor(want))
    big = sinusoidal_positions(51, 512)
    assert big[50, 510].item() == pytest.approx(math.sin(50 / 10000 ** (510 / 512)), abs=1e-7)
    assert big[50, 511].item() == pytest.approx(math.cos(50 / 10000 ** (510 / 512)), abs=1e-7)


def test_sinusoids_concat_pinned():
    table = sinusoidal_positions(3, 6, "concat")
    # tensor2tensor: 3 timescales 1, 10000^-(1/2), 10000^-1; sines then cosines
    f = [1.0, 0.01, 1e-4]
    want = [[math.sin(p * x) for x in f] + [math.cos(p * x) for x in f] for p in range(3)]
    torch.testing.assert_close(table, torch.tensor(want))


def test_embeddings_scaled_by_sqrt_d_model_plus_positions():
    model = tiny_model()
    ids = torch.tensor([[5, 6, 7]])
    emb = model.src_embed(ids)
    want = model.src_embed.tokens.weight[ids] * math.sqrt(32) + sinusoidal_positions(3, 32)
    torch.testing.assert_close(emb, want)
    unscaled = tiny_model(scale_embeddings=False)
    torch.testing.assert_close(unscaled.src_embed(ids),
                               model.src_embed.tokens.weight[ids] + sinusoidal_positions(3, 32))


def test_learned_positions_option():
    model = tiny_model(positional="learned")
    assert model.src_embed.learned_positions.weight.shape == (128, 32)
    ids = torch.tensor([[5, 6]])
    want = model.src_embed.tokens.weight[ids] * math.sqrt(32) + \
        model.src_embed.learned_positions.weight[:2]
    torch.testing.assert_close(model.src_embed(ids), want)


def test_positions_beyond_table_are_an_error():
    with pytest.raises(ValueError, match="max_positions=128"):
        tiny_model()(torch.ones(1, 129, dtype=torch.long), torch.full((1, 2), 2))


INIT_SHAPES = [  # (overrides of the paper's base config): d_k = d_model / h and not
    dict(d_model=256, n_heads=4, d_ff=1024, n_encoder_layers=2, n_decoder_layers=2),
    dict(d_model=256, n_heads=4, d_ff=512, n_encoder_layers=1, n_decoder_layers=2,
         norm_first=True, weight_tying="none", attention_bias=True, output_bias=True),
    dict(d_model=192, n_heads=3, d_k=32, d_v=48, d_ff=384, n_encoder_layers=2,
         n_decoder_layers=1, positional="learned", weight_tying="decoder"),
    dict(d_model=192, n_heads=3, d_k=32, d_v=48, d_ff=384, n_encoder_layers=1,
         n_decoder_layers=2, cross_attention_init="tensor2tensor_v1"),
]


def glorot_bound(module_name: str, linear: torch.nn.Linear, cfg: ModelConfig) -> float:
    """The bound a of U(-a, a) for `linear`: Glorot a = gain sqrt(6 / (fan_in + fan_out)), gain
    1/sqrt(2) for W^Q, W^K, W^V; with cross_attention_init tensor2tensor_v1 the
    encoder-decoder attention's W^Q at gain 1 and its W^K, W^V as parts of one unit-gain
    Glorot matrix whose fan_out is h d_k + h d_v."""
    block, name = (["", ""] + module_name.split("."))[-2:]
    fan_in, fan_out = linear.in_features, linear.out_features
    if name not in ("w_q", "w_k", "w_v"):
        return math.sqrt(6 / (fan_in + fan_out))
    if block == "cross_attn" and cfg.cross_attention_init == "tensor2tensor_v1":
        fused_out = cfg.n_heads * (cfg.head_dim_k + cfg.head_dim_v)
        return math.sqrt(6 / (fan_in + (fan_out if name == "w_q" else fused_out)))
    return cfg.qkv_init_gain * math.sqrt(6 / (fan_in + fan_out))


@pytest.mark.parametrize("overrides", INIT_SHAPES)
def test_a_fresh_model_has_the_papers_code_initialisation(overrides):
    """Each parameter group's distribution from the formulas: Glorot uniform U(-a, a) with
    a = gain sqrt(6 / (fan_in + fan_out)), variance a^2 / 3, for every linear map, gain
    1/sqrt(2) for W^Q, W^K, W^V (tensor2tensor v1.0's one fused matrix for the three: variance
    1 / (2 d_model) where h d_k = d_model), 1 elsewhere; N(0, 1 / d_model) for embeddings;
    zero biases; LayerNorm's gain 1 and bias 0; tensor2tensor v1.0's encoder-decoder
    attention on request (`glorot_bound`)."""
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=3000, max_positions=256, **overrides)
    model = Transformer(cfg)
    assert cfg.qkv_init_gain == 2**-0.5
    if cfg.d_k == cfg.d_model // cfg.n_heads:
        attention = model.encoder.layers[0].self_attn
        for w in (attention.w_q, attention.w_k, attention.w_v):
            assert 2 / (w.in_features + w.out_features) / 2 == 1 / (2 * cfg.d_model)
    checked = set()
    for module_name, module in model.named_modules():
        for name, p in module.named_parameters(recurse=False):
            if id(p) in checked:
                continue  # a tied matrix: checked where it was first met
            checked.add(id(p))
            where, w = f"{module_name}.{name}", p.detach().double()
            if isinstance(module, torch.nn.LayerNorm):
                assert torch.all(w == (1.0 if name == "weight" else 0.0)), where
            elif name == "bias":
                assert torch.all(w == 0), where
            elif isinstance(module, torch.nn.Embedding):
                assert abs(w.var().item() * cfg.d_model - 1) < 0.05, where
                assert abs(w.mean().item()) < 0.05 * cfg.d_model**-0.5, where
            else:
                assert isinstance(module, torch.nn.Linear), where
                bound = glorot_bound(module_name, module, cfg)
                assert w.abs().max().item() <= bound * (1 + 1e-6), where
                assert w.abs().max().item() > 0.99 * bound, where  # not a narrower draw
                assert abs(w.var().item() / (bound**2 / 3) - 1) < 0.05, where
    assert len(checked) == len(list(model.parameters()))


def test_qkv_init_gain_scales_only_the_query_key_value_projections():
    plain, scaled = tiny_model(qkv_init_gain=1.0), tiny_model()  # same seed; the default 1/sqrt(2)
    qkv = (".w_q.", ".w_k.", ".w_v.")
    n_scaled = 0
    for (name, a), (_, b) in zip(plain.named_parameters(), scaled.named_parameters(), strict=True):
        if any(part in name for part in qkv):
            torch.testing.assert_close(b, a * 2**-0.5, rtol=0, atol=0)
            n_scaled += 1
        else:
            assert torch.equal(a, b), name
    assert n_scaled == 3 * (2 + 2 * 2)  # self-attention per encoder layer, self + cross per decoder
    with pytest.raises(ValueError, match="qkv_init_gain"):
        tiny_model(qkv_init_gain=0.0)


def test_three_way_tying_and_untying():
    tied = tiny_model()
    assert tied.src_embed.tokens.weight is tied.tgt_embed.tokens.weight
    assert tied.generator.weight is tied.tgt_embed.tokens.weight
    dec = tiny_model(weight_tying="decoder")
    assert dec.src_embed.tokens.weight is not dec.tgt_embed.tokens.weight
    assert dec.generator.weight is dec.tgt_embed.tokens.weight
    untied = tiny_model(weight_tying="none")
    assert untied.generator.weight is not untied.tgt_embed.tokens.weight
    total = [count_parameters(m)[0] for m in (tied, dec, untied)]
    assert total[1] - total[0] == total[2] - total[1] == 50 * 32


def fused_adam_update(model: Transformer) -> None:
    """One update by the trainer's optimizer (fused Adam: it does not bump the parameters'
    version counters)."""
    optimizer = make_optimizer(model, TrainConfig())
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer.step()


@pytest.mark.parametrize("bf16", [False, True])
def test_pre_softmax_copy_for_decoding_equals_the_linear_and_follows_weight_updates(bf16):
    model = tiny_model(seed=2).eval()
    src_BS = random_batch(seed=2, batch=3, length=7)
    bos_B1 = torch.full((3, 1), model.cfg.bos_id)
    dtype = torch.bfloat16 if bf16 else torch.float32
    updates = [lambda: model.tgt_embed.tokens.weight.data.mul_(-2.0),
               lambda: fused_adam_update(model), lambda: None]
    for update in updates:  # each round decodes after the previous round's update
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16), torch.inference_mode():
            memory = model.encode(src_BS)
            cache = model.new_cache(memory)
            got = model.decode(bos_B1, memory, cache)
            want = nn.functional.linear(model.decode(bos_B1, memory, project=False),
                                        model.generator.weight)
        assert cache.pre_softmax_DV is not None and got.dtype == want.dtype == dtype
        torch.testing.assert_close(got, want, atol=1e-2 if bf16 else 1e-5, rtol=1e-2 if bf16
                                   else 1e-5)
        update()
    # with autograd it is the layer itself, and the gradient reaches the (tied) weight
    model.pre_softmax(torch.randn(3, 2, model.cfg.d_model)).sum().backward()
    assert model.generator.weight.grad is not None


def test_activation_choices_are_used():
    x = torch.randn(2, 3, 32)
    for name, fn in [("relu", torch.relu), ("gelu", nn.functional.gelu),
                     ("silu", nn.functional.silu)]:
        ff = tiny_model(activation=name).encoder.layers[0].ff
        torch.testing.assert_close(ff(x), ff.w_2(fn(ff.w_1(x))))


def test_base_and_big_parameter_counts():
    # Written out: per encoder layer 4 D^2 (attention, no bias) + 2 D F + F + D (FFN) + 4 D
    # (two LayerNorms); per decoder layer 8 D^2 + 2 D F + F + D + 6 D; one tied V x D matrix.
    def expected(D, F, V=37_000, N=6):
        enc = 4 * D * D + 2 * D * F + F + D + 4 * D
        dec = 8 * D * D + 2 * D * F + F + D + 6 * D
        return N * (enc + dec) + V * D

    base = model_stats(load_config("base").model).parameters
    big = model_stats(load_config("big").model).parameters
    assert base == expected(512, 2048) == 63_045_632
    assert big == expected(1024, 4096) == 214_171_648
    # Paper Table 3: 65M and 213M. Big is within 1%; base is 3.0% below 65M, and no reading of
    # §3 with a 37k tied vocabulary gives 65M (it would need ~40.8k tokens, big ~35.9k).
    assert abs(big / 213e6 - 1) < 0.02
    assert abs(base / 65e6 - 1) < 0.031


@pytest.mark.parametrize("cfg_kw", [{}, {"d_k": 5, "d_v": 3, "weight_tying": "none"}])
def test_flops_formula_matches_torch_flop_counter(cfg_kw):
    model = tiny_model(**cfg_kw)
    L = 9
    src, tgt = random_batch(0, 1, L), random_batch(1, 1, L)
    # The math backend decomposes attention into matmuls the counter sees; it does not count
    # the fused CPU flash kernel.
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(src, tgt)
    assert counter.get_total_flops() == L * forward_flops_per_token(model.cfg, L)


def test_model_builds_from_every_preset():
    for preset, d_model in [("tiny", 64), ("small", 256)]:
        cfg = load_config(preset, ["model.vocab_size=100"]).model
        assert cfg.d_model == d_model
        logits = Transformer(cfg)(random_batch(0, 2, 5, vocab=100), torch.full((2, 3), 2))
        assert logits.shape == (2, 3, 100)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_zeroes_about_p_and_rescales_the_rest(dtype):
    drop, x = Dropout(0.3), torch.randn(301, 97, dtype=dtype, requires_grad=True)  # odd size
    torch.manual_seed(7)
    y = drop(x)
    dropped = y.detach() == 0
    n = x.numel()
    assert abs(dropped.float().mean() - 0.3) < 4 * (0.3 * 0.7 / n) ** 0.5  # 4 sigma
    scale = 2**16 / (2**16 - round(0.3 * 2**16))  # the mask's p is a multiple of 2^-16
    expected = torch.where(dropped, 0.0, x.detach().float() * scale).to(dtype)
    assert torch.equal(y.detach(), expected), "kept values are x / (1 - p), rounded once"
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, torch.where(dropped, 0.0, scale).to(dtype))
    torch.manual_seed(7)
    assert torch.equal(drop(x), y), "the same seed draws the same mask"
    assert not torch.equal(drop(x) == 0, dropped), "the next draw is another mask"
    assert torch.equal(drop.eval()(x), x)


@pytest.mark.parametrize("side", ["source", "target"])
def test_word_dropout_zeroes_whole_tokens_of_its_side_and_only_in_training(side):
    """A dropped token leaves its position encoding alone (no rescaling of the rest); the
    other side and eval mode are untouched."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(dropout=0.0, vocab_size=100, **{f"{side}_word_dropout": 0.25}))
    embed, other = (model.src_embed, model.tgt_embed)[:: 1 if side == "source" else -1]
    ids = torch.randint(4, 100, (64, 50))
    positions = embed.positions(0, 50).expand(64, 50, -1)
    full = embed.eval()(ids)
    assert not torch.isclose(full, positions).all(-1).any(), "no token embeds to zero"
    x = embed.train()(ids)
    dropped = torch.isclose(x, positions).all(-1)  # (B, T)
    kept = ~dropped
    n = ids.numel()
    assert abs(dropped.float().mean() - 0.25) < 4 * (0.25 * 0.75 / n) ** 0.5  # 4 sigma
    torch.testing.assert_close(x[kept], full[kept], rtol=0, atol=0)
    assert not torch.equal(embed(ids), x), "a fresh draw each call"
    assert torch.equal(other.train()(ids), full), "the other side is never dropped"
    with pytest.raises(ValueError, match=f"model.{side}_word_dropout"):
        tiny_config(**{f"{side}_word_dropout": 1.0})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_keeps_one_byte_per_element_for_backward(dtype):
    """Autograd saves the mask as uint8, not a float copy: a quarter (fp32) or half (bf16) of
    the memory a float mask would take, for every dropout of a training step."""
    x = torch.randn(64, 33, dtype=dtype, requires_grad=True)
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        Dropout(0.1)(x)
    assert [(t.dtype, t.shape) for t in saved] == [(torch.uint8, x.shape)]


def test_dropout_masks_are_unbiased_and_independent_in_every_lane():
    """Each of the four 16-bit lanes cut from one 64-bit draw drops with probability p, and
    neighbouring elements (lanes of one draw, or of two) are uncorrelated."""
    torch.manual_seed(0)
    p, n = 0.1, 4 * 200_000
    dropped = ~keep_mask(torch.Size([n]), round(p * 2**16), torch.device("cpu"))
    sigma = (p * (1 - p) / (n / 4)) ** 0.5
    for lane in range(4):
        assert abs(dropped[lane::4].float().mean() - p) < 5 * sigma
    both = (dropped[:-1] & dropped[1:]).float().mean()  # P(two neighbours dropped) = p^2
    assert abs(both - p * p) < 5 * (p * p / n) ** 0.5
    assert keep_mask(torch.Size([2, 5]), 0, torch.device("cpu")).all()
    assert Dropout(1 - 1e-9).threshold == 2**16 - 1  # p < 1 never drops everything
