#!/usr/bin/env bash
# Which parsing models read their sentence? Short runs of the parsing-cpu preset at equal steps,
# each slot kind of the targets (placeholder XX, POS tags, the words themselves) with post-norm
# (the paper's) and pre-norm, the paper's code's initialisation: run.sh on a step budget
# (warmup a third of it: the preset's 4,000 would outlast the run), dev parsed with the paper's
# search and with --word-slots --balanced, and source_reliance.py on the last checkpoint.
# Single-thread runs, one per core of CORES at a time (default "0 1"; CORES=1 runs them one
# after another on core 1, leaving core 0 to other work), NORMS the norms (default "post pre");
# DEVICE=cuda trains all of them at once on a GPU. EXTRA adds train overrides to every run and
# then needs a NAME that the run folders end with (EXTRA="--train.lr_scale=0.25" NAME=lr0.25:
# OUT/words-postnorm-lr0.25, ...). Resumable: a finished run is skipped, a
# killed one resumes from its last checkpoint. Then diagnose_report.py OUT writes the table.
#   benchmarks/parsing/diagnose.sh OUT [STEPS] [SLOTS...]     (default 1500, all three kinds)
set -euo pipefail
OUT=$1 STEPS=${2:-1500}
shift; [ $# -eq 0 ] || shift
KINDS=("$@"); [ ${#KINDS[@]} -gt 0 ] || KINDS=(placeholder tags words)
HERE=$(cd "$(dirname "$0")" && pwd)
one() {  # SLOTS NORM CORE
  local dir=$OUT/$1-$2norm${NAME:+-$NAME} on=() where=()
  [ -f "$dir/reliance.json" ] && return
  if [ "${DEVICE:-cpu}" = cpu ]; then on=(env OMP_NUM_THREADS=1 taskset -c "$3"); where=(--train.threads=1)
  else where=(--train.device="$DEVICE"); fi
  mkdir -p "$dir"
  SLOTS=$1 SPLITS=valid TRAIN_ARGS="--train.max_minutes=0 --train.max_steps=$STEPS \
--train.warmup_steps=$((STEPS / 3)) --train.valid_every=500 --train.save_every=500 \
--model.norm_first=$([ "$2" = pre ] && echo true || echo false) ${where[*]} ${EXTRA:-}" \
    "${on[@]}" "$HERE/run.sh" 0 "$dir" > "$dir/diagnose.log" 2>&1
  local last; last=$(ls -d "$dir"/run/checkpoints/step_* | tail -n 1)
  "${on[@]}" python3 "$HERE/source_reliance.py" --model "$last" \
    --sources "$dir/corpus/valid.words" --targets "$dir/corpus/valid.tree" \
    --json "$dir/reliance.json" >> "$dir/diagnose.log" 2>&1
}
[ -z "${EXTRA:-}" ] || [ -n "${NAME:-}" ] || { echo "EXTRA needs a NAME for its runs" >&2; exit 2; }
read -ra CORES <<< "${CORES:-0 1}"
read -ra NORMS <<< "${NORMS:-post pre}"
mkdir -p "$OUT"
slot=0
for kind in "${KINDS[@]}"; do
  for norm in "${NORMS[@]}"; do
    one "$kind" "$norm" "${CORES[$slot]}" &
    slot=$(( (slot + 1) % ${#CORES[@]} ))
    if [ "${DEVICE:-cpu}" = cpu ] && [ "$slot" -eq 0 ]; then wait; fi
  done
done
wait
