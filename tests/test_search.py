import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import random_batch, tiny_model
from transformer_mt import DecodeConfig, beam_search, greedy_search, sample
from transformer_mt.inference import search as decoding
from transformer_mt.inference.search import (
    argmax_in_blocks,
    filter_logits,
    length_penalty,
    topk_in_blocks,
)
from transformer_mt.research.tree_search import TreeConstraints

PAD, UNK, BOS, EOS, A, B = 0, 1, 2, 3, 4, 5


@pytest.mark.parametrize("norm_first, kv_dtype",
                         [(False, None), (True, None), (True, torch.bfloat16)])
def test_cached_decoding_matches_full_forward(norm_first, kv_dtype):
    """Step by step with the cache = the full forward. With bf16 keys and values
    (decode.kv_bf16: every key and value, self and cross, kept in bf16 and attention run in it,
    the rest of the fp32 model untouched): within bf16 rounding of it."""
    model = tiny_model(norm_first=norm_first)
    src = random_batch(0, 3, 7, lengths=[7, 4, 6])
    tgt = random_batch(1, 3, 9)
    tgt[:, 0] = BOS
    memory = model.encode(src)
    full = model.decode(tgt, memory)
    cache = model.new_cache(memory, kv_dtype=kv_dtype)
    steps = torch.cat([model.decode(tgt[:, t : t + 1], memory, cache)
                       for t in range(tgt.size(1))], dim=1)
    assert len(cache) == tgt.size(1) and steps.dtype == torch.float32
    if kv_dtype is None:
        torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)
        return
    kept = [t for kv in cache.cross_kvs for t in kv] + \
        [t for c in cache.self_kv for t in (c.k_BHCK, c.v_BHCV)]
    assert {t.dtype for t in kept} == {kv_dtype}
    error = (steps - full).abs().max() / full.abs().max()
    assert 0 < error < 0.02  # bf16 keeps 8 bits of mantissa: ~0.4 % per rounding


def test_beam_search_with_bf16_keys_values_scores_as_a_full_forward_to_bf16_precision():
    model = tiny_model(seed=5)
    src = random_batch(9, 3, 7, lengths=[7, 3, 5])
    cfg = DecodeConfig(beam_size=3, n_best=3, max_length_offset=6, kv_bf16=True)
    for hyps, row in zip(beam_search(model, src, cfg), src, strict=True):
        for h in hyps:
            tgt_in, tgt_out = torch.tensor([[BOS, *h.tokens]]), torch.tensor([*h.tokens, EOS])
            with torch.no_grad():
                logp = model(row[None], tgt_in).log_softmax(-1)[0].gather(1, tgt_out[:, None])
            assert float(logp.sum()) == pytest.approx(h.log_prob, abs=0.05)


def test_cached_decoding_in_chunks_matches_full_forward():
    model = tiny_model()
    src, tgt = random_batch(0, 2, 5), random_batch(1, 2, 8)
    tgt[:, 0] = BOS
    memory = model.encode(src)
    cache = model.new_cache(memory)
    chunks = [model.decode(tgt[:, a:b], memory, cache) for a, b in [(0, 3), (3, 4), (4, 8)]]
    torch.testing.assert_close(torch.cat(chunks, 1), model.decode(tgt, memory), atol=1e-5,
                               rtol=1e-5)


def test_cross_attention_keys_values_projected_once_per_source():
    model = tiny_model()
    calls = {"cross_k": 0, "self_k": 0, "encoder": 0}
    for layer in model.decoder.layers:
        layer.cross_attn.w_k.register_forward_hook(lambda *_: calls.__setitem__(
            "cross_k", calls["cross_k"] + 1))
        layer.self_attn.w_k.register_forward_hook(lambda *_: calls.__setitem__(
            "self_k", calls["self_k"] + 1))
    model.encoder.register_forward_hook(lambda *_: calls.__setitem__(
        "encoder", calls["encoder"] + 1))
    hyps = beam_search(model, random_batch(0, 2, 5), DecodeConfig(max_length_offset=6))
    steps = max(len(h[0].tokens) for h in hyps) + 1
    n_layers = len(model.decoder.layers)
    assert calls["encoder"] == 1
    assert calls["cross_k"] == n_layers  # once per layer for the whole search
    assert calls["self_k"] >= n_layers * steps  # once per layer and step


