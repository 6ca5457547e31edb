# Sourced by finish.sh and knn.sh after OUT, SRC and TGT are set: where the test set and its
# references are, how tokenized BLEU is computed (LC_TOK=1: a run on the tok/*.lc.norm.tok
# files, see finish.sh), and bleu_of FILE.json. DATASET=tatoeba-deu-eng: Tatoeba's test split
# instead of Multi30k's test_2016_flickr (sacreBLEU and chrF only; no tokenized reference).
DATA=${TRANSFORMER_MT_DATA:-$REPO/../shared/data}
TEST_NAME=test_2016_flickr
TOKREF=$DATA/multi30k/tok/test_2016_flickr.lc.norm.tok.$TGT.gz
TEST_SRC=$DATA/multi30k/test_2016_flickr.$SRC.gz
TEST_REF=$DATA/multi30k/test_2016_flickr.$TGT.gz
TOK_ARGS=(--lowercase)
if [ "${DATASET:-multi30k}" = tatoeba-deu-eng ]; then
  TEST_NAME=tatoeba-test
  TOKREF=
  TEST_SRC=$DATA/tatoeba-deu-eng/test.$SRC.gz
  TEST_REF=$DATA/tatoeba-deu-eng/test.$TGT.gz
fi
if [ -n "${LC_TOK:-}" ]; then
  TEST_SRC=$DATA/multi30k/tok/test_2016_flickr.lc.norm.tok.$SRC.gz
  TEST_REF=$TOKREF
  TOK_ARGS=(--lowercase --hyp-tokenized)
fi
bleu_of() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['bleu'])" "$1"; }
# is_better A B: A > B as numbers
is_better() { python3 -c "import sys; sys.exit(not float(sys.argv[1]) > float(sys.argv[2]))" "$1" "$2"; }
