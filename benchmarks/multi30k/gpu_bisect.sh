#!/usr/bin/env bash
# Why does the Wu et al. tiny recipe (post-norm, peak lr 0.005) stall at ~10 val BLEU? Seven
# 2,000-step variants at once on one GPU, each changing one thing. Results:
# benchmarks/results/multi30k-recipe-sweep-gpu/bisect.txt (validation: step, BLEU, loss).
# Usage: OUT=DIR benchmarks/multi30k/gpu_bisect.sh
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2
D=${TRANSFORMER_MT_DATA:-../shared/data}/multi30k; W=/tmp/bis; mkdir -p $W
TM="python3 -m transformer_mt"
$TM prepare --train-src $D/train.en.gz --train-tgt $D/train.de.gz --valid-src $D/val.en.gz --valid-tgt $D/val.de.gz --vocab-size 8000 --out $W/cased > $W/prep.log 2>&1
run() { local n=$1; shift
  $TM train --config benchmarks/multi30k/multi30k-tiny.yaml --data $W/cased --run-dir $W/$n --train.max_steps=2000 --train.max_minutes=0 \
    --train.valid_every=500 --train.save_every=100000 --train.log_every=100 --train.threads=2 "$@" > $W/$n.log 2>&1
}
report() { for f in $W/*/metrics.jsonl; do python3 -c "import sys,json; rows=[json.loads(l) for l in open(sys.argv[1])]; print(sys.argv[1].split('/')[-2], [(r['step'], round(r['bleu'],1), round(r['loss'],2)) for r in rows if r['kind']=='valid'], [round(r['loss'],2) for r in rows if r['kind']=='train'][-1:])" $f; done; }
run base & run fp32 --train.bf16=false & run lr1 --train.lr_scale=1.0 & run prenorm --model.norm_first=true &
run eps8 --train.adam_eps=1e-8 & run clip1 --train.clip_norm=1.0 & run bias --model.attention_bias=true &
( sleep 150; report | tee $OUT/partial.txt ) &
wait; report | tee $OUT/bisect.txt
