#!/usr/bin/env bash
# The commands of the measurement in benchmarks/results/training-memory-growth (malloc_trim after every checkpoint vs not), as run.
# two 25-minute Transformer-tiny trainings at once, one thread each: with and without the trim
cd /work/main
ARGS="--config benchmarks/multi30k/multi30k-tiny-prenorm.yaml --data runs/multi30k-en-de-cooldown/data --train.max_minutes=25 --train.threads=1"
python -m transformer_mt train $ARGS --run-dir /tmp/rssab/trim > /tmp/rssab/trim.log 2>&1 &
A=$!
PYTHONPATH=/tmp/wt_notrim/src python -m transformer_mt train $ARGS --run-dir /tmp/rssab/notrim > /tmp/rssab/notrim.log 2>&1 &
B=$!
echo "t_s trim_rss_mib notrim_rss_mib" > /tmp/rssab/rss.txt
start=$(date +%s)
while kill -0 $A 2>/dev/null || kill -0 $B 2>/dev/null; do
  ra=$(ps -o rss= -p $A 2>/dev/null || echo 0); rb=$(ps -o rss= -p $B 2>/dev/null || echo 0)
  echo "$(( $(date +%s) - start )) $(( ${ra:-0} / 1024 )) $(( ${rb:-0} / 1024 ))" >> /tmp/rssab/rss.txt
  sleep 20
done
