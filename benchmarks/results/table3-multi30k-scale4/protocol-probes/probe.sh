#!/usr/bin/env bash
# Table 3 protocol probes (issue 62): the base row alone at --scale 4 (d_model 128), 2,000 steps,
# two configurations side by side, one thread each; validation every 500 steps.
set -euo pipefail
cd /work/runs
while pgrep -f 'norm_at_equal_steps.sh' >/dev/null; do sleep 20; done
COMMON=(--data m30k/data --rows base --seeds 1 --scale 4 --steps 2000 --valid-every 500
        --train.max_tokens=2048 --train.bf16=auto --train.lr_cooldown_share=0.2273 --train.threads=1)
OMP_NUM_THREADS=1 taskset -c 0 transformer-mt table3 --out t3probe/s2000-wu4000 "${COMMON[@]}" \
  --train.warmup_steps=4000 --train.lr_scale=5 > t3probe/s2000-wu4000.log 2>&1 &
OMP_NUM_THREADS=1 taskset -c 1 transformer-mt table3 --out t3probe/s2000-wu1000 "${COMMON[@]}" \
  --train.warmup_steps=1000 --train.lr_scale=2.5 > t3probe/s2000-wu1000.log 2>&1 &
wait
