#!/usr/bin/env bash
# The GPU check of xlpos in one command, for a machine with one GPU and no network, in under 8 minutes:
#   1. tests/test_gpu.py (pytest -m gpu): fp16 and bf16 training steps of every mode, beam search batched vs
#      one sentence at a time on CUDA, --xl-integration none == vanilla on CUDA;
#   2. Tanaka Ja=>En, vanilla and XL input (the default fusion, tanh), benchmarks/bleu.py's small model for
#      $BLEU_UPDATES updates (~20 epochs), dev and test BLEU (1 and 2 run at the same time: neither is timed);
#   3. then alone: the end-to-end fairseq-train throughput of every XL mode against vanilla at Transformer-base
#      size with --fp16 (benchmarks/train_throughput.py, alternating rounds), beside the in-process ratio;
# and prints one summary table (also to $OUT/gpu_check_summary.txt when OUT is set, with the JSON figures).
#
# Without a GPU it does the CPU parts and exits 0: prepares what the GPU run needs in $WORK (Tanaka Ja-En with
# real XL positions, made by benchmarks/bleu.py's pipeline; wheels of the Python packages the GPU machine's image
# lacks), runs the GPU tests (they report themselves skipped) and says that there is no GPU.
#
#   bash benchmarks/gpu_check.sh     # here, once: prepares work/gpu-check (~7 min on 2 cores), CPU parts, exit 0
#   bash benchmarks/gpu_check.sh     # on the GPU machine, carrying work/gpu-check/carry (about 40 MB: the
#                                    # prepared data as one .tar.xz and the wheels; the tree is 64 MiB at most)
#
# The GPU machine's python3 (3.12, CUDA torch) is used there with the carried wheels (ve-fairseq has a cp312
# wheel; hydra-core, omegaconf, antlr4, bitarray, nltk, sacremoses); the project's .venv (CPU torch, 2 GB) cannot
# travel and would not see the GPU.  PYTHON=... picks the interpreter.  Knobs (environment): XLPOS_GPU_WORK,
# BLEU_UPDATES (3000), TP_MODES, TP_UPDATES (150), TP_ROUNDS (2), TP_SIZE (base); XLPOS_GPU_CHECK_ON_CPU=1 runs
# the GPU path on the CPU (fp32), to check this script's own plumbing with small knobs, e.g.
#   XLPOS_GPU_CHECK_ON_CPU=1 BLEU_UPDATES=20 TP_SIZE=tiny TP_UPDATES=20 TP_ROUNDS=1 bash benchmarks/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
WORK=${XLPOS_GPU_WORK:-work/gpu-check}
BLEU_UPDATES=${BLEU_UPDATES:-3000}
TP_MODES=${TP_MODES:-none,input:tanh,input:sum,head,rope}
TP_UPDATES=${TP_UPDATES:-150}
TP_ROUNDS=${TP_ROUNDS:-2}
TP_SIZE=${TP_SIZE:-base}
ON_CPU=${XLPOS_GPU_CHECK_ON_CPU:-0}
CARRY="$WORK/carry"                  # what the GPU machine needs from here, small enough to travel
WHEELS="$CARRY/wheels"
DATA_ARCHIVE="$CARRY/tanaka-ja-en.tar.xz"
BLEU_WORK="$WORK/bleu"
RESULTS="$WORK/results"
START=$(date +%s)
mkdir -p "$WORK" "$RESULTS"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore

say() { echo "[gpu_check $(date +%H:%M:%S)] $*" >&2; }

sees_cuda() { "$1" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; }

pick_python() {
    if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
    local candidate
    for candidate in .venv/bin/python python3 python; do
        if command -v "$candidate" >/dev/null 2>&1 && sees_cuda "$candidate"; then echo "$candidate"; return; fi
    done
    if [ -x .venv/bin/python ]; then echo .venv/bin/python; else echo python3; fi
}

