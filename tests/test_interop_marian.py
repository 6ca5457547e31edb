"""Hugging Face Marian (OPUS-MT) models in and out, with exact parity: tiny random `MarianMTModel`s
built here (no network) from `MarianConfig`, with SentencePiece models trained on the synthetic
corpus, are imported; logits equal Hugging Face's on padded batches, greedy and beam outputs are
token-identical to `generate`, and the text through our tokenisation is `MarianTokenizer`'s.
Damaged or unsupported inputs are refused naming the file and field. Out: our models export
to directories `MarianMTModel` loads, computing our logits and outputs, and import back
tensor for tensor."""

import dataclasses
import io
import json
import re
import shutil

import pytest
import sentencepiece as spm
import torch

from synthetic import TARGET_WORDS, sentences, translate
from transformer_mt import DecodeConfig, Translator
from transformer_mt.cli.main import main
from transformer_mt.inference.search import generate
from transformer_mt.interop.marian import ConversionError, export_marian, import_marian
from transformer_mt.storage.model_dir import load_model, save_model, unique_state_dict

transformers = pytest.importorskip("transformers", reason="the interop extra: "
                                   "pip install -e '.[interop]'")
from transformers import MarianConfig, MarianMTModel, MarianTokenizer  # noqa: E402

SOURCES = sentences(300, seed=11)
TARGETS = [translate(s) for s in SOURCES]


def train_spm(lines: list[str], size: int) -> bytes:
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buffer,
                                   vocab_size=size, model_type="unigram", minloglevel=2,
                                   hard_vocab_limit=False, bos_id=-1, eos_id=2, unk_id=1,
                                   pad_id=-1, unk_piece="<unk>", eos_piece="</s>")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def spm_files(tmp_path_factory):
    """source.spm, target.spm and a vocab.json over both, laid out as OPUS-MT's: </s> 0,
    <unk> 1, the pieces, a language code, <pad> last."""
    root = tmp_path_factory.mktemp("marian_spm")
    (root / "source.spm").write_bytes(train_spm(SOURCES, 60))
    (root / "target.spm").write_bytes(train_spm(TARGETS + TARGET_WORDS, 70))
    pieces = ["</s>", "<unk>"]
    for name in ("source.spm", "target.spm"):
        sp = spm.SentencePieceProcessor(model_file=str(root / name))
        pieces += [sp.id_to_piece(i) for i in range(sp.get_piece_size())
                   if sp.id_to_piece(i) not in pieces and not sp.is_control(i)
                   and not sp.is_unknown(i)]
    pieces += [">>deu<<", "<pad>"]
    (root / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}),
                                     encoding="utf-8")
    return root, len(pieces)


def marian_dir(spm_files, tmp_path, *, seed=0, activation="swish", tied=True, logits_bias=True,
               eos_bias=4.0, **config):
    """A tiny random MarianMTModel saved as Hugging Face does, with the vocabulary files."""
    root, vocab_size = spm_files
    torch.manual_seed(seed)
    cfg = MarianConfig(
        vocab_size=vocab_size, decoder_vocab_size=vocab_size, d_model=32, encoder_layers=2,
        decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=48, decoder_ffn_dim=48, activation_function=activation,
        max_position_embeddings=64, pad_token_id=vocab_size - 1, eos_token_id=0,
        decoder_start_token_id=vocab_size - 1, forced_eos_token_id=None,
        tie_word_embeddings=tied, share_encoder_decoder_embeddings=True, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, num_beams=3, max_length=40,
        bad_words_ids=[[vocab_size - 1]], **config)
    model = MarianMTModel(cfg).eval()
    with torch.no_grad():  # a random model whose outputs end: EOS made likely
        if logits_bias:
            model.final_logits_bias.normal_(0, 1)
        model.final_logits_bias[0, 0] += eos_bias
    out = tmp_path / f"hf-{seed}-{activation}-{tied}-{logits_bias}"
    model.save_pretrained(out)
    for name in ("source.spm", "target.spm", "vocab.json"):
        shutil.copyfile(root / name, out / name)
    (out / "tokenizer_config.json").write_text(json.dumps({"separate_vocabs": False}))
    return out, model


def hf_batch(tokenizer, texts):
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    return batch["input_ids"], batch["attention_mask"]


@pytest.mark.parametrize("activation, tied, logits_bias", [
    ("swish", True, True), ("relu", False, True), ("gelu", True, False)])
