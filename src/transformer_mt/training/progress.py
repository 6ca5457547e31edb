"""Progress of long work on stderr: a bar on a terminal, log lines elsewhere."""

from __future__ import annotations

import logging
import sys

log = logging.getLogger(__name__)


class Progress:
    """A progress bar counting `unit`s when stderr is a terminal; elsewhere a log line per
    update (callers choose how often). Nothing at all when not enabled (other ranks)."""

    def __init__(self, *, start: int = 0, total: int = 0, unit: str = "step",
                 enabled: bool = True):
        self.bar = None
        self.unit = unit
        self.enabled = enabled
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(initial=start, total=total or None, unit=unit, dynamic_ncols=True)

    def update(self, done: int, **values) -> None:
        """`done` units so far; `values` (loss, lr, ...) shown beside the count."""
        text = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                         for k, v in values.items())
        if self.bar is not None:
            self.bar.n = done
            self.bar.set_postfix_str(text)
        elif self.enabled:
            log.info("%s %d: %s", self.unit, done, text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
