#!/usr/bin/env bash
# A preset's recipe (multi30k's, tatoeba's) pre-norm with qkv gain 1 (what both presets were)
# against the same recipe faithful (post-norm, the paper's code's qkv initialisation, gain
# 1/sqrt(2): multi30k's now) over the preset's whole budget, one seed at
# a time: the two runs side by side, one single-thread run per core, on a step budget (the same
# end on any CPU; 18,000 steps is what the preset's 88 minutes gave on a 2-core Zen 4) whose
# last lr_cooldown_share is the cooldown, with 5 saves spread over it (train.cooldown_saves) and
# 5 before it in train.keep_last=10. Then finish.sh on each (averages of the last 5 and 10 and
# the last checkpoint, the one best on val decodes test at the preset's alpha) and a paired
# bootstrap of post-norm's test translations against pre-norm's (sacreBLEU and chrF, and
# tokenized lowercased BLEU where the test set has a tokenized reference: Multi30k's).
#   benchmarks/multi30k/preset_norms.sh DATA_DIR OUT [STEPS] [SEEDS] [PRESET] [SRC TGT]
# DATA_DIR: the preset's prepared data (transformer-mt prepare). Resumable: run it again and
# each run goes on from its last checkpoint; a finished seed is skipped.
set -euo pipefail
PREPARED=$1 OUT=$2 STEPS=${3:-18000} SEEDS=${4:-"1 2 3"} PRESET=${5:-multi30k} SRC=${6:-en} TGT=${7:-de}
HERE=$(cd "$(dirname "$0")" && pwd) REPO=$(cd "$(dirname "$0")/../.." && pwd)
ALPHA=$(python3 -c "from transformer_mt.config import load_config; print(load_config('$PRESET').decode.length_penalty)")
[ "$PRESET" = tatoeba ] && export DATASET=tatoeba-deu-eng
source "$HERE/test_files.sh"
on_core() { local core=$1; shift; OMP_NUM_THREADS=1 taskset -c "$core" "$@"; }
train() {  # NORM SEED CORE
  local dir=$OUT/$1norm-seed$2 norm=(--model.norm_first=true --model.qkv_init_gain=1)
  [ -f "$dir/test.hyp.$TGT" ] && return  # finished and scored
  [ "$1" = post ] && norm=(--model.norm_first=false --model.qkv_init_gain=0.7071067811865476)
  mkdir -p "$dir"; ln -sfn "$(cd "$PREPARED" && pwd)" "$dir/data"
  on_core "$3" transformer-mt train --config "$PRESET" --data "$PREPARED" --run-dir "$dir/run" \
    --train.seed="$2" --train.max_minutes=0 --train.max_steps="$STEPS" --train.cooldown_saves=5 \
    --train.keep_last=10 --train.threads=1 "${norm[@]}" >> "$dir/train.log" 2>&1
  AVERAGE="5 10" ALPHAS=$ALPHA on_core "$3" "$HERE/finish.sh" "$dir" "$SRC" "$TGT" \
    > "$dir/finish.log" 2>&1
}
mkdir -p "$OUT"
for seed in $SEEDS; do
  train post "$seed" 0 & post=$!; train pre "$seed" 1 & pre=$!
  wait "$post"; wait "$pre"
  tok=()  # tokenized lowercased BLEU too where the test set has a tokenized reference
  [ -n "$TOKREF" ] && tok=(--lang "$TGT" "${TOK_ARGS[@]}" --tok-ref "$TOKREF")
  transformer-mt evaluate --hyp "$OUT/postnorm-seed$seed/test.hyp.$TGT" --ref "$TEST_REF" \
    "${tok[@]}" --baseline "$OUT/prenorm-seed$seed/test.hyp.$TGT" \
    --json "$OUT/paired-seed$seed.json"
done
