#!/usr/bin/env bash
# Multi30k end to end on this machine: prepare -> train (wall-time budget) -> average ->
# select on val -> translate test_2016_flickr -> sacreBLEU + tokenized lowercased BLEU.
# Usage: benchmarks/multi30k/run.sh SRC TGT MINUTES [OUT_DIR]   e.g. run.sh en de 85
# CONFIG=path.yaml picks another config (default benchmarks/multi30k/multi30k.yaml).
# AVERAGE="5 10" averages the last 5 and the last 10 checkpoints (default "5"; the config's
# train.keep_last must keep as many); val sacreBLEU selects among them and the last checkpoint.
# Weights stay in OUT_DIR (default runs/multi30k-SRC-TGT, git-ignored); the config, logs and
# scores to commit are copied to benchmarks/results/multi30k-SRC-TGT/ by report.py.
set -euo pipefail
SRC=$1; TGT=$2; MINUTES=$3
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=${TRANSFORMER_MT_DATA:-$REPO/../shared/data}
OUT=${4:-$REPO/runs/multi30k-$SRC-$TGT}
CONFIG=${CONFIG:-$REPO/benchmarks/multi30k/multi30k.yaml}
AVERAGE=${AVERAGE:-5}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
echo "== $(date -u +%FT%TZ) multi30k $SRC->$TGT, $MINUTES min, commit $(git -C "$REPO" rev-parse --short HEAD), config $CONFIG"

[ -f "$OUT/data/meta.json" ] || transformer-mt prepare --dataset multi30k --pair "$SRC-$TGT" \
  --data-dir "$DATA" --config "$CONFIG" --out "$OUT/data"
transformer-mt train --config "$CONFIG" --data "$OUT/data" --run-dir "$OUT/run" \
  --train.max_minutes="$MINUTES"
models=""
for n in $AVERAGE; do
  transformer-mt average --run-dir "$OUT/run" --last "$n" --out "$OUT/averaged-$n"
  models="$models averaged-$n"
done

# select on val: an averaged model or the last checkpoint, by val sacreBLEU
best=""; best_bleu=-1
for model in $models run; do
  transformer-mt translate --model "$OUT/$model" --input "$OUT/data/valid.src.txt" \
    --output "$OUT/val.$model.$TGT"
  transformer-mt evaluate --hyp "$OUT/val.$model.$TGT" --ref "$OUT/data/valid.tgt.txt" \
    --json "$OUT/val.$model.json"
  bleu=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['bleu'])" "$OUT/val.$model.json")
  if python3 -c "import sys; sys.exit(not float(sys.argv[1]) > float(sys.argv[2]))" "$bleu" "$best_bleu"; then
    best=$model; best_bleu=$bleu
  fi
done
echo "selected on val: $best ($best_bleu)"
echo "$best" > "$OUT/selected"

transformer-mt translate --model "$OUT/$best" --input "$DATA/multi30k/test_2016_flickr.$SRC.gz" \
  --output "$OUT/test.hyp.$TGT"
transformer-mt evaluate --hyp "$OUT/test.hyp.$TGT" --ref "$DATA/multi30k/test_2016_flickr.$TGT.gz" \
  --json "$OUT/test.sacrebleu.json"
TOKREF=$DATA/multi30k/tok/test_2016_flickr.lc.norm.tok.$TGT.gz
if [ -f "$TOKREF" ]; then
  transformer-mt evaluate --hyp "$OUT/test.hyp.$TGT" --ref "$DATA/multi30k/test_2016_flickr.$TGT.gz" \
    --lang "$TGT" --lowercase --tok-ref "$TOKREF" --json "$OUT/test.tokbleu.json"
fi
echo "== $(date -u +%FT%TZ) done"