def test_imported_logits_equal_hugging_faces_on_padded_batches(spm_files, tmp_path, activation,
                                                               tied, logits_bias):
    hf_dir, hf = marian_dir(spm_files, tmp_path, activation=activation, tied=tied,
                            logits_bias=logits_bias)
    ours, _ = load_model(import_marian(hf_dir, tmp_path / "ours"))
    tokenizer = MarianTokenizer.from_pretrained(hf_dir)
    src, mask = hf_batch(tokenizer, SOURCES[:5])
    assert not bool(mask.all()), "the batch has padding"
    tgt = torch.randint(2, spm_files[1] - 2, (5, 7))
    tgt[:, 0] = hf.config.decoder_start_token_id
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        mine = ours(src, tgt)
    torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)


def test_greedy_and_beam_outputs_are_token_identical_to_generate(spm_files, tmp_path):
    hf_dir, hf = marian_dir(spm_files, tmp_path, seed=3)
    translator = Translator.from_dir(import_marian(hf_dir, tmp_path / "ours"))
    tokenizer = MarianTokenizer.from_pretrained(hf_dir)
    src, mask = hf_batch(tokenizer, SOURCES[:8])
    pad = hf.config.pad_token_id
    assert translator.model.cfg.pad_id == translator.model.cfg.bos_id == pad
    for beams, alpha in ((1, 1.0), (3, 1.0), (4, 0.6)):
        cfg = dataclasses.replace(translator.decode_cfg, beam_size=beams, length_penalty=alpha,
                                  strategy="beam" if beams > 1 else "greedy")
        with torch.no_grad():
            out = hf.generate(input_ids=src, attention_mask=mask, num_beams=beams,
                              length_penalty=alpha, early_stopping=True, do_sample=False,
                              max_length=40, output_scores=True, return_dict_in_generate=True)
        theirs = [[t for t in row.tolist()[1:] if t != pad] for row in out.sequences]
        assert all(row[-1] == 0 for row in theirs), "every HF output ended with EOS"
        mine = [hyps[0] for hyps in generate(translator.model, src, cfg)]
        assert [h.tokens + [0] for h in mine] == theirs, (beams, alpha)
        if beams > 1:
            assert [h.score for h in mine] == pytest.approx(out.sequences_scores.tolist(),
                                                            abs=1e-5)
        texts = [r[0].text for r in translator.translate_ids(
            [translator.encode_source(s, i) for i, s in enumerate(SOURCES[:8])], cfg)]
        assert texts == tokenizer.batch_decode(out.sequences, skip_special_tokens=True)


def test_our_tokenisation_is_marian_tokenizers(spm_files, tmp_path):
    hf_dir, _ = marian_dir(spm_files, tmp_path)
    translator = Translator.from_dir(import_marian(hf_dir, tmp_path / "ours"))
    tokenizer = MarianTokenizer.from_pretrained(hf_dir)
    texts = SOURCES[:20] + [">>deu<< dog runs .", "unknown wörds ✓", ""]
    for text in texts:
        assert translator.vocab.encode(text) + [0] == tokenizer(text)["input_ids"], text
    for target in TARGETS[:20]:
        ids = tokenizer(text_target=target)["input_ids"]
        assert translator.vocab.decode(ids) == tokenizer.decode(ids, skip_special_tokens=True)


def test_the_import_command_and_what_it_refuses(spm_files, tmp_path, capsys):
    hf_dir, _ = marian_dir(spm_files, tmp_path)
    assert main(["import", "marian", str(hf_dir), "--out", str(tmp_path / "m")]) == 0
    assert (tmp_path / "m" / "vocab.json").exists()
    config = json.loads((hf_dir / "config.json").read_text())

    def refused(edit, match, remove=None):
        broken = tmp_path / "broken"
        shutil.rmtree(broken, ignore_errors=True)
        shutil.copytree(hf_dir, broken)
        if remove:
            (broken / remove).unlink()
        (broken / "config.json").write_text(json.dumps({**config, **edit}))
        with pytest.raises(ConversionError, match=match):
            import_marian(broken, tmp_path / "out")
        assert not (tmp_path / "out").exists(), "nothing written"

    refused({}, "missing source.spm", remove="source.spm")
    refused({}, "missing model.safetensors or pytorch_model.bin", remove="model.safetensors")
    refused({"activation_function": "tanh"}, "activation_function='tanh'")
    refused({"vocab_size": config["vocab_size"] + 1, "decoder_vocab_size":
             config["vocab_size"] + 1}, "vocab.json: .* pieces, but config.json has vocab_size")
    refused({"normalize_before": True, "decoder_ffn_dim": 64},
            "decoder_ffn_dim.*normalize_before|encoder_ffn_dim.*normalize_before")
    refused({"decoder_vocab_size": 7}, "decoder_vocab_size=7 differs from vocab_size=.* without "
            "separate_vocabs")
    refused({"d_model": 48}, "model.safetensors: .*tensor")
    assert main(["import", "marian", str(tmp_path / "nowhere"), "--out",
                 str(tmp_path / "x")]) == 2
    assert "nowhere: not a directory" in capsys.readouterr().err


