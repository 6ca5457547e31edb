#!/usr/bin/env bash
# Averaging against the last checkpoint, on one finished run: the last checkpoint, the average
# of the last 5 checkpoints and of the last 10 decode the validation set (beam 4, the run's
# decoding config) and are scored with sacreBLEU, each average against the last checkpoint with
# paired bootstrap. With train.cooldown_saves=5 the last 5 are the cooldown's and the last 10
# add 5 from before it (what "the last N" averaged with saves by steps alone). Single-thread,
# on core CORE.
#   benchmarks/averaging/average_vs_last.sh DATA_DIR RUN_DIR OUT [CORE]
set -euo pipefail
DATA=$1 RUN=$2 OUT=$3 CORE=${4:-0}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1
on_core() { taskset -c "$CORE" "$@"; }
declare -A MODEL=([last]="$RUN")
for n in 5 10; do
  on_core transformer-mt average --run-dir "$RUN" --last "$n" --out "$OUT/averaged-$n" 2>&1 |
    tee "$OUT/average-$n.log"
  MODEL[averaged-$n]=$OUT/averaged-$n
done
for name in last averaged-5 averaged-10; do
  on_core transformer-mt translate --model "${MODEL[$name]}" --input "$DATA/valid.src.txt" \
    --output "$OUT/valid.$name.hyp"
done
on_core transformer-mt evaluate --hyp "$OUT/valid.last.hyp" --ref "$DATA/valid.tgt.txt" \
  --json "$OUT/valid.last.json"
for name in averaged-5 averaged-10; do
  on_core transformer-mt evaluate --hyp "$OUT/valid.$name.hyp" --ref "$DATA/valid.tgt.txt" \
    --baseline "$OUT/valid.last.hyp" --json "$OUT/valid.$name.json"
done
