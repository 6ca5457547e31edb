#!/usr/bin/env bash
# Multi30k en->de configs trained on a GPU for the number of steps the 2-core CPU fits in ~85
# minutes (small: ~4,500; tiny: ~8,000), seven at once on one GPU, each scored on
# test_2016_flickr with tokenized lowercased BLEU. A GPU takes minutes to say which recipe is
# worth the CPU's 90. Results: benchmarks/results/multi30k-sweep/.
# Usage: OUT=DIR benchmarks/multi30k/gpu_sweep.sh   (sacremoses wheels in .devdata/whl if the
# machine lacks it; DEV=cpu DIV=400 QUICK=1 for a smoke run on a CPU)
set -u
[ -d .devdata/whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .devdata/whl/*.whl
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2
export D=${TRANSFORMER_MT_DATA:-../shared/data}/multi30k; W=/tmp/sweep; mkdir -p $W
TM="python3 -m transformer_mt"
$TM prepare --train-src $D/train.en.gz --train-tgt $D/train.de.gz --valid-src $D/val.en.gz --valid-tgt $D/val.de.gz --vocab-size 8000 --out $W/cased > $W/prep-cased.log 2>&1 &
$TM prepare --train-src $D/tok/train.lc.norm.tok.en.gz --train-tgt $D/tok/train.lc.norm.tok.de.gz --valid-src $D/tok/val.lc.norm.tok.en.gz --valid-tgt $D/tok/val.lc.norm.tok.de.gz --vocab-size 8000 --out $W/lc > $W/prep-lc.log 2>&1 &
wait; for f in $W/prep-*.log; do tail -n 2 $f; done
score() { # name data model
  local n=$1 data=$2 m=$3
  if [ $data = lc ]; then tin=$D/tok/test_2016_flickr.lc.norm.tok.en.gz; else tin=$D/test_2016_flickr.en.gz; fi
  $TM translate --model $W/$n/$m --input $tin --output $W/$n/test.$m.de --device ${DEV:-cuda} --batch-size 128 >/dev/null 2>&1
  python3 - $W/$n/test.$m.de $data $n $m <<'PY' >> $OUT/scores.txt
import os, sys; from transformer_mt.evaluate import read_text, tokenized_bleu
from sacrebleu.metrics import BLEU
hyp, data, n, m = sys.argv[1:]
tok = read_text(os.environ['D'] + '/tok/test_2016_flickr.lc.norm.tok.de.gz')
h = read_text(hyp)
if data == 'lc': b = BLEU(tokenize='none', force=True).corpus_score(h, [tok]).score
else: b = tokenized_bleu(h, tok, lang='de', lowercase=True, compound_split=False, refs_tokenized=True)[0]
print(f'{n} {m} test tokBLEU {b:.2f}', flush=True)
PY
}
run() { # name data config steps overrides...
  local n=$1 data=$2 cfg=$3 steps=$4; shift 4
  $TM train --config $cfg --data $W/$data --run-dir $W/$n/run --train.max_steps=$((steps / ${DIV:-1})) --train.max_minutes=0 \
    --train.valid_every=1000 --train.save_every=250 --train.keep_last=5 --train.threads=2 "$@" > $W/$n.log 2>&1
  grep '"valid"' $W/$n/run/metrics.jsonl | python3 -c "import sys,json; print('$n', [(r['step'], round(r['bleu'],1)) for r in map(json.loads, sys.stdin)])" >> $OUT/scores.txt
  $TM average --run-dir $W/$n/run --last 5 --out $W/$n/avg > /dev/null 2>&1
  score $n $data avg; score $n $data run
  cp $W/$n/run/metrics.jsonl $OUT/$n.metrics.jsonl 2>/dev/null
}
B=benchmarks/multi30k
run tiny-cased cased $B/multi30k-tiny.yaml 8000 &
run tiny-lc lc $B/multi30k-tiny.yaml 8000 &
run small-cased cased $B/multi30k.yaml 4500 &
run small-lc lc $B/multi30k.yaml 4500 &
[ -n "${QUICK:-}" ] && wait && exit
run small-cased-lr1 cased $B/multi30k.yaml 4500 --train.lr_scale=1.0 &
run small-lc-lr1 lc $B/multi30k.yaml 4500 --train.lr_scale=1.0 &
run tiny-cased-12k cased $B/multi30k-tiny.yaml 12000 &
( sleep 420; for f in $W/*/run/metrics.jsonl; do echo $f $(tail -1 $f | cut -c1-80); done ) &
wait
