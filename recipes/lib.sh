# shellcheck shell=bash
# Shared steps of the xlpos recipes. Source it from a recipe that runs under `set -euo pipefail`.
#
# A recipe turns its corpus into word-tokenized, parallel files
#     $WORK/tok/{train,valid,test}.{$SRC,$TGT}
# (one sentence per line, tokens split by single spaces, no empty line) and calls the steps below:
#     xl_reordering    align -> oracle -> train-reorderer -> reorder every split -> tau on test
#     xl_subwords      joint sentencepiece -> piece-level XL positions (+ the pieces fairseq sees)
#     xl_databin       fairseq-preprocess (joined dictionary) + binarized XL positions
#     xl_train SYSTEM  baseline | xl-input | xl-head | xl-rope
#     xl_translate SYSTEM   [checkpoint averaging] -> fairseq-generate on test -> $WORK/out/SYSTEM/test.words
# Every step skips when it completed: its outputs exist with OUTPUT.done beside them, written only after the step
# succeeded (xl_step; preprocess/io.py step_done/finish_step is the same rule in Python, for benchmarks/bleu.py).
# So a recipe killed at any moment and rerun gives what an uninterrupted run gives; delete an output or its .done
# (or all of $WORK) to redo a step. Outputs are written to a temporary name and renamed when complete.

XL_RECIPES_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
XL_REPO_DIR=$(dirname "$XL_RECIPES_DIR")
XL_TEXT_TOOLS=("${PYTHON:-python}" "$XL_RECIPES_DIR/text_tools.py")

xl_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
xl_die() { printf 'error: %s\n' "$*" >&2; exit 1; }
xl_text() { "${XL_TEXT_TOOLS[@]}" "$@"; }

# xl_have OUTPUT...: true (and says so) when the step making every OUTPUT completed: OUTPUT and OUTPUT.done exist.
# An output without its .done may be a killed run's (a partly written directory, a model of some iterations).
xl_have() {
  local p
  for p in "$@"; do { [ -e "$p" ] && [ -e "$p.done" ]; } || return 1; done
  xl_log "skip: $* (done)"
}

# xl_step OUTPUT... -- CMD...: the step CMD makes OUTPUT...; skipped when xl_have OUTPUT..., else run and, when it
# succeeds and every OUTPUT exists, marked done.
xl_step() {
  local outs=() p
  while [ "$#" -gt 0 ] && [ "$1" != -- ]; do outs+=("$1"); shift; done
  [ "$#" -gt 1 ] || xl_die "xl_step ${outs[*]}: no '-- COMMAND'"
  shift
  xl_have "${outs[@]}" && return 0
  for p in "${outs[@]}"; do rm -f "$p.done"; done
  "$@" || return
  xl_done "${outs[@]}"
}

# xl_done OUTPUT...: mark outputs complete, after the step that made them succeeded.
xl_done() {
  local p
  for p in "$@"; do
    [ -e "$p" ] || xl_die "$p was not written by the step that should make it"
    echo done > "$p.done"
  done
}

# xl_into OUT CMD...: run CMD with stdout into OUT, atomically (temporary file, renamed on success). Temporaries of
# killed runs (OUT.tmp.PID with PID dead) are removed first, so they do not accumulate.
xl_into() {
  local out=$1 t; shift
  mkdir -p "$(dirname "$out")"
  for t in "$out".tmp.*; do
    [ -e "$t" ] && ! kill -0 "${t##*.}" 2>/dev/null && rm -f "$t"
  done
  "$@" > "$out.tmp.$$" || { rm -f "$out.tmp.$$"; return 1; }
  mv "$out.tmp.$$" "$out"
}

# xl_need_file PATH HINT: stop with a message saying what to do when PATH is missing.
xl_need_file() { [ -f "$1" ] || xl_die "$1 not found. $2"; }

# xl_check_parallel FILE...: files exist, have equal line counts and no empty line.
xl_check_parallel() { xl_text check-parallel "$@" || exit 1; }

xl_lines() { wc -l < "$1" | tr -d ' '; }

