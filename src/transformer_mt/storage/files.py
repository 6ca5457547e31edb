"""Files that are never half-written: atomic replacement, fsync, content hashes.

Every command that writes a user's file or directory (translate, evaluate, average, export,
import, attention, parse) writes it through `atomic_write`, `atomic_output` or `atomic_dir`:
the new content goes to a temporary beside the target and is renamed over it only once it is
complete, so a failure at any point (a bad input line, a full disk, a kill) leaves an existing
file as it was."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def _temporary_beside(path: Path) -> Iterator[Path]:
    """A new empty file beside `path`, with the permissions a plain open() would give it,
    renamed over `path` when the block ends without an exception and removed otherwise.
    A symbolic link is followed: its target is replaced."""
    path = Path(path).resolve()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 is for secrets, not outputs
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write(path: Path, write) -> None:
    """`write(tmp)` writes a temporary file beside `path`, then it is renamed into place."""
    with _temporary_beside(path) as tmp:
        write(tmp)


def atomic_write_text(path: Path, text: str) -> None:
    """`path` holds `text` (UTF-8), all of it or, after a failure, what it held before."""
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


@contextlib.contextmanager
def atomic_output(path: Path | None) -> Iterator[TextIO]:
    """A UTF-8 text stream for an output file written as it goes (translate's chunks) that
    replaces `path` only when the block ends without an exception; None: standard output.
    What is not a regular file (/dev/null, a named pipe) is written directly."""
    if path is None:
        yield sys.stdout
        return
    if Path(path).exists() and not Path(path).is_file():
        with open(path, "w", encoding="utf-8") as out:
            yield out
        return
    with _temporary_beside(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        yield out


@contextlib.contextmanager
def atomic_dir(out_dir: Path) -> Iterator[Path]:
    """A temporary directory beside `out_dir` to write a model directory into; when the block
    ends without an exception its files replace those of the same names in `out_dir` (created
    if missing; other files there are left alone), each by a rename."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(f"{out_dir}: exists and is not a directory")
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    try:
        yield tmp
        out_dir.mkdir(exist_ok=True)
        for path in sorted(tmp.rglob("*")):
            target = out_dir / path.relative_to(tmp)
            if path.is_dir():
                target.mkdir(exist_ok=True)
            else:
                os.chmod(path, 0o666 & ~_umask())
                os.replace(path, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fsync_path(path: Path) -> None:
    """fsync a file or a directory."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
