"""Reading parallel text strictly (§5.1's input): gzip or plain, UTF-8 only, lines split on
"\\n" alone, and every error naming the file and line."""

from __future__ import annotations

import gzip
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path


class DataError(ValueError):
    """Input text or a prepared directory is wrong; the message names the file and line."""


def read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
        return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise DataError(f"{path}: cannot read: {err}") from None


def split_lines(data: bytes) -> list[bytes]:
    """Lines split on "\\n" only; one trailing "\\r" per line and a leading BOM are removed.
    A final newline does not start another line."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    if not data:
        return []
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def iter_lines(path: Path | None) -> Iterator[str]:
    """The lines of a file (plain or gzip), or of stdin where `path` is None, split as
    `split_lines` splits them and decoded one at a time (memory does not grow with the file);
    invalid UTF-8 is a DataError naming the file and line."""
    if path is None:
        yield from _decoded("<stdin>", sys.stdin.buffer)
        return
    try:
        with open(path, "rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
        with (gzip.open if gzipped else open)(path, "rb") as f:
            yield from _decoded(str(path), f)
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise DataError(f"{path}: cannot read: {err}") from None


def _decoded(name: str, lines: Iterable[bytes]) -> Iterator[str]:
    for number, raw in enumerate(lines, start=1):
        raw = raw.removesuffix(b"\n").removesuffix(b"\r")
        try:
            yield (raw.removeprefix(b"\xef\xbb\xbf") if number == 1 else raw).decode("utf-8")
        except UnicodeDecodeError as err:
            raise DataError(f"{name}:{number}: invalid UTF-8 ({err.reason} at byte "
                            f"{err.start})") from None


def read_parallel(src_path: Path, tgt_path: Path, *, skip_invalid: bool = False,
                  ) -> tuple[list[str], list[str], int]:
    """Read two aligned files as strict UTF-8. Returns (sources, targets, pairs skipped for
    invalid UTF-8). A line-count mismatch, or invalid UTF-8 unless skip_invalid, is a DataError
    naming the file(s), line and counts."""
    src_lines, tgt_lines = split_lines(read_bytes(src_path)), split_lines(read_bytes(tgt_path))
    if len(src_lines) != len(tgt_lines):
        raise DataError(
            f"line counts differ: {src_path} has {len(src_lines)} lines, "
            f"{tgt_path} has {len(tgt_lines)}"
        )
    sources, targets, skipped = [], [], 0
    for number, pair in enumerate(zip(src_lines, tgt_lines, strict=True), start=1):
        texts = []
        for path, line in zip((src_path, tgt_path), pair, strict=True):
            try:
                texts.append(line.decode("utf-8"))
            except UnicodeDecodeError as err:
                if not skip_invalid:
                    raise DataError(f"{path}:{number}: invalid UTF-8 ({err.reason} at byte "
                                    f"{err.start})") from None
        if len(texts) < 2:
            skipped += 1
            continue
        sources.append(texts[0])
        targets.append(texts[1])
    return sources, targets, skipped