# xl_raw_text_args [normalize]: the XL checkpoint settings that let fairseq-interactive and the hub take raw $SRC
# text: split it into words as `text_tools.py tokenize` split the corpus (sacremoses; fugashi for ja, jieba for zh),
# with its punctuation/NFKC normalization when the recipe used --normalize, and join $TGT words back into text.
xl_raw_text_args() {
  local tok=moses detok=moses
  case $SRC in ja|zh) tok=$SRC ;; esac
  case $TGT in ja|zh) detok=$TGT ;; esac
  echo "--xl-word-tokenizer $tok --xl-detokenizer $detok${1:+ --xl-normalize}"
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
  : "${MAX_TOKENS:=4096}"
  : "${WARMUP:=4000}"
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
  : "${MAX_TOKENS:=4096}"
  : "${UPDATE_FREQ:=1}"
  : "${LR:=5e-4}"
  : "${WARMUP:=4000}"
  : "${DROPOUT:=0.3}"
  : "${WEIGHT_DECAY:=0.0001}"
  : "${SAVE_INTERVAL_UPDATES:=0}"  # 0: one checkpoint per epoch
  : "${AVG_LAST:=1}"               # >1: average the last AVG_LAST checkpoints before decoding
  : "${BEAM:=4}"
  : "${LENPEN:=0.6}"
  : "${GEN_MAX_TOKENS:=8000}"
  : "${GEN_ARGS:=}"                # extra fairseq-generate arguments, e.g. "--max-len-a 1.2 --max-len-b 10"
  : "${FP16:=1}"                   # on GPU only
  : "${VERBOSE:=0}"                # 1: show fairseq's logs as well as writing them to files
  local system var
  # Integers the recipes compute with or pass on: a typo stops here, naming the variable, not in bash arithmetic.
  for var in WORKERS SEED ALIGN_LINES REORDER_TRAIN_LINES REORDER_ITERATIONS REORDER_SHARDS SPM_VOCAB MAX_TOKENS \
             UPDATE_FREQ WARMUP SAVE_INTERVAL_UPDATES AVG_LAST BEAM GEN_MAX_TOKENS MAX_UPDATE; do
    [ -z "${!var+x}" ] || [[ ${!var} =~ ^[0-9]+$ ]] || xl_die "$var must be a non-negative integer, not '${!var}'"
  done
  [ "$WORKERS" -ge 1 ] || xl_die "WORKERS must be at least 1, not '$WORKERS'"
  for system in $SYSTEMS; do
    case $system in baseline|xl-input|xl-head|xl-rope) ;;
      *) xl_die "unknown system '$system' in SYSTEMS (use baseline, xl-input, xl-head, xl-rope)" ;; esac
  done
  XL_DATABIN=$WORK/data-bin
  XL_CUDA=$("${PYTHON:-python}" -c 'import torch; print(int(torch.cuda.is_available()))')
  if [ "$XL_CUDA" = 1 ]; then
    XL_DEVICE_ARGS=()
    [ "$FP16" = 1 ] && XL_DEVICE_ARGS=(--fp16)
  else
    XL_DEVICE_ARGS=(--cpu)
  fi
  # A WORK made before steps left .done markers: its trained models would be paired with redone (and, eflomal
  # being unseeded, different) data. Say so instead of mixing them.
  if [ -e "$WORK/data-bin/preprocess.done" ] && [ ! -e "$WORK/data-bin.done" ]; then
    xl_die "$WORK was made by an older xlpos whose steps left no completion markers (OUTPUT.done): delete it, or \
move it away, and rerun"
  fi
  command -v xlpos-prep >/dev/null || xl_die "xlpos-prep not found: install xlpos first (pip install -e .)"
  xl_private_tmp
  command -v fairseq-train >/dev/null || xl_die "fairseq-train not found: install xlpos first (pip install -e .)"
  mkdir -p "$WORK"
}

# xl_run LOG CMD...: run a long command with its output in LOG; on failure show the end of LOG and stop.
xl_run() {
  local log=$1; shift
  mkdir -p "$(dirname "$log")"
  if [ "$VERBOSE" = 1 ]; then
    "$@" 2>&1 | tee -a "$log" || xl_die "$1 failed; its log is $log"
  elif ! "$@" >> "$log" 2>&1; then
    tail -n 25 "$log" >&2
    xl_die "$1 failed; the end of its log ($log) is above"
  fi
}

