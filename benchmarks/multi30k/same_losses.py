"""Does a run train to the same losses, step for step, as a committed run's metrics.jsonl?

Usage: same_losses.py COMMITTED_METRICS RUN_DIR OUT.json
Compares every "train" record (loss, nll, lr) of RUN_DIR/metrics.jsonl with the committed
record of the same step, exactly (float equality), and writes the comparison as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from transformer_mt.training.metrics import read_metrics


def train_records(records: list[dict]) -> dict[int, dict]:
    return {r["step"]: r for r in records if r["kind"] == "train"}


def main(committed: Path, run_dir: Path, out: Path) -> int:
    old = train_records([json.loads(line) for line in committed.read_text().splitlines()])
    new = train_records(read_metrics(run_dir))
    rows = [{"step": step, **{f"{key}_committed": old[step][key] for key in ("loss", "nll", "lr")},
             **{f"{key}_now": new[step][key] for key in ("loss", "nll", "lr")},
             "identical": all(old[step][k] == new[step][k] for k in ("loss", "nll", "lr"))}
            for step in sorted(new) if step in old]
    machine = next((r for r in read_metrics(run_dir) if r["kind"] == "machine"), {})
    result = {"committed": str(committed), "steps_compared": len(rows),
              "all_identical": bool(rows) and all(r["identical"] for r in rows),
              "machine": machine.get("cpu"), "threads": machine.get("threads"),
              "bf16": machine.get("bf16"), "rows": rows}
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    for r in rows:
        print(f"step {r['step']:>5}: loss {r['loss_now']:.15f} committed "
              f"{r['loss_committed']:.15f} {'identical' if r['identical'] else 'DIFFERENT'}")
    print(f"{len(rows)} steps compared; all identical: {result['all_identical']}")
    return 0 if result["all_identical"] else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])))
