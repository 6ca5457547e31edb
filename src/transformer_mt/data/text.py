"""Reading parallel text strictly (§5.1's input): gzip or plain, UTF-8 only, lines split on
"\\n" alone, and every error naming the file and line."""

from __future__ import annotations

import gzip
import sys
from collections.abc import Iterable, Iterator
from itertools import zip_longest
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


def read_text(path: Path) -> list[str]:
    """The lines of a UTF-8 text file (gzip or plain), split as `split_lines` splits them."""
    try:
        return [line.decode("utf-8") for line in split_lines(read_bytes(Path(path)))]
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: invalid UTF-8 ({err.reason})") from None


def iter_lines(path: Path | None) -> Iterator[str]:
    """The lines of a file (plain or gzip), or of stdin where `path` is None, split as
    `split_lines` splits them and decoded one at a time (memory does not grow with the file);
    invalid UTF-8 is a DataError naming the file and line."""
    name = "<stdin>" if path is None else str(path)
    for number, raw in enumerate(iter_raw_lines(path), start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise DataError(f"{name}:{number}: invalid UTF-8 ({err.reason} at byte "
                            f"{err.start})") from None


def iter_raw_lines(path: Path | None) -> Iterator[bytes]:
    """The undecoded lines of a file or stdin, one at a time, as `split_lines` splits them."""
    if path is None:
        yield from _split(sys.stdin.buffer)
        return
    try:
        with open(path, "rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
        with (gzip.open if gzipped else open)(path, "rb") as f:
            yield from _split(f)
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise DataError(f"{path}: cannot read: {err}") from None


def _split(lines: Iterable[bytes]) -> Iterator[bytes]:
    for number, raw in enumerate(lines, start=1):
        raw = raw.removesuffix(b"\n").removesuffix(b"\r")
        yield raw.removeprefix(b"\xef\xbb\xbf") if number == 1 else raw


def iter_parallel(src_path: Path, tgt_path: Path, *, skip_invalid: bool = False,
                  ) -> Iterator[tuple[str, str] | None]:
    """Two aligned files as strict UTF-8 pairs, one at a time; None for a pair left out for
    invalid UTF-8 (with skip_invalid; otherwise a DataError naming the file and line). Files of
    different line counts are a DataError naming both and their counts, raised when the shorter
    one ends."""
    paths = (src_path, tgt_path)
    number = 0
    for number, pair in enumerate(zip_longest(iter_raw_lines(src_path),
                                              iter_raw_lines(tgt_path)), start=1):
        if None in pair:
            longer = 0 if pair[1] is None else 1
            rest = sum(1 for _ in (iter_raw_lines(paths[longer])))
            counts = [number - 1, number - 1]
            counts[longer] = rest
            raise DataError(f"line counts differ: {src_path} has {counts[0]} lines, "
                            f"{tgt_path} has {counts[1]}")
        texts = []
        for path, line in zip(paths, pair, strict=True):
            try:
                texts.append(line.decode("utf-8"))
            except UnicodeDecodeError as err:
                if not skip_invalid:
                    raise DataError(f"{path}:{number}: invalid UTF-8 ({err.reason} at byte "
                                    f"{err.start})") from None
        yield (texts[0], texts[1]) if len(texts) == 2 else None


def read_parallel(src_path: Path, tgt_path: Path, *, skip_invalid: bool = False,
                  ) -> tuple[list[str], list[str], int]:
    """Two aligned files read whole (`iter_parallel`): (sources, targets, pairs skipped for
    invalid UTF-8)."""
    sources, targets, skipped = [], [], 0
    for pair in iter_parallel(src_path, tgt_path, skip_invalid=skip_invalid):
        if pair is None:
            skipped += 1
        else:
            sources.append(pair[0])
            targets.append(pair[1])
    return sources, targets, skipped