# ---------------------------------------------------------------------------------------------------- reordering
xl_reordering() {
  local tok=$WORK/tok r=$WORK/reorder split
  mkdir -p "$r"
  local n_train n_test n_align n_reorder
  n_train=$(xl_lines "$tok/train.$SRC")
  n_test=$(xl_lines "$tok/test.$SRC")
  n_align=$ALIGN_LINES
  if [ "$n_align" = 0 ] || [ "$n_align" -gt "$n_train" ]; then n_align=$n_train; fi
  n_reorder=$REORDER_TRAIN_LINES
  if [ "$n_reorder" = 0 ] || [ "$n_reorder" -gt "$n_align" ]; then n_reorder=$n_align; fi

  # Word alignment of the first n_align training pairs plus the test set. The test alignments only give the
  # oracle the reorderer is evaluated against; no model ever sees the test targets.
  if ! xl_have "$r/align.txt"; then
    xl_log "align: $n_align training + $n_test test sentence pairs"
    xl_into "$r/align-input.$SRC" cat <(head -n "$n_align" "$tok/train.$SRC") "$tok/test.$SRC"
    xl_into "$r/align-input.$TGT" cat <(head -n "$n_align" "$tok/train.$TGT") "$tok/test.$TGT"
    xlpos-prep align --src "$r/align-input.$SRC" --tgt "$r/align-input.$TGT" --out "$r/align.txt" --seed "$SEED"
    xl_done "$r/align.txt"
  fi
  [ "$(xl_lines "$r/align.txt")" = $((n_align + n_test)) ] \
    || xl_die "$r/align.txt does not have $n_align + $n_test lines: the corpus changed since it was made; delete $r"
  xl_step "$r/train.align" -- xl_into "$r/train.align" head -n "$n_reorder" "$r/align.txt"
  xl_step "$r/test.align" -- xl_into "$r/test.align" tail -n "$n_test" "$r/align.txt"
  xl_step "$r/train.src" -- xl_into "$r/train.src" head -n "$n_reorder" "$tok/train.$SRC"

  xl_step "$r/train.oracle" -- xlpos-prep oracle --src "$r/train.src" --align "$r/train.align" \
    --out "$r/train.oracle" --workers "$WORKERS"
  xl_step "$r/test.oracle" -- xlpos-prep oracle --src "$tok/test.$SRC" --align "$r/test.align" \
    --out "$r/test.oracle" --workers "$WORKERS"

  xl_step "$r/reorderer.model" -- xl_train_reorderer "$n_reorder"
  # The model's own predictions on every split, training included: training and test then see the same kind
  # of XL positions (DESIGN.md).
  for split in train valid test; do xl_reorder_split "$split"; done
  xl_step "$r/test.tau.json" -- xlpos-prep evaluate --order "$r/test.order" --oracle "$r/test.oracle" \
    --json "$r/test.tau.json"
}

# xl_train_reorderer N: train-reorderer on $WORK/reorder/train.*; a killed run's snapshot
# (reorderer.model.snapshot) is resumed, which gives the model an uninterrupted run gives.
xl_train_reorderer() {
  local r=$WORK/reorder resume=()
  [ -e "$r/reorderer.model.snapshot" ] && resume=(--resume)
  xl_log "train-reorderer: $1 sentences, $REORDER_ITERATIONS iterations${resume:+ (resuming its snapshot)}"
  # shellcheck disable=SC2086
  xlpos-prep train-reorderer --src "$r/train.src" --oracle "$r/train.oracle" --model "$r/reorderer.model" \
    --iterations "$REORDER_ITERATIONS" ${REORDER_LOSS:+--loss "$REORDER_LOSS"} $REORDER_ARGS "${resume[@]}"
}

