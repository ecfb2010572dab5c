"""Cold start of the BTG reorderer: time to the first reordered sentence in a fresh process, before and after.

"Fresh install" here means: numba has no compiled code of preprocess.btg on disk, i.e. the first process after
`pip install` (numba's cache=True keeps compiled code in preprocess/__pycache__, or in NUMBA_CACHE_DIR / the user
cache dir when that is not writable). Each cold run gets its own empty NUMBA_CACHE_DIR, which numba prefers to the
in-tree cache, so the runs neither use nor disturb the checkout's __pycache__. A warm run is a second process on
the cache the cold run left behind.

Variants: "before" is the preprocess package of --baseline-rev (`git archive`, put first on PYTHONPATH), "after"
the working tree. Every round runs both, alternating, so that both see the same machine load; the figures are
medians over the rounds, wall seconds and CPU seconds (all threads of the process; the machine is shared, so
CPU time is the steadier figure).

Per variant and round:
  cold / warm  a child process: import, load the model, reorder one sentence (what fairseq-interactive and the hub
               do first: `Reorderer.reorder`), then the first --first sentences through `reorder_lines` (the
               `xlpos-prep reorder` path; it yields per batch of 256). Times from process start.
  throughput   a child process on the warm cache: after the compile has finished, sentences/s over all of --src.
  train        (--train-rounds) `xlpos-prep train-reorderer --iterations 1` on --train-src in a child, cold and
               warm cache: wall and CPU seconds of the whole command.
  cli exit     (--cli-model, repeatable: either kind of model) `xlpos-prep reorder` of the first --cli-first
               sentences as a fresh install runs it (empty numba cache): wall seconds from spawn to exit. A variant
               that cannot read a model (a neural one before it existed) is skipped.
Identical output: the orders of every run (cold runs included, where "after" parses the first sentences with the
numpy path) are compared with the "before" orders, and the trained models' weights before/after.

    python benchmarks/cold_start.py --model M --src test5k.ja --train-src train.ja --train-oracle train.oracle
    python benchmarks/cold_start.py --model M --src test5k.ja --rounds 3 --json out.json
    python benchmarks/cold_start.py --model M --src dev.ja --rounds 3 --cli-model M --cli-model NEURAL --cli-first 20
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from xlpos_prep.io import log

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BASELINE = "080fa0c"  # the last commit before the cold-start work on preprocess/btg.py

# Runs in the child. Prints one JSON line; times are time.time() so the parent can subtract its spawn time.
CHILD = r"""
import json, resource, sys, time
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
marks = {}
import importlib, os
package = os.environ["XLPOS_COLD_START_PACKAGE"]  # xlpos_prep, or preprocess in trees from before the rename
btg = importlib.import_module(package + ".btg")
Reorderer = importlib.import_module(package + ".reorderer").Reorderer
reorder_lines = importlib.import_module(package + ".reorderer").reorder_lines
mode, model_path, src, first, orders_out = sys.argv[1:6]
first = int(first)
model = Reorderer.load(model_path)
sentences = [line.split() for line in open(src, encoding="utf-8")]
marks["loaded"] = (time.time(), cpu())
one = model.reorder(sentences[0])
marks["first_sentence"] = (time.time(), cpu())
out = []
if mode == "startup":
    for i, (line, _) in enumerate(reorder_lines(model_path, sentences[:first], progress=False, model=model)):
        if i == 0:
            marks["first_cli_batch"] = (time.time(), cpu())
        out.append(line)
    marks["first_n"] = (time.time(), cpu())
else:  # throughput, compiled code only
    if hasattr(btg, "wait_for_compile"):
        btg.wait_for_compile()
    model.reorder_batch(sentences[:300])
    t, c = time.perf_counter(), cpu()
    out = [" ".join(map(str, o)) for o in model.reorder_batch(sentences)]
    marks["throughput"] = (len(sentences) / (time.perf_counter() - t), len(sentences) / (cpu() - c))
with open(orders_out, "w") as f:
    f.write("\n".join(out) + "\n")
print("MARKS " + json.dumps(marks), flush=True)
"""


def baseline_tree(rev: str, dest: Path) -> Path:
    """The preprocess package at `rev`, extracted under dest (to go first on PYTHONPATH)."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "preprocess"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def package_name(root: Path) -> str:
    """The import name of the preprocessing package in a variant: `xlpos_prep` (this checkout, mapped onto
    preprocess/ by setup.py) or `preprocess` (a tree extracted from a commit before that mapping)."""
    return "xlpos_prep" if root == REPO else "preprocess"


def child_env(root: Path, cache: Path) -> dict:
    # `python -c` / `-m` put the working directory first on sys.path, so children run in the temp dir (see the
    # callers) and PYTHONPATH decides which preprocess they import
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    env["NUMBA_CACHE_DIR"] = str(cache)
    env["XLPOS_COLD_START_PACKAGE"] = package_name(root)
    env.pop("XLPOS_BTG_COLD_START", None)
    return env


