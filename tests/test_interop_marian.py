"""Hugging Face Marian (OPUS-MT) models in, with exact parity: tiny random `MarianMTModel`s
built here (no network) from `MarianConfig`, with SentencePiece models trained on the synthetic
corpus, are imported; logits equal Hugging Face's on padded batches, greedy and beam outputs are
token-identical to `generate`, and the text through our tokenisation is `MarianTokenizer`'s.
Damaged or unsupported inputs are refused naming the file and field."""

import dataclasses
import io
import json
import shutil

import pytest
import sentencepiece as spm
import torch

from synthetic import TARGET_WORDS, sentences, translate
from transformer_mt import Translator
from transformer_mt.cli.main import main
from transformer_mt.inference.search import generate
from transformer_mt.interop.marian import ConversionError, import_marian
from transformer_mt.storage.model_dir import load_model

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
    refused({"share_encoder_decoder_embeddings": False}, "separate source and target")
    refused({"d_model": 48}, "model.safetensors: .*tensor")
    assert main(["import", "marian", str(tmp_path / "nowhere"), "--out",
                 str(tmp_path / "x")]) == 2
    assert "nowhere: not a directory" in capsys.readouterr().err
