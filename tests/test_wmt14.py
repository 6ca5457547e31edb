"""WMT14's training corpora (data/wmt14.py) from archives laid out as the official ones (their
names, member paths and formats, small synthetic text): joined in order with the test sets
beside them, checked against size and sha256 (the published ones refuse these files, naming
them), a corpus whose sides differ in length refused, nothing half-written, and the download
path streamed from URLs to the same checks."""

import dataclasses
import gzip
import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from transformer_mt.cli.main import main
from transformer_mt.data import corpora, wmt14
from transformer_mt.data.text import DataError

PUBLISHED = wmt14.ARCHIVES


def add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def lines(corpus: str, lang: str, n: int) -> bytes:
    return "".join(f"{corpus} {lang} sentence {i} ä\n" for i in range(n)).encode()


def make_archives(root: Path, *, short: str | None = None) -> tuple:
    """The five archives under their published names with their published member paths; the
    archive named `short` loses the last line of its English side. Returns ARCHIVES with
    these files' sizes and sha256."""
    root.mkdir(parents=True, exist_ok=True)
    counts = {"training-parallel-europarl-v7.tgz": 5, "training-parallel-commoncrawl.tgz": 3,
              "training-parallel-nc-v9.tgz": 2, "training-parallel-un.tgz": 4,
              "training-giga-fren.tar": 6}
    found = []
    for archive in PUBLISHED:
        path = root / archive.name
        with tarfile.open(path, "w:gz" if archive.name.endswith(".tgz") else "w") as tar:
            for pair, member in archive.members.items():
                for lang in pair.split("-"):
                    text = lines(archive.name.split(".")[0], f"{pair}-{lang}",
                                 counts[archive.name])
                    if archive.name == short and lang == "en":
                        text = text[:text.rindex(b"\n", 0, len(text) - 1) + 1]
                    name = member.format(lang=lang)
                    add(tar, name, gzip.compress(text) if name.endswith(".gz") else text)
        data = path.read_bytes()
        found.append(dataclasses.replace(archive, size=len(data),
                                         sha256=hashlib.sha256(data).hexdigest()))
    return tuple(found)


def test_survey_of_the_published_archives():
    assert {a.name for a in wmt14.archives("de-en")} == {
        "training-parallel-europarl-v7.tgz", "training-parallel-commoncrawl.tgz",
        "training-parallel-nc-v9.tgz"}
    assert len(wmt14.archives("fr-en")) == 5
    assert all(a.url.startswith("https://www.statmt.org/") and len(a.sha256) == 64
               for a in PUBLISHED)
    with pytest.raises(DataError, match="no training corpora for 'en-cs'"):
        wmt14.archives("en-cs")


def test_training_text_is_joined_from_local_archives(shared_data, tmp_path, monkeypatch,
                                                     capsys):
    home = tmp_path / "wmt14"
    ours = make_archives(home)
    for name in ("newstest2013.en-de.en", "newstest2013.en-de.de", "newstest2014.en-de.en",
                 "newstest2014.en-de.de"):
        (home / name).write_bytes((shared_data / "wmt14" / name).read_bytes())
    with pytest.raises(DataError, match="training-parallel-europarl-v7.tgz: [0-9]+ bytes, "
                                        "not the published 657,632,379"):
        corpora.locate("wmt14", "de-en", tmp_path)  # the published table refuses these files
    assert not list(home.glob("train.*")), "nothing half-written"
    monkeypatch.setattr(wmt14, "ARCHIVES", ours)
    files = {f.name: f for f in corpora.locate("wmt14", "de-en", tmp_path)}
    assert files["train"].src == home / "train.en-de.de"
    de = files["train"].src.read_text(encoding="utf-8").splitlines()
    en = files["train"].tgt.read_text(encoding="utf-8").splitlines()
    assert len(de) == len(en) == 5 + 3 + 2
    assert de[0] == "training-parallel-europarl-v7 en-de-de sentence 0 ä"
    assert en[5] == "training-parallel-commoncrawl en-de-en sentence 0 ä"
    assert en[-1] == "training-parallel-nc-v9 en-de-en sentence 1 ä"
    assert not list(home.glob("*.part")) and not [p for p in home.iterdir() if p.is_dir()]
    # the prepare command, end to end on the joined text
    out = tmp_path / "prepared"
    assert main(["prepare", "--dataset", "wmt14", "--pair", "de-en", "--data-dir",
                 str(tmp_path), "--out", str(out), "--vocab-size", "60",
                 "--data.vocab_model_type=unigram"]) == 0
    assert "train: 10 pairs kept of 10" in capsys.readouterr().out


def test_bad_archives_are_refused_naming_them(tmp_path, monkeypatch):
    home = tmp_path / "wmt14"
    monkeypatch.setattr(wmt14, "ARCHIVES", make_archives(home, short="training-parallel-un.tgz"))
    outputs = (home / "train.en-fr.en", home / "train.en-fr.fr")
    with pytest.raises(DataError, match=r"training-parallel-un.tgz: un/undoc.2000.fr-en.\*: the "
                                        r"two sides differ in length \(3 and 4 lines\)"):
        wmt14.join_training(home, "en-fr", outputs)
    assert not any(p.exists() for p in outputs) and not list(home.glob("*.part"))
    nc = home / "training-parallel-nc-v9.tgz"
    nc.write_bytes(nc.read_bytes()[:-1] + b"x")  # same size, other bytes
    with pytest.raises(DataError, match="training-parallel-nc-v9.tgz: sha256 [0-9a-f]{64} is "
                                        "not the published"):
        wmt14.join_training(home, "en-de", outputs)
    (home / "training-parallel-commoncrawl.tgz").unlink()
    with pytest.raises(DataError, match="missing from .*training-parallel-commoncrawl.tgz "
                                        r"\(pass --download"):
        wmt14.join_training(home, "de-en", outputs)


def test_download_streams_each_archive_and_checks_it(tmp_path, monkeypatch):
    served = tmp_path / "served"
    ours = make_archives(served)
    monkeypatch.setattr(wmt14, "ARCHIVES", tuple(
        dataclasses.replace(a, url=(served / a.name).as_uri()) for a in ours))
    home = tmp_path / "wmt14"
    home.mkdir()
    outputs = (home / "train.en-fr.fr", home / "train.en-fr.en")
    wmt14.join_training(home, "fr-en", outputs, download=True)
    assert len(outputs[0].read_text().splitlines()) == 5 + 3 + 2 + 4 + 6
    assert (home / "training-giga-fren.tar").read_bytes() == \
        (served / "training-giga-fren.tar").read_bytes()
    bad = dataclasses.replace(ours[2], url=(served / ours[2].name).as_uri(), sha256="0" * 64)
    with pytest.raises(DataError, match="training-parallel-nc-v9.tgz: [0-9,]+ bytes, sha256 "
                                        "[0-9a-f]{64}; not the published .*refused"):
        wmt14.fetch_archive(bad, tmp_path / "other")
    assert not list((tmp_path / "other").glob("*"))
