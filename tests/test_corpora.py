import gzip
import hashlib
import io
import urllib.request
import zipfile

import pytest

from conftest import read_lines
from transformer_mt.data import corpora
from transformer_mt.data.corpora import locate, split_tatoeba
from transformer_mt.data.text import DataError


def test_locate_known_corpora_in_a_local_directory(shared_data):
    files = {f.name: f for f in locate("multi30k", "de-en", shared_data)}
    assert files["train"].src.name == "train.de.gz" and files["train"].tgt.name == "train.en.gz"
    assert files["test"].src.name == "test_2016_flickr.de.gz"
    tatoeba = {f.name: f for f in locate("tatoeba-deu-eng", "en-de", shared_data)}
    assert tatoeba["valid"].src.name == "dev.en.gz"
    wmt = {f.name: f for f in locate("wmt14", "de-en", shared_data)}
    assert wmt["test"].src.name == "newstest2014.en-de.de"
    assert wmt["valid"].tgt.name == "newstest2013.en-de.en" and "train" not in wmt
    tok = {f.name: f for f in locate("multi30k-tok", "en-de", shared_data)}
    assert tok["train"].src == shared_data / "multi30k/tok/train.lc.norm.tok.en.gz"
    assert tok["test"].tgt == shared_data / "multi30k/tok/test_2016_flickr.lc.norm.tok.de.gz"


def test_bad_pair_or_missing_corpus(tmp_path):
    with pytest.raises(DataError, match="pair 'en-xx' must be two of"):
        locate("multi30k", "en-xx", tmp_path)
    with pytest.raises(DataError, match="not found in .*--download"):
        locate("multi30k", "en-de", tmp_path)
    with pytest.raises(DataError, match=r"pair 'en-cs' must be two of \('en', 'de', 'fr'\)"):
        locate("multi30k-tok", "en-cs", tmp_path)  # upstream's Czech tok files are not pinned
    with pytest.raises(DataError, match="wmt14: pair 'de-fr' lacks 'en', which every pair has"):
        locate("wmt14", "de-fr", tmp_path)
    with pytest.raises(DataError, match="unknown dataset"):
        locate("iwslt", "en-de", tmp_path)


def test_download_checks_sha256(shared_data, tmp_path, monkeypatch):
    """The download path, with the network replaced by the local copies of the same files."""

    def fake_urlopen(url, timeout):
        assert "/data/task1/raw/" in url
        name = url.rsplit("/", 1)[-1]
        return io.BytesIO((shared_data / "multi30k" / name).read_bytes())

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    files = locate("multi30k", "en-fr", tmp_path, download=True)
    assert all(f.src.exists() and f.tgt.exists() for f in files)
    assert (tmp_path / "multi30k/val.cs.gz").read_bytes() == \
        (shared_data / "multi30k/val.cs.gz").read_bytes()
    corrupted = lambda url, timeout: io.BytesIO(b"not the file")
    monkeypatch.setattr(urllib.request, "urlopen", corrupted)
    with pytest.raises(DataError, match=r"train\.en\.gz: 12 bytes, sha256 [0-9a-f]{64}; not the "
                                        "published sha256 [0-9a-f]{64}: refused"):
        corpora.download_multi30k(tmp_path / "other")
    assert not list((tmp_path / "other").iterdir())  # nothing half-kept


def test_the_tokenized_multi30k_downloads_as_plain_text_and_is_stored_gzipped(
        shared_data, tmp_path, monkeypatch):
    # upstream's tok/ files are plain text, hashed as such; served here from the local copies
    fetched = []

    def fake_urlopen(url, timeout):
        assert "/data/task1/tok/" in url
        name = url.rsplit("/", 1)[-1]
        fetched.append(name)
        return io.BytesIO(gzip.decompress((shared_data / "multi30k/tok" / f"{name}.gz")
                                          .read_bytes()))

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    files = {f.name: f for f in locate("multi30k-tok", "de-fr", tmp_path, download=True)}
    assert len(fetched) == 9  # all three languages, as for the raw files
    assert files["valid"].src == tmp_path / "multi30k/tok/val.lc.norm.tok.de.gz"
    for path in (tmp_path / "multi30k/tok").iterdir():
        assert gzip.decompress(path.read_bytes()) == \
            gzip.decompress((shared_data / "multi30k/tok" / path.name).read_bytes())
    # a complete file is kept, a damaged one fetched again
    damaged = tmp_path / "multi30k/tok/val.lc.norm.tok.fr.gz"
    damaged.write_bytes(gzip.compress(b"a damaged file\n"))
    cut_short = tmp_path / "multi30k/tok/val.lc.norm.tok.en.gz"
    cut_short.write_bytes(cut_short.read_bytes()[:100])
    fetched.clear()
    corpora.download_multi30k_tok(tmp_path / "multi30k/tok")
    assert sorted(fetched) == ["val.lc.norm.tok.en", "val.lc.norm.tok.fr"]
    assert gzip.decompress(damaged.read_bytes()) == \
        gzip.decompress((shared_data / "multi30k/tok/val.lc.norm.tok.fr.gz").read_bytes())


def test_tatoeba_split_reproduces_the_shared_split(shared_data):
    with gzip.open(shared_data / "tatoeba-deu-eng/deu.txt.gz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    splits = split_tatoeba(lines)
    for split, (en, de) in splits.items():
        for lang, texts in (("en", en), ("de", de)):
            path = shared_data / f"tatoeba-deu-eng/{split}.{lang}.gz"
            ours = hashlib.sha256("".join(t + "\n" for t in texts).encode()).hexdigest()
            theirs = hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest()
            assert ours == theirs, path
    assert not set(splits["test"][0]) & set(splits["train"][0])
    assert read_lines(shared_data / "tatoeba-deu-eng/dev.en.gz", 1)[0] == splits["dev"][0][0]


def test_tatoeba_downloads_its_archive_and_splits_it(shared_data, tmp_path, monkeypatch):
    # the published archive is not here: a zip of the shared deu.txt stands in, its sha256 pinned
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("deu.txt", gzip.decompress(
            (shared_data / "tatoeba-deu-eng/deu.txt.gz").read_bytes()))
    served = buffer.getvalue()
    monkeypatch.setattr(corpora, "TATOEBA_ZIP_SHA256", hashlib.sha256(served).hexdigest())
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: io.BytesIO(served))
    files = {f.name: f for f in locate("tatoeba-deu-eng", "de-en", tmp_path, download=True)}
    for split in ("train", "dev", "test"):
        ours = tmp_path / f"tatoeba-deu-eng/{split}.de.gz"
        assert gzip.decompress(ours.read_bytes()) == \
            gzip.decompress((shared_data / f"tatoeba-deu-eng/{split}.de.gz").read_bytes())
    assert files["valid"].tgt == tmp_path / "tatoeba-deu-eng/dev.en.gz"
    assert sorted(p.name for p in (tmp_path / "tatoeba-deu-eng").iterdir()) == sorted(
        f"{split}.{lang}.gz" for split in ("train", "dev", "test") for lang in ("en", "de"))
