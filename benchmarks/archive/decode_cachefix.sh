#!/usr/bin/env bash
# The commands of the measurement in benchmarks/results/archive/speed-xeon-cachefix (an old worktree's decoding against this one's; paths as they were), as run.
cd /work/main
for r in 1 2 3; do
 for v in old new; do
  for dt in fp32 int8+kv; do
   if [ $v = old ]; then P=/work/wt-old/src; else P=/work/main/src; fi
   PYTHONPATH=$P python benchmarks/speed/decode_speed.py --data runs/multi30k-en-de/data --engine ours --shape base --dtype $dt --json /tmp/ab/$v-$dt-$r.json > /tmp/ab/$v-$dt-$r.log 2>&1
  done
 done
 python benchmarks/speed/decode_speed.py --data runs/multi30k-en-de/data --engine ct2 --shape base --dtype fp32 --json /tmp/ab/ct2-fp32-$r.json > /tmp/ab/ct2-$r.log 2>&1
done
echo done
