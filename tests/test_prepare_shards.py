"""`prepare` across machines (preprocess/shards.py): the steps made once (--global-steps), N shard jobs of the
per-sentence steps (--shard I/N) and the merge (--merge N) give a work directory whose every final file is byte
for byte what one machine's `prepare` writes, with records a later one-machine run takes as done. A killed shard
job reruns only itself; the merge refuses a missing or changed shard, naming it; a split with fewer lines than
shards works. recipes/slurm_prepare.sh is run with a stand-in `sbatch` that runs the jobs it is given."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, subprocess_env
from test_pipeline import corpus, shared_alignment
from xlpos_prep.pipeline import Layout, PrepareConfig, prepare
from xlpos_prep.shards import Stage

SHARDS = 3
TRAIN, REORDER = 150, 90  # shard 1's training block (lines 50-99) holds jackknifed lines and the full model's
# the CLI options of CONFIG (the shard jobs and the merge run through the CLI, as on a cluster)
OPTIONS = ["--src", "ja", "--tgt", "en", "--reorder-train-lines", str(REORDER), "--reorder-iterations", "1",
           "--spm-vocab", "600", "--jackknife", "2", "--workers", "1"]
CONFIG = dict(src="ja", tgt="en", reorder_train_lines=REORDER, reorder_iterations=1, spm_vocab=600, jackknife=2,
              workers=1)
# not part of what a run makes: logs, timings, locks, the shards' own parts, and fairseq's timestamped log
NOT_COMPARED = ("logs/", "shards/", "times.json", ".xlpos.lock", "data-bin/preprocess.log")


def prep(work: Path, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "xlpos_prep.cli", "prepare", "--work", str(work), *OPTIONS, *extra],
                          capture_output=True, text=True, env=subprocess_env(), timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def final_files(work: Path) -> dict[str, bytes]:
    """Every file a run made, but the records (compared by records()) and NOT_COMPARED."""
    found = {}
    for path in sorted(work.rglob("*")):
        name = path.relative_to(work).as_posix()
        if path.is_file() and not name.endswith(".done") and not name.startswith(NOT_COMPARED):
            found[name] = path.read_bytes().replace(str(work).encode(), b"WORK")  # (a score file names its input)
    return found


def records(work: Path) -> dict[str, dict]:
    """Each completion record but its identities (times differ): the step, its settings, what it read and wrote."""
    found = {}
    for path in work.rglob("*.done"):
        name = path.relative_to(work).as_posix()
        if not name.startswith(NOT_COMPARED):
            record = json.loads(path.read_text(encoding="utf-8"))
            found[name] = {"step": record["step"], "settings": record["settings"],
                           "inputs": sorted(record["inputs"] or ()), "outputs": sorted(record["outputs"])}
    return found


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    return {p.relative_to(root).as_posix(): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".xlpos.lock"}


def kill_when(work: Path, done: Path, *extra: str) -> None:
    """Run `prepare EXTRA` and SIGKILL its whole process group as soon as `done` exists (a lost node)."""
    proc = subprocess.Popen([sys.executable, "-m", "xlpos_prep.cli", "prepare", "--work", str(work), *OPTIONS,
                             *extra], env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not done.exists():
            assert proc.poll() is None, f"ended (status {proc.returncode}) before {done}: {proc.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, f"timed out waiting for {done}"
            time.sleep(0.01)
        assert proc.poll() is None, f"finished before the kill: move the kill point ({done})"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()


def test_shards_and_merge_equal_one_machine(tmp_path):
    base = tmp_path / "base"
    corpus(base, "ja", "en", TRAIN)
    valid = base / "tok"  # 2 validation lines: fewer than the shards, so shard 2 has none of them
    for lang in ("ja", "en"):
        lines = (valid / f"valid.{lang}").read_text(encoding="utf-8").splitlines(True)
        (valid / f"valid.{lang}").write_text("".join(lines[:2]), encoding="utf-8")
    shared_alignment(base, "ja", "en", TRAIN)
    prep(base, "--global-steps")
    assert not (base / "reorder" / "valid.order").exists() and not (base / "pieces").exists()
    one, work = tmp_path / "one", tmp_path / "sharded"
    shutil.copytree(base, one)  # (records hold relative paths: a copied work directory keeps them)
    shutil.copytree(base, work)
    prepare(PrepareConfig(**CONFIG), Layout.recipe(one))

    # a merge before the shards: refused, naming the first missing one, and nothing written
    proc = prep(work, "--merge", str(SHARDS), check=False)
    assert proc.returncode == 1 and "shard 0/3 is not complete" in proc.stderr, proc.stderr[-2000:]
    assert "--shard 0/3" in proc.stderr.strip().splitlines()[-1]
    assert not (work / "pieces").exists() and not (work / "reorder" / "valid.order").exists()

    # shard 1 killed after its training lines' pieces, then rerun: it redoes only what it had not finished
    part = work / "shards" / "1-of-3"
    kill_when(work, part / "pieces" / "train.ja.done", "--shard", "1/3")  # positions' last marker
    assert not (part / "pieces" / "test.xlpos.done").exists()
    finished = {p: (part / p).stat().st_mtime_ns for p in ("reorder/train.order", "pieces/train.xlpos")}
    for i in (0, 2):
        prep(work, "--shard", f"{i}/{SHARDS}")
    others = {i: snapshot(work / "shards" / f"{i}-of-3") for i in (0, 2)}
    rerun = prep(work, "--shard", "1/3").stderr
    assert "skip: positions train" in rerun and "skip: shard 1/3 reorder train" in rerun, rerun[-3000:]
    assert {p: (part / p).stat().st_mtime_ns for p in finished} == finished
    assert {i: snapshot(work / "shards" / f"{i}-of-3") for i in (0, 2)} == others
    # block 1 of the training split: jackknifed lines 50-89 and the full model's 90-99; shard 2 has no valid line
    assert len((part / "reorder" / "train-rest.src").read_text().splitlines()) == 10
    assert not (work / "shards" / "0-of-3" / "reorder" / "train-rest.src").exists()
    assert (work / "shards" / "2-of-3" / "pieces" / "valid.xlpos").read_bytes() == b""

    # a changed part: the merge names its shard; rerunning that shard redoes that step alone
    changed = work / "shards" / "2-of-3" / "pieces" / "test.en"
    changed.write_text(changed.read_text() + "x\n")
    proc = prep(work, "--merge", str(SHARDS), check=False)
    assert proc.returncode == 1 and "shard 2/3 is not complete" in proc.stderr and "test.en" in proc.stderr
    assert not (work / "pieces").exists()
    assert "redo: spm-encode test" in prep(work, "--shard", "2/3").stderr

    prep(work, "--merge", str(SHARDS))
    got, want = final_files(work), final_files(one)
    assert sorted(got) == sorted(want)
    assert {"reorder/train.order", "reorder/jackknife/rest.order", "reorder/valid.order", "pieces/train.ja",
            "pieces/valid.xlpos", "pieces/test.en", "data-bin/dict.ja.txt", "data-bin/train.ja-en.ja.bin",
            "data-bin/valid.ja-en.xlpos.idx", "reorder/test.tau.json"} <= set(got)
    assert [name for name in want if got[name] != want[name]] == []
    assert records(work) == records(one)

    # the merged directory is what a one-machine run would have made: it redoes nothing
    before = snapshot(work)
    again = prep(work).stderr
    assert "redo:" not in again, again[-3000:]
    assert {k: v for k, v in snapshot(work).items() if not k.startswith(("logs/", "times.json"))} == {
        k: v for k, v in before.items() if not k.startswith(("logs/", "times.json"))}


def test_stage_options_are_checked(tmp_path):
    for extra, option in ((["--shard", "3/3"], "--shard"), (["--merge", "0"], "--merge"),
                          (["--shard", "0/2", "--merge", "2"], "--merge")):
        proc = prep(tmp_path, *extra, check=False)
        assert proc.returncode in (1, 2) and option in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, (
            extra, proc.stderr)
    for split in ("train", "valid", "test"):  # a corpus, but no --global-steps run yet
        for lang in ("ja", "en"):
            (tmp_path / "tok").mkdir(exist_ok=True)
            (tmp_path / "tok" / f"{split}.{lang}").write_text("a b\nc\n", encoding="utf-8")
    for extra in (["--shard", "0/2"], ["--merge", "2"]):
        proc = prep(tmp_path, *extra, check=False)
        assert proc.returncode == 1 and "--global-steps" in proc.stderr.strip().splitlines()[-1], proc.stderr
        assert not (tmp_path / "reorder").exists() and not (tmp_path / "prepare.json").exists()
    with pytest.raises(ValueError, match="0 <= I < N"):
        Stage("shard", 2, 2)
    assert [Stage("shard", i, 3).block(2) for i in range(3)] == [(0, 1), (1, 2), (2, 2)]
    assert [Stage("shard", i, 3).block(7) for i in range(3)] == [(0, 3), (3, 5), (5, 7)]


def test_slurm_script_submits_the_three_stages_in_order(tmp_path):
    """A stand-in sbatch records each submission and runs its --wrap command (each task of an --array) with
    sh, as Slurm would; a stand-in xlpos-prep records the arguments it is run with."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"""#!{sys.executable}
