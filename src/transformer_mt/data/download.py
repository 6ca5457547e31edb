"""Downloads that are never half-kept: streamed to disk beside their destination, their sha256
computed as they come, progress logged, and renamed into place only when the sha256 (and the
size, where it is published) are the published ones."""

from __future__ import annotations

import hashlib
import logging
import urllib.request
from pathlib import Path

from .text import DataError

log = logging.getLogger(__name__)


def download(url: str, path: Path, sha256: str, size: int | None = None) -> Path:
    """`url` into `path` (through "<path>.part"), or a DataError naming what came instead."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    digest, done, shown = hashlib.sha256(), 0, 0
    log.info("downloading %s%s", url, f" ({size / 1e6:.0f} MB)" if size else "")
    try:
        with urllib.request.urlopen(url, timeout=120) as response, open(part, "wb") as out:  # noqa: S310 (https, pinned)
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
                done += len(chunk)
                if size and done - shown >= size / 20:
                    log.info("%s: %.0f of %.0f MB", path.name, done / 1e6, size / 1e6)
                    shown = done
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    if digest.hexdigest() != sha256 or (size is not None and done != size):
        part.unlink()
        published = f"{size:,} bytes, {sha256}" if size is not None else f"sha256 {sha256}"
        raise DataError(f"{url}: {done:,} bytes, sha256 {digest.hexdigest()}; not the "
                        f"published {published}: refused")
    part.replace(path)
    return path