xl_reorder_split() {
  local split=$1 r=$WORK/reorder i pids=() per_shard
  local src=$WORK/tok/$split.$SRC out=$WORK/reorder/$split.order
  xl_have "$out" && return 0
  if [ "$REORDER_SHARDS" -le 1 ]; then
    xl_step "$out" -- xlpos-prep reorder --model "$r/reorderer.model" --src "$src" --out "$out" --workers "$WORKERS"
    return 0
  fi
  # Shards are contiguous blocks of lines, so concatenating them in order gives the whole split.
  per_shard=$(( (WORKERS + REORDER_SHARDS - 1) / REORDER_SHARDS ))
  for ((i = 0; i < REORDER_SHARDS; i++)); do
    xl_have "$out.shard$i" && continue
    xl_step "$out.shard$i" -- xlpos-prep reorder --model "$r/reorderer.model" --src "$src" --out "$out.shard$i" \
      --shard "$i/$REORDER_SHARDS" --workers "$per_shard" &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || xl_die "reordering $src failed (a --shard job)"; done
  local parts=()
  for ((i = 0; i < REORDER_SHARDS; i++)); do parts+=("$out.shard$i"); done
  xl_step "$out" -- xl_into "$out" cat "${parts[@]}"
  rm -f "$out".shard*
}

# ---------------------------------------------------------------------------------------------------- subwords
xl_subwords() {
  local tok=$WORK/tok spm=$WORK/spm/spm p=$WORK/pieces split
  if ! xl_have "$spm.model" "$spm.vocab"; then
    xl_log "sentencepiece: joint $SPM_TYPE model, vocabulary $SPM_VOCAB"
    xl_text spm-train --input "$tok/train.$SRC" "$tok/train.$TGT" --model-prefix "$spm" \
      --vocab-size "$SPM_VOCAB" --model-type "$SPM_TYPE" --character-coverage "$SPM_COVERAGE" \
      --threads "$WORKERS" --seed "$SEED"
    xl_done "$spm.model" "$spm.vocab"
  fi
  mkdir -p "$p"
  for split in train valid test; do
    # Source pieces come from `positions`, so the pieces fairseq sees and the XL positions line up exactly.
    xl_step "$p/$split.xlpos" "$p/$split.$SRC" -- xlpos-prep positions --src "$tok/$split.$SRC" \
      --order "$WORK/reorder/$split.order" --spm "$spm.model" --out "$p/$split.xlpos" --pieces-out "$p/$split.$SRC"
    xl_step "$p/$split.$TGT" -- xl_text spm-encode --model "$spm.model" --input "$tok/$split.$TGT" \
      --output "$p/$split.$TGT"
  done
}

# ---------------------------------------------------------------------------------------------------- data-bin
xl_databin() {
  local p=$WORK/pieces d=$XL_DATABIN split
  if ! xl_have "$d"; then
    rm -rf "$d"  # a half-made data-bin from an interrupted run
    xl_log "fairseq-preprocess: joined dictionary -> $d"
    xl_run "$WORK/logs/preprocess.log" fairseq-preprocess --source-lang "$SRC" --target-lang "$TGT" \
      --trainpref "$p/train" --validpref "$p/valid" --testpref "$p/test" --destdir "$d" \
      --joined-dictionary --workers "$WORKERS"
    xl_done "$d"
  fi
  for split in train valid test; do
    xl_step "$d/$split.$SRC-$TGT.xlpos.bin" "$d/$split.$SRC-$TGT.xlpos.idx" -- xlpos-prep binarize \
      --xlpos "$p/$split.xlpos" --data-bin "$d" --split "$split" --source-lang "$SRC" --target-lang "$TGT"
  done
}

# ---------------------------------------------------------------------------------------------------- models
# xl_task_args SYSTEM: fairseq task/model arguments of a system. --user-dir is given to the baseline too: the
# plugin's checkpoint loading (weights_only with an allowlist) is what lets torch>=2.6 load fairseq checkpoints.
xl_task_args() {
  XL_TASK_ARGS=(--user-dir "$XL_REPO_DIR/xlpos")
  case $1 in
    baseline) XL_TASK_ARGS+=(--task translation) ;;
    xl-input|xl-head|xl-rope) XL_TASK_ARGS+=(--task translation_xlpos) ;;
    *) xl_die "unknown system '$1' in SYSTEMS (use baseline, xl-input, xl-head, xl-rope)" ;;
  esac
}