def check_variant(root: Path, expected: Path) -> None:
    """Fail loudly if a child of this variant would import preprocess from anywhere else."""
    name = package_name(root)
    out = subprocess.run([sys.executable, "-c", f"import {name}; print({name}.__file__)"],
                         env=child_env(root, expected.parent), cwd=str(expected.parent), capture_output=True,
                         text=True, check=True).stdout.strip()
    if Path(out).resolve() != (root / "preprocess" / "__init__.py").resolve():
        raise RuntimeError(f"variant {root} imports {out}")


def run_child(root: Path, cache: Path, args: list[str]) -> tuple[dict, float]:
    """(marks: (seconds since spawn, CPU seconds of the child so far) per mark, wall seconds of the child)."""
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, *args], env=child_env(root, cache), cwd=str(cache.parent),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    wall = time.time() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}):\n{err[-3000:]}")
    line = [x for x in out.splitlines() if x.startswith("MARKS ")][-1]
    marks = json.loads(line[6:])
    rel = {k: ((v[0] - t0, v[1]) if k != "throughput" else tuple(v)) for k, v in marks.items()}
    return rel, wall


def run_train(root: Path, cache: Path, src: str, oracle: str, model_out: Path) -> tuple[float, float]:
    cmd = [sys.executable, "-m", package_name(root) + ".cli", "train-reorderer", "--src", src, "--oracle", oracle,
           "--model", str(model_out), "--iterations", "1",
           "--hash-bits", "20"]  # the defaults' table size before issue 15, so that the weights can be compared
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=child_env(root, cache), cwd=str(cache.parent), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if status != 0:
        raise RuntimeError(f"train-reorderer failed:\n{err[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def run_cli_reorder(root: Path, cache: Path, model: str, src: Path, out: Path) -> float | None:
    """Wall seconds from spawn to exit of `xlpos-prep reorder` on a fresh numba cache; None when this variant
    cannot read the model."""
    cmd = [sys.executable, "-m", package_name(root) + ".cli", "reorder", "--model", str(Path(model).resolve()),
           "--src", str(src), "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=child_env(root, cache), cwd=str(cache.parent), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        if "not an xlpos reorderer model" in proc.stderr:
            return None
        raise RuntimeError(f"reorder failed:\n{proc.stderr[-3000:]}")
    return wall


def weights_of(path: Path) -> dict[str, np.ndarray]:
    """The arrays of a model file but its header (which records the training time)."""
    with np.load(path) as z:
        return {k: z[k].copy() for k in z.files if k != "header"}


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = weights_of(a), weights_of(b)
    return wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a trained reorderer (xlpos-prep train-reorderer)")
    p.add_argument("--src", required=True, help="tokenized sentences: the first --first for startup, all for "
                                                "throughput (e.g. 5k Tanaka sentences)")
    p.add_argument("--first", type=int, default=500, help="sentences of the startup runs (default 500)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of cold/warm/throughput (default 3)")
    p.add_argument("--train-src", help="training sentences for the train-reorderer timing (optional)")
    p.add_argument("--train-oracle", help="their oracle ranks")
    p.add_argument("--train-rounds", type=int, default=1, help="rounds of the training timing (default 1)")
    p.add_argument("--baseline-rev", default=DEFAULT_BASELINE, help=f"git revision of 'before' "
                                                                     f"(default {DEFAULT_BASELINE})")
    p.add_argument("--cli-model", action="append", default=[],
                   help="time `xlpos-prep reorder` of --cli-first sentences, start to exit, with this model "
                        "(repeatable; linear or neural)")
    p.add_argument("--cli-first", type=int, default=20, help="sentences of the --cli-model runs (default 20)")
    p.add_argument("--cli-only", action="store_true", help="only the --cli-model runs (no startup/throughput rounds)")
    p.add_argument("--json", help="also write the raw figures here")
    args = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="xlpos-cold-start-"))
    variants = {"before": baseline_tree(args.baseline_rev, tmp / "before"), "after": REPO}
    raw: dict = {v: {"cold": [], "warm": [], "throughput": [], "train_cold": [], "train_warm": [],
                     **{f"cli {m}": [] for m in args.cli_model}} for v in variants}
    mismatches: list[str] = []
    try:
        for root in variants.values():
            check_variant(root, tmp / "probe")
        for rnd in range(0 if args.cli_only else args.rounds):
            for v, root in variants.items():
                cache = tmp / f"cache-{v}-{rnd}"
                for kind in ("cold", "warm"):
                    orders = tmp / f"orders-{v}-{kind}-{rnd}"
                    marks, wall = run_child(root, cache, ["startup", args.model, args.src, str(args.first),
                                                             str(orders)])
                    marks["total_wall"] = wall
                    raw[v][kind].append(marks)
                    log(f"round {rnd} {v} {kind}: first sentence {marks['first_sentence'][0]:.2f}s "
                        f"(cpu {marks['first_sentence'][1]:.2f}s), first {args.first} "
                        f"{marks['first_n'][0]:.2f}s, process {wall:.2f}s")
                orders = tmp / f"orders-{v}-5k-{rnd}"
                marks, wall = run_child(root, cache, ["throughput", args.model, args.src, "0", str(orders)])
                raw[v]["throughput"].append(marks["throughput"])
                log(f"round {rnd} {v} throughput: {marks['throughput'][0]:.0f} sent/s wall, "
                    f"{marks['throughput'][1]:.0f} sent/s cpu")
            reference = (tmp / f"orders-before-5k-{rnd}").read_text().splitlines()
            for v in variants:
                for kind in ("cold", "warm", "5k"):
                    got = (tmp / f"orders-{v}-{kind}-{rnd}").read_text().splitlines()
                    if got != reference[:len(got)]:
                        mismatches.append(f"round {rnd} {v} {kind}")
        if args.cli_model:
            first = tmp / "cli-first.txt"
            first.write_text("".join(open(args.src, encoding="utf-8").readlines()[:args.cli_first]), encoding="utf-8")
            for rnd in range(args.rounds):
                for m in args.cli_model:
                    for v, root in variants.items():
                        wall = run_cli_reorder(root, tmp / f"cli-cache-{v}-{rnd}-{len(raw[v][f'cli {m}'])}", m,
                                               first, tmp / f"cli-out-{v}")
                        if wall is not None:
                            raw[v][f"cli {m}"].append(wall)
                            log(f"round {rnd} {v} reorder CLI ({m}, {args.cli_first} sentences): exits after "
                                f"{wall:.2f}s")
        if args.train_src:
            for rnd in range(args.train_rounds):
                for v, root in variants.items():
                    cache = tmp / f"train-cache-{v}-{rnd}"
                    for kind in ("cold", "warm"):
                        out = tmp / f"model-{v}-{kind}-{rnd}"
                        wall, cpu = run_train(root, cache, args.train_src, args.train_oracle, out)
                        raw[v][f"train_{kind}"].append((wall, cpu))
                        log(f"train round {rnd} {v} {kind}: {wall:.1f}s wall, {cpu:.1f}s cpu")
                if not same_weights(tmp / f"model-before-cold-{rnd}", tmp / f"model-after-cold-{rnd}"):
                    mismatches.append(f"train round {rnd}: weights differ")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def fig(v: str, kind: str, mark: str, i: int) -> float:
        """Median over the rounds of element i (0: seconds since spawn, 1: CPU seconds) of a startup mark."""
        return median([m[mark][i] for m in raw[v][kind]])

    rows = []
    for kind in () if args.cli_only else ("cold", "warm"):
        for mark, label in (("first_sentence", "first sentence (Reorderer.reorder), s"),
                            ("first_cli_batch", "first CLI batch (reorder_lines), s"),
                            ("first_n", f"first {args.first} sentences, s")):
            for i, unit in ((0, "wall"), (1, "cpu")):
                rows.append((f"{kind:4s} {label} {unit}", fig("before", kind, mark, i), fig("after", kind, mark, i)))
        rows.append((f"{kind:4s} whole process, s wall", median([m["total_wall"] for m in raw["before"][kind]]),
                     median([m["total_wall"] for m in raw["after"][kind]])))
    for i, unit in () if args.cli_only else ((0, "wall"), (1, "cpu")):
        rows.append((f"warm throughput, sent/s {unit}", median([t[i] for t in raw["before"]["throughput"]]),
                     median([t[i] for t in raw["after"]["throughput"]])))
    if args.train_src:
        for kind in ("cold", "warm"):
            for i, unit in ((0, "wall"), (1, "cpu")):
                rows.append((f"train-reorderer 1 iteration, {kind} cache, s {unit}",
                             median([t[i] for t in raw["before"][f"train_{kind}"]]),
                             median([t[i] for t in raw["after"][f"train_{kind}"]])))
    for m in args.cli_model:
        rows.append((f"reorder CLI of {args.cli_first} sentences, fresh cache, start to exit, s wall: "
                     f"{Path(m).name}", median(raw["before"][f"cli {m}"]), median(raw["after"][f"cli {m}"])))
    print(f"medians over {args.rounds} rounds ({args.train_rounds} for training); before = {args.baseline_rev}, "
          f"after = working tree; {len(open(args.src).readlines())} sentences in --src")
    print(f"{'':58s} {'before':>9s} {'after':>9s} {'after/before':>12s}")
    for label, b, a in rows:
        print(f"{label:58s} {b:9.2f} {a:9.2f} {a / b if b else float('nan'):12.3f}")
    print("identical orders and weights: " + ("yes" if not mismatches else "NO: " + "; ".join(mismatches)))
    if args.json:
        Path(args.json).write_text(json.dumps({"raw": raw, "mismatches": mismatches,
                                               "rows": rows}, indent=1))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