# --- out: our models as Hugging Face Marian directories -------------------------------------

@pytest.fixture(scope="module")
def our_vocab(tmp_path_factory):
    from transformer_mt import train_vocabulary

    path = tmp_path_factory.mktemp("our_vocab") / "sentencepiece.model"
    return train_vocabulary(SOURCES + TARGETS, vocab_size=60, out_path=path)


def our_model_dir(our_vocab, tmp_path, *, seed=0, eos_bias=3.0, **overrides):
    """A tiny random model of ours (eps 1e-5, as Marian's) whose outputs end: EOS made likely
    through the output bias."""
    from conftest import tiny_model

    fields = dict(layer_norm_eps=1e-5, vocab_size=len(our_vocab), output_bias=True)
    model = tiny_model(seed, **{**fields, **overrides})
    with torch.no_grad():  # Marian's initialisation: small logits, so the bias decides
        for weight in model.parameters():
            if weight.dim() > 1:
                weight.normal_(0, 0.02)
        if model.cfg.output_bias:
            model.generator.bias.normal_(0, 1)
            model.generator.bias[model.cfg.eos_id] += eos_bias
    out = tmp_path / f"ours-{seed}"
    decode = DecodeConfig(length_normalization="power", length_penalty=1.0, beam_size=3,
                          max_length=24)
    save_model(model, out, vocab_path=our_vocab.path, decode=decode)
    return out, model


@pytest.mark.parametrize("overrides", [
    {},  # the paper's interleaved positions, three-way tying, no attention bias
    {"sinusoid_layout": "split", "weight_tying": "none", "attention_bias": True,
     "activation": "silu"},
    {"weight_tying": "decoder", "output_bias": False, "activation": "gelu"},
    {"weight_tying": "embeddings", "scale_embeddings": False},
])
def test_export_to_marian_and_back_is_weight_identical_and_hf_computes_our_logits(
        our_vocab, tmp_path, overrides):
    ours_dir, ours = our_model_dir(our_vocab, tmp_path, **overrides)
    hf_dir = export_marian(ours_dir, tmp_path / "hf")
    hf = MarianMTModel.from_pretrained(hf_dir).eval()  # no custom code
    src, mask = hf_batch(MarianTokenizer.from_pretrained(hf_dir), SOURCES[:5])
    assert not bool(mask.all()), "the batch has padding"
    tgt = torch.randint(4, len(our_vocab), (5, 9))
    tgt[:, 0] = ours.cfg.bos_id
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        torch.testing.assert_close(theirs, ours(src, tgt), atol=1e-5, rtol=1e-5)
    back, decode = load_model(import_marian(hf_dir, tmp_path / "back"))
    assert back.cfg == ours.cfg and decode == load_model(ours_dir)[1]
    mine, again = unique_state_dict(ours), unique_state_dict(back)
    assert mine.keys() == again.keys()
    assert all(torch.equal(mine[k], again[k]) for k in mine), "weight-identical round trip"