def test_beam_size_one_equals_greedy():
    model = tiny_model(seed=3)
    src = random_batch(0, 4, 8, lengths=[8, 3, 6, 5])
    cfg = DecodeConfig(beam_size=1, max_length_offset=10)
    beam = beam_search(model, src, cfg)
    greedy = greedy_search(model, src, cfg)
    for (b,), (g,) in zip(beam, greedy, strict=True):
        assert b.tokens == g.tokens
        assert b.score == pytest.approx(g.score, abs=1e-5)
        assert b.log_prob == pytest.approx(g.log_prob, abs=1e-5)


@pytest.mark.parametrize("search", [beam_search, greedy_search])
def test_results_do_not_depend_on_batch(search):
    model = tiny_model(seed=4)
    lengths = [9, 3, 6, 5, 7]
    src = random_batch(0, 5, 9, lengths=lengths)
    cfg = DecodeConfig(beam_size=3, n_best=3, max_length_offset=8)
    batched = search(model, src, cfg)
    for i, n in enumerate(lengths):
        alone = search(model, src[i : i + 1, :n], cfg)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batched[i]], abs=1e-4)
    reversed_batch = search(model, src.flip(0), cfg)
    assert [[h.tokens for h in hs] for hs in reversed_batch[::-1]] == \
        [[h.tokens for h in hs] for hs in batched]


def test_nbest_sorted_and_scores_consistent():
    model = tiny_model(seed=5)
    cfg = DecodeConfig(beam_size=5, n_best=5, length_penalty=0.6, max_length_offset=6)
    for hyps in beam_search(model, random_batch(1, 3, 6), cfg):
        assert len(hyps) == 5
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == 5
        for h in hyps:
            assert h.score == pytest.approx(h.log_prob / length_penalty(len(h.tokens) + 1, 0.6))


def test_beam_scores_are_the_model_log_probabilities():
    model = tiny_model(seed=6)
    src = random_batch(2, 1, 6)
    (hyp, *_), = beam_search(model, src, DecodeConfig(beam_size=3, max_length_offset=5))
    tgt = torch.tensor([[BOS, *hyp.tokens]])
    logp = torch.log_softmax(model(src, tgt), dim=-1)[0]
    want = sum(logp[t, tok].item() for t, tok in enumerate([*hyp.tokens, EOS]))
    assert hyp.log_prob == pytest.approx(want, abs=1e-4)


# --- hand-built cases: a fake model returning fixed probability tables -----------------------

class PrefixCache:
    def __init__(self, rows, beams):
        self.prefixes = [[] for _ in range(rows)]
        self.beams = beams

    def reorder(self, index, beams=None):
        self.prefixes = [list(self.prefixes[i]) for i in index.tolist()]
        self.beams = beams or self.beams

    def keep_sources(self, index):
        self.reorder(torch.tensor([i * self.beams + k for i in index.tolist()
                                   for k in range(self.beams)]))


class TableModel:
    """Next-token probabilities looked up by the tokens generated so far (BOS excluded)."""

    def __init__(self, table, default, vocab=6):
        self.cfg = SimpleNamespace(pad_id=PAD, bos_id=BOS, eos_id=EOS, unk_id=UNK)
        self.table, self.default, self.vocab = table, default, vocab

    def encode(self, src):
        return SimpleNamespace(rows=src.size(0))

    def new_cache(self, memory, beams=1, kv_dtype=None):
        return PrefixCache(memory.rows * beams, beams)

    def decode(self, tgt_BT, memory, cache):
        rows = []
        for prefix, token in zip(cache.prefixes, tgt_BT[:, -1].tolist(), strict=True):
            if token != BOS:
                prefix.append(token)
            probs = torch.zeros(self.vocab)
            for tok, p in self.table.get(tuple(prefix), self.default).items():
                probs[tok] = p
            rows.append(probs.log())
        return torch.stack(rows)[:, None, :]