# A killed training run resumes from fairseq's checkpoint_last.pt in $save (fairseq's own resume).
xl_train() {
  local system=$1 save=$WORK/checkpoints/$1 arch xl=()
  xl_have "$save" && return 0
  xl_task_args "$system"
  if [ "$system" = baseline ]; then
    arch=$BASELINE_ARCH
  else
    arch=$XL_ARCH
    # shellcheck disable=SC2206
    local own
    case $system in xl-input) own=$XL_INPUT_ARGS ;; xl-head) own=$XL_HEAD_ARGS ;; *) own=$XL_ROPE_ARGS ;; esac
    # shellcheck disable=SC2206
    # The reorderer and sentencepiece model go into every checkpoint, so fairseq-interactive and the hub
    # compute XL positions for raw text with nothing else given.
    # shellcheck disable=SC2206
    xl=(--xl-integration "${system#xl-}" --xl-reorderer "$WORK/reorder/reorderer.model"
        --xl-spm "$WORK/spm/spm.model" $XL_INFERENCE_ARGS $XL_ARGS $own)
  fi
  local save_args=(--save-dir "$save" --keep-last-epochs "$AVG_LAST")
  if [ "$SAVE_INTERVAL_UPDATES" -gt 0 ]; then
    save_args+=(--save-interval-updates "$SAVE_INTERVAL_UPDATES" --keep-interval-updates "$AVG_LAST"
                --no-epoch-checkpoints)
  fi
  xl_log "train $system ($arch, $MAX_UPDATE updates; log: $save/train.log)"
  local start=$SECONDS
  # shellcheck disable=SC2086
  xl_run "$save/train.log" fairseq-train "$XL_DATABIN" "${XL_TASK_ARGS[@]}" --arch "$arch" "${xl[@]}" \
    --source-lang "$SRC" --target-lang "$TGT" --share-all-embeddings $ARCH_ARGS \
    --optimizer adam --adam-betas '(0.9, 0.98)' --clip-norm 0.0 --lr "$LR" --lr-scheduler inverse_sqrt \
    --warmup-updates "$WARMUP" --warmup-init-lr 1e-07 --dropout "$DROPOUT" --weight-decay "$WEIGHT_DECAY" \
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
    --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --max-update "$MAX_UPDATE" \
    "${save_args[@]}" --seed "$SEED" --log-format simple --log-interval 50 --no-progress-bar \
    "${XL_DEVICE_ARGS[@]}" $TRAIN_ARGS
  xl_done "$save"
  xl_log "trained $system in $((SECONDS - start)) s"
}

# xl_checkpoint SYSTEM: the checkpoint to decode with (averaged when AVG_LAST > 1). Sets XL_CHECKPOINT.
xl_checkpoint() {
  local save=$WORK/checkpoints/$1
  if [ "$AVG_LAST" -le 1 ]; then
    XL_CHECKPOINT=$save/checkpoint_best.pt
    return 0
  fi
  XL_CHECKPOINT=$save/checkpoint.avg$AVG_LAST.pt
  xl_have "$XL_CHECKPOINT" && return 0
  rm -f "$XL_CHECKPOINT.done"
  local which=(--num-epoch-checkpoints "$AVG_LAST")
  [ "$SAVE_INTERVAL_UPDATES" -gt 0 ] && which=(--num-update-checkpoints "$AVG_LAST")
  "${PYTHON:-python}" "$XL_RECIPES_DIR/average_checkpoints.py" --inputs "$save" "${which[@]}" \
    --output "$XL_CHECKPOINT" || xl_die "could not average the last $AVG_LAST checkpoints of $save; train for \
more updates or set AVG_LAST=1 to decode with checkpoint_best.pt"
  xl_done "$XL_CHECKPOINT"
}

