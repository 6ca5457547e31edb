"""Marian's own model directories in (interop/marian_npz.py), against Marian itself: the
fixture in tests/data/marian was trained and decoded by Marian 1.12.42
(benchmarks/compat/marian_fixture.sh), so these tests need no Marian installed."""

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO
from transformer_mt import Translator
from transformer_mt.interop import ConversionError
from transformer_mt.interop.marian import import_marian
from transformer_mt.storage.model_dir import load_model

FIXTURE = Path(__file__).parent / "data" / "marian"


# Marian's n-best reader, the compat script's (benchmarks/compat/compare_outputs.py)
_spec = importlib.util.spec_from_file_location(
    "compare_outputs", REPO / "benchmarks" / "compat" / "compare_outputs.py")
compare_outputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_outputs)
marian_nbest = compare_outputs.marian_nbest


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    return import_marian(FIXTURE, tmp_path_factory.mktemp("m") / "ours")


def test_marian_config_and_decoding_settings_are_carried(imported):
    model, decode = load_model(imported)
    cfg = model.cfg
    assert (cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.n_encoder_layers, cfg.n_decoder_layers) == \
        (32, 4, 64, 2, 2)
    assert (cfg.sinusoid_layout, cfg.layer_norm_eps, cfg.activation, cfg.norm_first) == \
        ("concat", 1e-6, "silu", False)
    # Marian's 48 pieces and a <pad> from which decoding starts (a zero embedding)
    assert (cfg.vocab_size, cfg.pad_id, cfg.bos_id, cfg.eos_id) == (49, 48, 48, 0)
    assert not model.src_embed.tokens.weight[48].any()
    assert (decode.beam_size, decode.length_normalization, decode.length_penalty,
            decode.beam_stop, decode.max_length_factor) == (4, "power", 0.6, "shrink", 3.0)


@pytest.mark.parametrize(("marian_file", "factor"), [("nbest.txt", 3.0),
                                                    ("nbest-cap.txt", 0.5)])
def test_beam_n_best_lists_and_scores_equal_marians(imported, marian_file, factor):
    """Every sentence's 4-best list, in order, and each score within 1e-3 of Marian's (which
    prints 6 significant digits); at --max-length-factor 0.5 too, where most hypotheses end at
    Marian's length cap: with their last piece, no EOS, scored without it."""
    expected = marian_nbest(FIXTURE / marian_file)
    sources = (FIXTURE / "test.src").read_text(encoding="utf-8").splitlines()
    translator = Translator.from_dir(imported, n_best=4, batch_size=1,
                                     max_length_factor=factor)
    ours = translator.translate_nbest(sources)
    assert len(ours) == len(expected) == 50
    for i, (theirs, mine) in enumerate(zip(expected, ours, strict=True)):
        assert [t.text for t in mine] == [text for text, _ in theirs], i
        np.testing.assert_allclose([t.score for t in mine], [s for _, s in theirs], atol=1e-3,
                                   err_msg=str(i))


def test_greedy_outputs_equal_marians(imported):
    sources = (FIXTURE / "test.src").read_text(encoding="utf-8").splitlines()
    translator = Translator.from_dir(imported, strategy="greedy", batch_size=1)
    assert translator.translate(sources) == \
        (FIXTURE / "greedy.txt").read_text(encoding="utf-8").splitlines()


def test_the_shrinking_beam_is_what_makes_the_lists_equal(imported):
    """With fairseq's rule (N live hypotheses until N have finished) some 4-best lists differ
    from Marian's: the option matters."""
    expected = marian_nbest(FIXTURE / "nbest.txt")
    sources = (FIXTURE / "test.src").read_text(encoding="utf-8").splitlines()
    ours = Translator.from_dir(imported, n_best=4, batch_size=1,
                               beam_stop="n_finished").translate_nbest(sources)
    assert sum([t.text for t in mine] != [text for text, _ in theirs]
               for theirs, mine in zip(expected, ours, strict=True)) > 0


def copy_fixture(tmp_path: Path) -> Path:
    directory = tmp_path / "marian"
    shutil.copytree(FIXTURE, directory)
    return directory


def test_an_unsupported_marian_option_is_refused_by_name(tmp_path):
    directory = copy_fixture(tmp_path)
    with np.load(directory / "model.npz") as npz:
        arrays = {name: npz[name] for name in npz.files}
    text = arrays["special:model.yml"].tobytes().rstrip(b"\0").decode()
    text = text.replace("transformer-ffn-activation: swish", "transformer-ffn-activation: gelu")
    text = text.replace("transformer-postprocess: dan", "transformer-postprocess: dna")
    arrays["special:model.yml"] = np.frombuffer(text.encode() + b"\0" * 7, dtype=np.int8)
    np.savez(directory / "model.npz", **arrays)
    with pytest.raises(ConversionError) as err:
        import_marian(directory, tmp_path / "out")
    assert "transformer-ffn-activation='gelu'" in str(err.value)
    assert "'dna'" in str(err.value) and "model.npz" in str(err.value)
    assert not (tmp_path / "out").exists()


def test_a_directory_without_decoder_yml_is_refused(tmp_path):
    directory = copy_fixture(tmp_path)
    (directory / "decoder.yml").unlink()
    with pytest.raises(ConversionError, match="no decoder.yml"):
        import_marian(directory, tmp_path / "out")


def test_a_missing_tensor_is_named(tmp_path):
    directory = copy_fixture(tmp_path)
    with np.load(directory / "model.npz") as npz:
        arrays = {name: npz[name] for name in npz.files if name != "decoder_l2_context_Wk"}
    np.savez(directory / "model.npz", **arrays)
    with pytest.raises(ConversionError, match="decoder_l2_context_Wk is missing"):
        import_marian(directory, tmp_path / "out")


def test_a_release_zip_layout_with_a_yaml_vocabulary_imports_the_same_model(tmp_path, imported):
    """OPUS-MT's zips: vocabularies as Marian's YAML piece -> id map, source.spm and target.spm
    beside it to cut the text. The same pieces give the same model and vocabulary."""
    import sentencepiece as spm
    import yaml

    directory = tmp_path / "release"
    directory.mkdir()
    shutil.copyfile(FIXTURE / "model.npz", directory / "opus.model1.npz")
    for name in ("source.spm", "target.spm"):
        shutil.copyfile(FIXTURE / "vocab.spm", directory / name)
    processor = spm.SentencePieceProcessor(model_file=str(FIXTURE / "vocab.spm"))
    pieces = {processor.id_to_piece(i): i for i in range(processor.get_piece_size())}
    (directory / "opus.vocab.yml").write_text(yaml.safe_dump(pieces, allow_unicode=True),
                                              encoding="utf-8")
    (directory / "decoder.yml").write_text(
        "models:\n  - opus.model1.npz\nvocabs:\n  - opus.vocab.yml\n  - opus.vocab.yml\n"
        "beam-size: 4\nnormalize: 0.6\n", encoding="utf-8")
    again = import_marian(directory, tmp_path / "again")
    for name in ("model.safetensors", "vocab.json", "config.json"):
        assert (again / name).read_bytes() == (imported / name).read_bytes(), name
