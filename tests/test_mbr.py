import math
import random

import pytest
import torch
from sacrebleu.metrics import BLEU

from rerank.mbr import expected_utilities, main, mbr_order  # examples/ (conftest.py)
from transformer_mt import DecodeConfig, ModelConfig, Transformer, Translator
from transformer_mt.config import ConfigError, load_config


def test_expected_utility_of_disjoint_candidates_is_each_ones_own_weight():
    # chrF of texts without a common character is 0, of a text with itself 100: E[u(h)] is
    # 100 p(h), with p the softmax of the scores: here 1/4 and 3/4
    gains = expected_utilities(["aaa bbb", "xyz qrs"], [0.0, math.log(3)], "chrf")
    assert gains == pytest.approx([25.0, 75.0])


def test_consensus_beats_the_beam_first_unless_the_model_is_sure_of_it():
    texts = ["a cat is lying on the sofa .",
             "a dog is sitting on the green grass .",
             "a dog is sitting on the grass .",
             "the dog is sitting on the green grass ."]
    flat = [-1.0, -1.1, -1.2, -1.3]  # the beam ranks the outlier first, by a little
    assert mbr_order(texts, flat, "bleu")[0] == 1
    assert mbr_order(texts, flat, "chrf")[0] == 1
    assert mbr_order(texts, [0.0, -30.0, -30.0, -30.0], "bleu")[0] == 0
    # one candidate, or identical ones: the beam's order stands
    assert mbr_order(texts[:1], [-2.0], "bleu") == [0]
    assert mbr_order(["a b c"] * 3, [-1.0, -2.0, -3.0], "bleu") == [0, 1, 2]


def test_expected_bleu_is_the_weighted_mean_of_sentence_bleu():
    texts = ["a man rides a bike", "a man is riding a bike", "a woman rides a red bike"]
    scores = [-0.5, -0.9, -2.0]
    weights = [math.exp(s) / sum(math.exp(t) for t in scores) for s in scores]
    bleu = BLEU(effective_order=True)
    for h, gain in zip(texts, expected_utilities(texts, scores, "bleu"), strict=True):
        assert gain == pytest.approx(sum(w * bleu.sentence_score(h, [c]).score
                                         for c, w in zip(texts, weights, strict=True)))


def test_the_choice_does_not_depend_on_the_candidates_order():
    rng = random.Random(0)
    words = "a the man woman dog runs sits on in grass park red big".split()
    for _ in range(20):
        texts = list({" ".join(rng.choices(words, k=rng.randint(3, 8))) for _ in range(5)})
        scores = [rng.uniform(-5, 0) for _ in texts]
        best = texts[mbr_order(texts, scores, "bleu")[0]]
        perm = rng.sample(range(len(texts)), len(texts))
        shuffled = mbr_order([texts[i] for i in perm], [scores[i] for i in perm], "bleu")
        assert texts[perm[shuffled[0]]] == best


def test_unknown_utility_is_an_error_and_the_core_points_to_the_example():
    with pytest.raises(ValueError, match="unknown MBR utility 'ter'"):
        expected_utilities(["a"], [0.0], "ter")
    with pytest.raises(ConfigError, match="decode.mbr' was retired .*examples/rerank/"):
        load_config("tiny", ["decode.mbr=bleu"])


def test_mbr_reranks_the_whole_beam_by_expected_utility(corpus_vocab, tmp_path):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=len(corpus_vocab), d_model=32, n_heads=4, d_ff=64,
                      n_encoder_layers=2, n_decoder_layers=2, dropout=0.0)
    translator = Translator(Transformer(cfg), corpus_vocab,
                            DecodeConfig(beam_size=4, n_best=4, max_length_offset=6))
    sentences = ["Two dogs run in the grass.", "A man in a red hat.", "People sit."]
    beams = translator.translate_nbest(sentences)
    nbest = tmp_path / "test.nbest"  # as translate --n-best 4 writes it
    nbest.write_text("".join(f"{i}\t{t.score:.4f}\t{t.text}\n"
                             for i, beam in enumerate(beams) for t in beam), encoding="utf-8")
    assert main(["--nbest", str(nbest), "--utility", "bleu", "--output",
                 str(tmp_path / "mbr.txt")]) == 0
    chosen = (tmp_path / "mbr.txt").read_text(encoding="utf-8").splitlines()
    for beam, first in zip(beams, chosen, strict=True):
        gains = expected_utilities([t.text for t in beam], [round(t.score, 4) for t in beam],
                                   "bleu")
        assert first == beam[max(range(len(beam)), key=lambda i: (gains[i], -i))].text
