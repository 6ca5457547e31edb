#!/usr/bin/env bash
# Multi30k en->de recipes trained at once on one GPU for the number of steps the 2-core CPU fits
# in its 90 minutes; each is averaged over its last 5 checkpoints (250 steps apart) and, like its
# last checkpoint, scored on test_2016_flickr with tokenized lowercased BLEU. A GPU takes minutes
# to say which recipe is worth the CPU's 90. Results: benchmarks/results/multi30k-recipe-sweep-gpu/.
# Usage: OUT=DIR benchmarks/multi30k/gpu_variants.sh "NAME DATA CONFIG STEPS [--overrides...]" ...
#   DATA: cased (multi30k train/val) or lc (the literature's tok/*.lc.norm.tok files)
#   e.g. OUT=/tmp/o benchmarks/multi30k/gpu_variants.sh \
#          "ctrl cased benchmarks/multi30k/multi30k-tiny-prenorm.yaml 8000" \
#          "ctrl-s2 cased benchmarks/multi30k/multi30k-tiny-prenorm.yaml 8000 --train.seed=2"
#   VALID_EVERY (2000), MINUTES (0: no limit) and DEV (cuda; cpu with tiny STEPS for a smoke run)
#   apply to all; sacremoses wheels in .devdata/whl are installed if present.
set -u
[ -d .devdata/whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .devdata/whl/*.whl
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2
export D=${TRANSFORMER_MT_DATA:-../shared/data}/multi30k; W=${WORK:-/tmp/variants}; mkdir -p "$W" "$OUT"
TM="python3 -m transformer_mt"
files() { # cased|lc -> the directory and the infix of its files
  if [ "$1" = lc ]; then echo "$D/tok .lc.norm.tok"; else echo "$D "; fi
}
prepare() { # cased|lc
  local dir mid; read -r dir mid <<< "$(files "$1")"
  [ -f "$W/$1/meta.json" ] || $TM prepare --train-src "$dir/train$mid.en.gz" \
    --train-tgt "$dir/train$mid.de.gz" --valid-src "$dir/val$mid.en.gz" \
    --valid-tgt "$dir/val$mid.de.gz" --vocab-size 8000 --out "$W/$1" > "$W/prep-$1.log" 2>&1
}
score() { # name data model
  local n=$1 data=$2 m=$3 dir mid; read -r dir mid <<< "$(files "$data")"
  $TM translate --model "$W/$n/$m" --input "$dir/test_2016_flickr$mid.en.gz" --output "$W/$n/test.$m.de" --device "${DEV:-cuda}" \
    --batch-size 128 > /dev/null 2>&1
  python3 - "$W/$n/test.$m.de" "$n" "$m" "$W/$n/run/metrics.jsonl" "$data" <<'PY' >> "$OUT/scores.txt"
import json, os, sys
from transformer_mt.evaluate import read_text, tokenized_bleu
hyp, n, m, metrics, data = sys.argv[1:]
ref = read_text(os.environ["D"] + "/tok/test_2016_flickr.lc.norm.tok.de.gz")
# a model of the lc files writes tokenized text: scored as it is (evaluate --hyp-tokenized)
bleu = tokenized_bleu(read_text(hyp), ref, lang="de", lowercase=True, compound_split=False,
                      refs_tokenized=True, hyps_tokenized=data == "lc")[0]
rows = [json.loads(line) for line in open(metrics)]
valid = [(r["step"], round(r["bleu"], 1)) for r in rows if r["kind"] == "valid"]
step = [r["step"] for r in rows if r["kind"] == "train"][-1]
print(f"{n} {m} step {step} test tokBLEU {bleu:.2f} val {valid}", flush=True)
PY
}
run() { # name data config steps overrides...
  local n=$1 data=$2 cfg=$3 steps=$4; shift 4
  $TM train --config "$cfg" --data "$W/$data" --run-dir "$W/$n/run" --train.max_steps="$steps" \
    --train.max_minutes="${MINUTES:-0}" --train.valid_every="${VALID_EVERY:-2000}" \
    --train.save_every=250 --train.keep_last=5 --train.threads=2 --train.device="${DEV:-cuda}" \
    "$@" > "$W/$n.log" 2>&1
  cp "$W/$n/run/metrics.jsonl" "$OUT/$n.metrics.jsonl"
  $TM average --run-dir "$W/$n/run" --last 5 --out "$W/$n/avg" > /dev/null 2>&1
  score "$n" "$data" avg; score "$n" "$data" run
}
for data in cased lc; do
  [[ " $* " == *" $data "* ]] && prepare $data &
done
wait
for spec in "$@"; do
  run $spec &
done
wait
cat "$OUT/scores.txt"
