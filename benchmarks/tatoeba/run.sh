#!/usr/bin/env bash
# Tatoeba German-English (159,796 training pairs; dev 5,120, test 4,897) end to end on this
# machine, through Multi30k's pipeline (benchmarks/multi30k/run.sh): prepare -> train the
# `tatoeba` preset for a wall-time budget -> average the last checkpoints (§6.1) -> choose the
# checkpoint and alpha on dev -> translate the test split -> sacreBLEU and chrF with signatures
# -> report.py copies config, logs, metrics, curves and scores to benchmarks/results/<OUT_DIR's
# name>. One thread by default (OMP_NUM_THREADS), so that both directions train side by side on
# a 2-core CPU:
#   benchmarks/tatoeba/run.sh de en 90 & benchmarks/tatoeba/run.sh en de 90 & wait
# Usage: benchmarks/tatoeba/run.sh SRC TGT [MINUTES] [OUT_DIR]
# CONFIG, TRAIN_ARGS, AVERAGE, ALPHAS and BEAMS as for multi30k/run.sh (defaults: the tatoeba
# preset, AVERAGE="5", ALPHAS="0.6 1.0").
set -euo pipefail
SRC=$1; TGT=$2; MINUTES=${3:-90}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${4:-$REPO/runs/tatoeba-$SRC-$TGT}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
DATASET=tatoeba-deu-eng CONFIG=${CONFIG:-tatoeba} ALPHAS=${ALPHAS:-0.6 1.0} \
  TRAIN_ARGS="--train.threads=$OMP_NUM_THREADS ${TRAIN_ARGS:-}" \
  "$REPO/benchmarks/multi30k/run.sh" "$SRC" "$TGT" "$MINUTES" "$OUT"
python3 "$REPO/benchmarks/multi30k/report.py" "$OUT"