TABLE = {
    (): {A: 0.5, B: 0.3, EOS: 0.2},
    (A,): {A: 0.1, B: 0.3, EOS: 0.6},
    (B,): {A: 0.95, B: 0.025, EOS: 0.025},
}
SRC = torch.tensor([[A, A, EOS]])  # source length 3: outputs up to 53 tokens


def test_hand_built_beam_without_length_penalty():
    # step 1: A .5, B .3 alive; EOS .2 ranks 3rd of 2N=4, outside the first N=2: not finished.
    # step 2: [A EOS] .30 finishes; [B A] .285 and [A B] .15 stay alive.
    # step 3: both end (EOS prob 1 by default): 3 finished >= N, the search stops.
    hyps = beam_search(TableModel(TABLE, {EOS: 1.0}), SRC,
                       DecodeConfig(beam_size=2, n_best=2, length_penalty=0.0))[0]
    assert [h.tokens for h in hyps] == [[A], [B, A]]
    assert [h.log_prob for h in hyps] == pytest.approx([math.log(0.3), math.log(0.285)])
    assert [h.score for h in hyps] == pytest.approx([math.log(0.3), math.log(0.285)])


@pytest.mark.parametrize("search", [greedy_search, beam_search])
def test_without_allow_unk_no_unknown_piece_is_written_and_scores_stay_the_models(search):
    # <unk> is the most likely first token; Marian's --allow-unk false (its default) removes
    # it from the candidates without renormalising: [A] keeps log P = log .3, not log .3/.4
    model = TableModel({(): {UNK: 0.6, A: 0.3, EOS: 0.1}}, {EOS: 1.0})
    cfg = DecodeConfig(beam_size=2, n_best=1, length_penalty=0.0)
    allowed = search(model, SRC, cfg)[0][0]
    assert (allowed.tokens, allowed.log_prob) == ([UNK], pytest.approx(math.log(0.6)))
    banned = search(model, SRC, dataclasses.replace(cfg, allow_unk=False))[0][0]
    assert (banned.tokens, banned.log_prob) == ([A], pytest.approx(math.log(0.3)))


@pytest.mark.parametrize("search", [greedy_search, beam_search])
def test_at_marians_length_cap_an_output_ends_with_its_last_piece(search):
    # source A A EOS: 3 tokens; factor 1: at most 3 pieces, then the output ends without EOS,
    # scored without it and normalised by its 3 pieces (Marian's max-length-factor); the
    # same cap as max_length (4 tokens, EOS included) forces EOS and scores it
    model = TableModel({}, {A: 0.7, B: 0.25, EOS: 0.05})
    cfg = DecodeConfig(beam_size=2, length_normalization="power", length_penalty=1.0,
                       max_length_offset=100)
    marian = search(model, SRC, dataclasses.replace(cfg, max_length_factor=1.0))[0][0]
    assert marian.tokens == [A, A, A]
    assert (marian.log_prob, marian.score) == pytest.approx((3 * math.log(0.7),
                                                             math.log(0.7)))
    forced = search(model, SRC, dataclasses.replace(cfg, max_length=4))[0][0]
    assert forced.tokens == [A, A, A]
    logp = 3 * math.log(0.7) + math.log(0.05)
    assert (forced.log_prob, forced.score) == pytest.approx((logp, logp / 4))


def test_hand_built_beam_with_length_penalty():
    # Same search; lp(2) = (7/6)^0.6, lp(3) = (8/6)^0.6 lets the longer [B A] win.
    hyps = beam_search(TableModel(TABLE, {EOS: 1.0}), SRC,
                       DecodeConfig(beam_size=2, n_best=2, length_penalty=0.6))[0]
    assert [h.tokens for h in hyps] == [[B, A], [A]]
    assert [h.score for h in hyps] == pytest.approx(
        [math.log(0.285) / (8 / 6) ** 0.6, math.log(0.3) / (7 / 6) ** 0.6])


