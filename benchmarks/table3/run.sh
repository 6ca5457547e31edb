#!/usr/bin/env bash
# Table 3 on Multi30k en->de at the CPU protocol (docs/table3.md): prepare once, run every row
# but big with seed 1, the base row and (A) with seeds 2 and 3, then big (resumable: re-run to
# go on; the results already committed are taken, not trained again), then copy what is worth
# keeping (per row: config, metrics, result; the table, its plot, the driver's log; never
# checkpoints) into the results folder.
# Usage: benchmarks/table3/run.sh [RESULTS_DIR] ; JOBS rows at once (default 2), WORK the run
# folder (default runs/table3-cpu), REPORT_ONLY=1 trains nothing (the table so far, copied).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=${TRANSFORMER_MT_DATA:-$REPO/../shared/data}
RESULTS=${1:-$REPO/benchmarks/results/table3-multi30k-cpu}
WORK=${WORK:-$REPO/runs/table3-cpu}
mkdir -p "$WORK/results" "$RESULTS"
exec > >(tee -a "$WORK/run.log") 2>&1
echo "== $(date -u +%FT%TZ) table3, commit $(git -C "$REPO" rev-parse --short HEAD)"
if [ ! -f "$WORK/data/meta.json" ]; then
  transformer-mt prepare --dataset multi30k --pair en-de --data-dir "$DATA" --vocab-size 8000 \
    --out "$WORK/data"
fi
cp -n "$RESULTS"/results/*.json "$WORK/results/" 2>/dev/null || true
PROTOCOL=(--scale 8 --steps 2000 --train.max_tokens=2048 --train.warmup_steps=400)
table3() { transformer-mt table3 --data "$WORK/data" --out "$WORK" "${PROTOCOL[@]}" "$@"; }
if [ -z "${REPORT_ONLY:-}" ]; then
  # every row but big, then seeds 2 and 3 of base and (A), then big (three times the steps at
  # twice the width: hours alone), so that no job waits on it
  table3 --rows A,B,C,D,E --seeds 1 --jobs "${JOBS:-2}" \
    && table3 --rows A --seeds 1 2 3 --jobs "${JOBS:-2}" && table3 --seeds 1 --jobs "${JOBS:-2}" \
    || status=$?
fi
table3 --seeds 1 2 3 --report  # the table of every row and seed recorded so far
for run in "$WORK"/runs/*/; do
  mkdir -p "$RESULTS/runs/$(basename "$run")"
  cp "$run/config.json" "$run/metrics.jsonl" "$RESULTS/runs/$(basename "$run")/"
done
cp "$WORK"/table.md "$WORK"/table.csv "$WORK"/table.png "$WORK"/run.log "$RESULTS/"
mkdir -p "$RESULTS/results" && cp "$WORK"/results/*.json "$RESULTS/results/"
exit ${status:-0}
