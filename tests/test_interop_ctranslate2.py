"""CTranslate2 out, and as an engine: an export's log-probabilities equal ours (post-norm and
pre-norm, every position layout and learned positions, biases, activations, tyings); through
`CTranslate2Translator`, greedy and beam outputs (GNMT and |Y|^alpha, n-best, the
per-sentence length cap, min_length with greedy, the presets' alphas) are token-identical to
ours but for near ties, scores within 1e-3 a token (two float32 implementations; CTranslate2
renormalises around the banned padding, we do not); int8 stays close; the CLI's `export
ctranslate2` and `translate/serve --engine ctranslate2` give our outputs."""

import dataclasses
import json

import pytest
import torch

from conftest import tiny_model
from serving_helpers import http, running_server
from synthetic import sentences
from transformer_mt import DecodeConfig, Translator
from transformer_mt.cli.main import main
from transformer_mt.interop import ConversionError
from transformer_mt.interop.ct2 import CTranslate2Translator, export_ctranslate2
from transformer_mt.storage.model_dir import save_model

ctranslate2 = pytest.importorskip("ctranslate2", reason="the interop extra: "
                                  "pip install -e '.[interop]'")

SOURCES = sentences(40, seed=21)


def log_probs_agree(ours: Translator, ct2: CTranslate2Translator, pairs) -> float:
    """The largest |difference| of per-token log-probabilities (EOS included) of reference
    targets, ours against CTranslate2's score_batch."""
    worst = 0.0
    for source, target in pairs:
        src = ours.encode_source(source, 0)
        tgt = ours.vocab.encode(target) + [ours.model.cfg.eos_id]
        theirs = ct2.engine.score_batch([[ct2.source_pieces[t] for t in src]],
                                        [[ct2.pieces[t] for t in tgt[:-1]]])[0].log_probs
        with torch.no_grad():
            prev = torch.tensor([[ours.model.cfg.bos_id, *tgt[:-1]]])
            logp = ours.model(torch.tensor([src]), prev).log_softmax(-1)[0]
        mine = logp.gather(1, torch.tensor(tgt)[:, None]).squeeze(1)
        worst = max(worst, (mine - torch.tensor(theirs)).abs().max().item())
    return worst


@pytest.mark.parametrize("overrides", [
    {},  # the paper's: post-norm, interleaved sinusoids, three-way tying, no biases
    {"norm_first": True, "positional": "learned", "activation": "gelu"},
    {"sinusoid_layout": "concat", "attention_bias": True, "output_bias": True,
     "weight_tying": "none", "activation": "silu", "layer_norm_eps": 1e-5},
    {"sinusoid_layout": "split", "scale_embeddings": False, "weight_tying": "decoder"},
])
def test_the_export_computes_our_log_probabilities(corpus_vocab, tmp_path, overrides):
    model = tiny_model(3, vocab_size=len(corpus_vocab), **overrides)
    with torch.no_grad():  # biases and learned positions that are not zero or default
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "learned_positions" in name:
                p.normal_(0, 0.5)
    save_model(model, tmp_path / "ours", vocab_path=corpus_vocab.path)
    ct2 = CTranslate2Translator.from_dirs([export_ctranslate2(tmp_path / "ours",
                                                              tmp_path / "ct2")])
    pairs = list(zip(SOURCES[:6], sentences(6, seed=22), strict=True))
    assert log_probs_agree(Translator.from_dir(tmp_path / "ours"), ct2, pairs) < 1e-5


DECODINGS = [
    dict(strategy="greedy"),
    dict(),  # the paper's: beam 4, GNMT alpha 0.6
    dict(length_penalty=0.0),  # the presets' alphas: none, 1.0 (tatoeba), 1.2 (multi30k)
    dict(length_penalty=1.0),
    dict(length_penalty=1.2),
    dict(beam_size=5, n_best=3, length_normalization="power", length_penalty=1.0),
    # beam search with min_length differs: CTranslate2 renormalises the distribution without
    # EOS (beams where EOS was likely gain), we (as fairseq and Hugging Face) do not
    dict(strategy="greedy", min_length=6),
    dict(beam_size=4, max_length=5),  # most outputs reach the cap: EOS forced as ours
    dict(strategy="greedy", max_length=4),
]
# Per output token, how far the engines' log-probabilities may be apart: two float32
# implementations of the same function (other kernels, other summation orders, CPU by CPU:
# 0.006-0.008 over a sentence on a Zen 3) plus CTranslate2's renormalisation around the banned
# padding (-log(1 - P(pad)), about 0 for a trained model). Where two outputs' scores are
# closer than that, either engine may pick either: a near tie, not a difference of search.
PER_TOKEN = 1e-3


