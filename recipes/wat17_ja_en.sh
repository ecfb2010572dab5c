#!/usr/bin/env bash
# WAT17 ASPEC Japanese <-> English: Transformer-base or -big, with and without XL positions.
#
#   ASPEC_DIR=/path/to/ASPEC/ASPEC-JE bash recipes/wat17_ja_en.sh          # Ja => En, Transformer-base
#   ASPEC_DIR=... DIRECTION=en-ja SIZE=big bash recipes/wat17_ja_en.sh
#
# Data: ASPEC is distributed under a licence agreement, so this recipe cannot download it: request it at
# https://jipsti.jst.go.jp/aspec/ and point ASPEC_DIR at the ASPEC-JE directory (train/train-{1,2,3}.txt,
# dev/dev.txt, devtest/devtest.txt, test/test.txt) or at the ASPEC directory above it (which also holds ASPEC-JC).
# Training files: ASPEC_TRAIN_FILES (default train-1.txt train-2.txt, the first 2M pairs, ordered by alignment
# score). Line formats (the fields WAT's baseline data preparation splits on " ||| "): train
# "score ||| doc ||| id ||| ja ||| en", dev/devtest/test "doc ||| id ||| ja ||| en".
# STOP_AFTER=raw|tok: stop once the fields are extracted / segmented and cleaned.
# Pipeline: NFKC-normalized Japanese segmented with fugashi + unidic-lite, English Moses-tokenized (sacremoses),
# cleaning, word alignment, reorderer trained on REORDER_TRAIN_LINES pairs and applied to every split, joint
# sentencepiece, fairseq with a joined dictionary, checkpoint averaging, beam 4, length penalty 0.6.
# Scores: tokenized BLEU and RIBES (nltk) on the output re-tokenized with the same tokenizers as the references
# (WAT's official numbers use KyTea/JUMAN segmentation and WAT's RIBES.py, so compare with care), and detokenized
# sacreBLEU (13a for English, character-level for Japanese).
set -euo pipefail
# shellcheck source=recipes/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${DIRECTION:=ja-en}"
case $DIRECTION in ja-en|en-ja) ;; *) xl_die "DIRECTION must be ja-en or en-ja, not '$DIRECTION'" ;; esac
SRC=${DIRECTION%-*} TGT=${DIRECTION#*-}
: "${SIZE:=base}"
: "${WORK:=./work/wat17_${DIRECTION}_$SIZE}"
: "${ASPEC_DIR:=}"
: "${ASPEC_TRAIN_FILES:=train-1.txt train-2.txt}"
: "${CLEAN_MAX_LEN:=250}"
: "${CLEAN_RATIO:=3}"  # words per sentence differ more between Japanese and English than between En and De
: "${SPM_COVERAGE:=0.9995}"
xl_wmt_scale_defaults  # SIZE base|big: architecture, schedule, alignment/reorderer/sentencepiece sizes

# 0. the licence-bound corpus must be there before anything else runs
ASPEC_HELP="ASPEC is licence-bound and cannot be downloaded by this recipe: request it at https://jipsti.jst.go.jp/aspec/ \
and run with ASPEC_DIR=/path/to/ASPEC/ASPEC-JE (the directory holding train/, dev/ and test/)."
[ -n "$ASPEC_DIR" ] || xl_die "ASPEC_DIR is not set. $ASPEC_HELP"
[ -d "$ASPEC_DIR/ASPEC-JE" ] && ASPEC_DIR=$ASPEC_DIR/ASPEC-JE
for f in $ASPEC_TRAIN_FILES; do xl_need_file "$ASPEC_DIR/train/$f" "$ASPEC_HELP"; done
xl_need_file "$ASPEC_DIR/dev/dev.txt" "$ASPEC_HELP"
xl_need_file "$ASPEC_DIR/test/test.txt" "$ASPEC_HELP"
xl_defaults

raw=$WORK/raw tok=$WORK/tok
mkdir -p "$raw" "$tok"

# 1. extract the Japanese and English fields: $raw/{train,valid,test}.{ja,en}
# "${XL_ASPEC_FIELD[@]}" field=N FILE...: the N-th (1-based) " ||| "-separated field of every line; a line without
# it is an error naming the file and line.
XL_ASPEC_FIELD=(awk -F ' \\|\\|\\| ' '
    NF < field { printf "error: %s:%d: expected at least %d \" ||| \"-separated fields, found %d\n", \
                 FILENAME, FNR, field, NF > "/dev/stderr"; exit 1 }
    { print $field }')
train_paths=()
for f in $ASPEC_TRAIN_FILES; do train_paths+=("$ASPEC_DIR/train/$f"); done
xl_step "$raw/train.ja" --stdout -- "${XL_ASPEC_FIELD[@]}" field=4 "${train_paths[@]}"
xl_step "$raw/train.en" --stdout -- "${XL_ASPEC_FIELD[@]}" field=5 "${train_paths[@]}"
for split in valid test; do
  f=$ASPEC_DIR/dev/dev.txt
  [ "$split" = test ] && f=$ASPEC_DIR/test/test.txt
  xl_step "$raw/$split.ja" --stdout -- "${XL_ASPEC_FIELD[@]}" field=3 "$f"
  xl_step "$raw/$split.en" --stdout -- "${XL_ASPEC_FIELD[@]}" field=4 "$f"
  xl_check_parallel "$raw/$split.ja" "$raw/$split.en"
done
xl_stop_after raw

# 2. segment / tokenize; clean the training pairs only
xl_tokenize_and_clean ja en
xl_stop_after tok

# 3. reordering, subwords, data-bin, systems
xl_prepare
xl_train_and_translate

# 4. scores: tokenized BLEU + RIBES (re-tokenized output vs tokenized reference), and detokenized sacreBLEU
mkdir -p "$WORK/scores"
detok_tokenize=13a
[ "$TGT" = ja ] && detok_tokenize=char
for system in $SYSTEMS; do
  out=$WORK/out/$system
  xl_step "$out/test.detok" -- xlpos-prep detokenize --lang "$TGT" --input "$out/test.words" --output "$out/test.detok"
  xl_step "$out/test.retok" -- xlpos-prep tokenize --lang "$TGT" --normalize --input "$out/test.detok" \
    --output "$out/test.retok"
  xl_step "$WORK/scores/$system.tok.json" -- xlpos-prep score --system "$system" --hyp "$out/test.retok" \
    --ref "$tok/test.$TGT" --tokenize none --ribes --name tok-BLEU \
    --label "tokenized BLEU ($([ "$TGT" = ja ] && echo "fugashi/unidic-lite" || echo "Moses") tokens, not WAT's official segmentation)" \
    --out "$WORK/scores/$system.tok.json"
  xl_step "$WORK/scores/$system.detok.json" -- xlpos-prep score --system "$system" --hyp "$out/test.detok" \
    --ref "$raw/test.$TGT" --tokenize "$detok_tokenize" --name sacreBLEU \
    --label "detokenized sacreBLEU ($detok_tokenize tokenization) vs the raw reference" \
    --out "$WORK/scores/$system.detok.json"
done
xl_report "WAT17 ASPEC $SRC => $TGT, Transformer-$SIZE"
