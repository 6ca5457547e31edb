#!/usr/bin/env bash
# Diagnosis, never selection: score every setting finish.sh tried on val (the averages and the
# last checkpoint, each alpha) on test_2016_flickr too, to see whether val and test disagree
# about the models or only about the choice among them. Writes RUN/testgrid/ and prints one
# line a setting: model, alpha, val sacreBLEU, test sacreBLEU, test tok. lc. BLEU.
#
#   benchmarks/multi30k/test_grid.sh en de runs/multi30k-en-de-batch2048 [RUN ...]
set -euo pipefail
SRC=$1; TGT=$2; shift 2
DATA=${DATA:-../shared/data}
ALPHAS=${ALPHAS:-0.6 0.8 1.0 1.2}
TOKREF=$DATA/multi30k/tok/test_2016_flickr.lc.norm.tok.$TGT.gz
field() { python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))[sys.argv[2]], 2))" "$1" "$2"; }

for OUT in "$@"; do
  mkdir -p "$OUT/testgrid"
  for model in averaged-5 averaged-10 run; do
    [ -e "$OUT/$model" ] || continue
    for alpha in $ALPHAS; do
      name=$model.alpha$alpha
      transformer-mt translate --model "$OUT/$model" --alpha "$alpha" \
        --input "$DATA/multi30k/test_2016_flickr.$SRC.gz" --output "$OUT/testgrid/$name.$TGT"
      transformer-mt evaluate --hyp "$OUT/testgrid/$name.$TGT" \
        --ref "$DATA/multi30k/test_2016_flickr.$TGT.gz" --lang "$TGT" --lowercase \
        --tok-ref "$TOKREF" --json "$OUT/testgrid/$name.json" > /dev/null
      echo "$OUT $model $alpha val $(field "$OUT/val.$name.json" bleu)" \
        "test $(field "$OUT/testgrid/$name.json" bleu) tok $(field "$OUT/testgrid/$name.json" tok_bleu)"
    done
  done
done
