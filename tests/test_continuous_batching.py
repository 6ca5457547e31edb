"""Sentences joining a running beam search (continuous batching, what the server does): each
sentence's hypotheses are those of searching it alone, whenever it joins and whatever shares
its steps; the cache's per-row positions and masks equal a fresh cache's."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import random_batch, tiny_model
from transformer_mt import DecodeConfig, beam_search
from transformer_mt.inference.ensemble import Ensemble
from transformer_mt.inference.search import BeamSearch

BOS = 2


def alone(model, src_S, cfg):
    """The sentence's n-best, searched by itself."""
    return beam_search(model, src_S[None], cfg)[0]


def joined(model, sentences, cfg, schedule, drops=None):
    """Search `sentences`, sentence i joining before step schedule[i] (and with `drops`,
    dropped unfinished before step drops[i] where that is not None); their n-bests, None for
    those dropped before they finished."""
    search, results, step = BeamSearch(model, cfg), {}, 0
    pending = sorted(range(len(sentences)), key=lambda i: schedule[i])
    drops = drops or [None] * len(sentences)
    with torch.inference_mode():
        while pending or search:
            now = [i for i in pending if schedule[i] <= step] or ([] if search else pending[:1])
            if now:
                width = max(len(sentences[i]) for i in now)
                src = torch.zeros(len(now), width, dtype=torch.long)
                for row, i in enumerate(now):
                    src[row, : len(sentences[i])] = sentences[i]
                search.add(src, now)
                pending = [i for i in pending if i not in now]
            search.drop({i for i, at in enumerate(drops) if at is not None and at <= step})
            if search:
                results.update(search.step())
            step += 1
    return [results.get(i) for i in range(len(sentences))]


def assert_same(got, expected):
    assert [h.tokens for h in got] == [h.tokens for h in expected]
    assert [h.score for h in got] == pytest.approx([h.score for h in expected], abs=1e-5)


def sentences_of(seed, lengths):
    src = random_batch(seed, len(lengths), max(lengths), lengths=lengths)
    return [row[:n] for row, n in zip(src, lengths, strict=True)]


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(2, 9), min_size=1, max_size=6),
       starts=st.lists(st.integers(0, 12), min_size=6, max_size=6),
       beam=st.integers(1, 4), seed=st.integers(0, 1000))
def test_a_sentence_joining_at_any_step_gets_the_hypotheses_it_gets_alone(
        lengths, starts, beam, seed):
    model = tiny_model(seed=seed % 3, norm_first=bool(seed % 2))
    cfg = DecodeConfig(beam_size=beam, n_best=beam, max_length_offset=5)
    sentences = sentences_of(seed, lengths)
    got = joined(model, sentences, cfg, starts[: len(sentences)])
    for sentence, hyps in zip(sentences, got, strict=True):
        assert_same(hyps, alone(model, sentence, cfg))


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(2, 9), min_size=2, max_size=6),
       starts=st.lists(st.integers(0, 8), min_size=6, max_size=6),
       drops=st.lists(st.none() | st.integers(0, 12), min_size=6, max_size=6),
       beam=st.integers(1, 4), seed=st.integers(0, 1000))
def test_sentences_dropped_at_any_step_change_nothing_for_the_others(
        lengths, starts, drops, beam, seed):
    """What the server does when a client goes away: its sentences leave the search
    unfinished, before or after the first step, and the others get what they get alone."""
    model = tiny_model(seed=seed % 3, norm_first=bool(seed % 2))
    cfg = DecodeConfig(beam_size=beam, n_best=beam, max_length_offset=5)
    sentences = sentences_of(seed, lengths)
    drops = [None, *drops[1 : len(sentences)]]  # one at least stays
    got = joined(model, sentences, cfg, starts[: len(sentences)], drops)
    for sentence, hyps, drop in zip(sentences, got, drops, strict=True):
        if hyps is not None or drop is None:  # dropped after it finished: answered
            assert_same(hyps, alone(model, sentence, cfg))
    assert got[0] is not None


def test_joining_with_learned_positions_min_length_and_an_ensemble():
    sentences = sentences_of(3, [5, 3, 8, 2])
    cfg = DecodeConfig(beam_size=3, n_best=2, max_length_offset=6, min_length=3)
    models = [tiny_model(seed=1, positional="learned"),
              Ensemble([tiny_model(seed=1), tiny_model(seed=2)])]
    for model in models:
        got = joined(model, sentences, cfg, [0, 2, 3, 7])
        for sentence, hyps in zip(sentences, got, strict=True):
            assert all(len(h.tokens) + 1 >= 3 for h in hyps)
            assert_same(hyps, alone(model, sentence, cfg))


def test_a_merged_cache_decodes_as_fresh_caches_do():
    """Logits of rows that joined later, at their own positions and over their own keys,
    equal those of a cache that held them from the start."""
    model = tiny_model(seed=4)
    first, second = random_batch(0, 2, 6, lengths=[6, 4]), random_batch(1, 3, 8)
    steps_first, steps_second = random_batch(2, 2, 5), random_batch(3, 3, 3)
    steps_first[:, 0] = steps_second[:, 0] = BOS
    with torch.inference_mode():
        cache = model.new_cache(model.encode(first))
        for t in range(2):
            model.decode(steps_first[:, t : t + 1], None, cache)
        cache.merge(model.new_cache(model.encode(second)))
        assert cache.positions().tolist() == [2, 2, 0, 0, 0]
        both = torch.cat([model.decode(torch.cat([steps_first[:, t + 2 : t + 3],
                                                  steps_second[:, t : t + 1]]), None, cache)
                          for t in range(3)], dim=1)
        cache.keep_sources(torch.tensor([2, 3, 4]))  # the first two leave; then no row
        cache.drop_front(2)  # needs the first two positions
        assert cache.positions().tolist() == [3, 3, 3]
        fresh = model.new_cache(model.encode(second))
        alone_ = torch.cat([model.decode(steps_second[:, t : t + 1], None, fresh)
                            for t in range(3)], dim=1)
        reference_first = model.decode(steps_first, model.encode(first))
        next_token = torch.full((3, 1), 7)
        torch.testing.assert_close(model.decode(next_token, None, cache),
                                   model.decode(next_token, None, fresh), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(both[2:], alone_, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(both[:2], reference_first[:, 2:], atol=1e-5, rtol=1e-5)


def test_a_cache_that_rows_joined_refuses_several_positions_at_once():
    model = tiny_model()
    with torch.inference_mode():
        cache = model.new_cache(model.encode(random_batch(0, 1, 4)))
        model.decode(torch.tensor([[BOS]]), None, cache)
        cache.merge(model.new_cache(model.encode(random_batch(1, 1, 4))))
        with pytest.raises(ValueError, match="one position at a time"):
            model.decode(torch.tensor([[BOS, 5], [BOS, 6]]), None, cache)
