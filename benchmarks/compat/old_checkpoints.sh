#!/usr/bin/env bash
# Do checkpoints and model directories written by an older commit load and resume here?
# Trains 10 steps of the tiny preset on the tests' synthetic corpus with OLD_COMMIT's code
# (a git worktree), resumes that run to step 20 with this checkout's code, trains 20 steps from
# scratch with this checkout's code, and compares: losses, weights and Adam state (sha256); then
# translates with the old step-10 checkpoint under both codes and compares the outputs.
# Usage: benchmarks/compat/old_checkpoints.sh OLD_COMMIT WORK_DIR
set -euo pipefail
OLD=$1; WORK=$2
REPO=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK"; mkdir -p "$WORK"
git -C "$REPO" worktree add -q --detach "$WORK/old" "$OLD"
trap 'git -C "$REPO" worktree remove --force "$WORK/old"' EXIT
old() { (cd "$WORK" && PYTHONPATH="$WORK/old/src" python3 -m transformer_mt "$@"); }
new() { (cd "$WORK" && PYTHONPATH="$REPO/src" python3 -m transformer_mt "$@"); }
PYTHONPATH="$REPO/tests" python3 -c "from synthetic import write_corpus; from pathlib import Path; write_corpus(Path('$WORK/corpus'))"
C=$WORK/corpus
old prepare --train-src "$C/train.en" --train-tgt "$C/train.de" --valid-src "$C/valid.en" \
  --valid-tgt "$C/valid.de" --vocab-size 500 --out "$WORK/data" > "$WORK/prepare.log" 2>&1
ARGS=(--config tiny --data "$WORK/data" --train.max_tokens=512 --train.warmup_steps=50
      --train.save_every=10 --train.valid_every=20 --train.log_every=5)
old train "${ARGS[@]}" --run-dir "$WORK/run" --train.max_steps=10 > "$WORK/old.log" 2>&1
new train "${ARGS[@]}" --run-dir "$WORK/run" --train.max_steps=20 > "$WORK/resumed.log" 2>&1
new train "${ARGS[@]}" --run-dir "$WORK/fresh" --train.max_steps=20 > "$WORK/fresh.log" 2>&1
M=$WORK/run/checkpoints/step_00000010
old translate --model "$M" --input "$C/test.en" --output "$WORK/old.hyp" 2> "$WORK/translate-old.log"
new translate --model "$M" --input "$C/test.en" --output "$WORK/new.hyp" 2> "$WORK/translate-new.log"
python3 - "$WORK" "$OLD" "$(git -C "$REPO" rev-parse --short HEAD)" <<'PY'
import hashlib, json, sys
from pathlib import Path
work, old, new = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
def losses(run):
    return {r["step"]: r["loss"] for r in map(json.loads, open(run / "metrics.jsonl"))
            if r["kind"] == "train"}
def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()
last = "checkpoints/step_00000020"
result = {
    "old_commit": old, "new_commit": new,
    "losses_identical": losses(work / "run") == losses(work / "fresh"),
    "steps_compared": sorted(losses(work / "fresh")),
    "weights_identical": sha(work / "run" / last / "model.safetensors")
        == sha(work / "fresh" / last / "model.safetensors"),
    "adam_state_identical": sha(work / "run" / last / "optimizer.safetensors")
        == sha(work / "fresh" / last / "optimizer.safetensors"),
    "old_checkpoint_translates_the_same": (work / "old.hyp").read_bytes()
        == (work / "new.hyp").read_bytes(),
    "warnings_loading_the_old_checkpoint": [
        line.split(" WARNING ", 1)[1] for line in
        (work / "translate-new.log").read_text().splitlines() if " WARNING " in line],
}
print(json.dumps(result, indent=2))
PY
