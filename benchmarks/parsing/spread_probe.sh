#!/usr/bin/env bash
# When does a parsing model's encoder stop telling words apart? Trains a short run of the
# parsing-cpu preset on a corpus diagnose.sh (or run.sh) prepared, saving every EVERY steps, and
# prints each checkpoint's encoder spread and source reliance (source_reliance.py: 0 spread is
# one vector for every word of every sentence). One thread on CORE; the schedule is diagnose.sh's
# (warmup WARMUP, default 500) so that its first steps are those of a diagnose run.
#   benchmarks/parsing/spread_probe.sh PREPARED OUT STEPS [CORE] [--section.key=value ...]
# PREPARED: a folder with corpus/ and data/ (a diagnose.sh run's), e.g. OUT/words-postnorm.
set -euo pipefail
PREPARED=$1 OUT=$2 STEPS=$3 CORE=${4:-0}
shift 3; [ $# -eq 0 ] || shift
HERE=$(cd "$(dirname "$0")" && pwd)
on=(env OMP_NUM_THREADS=1 taskset -c "$CORE")
mkdir -p "$OUT"
exec > >(tee -a "$OUT/probe.log") 2>&1
echo "== $(date -u +%FT%TZ) spread probe, $STEPS steps, $PREPARED, $*"
"${on[@]}" transformer-mt train --config parsing-cpu --data "$PREPARED/data" --run-dir "$OUT/run" \
  --train.max_minutes=0 --train.max_steps="$STEPS" --train.warmup_steps="${WARMUP:-500}" \
  --train.valid_every="${EVERY:-100}" --train.save_every="${EVERY:-100}" --train.keep_last=100 \
  --train.valid_bleu=false --train.threads=1 "$@" 2>&1 | grep -E "validation|resuming|error" || true
for checkpoint in "$OUT"/run/checkpoints/step_*/; do
  checkpoint=${checkpoint%/}
  echo "-- $(basename "$checkpoint")"
  "${on[@]}" python3 "$HERE/source_reliance.py" --model "$checkpoint" --pairs 30 \
    --sources "$PREPARED/corpus/valid.words" --targets "$PREPARED/corpus/valid.tree" \
    --json "$OUT/reliance-$(basename "$checkpoint").json"
done