# xl_translate SYSTEM: translate the test set -> $WORK/out/SYSTEM/test.words (spm-decoded, word-tokenized).
xl_translate() {
  local system=$1 out=$WORK/out/$1
  xl_have "$out/test.words" && return 0
  xl_checkpoint "$system"
  xl_task_args "$system"
  mkdir -p "$out"
  xl_log "translate test with $system"
  # shellcheck disable=SC2086
  if ! xl_have "$out/generate.txt"; then
    # --required-batch-size-multiple 1: fairseq 0.12 drops the last batch when its size is not a multiple of
    # this (default 8), i.e. up to 7 test sentences (facebookresearch/fairseq#5036)
    xl_into "$out/generate.txt" fairseq-generate "$XL_DATABIN" "${XL_TASK_ARGS[@]}" --source-lang "$SRC" \
      --target-lang "$TGT" --gen-subset test --path "$XL_CHECKPOINT" --beam "$BEAM" --lenpen "$LENPEN" \
      --max-tokens "$GEN_MAX_TOKENS" --required-batch-size-multiple 1 --seed "$SEED" "${XL_DEVICE_ARGS[@]}" \
      $GEN_ARGS 2> "$out/generate.log" \
      || { tail -n 25 "$out/generate.log" >&2; xl_die "fairseq-generate failed; log: $out/generate.log"; }
    xl_done "$out/generate.txt"
  fi
  xl_text hypotheses --generate-output "$out/generate.txt" --expected "$(xl_lines "$WORK/tok/test.$TGT")" \
    --output "$out/test.pieces"
  xl_text spm-decode --model "$WORK/spm/spm.model" --input "$out/test.pieces" --output "$out/test.words"
  xl_done "$out/test.words"
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
  xl_text report --title "$1" --scores "${files[@]}" --tau "$WORK/reorder/test.tau.json" --out "$WORK/results.txt"
}

# xl_tokenize_and_clean L1 L2: $WORK/raw/{train,valid,test}.L -> normalized, tokenized $WORK/tok/*.L; only the
# training pairs are cleaned (length/ratio), valid and test keep every line.
xl_tokenize_and_clean() {
  local raw=$WORK/raw tok=$WORK/tok split lang out
  for split in train valid test; do
    for lang in "$1" "$2"; do
      out=$tok/$split.$lang
      [ "$split" = train ] && out=$tok/train.unclean.$lang
      xl_step "$out" -- xl_text tokenize --lang "$lang" --normalize --input "$raw/$split.$lang" --output "$out" \
        --workers "$WORKERS"
    done
  done
  xl_step "$tok/train.$SRC" "$tok/train.$TGT" -- xl_text clean --src "$tok/train.unclean.$SRC" \
    --tgt "$tok/train.unclean.$TGT" --src-out "$tok/train.$SRC" --tgt-out "$tok/train.$TGT" \
    --max-len "$CLEAN_MAX_LEN" --ratio "$CLEAN_RATIO"
}

# xl_wmt_eval_sets SRC_LANG REF_LANG: $WORK/raw/{valid,test}.{SRC_LANG,REF_LANG} from DATA when it has them, else
# fetched with sacrebleu ($VALID_SET, $TEST_SET; sacrebleu's pair is SRC_LANG-REF_LANG).
xl_wmt_eval_sets() {
  local raw=$WORK/raw split set_name lang side
  for split in valid test; do
    set_name=$VALID_SET
    [ "$split" = test ] && set_name=$TEST_SET
    for lang in "$1" "$2"; do
      xl_have "$raw/$split.$lang" && continue
      if [ -n "$DATA" ] && [ -f "$DATA/$split.$lang" ]; then
        xl_into "$raw/$split.$lang" cat "$DATA/$split.$lang"
      else
        side=src
        [ "$lang" = "$2" ] && side=ref
        xl_log "sacrebleu -t $set_name -l $1-$2 --echo $side"
        xl_into "$raw/$split.$lang" sacrebleu -t "$set_name" -l "$1-$2" --echo "$side" \
          || xl_die "could not fetch $set_name with sacrebleu (network?); put $split.{$1,$2} into DATA instead"
      fi
      xl_done "$raw/$split.$lang"
    done
    xl_check_parallel "$raw/$split.$1" "$raw/$split.$2"
  done
}
