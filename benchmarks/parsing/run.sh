#!/usr/bin/env bash
# §6.3 on the Treebank sample: trees -> pairs -> prepare -> train (wall-time budget) -> parse
# dev and test -> EVALB scores (COLLINS.prm, and the strict summary).
# Usage: benchmarks/parsing/run.sh MINUTES [OUT_DIR] ; TRAIN_ARGS="..." adds train overrides,
# CONFIG picks the preset (default parsing-cpu), SLOTS what stands for a word in the targets
# (parse corpus --slots: placeholder, tags or words; default its default, the POS tags),
# REVERSE=1 feeds the words last to first, AVERAGE=N parses with the average of the last N
# checkpoints (§6.1) instead of the last one, SELECT_FROM=N instead the checkpoint from step N
# on that parses dev best with the search of --word-slots --balanced (select_checkpoint.sh; the
# choice in OUT/balanced.selected.json). recipe.sh gives the reading parser's settings. The
# targets' brackets, labels and tags are one piece each (prepare --whole-words
# corpus/symbols.txt); SPLIT_SYMBOLS=1 lets BPE split them.
# Writes OUT/{valid,test}.{plain,balanced,last.balanced}.{parsed,log,scores.json}
# (parse_splits.sh).
set -euo pipefail
[ -z "${SELECT_FROM:-}" ] || [ -z "${AVERAGE:-}" ] || { echo "SELECT_FROM or AVERAGE, not both" >&2; exit 2; }
MINUTES=$1
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=${TRANSFORMER_MT_DATA:-$REPO/../shared/data}
OUT=${2:-$REPO/runs/parse}
CONFIG=${CONFIG:-parsing-cpu}
SOURCE=${REVERSE:+reversed}
SOURCE=${SOURCE:-words}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
echo "== $(date -u +%FT%TZ) parsing, $MINUTES min, commit $(git -C "$REPO" rev-parse --short HEAD), config $CONFIG ${TRAIN_ARGS:-} SLOTS=${SLOTS:-} REVERSE=${REVERSE:-} AVERAGE=${AVERAGE:-} SELECT_FROM=${SELECT_FROM:-} SPLIT_SYMBOLS=${SPLIT_SYMBOLS:-}"
transformer-mt parse corpus --trees-dir "$DATA/ptb-sample" --out "$OUT/corpus" ${SLOTS:+--slots "$SLOTS"} \
  ${REVERSE:+--reverse}
WHOLE_WORDS=(--whole-words "$OUT/corpus/symbols.txt")
[ -z "${SPLIT_SYMBOLS:-}" ] || WHOLE_WORDS=()
if [ ! -f "$OUT/data/meta.json" ]; then
  transformer-mt prepare --train-src "$OUT/corpus/train.$SOURCE" --train-tgt "$OUT/corpus/train.tree" \
    --valid-src "$OUT/corpus/valid.$SOURCE" --valid-tgt "$OUT/corpus/valid.tree" --config "$CONFIG" \
    --max-length 1000 --src-lang en --tgt-lang tree --out "$OUT/data" "${WHOLE_WORDS[@]}"
fi
transformer-mt train --config "$CONFIG" --data "$OUT/data" --run-dir "$OUT/run" \
  --train.max_minutes="$MINUTES" --train.valid_bleu=false ${TRAIN_ARGS:-}
export SLOTS REVERSE
HERE=$REPO/benchmarks/parsing
if [ -n "${SELECT_FROM:-}" ]; then
  # dev F1 of each checkpoint under the constrained search; the paper's search with the best
  FROM_STEP=$SELECT_FROM "$HERE/select_checkpoint.sh" "$OUT" balanced --word-slots --balanced
  best=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["selected"])' \
    "$OUT/balanced.selected.json")
  "$HERE/parse_splits.sh" "$OUT" "$OUT/run/checkpoints/$best" plain
  exit
fi
MODEL=$OUT/run
if [ -n "${AVERAGE:-}" ]; then
  transformer-mt average --run-dir "$OUT/run" --last "$AVERAGE" --out "$OUT/averaged"
  MODEL=$OUT/averaged
fi
# the paper's search; the search constrained to the sentence's words and balanced brackets
# (not in the paper); with AVERAGE the latter with the last checkpoint too
"$HERE/parse_splits.sh" "$OUT" "$MODEL" plain
"$HERE/parse_splits.sh" "$OUT" "$MODEL" balanced --word-slots --balanced
[ -z "${AVERAGE:-}" ] || "$HERE/parse_splits.sh" "$OUT" "$OUT/run" last.balanced --word-slots --balanced
