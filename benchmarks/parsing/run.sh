#!/usr/bin/env bash
# §6.3 on the Treebank sample: trees -> pairs -> prepare -> train (wall-time budget) -> parse
# dev and test -> EVALB scores (COLLINS.prm, and the strict summary).
# Usage: benchmarks/parsing/run.sh MINUTES [OUT_DIR] ; TRAIN_ARGS="..." adds train overrides,
# CONFIG picks the preset (default parsing-cpu), SLOTS=tags keeps POS tags in the targets
# (SLOTS=words: the words; default the placeholder XX),
# REVERSE=1 feeds the words last to first, AVERAGE=N parses with the average of the last N
# checkpoints (§6.1) instead of the last one. The targets' brackets, labels and tags are one
# piece each (prepare --whole-words corpus/symbols.txt); SPLIT_SYMBOLS=1 lets BPE split them.
# Writes OUT/{valid,test}.{plain,balanced,last.balanced}.{parsed,log,scores.json}
# (parse_splits.sh).
set -euo pipefail
MINUTES=$1
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=${TRANSFORMER_MT_DATA:-$REPO/../shared/data}
OUT=${2:-$REPO/runs/parse}
CONFIG=${CONFIG:-parsing-cpu}
SOURCE=${REVERSE:+reversed}
SOURCE=${SOURCE:-words}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
echo "== $(date -u +%FT%TZ) parsing, $MINUTES min, commit $(git -C "$REPO" rev-parse --short HEAD), config $CONFIG ${TRAIN_ARGS:-} SLOTS=${SLOTS:-} REVERSE=${REVERSE:-} AVERAGE=${AVERAGE:-} SPLIT_SYMBOLS=${SPLIT_SYMBOLS:-}"
transformer-mt parse corpus --trees-dir "$DATA/ptb-sample" --out "$OUT/corpus" --slots "${SLOTS:-placeholder}" \
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
MODEL=$OUT/run
if [ -n "${AVERAGE:-}" ]; then
  transformer-mt average --run-dir "$OUT/run" --last "$AVERAGE" --out "$OUT/averaged"
  MODEL=$OUT/averaged
fi
# the paper's search; the search constrained to the sentence's words and balanced brackets
# (not in the paper); with AVERAGE the latter with the last checkpoint too
export SLOTS REVERSE
PARSE=$REPO/benchmarks/parsing/parse_splits.sh
"$PARSE" "$OUT" "$MODEL" plain
"$PARSE" "$OUT" "$MODEL" balanced --word-slots --balanced
[ -z "${AVERAGE:-}" ] || "$PARSE" "$OUT" "$OUT/run" last.balanced --word-slots --balanced
