"""The real corpora users start with: where to download them (pinned commits, sha256) and how
to find them in a local directory.

- multi30k: WMT16 multimodal task 1 captions, any two of en/de/fr/cs; train / val /
  test_2016_flickr (29,000 / 1,014 / 1,000).
- multi30k-tok: the same captions as the task's own preprocessing left them (Moses lowercase,
  normalize-punctuation, tokenizer), en/de/fr, in `multi30k/tok/`: what the literature's
  tokenized lowercased BLEU scores were trained and scored on. Stored gzipped.
- tatoeba-deu-eng: ManyThings' Tatoeba deu-eng release of 2018-05-13, split into train / dev /
  test by `split_tatoeba` so that no sentence occurs in two splits.
- wmt14: newstest2013 (dev) and newstest2014 (test) of the paper's en-de and en-fr; with its
  training archives (data/wmt14.py), the 4.5M / 36M training pairs joined from them.

`locate(name, pair, data_dir)` returns the split files, looking in `data_dir/<directory>`
(the corpus's name, or multi30k/tok) or `data_dir` first and downloading into the former only
when asked to.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..storage.files import atomic_write, sha256_file
from . import wmt14
from .download import download
from .prepare import SplitFiles
from .text import DataError

log = logging.getLogger(__name__)

MULTI30K_URL = ("https://raw.githubusercontent.com/multi30k/dataset/"
                "a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/{kind}/{name}")
MULTI30K_SHA256 = {
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
}
# the upstream files are plain text: their sha256 (stored here gzipped, as "{name}.gz")
MULTI30K_TOK_SHA256 = {
    "train.lc.norm.tok.en": "08925f8e0572bcd5a006702fc5fe20e2d77c6917d4eebd576fc20de6693c2119",
    "train.lc.norm.tok.de": "cb5a23529b65ec2061f1dc446192a9c37382b63cc75f81a0be59d34894b3a505",
    "train.lc.norm.tok.fr": "8fa41bb718412bcb7c5dfa58603842810a01543eae86a51279f9886b901266e1",
    "val.lc.norm.tok.en": "46573ce391ae227f1c72f873392436a20ef18e0a6d518098cfbd70b77c8572ec",
    "val.lc.norm.tok.de": "97232bd273eceb7207f689527386a97e4be2616b18ada47576bdaf96c8ae1f00",
    "val.lc.norm.tok.fr": "b303e301aa21fe7822a846b2b3fb2d5a1121ec807cd5b1d006fb7b2b5507168a",
    "test_2016_flickr.lc.norm.tok.en":
        "5b7f32627cf99eced828311b955dae9800bb52bc8b91cf8b6526829e605b29d2",
    "test_2016_flickr.lc.norm.tok.de":
        "c6a33d39d48f9f510de147651316cd9d918e09ad0219df734a2f16b6baccacc4",
    "test_2016_flickr.lc.norm.tok.fr":
        "1463bd5960f9bfe098ec3cd752d3df0c49c84dc646fb518964a29232658cd836",
}
TATOEBA_URL = ("https://github.com/rioyshky/translation/raw/"
               "de48b7027f7318d77010a6e08ed928c10748c23d/deu-eng.zip")
TATOEBA_ZIP_SHA256 = "b7688f84f99fa33c17397c14d8bd9cef1fdeb2ee0bf50074767023aee8926e28"
WMT14_URL = ("https://raw.githubusercontent.com/Helsinki-NLP/OPUS-MT-testsets/"
             "ac0f19c0be3cb4e0d9450fcb2d7a9847c4bdd180/testsets/{pair}/{year}.{lang}")
WMT14_SHA256 = {
    "newstest2012.en-de.de": "946b9587b79271b0f3ce9cc8c0e5b310e3021ef598e1ba5dc2a24fef8960de30",
    "newstest2012.en-de.en": "f9e51f85c4948033fc7d77ef427f4d88908a8dd3f778970f62d0baafac3ff97e",
    "newstest2013.en-de.de": "d7ea35ab91ff3709e03ad9cb6bf5b4f2cc775cd2d72efd5254c4aec5e69663ca",
    "newstest2013.en-de.en": "ace268a1d9724ca76f6d8e5c720ffdc08f01bdce45630ed8b269dc7918e1c16e",
    "newstest2013.en-fr.en": "ace268a1d9724ca76f6d8e5c720ffdc08f01bdce45630ed8b269dc7918e1c16e",
    "newstest2013.en-fr.fr": "909b63be5df3eb8c13e1d5967bf3f0adfdb9f6ed5e638c5bffff563ee2ff7f41",
    "newstest2014.en-de.de": "ae5d110486bc33d7175e9e28c7d0051eb3e5fcd2166dd93371089852c091a20e",
    "newstest2014.en-de.en": "7294bccf2879a97b3706b95c9595f1459617a8ee7130d5d8581c910e69736971",
    "newstest2014.en-fr.en": "9a12cb6e8efb3509ebede627e4a9c83ee64935509d561ff70f4b7bd5f93f6096",
    "newstest2014.en-fr.fr": "2bd07dc204f965bf88e90adb6223a8cb850f9bf9840df6af1f4945195936656e",
}


@dataclass(frozen=True)
class Corpus:
    name: str
    languages: tuple[str, ...]
    splits: dict[str, str]  # our split name -> file stem; files are "{stem}.{lang}{suffix}"
    suffix: str
    # under a data directory: where the files are, or are downloaded to (default: the name)
    directory: str | None = None
    optional: tuple[str, ...] = ()  # splits that may be missing (wmt14's training text)
    pivot: str | None = None  # a language every pair has; "{pair}" in a stem puts it first
    # makes the missing training files (src, tgt) of a pair in a directory, where it can
    complete_train: Callable[[Path, str, tuple[Path, Path], bool], None] | None = None


CORPORA = {
    "multi30k": Corpus("multi30k", ("en", "de", "fr", "cs"),
                       {"train": "train", "valid": "val", "test": "test_2016_flickr"}, ".gz"),
    "multi30k-tok": Corpus("multi30k-tok", ("en", "de", "fr"),
                           {"train": "train.lc.norm.tok", "valid": "val.lc.norm.tok",
                            "test": "test_2016_flickr.lc.norm.tok"}, ".gz", "multi30k/tok"),
    "tatoeba-deu-eng": Corpus("tatoeba-deu-eng", ("en", "de"),
                              {"train": "train", "valid": "dev", "test": "test"}, ".gz"),
    "wmt14": Corpus("wmt14", ("en", "de", "fr"),
                    {"train": "train.{pair}", "valid": "newstest2013.{pair}",
                     "test": "newstest2014.{pair}"}, "", optional=("train",), pivot="en",
                    complete_train=wmt14.complete_training),
}


def _parse_pair(corpus: Corpus, pair: str) -> tuple[str, str]:
    src, sep, tgt = pair.partition("-")
    if not sep or src == tgt or {src, tgt} - set(corpus.languages):
        raise DataError(f"{corpus.name}: pair '{pair}' must be two of {corpus.languages}, "
                        "e.g. en-de")
    if corpus.pivot and corpus.pivot not in (src, tgt):
        raise DataError(f"{corpus.name}: pair '{pair}' lacks '{corpus.pivot}', which every "
                        "pair has")
    return src, tgt


def split_files(name: str, pair: str, root: Path) -> list[SplitFiles]:
    """The split files of corpus `name` for `pair` ("en-de": en source, de target) in `root`."""
    corpus = CORPORA[name]
    src, tgt = _parse_pair(corpus, pair)
    files = []
    pivot_first = f"{src}-{tgt}" if src == corpus.pivot else f"{tgt}-{src}"  # en-de, en-fr
    for split, stem in corpus.splits.items():
        stem = stem.format(pair=pivot_first)
        files.append(SplitFiles(split, root / f"{stem}.{src}{corpus.suffix}",
                                root / f"{stem}.{tgt}{corpus.suffix}"))
    return files


def locate(name: str, pair: str, data_dir: Path, *, download: bool = False) -> list[SplitFiles]:
    """Split files of a known corpus under `data_dir/<its directory>` or `data_dir`; with
    download, fetch what is missing into the former and check its sha256. wmt14's training
    text is joined from its archives (data/wmt14.py) where they are there or download says so;
    without them its test sets come alone."""
    if name not in CORPORA:
        raise DataError(f"unknown dataset '{name}' (known: {', '.join(CORPORA)})")
    corpus = CORPORA[name]
    home = data_dir / (corpus.directory or name)
    for root in (home, data_dir):
        files = split_files(name, pair, root)
        if all(f.src.exists() and f.tgt.exists() for f in files if f.name not in corpus.optional):
            break
    else:
        if not download:
            raise DataError(f"{name} {pair} not found in {home} or {data_dir} "
                            "(pass --download to fetch it)")
        home.mkdir(parents=True, exist_ok=True)
        DOWNLOADERS[name](home)
        files = split_files(name, pair, home)
    train = files[0]  # wmt14's: missing until joined from its archives
    if corpus.complete_train and not train.src.exists():
        corpus.complete_train(train.src.parent, pair, (train.src, train.tgt), download)
    return [f for f in files if f.src.exists() and f.tgt.exists()]


def _download_files(root: Path, urls_and_hashes: dict[str, tuple[str, str]], *,
                    gzipped: bool = False) -> None:
    """Fetch each missing file; with gzipped, store it as "<name>.gz" (`sha256` is of the
    plain text, checked again for a file already there)."""
    for filename, (url, sha256) in urls_and_hashes.items():
        path = root / (filename + ".gz" if gzipped else filename)
        if path.exists() and _sha256_of_content(path, gzipped) == sha256:
            continue
        if not gzipped:
            download(url, path, sha256)
            continue
        plain = download(url, root / f".{filename}.download", sha256)
        try:
            atomic_write(path, lambda tmp, plain=plain: _gzip(plain, tmp))
        finally:
            plain.unlink()


def _gzip(plain: Path, out: Path) -> None:
    with open(plain, "rb") as f, open(out, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as z:
        shutil.copyfileobj(f, z, 1 << 20)


def _sha256_of_content(path: Path, gzipped: bool) -> str | None:
    """sha256 of a file, or of what it decompresses to; None for a damaged gzip file."""
    if not gzipped:
        return sha256_file(path)
    try:
        return hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest()
    except (OSError, EOFError):
        return None


def download_multi30k(root: Path) -> None:
    _download_files(root, {name: (MULTI30K_URL.format(kind="raw", name=name), digest)
                           for name, digest in MULTI30K_SHA256.items()})


def download_multi30k_tok(root: Path) -> None:
    _download_files(root, {name: (MULTI30K_URL.format(kind="tok", name=name), digest)
                           for name, digest in MULTI30K_TOK_SHA256.items()}, gzipped=True)


def download_wmt14(root: Path) -> None:
    urls = {}
    for filename, digest in WMT14_SHA256.items():
        year, pair, lang = filename.split(".")
        urls[filename] = (WMT14_URL.format(pair=pair, year=year, lang=lang), digest)
    _download_files(root, urls)


def download_tatoeba(root: Path) -> None:
    path = download(TATOEBA_URL, root / ".deu-eng.zip", TATOEBA_ZIP_SHA256)
    try:
        with zipfile.ZipFile(path) as archive:
            lines = archive.read("deu.txt").decode("utf-8").splitlines()
    finally:
        path.unlink()
    for split, (en, de) in split_tatoeba(lines).items():
        for lang, texts in (("en", en), ("de", de)):
            data = "".join(t + "\n" for t in texts).encode("utf-8")
            (root / f"{split}.{lang}.gz").write_bytes(gzip.compress(data, mtime=0))


def split_tatoeba(lines: list[str]) -> dict[str, tuple[list[str], list[str]]]:
    """Split "English<TAB>German" lines into train / dev / test with no sentence in two splits:
    pairs sharing an English or a German string form one group, and a group goes wholly to
    the split chosen by md5(its smallest English string) mod 1000 (< 30 test, < 60 dev)."""
    pairs = [tuple(line.split("\t")[:2]) for line in lines]
    parent = list(range(len(pairs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_seen: dict[tuple[int, str], int] = {}
    for i, (en, de) in enumerate(pairs):
        for key in ((0, en), (1, de)):
            j = first_seen.setdefault(key, i)
            parent[find(i)] = find(j)
    smallest: dict[int, str] = {}
    for i, (en, _) in enumerate(pairs):
        root = find(i)
        smallest[root] = min(smallest.get(root, en), en)
    out = {"train": ([], []), "dev": ([], []), "test": ([], [])}
    for i, (en, de) in enumerate(pairs):
        bucket = int(hashlib.md5(smallest[find(i)].encode("utf-8")).hexdigest(), 16) % 1000
        split = "test" if bucket < 30 else "dev" if bucket < 60 else "train"
        out[split][0].append(en)
        out[split][1].append(de)
    return out


DOWNLOADERS = {"multi30k": download_multi30k, "multi30k-tok": download_multi30k_tok,
               "tatoeba-deu-eng": download_tatoeba, "wmt14": download_wmt14}