def test_hand_built_beam_three_best_and_batch():
    model = TableModel(TABLE, {EOS: 1.0})
    cfg = DecodeConfig(beam_size=3, n_best=3, length_penalty=0.0)
    # N=3: at step 1 EOS (.2) ranks 3rd of 6, inside the first 3, so [] finishes too.
    hyps = beam_search(model, SRC.repeat(2, 1), cfg)
    for sentence in hyps:
        assert [h.tokens for h in sentence] == [[A], [B, A], []]
        assert [h.log_prob for h in sentence] == pytest.approx(
            [math.log(0.3), math.log(0.285), math.log(0.2)])


def test_hand_built_beam_stop_bound_waits_for_a_longer_winner():
    # N=1, alpha 2. Step 2: [A EOS] (.45) finishes, score log .45 / (7/6)^2 = -0.587, and the
    # fairseq rule stops there. [A A] (.405) is alive; over lp(53) (source 3 + 50) it could still
    # reach -0.904 / (58/6)^2 = -0.0097, so "bound" goes on: [A A EOS] scores
    # log .405 / (8/6)^2 = -0.508 and wins; nothing alive is left (its other tokens have
    # probability 0), so the search ends at step 3, not at the maximum length.
    table = {(): {A: 0.9, EOS: 0.1}, (A,): {EOS: 0.5, A: 0.45, B: 0.05}}
    model = TableModel(table, {EOS: 1.0})
    first = beam_search(model, SRC, DecodeConfig(beam_size=1, length_penalty=2.0))[0]
    bound = beam_search(model, SRC, DecodeConfig(beam_size=1, length_penalty=2.0,
                                                 beam_stop="bound", n_best=1))[0]
    assert [h.tokens for h in first] == [[A]]
    assert first[0].score == pytest.approx(math.log(0.45) / (7 / 6) ** 2)
    assert [h.tokens for h in bound] == [[A, A]]
    assert bound[0].score == pytest.approx(math.log(0.405) / (8 / 6) ** 2)


def test_hand_built_shrinking_beam_keeps_one_place_per_unfinished_hypothesis():
    # N=2, no length penalty. Step 2: [A EOS] (.30) finishes and [B B] (.27) stays; fairseq's
    # rule also keeps [A A] (.20), Marian's ("shrink") has one place left. Step 3: fairseq
    # finishes [A A EOS] (.20), the second finished: done. Shrink extends [B B] alone: [B B B]
    # (.243; its EOS, .027, takes no place), which finishes at step 4.
    table = {(): {A: 0.5, B: 0.3, EOS: 0.2}, (A,): {EOS: 0.6, A: 0.4},
             (B,): {EOS: 0.1, B: 0.9}, (A, A): {EOS: 1.0}, (B, B): {EOS: 0.1, B: 0.9}}
    model = TableModel(table, {EOS: 1.0})
    cfg = DecodeConfig(beam_size=2, n_best=2, length_penalty=0.0)
    fairseq = beam_search(model, SRC, cfg)[0]
    shrink = beam_search(model, SRC, dataclasses.replace(cfg, beam_stop="shrink"))[0]
    assert [h.tokens for h in fairseq] == [[A], [A, A]]
    assert [h.tokens for h in shrink] == [[A], [B, B, B]]
    assert [h.log_prob for h in shrink] == pytest.approx([math.log(0.3), math.log(0.243)])


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_beam_stop_bound_never_returns_a_worse_best(alpha):
    # The same beam, searched for longer: its finished set grows, so its best can only improve.
    model = tiny_model(seed=7)
    src = random_batch(3, 6, 7)
    cfgs = [DecodeConfig(beam_size=3, length_penalty=alpha, max_length_offset=6,
                         beam_stop=stop) for stop in ("n_finished", "bound")]
    first, bound = (beam_search(model, src, cfg) for cfg in cfgs)
    for (f,), (b,) in zip(first, bound, strict=True):
        assert b.score >= f.score - 1e-6
        assert b.score == pytest.approx(b.log_prob / length_penalty(len(b.tokens) + 1, alpha))


