"""The data-bin's tokens: `xlpos-prep preprocess` against fairseq-preprocess on the same pieces, in the same run.

Both build the joined dictionary of the training pieces and binarize every split; the benchmark checks that their
files are identical (fairseq's preprocess.log aside) and prints each one's wall time, CPU time (the process and its
children, from os.wait4) and peak memory, and fairseq's over ours. The pieces can be repeated (--times) to reach a
corpus size; each round runs both, in alternating order.

    python benchmarks/preprocess_speed.py \
        --pieces work/bench/ja-en/train20000-holdout1000.spm8000.rodef/pieces -s ja -t en --times 5 --rounds 2
"""
from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def repeat_file(src: Path, dest: Path, times: int) -> None:
    with open(dest, "wb") as out:
        for _ in range(times):
            with open(src, "rb") as f:
                shutil.copyfileobj(f, out)


def timed(cmd: list[str]) -> dict[str, float]:
    """Wall seconds, CPU seconds and peak resident memory (MB) of one command, its children included."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if status:
        sys.exit(f"failed: {' '.join(cmd)}\n{stderr[-2000:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pieces", required=True, type=Path, help="folder with {train,valid,test}.{S,T} pieces")
    p.add_argument("-s", "--source-lang", required=True)
    p.add_argument("-t", "--target-lang", required=True)
    p.add_argument("--times", type=int, default=1, help="repeat the training pieces this many times")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--workers", type=int, default=2, help="fairseq-preprocess --workers")
    args = p.parse_args(argv)
    s, t = args.source_lang, args.target_lang
    with tempfile.TemporaryDirectory(prefix="preprocess-speed.") as tmp:
        root = Path(tmp)
        splits = [split for split in ("train", "valid", "test") if (args.pieces / f"{split}.{s}").exists()]
        for split in splits:
            for lang in (s, t):
                repeat_file(args.pieces / f"{split}.{lang}", root / f"{split}.{lang}",
                            args.times if split == "train" else 1)
        with open(root / f"train.{s}", "rb") as f:
            lines = sum(1 for _ in f)
        prefixes = [a for split in splits for a in (f"--{split}pref", str(root / split))]
        commands = {
            "xlpos-prep preprocess": [sys.executable, "-m", "xlpos_prep.cli", "preprocess", "-s", s, "-t", t,
                                      *prefixes, "--joined-dictionary", "--destdir"],
            f"fairseq-preprocess --workers {args.workers}": [
                sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", s, "--target-lang", t, *prefixes,
                "--joined-dictionary", "--workers", str(args.workers), "--destdir"]}
        names = list(commands)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
        print(f"{lines} training pairs ({args.times} x {args.pieces}), splits {', '.join(splits)}")
        for r in range(args.rounds):
            for name in (names if r % 2 == 0 else names[::-1]):
                dest = root / f"out-{names.index(name)}"
                shutil.rmtree(dest, ignore_errors=True)
                results[name].append(timed(commands[name] + [str(dest)]))
                m = results[name][-1]
                print(f"round {r + 1} {name:34s} wall {m['wall']:7.2f} s  CPU {m['cpu']:7.2f} s  "
                      f"peak {m['peak_mb']:6.0f} MB")
            ours, theirs = root / "out-0", root / "out-1"
            names_ours = sorted(f for f in os.listdir(ours))
            names_theirs = sorted(f for f in os.listdir(theirs) if f != "preprocess.log")
            _, mismatch, errors = filecmp.cmpfiles(ours, theirs, names_theirs, shallow=False)
            if names_ours != names_theirs or mismatch or errors:
                sys.exit(f"outputs differ: {mismatch or errors or (names_ours, names_theirs)}")
        print("outputs identical (fairseq's preprocess.log aside)")
        for key in ("wall", "cpu", "peak_mb"):
            a = statistics.median(m[key] for m in results[names[0]])
            b = statistics.median(m[key] for m in results[names[1]])
            print(f"median {key:8s} ours {a:8.2f}  fairseq {b:8.2f}  fairseq / ours {b / a:6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