def scored(ours: Translator, source: list[int], tokens: tuple[int, ...], cfg) -> float:
    """Our model's ranking score of `tokens` (+ EOS) for `source`, by forced decoding."""
    from transformer_mt.inference.search import length_norm

    eos, bos = ours.model.cfg.eos_id, ours.model.cfg.bos_id
    with torch.no_grad():
        logp = ours.model(torch.tensor([source]), torch.tensor([[bos, *tokens]])).log_softmax(-1)
    lp = float(logp[0].gather(1, torch.tensor([*tokens, eos])[:, None]).sum())
    return lp / float(length_norm(len(tokens) + 1, cfg))


def test_ctranslate2_keeps_what_our_ranking_would_keep():
    """Where more than beam_size hypotheses have finished by CTranslate2's last step it keeps
    the beam_size best by log P / |Y|^p before we rank them (on Multi30k at the multi30k
    preset's alpha 1.2 with p = alpha, 5 outputs in 1,000 were longer than ours; at alpha 0
    with p = 1, 34): p ranks as our length normalisation does."""
    import math

    import numpy as np

    from transformer_mt.interop.ct2 import NO_PENALTY, ct2_length_penalty

    for norm in ("gnmt", "power"):  # no penalty: log P's order, without CTranslate2's early
        cfg = DecodeConfig(length_penalty=0.0, length_normalization=norm)  # exit at p = 0
        p = ct2_length_penalty(cfg, 12)
        assert p == NO_PENALTY > 0
        assert all(np.float32(length) ** np.float32(p) == 1 for length in range(1, 1025))
    assert ct2_length_penalty(DecodeConfig(length_penalty=1.2, length_normalization="power"),
                              12) == 1.2
    # GNMT's ((5 + |Y|) / 6)^alpha: for outputs within 30 % of the batch's source length L,
    # |Y|^p's ratio of any two lengths is GNMT's within 2.05 % x alpha: their order differs
    # only for scores closer than that
    for alpha in (0.6, 1.0, 1.2, 2.0):
        for length in range(3, 200):
            p = ct2_length_penalty(DecodeConfig(length_penalty=alpha), length)
            lengths = range(max(1, round(0.7 * length)), round(1.3 * length) + 1)
            worst = max(abs(p * math.log(b / a) - alpha * math.log((5 + b) / (5 + a)))
                        for a in lengths for b in lengths)
            assert worst <= 0.0205 * alpha, (alpha, length, worst)


def at_cap(translation, source: list[int], cfg: DecodeConfig) -> bool:
    """Whether a translation of `source` (its ids + EOS) holds as many tokens, EOS included,
    as its length cap allows."""
    from transformer_mt.inference.search import max_output_lengths

    return len(translation.tokens) + 1 >= int(max_output_lengths(torch.tensor([source]), 0, cfg))


@pytest.mark.parametrize("decoding", DECODINGS, ids=[str(d) for d in DECODINGS])
def test_ctranslate2_decodes_what_we_decode(trained_model, tmp_path, decoding):
    ours = Translator.from_dir(trained_model)
    ct2 = CTranslate2Translator.from_dirs([export_ctranslate2(trained_model, tmp_path / "c")])
    cfg = dataclasses.replace(ours.decode_cfg, batch_size=16, **decoding)
    sources = [ours.encode_source(s, i) for i, s in enumerate(SOURCES)]
    mine, theirs = ours.translate_ids(sources, cfg), ct2.translate_ids(sources, cfg)
    same = 0
    for source, a, b in zip(sources, mine, theirs, strict=True):
        if [t.tokens for t in a] == [t.tokens for t in b]:
            same += 1
            if not cfg.min_length:  # CTranslate2 renormalises around EOS too: not compared
                tol = [PER_TOKEN * (len(t.tokens) + 1) for t in a]
                assert all(abs(x.score - y.score) <= t for x, y, t in
                           zip(a, b, tol, strict=True)), ([x.score for x in a],
                                                          [y.score for y in b])
                assert all(abs(x.log_prob - y.log_prob) <= t for x, y, t in
                           zip(a, b, tol, strict=True))
        elif not at_cap(a[0], source, cfg) and not at_cap(b[0], source, cfg):
            # a near tie of the two best, by our model's own scores of both
            x, y = (scored(ours, source, n[0].tokens, cfg) for n in (a, b))
            assert abs(x - y) <= PER_TOKEN * (max(len(a[0].tokens), len(b[0].tokens)) + 1), \
                (a[0].text, x, b[0].text, y)
        # else one of them is at the length cap, where every live beam finishes at once and
        # CTranslate2 keeps beam_size of them ranked without the EOS our search forces there
        # (docs/interop.md); seen on a Zen 4 at beam 4, max_length 5: 1 sentence in 40
    assert same >= 0.95 * len(sources), f"{same} of {len(sources)} identical"  # 40 on a Xeon
    if cfg.max_length:
        assert sum(len(ours.vocab.encode(n[0].text)) + 1 == cfg.max_length
                   for n in mine) >= 10, "the cap is reached"


