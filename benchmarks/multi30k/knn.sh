#!/usr/bin/env bash
# kNN-MT (Khandelwal et al., 2021; not in the paper) on a run finish.sh has finished: build the
# datastore of the model it selected over the training split, choose k, the temperature and
# lambda on val by sacreBLEU (at the beam and alpha finish.sh chose), translate
# test_2016_flickr with them and score it as finish.sh does, with paired bootstrap resampling
# against the run's own test translation (the same model without the datastore).
# Usage: benchmarks/multi30k/knn.sh OUT_DIR SRC TGT   (then report.py OUT_DIR)
#   KNN_KS="8 16 32", KNN_TEMPERATURES="10", KNN_LAMBDAS="0.2 0.3 0.4": the val grid (defaults)
#   LC_TOK=1 as for finish.sh
#   An existing OUT/knn/datastore is reused (translate refuses one built for other weights).
#   The output goes to the terminal and to OUT/knn.log (report.py copies it).
set -euo pipefail
OUT=$1; SRC=$2; TGT=$3
REPO=$(cd "$(dirname "$0")/../.." && pwd)
exec > >(tee -a "$OUT/knn.log") 2>&1
source "$REPO/benchmarks/multi30k/test_files.sh"
KNN_KS=${KNN_KS:-8 16 32}
KNN_TEMPERATURES=${KNN_TEMPERATURES:-10}
KNN_LAMBDAS=${KNN_LAMBDAS:-0.2 0.3 0.4}
MODEL=$OUT/$(cat "$OUT/selected")
DECODE=(--alpha "$(cat "$OUT/alpha")" --beam-size "$(cat "$OUT/beam")")
mkdir -p "$OUT/knn"

if [ ! -d "$OUT/knn/datastore" ]; then
  SECONDS=0
  python "$REPO/examples/knn_mt/cli.py" datastore --model "$MODEL" --data "$OUT/data" --out "$OUT/knn/datastore"
  echo "$SECONDS" > "$OUT/knn/datastore_seconds"
fi

best=""; best_bleu=-1
for k in $KNN_KS; do
  for t in $KNN_TEMPERATURES; do
    for lam in $KNN_LAMBDAS; do
      name=k$k.t$t.l$lam
      python "$REPO/examples/knn_mt/cli.py" translate --model "$MODEL" "${DECODE[@]}" --datastore "$OUT/knn/datastore" \
        --knn-k "$k" --knn-temperature "$t" --knn-lambda "$lam" \
        --input "$OUT/data/valid.src.txt" --output "$OUT/knn/val.$name.$TGT"
      transformer-mt evaluate --hyp "$OUT/knn/val.$name.$TGT" --ref "$OUT/data/valid.tgt.txt" \
        --json "$OUT/knn/val.$name.json"
      bleu=$(bleu_of "$OUT/knn/val.$name.json")
      echo "val: kNN k $k, temperature $t, lambda $lam: sacreBLEU $bleu"
      if is_better "$bleu" "$best_bleu"; then
        best="$k $t $lam"; best_bleu=$bleu
      fi
    done
  done
done
read -r k t lam <<< "$best"
echo "selected on val: k $k, temperature $t, lambda $lam ($best_bleu)"
echo "$best" > "$OUT/knn/selected"

python "$REPO/examples/knn_mt/cli.py" translate --model "$MODEL" "${DECODE[@]}" --datastore "$OUT/knn/datastore" \
  --knn-k "$k" --knn-temperature "$t" --knn-lambda "$lam" \
  --input "$TEST_SRC" --output "$OUT/knn/test.hyp.$TGT"
transformer-mt evaluate --hyp "$OUT/knn/test.hyp.$TGT" --ref "$TEST_REF" \
  --baseline "$OUT/test.hyp.$TGT" --json "$OUT/knn/test.sacrebleu.json"
if [ -f "$TOKREF" ]; then
  transformer-mt evaluate --hyp "$OUT/knn/test.hyp.$TGT" --ref "$TEST_REF" --lang "$TGT" \
    "${TOK_ARGS[@]}" --tok-ref "$TOKREF" --baseline "$OUT/test.hyp.$TGT" \
    --json "$OUT/knn/test.tokbleu.json"
fi
echo "== $(date -u +%FT%TZ) done"