def test_max_length_is_source_length_plus_offset():
    never_ends = TableModel({}, {A: 0.9, B: 0.09, EOS: 0.01})
    src = torch.tensor([[A, EOS, PAD, PAD], [A, A, A, EOS]])  # lengths 2 and 4
    for search in (beam_search, greedy_search):
        hyps = search(never_ends, src, DecodeConfig(beam_size=2, max_length_offset=5))
        # at most len + 5 tokens, EOS (forced) included
        assert [len(h[0].tokens) + 1 for h in hyps] == [7, 9]
        assert hyps[0][0].tokens == [A] * 6
    # the paper's default offset is 50
    (hyp,), = greedy_search(never_ends, src[:1], DecodeConfig())
    assert len(hyp.tokens) + 1 == 2 + 50


def test_length_penalty_values():
    assert length_penalty(1, 0.6) == 1.0
    assert length_penalty(7, 0.6) == pytest.approx(2.0**0.6)
    assert length_penalty(100, 0.0) == 1.0


# --- sampling ------------------------------------------------------------------------------

def test_sampling_seeded_and_top_k_one_is_greedy():
    model = tiny_model(seed=7)
    src = random_batch(0, 3, 6)
    cfg = DecodeConfig(strategy="sample", seed=11, max_length_offset=8)
    first, again = sample(model, src, cfg), sample(model, src, cfg)
    assert [h[0].tokens for h in first] == [h[0].tokens for h in again]
    top1 = sample(model, src, DecodeConfig(strategy="sample", top_k=1, max_length_offset=8))
    greedy = greedy_search(model, src, DecodeConfig(max_length_offset=8))
    assert [h[0].tokens for h in top1] == [h[0].tokens for h in greedy]


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**16), top_k=st.integers(0, 12), top_p=st.floats(0.01, 1.0))
def test_filter_logits_properties(seed, top_k, top_p):
    logits = torch.randn(3, 10, generator=torch.Generator().manual_seed(seed))
    kept = filter_logits(logits, top_k=top_k, top_p=top_p).isfinite()
    assert kept.gather(1, logits.argmax(1, keepdim=True)).all()  # the best is always kept
    if top_k:
        assert (kept.sum(1) <= top_k).all()
    if top_k == 0:
        probs = logits.softmax(1)
        # the kept set is the smallest prefix of the sorted tokens reaching mass top_p
        for row in range(3):
            order = probs[row].argsort(descending=True)
            n = int(kept[row].sum())
            assert kept[row, order[:n]].all()
            assert probs[row, order[: n - 1]].sum() < top_p + 1e-6
            assert probs[row, order[:n]].sum() >= min(top_p, 1.0) - 1e-6


@pytest.mark.parametrize("search", [greedy_search, beam_search])
def test_min_and_max_length_force_the_output_length(search):
    model = tiny_model(seed=4)
    src = random_batch(7, 3, 6, lengths=[6, 2, 4])
    for n in (1, 5, 9):  # min = max: every output has n tokens, EOS included
        cfg = DecodeConfig(beam_size=3, n_best=3, min_length=n, max_length=n)
        for hyps in search(model, src, cfg):
            assert {len(h.tokens) for h in hyps} == {n - 1}
    cfg = DecodeConfig(beam_size=2, min_length=8, max_length_offset=20)
    for hyps in search(model, src, cfg):
        assert all(len(h.tokens) >= 7 for h in hyps)


def test_min_length_above_max_length_is_refused():
    with pytest.raises(ValueError, match="min_length=5 exceeds max_length=3"):
        DecodeConfig(min_length=5, max_length=3)


