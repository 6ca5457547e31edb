#!/usr/bin/env bash
# After training: average the last checkpoints, select the model and the length penalty on val
# by sacreBLEU (§6.1: beam size and alpha "were chosen after experimentation on the development
# set"), then translate test_2016_flickr and score it (sacreBLEU and chrF; tokenized lowercased
# BLEU). DATASET=tatoeba-deu-eng: Tatoeba's test split instead (test_files.sh).
# Usage: benchmarks/multi30k/finish.sh OUT_DIR SRC TGT   (run.sh calls it; it can be rerun)
#   AVERAGE="5 10": average the last 5 and the last 10 checkpoints (default "5")
#   ALPHAS="0.6 1.0": length penalties to try on val (default "0.6", the paper's)
#   BEAMS="4 8": beam sizes to try on val (default "4", the paper's)
#   MBRS="none bleu": rerankings to try on val (default "none": the beam's best; bleu or chrf:
#     examples/rerank/mbr.py over the beam's n-best list)
#   BASELINE=FILE: another system's test translations; the tokenized scoring of test adds paired
#     bootstrap resampling against them (evaluate --baseline), e.g. an earlier run's
#     benchmarks/results/*/test_2016_flickr.hyp.de
#   LC_TOK=1: the run trained on the literature's multi30k/tok/*.lc.norm.tok files (prepared with
#     --dataset multi30k-tok): translate the tokenized test source and score the tokenized, lowercased
#     hypotheses as they are (evaluate --hyp-tokenized, multi-bleu.perl's way); its sacreBLEU is
#     then against the tokenized reference, not comparable to a cased model's. No BASELINE:
#     significance.py compares such runs with cased ones.
set -euo pipefail
OUT=$1; SRC=$2; TGT=$3
REPO=$(cd "$(dirname "$0")/../.." && pwd)
source "$REPO/benchmarks/multi30k/test_files.sh"
AVERAGE=${AVERAGE:-5}
ALPHAS=${ALPHAS:-0.6}
BEAMS=${BEAMS:-4}
MBRS=${MBRS:-none}
PAIRED=()

# translate MODEL ALPHA BEAM MBR INPUT OUTPUT: the beam's best, or MBR's choice among the beam
translate() {
  if [ "$4" = none ]; then
    transformer-mt translate --model "$1" --alpha "$2" --beam-size "$3" --input "$5" --output "$6"
  else
    transformer-mt translate --model "$1" --alpha "$2" --beam-size "$3" --n-best "$3" \
      --input "$5" --output "$6.nbest"
    python "$REPO/examples/rerank/mbr.py" --nbest "$6.nbest" --utility "$4" --output "$6"
  fi
}
[ -z "${BASELINE:-}" ] || [ -n "${LC_TOK:-}" ] || PAIRED=(--baseline "$BASELINE")

models=""
for n in $AVERAGE; do
  transformer-mt average --run-dir "$OUT/run" --last "$n" --out "$OUT/averaged-$n"
  models="$models averaged-$n"
done

best=""; best_alpha=""; best_beam=""; best_mbr=""; best_bleu=-1
for model in $models run; do
  for beam in $BEAMS; do
    for alpha in $ALPHAS; do
      for mbr in $MBRS; do
        name=$model.alpha$alpha
        [ "$beam" = 4 ] || name=$name.beam$beam  # the paper's beam keeps the earlier runs' names
        [ "$mbr" = none ] || name=$name.mbr-$mbr
        translate "$OUT/$model" "$alpha" "$beam" "$mbr" "$OUT/data/valid.src.txt" \
          "$OUT/val.$name.$TGT"
        transformer-mt evaluate --hyp "$OUT/val.$name.$TGT" --ref "$OUT/data/valid.tgt.txt" \
          --json "$OUT/val.$name.json"
        bleu=$(bleu_of "$OUT/val.$name.json")
        echo "val: $model, beam $beam, alpha $alpha, mbr $mbr: sacreBLEU $bleu"
        if is_better "$bleu" "$best_bleu"; then
          best=$model; best_alpha=$alpha; best_beam=$beam; best_mbr=$mbr; best_bleu=$bleu
        fi
      done
    done
  done
done
echo "selected on val: $best, beam $best_beam, alpha $best_alpha, mbr $best_mbr ($best_bleu)"
echo "$best" > "$OUT/selected"
echo "$best_alpha" > "$OUT/alpha"
echo "$best_beam" > "$OUT/beam"
echo "$best_mbr" > "$OUT/mbr"
echo "$TEST_NAME" > "$OUT/test_set"

translate "$OUT/$best" "$best_alpha" "$best_beam" "$best_mbr" "$TEST_SRC" "$OUT/test.hyp.$TGT"
transformer-mt evaluate --hyp "$OUT/test.hyp.$TGT" --ref "$TEST_REF" --json "$OUT/test.sacrebleu.json"
if [ -n "$TOKREF" ] && [ -f "$TOKREF" ]; then
  transformer-mt evaluate --hyp "$OUT/test.hyp.$TGT" --ref "$TEST_REF" --lang "$TGT" \
    "${TOK_ARGS[@]}" --tok-ref "$TOKREF" --json "$OUT/test.tokbleu.json" "${PAIRED[@]}"
fi
echo "== $(date -u +%FT%TZ) done"
