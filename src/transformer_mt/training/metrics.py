"""Training metrics: a JSONL file and TensorBoard in the run directory, and the curves plot.

A resumed run first drops the records after its checkpoint's step (they belong to work that the
crash undid and that will be redone), so the log reads like one uninterrupted run.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"


def resident_mib() -> float | None:
    """This process's resident memory in MiB (Linux's /proc/self/statm); None elsewhere."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def read_metrics(run_dir: Path) -> list[dict]:
    """The records of run_dir/metrics.jsonl; a last line cut short by a crash is ignored."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    records = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise ValueError(f"{path}:{number}: not a JSON record") from None
            log.warning("%s:%d: ignoring a record cut short by a crash", path, number)
    return records


def validations(run_dir: Path) -> list[dict]:
    """The validation records of run_dir/metrics.jsonl in step order, one a step (the last,
    where a resumed run validated a step again): the run's validation curve."""
    by_step = {r["step"]: r for r in read_metrics(run_dir) if r["kind"] == "valid"}
    return [by_step[step] for step in sorted(by_step)]


def truncate_metrics(run_dir: Path, step: int) -> None:
    """Keep only the records up to `step` (atomically: a crash here loses nothing)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return
    kept = [r for r in read_metrics(run_dir) if r["step"] <= step]
    tmp = path.with_name(f".{METRICS_FILE}.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    os.replace(tmp, path)


class MetricsLog:
    """Metrics to a JSONL file and TensorBoard. `resume_step`: the step of the checkpoint a run
    resumes from; records after it are dropped from both. Disabled: writes nothing (the ranks
    of a distributed run other than 0)."""

    def __init__(self, run_dir: Path, *, resume_step: int | None = None, enabled: bool = True):
        self.path = Path(run_dir) / METRICS_FILE
        self.enabled = enabled
        self.writer = None
        if not enabled:
            return
        if resume_step is not None:
            truncate_metrics(run_dir, resume_step)
        try:
            from torch.utils.tensorboard import SummaryWriter

            purge = None if resume_step is None else resume_step + 1
            self.writer = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"),
                                        purge_step=purge)
        except ImportError:  # tensorboard is a dependency; tolerate a slim install
            log.warning("tensorboard not installed: logging to %s only", self.path)
            self.writer = None

    def write(self, kind: str, step: int, **values) -> None:
        if not self.enabled:
            return
        record = {"kind": kind, "step": step, "time": round(time.time(), 3), **values}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if self.writer is not None:
            for key, value in values.items():
                if isinstance(value, int | float):
                    self.writer.add_scalar(f"{kind}/{key}", value, step)
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def plot_curves(run_dir: Path) -> Path | None:
    """Training and validation curves from metrics.jsonl to curves.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(run_dir)
    train = [r for r in records if r["kind"] == "train"]
    valid = [r for r in records if r["kind"] == "valid"]
    if not train:
        return None
    fig, (ax_loss, ax_bleu) = plt.subplots(1, 2, figsize=(11, 4))
    ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss")
    if valid:
        ax_loss.plot([r["step"] for r in valid], [r["loss"] for r in valid], "o-",
                     label="valid loss")
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("label-smoothed loss per token")
    ax_loss.legend()
    bleu = [r for r in valid if "bleu" in r]
    if bleu:
        ax_bleu.plot([r["step"] for r in bleu], [r["bleu"] for r in bleu], "o-", color="C2")
    ax_bleu.set_xlabel("step")
    ax_bleu.set_ylabel("validation sacreBLEU")
    fig.tight_layout()
    out = Path(run_dir) / "curves.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