def test_beam_log_probs_equal_a_full_forward_of_each_hypothesis():
    """The cached, beam-folded search scores each hypothesis as teacher forcing would."""
    model = tiny_model(seed=5)
    src = random_batch(9, 3, 7, lengths=[7, 3, 5])
    for hyps, row in zip(beam_search(model, src, DecodeConfig(beam_size=3, n_best=3,
                                                              max_length_offset=6)),
                         src, strict=True):
        assert len(hyps) == 3
        for h in hyps:
            tgt_in = torch.tensor([[BOS, *h.tokens]])
            tgt_out = torch.tensor([*h.tokens, EOS])
            with torch.no_grad():
                logp = model(row[None], tgt_in).log_softmax(-1)[0].gather(1, tgt_out[:, None])
            assert float(logp.sum()) == pytest.approx(h.log_prob, abs=1e-4)


def test_sentences_done_early_leave_the_batch_without_changing_the_others():
    model = tiny_model(seed=6)
    src = random_batch(11, 4, 9, lengths=[2, 9, 4, 7])
    cfg = DecodeConfig(beam_size=3, n_best=3, max_length_offset=2)  # done at 4, 11, 6, 9
    together = beam_search(model, src, cfg)
    for row, hyps in zip(src, together, strict=True):
        n = int(row.ne(PAD).sum())
        alone = beam_search(model, row[None, :n], cfg)[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-5)


def test_greedy_rows_that_finish_leave_the_batch_without_changing_the_others():
    model = tiny_model(seed=8)
    src = random_batch(13, 4, 9, lengths=[2, 9, 4, 7])
    cfg = DecodeConfig(strategy="greedy", max_length_offset=3)
    together = greedy_search(model, src, cfg)
    for row, hyps in zip(src, together, strict=True):
        n = int(row.ne(PAD).sum())
        alone = greedy_search(model, row[None, :n], cfg)[0]
        assert hyps[0].tokens == alone[0].tokens
        assert hyps[0].log_prob == pytest.approx(alone[0].log_prob, abs=1e-5)


# --- beam candidates -----------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**16), rows=st.integers(1, 4), width=st.integers(1, 700),
       k=st.integers(1, 12), block=st.sampled_from([2, 8, 32, 128]),
       levels=st.sampled_from([3, 1000]), dead=st.floats(0.0, 0.9))
def test_topk_in_blocks_equals_topk(seed, rows, width, k, block, levels, dead):
    """The same values as torch.topk, sorted, at distinct indices that hold them; with few
    distinct levels (many ties) and with -inf (dead hypotheses, forbidden tokens)."""
    g = torch.Generator().manual_seed(seed)
    k = min(k, width)
    x = torch.randint(levels, (rows, width), generator=g).float()
    x[torch.rand(rows, width, generator=g) < dead] = float("-inf")
    values, indices = topk_in_blocks(x, k, block)
    assert torch.equal(values, x.topk(k, dim=1).values)
    assert torch.equal(x.gather(1, indices), values)
    assert all(len(set(row)) == k for row in indices.tolist())


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**16), rows=st.sampled_from([1, 3, 16, 40]),
       width=st.integers(1, 700), block=st.sampled_from([2, 8, 32, 128]),
       levels=st.sampled_from([3, 1000]), dead=st.floats(0.0, 0.9), nan=st.booleans())
