"""LibreTranslate clients unchanged: a model prepared from train.en/train.de knows its languages,
and a real client library from PyPI (libretranslatepy, which sends forms) lists them and
translates with codes and with "auto" against a real `transformer-mt serve`."""

import json
import shutil
import urllib.error

import pytest

from serving_helpers import random_translator, running_server

pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")
from fastapi.testclient import TestClient  # noqa: E402

from transformer_mt import Translator  # noqa: E402
from transformer_mt.cli.main import main  # noqa: E402
from transformer_mt.cli.serve import model_languages  # noqa: E402
from transformer_mt.config import ServeConfig, load_config  # noqa: E402
from transformer_mt.data.prepare import language_of  # noqa: E402
from transformer_mt.serving.app import create_app  # noqa: E402
from transformer_mt.training.loop import train  # noqa: E402

KEY = "s3cret"


@pytest.mark.parametrize(("name", "code"), [
    ("train.en", "en"), ("train.de.gz", "de"), ("news.pt-BR", "pt-BR"), ("news.pt_BR", "pt_BR"),
    ("dev.zh-Hans", "zh-Hans"), ("train.src", None), ("train.tgt", None), ("corpus.txt", None),
    ("train.xx", None), ("en", None), (".en", None), ("train.en.txt", None)])
def test_a_language_code_is_read_from_a_file_suffix_only_where_it_is_one(tmp_path, name, code):
    assert language_of(tmp_path / name) == code


@pytest.fixture(scope="module")
def prepared_from_suffixes(corpus, tmp_path_factory):
    """The synthetic corpus prepared from train.en/train.de without --src-lang/--tgt-lang."""
    out = tmp_path_factory.mktemp("libre") / "data"
    assert main(["prepare", "--train-src", str(corpus / "train.en"), "--train-tgt",
                 str(corpus / "train.de"), "--vocab-size", "300", "--out", str(out)]) == 0
    return out


def test_prepare_records_the_languages_of_the_file_suffixes_or_says_how_to_give_them(
        prepared_from_suffixes, corpus, tmp_path, capsys):
    meta = json.loads((prepared_from_suffixes / "meta.json").read_text())
    assert (meta["src_lang"], meta["tgt_lang"]) == ("en", "de")
    for lang, new in (("en", "train.src"), ("de", "train.tgt")):
        shutil.copy(corpus / f"train.{lang}", tmp_path / new)
    capsys.readouterr()
    args = ["prepare", "--train-src", str(tmp_path / "train.src"), "--train-tgt",
            str(tmp_path / "train.tgt"), "--vocab-size", "300"]
    assert main([*args, "--out", str(tmp_path / "unknown")]) == 0
    assert "give --src-lang and --tgt-lang" in capsys.readouterr().out
    meta = json.loads((tmp_path / "unknown" / "meta.json").read_text())
    assert (meta["src_lang"], meta["tgt_lang"]) == (None, None)
    assert main([*args, "--src-lang", "fr", "--tgt-lang", "it", "--out",
                 str(tmp_path / "told")]) == 0
    meta = json.loads((tmp_path / "told" / "meta.json").read_text())
    assert (meta["src_lang"], meta["tgt_lang"]) == ("fr", "it")


@pytest.fixture(scope="module")
def model_dir(prepared_from_suffixes, tmp_path_factory):
    """A tiny model trained 200 steps (its outputs are not empty) on
    `prepared_from_suffixes`: its config.json records the languages."""
    run = tmp_path_factory.mktemp("libre-run") / "run"
    cfg = load_config("tiny", ["train.max_steps=200", "train.max_tokens=1000",
                               "train.warmup_steps=50", "train.valid_every=1000000",
                               "train.save_every=200", "train.threads=1", "model.d_model=32",
                               "model.d_ff=64", "model.n_heads=2"])
    train(cfg, data_dir=prepared_from_suffixes, run_dir=run)
    model = sorted((run / "checkpoints").iterdir())[-1]
    assert model_languages(model) == ("en", "de")
    return model


def test_a_real_libretranslate_client_lists_and_translates(model_dir):
    libretranslatepy = pytest.importorskip("libretranslatepy")
    offline = Translator.from_dirs([model_dir]).translate(["a dog runs .", "the cat sleeps ."])
    assert all(offline)  # a comparison of texts, not of empty answers
    with running_server(model_dir, "--api-key", KEY) as (base, _):
        client = libretranslatepy.LibreTranslateAPI(base, api_key=KEY)
        assert client.languages() == [{"code": "en", "name": "English", "targets": ["de"]},
                                      {"code": "de", "name": "German", "targets": []}]
        assert client.translate("a dog runs .", "en", "de") == offline[0]
        assert client.translate("the cat sleeps .", "auto", "de") == offline[1]
        with pytest.raises(urllib.error.HTTPError) as refused:
            client.translate("a dog runs .", "en", "fr")
        assert refused.value.code == 400
        assert json.loads(refused.value.read())["field"] == "target"
        with pytest.raises(urllib.error.HTTPError) as unauthorised:
            libretranslatepy.LibreTranslateAPI(base).translate("a dog runs .", "en", "de")
        assert unauthorised.value.code == 401


@pytest.fixture(scope="module")
def translator(corpus_vocab):
    return random_translator(corpus_vocab)


def test_json_and_form_bodies_give_the_same_answers(translator):
    expected = translator.translate(["dog runs ."])[0]
    with TestClient(create_app(translator, ServeConfig(max_wait_ms=0.0),
                               languages=("en", "de"))) as client:
        as_json = client.post("/translate", json={"q": "dog runs .", "source": "en",
                                                  "target": "de"})
        as_form = client.post("/translate", data={"q": "dog runs .", "source": "en",
                                                  "target": "de"})
        assert as_json.json() == as_form.json() == {"translatedText": expected}
        auto = client.post("/translate", data={"q": "dog runs .", "source": "auto",
                                               "target": "de"}).json()
        assert auto == {"translatedText": expected,
                        "detectedLanguage": {"language": "en", "confidence": 100.0}}
        listed = client.post("/translate", json={"q": ["dog runs .", ""], "source": "auto",
                                                 "target": "de"}).json()
        assert listed["translatedText"] == [expected, ""]
        assert [d["language"] for d in listed["detectedLanguage"]] == ["en", "en"]
        missing = client.post("/translate", data={"source": "en", "target": "de"})
        assert (missing.status_code, missing.json()["field"]) == (422, "q")
        garbage = client.post("/translate", content=b"q=dog",
                              headers={"Content-Type": "text/plain"})
        assert (garbage.status_code, garbage.json()["field"]) == (422, "body")


def test_a_model_without_languages_refuses_named_ones_until_serve_names_them(translator):
    with TestClient(create_app(translator, ServeConfig(max_wait_ms=0.0))) as client:
        assert client.get("/languages").json() == []
        response = client.post("/translate", data={"q": "dog", "source": "en", "target": "de"})
        assert (response.status_code, response.json()["field"]) == (400, "source")
        assert "serve --languages SRC-TGT" in response.json()["error"]
        assert client.post("/translate", json={"q": "dog"}).status_code == 200
    given = ServeConfig(languages="en-de").language_pair
    with TestClient(create_app(translator, ServeConfig(max_wait_ms=0.0),
                               languages=given)) as client:
        assert client.get("/languages").json()[0] == {"code": "en", "name": "English",
                                                      "targets": ["de"]}
        response = client.post("/translate", data={"q": "dog", "source": "en", "target": "de"})
        assert response.status_code == 200
