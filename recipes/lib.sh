# shellcheck shell=bash
# What the xlpos recipes share. Source it from a recipe that runs under `set -euo pipefail`.
#
# A recipe holds what is specific to its corpus: download, tokenization, model sizes, scoring. It turns its corpus
# into word-tokenized, parallel files
#     $WORK/tok/{train,valid,test}.{$SRC,$TGT}
# (one sentence per line, tokens split by single spaces, no empty line) and calls
#     xl_prepare            `xlpos-prep prepare`: align -> oracle -> reorderer -> orders -> sentencepiece -> XL
#                           positions -> data-bin (preprocess/pipeline.py, the pipeline benchmarks/bleu.py runs too)
#     xl_train SYSTEM       baseline | xl-input | xl-head | xl-rope (`xlpos-prep train`, with the training options
#                           benchmarks/bleu.py trains with: preprocess/train_options.py)
#     xl_translate SYSTEM   [checkpoint averaging] -> fairseq-generate on test -> $WORK/out/SYSTEM/test.words
# Every step skips when it completed: its outputs exist with OUTPUT.done beside them, written only after the step
# succeeded. The rule is implemented once, in Python (xlpos_prep.io step_done/finish_step); the recipes' own
# commands go through it with `xl_step OUTPUT... [--stdout] -- COMMAND...` (`xlpos-prep step`). So a recipe killed at
# any moment and rerun gives what an uninterrupted run gives; delete an output or its .done (or all of $WORK) to
# redo a step. Outputs are written to a temporary name and renamed when complete.

XL_RECIPES_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

xl_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
xl_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# xl_step OUTPUT... [--stdout] -- CMD...: CMD makes OUTPUT...; skipped when that step completed, else run and, when
# it succeeds and every OUTPUT exists, marked done. --stdout: CMD's standard output is the (one) OUTPUT.
xl_step() { xlpos-prep step "$@" || exit 1; }

# xl_need_file PATH HINT: stop with a message saying what to do when PATH is missing.
xl_need_file() { [ -f "$1" ] || xl_die "$1 not found. $2"; }

# xl_check_parallel FILE...: files exist, have equal line counts and no empty line.
xl_check_parallel() { xlpos-prep check-parallel "$@" || exit 1; }

