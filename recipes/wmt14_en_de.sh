#!/usr/bin/env bash
# WMT14 English <-> German (the paper's En => De task): Transformer-base or -big with and without XL positions.
#
#   bash recipes/wmt14_en_de.sh                                  # En => De, Transformer-base
#   SIZE=big bash recipes/wmt14_en_de.sh                         # Transformer-big
#   DIRECTION=de-en bash recipes/wmt14_en_de.sh
#   DATA=/path/to/dir bash recipes/wmt14_en_de.sh                # your own raw train.{en,de} [valid/test.{en,de}]
#
# Data (the 4.5M-pair setup of Vaswani et al. 2017, as in fairseq's prepare-wmt14en2de.sh), downloaded into
# $WORK/download/HOST/PATH (resumed when a run is killed; XLPOS_MIRROR: a local copy instead, see lib.sh), only
# the de-en files extracted:
#   http://statmt.org/wmt13/training-parallel-europarl-v7.tgz   training/europarl-v7.de-en.{de,en}
#   http://statmt.org/wmt13/training-parallel-commoncrawl.tgz   commoncrawl.de-en.{de,en}
#   http://statmt.org/wmt14/training-parallel-nc-v9.tgz         training/news-commentary-v9.de-en.{de,en}
#   validation newstest2013 (VALID_SET, sacreBLEU's wmt13): https://statmt.org/wmt13/test.tgz
#     test/newstest2013-src.{en,de}.sgm
#   test newstest2014 (full, 3003 sentences, as Vaswani et al. and fairseq; TEST_SET, sacreBLEU's wmt14/full):
#     https://statmt.org/wmt14/test-full.tgz  test-full/newstest2014-deen-{src,ref}.{en,de}.sgm
#   (TEST_SET=wmt14 gives sacreBLEU's filtered 2737-sentence version instead). The test sets' archives and files
#   are sacreBLEU's (its catalogue names them); their SGML becomes text as sacreBLEU makes it (wmt_sets.py).
# STOP_AFTER=raw|tok: stop once the corpus is downloaded / tokenized and cleaned.
# Pipeline: Moses punctuation normalization + tokenization (sacremoses), cleaning (1-CLEAN_MAX_LEN tokens, ratio
# CLEAN_RATIO), word alignment of ALIGN_LINES pairs, reorderer trained on REORDER_TRAIN_LINES pairs and applied
# to every split (REORDER_SHARDS parallel --shard jobs x --workers), joint BPE sentencepiece (32k), fairseq with a
# joined dictionary, fp16 on GPU, checkpoint averaging, beam 4, length penalty 0.6.
# Scores: detokenized sacreBLEU (with signature) and, for En => De, the tokenized compound-split BLEU of Vaswani
# et al. (2017)'s convention, which this project adds for comparison with papers that report WMT14 En-De that way
# (labelled as such; not comparable with sacreBLEU).
set -euo pipefail
# shellcheck source=recipes/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${DIRECTION:=en-de}"
case $DIRECTION in en-de|de-en) ;; *) xl_die "DIRECTION must be en-de or de-en, not '$DIRECTION'" ;; esac
SRC=${DIRECTION%-*} TGT=${DIRECTION#*-}
: "${SIZE:=base}"
: "${WORK:=./work/wmt14_${DIRECTION}_$SIZE}"
: "${DATA:=}"
: "${VALID_SET:=wmt13}"
: "${TEST_SET:=wmt14/full}"
: "${CLEAN_MAX_LEN:=250}"
: "${CLEAN_RATIO:=1.5}"
: "${SPM_TYPE:=bpe}"
# Tokens per update = MAX_TOKENS x UPDATE_FREQ x GPUs: the defaults give ~32k (base) / ~64k (big) on one GPU;
# divide UPDATE_FREQ by the number of GPUs.
xl_wmt_scale_defaults  # SIZE base|big: architecture, schedule, alignment/reorderer/sentencepiece sizes
xl_defaults

raw=$WORK/raw tok=$WORK/tok
mkdir -p "$raw" "$tok"

# 1. raw training corpus: $raw/train.{en,de}
if [ -n "$DATA" ]; then
  for lang in en de; do
    xl_need_file "$DATA/train.$lang" "DATA must hold raw (untokenized) train.{en,de}; valid/test.{en,de} optional."
  done
  # raw training text may hold empty lines: the cleaning step drops those pairs
  xl_check_parallel --allow-empty "$DATA/train.en" "$DATA/train.de"
  for lang in en de; do xl_step "$raw/train.$lang" --stdout -- cat "$DATA/train.$lang"; done
else
  # Each archive holds every language pair of its year; the de-en files are where fairseq's
  # examples/translation/prepare-wmt14en2de.sh reads them after extracting (its CORPORA list).
  parts=()
  for entry in "http://statmt.org/wmt13/training-parallel-europarl-v7.tgz training/europarl-v7.de-en" \
               "http://statmt.org/wmt13/training-parallel-commoncrawl.tgz commoncrawl.de-en" \
               "http://statmt.org/wmt14/training-parallel-nc-v9.tgz training/news-commentary-v9.de-en"; do
    url=${entry% *} member=${entry#* }
    archive=$WORK/download/${url#*://}
    xl_fetch "$url" "$archive"
    xl_extract "$archive" "$archive.d" "$member.de" "$member.en"
    parts+=("$archive.d/$member")
  done
  for lang in en de; do xl_step "$raw/train.$lang" --stdout -- cat "${parts[@]/%/.$lang}"; done
fi

# 2. validation and test sets: $raw/{valid,test}.{en,de}
xl_wmt_eval_sets en de
xl_stop_after raw

# 3. normalize + tokenize; clean the training pairs only (valid/test keep every line)
xl_tokenize_and_clean en de
xl_stop_after tok

# 4. reordering, subwords, data-bin, systems
xl_prepare
xl_train_and_translate

# 5. detokenize and score
mkdir -p "$WORK/scores"
for system in $SYSTEMS; do
  out=$WORK/out/$system
  xl_step "$out/test.detok" -- xlpos-prep detokenize --lang "$TGT" --input "$out/test.words" --output "$out/test.detok"
  xl_step "$WORK/scores/$system.bleu.json" -- xlpos-prep score --system "$system" --hyp "$out/test.detok" \
    --ref "$raw/test.$TGT" --name sacreBLEU --label "detokenized sacreBLEU vs the raw reference" \
    --out "$WORK/scores/$system.bleu.json"
  if [ "$TGT" = de ]; then
    xl_step "$WORK/scores/$system.compound.json" -- xlpos-prep score --system "$system" --hyp "$out/test.detok" \
      --ref "$raw/test.$TGT" --compound-split --lang de --tokenize none --name cs-BLEU \
      --label "tokenized compound-split BLEU (Moses tokenizer, ##AT##-##AT##; Vaswani et al. 2017 convention, not sacreBLEU)" \
      --out "$WORK/scores/$system.compound.json"
  fi
done
xl_report "WMT14 $SRC => $TGT ($TEST_SET), Transformer-$SIZE"
