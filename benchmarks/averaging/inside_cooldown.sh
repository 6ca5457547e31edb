#!/usr/bin/env bash
# Does averaging checkpoints spread across the cooldown beat the last checkpoint? One run of a
# preset on a step budget (the same end on any CPU) whose cooldown (the preset's share) saves
# 5 checkpoints, one after each fifth of it (train.cooldown_saves=5), after save_every's before
# it; then average_vs_last.sh scores the last checkpoint against the averages of the last 5
# (the cooldown's) and the last 10. Single-thread, on core CORE. EXTRA: more overrides.
#   benchmarks/averaging/inside_cooldown.sh DATA_DIR OUT PRESET STEPS [SEED] [CORE]
# Resumable: run it again and training goes on from its last checkpoint.
set -euo pipefail
DATA=$1 OUT=$2 PRESET=$3 STEPS=$4 SEED=${5:-1} CORE=${6:-0}
read -r -a EXTRA <<< "${EXTRA:-}"
mkdir -p "$OUT"
OMP_NUM_THREADS=1 taskset -c "$CORE" transformer-mt train --config "$PRESET" --data "$DATA" \
  --run-dir "$OUT/run" --train.seed="$SEED" --train.max_minutes=0 --train.max_steps="$STEPS" \
  --train.cooldown_saves=5 --train.keep_last=10 --train.save_every=500 \
  --train.valid_every=1000 --train.threads=1 "${EXTRA[@]}" > "$OUT/train.log" 2>&1
"$(dirname "$0")/average_vs_last.sh" "$DATA" "$OUT/run" "$OUT" "$CORE"
