#!/usr/bin/env bash
# Table 3 on Multi30k en->de at the CPU protocol (docs/table3.md): prepare once, run every row
# (resumable: re-run to go on), then copy what is worth keeping (per row: config, metrics,
# result; the table, its plot, the driver's log; never checkpoints) into the results folder.
# Usage: benchmarks/table3/run.sh [RESULTS_DIR] ; ROWS=A,C and SEEDS="1 2 3" choose rows and
# seeds, JOBS rows at once (default 2), WORK the run folder (default runs/table3-cpu).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=${TRANSFORMER_MT_DATA:-$REPO/../shared/data}
RESULTS=${1:-$REPO/benchmarks/results/table3-multi30k-cpu}
WORK=${WORK:-$REPO/runs/table3-cpu}
mkdir -p "$WORK" "$RESULTS"
exec > >(tee -a "$WORK/run.log") 2>&1
echo "== $(date -u +%FT%TZ) table3, commit $(git -C "$REPO" rev-parse --short HEAD), rows ${ROWS:-all} seeds ${SEEDS:-1}"
if [ ! -f "$WORK/data/meta.json" ]; then
  transformer-mt prepare --dataset multi30k --pair en-de --data-dir "$DATA" --vocab-size 8000 \
    --out "$WORK/data"
fi
PROTOCOL=(--scale 8 --steps 2000 --train.max_tokens=2048 --train.warmup_steps=400)
transformer-mt table3 --data "$WORK/data" --out "$WORK" ${ROWS:+--rows "$ROWS"} \
  --seeds ${SEEDS:-1} --jobs "${JOBS:-2}" "${PROTOCOL[@]}" || status=$?
# the table of every row and seed recorded so far, whichever command recorded it
transformer-mt table3 --data "$WORK/data" --out "$WORK" --seeds 1 2 3 --report "${PROTOCOL[@]}"
for run in "$WORK"/runs/*/; do
  name=$(basename "$run")
  mkdir -p "$RESULTS/runs/$name"
  cp "$run/config.json" "$run/metrics.jsonl" "$RESULTS/runs/$name/"
done
cp "$WORK"/table.md "$WORK"/table.csv "$WORK"/table.png "$WORK"/run.log "$RESULTS/"
mkdir -p "$RESULTS/results" && cp "$WORK"/results/*.json "$RESULTS/results/"
exit ${status:-0}
