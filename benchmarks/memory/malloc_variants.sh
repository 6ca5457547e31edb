#!/usr/bin/env bash
# The commands of the measurement in benchmarks/results/training-memory-growth (glibc malloc tuned vs default vs one arena), as run.
cd /work/main
ARGS="--config benchmarks/multi30k/multi30k-tiny-prenorm.yaml --data runs/multi30k-en-de-cooldown/data --train.max_minutes=14 --train.threads=1 --train.log_every=50"
python -m transformer_mt train $ARGS --run-dir /tmp/rssab3/tuned > /tmp/rssab3/tuned.log 2>&1 &
TRANSFORMER_MT_MALLOC=default python -m transformer_mt train $ARGS --run-dir /tmp/rssab3/default > /tmp/rssab3/default.log 2>&1 &
MALLOC_ARENA_MAX=1 python -m transformer_mt train $ARGS --run-dir /tmp/rssab3/arena1 > /tmp/rssab3/arena1.log 2>&1 &
wait
