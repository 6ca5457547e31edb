"""WMT14's training corpora, as the paper trained on them (§5.1: about 4.5M English-German
pairs; 36M English-French): the official archives from their published addresses, each checked
against its published size and sha256, and the parallel text inside them joined into
`train.{en-de,en-fr}.{lang}` beside the test sets (data/corpora.py's wmt14).

en-de: Europarl v7, Common Crawl, News Commentary v9; en-fr adds the UN corpus and the 10^9
French-English corpus. The archives may be downloaded here (`prepare --download`) or put in the
wmt14 directory by hand under their published names; either way they are checked before use.
"""

from __future__ import annotations

import gzip
import logging
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

from ..storage.files import sha256_file
from .download import download
from .text import DataError

log = logging.getLogger(__name__)

STATMT = "https://www.statmt.org"


@dataclass(frozen=True)
class Archive:
    name: str  # the published file name
    url: str
    size: int  # bytes
    sha256: str
    members: dict[str, str]  # pair ("en-de") -> member path, "{lang}" for the language


ARCHIVES = (
    Archive("training-parallel-europarl-v7.tgz",
            f"{STATMT}/wmt13/training-parallel-europarl-v7.tgz",
            657_632_379, "0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7",
            {"en-de": "training/europarl-v7.de-en.{lang}",
             "en-fr": "training/europarl-v7.fr-en.{lang}"}),
    Archive("training-parallel-commoncrawl.tgz",
            f"{STATMT}/wmt13/training-parallel-commoncrawl.tgz",
            918_311_367, "c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5",
            {"en-de": "commoncrawl.de-en.{lang}", "en-fr": "commoncrawl.fr-en.{lang}"}),
    Archive("training-parallel-nc-v9.tgz", f"{STATMT}/wmt14/training-parallel-nc-v9.tgz",
            80_418_416, "cb8953f292298e6877ae433c98912b927cb0766b303f4540512ddd286c748485",
            {"en-de": "training/news-commentary-v9.de-en.{lang}",
             "en-fr": "training/news-commentary-v9.fr-en.{lang}"}),
    Archive("training-parallel-un.tgz", f"{STATMT}/wmt13/training-parallel-un.tgz",
            2_365_634_246, "29141b5c1eba149a94f7a59d3b1a834b2e47fe0f8758d68dcd77a3d3f497ee47",
            {"en-fr": "un/undoc.2000.fr-en.{lang}"}),
    Archive("training-giga-fren.tar", f"{STATMT}/wmt10/training-giga-fren.tar",
            2_595_102_720, "3ff8319f6919393520559bfbc7ad6a747ec81b3abc7be9993b338d4b017b4d9a",
            {"en-fr": "giga-fren.release2.fixed.{lang}.gz"}),
)


def english_first(pair: str) -> str:
    """"de-en" -> "en-de": how WMT names a pair in its files."""
    return "-".join(sorted(pair.split("-"), key=lambda lang: lang != "en"))


def archives(pair: str) -> list[Archive]:
    """The archives of an English-centred pair ("en-de" or "en-fr", either direction)."""
    found = [a for a in ARCHIVES if english_first(pair) in a.members]
    if not found:
        raise DataError(f"wmt14: no training corpora for '{pair}' (en-de or en-fr)")
    return found


def check_archive(path: Path, archive: Archive) -> None:
    """The archive at `path` is the published one (size, then sha256), or a DataError naming it."""
    size = path.stat().st_size
    if size != archive.size:
        raise DataError(f"{path}: {size:,} bytes, not the published {archive.size:,} of "
                        f"{archive.url}; delete it and download again")
    log.info("checking the sha256 of %s", path)
    if (digest := sha256_file(path)) != archive.sha256:
        raise DataError(f"{path}: sha256 {digest} is not the published {archive.sha256}; "
                        "delete it and download again")


def fetch_archive(archive: Archive, root: Path) -> Path:
    """Download `archive` into root, kept only if its size and sha256 are the published ones."""
    return download(archive.url, root / archive.name, archive.sha256, archive.size)


def join_training(root: Path, pair: str, outputs: tuple[Path, Path], *,
                  download: bool = False) -> None:
    """The training text of `pair` (source side, target side) written to `outputs` from the
    pair's archives in root (downloaded first where missing, with download): each archive
    checked, both sides of each corpus read in lockstep and their line counts required equal.
    Written whole or not at all."""
    needed = archives(pair)
    missing = [a for a in needed if not (root / a.name).exists()]
    if missing and not download:
        raise DataError(f"wmt14 {pair}: training archives missing from {root}: "
                        f"{', '.join(a.name for a in missing)} (pass --download, or put them "
                        "there from " + ", ".join(a.url for a in missing) + ")")
    for archive in missing:
        fetch_archive(archive, root)
    for archive in needed:  # every archive is checked before any text is written
        check_archive(root / archive.name, archive)
    parts = [p.with_name(p.name + ".part") for p in outputs]
    src, tgt = pair.split("-")
    total = 0
    try:
        with open(parts[0], "wb") as src_out, open(parts[1], "wb") as tgt_out, \
                tempfile.TemporaryDirectory(dir=root) as tmp:
            for archive in needed:
                member = archive.members[english_first(pair)]
                sides = [_extract(root / archive.name, member.format(lang=lang), Path(tmp))
                         for lang in (src, tgt)]
                count = _copy_lockstep(sides, (src_out, tgt_out),
                                       f"{archive.name}: {member.format(lang='*')}")
                log.info("wmt14 %s: %s pairs from %s", pair, f"{count:,}", archive.name)
                total += count
    except BaseException:
        for part in parts:
            part.unlink(missing_ok=True)
        raise
    for part, out in zip(parts, outputs, strict=True):
        part.replace(out)
    log.info("wmt14 %s: %s training pairs in %s", pair, f"{total:,}", outputs[0].parent)


def complete_training(root: Path, pair: str, outputs: tuple[Path, Path], download: bool) -> None:
    """join_training where the archives are in root or download says to fetch them; else
    nothing (the test sets come alone)."""
    if download or all((root / a.name).exists() for a in archives(pair)):
        join_training(root, pair, outputs, download=download)


def _extract(archive: Path, member: str, tmp: Path) -> Path:
    """One member of a tar archive, gunzipped when it is .gz, as a file under tmp."""
    out = tmp / Path(member).name.removesuffix(".gz")
    with tarfile.open(archive, "r:*") as tar:
        try:
            stream = tar.extractfile(member)
        except KeyError:
            raise DataError(f"{archive}: no member {member}") from None
        if stream is None:
            raise DataError(f"{archive}: {member} is not a file")
        with stream, open(out, "wb") as f:
            shutil.copyfileobj(gzip.GzipFile(fileobj=stream) if member.endswith(".gz")
                               else stream, f, 1 << 20)
    return out


def _copy_lockstep(sides: list[Path], outs: tuple, name: str) -> int:
    """Append both sides line by line ("\\n" ends a line; a last line without one gets one);
    the number of pairs, or a DataError when one side has more lines."""
    counts = [0, 0]
    with open(sides[0], "rb") as a, open(sides[1], "rb") as b:
        for lines in zip_longest(a, b):
            for k, (line, out) in enumerate(zip(lines, outs, strict=True)):
                if line is not None:
                    out.write(line if line.endswith(b"\n") else line + b"\n")
                    counts[k] += 1
    if counts[0] != counts[1]:
        raise DataError(f"{name}: the two sides differ in length ({counts[0]:,} and "
                        f"{counts[1]:,} lines)")
    return counts[0]