def test_hf_generate_on_the_export_gives_our_outputs_and_text(trained_model, tmp_path):
    hf_dir = export_marian(trained_model, tmp_path / "hf")
    hf = MarianMTModel.from_pretrained(hf_dir).eval()
    tokenizer = MarianTokenizer.from_pretrained(hf_dir)
    translator = Translator.from_dir(trained_model)
    sources = sentences(16, seed=12)
    src, mask = hf_batch(tokenizer, sources)
    eos, cap, lengths = translator.model.cfg.eos_id, 30, set()
    for beams, alpha in ((1, 1.0), (3, 1.0), (4, 0.6)):
        cfg = dataclasses.replace(translator.decode_cfg, beam_size=beams, length_penalty=alpha,
                                  strategy="beam" if beams > 1 else "greedy",
                                  length_normalization="power", max_length=cap,
                                  max_length_offset=100)
        with torch.no_grad():  # forced EOS at the cap and pad banned: the export's settings
            out = hf.generate(input_ids=src, attention_mask=mask, num_beams=beams,
                              length_penalty=alpha, max_length=cap + 1, output_scores=True,
                              return_dict_in_generate=True)
        theirs = [row.tolist()[1:] for row in out.sequences]
        theirs = [row[: row.index(eos) + 1] for row in theirs]  # finished rows are padded
        mine = [hyps[0] for hyps in generate(translator.model, src, cfg)]
        ended = [i for i, h in enumerate(mine) if len(h.tokens) + 1 < cap]
        # at the cap HF scores the forced EOS log 1, we (as fairseq) its log-probability, so
        # beams that reach it may rank differently: tokens and scores of the rest are equal
        compared = range(len(mine)) if beams == 1 else ended
        assert [mine[i].tokens + [eos] for i in compared] == [theirs[i] for i in compared]
        if beams > 1:
            assert [mine[i].score for i in ended] == pytest.approx(
                [out.sequences_scores[i].item() for i in ended], abs=1e-5)
        texts = [r[0].text for r in translator.translate_ids(
            [translator.encode_source(s, i) for i, s in enumerate(sources)], cfg)]
        assert [texts[i] for i in compared] == [tokenizer.decode(
            out.sequences[i], skip_special_tokens=True) for i in compared]
        assert len(ended) >= 12
        lengths |= {len(theirs[i]) for i in ended}
    assert len(lengths) > 3, "outputs of several lengths"


def test_an_imported_opus_mt_model_exports_to_the_tensors_it_came_from(spm_files, tmp_path):
    hf_dir, hf = marian_dir(spm_files, tmp_path, tied=False)
    again = export_marian(import_marian(hf_dir, tmp_path / "ours"), tmp_path / "again")
    original = {k: v for k, v in hf.state_dict().items() if "embed_positions" not in k}
    exported = MarianMTModel.from_pretrained(again).state_dict()
    # untied, Hugging Face 5 keeps three matrices: model.shared is then an unused fourth
    assert original.keys() - exported.keys() <= {"model.shared.weight"}
    assert all(torch.equal(original[k], exported[k]) for k in exported.keys() & original.keys())
    for name in ("source.spm", "target.spm", "vocab.json"):
        assert (again / name).read_bytes() == (hf_dir / name).read_bytes()


def test_the_export_command_and_what_marian_cannot_carry(our_vocab, tmp_path, capsys):
    ours_dir, _ = our_model_dir(our_vocab, tmp_path)
    assert main(["export", "marian", str(ours_dir), "--out", str(tmp_path / "hf")]) == 0
    assert MarianMTModel.from_pretrained(tmp_path / "hf") is not None
    for overrides, match in (
            ({"norm_first": True, "positional": "learned", "layer_norm_eps": 1e-6},
             "norm_first=True.*positional=learned.*layer_norm_eps=1e-06"),
            ({"sinusoid_layout": "concat"}, "sinusoid_layout=concat"),
            ({"d_k": 4}, "d_k=4")):
        bad_dir, _ = our_model_dir(our_vocab, tmp_path / str(len(match)), **overrides)
        assert main(["export", "marian", str(bad_dir), "--out", str(tmp_path / "no")]) == 2
        assert re.search(match, capsys.readouterr().err)
        assert not (tmp_path / "no").exists(), "nothing written"


# --- separate source and target vocabularies ---------------------------------------------------