def test_argmax_in_blocks_equals_argmax(seed, rows, width, block, levels, dead, nan):
    """The index torch.argmax gives, the first of tied maxima, with -inf (forbidden tokens)
    and NaN, at every width (a short last block included)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(levels, (rows, width), generator=g).float()
    x[torch.rand(rows, width, generator=g) < dead] = float("-inf")
    if nan:
        x[torch.rand(rows, width, generator=g) < 0.01] = float("nan")
    assert torch.equal(argmax_in_blocks(x, block), x.argmax(dim=1))


def test_beam_search_with_block_candidates_equals_plain_topk(monkeypatch):
    """A vocabulary large enough for the block path (4 x 600 candidates a sentence) gives the
    same hypotheses and scores as torch.topk."""
    model = tiny_model(seed=8, vocab_size=600)
    src = random_batch(3, 5, 7, vocab=600, lengths=[7, 3, 6, 7, 2])
    cfg = DecodeConfig(beam_size=4, n_best=4, max_length_offset=10)
    blocks = beam_search(model, src, cfg)
    monkeypatch.setattr(decoding, "topk_in_blocks", lambda x, k: x.topk(k, dim=1))
    plain = beam_search(model, src, cfg)
    assert [[(h.tokens, h.score) for h in hyps] for hyps in blocks] == \
        [[(h.tokens, h.score) for h in hyps] for hyps in plain]


def test_beam_search_first_step_decodes_one_row_per_sentence():
    """Until the first step has chosen N hypotheses a sentence has one (BOS): its rows are not
    decoded N times."""
    model = tiny_model(seed=3)
    rows, decode = [], model.decode

    def counting_decode(tgt, memory, cache=None):
        rows.append(len(tgt))
        return decode(tgt, memory, cache)

    model.decode = counting_decode
    cfg = DecodeConfig(beam_size=4, min_length=6, max_length=6)
    beam_search(model, random_batch(1, 3, 5), cfg)
    assert rows == [3] + [3 * 4] * 5


def test_beam_wider_than_half_the_vocabulary_is_refused():
    model = TableModel({}, {A: 0.5, EOS: 0.5})
    with pytest.raises(ValueError, match="2 x beam_size = 8 candidates; the vocabulary has only 6"):
        beam_search(model, torch.ones(1, 2, dtype=torch.long), DecodeConfig(beam_size=4))


class FavoursA:
    """A tiny model whose logit of token A is raised: it writes A now and then."""

    def __init__(self, model, boost: float):
        self.model, self.cfg, self.boost = model, model.cfg, boost

    def encode(self, src_BS):
        return self.model.encode(src_BS)

    def new_cache(self, memory, beams=1, kv_dtype=None):
        return self.model.new_cache(memory, beams, kv_dtype=kv_dtype)

    def decode(self, tgt_BT, memory, cache):
        logits = self.model.decode(tgt_BT, memory, cache)
        logits[..., A] += self.boost
        return logits


@pytest.mark.parametrize("search", [greedy_search, beam_search, sample])
def test_slot_limit_places_one_slot_per_source_word(search):
    """Parsing's word slots: token A stands for a word and every source token from 10 on begins
    one; each output then holds exactly that many A, unless the length limit ends it first."""
    model = FavoursA(tiny_model(seed=4), boost=3.0)
    src = random_batch(7, 3, 6, lengths=[6, 2, 4])
    vocab = model.cfg.vocab_size
    constraints = TreeConstraints(is_slot_V=torch.arange(vocab) == A,
                                  begins_word_V=torch.arange(vocab) >= 10)
    words = [int(w) for w in constraints.start(src)]
    assert words == [int((row >= 10).sum()) for row in src]
    cfg = DecodeConfig(beam_size=3, n_best=3, max_length_offset=30)
    free = [[h.tokens.count(A) for h in hyps] for hyps in search(model, src, cfg)]
    assert any(n != w for counts, w in zip(free, words, strict=True) for n in counts), \
        "without the limit the outputs do not hold one A per word"
    for hyps, w in zip(search(model, src, cfg, constraints), words, strict=True):
        assert hyps and all(h.tokens.count(A) == w for h in hyps)
    short = DecodeConfig(beam_size=3, max_length=2)  # the limit still ends every output
    for hyps in search(model, src, short, constraints):
        assert hyps and all(len(h.tokens) <= 1 for h in hyps)


@torch.inference_mode()
def test_slot_limit_holds_for_sentences_that_join_a_running_beam_search():
    model = FavoursA(tiny_model(seed=4), boost=3.0)
    vocab = model.cfg.vocab_size
    constraints = TreeConstraints(is_slot_V=torch.arange(vocab) == A,
                                  begins_word_V=torch.arange(vocab) >= 10)
    cfg = DecodeConfig(beam_size=3, n_best=3, max_length_offset=30)
    first, later = random_batch(7, 2, 6, lengths=[6, 2]), random_batch(8, 2, 6, lengths=[5, 4])
    search, results = decoding.BeamSearch(model, cfg, constraints), {}
    search.add(first, [0, 1])
    for _ in range(3):
        results.update(search.step())
    search.add(later, [2, 3])
    while search:
        results.update(search.step())
    words = torch.cat([constraints.start(first), constraints.start(later)]).tolist()
    assert all(h.tokens.count(A) == words[k] for k, hyps in results.items() for h in hyps)
    alone = decoding.beam_search(model, later, cfg, constraints)
    assert [[h.tokens for h in hyps] for hyps in alone] == \
        [[h.tokens for h in results[k]] for k in (2, 3)]


OPEN, CLOSE = A + 1, A + 2


def bracket_violations(tokens: list[int], limited: bool) -> list[str]:
    """What breaks balance in an output: a close with nothing open or right after an open,
    constituents left open (allowed only where the length limit ended the output)."""
    found, depth, previous = [], 0, None
    for t in tokens:
        if t == CLOSE:
            found += ["close with nothing open"] if depth == 0 else []
            found += ["empty constituent"] if previous == OPEN else []
            depth -= 1
        depth += t == OPEN
        previous = t
    return found + (["left open"] if depth > 0 and not limited else [])


class FavoursBrackets(FavoursA):
    """After an opening bracket it favours A, elsewhere a closing bracket, then an opening
    one: unconstrained, it closes what is not open."""

    def decode(self, tgt_BT, memory, cache):
        logits = self.model.decode(tgt_BT, memory, cache)
        after_open = tgt_BT[:, -1:] == OPEN  # (B, 1)
        logits[..., A] += torch.where(after_open, 4.0, 0.0)
        logits[..., CLOSE] += torch.where(after_open, 0.0, 6.0)
        logits[..., OPEN] += torch.where(after_open, 0.0, 3.0)
        return logits


@pytest.mark.parametrize("search", [greedy_search, beam_search, sample])
def test_balanced_brackets_close_only_what_is_open_and_not_empty(search):
    model = FavoursBrackets(tiny_model(seed=4), boost=0.0)
    lengths = [6, 2, 4]
    src = random_batch(7, 3, 6, lengths=lengths)
    vocab = torch.arange(model.cfg.vocab_size)
    constraints = TreeConstraints(begins_word_V=vocab >= 10, opens_V=vocab == OPEN,
                                  closes_V=vocab == CLOSE)
    cfg = DecodeConfig(beam_size=3, n_best=3, max_length_offset=30)

    def violations(nbests):  # an output of n + 30 tokens, EOS the last, met its length limit
        return [bracket_violations(h.tokens, len(h.tokens) + 1 >= n + 30)
                for hyps, n in zip(nbests, lengths, strict=True) for h in hyps]

    assert any(violations(search(model, src, cfg))), \
        "without the constraint the outputs close what is not open"
    held = search(model, src, cfg, constraints)
    assert all(hyps for hyps in held) and not any(violations(held))
    assert any(CLOSE in h.tokens for hyps in held for h in hyps), "closes are still written"


def test_output_length_caps_by_offset_cap_and_factor():
    """Source lengths 4 and 10 (EOS counted): §6.1's length + 50, capped by max_length, and
    by Marian's max-length-factor: the length x the factor, rounded up, pieces and the end."""
    lengths = torch.tensor([4, 10])
    caps = lambda **kw: decoding.output_length_caps(lengths, DecodeConfig(**kw)).tolist()  # noqa: E731
    assert caps() == [54, 60]
    assert caps(max_length=20) == [20, 20]
    assert caps(max_length_factor=1.5) == [7, 16]
    assert caps(max_length_factor=1.45) == [7, 16]  # 5.8 and 14.5 pieces, rounded up
    assert caps(max_length_factor=1.5, max_length=12) == [7, 12]
    assert caps(max_length_factor=0.1, min_length=2) == [2, 2]
    with pytest.raises(ValueError, match="max_length_factor"):
        DecodeConfig(max_length_factor=-1)
