"""Does a step hold its corpus or stream it? Peak memory of the pipeline's per-sentence steps and of the alignment
at two corpus sizes, this checkout against a baseline commit, in the same run.

Inputs come from a work directory that `xlpos-prep prepare` made (benchmarks/scale.py's WORK/N, or a recipe's):
its reorderer, sentencepiece model and training split, written R times over for each R of --repeats (the
alignment: the first L and R*L lines of its input, eflomal being the slow step). Every step runs as its CLI
command in a child process, one worker, while a sampler reads the process tree's resident memory every 0.1 s
(benchmarks/process_tree.py: the sum over the tree, eflomal's binary included). A step that streams keeps the
same peak at both sizes; one that holds its input grows with it. Memory does not depend on the machine's load,
so this benchmark may run beside other work (its wall times then say little).

    python benchmarks/step_memory.py --work work/scale/20000 --baseline-rev 5ff0197 --repeats 1,4 \\
        --json docs/runs/2026-12-scale/step-memory.json
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from cold_start import REPO, baseline_tree, package_name  # noqa: E402
from process_tree import TreeSampler  # noqa: E402

SRC, TGT = "en", "ja"


def repeated(lines: list[str], times: float) -> list[str]:
    """`lines` written `times` over (a fraction: the first part)."""
    whole, part = int(times), round((times - int(times)) * len(lines))
    return lines * whole + lines[:part]


def write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return str(path)


def make_inputs(work: Path, dest: Path, times: float, align_lines: int) -> dict[str, str]:
    """The inputs of every step at one size, under dest."""
    dest.mkdir(parents=True, exist_ok=True)
    read = lambda p: (work / p).read_text(encoding="utf-8").splitlines()  # noqa: E731
    aligned = min(len(read("reorder/train.align")), len(read("reorder/train.src")))
    return {
        "src": write(dest / "train.src", repeated(read(f"tok/train.{SRC}"), times)),
        "tgt": write(dest / "train.tgt", repeated(read(f"tok/train.{TGT}"), times)),
        "order": write(dest / "train.order", repeated(read("reorder/train.order"), times)),
        "oracle_src": write(dest / "oracle.src", repeated(read("reorder/train.src")[:aligned], times)),
        "align": write(dest / "train.align", repeated(read("reorder/train.align")[:aligned], times)),
        "align_src": write(dest / "align.src", read(f"reorder/align-input.{SRC}")[:int(align_lines * times)]),
        "align_tgt": write(dest / "align.tgt", read(f"reorder/align-input.{TGT}")[:int(align_lines * times)]),
        "lines": str(len(repeated(read(f"tok/train.{SRC}"), times))),
        "align_lines": str(int(align_lines * times)),
    }


def step_commands(work: Path, files: dict[str, str], out: Path) -> dict[str, list[str]]:
    model, spm = str(work / "reorder" / "reorderer.model"), str(work / "spm" / "spm.model")
    return {
        "reorder": ["reorder", "--model", model, "--src", files["src"], "--out", str(out / "order")],
        "positions": ["positions", "--src", files["src"], "--order", files["order"], "--spm", spm,
                      "--out", str(out / "xlpos"), "--pieces-out", str(out / "pieces")],
        "spm-encode": ["spm-encode", "--model", spm, "--input", files["tgt"], "--output", str(out / "tgt.pieces")],
        "oracle": ["oracle", "--src", files["oracle_src"], "--align", files["align"], "--out", str(out / "oracle")],
        "clean": ["clean", "--src", files["src"], "--tgt", files["tgt"], "--src-out", str(out / "clean.src"),
                  "--tgt-out", str(out / "clean.tgt")],
        "align": ["align", "--src", files["align_src"], "--tgt", files["align_tgt"], "--out", str(out / "align")],
    }


def peak_memory(root: Path, args: list[str], cwd: Path) -> tuple[int, float]:
    """(peak resident bytes of the process tree, wall seconds) of `xlpos-prep ARGS` from the variant at `root`."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    cmd = [sys.executable, "-m", f"{package_name(root)}.cli", *args]
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=env, cwd=str(cwd), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sampler = TreeSampler(proc.pid, interval=0.1).start()
    _, err = proc.communicate()
    samples = sampler.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-2000:]}")
    return max((s.rss for s in samples), default=0), time.time() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--work", type=Path, required=True, help="a work directory made by `xlpos-prep prepare`")
    p.add_argument("--baseline-rev", required=True, help="the commit to compare with")
    p.add_argument("--repeats", default="1,4", help="corpus sizes, as multiples of the work directory's")
    p.add_argument("--align-lines", type=int, default=10_000, help="alignment lines at repeat 1")
    p.add_argument("--steps", default="reorder,positions,spm-encode,oracle,clean,align")
    p.add_argument("--json", type=Path)
    opts = p.parse_args(argv)
    repeats = [float(x) for x in opts.repeats.split(",")]
    steps = opts.steps.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="step-memory-"))
    try:
        variants = {"baseline": baseline_tree(opts.baseline_rev, tmp / "baseline"), "this": REPO}
        rows: dict[str, dict] = {}
        for times in repeats:
            files = make_inputs(opts.work, tmp / f"in-{times}", times, opts.align_lines)
            for step in steps:
                for name, root in variants.items():  # alternating: both see the same machine
                    out = tmp / f"out-{name}"
                    shutil.rmtree(out, ignore_errors=True)
                    out.mkdir()
                    peak, wall = peak_memory(root, step_commands(opts.work, files, out)[step], tmp)
                    lines = int(files["align_lines" if step == "align" else "lines"])
                    rows.setdefault(step, {}).setdefault(name, []).append(
                        {"lines": lines, "peak_mb": round(peak / 2**20), "wall": round(wall, 1)})
                    print(f"{step:11} {name:8} {lines:8d} lines: peak {peak / 2**20:7.0f} MB ({wall:.0f} s)",
                          flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\npeak memory (MB) of the process tree; growth = MB per 10,000 more lines; baseline {opts.baseline_rev}")
    print(f"{'step':11} " + " ".join(f"{name + ' ' + str(r['lines']):>18}" for name in variants
                                     for r in rows[steps[0]][name]) + f" {'growth base':>12} {'growth this':>12}")
    for step in steps:
        cells, growth = [], []
        for name in variants:
            runs = rows[step][name]
            cells += [f"{r['peak_mb']:>18}" for r in runs]
            span = runs[-1]["lines"] - runs[0]["lines"]
            growth.append(f"{1e4 * (runs[-1]['peak_mb'] - runs[0]['peak_mb']) / span:12.1f}" if span else "")
        print(f"{step:11} " + " ".join(cells) + " " + " ".join(growth))
    if opts.json:
        opts.json.parent.mkdir(parents=True, exist_ok=True)
        opts.json.write_text(json.dumps({"work": str(opts.work), "baseline": opts.baseline_rev,
                                         "this": subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"],
                                                                capture_output=True, text=True).stdout.strip(),
                                         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                         "steps": rows}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
