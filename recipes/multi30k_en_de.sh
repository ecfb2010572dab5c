#!/usr/bin/env bash
# English => German on Multi30k (task 1, 29k training pairs, test_2016_flickr), from raw cased text:
# Moses tokenization (sacremoses) -> word alignment and reordering on words -> joint sentencepiece -> train ->
# decode -> detokenize -> sacreBLEU against the raw references.
#
#   bash recipes/multi30k_en_de.sh                     # downloads Multi30k
#   DATA=/path/to/multi30k bash recipes/multi30k_en_de.sh   # local train/val/test_2016_flickr.{en,de}
#   DIRECTION=de-en bash recipes/multi30k_en_de.sh     # the reverse direction
#
# Data: https://github.com/multi30k/dataset (data/task1/raw/{train,val,test_2016_flickr}.{en,de}.gz), downloaded
# from URL into $WORK/download (resumed when a run is killed; XLPOS_MIRROR: a local copy instead, see lib.sh).
# STOP_AFTER=raw|tok: stop once the corpus is downloaded / tokenized.
set -euo pipefail
# shellcheck source=recipes/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${DIRECTION:=en-de}"
case $DIRECTION in en-de|de-en) ;; *) xl_die "DIRECTION must be en-de or de-en, not '$DIRECTION'" ;; esac
SRC=${DIRECTION%-*} TGT=${DIRECTION#*-}
: "${WORK:=./work/multi30k_$DIRECTION}"
: "${DATA:=}"
: "${URL:=https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw}"
: "${SPM_VOCAB:=10000}"
BASELINE_ARCH=transformer_iwslt_de_en
XL_ARCH=transformer_xlpos_iwslt_de_en
: "${MAX_UPDATE:=10000}"
: "${MAX_TOKENS:=4096}"
: "${LR:=5e-4}"
: "${WARMUP:=4000}"
: "${DROPOUT:=0.3}"
: "${AVG_LAST:=5}"
: "${LENPEN:=1.0}"
: "${XL_INFERENCE_ARGS=$(xl_raw_text_args)}"  # raw-text input for interactive/hub
xl_defaults

# 1. raw corpus -> $WORK/raw/{train,valid,test}.{en,de}
raw=$WORK/raw tok=$WORK/tok
mkdir -p "$raw" "$tok"
declare -A NAME=([train]=train [valid]=val [test]=test_2016_flickr)
if [ -z "$DATA" ]; then
  DATA=$WORK/download
  for split in train valid test; do
    for lang in en de; do
      f=${NAME[$split]}.$lang
      gz=$DATA/${URL#*://}/$f.gz  # as xl_fetch's mirror lays it out
      xl_fetch "$URL/$f.gz" "$gz"
      xl_step "$DATA/$f" --stdout -- gunzip -c "$gz"
    done
  done
fi
for split in train valid test; do
  for lang in en de; do
    xl_need_file "$DATA/${NAME[$split]}.$lang" "DATA must hold raw train/val/test_2016_flickr.{en,de} of Multi30k."
  done
  xl_check_parallel "$DATA/${NAME[$split]}.en" "$DATA/${NAME[$split]}.de"
  for lang in en de; do xl_step "$raw/$split.$lang" --stdout -- cat "$DATA/${NAME[$split]}.$lang"; done
done
xl_stop_after raw

# 2. Moses tokenization (cased), the words the aligner and the reorderer work on
for split in train valid test; do
  for lang in en de; do
    xl_step "$tok/$split.$lang" -- xlpos-prep tokenize --lang "$lang" --input "$raw/$split.$lang" \
      --output "$tok/$split.$lang" --workers "$WORKERS"
  done
done
xl_stop_after tok

# 3. reordering, subwords, data-bin, systems
xl_prepare
xl_train_and_translate

# 4. detokenize and score against the raw references
mkdir -p "$WORK/scores"
for system in $SYSTEMS; do
  out=$WORK/out/$system
  xl_step "$out/test.detok" -- xlpos-prep detokenize --lang "$TGT" --input "$out/test.words" --output "$out/test.detok"
  xl_step "$WORK/scores/$system.bleu.json" -- xlpos-prep score --system "$system" --hyp "$out/test.detok" \
    --ref "$raw/test.$TGT" --name BLEU --label "detokenized sacreBLEU vs the raw reference" \
    --out "$WORK/scores/$system.bleu.json"
done
xl_report "Multi30k $SRC => $TGT (test_2016_flickr, $(xl_lines "$raw/test.$SRC") sentences)"
