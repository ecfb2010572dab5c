#!/usr/bin/env bash
# WMT17 Chinese <-> English (the paper's Zh => En task): Transformer-base or -big, with and without XL positions.
#
#   EXTRA_PARALLEL_DIR=/path/to/un+cwmt bash recipes/wmt17_zh_en.sh     # Zh => En, Transformer-base
#   DIRECTION=en-zh SIZE=big bash recipes/wmt17_zh_en.sh
#   DATA=/path/to/dir bash recipes/wmt17_zh_en.sh                       # your own raw train.{zh,en} [valid/test]
#
# Data (WMT17 constrained Zh-En, http://www.statmt.org/wmt17/translation-task.html):
#   News Commentary v12, downloaded into $WORK/download/HOST/PATH (resumed when a run is killed; XLPOS_MIRROR: a
#   local copy instead, see lib.sh), only the zh-en files extracted:
#     http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz  training/news-commentary-v12.zh-en.{zh,en}
#   UN Parallel Corpus v1.0 (https://conferences.unite.un.org/UNCorpus, en-zh) and the CWMT corpora (listed on
#   the WMT17 page, distributed after registration) need manual download: put them into EXTRA_PARALLEL_DIR as
#   pairs NAME.zh / NAME.en at any depth (one sentence per line; the UN archive extracts as en-zh/UNv1.0.en-zh.*,
#   which is such a pair; rename CWMT's files so); every pair there is added to the training data. Without
#   them the recipe trains on News Commentary alone (~0.2M pairs) and says so: far less than the full task.
#   validation newsdev2017 (VALID_SET, sacreBLEU's wmt17/dev): https://data.statmt.org/wmt17/translation-task/dev.tgz
#     dev/newsdev2017-zhen-src.zh.sgm, dev/newsdev2017-zhen-ref.en.sgm
#   test newstest2017 (TEST_SET, sacreBLEU's wmt17): https://data.statmt.org/wmt17/translation-task/test.tgz
#     test/newstest2017-zhen-src.zh.sgm, test/newstest2017-zhen-ref.en.sgm
#   (the archives and files are sacreBLEU's, from its catalogue; their SGML becomes text as sacreBLEU makes it).
# STOP_AFTER=raw|tok: stop once the corpus is downloaded / segmented and cleaned.
# Pipeline: Chinese NFKC-normalized and segmented with jieba, English Moses-normalized and tokenized (sacremoses),
# cleaning, word alignment, reorderer on REORDER_TRAIN_LINES pairs applied to every split, joint sentencepiece,
# fairseq with a joined dictionary, checkpoint averaging, beam 4, length penalty 0.6.
# Scores: detokenized sacreBLEU with signature (13a for English, sacreBLEU's zh tokenizer for Chinese).
set -euo pipefail
# shellcheck source=recipes/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${DIRECTION:=zh-en}"
case $DIRECTION in zh-en|en-zh) ;; *) xl_die "DIRECTION must be zh-en or en-zh, not '$DIRECTION'" ;; esac
SRC=${DIRECTION%-*} TGT=${DIRECTION#*-}
: "${SIZE:=base}"
: "${WORK:=./work/wmt17_${DIRECTION}_$SIZE}"
: "${DATA:=}"
: "${EXTRA_PARALLEL_DIR:=}"
: "${VALID_SET:=wmt17/dev}"
: "${TEST_SET:=wmt17}"
: "${CLEAN_MAX_LEN:=250}"
: "${CLEAN_RATIO:=3}"
: "${SPM_COVERAGE:=0.9995}"
xl_wmt_scale_defaults  # SIZE base|big: architecture, schedule, alignment/reorderer/sentencepiece sizes
xl_defaults

raw=$WORK/raw tok=$WORK/tok
mkdir -p "$raw" "$tok"

# 1. raw training corpus: $raw/train.{zh,en}
if [ -n "$DATA" ]; then
  for lang in zh en; do
    xl_need_file "$DATA/train.$lang" "DATA must hold raw (unsegmented) train.{zh,en}; valid/test.{zh,en} optional."
  done
  xl_check_parallel --allow-empty "$DATA/train.zh" "$DATA/train.en"
  parts=("$DATA/train")
else
  # The archive holds News Commentary v12's pairs of every WMT17 language; zh-en under training/ as for de-en in
  # fairseq's examples/translation/prepare-wmt14en2de.sh --icml17 (training/news-commentary-v12.de-en).
  url=http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz
  archive=$WORK/download/${url#*://}
  xl_fetch "$url" "$archive"
  xl_extract "$archive" "$archive.d" training/news-commentary-v12.zh-en.zh training/news-commentary-v12.zh-en.en
  parts=("$archive.d/training/news-commentary-v12.zh-en")
  if [ -z "$EXTRA_PARALLEL_DIR" ]; then
    xl_log "WARNING: no EXTRA_PARALLEL_DIR: training on News Commentary v12 only; the WMT17 task also has the UN" \
      "and CWMT corpora (see the header of this script)"
  fi
fi
if [ -n "$EXTRA_PARALLEL_DIR" ]; then
  [ -d "$EXTRA_PARALLEL_DIR" ] || xl_die "EXTRA_PARALLEL_DIR=$EXTRA_PARALLEL_DIR is not a directory"
  # at any depth, so that the UN corpus's archive extracts there as it is (en-zh/UNv1.0.en-zh.{en,zh}); sorted, so
  # that the training corpus is the same on every run
  mapfile -t extra < <(find -L "$EXTRA_PARALLEL_DIR" -type f -name '*.zh' | LC_ALL=C sort)
  [ "${#extra[@]}" -gt 0 ] || xl_die "EXTRA_PARALLEL_DIR=$EXTRA_PARALLEL_DIR holds no NAME.zh / NAME.en pairs"
  for zh in "${extra[@]}"; do
    xl_need_file "${zh%.zh}.en" "each NAME.zh in EXTRA_PARALLEL_DIR needs its NAME.en"
    xl_check_parallel --allow-empty "$zh" "${zh%.zh}.en"
    parts+=("${zh%.zh}")
  done
fi
for lang in zh en; do
  xl_step "$raw/train.$lang" --stdout -- cat "${parts[@]/%/.$lang}"
done

# 2. validation and test sets
xl_wmt_eval_sets zh en
xl_stop_after raw

# 3. segment / tokenize; clean the training pairs only
xl_tokenize_and_clean zh en
xl_stop_after tok

# 4. reordering, subwords, data-bin, systems
xl_prepare
xl_train_and_translate

# 5. detokenize and score
mkdir -p "$WORK/scores"
bleu_tokenize=13a
[ "$TGT" = zh ] && bleu_tokenize=zh
for system in $SYSTEMS; do
  out=$WORK/out/$system
  xl_step "$out/test.detok" -- xlpos-prep detokenize --lang "$TGT" --input "$out/test.words" --output "$out/test.detok"
  xl_step "$WORK/scores/$system.bleu.json" -- xlpos-prep score --system "$system" --hyp "$out/test.detok" \
    --ref "$raw/test.$TGT" --tokenize "$bleu_tokenize" --name sacreBLEU \
    --label "detokenized sacreBLEU ($bleu_tokenize tokenization) vs the raw reference" \
    --out "$WORK/scores/$system.bleu.json"
done
xl_report "WMT17 $SRC => $TGT ($TEST_SET), Transformer-$SIZE"
