#!/usr/bin/env bash
# Multi30k end to end on this machine: prepare -> train (wall-time budget) -> finish.sh: average
# -> select on val -> translate test_2016_flickr -> sacreBLEU + tokenized lowercased BLEU.
# Usage: benchmarks/multi30k/run.sh SRC TGT MINUTES [OUT_DIR]   e.g. run.sh en de 85
# CONFIG=path.yaml (or a preset name) picks another config (default: the packaged preset
# multi30k; benchmarks/multi30k/*.yaml hold the recipes of earlier recorded runs).
# TRAIN_ARGS="--train.max_steps=9800 ..." adds overrides to `train`.
# LC_TOK=1 trains on the literature's lowercased, tokenized multi30k/tok/*.lc.norm.tok files
# instead of the cased text (finish.sh then scores the tokenized hypotheses as they are).
# BIDIRECTIONAL_EPOCHS=N trains the first N epochs on both directions of every pair (Ding et al.
# 2021, bidirectional_data.py), the rest on SRC->TGT.
# AVERAGE="5 10", ALPHAS="0.6 1.0" and BEAMS="4 8" pass to finish.sh (averaging, selection on
# val, test); the config's train.keep_last must keep as many checkpoints as AVERAGE averages.
# DATASET=tatoeba-deu-eng trains and tests on Tatoeba instead (benchmarks/tatoeba/run.sh).
# Weights stay in OUT_DIR (default runs/multi30k-SRC-TGT, git-ignored); the config, logs and
# scores to commit are copied to benchmarks/results/multi30k-SRC-TGT/ by report.py.
set -euo pipefail
SRC=$1; TGT=$2; MINUTES=$3
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=${TRANSFORMER_MT_DATA:-$REPO/../shared/data}
OUT=${4:-$REPO/runs/multi30k-$SRC-$TGT}
CONFIG=${CONFIG:-multi30k}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
echo "== $(date -u +%FT%TZ) ${DATASET:-multi30k} $SRC->$TGT, $MINUTES min, commit $(git -C "$REPO" rev-parse --short HEAD), config $CONFIG ${TRAIN_ARGS:-}" \
  "LC_TOK=${LC_TOK:-} BIDIRECTIONAL_EPOCHS=${BIDIRECTIONAL_EPOCHS:-} AVERAGE=${AVERAGE:-} ALPHAS=${ALPHAS:-} BEAMS=${BEAMS:-}"

if [ ! -f "$OUT/data/meta.json" ]; then
  transformer-mt prepare --dataset "${DATASET:-multi30k}${LC_TOK:+-tok}" --pair "$SRC-$TGT" --data-dir "$DATA" \
    --config "$CONFIG" --out "$OUT/data"
fi
if [ -n "${BIDIRECTIONAL_EPOCHS:-}" ]; then
  # first both directions of every pair for that many epochs, then SRC->TGT only (one run
  # directory, one schedule; the second leg resumes despite the other data's fingerprint)
  python3 "$REPO/benchmarks/multi30k/bidirectional_data.py" "$OUT/data" "$OUT/data-bidirectional"
  transformer-mt train --config "$CONFIG" --data "$OUT/data-bidirectional" --run-dir "$OUT/run" \
    --train.max_minutes="$MINUTES" --train.max_epochs="$BIDIRECTIONAL_EPOCHS" ${TRAIN_ARGS:-}
  RESUME_ARGS="--ignore-mismatch --train.max_epochs=0"
fi
transformer-mt train --config "$CONFIG" --data "$OUT/data" --run-dir "$OUT/run" \
  --train.max_minutes="$MINUTES" ${TRAIN_ARGS:-} ${RESUME_ARGS:-}
"$REPO/benchmarks/multi30k/finish.sh" "$OUT" "$SRC" "$TGT"
