#!/usr/bin/env bash
# Which of a parsing run's checkpoints parses dev best? Each checkpoint under OUT/run/checkpoints
# parses dev (parse_splits.sh, OUT/valid.NAME.step_N.*) with the options given after NAME; the
# one with the highest strict F1 (EVALB's F1 with a sentence that fails counted as zero, not
# skipped) is chosen, written to OUT/NAME.selected.json with every checkpoint's dev scores, and
# parses test (OUT/test.NAME.*). A checkpoint already scored is not parsed again; with
# FROM_STEP=N those before step N are left out (an early model's search is slow and its F1
# low). SLOTS and REVERSE as for run.sh.
#   benchmarks/parsing/select_checkpoint.sh OUT NAME [parse trees options...]
# e.g. select_checkpoint.sh runs/parse balanced --word-slots --balanced
set -euo pipefail
OUT=$1 NAME=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
for checkpoint in "$OUT"/run/checkpoints/step_*; do
  step=$(basename "$checkpoint")
  [ "$((10#${step#step_}))" -ge "${FROM_STEP:-0}" ] || continue
  [ -f "$OUT/valid.$NAME.$step.scores.json" ] ||
    SPLITS=valid "$HERE/parse_splits.sh" "$OUT" "$checkpoint" "$NAME.$step" "$@"
done
best=$(python3 - "$OUT" "$NAME" "${FROM_STEP:-0}" <<'EOF'
import json, sys
from pathlib import Path
out, name = Path(sys.argv[1]), sys.argv[2]
scores = {path.name[len(f"valid.{name}."):-len(".scores.json")]: json.loads(path.read_text())
          for path in sorted(out.glob(f"valid.{name}.step_*.scores.json"))
          if int(path.name.split("step_")[1].split(".")[0]) >= int(sys.argv[3])}
best = max(scores, key=lambda step: scores[step]["strict"]["f1"])
for step, s in scores.items():
    print(f"{step}  dev F1 {s['all']['f1']:6.2f}  strict {s['strict']['f1']:6.2f}"
          + ("  <- selected" if step == best else ""), file=sys.stderr)
(out / f"{name}.selected.json").write_text(json.dumps(
    {"selected": best, "by": "dev strict F1", "dev": scores}, indent=1) + "\n")
print(best)
EOF
)
SPLITS=test "$HERE/parse_splits.sh" "$OUT" "$OUT/run/checkpoints/$best" "$NAME" "$@"
