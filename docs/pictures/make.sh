#!/usr/bin/env bash
# The pictures of README.md and docs/: the quickstart's reorderer and its xl-input model, on one test sentence.
#
#   bash docs/pictures/make.sh          # from the repository root; WORK=./work/pictures, resumable like any recipe
#
# 1. the quickstart with the xl-input system only (synthetic corpus, seed 1; one CPU thread), 2. `xlpos-prep show`
# of test line $LINE, 3. the xl-input model's encoder-decoder attention (last decoder layer, mean over heads) while
# it translates that line. eflomal cannot be seeded, so a rerun may draw a slightly different tree.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
: "${WORK:=./work/pictures}"
: "${LINE:=79}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
WORK=$WORK SYSTEMS=xl-input WORKERS=1 bash recipes/quickstart.sh
xlpos-prep show --model "$WORK/reorder/reorderer.model" --src "$WORK/tok/test.src" --lines "$LINE" \
  --out docs/pictures/tree.svg
python -m xlpos.evaluation.attention_map "$WORK/checkpoints/xl-input" --data "$WORK/data-bin" \
  --sentence "$(sed -n "${LINE}p" "$WORK/tok/test.src")" --layer -1 --out docs/pictures/attention.svg
