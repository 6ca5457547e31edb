"""CTranslate2 out, and as an engine: an export's log-probabilities equal ours (post-norm and
pre-norm, every position layout and learned positions, biases, activations, tyings); through
`CTranslate2Translator`, greedy and beam outputs (GNMT and |Y|^alpha, n-best, the
per-sentence length cap, min_length with greedy) are token-identical to ours, scores within
5e-3 (CTranslate2 renormalises around the banned padding; we do not); int8 stays close; the
CLI's `export ctranslate2` and `translate/serve --engine ctranslate2` give our outputs."""

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
    dict(beam_size=5, n_best=3, length_normalization="power", length_penalty=1.0),
    # beam search with min_length differs: CTranslate2 renormalises the distribution without
    # EOS (beams where EOS was likely gain), we (as fairseq and Hugging Face) do not
    dict(strategy="greedy", min_length=6),
    dict(beam_size=4, max_length=5),  # most outputs reach the cap: EOS forced as ours
    dict(strategy="greedy", max_length=4),
]


@pytest.mark.parametrize("decoding", DECODINGS, ids=[str(d) for d in DECODINGS])
def test_ctranslate2_decodes_what_we_decode(trained_model, tmp_path, decoding):
    ours = Translator.from_dir(trained_model)
    ct2 = CTranslate2Translator.from_dirs([export_ctranslate2(trained_model, tmp_path / "c")])
    cfg = dataclasses.replace(ours.decode_cfg, batch_size=16, **decoding)
    sources = [ours.encode_source(s, i) for i, s in enumerate(SOURCES)]
    mine, theirs = ours.translate_ids(sources, cfg), ct2.translate_ids(sources, cfg)
    assert [[t.text for t in n] for n in theirs] == [[t.text for t in n] for n in mine]
    for a, b in zip(mine, theirs, strict=True) if not cfg.min_length else ():
        # CTranslate2 renormalises around padding (and EOS under min_length: not compared)
        assert [t.score for t in b] == pytest.approx([t.score for t in a], abs=5e-3)
        assert [t.log_prob for t in b] == pytest.approx([t.log_prob for t in a], abs=5e-3)
    if cfg.max_length:
        assert sum(len(ours.vocab.encode(n[0].text)) + 1 == cfg.max_length
                   for n in mine) >= 10, "the cap is reached"


def test_int8_export_is_smaller_and_close(trained_model, tmp_path):
    fp32 = export_ctranslate2(trained_model, tmp_path / "fp32")
    int8 = export_ctranslate2(trained_model, tmp_path / "int8", quantization="int8")
    assert (int8 / "model.bin").stat().st_size < 0.5 * (fp32 / "model.bin").stat().st_size
    a = CTranslate2Translator.from_dirs([fp32]).translate(SOURCES)
    b = CTranslate2Translator.from_dirs([int8]).translate(SOURCES)
    assert sum(x == y for x, y in zip(a, b, strict=True)) >= 0.7 * len(SOURCES)
    assert json.loads((int8 / "transformer_mt.json").read_text())["quantization"] == "int8"


def test_the_cli_exports_and_translates_with_either_engine(trained_model, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("\n".join(SOURCES[:12]) + "\n", encoding="utf-8")
    assert main(["export", "ctranslate2", str(trained_model), "--out", str(tmp_path / "c")]) == 0
    outputs = []
    for engine, model in (("torch", trained_model), ("ctranslate2", tmp_path / "c")):
        out = tmp_path / f"{engine}.txt"
        assert main(["translate", "--model", str(model), "--engine", engine, "--input",
                     str(tmp_path / "in.txt"), "--output", str(out), "--beam-size", "3"]) == 0
        outputs.append(out.read_text(encoding="utf-8"))
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 12
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
        # the model's settings, with the server's per-row int8 scales (used only with --int8)
        assert DecodeConfig(**info["decode"]) == dataclasses.replace(
            Translator.from_dir(trained_model).decode_cfg, int8_scales="row")