def test_workers_are_ctranslate2s_parallel_translators(trained_model, tmp_path):
    ct2_dir = export_ctranslate2(trained_model, tmp_path / "c")
    one = CTranslate2Translator.from_dirs([ct2_dir], batch_size=4)
    two = CTranslate2Translator.from_dirs([ct2_dir], batch_size=4, workers=2)
    assert (one.engine.num_translators, two.engine.num_translators) == (1, 2)
    assert two.translate(SOURCES) == one.translate(SOURCES)


def test_int8_export_is_smaller_and_close(trained_model, tmp_path):
    fp32 = export_ctranslate2(trained_model, tmp_path / "fp32")
    int8 = export_ctranslate2(trained_model, tmp_path / "int8", quantization="int8")
    assert (int8 / "model.bin").stat().st_size < 0.5 * (fp32 / "model.bin").stat().st_size
    a = CTranslate2Translator.from_dirs([fp32]).translate(SOURCES)
    b = CTranslate2Translator.from_dirs([int8]).translate(SOURCES)
    assert sum(x == y for x, y in zip(a, b, strict=True)) >= 0.7 * len(SOURCES)
    assert json.loads((int8 / "transformer_mt.json").read_text())["quantization"] == "int8"


def test_the_cli_exports_and_translates_with_either_engine(trained_model, tmp_path, capsys):
    lines = [*SOURCES[:6], "", "  ", *SOURCES[6:12]]  # blank lines: blank outputs, undecoded
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["export", "ctranslate2", str(trained_model), "--out", str(tmp_path / "c")]) == 0
    outputs = []
    for engine, model in (("torch", trained_model), ("ctranslate2", tmp_path / "c")):
        out = tmp_path / f"{engine}.txt"
        assert main(["translate", "--model", str(model), "--engine", engine, "--input",
                     str(tmp_path / "in.txt"), "--output", str(out), "--beam-size", "3"]) == 0
        outputs.append(out.read_text(encoding="utf-8"))
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 14
    assert [i for i, line in enumerate(outputs[1].splitlines()) if not line] == [6, 7]
    capsys.readouterr()
    assert main(["translate", "--model", str(trained_model), "--engine", "ctranslate2",
                 "--input", str(tmp_path / "in.txt")]) == 2
    assert "transformer_mt.json" in capsys.readouterr().err
    assert main(["export", "ctranslate2", str(trained_model), "--out", str(tmp_path / "q"),
                 "--quantization", "int4"]) == 2
    assert "quantization='int4'" in capsys.readouterr().err


def test_what_ctranslate2_cannot_carry_or_decode(corpus_vocab, tmp_path, trained_model):
    save_model(tiny_model(vocab_size=len(corpus_vocab), d_k=4), tmp_path / "dk",
               vocab_path=corpus_vocab.path)
    with pytest.raises(ConversionError, match="d_k=4"):
        export_ctranslate2(tmp_path / "dk", tmp_path / "no")
    assert not (tmp_path / "no").exists()
    ct2_dir = export_ctranslate2(trained_model, tmp_path / "c")
    with pytest.raises(ValueError, match="beam_stop=bound"):
        CTranslate2Translator.from_dirs([ct2_dir], beam_stop="bound")
    with pytest.raises(ValueError, match="not an ensemble"):
        CTranslate2Translator.from_dirs([ct2_dir, ct2_dir])


def test_serve_with_the_ctranslate2_engine_answers_as_our_engine(trained_model, tmp_path):
    pytest.importorskip("fastapi", reason="the serve extra")
    ct2_dir = export_ctranslate2(trained_model, tmp_path / "c")
    expected = Translator.from_dir(trained_model).translate(SOURCES[:5])
    with running_server(ct2_dir, "--engine", "ctranslate2") as (base, _):
        status, body = http("POST", base + "/v1/translate", {"text": SOURCES[:5]})
        assert status == 200
        assert [t["text"] for t in body["translations"]] == expected
        status, info = http("GET", base + "/v1/models")
        assert status == 200 and info["model"]["d_model"] == 64
        # the model's settings, with serve's defaults: per-row int8 scales (used only with
        # --int8) and a 512-token output cap
        assert DecodeConfig(**info["decode"]) == dataclasses.replace(
            Translator.from_dir(trained_model).decode_cfg, int8_scales="row", max_length=512)
