#!/usr/bin/env bash
# Table 3 on Multi30k en->de at the CPU protocol (docs/table3.md): prepare once, run every row
# but big with seed 1, then with seed 2, the base row's third seed, then big's two seeds
# (resumable over sessions: re-run to go on; the results already committed are taken, not
# trained again), then copy what is worth keeping (per row: config, metrics, result; the
# table, its plots, the driver's log; never checkpoints) into the results folder.
# Usage: benchmarks/table3/run.sh [RESULTS_DIR] ; JOBS rows at once (default 2), WORK the run
# folder (default runs/table3-scale4), DEVICE where they train (default: the CPU; DEVICE=cuda
# JOBS=16 trains 16 rows at once on one GPU), SEEDS one pass over these seeds instead of the
# order below (of the rows in ROWS, default all: e.g. SEEDS="1 2" ROWS=A,B,C,D,E on a GPU),
# REPORT_ONLY=1 trains nothing (the table so far, copied).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=${TRANSFORMER_MT_DATA:-$REPO/../shared/data}
RESULTS=${1:-$REPO/benchmarks/results/table3-multi30k-scale4}
WORK=${WORK:-$REPO/runs/table3-scale4}
mkdir -p "$WORK/results" "$RESULTS"
[ -f "$WORK/run.log" ] || cp "$RESULTS/run.log" "$WORK/" 2>/dev/null || true  # the log goes on
exec > >(tee -a "$WORK/run.log") 2>&1
echo "== $(date -u +%FT%TZ) table3, commit $(git -C "$REPO" rev-parse --short HEAD)"
if [ ! -f "$WORK/data/meta.json" ]; then
  transformer-mt prepare --dataset multi30k --pair en-de --data-dir "$DATA" --vocab-size 8000 \
    --out "$WORK/data"
fi
# the committed results are the record: they replace a run folder's older copies of the same rows
# (and their runs' metrics, for the curves, join a run folder that lacks them: a fresh machine's)
cp "$RESULTS"/results/*.json "$WORK/results/" 2>/dev/null || true
mkdir -p "$WORK/runs" && cp -rn "$RESULTS/runs/." "$WORK/runs/" 2>/dev/null || true
# chosen by the base row's probes (docs/table3.md; the results folder's protocol-probes/): a
# quarter of the paper's sizes, 3,000 steps of 2,048-token batches (big 9,000), eq. (3) at the
# paper-size d_model times 5 (2.5 at d_model 128, the multi30k recipe's rate) with the paper's
# 4,000 warmup steps, and a linear cooldown over the last 22.7 % of the steps (the recipe's)
PROTOCOL=(--scale 4 --steps 3000 --valid-every 500 --train.max_tokens=2048 --train.bf16=auto
          --train.warmup_steps=4000 --train.lr_scale=5 --train.lr_cooldown_share=0.2273)
# a checkpoint every 10 minutes as well as every quarter of a row's steps (not part of the
# protocol: a bit-exact resume gives the same numbers), so that a session's end costs a big row
# (hours) at most 10 minutes
table3() {
  transformer-mt table3 --data "$WORK/data" --out "$WORK" "${PROTOCOL[@]}" \
    --train.save_every_minutes=10 ${DEVICE:+--device "$DEVICE"} "$@"
}
if [ -z "${REPORT_ONLY:-}" ] && [ -n "${SEEDS:-}" ]; then
  table3 ${ROWS:+--rows "$ROWS"} --seeds $SEEDS --jobs "${JOBS:-2}" || status=$?
elif [ -z "${REPORT_ONLY:-}" ]; then
  # every row but big with seed 1, then with seed 2, base's seed 3, then big (three times the
  # steps at twice the width: hours a seed), so that no job waits on it and a session's end
  # leaves whole seeds of most rows
  table3 --rows A,B,C,D,E --seeds 1 --jobs "${JOBS:-2}" \
    && table3 --rows A,B,C,D,E --seeds 1 2 --jobs "${JOBS:-2}" \
    && table3 --rows base --seeds 1 2 3 --jobs "${JOBS:-2}" \
    && table3 --seeds 1 2 --jobs "${JOBS:-2}" || status=$?
fi
# the table of every row and seed recorded so far
table3 --seeds $(printf '%s\n' 1 2 3 ${SEEDS:-} | sort -nu) --report
for run in "$WORK"/runs/*/; do  # the rows scored; one still training comes with its result
  name=$(basename "$run")
  [ -f "$WORK/results/$name.json" ] || continue
  mkdir -p "$RESULTS/runs/$name"
  cp "$run/config.json" "$run/metrics.jsonl" "$RESULTS/runs/$name/"
done
cp "$WORK"/table.md "$WORK"/table.csv "$WORK"/table.png "$WORK"/run.log "$RESULTS/"
[ ! -f "$WORK/curves.png" ] || cp "$WORK/curves.png" "$RESULTS/"
mkdir -p "$RESULTS/results" && cp "$WORK"/results/*.json "$RESULTS/results/"
exit ${status:-0}
