#!/usr/bin/env bash
# The measurement in benchmarks/results/bf16-memory-full-run: the packaged Multi30k recipe
# (`--config multi30k`, 88 minutes) in bf16 and in float32, side by side, one thread each;
# resident memory is `rss_mib` in each run's metrics.jsonl (every 100 steps).
# Usage: benchmarks/memory/full_run.sh DATA_DIR [OUT_DIR]
#   DATA_DIR: transformer-mt prepare --dataset multi30k --pair en-de --config multi30k ...
set -euo pipefail
DATA=$1; OUT=${2:-runs/mem}
mkdir -p "$OUT"
for run in bf16:true fp32:false; do
  transformer-mt train --config multi30k --data "$DATA" --run-dir "$OUT/${run%%:*}" \
    --train.bf16="${run##*:}" --train.threads=1 > "$OUT/${run%%:*}.log" 2>&1 &
done
wait