# ---------------------------------------------------------------------------------------------------- downloads
# xl_source_url URL: where URL is fetched from. XLPOS_MIRROR (a URL, e.g. http://host:8000/wmt or file:///data/wmt,
# or a local directory) holds copies of the files laid out as HOST/PATH of their original URLs, the layout
# `wget -x URL` and $WORK/download both use, so one $WORK/download can serve as the mirror of the next run.
xl_source_url() {
  local url=$1 mirror=${XLPOS_MIRROR:-}
  if [ -z "$mirror" ]; then echo "$url"; return 0; fi
  if [[ $mirror != *://* ]]; then
    [ -d "$mirror" ] || xl_die "XLPOS_MIRROR=$mirror is neither a URL nor a directory"
    mirror=file://$(cd "$mirror" && pwd)
  fi
  echo "${mirror%/}/${url#*://}"
}

# xl_fetch URL OUT: download URL (through XLPOS_MIRROR when set) to OUT, resuming a partial download. OUT appears
# only complete (the transfer goes to OUT.part, renamed at the end), so an existing OUT is never fetched again.
# Each try resumes from what OUT.part holds (curl -C -, an HTTP Range request); a server that cannot resume gets
# the whole file again. XL_FETCH_TRIES (default 5) tries, XL_FETCH_WAIT seconds apart (default 10, doubling).
xl_fetch() {
  local url=$1 out=$2 src try code rc wait=${XL_FETCH_WAIT:-10} tries=${XL_FETCH_TRIES:-5}
  [ -f "$out" ] && return 0
  src=$(xl_source_url "$url") || exit 1
  mkdir -p "$(dirname "$out")"
  for ((try = 1; try <= tries; try++)); do
    if [ -s "$out.part" ]; then xl_log "resume $src at byte $(stat -c %s "$out.part")"; else xl_log "download $src"; fi
    rc=0
    code=$(curl -fSL --connect-timeout 60 -C - -w '%{http_code}' -o "$out.part" "$src") || rc=$?
    if [ "$rc" = 0 ]; then
      mv -f "$out.part" "$out"
      return 0
    fi
    case $rc/$code in
      22/404|37/*)
        rm -f "$out.part"
        xl_die "$src not found (curl exit $rc, HTTP $code)${XLPOS_MIRROR:+; XLPOS_MIRROR must hold it as \
${url#*://}}" ;;
      # The server ignored the Range request (33), curl could not seek (36), or OUT.part is as long as the file or
      # longer (416; a run killed between the transfer and the rename): starting over is the answer we can trust.
      33/*|36/*|22/416) xl_log "cannot resume $src (curl exit $rc, HTTP $code): starting it over"; rm -f "$out.part" ;;
    esac
    if [ "$try" -lt "$tries" ]; then
      xl_log "download of $src failed (curl exit $rc); trying again in $wait s"
      sleep "$wait"
      wait=$((wait * 2))
    fi
  done
  xl_die "could not download $src in $tries tries; rerun to resume it, or put a copy under XLPOS_MIRROR (laid \
out as ${url#*://}, see recipes/lib.sh)"
}

# xl_extract ARCHIVE DIR MEMBER...: the MEMBERs of the (gzipped) tar ARCHIVE as DIR/MEMBER, a step of its own.
# Only these members are written: WMT's archives hold every language pair of the year (GBs we do not need).
# --no-anchored: a member matches whether the archive stores it as `training/x` or `./training/x`.
xl_extract() {
  local archive=$1 dir=$2 outs=() m
  shift 2
  for m in "$@"; do outs+=("$dir/$m"); done
  mkdir -p "$dir"
  xlpos-prep step "${outs[@]}" --message "extract $* from $archive" -- \
    tar -xzf "$archive" -C "$dir" --no-anchored "$@" \
    || xl_die "could not extract $* from $archive (a damaged download? delete it to fetch it again)"
}

# xl_stop_after STAGE: end the recipe here when STOP_AFTER=STAGE (raw: the corpus is downloaded and extracted into
# $WORK/raw; tok: it is tokenized and cleaned into $WORK/tok), e.g. to check the data before the long steps.
xl_stop_after() {
  if [ "${STOP_AFTER:-}" = "$1" ]; then
    xl_log "STOP_AFTER=$1: stopping after the $1 stage ($WORK/$1)"
    exit 0
  fi
}

xl_lines() { wc -l < "$1" | tr -d ' '; }

# xl_pass ARRAY OPTION VARIABLE...: append OPTION "$VARIABLE" to ARRAY for each pair whose variable is set and not
# empty; an unset one leaves the option to the package's default.
xl_pass() {
  local -n into=$1
  shift
  while [ $# -ge 2 ]; do
    [ -n "${!2:-}" ] && into+=("$1" "${!2}")
    shift 2
  done
  return 0
}

# xl_raw_text_args [normalize]: the XL checkpoint settings that let fairseq-interactive and the hub take raw $SRC
# text: split it into words as `xlpos-prep tokenize` split the corpus, with its punctuation/NFKC normalization when
# the recipe used --normalize, and join $TGT words back into text (the package's choice per language:
# xlpos_prep.text.raw_text_options).
xl_raw_text_args() {
  "${PYTHON:-python}" -c 'import sys; from xlpos_prep.text import raw_text_options as o
print(" ".join(o(sys.argv[1], sys.argv[2], sys.argv[3] == "normalize")))' "$SRC" "$TGT" "${1:-}"
}

# xl_wmt_scale_defaults: the WMT-scale recipes' shared defaults (WMT14, WAT17, WMT17): Transformer base or big
# by $SIZE with their schedules, update-based checkpoints, a sample of the corpus for alignment and the
# reorderer, and raw-text input for interactive/hub. A recipe sets its own differences first.
xl_wmt_scale_defaults() {
  : "${ALIGN_LINES:=1000000}"
  : "${REORDER_TRAIN_LINES:=100000}"
  : "${SPM_VOCAB:=32000}"
  case $SIZE in
    base)
      BASELINE_ARCH=transformer_wmt_en_de XL_ARCH=transformer_xlpos_wmt_en_de
      : "${MAX_UPDATE:=100000}" "${LR:=7e-4}" "${DROPOUT:=0.1}" "${AVG_LAST:=5}" "${UPDATE_FREQ:=8}" ;;
    big)
      BASELINE_ARCH=transformer_vaswani_wmt_en_de_big XL_ARCH=transformer_xlpos_vaswani_wmt_en_de_big
      : "${MAX_UPDATE:=300000}" "${LR:=5e-4}" "${DROPOUT:=0.3}" "${AVG_LAST:=20}" "${UPDATE_FREQ:=16}" ;;
    *) xl_die "SIZE must be base or big, not '$SIZE'" ;;
  esac
  : "${WEIGHT_DECAY:=0.0}"
  : "${SAVE_INTERVAL_UPDATES:=1000}"
  : "${BEAM:=4}"
  : "${LENPEN:=0.6}"
  : "${XL_INFERENCE_ARGS=$(xl_raw_text_args normalize)}"  # raw-text input for interactive/hub
}

# xl_private_tmp: every temporary of this run (eflomal's files, fairseq's and torch's pymp-* directories...) goes
# to one directory, TMPDIR=${TMPDIR:-/tmp}/xlpos-HOST-PID, removed when the recipe exits; those of this host's
# killed runs (PID dead) are removed here, so kills do not make them accumulate. The path is short on purpose:
# torch's data-loader workers open AF_UNIX sockets under TMPDIR, whose paths may not exceed 107 bytes, and
# fairseq-train hangs when one does (a directory under $WORK did, with a long WORK). A long TMPDIR falls back to /tmp.
xl_private_tmp() {
  local base=${TMPDIR:-/tmp} host d
  host=$(hostname -s 2>/dev/null || echo host)
  [ "${#base}" -le 40 ] || base=/tmp
  for d in "$base/xlpos-$host-"*; do
    [ -d "$d" ] && [ -O "$d" ] && ! kill -0 "${d##*-}" 2>/dev/null && rm -rf "$d"
  done
  XL_TMP=$base/xlpos-$host-$$
  mkdir -p "$XL_TMP"
  export TMPDIR=$XL_TMP
  trap 'rm -rf "$XL_TMP"' EXIT
}

# xl_defaults: settings every recipe shares; a recipe sets its own defaults before calling this.
xl_defaults() {
  : "${SRC:?}" "${TGT:?}" "${WORK:?}"
  : "${WORKERS:=$(nproc 2>/dev/null || echo 2)}"
  : "${SEED:=1}"
  : "${SYSTEMS:=baseline xl-input xl-head}"
  : "${ALIGN_LINES:=0}"            # 0: align all training pairs (plus test, for the evaluation oracle)
  : "${REORDER_TRAIN_LINES:=0}"    # 0: train the reorderer on all aligned training pairs
  : "${REORDER_ITERATIONS:=10}"
  : "${REORDER_LOSS:=}"            # empty: the reorderer's default loss
  : "${REORDER_SHARDS:=1}"         # >1: reorder each split as that many --shard jobs in parallel
  : "${REORDER_ARGS:=}"
  : "${ATTACH_NULL:=}"              # empty: the pipeline's default (left for a Japanese source, else right)
  : "${JACKKNIFE:=}"               # K: jackknifed orders for the reorderer's training lines (1: off); empty:
  #                                  the pipeline's default (docs/positions.md)
  : "${SPM_VOCAB:=8000}"
  : "${SPM_TYPE:=unigram}"
  : "${SPM_COVERAGE:=1.0}"
  : "${ARCH_ARGS:=}"               # extra model arguments, e.g. "--encoder-layers 2 --encoder-embed-dim 64"
  : "${XL_INFERENCE_ARGS:=}"        # raw text -> words for interactive/hub; recipes on raw corpora: xl_raw_text_args
  : "${XL_ARGS:=}"                 # extra arguments for the XL systems only, e.g. "--xl-heads 4"
  : "${XL_INPUT_ARGS:=}"           # ... for xl-input only, e.g. "--xl-fusion gated"
  : "${XL_HEAD_ARGS:=}"            # ... for xl-head only
  : "${XL_ROPE_ARGS:=}"            # ... for xl-rope only
  : "${TRAIN_ARGS:=}"              # extra fairseq-train arguments for every system
  # MAX_UPDATE, MAX_TOKENS, UPDATE_FREQ, LR, WARMUP, DROPOUT, WEIGHT_DECAY: the shared training options; unset, the
  # package's defaults (`xlpos-prep train --help`)
  : "${SAVE_INTERVAL_UPDATES:=0}"  # 0: one checkpoint per epoch
  : "${AVG_LAST:=1}"               # >1: average the last AVG_LAST checkpoints before decoding
  : "${BEAM:=4}"
  : "${LENPEN:=0.6}"
  : "${GEN_MAX_TOKENS:=8000}"
  : "${GEN_ARGS:=}"                # extra fairseq-generate arguments, e.g. "--max-len-a 1.2 --max-len-b 10"
  : "${FP16:=1}"                   # on GPU only
  : "${VERBOSE:=0}"                # 1: show fairseq's logs as well as writing them to files
  : "${STOP_AFTER:=}"              # raw | tok: end after that stage (xl_stop_after); empty: run everything
  : "${XLPOS_MIRROR:=}"            # where downloads come from instead of their hosts (xl_source_url)
  local system var
  # Integers the recipes compute with or pass on: a typo stops here, naming the variable, not in bash arithmetic.
  for var in WORKERS SEED ALIGN_LINES REORDER_TRAIN_LINES REORDER_ITERATIONS REORDER_SHARDS SPM_VOCAB MAX_TOKENS \
             UPDATE_FREQ WARMUP SAVE_INTERVAL_UPDATES AVG_LAST BEAM GEN_MAX_TOKENS MAX_UPDATE; do
    [ -z "${!var+x}" ] || [[ ${!var} =~ ^[0-9]+$ ]] || xl_die "$var must be a non-negative integer, not '${!var}'"
  done
  [ "$WORKERS" -ge 1 ] || xl_die "WORKERS must be at least 1, not '$WORKERS'"
  case $STOP_AFTER in ''|raw|tok) ;; *) xl_die "STOP_AFTER must be raw or tok (or empty), not '$STOP_AFTER'" ;; esac
  command -v xlpos-prep >/dev/null || xl_die "xlpos-prep not found: install xlpos first (pip install -e .)"
  # shellcheck disable=SC2086
  "${PYTHON:-python}" -c 'import sys; from xlpos_prep.systems import recipe_systems_problem as p
sys.exit(p(sys.argv[1:]))' $SYSTEMS || exit 1
  XL_DATABIN=$WORK/data-bin
  xl_private_tmp
  command -v fairseq-train >/dev/null || xl_die "fairseq-train not found: install xlpos first (pip install -e .)"
  mkdir -p "$WORK"
}

# ---------------------------------------------------------------------------------------------------- data
# xl_prepare: $WORK/tok -> reorder/ (alignment, oracle, reorderer, orders, test.tau.json), spm/, pieces/, data-bin/
# and prepare.json (the settings, e.g. the oracle's --attach-null: left for a Japanese source).
xl_prepare() {
  local args=(--work "$WORK" --src "$SRC" --tgt "$TGT" --workers "$WORKERS" --seed "$SEED"
              --align-lines "$ALIGN_LINES" --reorder-train-lines "$REORDER_TRAIN_LINES"
              --reorder-iterations "$REORDER_ITERATIONS" --reorder-shards "$REORDER_SHARDS"
              --spm-vocab "$SPM_VOCAB" --spm-type "$SPM_TYPE" --spm-coverage "$SPM_COVERAGE")
  # A recipe that cleans by length (CLEAN_MAX_LEN) trains the reorderer on every sentence it kept: train-reorderer
  # skips longer ones (its default --max-len is 100 words), and its fallback then keeps a sentence longer than its
  # longest training sentence monotone unless the model beats that by a margin growing with the square of the
  # excess: most of WMT's 100-250-word sentences. REORDER_ARGS comes after, so a --max-len there wins.
  local reorder_args=$REORDER_ARGS
  [ -n "${CLEAN_MAX_LEN:-}" ] && reorder_args="--max-len $CLEAN_MAX_LEN${reorder_args:+ $reorder_args}"
  xl_pass args --reorder-loss REORDER_LOSS --reorder-args reorder_args --attach-null ATTACH_NULL --jackknife JACKKNIFE
  [ "$VERBOSE" = 1 ] && args+=(--verbose-steps)
  xlpos-prep prepare "${args[@]}" || exit 1
}

# ---------------------------------------------------------------------------------------------------- models
# xl_train SYSTEM: `xlpos-prep train` (the system's fairseq task and options; the training options benchmarks/bleu.py
# trains with) into $WORK/checkpoints/SYSTEM; a killed run resumes from fairseq's checkpoint_last.pt there. XL
# systems also get XL_INFERENCE_ARGS, XL_ARGS and their own XL_<SYSTEM>_ARGS (xl-input: XL_INPUT_ARGS), and carry the
# reorderer and sentencepiece model in every checkpoint, so fairseq-interactive and the hub compute XL positions for
# raw text with nothing else given.
xl_train() {
  local system=$1 own=${1^^} options=() save_args=(--keep-last-epochs "$AVG_LAST") show=()
  own=${own//-/_}_ARGS
  xl_device
  xl_pass options --max-update MAX_UPDATE --max-tokens MAX_TOKENS --update-freq UPDATE_FREQ --lr LR \
    --warmup-updates WARMUP --dropout DROPOUT --weight-decay WEIGHT_DECAY
  if [ "$SAVE_INTERVAL_UPDATES" -gt 0 ]; then
    save_args+=(--save-interval-updates "$SAVE_INTERVAL_UPDATES" --keep-interval-updates "$AVG_LAST"
                --no-epoch-checkpoints)
  fi
  [ "$VERBOSE" = 1 ] && show=(--show)
  # shellcheck disable=SC2086
  xlpos-prep train --system "$system" --arch "$BASELINE_ARCH" --xl-arch "$XL_ARCH" --data-bin "$XL_DATABIN" \
    --save-dir "$WORK/checkpoints/$system" --source-lang "$SRC" --target-lang "$TGT" "${options[@]}" "${show[@]}" \
    --xl-args "$(printf '%q ' --xl-reorderer "$WORK/reorder/reorderer.model" --xl-spm "$WORK/spm/spm.model") \
$XL_INFERENCE_ARGS $XL_ARGS ${!own:-}" -- $ARCH_ARGS "${save_args[@]}" --seed "$SEED" --log-format simple \
    --log-interval 50 --no-progress-bar "${XL_DEVICE_ARGS[@]}" $TRAIN_ARGS || exit 1
}

# xl_device: XL_DEVICE_ARGS, fairseq's device options (--cpu without CUDA; --fp16 with CUDA and FP16=1), decided
# when training or decoding first needs them (xlpos_prep.device: a CPU build of torch is known without importing it).
xl_device() {
  [ -n "${XL_DEVICE_DECIDED:-}" ] && return 0
  local args
  args=$("${PYTHON:-python}" -c 'import sys; from xlpos_prep.device import fairseq_device_args as d
print(*d(fp16=sys.argv[1] == "1"))' "$FP16") || xl_die "could not decide the device for fairseq"
  read -r -a XL_DEVICE_ARGS <<< "$args"
  XL_DEVICE_DECIDED=1
}

# xl_checkpoint SYSTEM: the checkpoint to decode with (averaged when AVG_LAST > 1). Sets XL_CHECKPOINT.
xl_checkpoint() {
  local save=$WORK/checkpoints/$1
  if [ "$AVG_LAST" -le 1 ]; then
    XL_CHECKPOINT=$save/checkpoint_best.pt
    return 0
  fi
  XL_CHECKPOINT=$save/checkpoint.avg$AVG_LAST.pt
  local which=(--num-epoch-checkpoints "$AVG_LAST")
  [ "$SAVE_INTERVAL_UPDATES" -gt 0 ] && which=(--num-update-checkpoints "$AVG_LAST")
  xlpos-prep step "$XL_CHECKPOINT" -- "${PYTHON:-python}" "$XL_RECIPES_DIR/average_checkpoints.py" \
    --inputs "$save" "${which[@]}" --output "$XL_CHECKPOINT" || xl_die "could not average the last $AVG_LAST \
checkpoints of $save; train for more updates or set AVG_LAST=1 to decode with checkpoint_best.pt"
}

# xl_translate SYSTEM: translate the test set -> $WORK/out/SYSTEM/test.words (spm-decoded, word-tokenized).
xl_translate() {
  local system=$1
  xl_device
  xl_checkpoint "$system"
  # shellcheck disable=SC2086
  xlpos-prep translate --data-bin "$XL_DATABIN" --path "$XL_CHECKPOINT" --source-lang "$SRC" --target-lang "$TGT" \
    --spm "$WORK/spm/spm.model" --expected "$(xl_lines "$WORK/tok/test.$TGT")" --out-dir "$WORK/out/$system" \
    --system "$system" -- --beam "$BEAM" --lenpen "$LENPEN" --max-tokens "$GEN_MAX_TOKENS" --seed "$SEED" \
    "${XL_DEVICE_ARGS[@]}" $GEN_ARGS || exit 1
}

# xl_train_and_translate: every system of SYSTEMS.
xl_train_and_translate() {
  local system
  for system in $SYSTEMS; do
    xl_train "$system"
    xl_translate "$system"
  done
}

# xl_report TITLE: the results table from $WORK/scores/*.json, also saved as $WORK/results.txt.
xl_report() {
  local system files=()
  for system in $SYSTEMS; do
    for f in "$WORK/scores/$system".*json; do [ -e "$f" ] && files+=("$f"); done
  done
  xlpos-prep report --title "$1" --scores "${files[@]}" --tau "$WORK/reorder/test.tau.json" --out "$WORK/results.txt"
}

# xl_tokenize_and_clean L1 L2: $WORK/raw/{train,valid,test}.L -> normalized, tokenized $WORK/tok/*.L; only the
# training pairs are cleaned (length/ratio), valid and test keep every line.
xl_tokenize_and_clean() {
  local raw=$WORK/raw tok=$WORK/tok split lang out
  for split in train valid test; do
    for lang in "$1" "$2"; do
      out=$tok/$split.$lang
      [ "$split" = train ] && out=$tok/train.unclean.$lang
      xl_step "$out" -- xlpos-prep tokenize --lang "$lang" --normalize --input "$raw/$split.$lang" --output "$out" \
        --workers "$WORKERS"
    done
  done
  xl_step "$tok/train.$SRC" "$tok/train.$TGT" -- xlpos-prep clean --src "$tok/train.unclean.$SRC" \
    --tgt "$tok/train.unclean.$TGT" --src-out "$tok/train.$SRC" --tgt-out "$tok/train.$TGT" \
    --max-len "$CLEAN_MAX_LEN" --ratio "$CLEAN_RATIO"
}

# xl_wmt_eval_sets SRC_LANG REF_LANG: $WORK/raw/{valid,test}.{SRC_LANG,REF_LANG} from DATA when it has them, else
# sacreBLEU's test sets $VALID_SET and $TEST_SET (sacreBLEU's pair SRC_LANG-REF_LANG): the archive sacreBLEU names
# is downloaded by xl_fetch (XLPOS_MIRROR, resuming) and its files turned into text as sacreBLEU does
# (wmt_sets.py); a set that is not one archive of SGML or text files is fetched by sacrebleu itself.
xl_wmt_eval_sets() {
  local raw=$WORK/raw split set_name lang side where url members archive dir rc
  for split in valid test; do
    set_name=$VALID_SET
    [ "$split" = test ] && set_name=$TEST_SET
    if [ -n "$DATA" ] && [ -f "$DATA/$split.$1" ] && [ -f "$DATA/$split.$2" ]; then
      for lang in "$1" "$2"; do xl_step "$raw/$split.$lang" --stdout -- cat "$DATA/$split.$lang"; done
      xl_check_parallel "$raw/$split.$1" "$raw/$split.$2"
      continue
    fi
    rc=0
    where=$("${PYTHON:-python}" "$XL_RECIPES_DIR/wmt_sets.py" locate "$set_name" "$1-$2") || rc=$?
    if [ "$rc" = 0 ]; then
      mapfile -t members <<< "$where"  # URL, source file, reference file
      url=${members[0]}
      archive=$WORK/download/${url#*://}
      dir=$archive.d
      xl_fetch "$url" "$archive"
      xl_extract "$archive" "$dir" "${members[1]}" "${members[2]}"
      xl_step "$raw/$split.$1" --stdout -- "${PYTHON:-python}" "$XL_RECIPES_DIR/wmt_sets.py" text "$dir/${members[1]}"
      xl_step "$raw/$split.$2" --stdout -- "${PYTHON:-python}" "$XL_RECIPES_DIR/wmt_sets.py" text "$dir/${members[2]}"
    elif [ "$rc" = 3 ]; then
      for lang in "$1" "$2"; do
        side=src
        [ "$lang" = "$2" ] && side=ref
        xlpos-prep step "$raw/$split.$lang" --stdout --message "sacrebleu -t $set_name -l $1-$2 --echo $side" -- \
          sacrebleu -t "$set_name" -l "$1-$2" --echo "$side" \
          || xl_die "could not fetch $set_name with sacrebleu (network?); put $split.{$1,$2} into DATA instead"
      done
    else
      exit 1  # wmt_sets.py said why (an unknown set or language pair)
    fi
    xl_check_parallel "$raw/$split.$1" "$raw/$split.$2"
  done
}
