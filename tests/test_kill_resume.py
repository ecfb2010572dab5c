"""Kill the quickstart recipe at a fixed list of points (SIGKILL to its whole process group, as a lost session or
an out-of-memory kill does), rerun it after each kill, and check that the result equals an uninterrupted run.

One run is killed in turn inside each step: the corpus, eflomal, the oracle, the reorderer's training (after
its first snapshot), positions, the data-bin's tokens, binarize, fairseq-train and decoding; the last rerun
completes. eflomal cannot be seeded, so the uninterrupted reference run starts from the killed run's corpus and
alignment (tok/, reorder/align.txt, with their .done markers) and recomputes everything after it; the alignment
itself is compared by structure (one line per sentence pair, links inside the sentences). Everything else that
is deterministic is compared byte for byte: tokens, oracles, orders, taus, sentencepiece model, pieces, XL
positions, the binarized data-bin, hypotheses, scores and the results table. The reorderer model file itself is
not compared (its header records training times), the orders it produces are; nor is the sentencepiece .model
(its trainer spec records a temporary path), its .vocab and the pieces are.

The uninterrupted run is also the quickstart recipe's end-to-end test: the results table it prints (the XL row
with the reorderer's tau), complete hypotheses, one XL position per source piece, and a second run that skips
every step and prints the same table.

Also checked after the kills: no process is left, and no temporary (`.*.tmp`, `*.tmp.*`, snapshots, nor anything
in TMPDIR, where each run keeps its private directory) once the last rerun has finished.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import pytest

from conftest import REPO, subprocess_env
from test_recipes import hypotheses_complete, results

QUICKSTART = REPO / "recipes" / "quickstart.sh"
TINY_ARCH = ("--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16 --decoder-embed-dim 16 "
             "--encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 --encoder-attention-heads 2 "
             "--decoder-attention-heads 2")
SETTINGS = {
    "SYNTH_TRAIN": "300", "SYNTH_VALID": "30", "SYNTH_TEST": "40", "SYSTEMS": "xl-rope", "MAX_UPDATE": "2",
    # enough iterations that the reorderer is still training when its first snapshot appears
    "REORDER_ITERATIONS": "8", "SPM_VOCAB": "300", "WORKERS": "2", "MAX_TOKENS": "2000", "WARMUP": "10",
    "GEN_MAX_TOKENS": "4000", "AVG_LAST": "1", "ARCH_ARGS": TINY_ARCH, "GEN_ARGS": "--max-len-a 1 --max-len-b 5",
    "REORDER_ARGS": "--hash-bits 18",  # a 300-sentence corpus needs no 2**22 rows (~800 MB to allocate and save)
    # one reorderer, not the jackknife's default K = 3 more: that its folds resume one by one is test_jackknife.py's
    "JACKKNIFE": "1",
}

SYSTEM = SETTINGS["SYSTEMS"]


def logged(log: Path, wanted: Callable[[str], bool]) -> bool:
    """Some line of `log` (a step's log, appended to by every run) is `wanted`."""
    with contextlib.suppress(FileNotFoundError):
        with open(log, encoding="utf-8", errors="replace") as f:
            return any(wanted(line) for line in f)
    return False


def fairseq_logged(log: Path, module: str) -> bool:
    """fairseq's `module` (fairseq_cli.train, fairseq_cli.generate) wrote to `log`: it is running, past its
    imports (not the line of the command itself, written before it starts)."""
    return logged(log, lambda line: module in line and not line.startswith("$ "))


def command_logged(log: Path, command: str) -> bool:
    """The pipeline wrote the command line of `xlpos-prep COMMAND` to `log`: its process is starting (a Python
    start-up, far longer than the poll, and far longer than the work of a sub-second step on this corpus)."""
    return logged(log, lambda line: line.startswith("$ ") and f"xlpos_prep.cli {command} " in line)


# (step, condition on WORK meaning the step is running, seconds to wait after it holds)
KILL_POINTS = [
    ("synth", lambda w: (w / "synth").exists(), 0.0),
    ("align (eflomal)", lambda w: (w / "reorder" / "align-input.tgt").exists(), 0.5),
    ("oracle", lambda w: (w / "reorder" / "train.align.done").exists(), 0.0),
    ("train-reorderer", lambda w: (w / "reorder" / "reorderer.model.snapshot").exists(), 0.0),
    ("positions", lambda w: (w / "spm" / "spm.model.done").exists(), 0.3),
    # the data-bin is made in data-bin.tmp and renamed when its XL positions are binarized too
    # (the data-bin's two processes do milliseconds of work here: each is killed as soon as it is launched)
    ("preprocess", lambda w: command_logged(w / "logs" / "preprocess.log", "preprocess"), 0.0),
    ("binarize", lambda w: command_logged(w / "logs" / "preprocess.log", "binarize"), 0.0),
    # (fairseq's own lines in its log, not the save and output directories: a run takes their lock, which makes
    # them, before fairseq starts)
    ("fairseq-train", lambda w: fairseq_logged(w / "checkpoints" / SYSTEM / "train.log", "fairseq_cli.train"),
     0.5),
    ("decoding", lambda w: fairseq_logged(w / "out" / SYSTEM / "generate.log", "fairseq_cli.generate"), 0.2),
]

# outputs compared byte for byte with the uninterrupted run (globs under WORK)
# (not the sentencepiece .model, whose trainer spec records the temporary model prefix; the .vocab holds every piece
# and score, and the pieces files show its use)
COMPARED = ["tok/*", "reorder/*.oracle", "reorder/*.order", "reorder/train.src", "reorder/*.align",
            "reorder/test.tau.json", "spm/spm.vocab", "pieces/*", "data-bin/*.bin", "data-bin/*.idx",
            "data-bin/dict.*", f"out/{SYSTEM}/test.words", "scores/*", "results.txt"]


def recipe_env(work: Path, tmpdir: Path) -> dict:
    return {**subprocess_env(), **SETTINGS, "WORK": str(work), "TMPDIR": str(tmpdir)}


def run_to_end(work: Path, tmpdir: Path) -> str:
    proc = subprocess.run(["bash", str(QUICKSTART)], env=recipe_env(work, tmpdir), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stderr


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_at(work: Path, tmpdir: Path, step: str, condition, delay: float) -> None:
    proc = subprocess.Popen(["bash", str(QUICKSTART)], env=recipe_env(work, tmpdir), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 900  # a busy machine: one tiny fairseq step took minutes
        while not condition(work):
            if proc.poll() is not None:
                pytest.fail(f"the recipe ended (status {proc.returncode}) before reaching {step}:\n"
                            f"{proc.stderr.read().decode()[-3000:]}")
            assert time.monotonic() < deadline, f"timed out waiting for {step}"
            time.sleep(0.02)
        time.sleep(delay)
        assert proc.poll() is None, f"the recipe finished {step} within {delay} s: move the kill point"
    finally:  # the kill itself, and no recipe left running when the test fails
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    deadline = time.monotonic() + 10
    while group_alive(proc.pid):  # every process of the recipe, eflomal and fairseq included
        assert time.monotonic() < deadline, f"processes of the recipe survived the kill in {step}"
        time.sleep(0.05)


def compared_files(work: Path) -> dict[str, str]:
    """Hash of every compared file, with the WORK path itself (in test.tau.json) written as WORK."""
    found = {}
    for pattern in COMPARED:
        for path in work.glob(pattern):
            if path.is_file() and not path.name.endswith(".done"):
                data = path.read_bytes().replace(str(work).encode(), b"WORK")
                found[str(path.relative_to(work))] = hashlib.sha256(data).hexdigest()
    return found


def check_alignment(work: Path) -> None:
    src = (work / "reorder" / "align-input.src").read_text().splitlines()
    tgt = (work / "reorder" / "align-input.tgt").read_text().splitlines()
    links = (work / "reorder" / "align.txt").read_text().splitlines()
    assert len(links) == len(src) == len(tgt) == 300 + 40
    for line, s, t in zip(links, src, tgt):
        for link in line.split():
            i, j = map(int, link.split("-"))
            assert 0 <= i < len(s.split()) and 0 <= j < len(t.split())


def test_quickstart_killed_in_every_step_resumes_to_the_uninterrupted_result(tmp_path):
    work = tmp_path / "killed"
    # A short TMPDIR, as on a real machine: pytest's own paths are long enough to matter for the sockets that
    # fairseq's data loaders open under TMPDIR (lib.sh's xl_private_tmp).
    tmpdir = Path(tempfile.mkdtemp(prefix="xlk", dir="/tmp"))
    try:
        check_killed_and_resumed(tmp_path, work, tmpdir)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def check_killed_and_resumed(tmp_path: Path, work: Path, tmpdir: Path) -> None:
    for step, condition, delay in KILL_POINTS:
        kill_at(work, tmpdir, step, condition, delay)
    log = run_to_end(work, tmpdir)
    assert "resuming its snapshot" not in log  # (the kill in train-reorderer was resumed by an earlier rerun)
    leftovers = [str(p.relative_to(work)) for p in work.rglob("*")
                 if p.name.endswith(".tmp") or ".tmp." in p.name or p.name.endswith(".snapshot")]
    assert leftovers == []
    assert list(tmpdir.iterdir()) == []  # the killed runs' private directories were removed by the reruns
    check_alignment(work)

    # the reference: the same corpus and alignment, every later step uninterrupted
    reference = tmp_path / "reference"
    shutil.copytree(work / "synth", reference / "synth")
    shutil.copytree(work / "tok", reference / "tok")
    (reference / "reorder").mkdir()
    for name in ("align.txt", "align.txt.done", "align-input.src", "align-input.tgt"):
        shutil.copy(work / "reorder" / name, reference / "reorder" / name)
    shutil.copy(work / "synth.done", reference / "synth.done")
    log = run_to_end(reference, tmpdir)
    got, want = compared_files(work), compared_files(reference)
    assert len(want) > 30 and sorted(got) == sorted(want)
    assert [name for name in want if got[name] != want[name]] == []
    check_quickstart_result(reference, log, tmpdir)


def check_quickstart_result(work: Path, log: str, tmpdir: Path) -> None:
    """The uninterrupted run is also the quickstart recipe's end-to-end check: what it prints and leaves."""
    assert "quickstart finished" in log
    table, scores = results(work, [SYSTEM])
    assert "BLEU" in table and "tau" in table and "signature" in table.lower() and "nrefs:1" in table
    # an XL row states the reorderer's tau on the test set, from the recipe's own evaluation
    taus = json.loads((work / "reorder" / "test.tau.json").read_text())
    reorderer_tau = next(v["corpus_tau"] for k, v in taus.items() if k not in ("monotone", "reversed"))
    row = next(line for line in table.splitlines() if line.split() and line.split()[0] == SYSTEM)
    assert f"{reorderer_tau:.4f}" in row
    hypotheses_complete(work, SYSTEM, work / "tok" / "test.src")
    assert 0 <= scores[SYSTEM]["BLEU"]["value"] <= 100
    # XL positions were binarized next to the tokens, one per source piece
    xlpos = (work / "pieces" / "test.xlpos").read_text().splitlines()
    pieces = (work / "pieces" / "test.src").read_text().splitlines()
    assert [len(x.split()) for x in xlpos] == [len(p.split()) for p in pieces]
    assert list((work / "data-bin").glob("test.src-tgt.xlpos.*"))
    # a second run resumes: every step is skipped and the same table is printed
    again = run_to_end(work, tmpdir)
    assert f"train {SYSTEM}" not in again and "skip:" in again
    assert (work / "results.txt").read_text(encoding="utf-8") == table


# ------------------------------------------------------------------------------------------------ the same rule in Python
def test_bleu_step_times_skip_only_completed_steps(tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bleu

    out = tmp_path / "a.txt"
    calls = []

    def make(fail: bool = False):
        calls.append(1)
        out.write_text("partial" if fail else "complete")
        if fail:
            raise RuntimeError("killed")

    times = bleu.Steps(tmp_path / "times.json")
    with pytest.raises(RuntimeError):
        times.step("s", [out], lambda: make(fail=True))
    assert out.exists() and not (tmp_path / "a.txt.done").exists()  # what a killed step leaves
    times.step("s", [out], make)  # not skipped: the output exists but the step did not complete
    assert len(calls) == 2 and out.read_text() == "complete" and (tmp_path / "a.txt.done").exists()
    bleu.Steps(tmp_path / "times.json").step("s", [out], make)
    assert len(calls) == 2
    # a work dir from before the markers: the recorded time says the step completed
    (tmp_path / "a.txt.done").unlink()
    bleu.Steps(tmp_path / "times.json").step("s", [out], make)
    assert len(calls) == 2 and (tmp_path / "a.txt.done").exists()