@pytest.fixture(scope="module")
def separate_dir(spm_files, tmp_path_factory):
    """A tiny random MarianMTModel with separate vocabularies: vocab.json of the source
    pieces, target_vocab.json of the target pieces (</s> 0, <unk> 1, <pad> 2 in both),
    untied source and target embeddings, as OPUS-MT's separate-vocabulary models are."""
    root, _ = spm_files
    out = tmp_path_factory.mktemp("separate")
    maps = []
    for name in ("source.spm", "target.spm"):
        sp = spm.SentencePieceProcessor(model_file=str(root / name))
        pieces = ["</s>", "<unk>", "<pad>"] + [
            sp.id_to_piece(i) for i in range(sp.get_piece_size())
            if not sp.is_control(i) and not sp.is_unknown(i)]
        maps.append({p: i for i, p in enumerate(dict.fromkeys(pieces))})
        shutil.copyfile(root / name, out / name)
    (out / "vocab.json").write_text(json.dumps(maps[0]), encoding="utf-8")
    (out / "target_vocab.json").write_text(json.dumps(maps[1]), encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps({"separate_vocabs": True}))
    torch.manual_seed(7)
    cfg = MarianConfig(
        vocab_size=len(maps[0]), decoder_vocab_size=len(maps[1]), d_model=32, encoder_layers=2,
        decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=64, pad_token_id=2,
        eos_token_id=0, decoder_start_token_id=2, forced_eos_token_id=None,
        share_encoder_decoder_embeddings=False, tie_word_embeddings=True, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, num_beams=3, max_length=40,
        bad_words_ids=[[2]])
    assert cfg.vocab_size != cfg.decoder_vocab_size
    model = MarianMTModel(cfg).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 1)
        model.final_logits_bias[0, 0] += 4.0
    model.save_pretrained(out)
    return out, model


def test_separate_vocabularies_import_with_parity(separate_dir, tmp_path):
    hf_dir, hf = separate_dir
    translator = Translator.from_dir(import_marian(hf_dir, tmp_path / "ours"))
    cfg = translator.model.cfg
    assert (cfg.vocab_size, cfg.tgt_vocab_size) == (hf.config.vocab_size,
                                                     hf.config.decoder_vocab_size)
    tokenizer = MarianTokenizer.from_pretrained(hf_dir)
    src, mask = hf_batch(tokenizer, SOURCES[:6])
    tgt = torch.randint(3, cfg.tgt_vocab_size, (6, 7))
    tgt[:, 0] = 2
    with torch.no_grad():
        torch.testing.assert_close(translator.model(src, tgt), hf(
            input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits, atol=1e-5,
            rtol=1e-5)
        out = hf.generate(input_ids=src, attention_mask=mask, num_beams=3, length_penalty=1.0,
                          early_stopping=True, max_length=40)
    theirs = [row.tolist()[1:] for row in out]
    theirs = [row[: row.index(0) + 1] for row in theirs]
    decode = dataclasses.replace(translator.decode_cfg, beam_size=3, length_penalty=1.0)
    mine = [h[0].tokens + [0] for h in generate(translator.model, src, decode)]
    assert mine == theirs
    texts = [r[0].text for r in translator.translate_ids(
        [translator.encode_source(s, i) for i, s in enumerate(SOURCES[:6])], decode)]
    assert texts == tokenizer.batch_decode(out, skip_special_tokens=True)
    for target in TARGETS[:10]:  # the target side's ids, by target.spm and target_vocab.json
        assert translator.vocab.encode_target(target) + [0] == \
            tokenizer(text_target=target)["input_ids"]


def test_separate_vocabularies_export_back_and_to_ctranslate2(separate_dir, tmp_path):
    hf_dir, hf = separate_dir
    ours_dir = import_marian(hf_dir, tmp_path / "ours")
    again = export_marian(ours_dir, tmp_path / "again")
    assert (again / "target_vocab.json").read_bytes() == (hf_dir / "target_vocab.json").read_bytes()
    exported = MarianMTModel.from_pretrained(again).state_dict()
    original = hf.state_dict()
    assert all(torch.equal(original[k], exported[k]) for k in exported.keys() & original.keys()
               if "embed_positions" not in k)
    ctranslate2 = pytest.importorskip("ctranslate2")
    del ctranslate2
    from transformer_mt.interop.ct2 import CTranslate2Translator, export_ctranslate2

    ours = Translator.from_dir(ours_dir)
    ct2 = CTranslate2Translator.from_dirs([export_ctranslate2(ours_dir, tmp_path / "ct2")])
    cfg = dataclasses.replace(ours.decode_cfg, beam_size=3, length_penalty=1.0)
    sources = [ours.encode_source(s, i) for i, s in enumerate(SOURCES[:10])]
    assert [n[0].text for n in ct2.translate_ids(sources, cfg)] == \
        [n[0].text for n in ours.translate_ids(sources, cfg)]