PY=$(pick_python)
GPU=0
sees_cuda "$PY" && GPU=1

# The GPU machine's image has torch but not fairseq and a few small packages: install the carried wheels into
# a private folder (no network there, so --no-index; --no-deps: the image's torch, numpy, ... stay as they are).
if ! "$PY" -c 'import fairseq, hydra, omegaconf, bitarray, nltk, sacremoses' 2>/dev/null; then
    if [ "$GPU" = 1 ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
        say "installing the carried wheels ($WHEELS) into /tmp/xlpos-site for $PY"
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/xlpos-site "$WHEELS"/*.whl
        export PYTHONPATH="/tmp/xlpos-site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/xlpos-site/bin:$PATH"
    fi
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"  # xlpos and preprocess without pip install -e
if ! "$PY" -c 'import fairseq, xlpos, sentencepiece, sacrebleu' 2>/dev/null; then
    say "$PY cannot import fairseq/xlpos/sentencepiece/sacrebleu; on the GPU machine carry $CARRY (wheels/ in it)"
    "$PY" -c 'import fairseq, xlpos, sentencepiece, sacrebleu' || true
    exit 1
fi
say "python: $PY ($("$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)'))"

# ---- CPU parts: what the GPU machine cannot make (it has no corpus and no network); skipped when present
prepare_data() {
    # Tanaka Ja-En with real XL positions (eflomal alignment, BTG reorderer, sentencepiece 8k, positions,
    # data-bin); bleu.py skips every step whose output exists, so on the GPU machine this only checks the cache.
    "$PY" benchmarks/bleu.py --pairs ja-en --prepare-only --work "$BLEU_WORK" --out "$RESULTS/prepare.json" \
        --threads 1 >"$RESULTS/prepare.log" 2>&1 || { tail -20 "$RESULTS/prepare.log"; exit 1; }
    # bleu.py links the oracle data-bin's shared files with absolute paths, which do not exist on another
    # machine: make them copies (a few MB).
    local link
    for link in "$BLEU_WORK"/ja-en/*/data-bin-oracle/*; do
        if [ -L "$link" ]; then cp --remove-destination "$(readlink -f "$link")" "$link"; fi
    done
}

prepare_wheels() {
    # cp312 builds for the GPU image's python3 (3.12); versions as in this project's venv.
    [ -f "$WHEELS/.complete" ] && return
    mkdir -p "$WHEELS"
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform any -d "$WHEELS" ve-fairseq==0.12.3 hydra-core==1.3.8 omegaconf==2.3.1 bitarray==3.12.3 \
        nltk==3.10.4 sacremoses==0.2.0
    # antlr4 (hydra's parser runtime) is published as a source archive only: build its pure-Python wheel here.
    "$PY" -m pip wheel -q --no-deps -w "$WHEELS" antlr4-python3-runtime==4.9.3
    touch "$WHEELS/.complete"
}

if [ ! -d "$BLEU_WORK" ] && [ -f "$DATA_ARCHIVE" ]; then
    say "unpacking the carried data ($DATA_ARCHIVE)"
    tar -xJf "$DATA_ARCHIVE" -C "$WORK"
fi
say "data: Tanaka Ja-En in $BLEU_WORK"
prepare_data
if [ ! -f "$DATA_ARCHIVE" ]; then
    # the cache is ~50 MB of text, the wheels ~24 MB: packed, both fit in what may travel to the GPU machine
    mkdir -p "$CARRY"
    # (trained runs stay out: their checkpoints are large and every GPU run trains its own)
    tar -cJf "$DATA_ARCHIVE.tmp" --exclude='bleu/*/*/runs' -C "$WORK" bleu && mv "$DATA_ARCHIVE.tmp" "$DATA_ARCHIVE"
fi
if [ "$GPU" = 0 ]; then
    say "wheels for the GPU machine: $WHEELS"
    prepare_wheels || say "could not download the wheels (no network?); the GPU machine will need them"
fi
du -sh "$CARRY" >&2 || true

# ---- the GPU tests (on a CPU machine they report themselves skipped with the reason)
run_tests() {
    set +e
    "$PY" -m pytest -q -rs -m gpu tests/test_gpu.py -p no:cacheprovider >"$RESULTS/gpu_tests.log" 2>&1
    echo $? >"$RESULTS/gpu_tests.rc"
    set -e
}

if [ "$GPU" = 0 ] && [ "$ON_CPU" != 1 ]; then
    run_tests
    tail -3 "$RESULTS/gpu_tests.log"
    echo
    echo "gpu_check: NO GPU: torch in $PY sees no CUDA device. CPU parts done: data and wheels for the GPU machine"
    echo "in $CARRY ($(du -sh "$CARRY" | cut -f1)), GPU tests skipped. On the GPU machine run"
    echo "bash benchmarks/gpu_check.sh carrying $CARRY."
    exit 0
fi

# figures of an earlier run must not pass for this one's
rm -f "$RESULTS"/{gpu.txt,gpu_tests.log,gpu_tests.rc,bleu.json,bleu.log,throughput.json,throughput.log,gpu_check_summary.txt}
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$RESULTS/gpu.txt" 2>/dev/null ||
        rm -f "$RESULTS/gpu.txt"
fi

# ---- 1 + 2 at once: the tests and the two BLEU trainings share the GPU (nothing here is timed)
say "GPU tests (background) + Tanaka Ja=>En vanilla and input, $BLEU_UPDATES updates each"
run_tests &
TESTS_PID=$!
set +e
"$PY" benchmarks/bleu.py --pairs ja-en --systems vanilla,input --seeds 1 --max-update "$BLEU_UPDATES" \
    --log-interval 100 --jobs 2 --work "$BLEU_WORK" --out "$RESULTS/bleu.json" >"$RESULTS/bleu.log" 2>&1
BLEU_RC=$?
set -e
wait "$TESTS_PID" || true
say "BLEU exit $BLEU_RC; tests exit $(cat "$RESULTS/gpu_tests.rc")"

# ---- 3 alone on the machine: throughput, XL / vanilla through fairseq-train, fp16, Transformer base
TP_DEVICE=(--device cuda --fp16)
[ "$GPU" = 1 ] || TP_DEVICE=(--device cpu)
say "throughput: $TP_SIZE ${TP_DEVICE[*]}, modes vanilla,$TP_MODES, $TP_ROUNDS rounds of $TP_UPDATES updates"
set +e
"$PY" benchmarks/train_throughput.py "${TP_DEVICE[@]}" --size "$TP_SIZE" --modes "$TP_MODES" \
    --rounds "$TP_ROUNDS" --max-update "$TP_UPDATES" --log-interval 10 --threads 0 --num-workers 1 \
    --inprocess-updates 20 --inprocess-rounds 3 --inprocess-data "$(ls -d "$BLEU_WORK"/corpus-enja/*/tok | head -1)" \
    --data-bin "$(ls -d "$BLEU_WORK"/ja-en/*/data-bin | head -1)" \
    --source-lang ja --target-lang en --work "$WORK" --json "$RESULTS/throughput.json" >"$RESULTS/throughput.log" 2>&1
TP_RC=$?
set -e

# ---- one summary table
"$PY" - "$RESULTS" "$BLEU_RC" "$TP_RC" "$(( $(date +%s) - START ))" "$BLEU_UPDATES" <<'EOF' | tee "$RESULTS/gpu_check_summary.txt"
import json, statistics, sys
from pathlib import Path

results, bleu_rc, tp_rc, seconds, bleu_updates = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
import torch
gpu = ((results / "gpu.txt").read_text().strip() if (results / "gpu.txt").exists() else
       torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NO GPU (XLPOS_GPU_CHECK_ON_CPU: fp32 on CPU)")
print(f"xlpos GPU check: {gpu}; torch {torch.__version__}; {seconds} s in all")
print("-" * 100)
tests = (results / "gpu_tests.log").read_text(errors="replace").strip().splitlines()
print(f"{'GPU tests (pytest -m gpu)':<34} {tests[-1] if tests else 'no output'}  [exit {(results / 'gpu_tests.rc').read_text().strip()}]")
for line in tests:
    if line.startswith(("FAILED", "ERROR", "SKIPPED")):
        print(f"{'':<34} {line[:140]}")

def ratio(values):
    return f"{statistics.median(values):.3f} [{min(values):.3f}..{max(values):.3f}]" if values else "-"

tp = results / "throughput.json"
if tp_rc == 0 and tp.exists():
    data = json.loads(tp.read_text())
    opts = data["options"]
    print(f"\nthroughput XL/vanilla, fairseq-train end to end ({opts['size']}, {opts['device']}"
          f"{' fp16' if opts['fp16'] == 'True' else ''}, {opts['max_update']} updates x "
          f"{opts['rounds']} rounds), median [min..max]; in-process: speed_xl_vs_vanilla.py")
    print(f"{'mode':<14} {'steady wps':>11} {'steady wps ratio':>24} {'process time ratio':>24} {'in-process':>24}")
    for mode, s in data["summary"].items():
        base = mode == "vanilla"
        print(f"{mode:<14} {statistics.median(s['steady_wps']):>11.0f} "
              f"{'(baseline)' if base else ratio(s['ratio_steady_wps']):>24} "
              f"{'(baseline)' if base else ratio(s['ratio_process']):>24} "
              f"{'' if base else ratio(data['inprocess_ratio_wall_wps'].get(mode, [])):>24}")
else:
    print(f"\nthroughput: FAILED (exit {tp_rc}); see throughput.log")
    print("\n".join((results / "throughput.log").read_text(errors="replace").splitlines()[-8:]))

bleu = results / "bleu.json"
if bleu_rc == 0 and bleu.exists():
    pair = json.loads(bleu.read_text())["pairs"]["ja-en"]
    print(f"\nTanaka Ja=>En ({pair['sentences']['train']} training pairs), {bleu_updates} updates, "
          "3+3 layers width 256 (benchmarks/bleu.py), beam 5, BLEU on the corpus tokens")
    print(f"{'system':<14} {'dev BLEU':>9} {'test BLEU':>10} {'test RIBES':>11} {'train s':>8} {'epochs':>7} "
          f"{'loss at 1/2 -> end (converging?)':>34}")
    for system, runs in pair["runs"].items():
        run = runs["1"]
        log = Path(run["train"]["command"].split("--save-dir ")[1].split()[0]) / "train.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        losses = [float(json.loads(l.split(" | train_inner | ")[1])["loss"]) for l in lines if " | train_inner | " in l]
        curve = f"{losses[len(losses) // 2]:.3f} -> {losses[-1]:.3f}" if losses else "-"
        ev = run["eval"]
        print(f"{system:<14} {ev['valid']['bleu']:>9.2f} {ev['test']['bleu']:>10.2f} {ev['test'].get('ribes', 0):>11.2f} "
              f"{run['train']['seconds']:>8.0f} {run['train'].get('epochs', 0):>7} {curve:>34}")
else:
    print(f"\nTanaka Ja=>En BLEU: FAILED (exit {bleu_rc}); see bleu.log")
    print("\n".join((results / "bleu.log").read_text(errors="replace").splitlines()[-8:]))
EOF

if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    for f in gpu_check_summary.txt throughput.json bleu.json gpu_tests.log throughput.log bleu.log; do
        [ -f "$RESULTS/$f" ] && cp "$RESULTS/$f" "$OUT/"
    done
fi
[ "$(cat "$RESULTS/gpu_tests.rc")" = 0 ] && [ "$BLEU_RC" = 0 ] && [ "$TP_RC" = 0 ]
