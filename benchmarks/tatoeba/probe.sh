#!/usr/bin/env bash
# Choosing the Tatoeba preset's shape by measurement: train one candidate de->en for MINUTES on
# one thread (so that two candidates run side by side on a 2-core CPU), then score its last
# checkpoint on dev (beam 4, alpha 0.6: sacreBLEU and chrF). Dev only: the test split is kept
# for the chosen preset's runs (benchmarks/tatoeba/run.sh). The data is prepared once (the
# tatoeba preset's vocabulary) in runs/tatoeba-probe/data; weights stay in runs/, the config,
# metrics, log and dev scores go to benchmarks/results/tatoeba-preset-probes/NAME/.
# Usage: benchmarks/tatoeba/probe.sh NAME MINUTES [train overrides, e.g. --model.d_model=256]
set -euo pipefail
NAME=$1; MINUTES=$2; shift 2
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=${TRANSFORMER_MT_DATA:-$REPO/../shared/data}
WORK=$REPO/runs/tatoeba-probe
OUT=$WORK/$NAME
RESULTS=$REPO/benchmarks/results/tatoeba-preset-probes/$NAME
export OMP_NUM_THREADS=1
mkdir -p "$OUT" "$RESULTS"
exec > >(tee -a "$OUT/run.log") 2>&1
echo "== $(date -u +%FT%TZ) probe $NAME, $MINUTES min, commit $(git -C "$REPO" rev-parse --short HEAD): $*"
(
  flock 9  # two probes started together prepare the data once
  [ -f "$WORK/data/meta.json" ] || transformer-mt prepare --dataset tatoeba-deu-eng --pair de-en \
    --data-dir "$DATA" --config tatoeba --out "$WORK/data"
) 9> "$WORK/.prepare.lock"
# the cooldown keeps the preset's share of the budget (20 of 90 minutes)
transformer-mt train --config tatoeba --data "$WORK/data" --run-dir "$OUT/run" \
  --train.max_minutes="$MINUTES" --train.lr_cooldown_minutes="$(( MINUTES * 2 / 9 ))" \
  --train.threads=1 "$@"
transformer-mt translate --model "$OUT/run" --beam-size 4 --alpha 0.6 \
  --input "$WORK/data/valid.src.txt" --output "$OUT/dev.hyp.en"
transformer-mt evaluate --hyp "$OUT/dev.hyp.en" --ref "$WORK/data/valid.tgt.txt" \
  --json "$OUT/dev.json"
cp "$OUT/run/config.json" "$OUT/run/metrics.jsonl" "$OUT/dev.json" "$OUT/run.log" "$RESULTS/"