import json, os, subprocess, sys
args = sys.argv[1:]
opts = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
with open({str(calls)!r} + ".sbatch", "a") as f:
    f.write(json.dumps(args) + "\\n")
n = sum(1 for _ in open({str(calls)!r} + ".sbatch"))
tasks = range(int(opts["array"].split("-")[0]), int(opts["array"].split("-")[1]) + 1) if "array" in opts else [None]
for task in tasks:
    env = dict(os.environ, **({{"SLURM_ARRAY_TASK_ID": str(task)}} if task is not None else {{}}))
    subprocess.run(["sh", "-c", opts["wrap"]], env=env, check=True)
print(f"{{1000 + n}};cluster")
""")
    (bin_dir / "fake-prep").write_text(f"""#!{sys.executable}
import json, sys
with open({str(calls)!r} + ".prep", "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
""")
    for name in ("sbatch", "fake-prep"):
        (bin_dir / name).chmod(0o755)
    work = tmp_path / "a work dir"
    env = {**subprocess_env(), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "XLPOS_PREP": "fake-prep",
           "SBATCH_SHARD": "--cpus-per-task=4 --mem=8G"}
    script = REPO / "recipes" / "slurm_prepare.sh"
    shared = ["--work", str(work), "--src", "en", "--tgt", "de", "--workers", "4"]
    proc = subprocess.run(["bash", str(script), "3", *shared], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "global steps 1001, 3 shard tasks 1002, merge 1003" in proc.stdout
    ran = [json.loads(x) for x in Path(f"{calls}.prep").read_text().splitlines()]
    stages = [["--global-steps"], ["--shard", "0/3"], ["--shard", "1/3"], ["--shard", "2/3"], ["--merge", "3"]]
    assert ran == [["prepare", *shared, *stage] for stage in stages]
    submitted = [json.loads(x) for x in Path(f"{calls}.sbatch").read_text().splitlines()]
    assert "--dependency=afterok:1001" in submitted[1] and "--array=0-2" in submitted[1]
    assert "--cpus-per-task=4" in submitted[1] and "--cpus-per-task=4" not in submitted[0]
    assert "--dependency=afterok:1002" in submitted[2]
    assert (work / "logs" / "slurm").is_dir()

    dry = subprocess.run(["bash", str(script), "2", *shared], env={**env, "DRY_RUN": "1"}, capture_output=True,
                         text=True, timeout=60)
    assert dry.returncode == 0 and dry.stderr.count("sbatch ") == 3 and "afterok:SHARD_JOBS" in dry.stderr
    assert len(Path(f"{calls}.sbatch").read_text().splitlines()) == 3  # nothing submitted
    for bad in (["x", *shared], ["2", "--src", "en"], ["2", *shared, "--merge", "2"]):
        proc = subprocess.run(["bash", str(script), *bad], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, (bad, proc.stderr)
