#!/usr/bin/env bash
# Japanese <-> English on the Tanaka corpus subset of small_parallel_enja (50k training pairs of 4-16 words,
# English tokenized and lowercased, Japanese segmented with KyTea): a small real task with heavy reordering.
#
#   bash recipes/tanaka_ja_en.sh                          # Ja => En; downloads the corpus
#   DIRECTION=en-ja bash recipes/tanaka_ja_en.sh          # En => Ja
#   DATA=/path/to/enja bash recipes/tanaka_ja_en.sh       # local train/dev[/test].{en,ja}
#
# Data: https://github.com/odashi/small_parallel_enja (train/dev/test .en/.ja, already tokenized; the Tanaka
# corpus is CC-BY), downloaded from URL into $WORK/download (resumed when a run is killed; XLPOS_MIRROR: a local
# copy instead, see lib.sh). A DATA directory without test.{en,ja} gets its test set from the last TEST_HOLDOUT
# training pairs (dev stays the validation set). STOP_AFTER=tok: stop once $WORK/tok is made. Scores: BLEU and
# RIBES on the corpus's own tokens (the references are tokenized), as usually reported for this corpus.
set -euo pipefail
# shellcheck source=recipes/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${DIRECTION:=ja-en}"
case $DIRECTION in ja-en|en-ja) ;; *) xl_die "DIRECTION must be ja-en or en-ja, not '$DIRECTION'" ;; esac
SRC=${DIRECTION%-*} TGT=${DIRECTION#*-}
: "${WORK:=./work/tanaka_$DIRECTION}"
: "${DATA:=}"
: "${URL:=https://raw.githubusercontent.com/odashi/small_parallel_enja/master}"
: "${TEST_HOLDOUT:=500}"
: "${SPM_VOCAB:=8000}"
: "${REORDER_TRAIN_LINES:=0}"
BASELINE_ARCH=transformer_iwslt_de_en
XL_ARCH=transformer_xlpos_iwslt_de_en
: "${MAX_UPDATE:=15000}"
: "${MAX_TOKENS:=4096}"
: "${LR:=5e-4}"
: "${WARMUP:=4000}"
: "${DROPOUT:=0.3}"
: "${AVG_LAST:=5}"
: "${LENPEN:=1.0}"
xl_defaults

# 1. the corpus (already tokenized)
if [ -z "$DATA" ]; then
  DATA=$WORK/download/${URL#*://}  # HOST/PATH, as xl_fetch's mirrors lay it out
  for f in train.en train.ja dev.en dev.ja test.en test.ja; do xl_fetch "$URL/$f" "$DATA/$f"; done
fi
for f in train.en train.ja dev.en dev.ja; do
  xl_need_file "$DATA/$f" "DATA must hold the tokenized train.{en,ja} and dev.{en,ja} (test.{en,ja} optional)."
done
xl_check_parallel "$DATA/train.en" "$DATA/train.ja"
xl_check_parallel "$DATA/dev.en" "$DATA/dev.ja"
have_test=0
if [ -f "$DATA/test.en" ] || [ -f "$DATA/test.ja" ]; then
  have_test=1
  xl_check_parallel "$DATA/test.en" "$DATA/test.ja"
fi
tok=$WORK/tok
mkdir -p "$tok"
for lang in en ja; do
  if [ "$have_test" = 1 ]; then
    xl_step "$tok/train.$lang" --stdout -- cat "$DATA/train.$lang"
    xl_step "$tok/test.$lang" --stdout -- cat "$DATA/test.$lang"
  else
    n=$(xl_lines "$DATA/train.$lang")
    [ "$n" -gt $((2 * TEST_HOLDOUT)) ] || xl_die "$DATA/train.$lang has $n lines: too few to hold out $TEST_HOLDOUT as test"
    [ -e "$tok/test.$lang" ] || xl_log "no $DATA/test.$lang: the last $TEST_HOLDOUT training pairs are the test set"
    xl_step "$tok/train.$lang" --stdout -- head -n $((n - TEST_HOLDOUT)) "$DATA/train.$lang"
    xl_step "$tok/test.$lang" --stdout -- tail -n "$TEST_HOLDOUT" "$DATA/train.$lang"
  fi
  xl_step "$tok/valid.$lang" --stdout -- cat "$DATA/dev.$lang"
done
xl_stop_after raw  # the corpus comes tokenized: raw and tok are the same stage
xl_stop_after tok

# 2. reordering, subwords, data-bin, systems
xl_prepare
xl_train_and_translate

# 3. scores on the corpus's tokens
mkdir -p "$WORK/scores"
for system in $SYSTEMS; do
  xl_step "$WORK/scores/$system.bleu.json" -- xlpos-prep score --system "$system" --hyp "$WORK/out/$system/test.words" \
    --ref "$tok/test.$TGT" --tokenize none --ribes --name BLEU \
    --label "tokenized BLEU (the corpus's own tokens: KyTea for ja, lowercased Moses-style for en)" \
    --out "$WORK/scores/$system.bleu.json"
done
xl_report "Tanaka (small_parallel_enja) $SRC => $TGT, $(xl_lines "$tok/test.$SRC") test sentences"
