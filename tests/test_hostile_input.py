"""Hostile input and interruption (issue 11): what a careless user does to `xlpos-prep` (its text steps included),
fairseq-interactive and the plugin. Every case checks the exit status, that the one-line message names the
file / line / option, and that the directory holding inputs and outputs is byte for byte what it was (no input
changed, no partial output, no temporary left).

Most commands run in-process through `xlpos_prep.cli.main` (the console script is a one-line wrapper; the
signal tests run it as a real process). The kill-and-resume test of the recipes is tests/test_kill_resume.py.
"""
from __future__ import annotations

import hashlib
import logging
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PLUGIN_DIR, REPO, cli, run_cli, subprocess_env
from xlpos_prep import cli as prep_cli
from xlpos_prep.io import remove_stale_temporaries, step_done, writer_tag

# the console script as a real process (its text subcommands were recipes/text_tools.py)
PREP = [sys.executable, "-m", "xlpos_prep.cli"]
HIRAGANA = [chr(c) for c in range(0x3042, 0x3094)]


# ------------------------------------------------------------------------------------------------ helpers
def tree_state(root: Path) -> dict[str, str]:
    """Every file under root (hidden ones included) -> hash of its bytes; symlinks by their target."""
    state = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            state[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            state[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            state[rel] = "dir"
    return state


def prep(args: list, capsys) -> tuple[int, str]:
    """xlpos-prep in-process: (exit status, stderr). argparse errors exit through SystemExit."""
    try:
        status = prep_cli.main([str(a) for a in args])
    except SystemExit as e:
        status = e.code
    err = capsys.readouterr().err
    return status, err


def error_line(err: str) -> str:
    """The single error line; fails when there is a traceback or more than one error line."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1, err
    return lines[0]


def refused(args: list, root: Path, capsys, *needles: str, status: int | None = None) -> str:
    """Run a command that must fail: one error line containing every needle, nothing under root changed."""
    before = tree_state(root)
    code, err = prep(args, capsys)
    assert code != 0, err
    if status is not None:
        assert code == status, err
    line = error_line(err)
    for needle in needles:
        assert needle in line, (needle, line)
    assert tree_state(root) == before
    return line


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A small synthetic corpus with oracle ranks, a trained reorderer, an order file and a sentencepiece model."""
    import sentencepiece

    root = tmp_path_factory.mktemp("hostile")
    assert prep_cli.main(["synth", "--out-dir", str(root), "--train", "300", "--valid", "5", "--test", "40",
                          "--seed", "5", "--max-len", "12"]) == 0
    from xlpos_prep.metrics import ranks_of_order
    for split in ("train", "test"):
        orders = [[int(x) for x in line.split()] for line in (root / f"{split}.gold-order").read_text().splitlines()]
        (root / f"{split}.oracle").write_text("".join(" ".join(map(str, ranks_of_order(o))) + "\n" for o in orders))
    assert prep_cli.main(["train-reorderer", "--src", str(root / "train.src"), "--oracle", str(root / "train.oracle"),
                          "--model", str(root / "m.reorderer"), "--iterations", "1", "--hash-bits", "12"]) == 0
    assert prep_cli.main(["reorder", "--model", str(root / "m.reorderer"), "--src", str(root / "test.src"),
                          "--out", str(root / "test.order")]) == 0
    sentencepiece.SentencePieceTrainer.train(
        input=str(root / "train.src"), model_prefix=str(root / "spm"), vocab_size=60, model_type="unigram",
        character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0, minloglevel=2, hard_vocab_limit=False,
        num_threads=1)
    # a "Japanese" model: trained on hiragana only, so English text is mostly <unk>
    rng = random.Random(1)
    (root / "ja.txt").write_text("".join(" ".join("".join(rng.choice(HIRAGANA) for _ in range(rng.randint(1, 4)))
                                                  for _ in range(8)) + "\n" for _ in range(300)), encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(root / "ja.txt"), model_prefix=str(root / "ja"), vocab_size=120, model_type="unigram",
        character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0, minloglevel=2, hard_vocab_limit=False,
        num_threads=1)
    return root


@pytest.fixture
def work(corpus, tmp_path) -> Path:
    """A private copy of the corpus (the cases must not touch the shared one)."""
    for path in corpus.iterdir():
        if path.is_file():
            (tmp_path / path.name).write_bytes(path.read_bytes())
    return tmp_path


# ------------------------------------------------------------------------------------------------ 1. outputs are never inputs
SAME_PATH_CASES = {
    # id: (arguments, with {w} the work directory; what the message must name)
    "train-reorderer --model is --src": (
        "train-reorderer --src {w}/train.src --oracle {w}/train.oracle --model {w}/train.src", "--src"),
    "train-reorderer --model is --dev-oracle": (
        "train-reorderer --src {w}/train.src --oracle {w}/train.oracle --model {w}/test.oracle "
        "--dev-src {w}/test.src --dev-oracle {w}/test.oracle", "--dev-oracle"),
    "reorder --out is --src": ("reorder --model {w}/m.reorderer --src {w}/test.src --out {w}/test.src", "--src"),
    "reorder --out is --model": ("reorder --model {w}/m.reorderer --src {w}/test.src --out {w}/m.reorderer",
                                 "--model"),
    "reorder --trees is --out": ("reorder --model {w}/m.reorderer --src {w}/test.src --out {w}/o --trees {w}/o",
                                 "--out"),
    "reorder --out via ./ and ..": ("reorder --model {w}/m.reorderer --src {w}/test.src "
                                    "--out {w}/./sub/../test.src", "--src"),
    "oracle --out is --align": ("oracle --src {w}/test.src --align {w}/test.gold-align --out {w}/test.gold-align",
                                "--align"),
    "oracle --out is --tgt": ("oracle --src {w}/test.src --align {w}/test.gold-align --tgt {w}/test.tgt "
                              "--out {w}/test.tgt", "--tgt"),
    "positions --out is --order": ("positions --src {w}/test.src --order {w}/test.order --spm {w}/spm.model "
                                   "--out {w}/test.order", "--order"),
    "positions --pieces-out is --spm": ("positions --src {w}/test.src --order {w}/test.order --spm {w}/spm.model "
                                        "--out {w}/x --pieces-out {w}/spm.model", "--spm"),
    "positions --pieces-out is --out": ("positions --src {w}/test.src --order monotone --spm {w}/spm.model "
                                        "--out {w}/x --pieces-out {w}/x", "--out"),
    "evaluate --json is --oracle": ("evaluate --order {w}/test.order --oracle {w}/test.oracle --json {w}/test.oracle",
                                    "--oracle"),
    "evaluate --json is one of several --order": (
        "evaluate --order {w}/test.oracle {w}/test.order --oracle {w}/test.oracle --json {w}/test.order", "--order"),
    "align --out is --tgt": ("align --src {w}/test.src --tgt {w}/test.tgt --out {w}/test.tgt", "--tgt"),
    "align --fwd-out is --out": ("align --src {w}/test.src --tgt {w}/test.tgt --out {w}/a --fwd-out {w}/a", "--out"),
}


@pytest.mark.parametrize("case", list(SAME_PATH_CASES))
def test_an_output_that_is_an_input_or_another_output_is_refused_before_any_work(case, work, capsys):
    template, names = SAME_PATH_CASES[case]
    line = refused(template.format(w=work).split(), work, capsys, names)
    assert str(work) in line and ("refusing to overwrite an input" in line or "are the same file" in line)


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_links_to_an_input_are_the_input(link, work, capsys):
    alias = work / "alias.src"
    if link == "hard":
        os.link(work / "test.src", alias)
    else:
        alias.symlink_to(work / "test.src")
    refused(["reorder", "--model", work / "m.reorderer", "--src", work / "test.src", "--out", alias], work, capsys,
            "alias.src", "--out is also the input --src")
    # and the other way round: an input given through a link to the output path
    refused(["reorder", "--model", work / "m.reorderer", "--src", alias, "--out", work / "test.src"], work, capsys,
            "--out is also the input --src")


def test_outputs_through_links_and_pipes_reach_their_target(work, capsys):
    # A symlinked output keeps the link (its target is replaced); a FIFO is written into, not replaced.
    (work / "link.order").symlink_to(work / "real.order")
    assert prep(["reorder", "--model", work / "m.reorderer", "--src", work / "test.src", "--out", work / "link.order"],
                capsys)[0] == 0
    assert (work / "link.order").is_symlink()
    assert (work / "real.order").read_text() == (work / "test.order").read_text()
    fifo = work / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    assert prep(["reorder", "--model", work / "m.reorderer", "--src", work / "test.src", "--out", fifo],
                capsys)[0] == 0
    assert reader.communicate(timeout=30)[0] == (work / "test.order").read_text()
    assert fifo.is_fifo()


def test_binarize_into_its_own_input_is_refused(work, capsys):
    data_bin = work / "bin"
    data_bin.mkdir()
    victim = data_bin / "test.src-tgt.xlpos.bin"
    victim.write_text("0 1 2\n")
    refused(["binarize", "--xlpos", victim, "--data-bin", data_bin, "--split", "test", "-s", "src", "-t", "tgt"],
            work, capsys, str(victim), "the binarized positions of test is also the input --xlpos")


def test_text_step_output_that_is_its_input_is_refused(work):
    before = tree_state(work)
    proc = subprocess.run([*PREP, "spm-encode", "--model", str(work / "spm.model"),
                           "--input", str(work / "test.src"), "--output", str(work / "test.src")],
                          capture_output=True, text=True, env=subprocess_env(), timeout=60)
    assert proc.returncode == 1
    assert "--output is also the input --input" in error_line(proc.stderr)
    assert tree_state(work) == before


# ------------------------------------------------------------------------------------------------ 2. incomplete models
def wait_for(predicate, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_interrupted_training_leaves_no_model_and_resume_equals_an_uninterrupted_run(work, capsys):
    model, snapshot = work / "r.model", work / "r.model.snapshot"
    # Enough iterations that training is still running when the signal arrives: on an idle machine one iteration
    # of this corpus takes under 10 ms.
    base = ["train-reorderer", "--src", work / "train.src", "--oracle", work / "train.oracle", "--hash-bits", "14",
            "--iterations", "300"]
    # SIGINT back to its default in the child: a shell that starts a job in the background (as CI may run the
    # suite) makes it ignore SIGINT, the children inherit that, and Python then never sees Ctrl-C.
    proc = subprocess.Popen([cli("xlpos-prep"), *map(str, base), "--model", str(model)], env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in proc.stderr:  # blocks until the log says the first iteration is done: no polling delay
        seen.append(line)
        if "iteration 1:" in line:
            break
    wait_for(snapshot.exists, what="the first snapshot")
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=60)
    err = "".join(seen) + rest
    assert proc.returncode == 130, err
    assert "interrupted (SIGINT)" in error_line(err)
    assert not model.exists(), "the final model path holds a partly trained model"
    assert [p.name for p in work.glob(".*tmp")] == []
    # the snapshot says it is incomplete: reorder and the plugin refuse it, naming it
    line = refused(["reorder", "--model", snapshot, "--src", work / "test.src", "--out", work / "o"], work, capsys,
                   str(snapshot), "incomplete", "--resume")
    assert re.search(r"after \d+ of 300 iterations", line)
    from xlpos.tasks.xl_inference import read_reorderer_file
    with pytest.raises(ValueError, match=re.escape(str(snapshot)) + ".*incomplete"):
        read_reorderer_file(str(snapshot))
    # --resume continues from the snapshot and ends where an uninterrupted run ends
    assert prep(base + ["--model", model, "--resume"], capsys)[0] == 0
    assert model.exists() and not snapshot.exists()
    assert prep(base + ["--model", work / "straight.model"], capsys)[0] == 0
    for name in ("r.model", "straight.model"):
        assert prep(["reorder", "--model", work / name, "--src", work / "test.src", "--out", work / f"{name}.order"],
                    capsys)[0] == 0
    assert (work / "r.model.order").read_text() == (work / "straight.model.order").read_text()


def test_resume_without_learner_state_names_the_model(work, capsys):
    refused(["train-reorderer", "--src", work / "train.src", "--oracle", work / "train.oracle", "--model",
             work / "m.reorderer", "--resume", "--iterations", "2"], work, capsys,
            f"{work / 'm.reorderer'}: --resume: the model holds no learner state")
    refused(["train-reorderer", "--src", work / "train.src", "--oracle", work / "train.oracle", "--model",
             work / "none.model", "--resume"], work, capsys, str(work / "none.model"), "snapshot")


def test_dev_files_of_different_lengths_are_both_named(work, capsys):
    short = work / "short.oracle"
    short.write_text("".join((work / "test.oracle").read_text().splitlines(keepends=True)[:7]))
    line = refused(["train-reorderer", "--src", work / "train.src", "--oracle", work / "train.oracle", "--model",
                    work / "x.model", "--dev-src", work / "test.src", "--dev-oracle", short], work, capsys,
                   f"{short}:8: has 7 lines but {work / 'test.src'} has 40")
    assert "the source" not in line


# ------------------------------------------------------------------------------------------------ 4. temporaries of dead runs
def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_temporaries_of_dead_runs_are_removed_by_the_next_run_and_live_ones_kept(work, capsys):
    host = writer_tag().rsplit(".", 1)[0]
    stale = work / f".o.{host}.{dead_pid()}.abcd1234.tmp"
    live = work / f".o.{host}.{os.getppid()}.efgh5678.tmp"  # pytest's parent: alive
    other_host = work / f".o.otherhost.{dead_pid()}.ijkl9012.tmp"
    for path in (stale, live, other_host):
        path.write_text("partial")
    assert prep(["reorder", "--model", work / "m.reorderer", "--src", work / "test.src", "--out", work / "o"],
                capsys)[0] == 0
    assert not stale.exists() and live.exists() and other_host.exists()
    assert (work / "o").read_text() == (work / "test.order").read_text()


def proc_stat(pid: int) -> tuple[str, str, int] | None:
    """(command name, state, parent pid) of a live process from /proc, or None once it is gone: a process can end
    between listing /proc and reading its stat, so every read here must tolerate that."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
        return comm, state, int(ppid)
    except (OSError, ValueError):
        return None


def eflomal_children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := proc_stat(int(entry.name))) and stat[0] == "eflomal" and stat[2] == pid:
            found.append(int(entry.name))
    return found


def eflomal_alive(pid: int) -> bool:
    """A zombie (state Z) has already died; only its reaper has not yet collected it."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] == "eflomal" and stat[1] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux")
def test_sigkilled_align_leaves_no_orphan_and_its_temporaries_go_with_the_next_run(work, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tmpdir")
    env = {**subprocess_env(), "TMPDIR": str(tmp)}
    src, tgt = work / "train.src", work / "train.tgt"
    big_src, big_tgt = work / "big.src", work / "big.tgt"
    big_src.write_text(src.read_text() * 20)
    big_tgt.write_text(tgt.read_text() * 20)
    proc = subprocess.Popen([cli("xlpos-prep"), "align", "--src", str(big_src), "--tgt", str(big_tgt), "--out",
                             str(work / "a.align"), "--rel-iterations", "20"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: eflomal_children(proc.pid) or proc.poll() is not None, what="eflomal to start")
    children = eflomal_children(proc.pid)
    assert children, "align finished before eflomal could be seen"
    proc.kill()
    proc.wait()
    wait_for(lambda: not any(eflomal_alive(c) for c in children), timeout=10, what="eflomal to die with its parent")
    assert not (work / "a.align").exists()
    left = [p.name for p in tmp.iterdir()]
    assert left and all(name.startswith("xlpos-align-") for name in left), left  # eflomal's files are inside
    # the next run (of a tiny corpus) removes the dead run's directory and leaves nothing of its own
    subprocess.run([cli("xlpos-prep"), "align", "--src", str(work / "test.src"), "--tgt", str(work / "test.tgt"),
                    "--out", str(work / "t.align")], env=env, check=True, capture_output=True, timeout=120)
    assert list(tmp.iterdir()) == []
    assert len((work / "t.align").read_text().splitlines()) == 40


def test_remove_stale_temporaries_keeps_other_names(tmp_path):
    host = writer_tag().rsplit(".", 1)[0]
    keep = [tmp_path / ".ox.other.tmp", tmp_path / ".o.notes", tmp_path / "o"]
    gone = tmp_path / f".o.{host}.{dead_pid()}.zz.tmp"
    for path in keep + [gone]:
        path.write_text("x")
    assert remove_stale_temporaries(str(tmp_path), ".o.", ".tmp") == [str(gone)]
    assert all(p.exists() for p in keep)


# ------------------------------------------------------------------------------------------------ 5. fairseq-interactive
INVALID_UTF8_LINES = [b"a man saw the dog .", b"the \xff cat saw a dog .", b"\xc3\x28 \xe2\x82", b"the dog ran ."]


@pytest.mark.parametrize("route", ["--input FILE", "stdin"])
def test_interactive_translates_every_line_of_invalid_utf8_and_reports_the_bad_ones(route, pipeline_model,
                                                                                       tmp_path):
    data = b"\n".join(INVALID_UTF8_LINES) + b"\n"
    args = [cli("fairseq-interactive"), str(pipeline_model.corpus.data_bin), "--user-dir", str(PLUGIN_DIR),
            "--task", "translation_xlpos", "--path", str(pipeline_model.checkpoint), "--beam", "1",
            "--max-len-a", "0", "--max-len-b", "5", "--cpu"]
    env = {**subprocess_env(), "PYTHONIOENCODING": "utf-8"}
    if route == "stdin":
        proc = subprocess.run(args, input=data, capture_output=True, env=env, timeout=180)
        name = "<stdin>"
    else:
        source = tmp_path / "input.txt"
        source.write_bytes(data)
        proc = subprocess.run(args + ["--input", str(source)], capture_output=True, env=env, timeout=180)
        name = str(source)
    out, log = proc.stdout.decode("utf-8"), (proc.stdout + proc.stderr).decode("utf-8")
    assert proc.returncode == 0 and "Traceback" not in log, log[-3000:]
    assert sorted(int(i) for i in re.findall(r"^H-(\d+)\t", out, flags=re.M)) == [0, 1, 2, 3]
    assert re.search(rf"{re.escape(name)}:2: 1 byte\(s\) that are not valid UTF-8 \(0xff\) replaced by U\+FFFD", log)
    assert re.search(rf"{re.escape(name)}:3: 3 byte\(s\) that are not valid UTF-8 \(0xc3 0xe2 0x82\)", log)
    assert not re.search(rf"{re.escape(name)}:[14]:", log)


# ------------------------------------------------------------------------------------------------ 6. directories and OS errors
def test_directories_where_files_belong_and_files_where_directories_belong(work, capsys):
    d = work / "adir"
    d.mkdir()
    refused(["reorder", "--model", work / "m.reorderer", "--src", d, "--out", work / "o"], work, capsys,
            f"{d}: is a directory, but --src must be a file")
    refused(["reorder", "--model", work / "m.reorderer", "--src", work / "test.src", "--out", d], work, capsys,
            f"{d}: is a directory, but --out must be a file name")
    refused(["reorder", "--model", d, "--src", work / "test.src", "--out", work / "o"], work, capsys, "--model")
    refused(["synth", "--out-dir", work / "test.src"], work, capsys,
            f"{work / 'test.src'}: exists and is not a directory (--out-dir)")
    refused(["oracle", "--src", work / "test.src", "--align", work / "test.gold-align", "--out",
             work / "test.src" / "x"], work, capsys, "is not a directory", "--out")
    refused(["evaluate", "--order", work / "missing.order", "--oracle", work / "test.oracle"], work, capsys,
            f"{work / 'missing.order'}: No such file or directory")
    refused(["binarize", "--xlpos", work / "test.order", "--data-bin", work / "nope", "--split", "test", "-s", "a",
             "-t", "b"], work, capsys, f"{work / 'nope'}: no such directory (--data-bin)")


def test_an_os_error_during_the_work_is_one_line_naming_the_path(work, capsys, monkeypatch):
    # A failure the up-front checks cannot foresee (disk full, a file vanishing): raised while writing.
    import xlpos_prep.reorderer as reorderer

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device", str(work / "o"))
    monkeypatch.setattr(reorderer, "reorder_lines", full_disk)
    refused(["reorder", "--model", work / "m.reorderer", "--src", work / "test.src", "--out", work / "o"], work,
            capsys, f"{work / 'o'}: No space left on device")


# ------------------------------------------------------------------------------------------------ 7. numbers in files
def test_binarize_with_a_23_digit_position_names_file_and_line(tiny_corpus, tmp_path, capsys):
    data_bin = tiny_corpus.copy_data_bin(tmp_path / "bin", with_xl_positions=False)
    lines = tiny_corpus.raw("test", "xlpos").read_text().splitlines()
    lines[4] = "12345678901234567890123 " + " ".join(lines[4].split()[1:])
    bad = tmp_path / "bad.xlpos"
    bad.write_text("\n".join(lines) + "\n")
    refused(["binarize", "--xlpos", bad, "--data-bin", data_bin, "--split", "test", "-s", "src", "-t", "tgt"],
            tmp_path, capsys, f"{bad}:5: position 12345678901234567890123 is out of range")


# ------------------------------------------------------------------------------------------------ 9. numeric options
NUMERIC_CASES = [
    ("train-reorderer", "--iterations", "0"), ("train-reorderer", "--iterations", "1e3"),
    ("train-reorderer", "--pa-c", "nan"), ("train-reorderer", "--pa-c", "0"), ("train-reorderer", "--pa-c", "inf"),
    ("train-reorderer", "--chunk-weight", "-1"), ("train-reorderer", "--chunk-weight", "1e400"),
    ("train-reorderer", "--hash-bits", "64"), ("train-reorderer", "--max-term", "0"),
    ("train-reorderer", "--max-span", "1"), ("train-reorderer", "--max-len", "-5"),
    ("train-reorderer", "--seed", "-1"), ("train-reorderer", "--seed", "123456789012345678901234"),
    ("train-reorderer", "--fallback-margin", "nan"), ("train-reorderer", "--fallback-margin", "-1"),
    ("train-reorderer", "--fallback-length", "-3"), ("reorder", "--fallback-margin", "inf"),
    ("reorder", "--fallback-length", "1e9"), ("reorder", "--invert-margin", "-0.5"),
    ("reorder", "--workers", "0"), ("reorder", "--workers", "many"), ("reorder", "--shard", "2/2"),
    ("oracle", "--workers", "-2"), ("oracle", "--shard", "1/0"), ("positions", "--workers", "0"),
    ("align", "--samplers", "0"), ("align", "--rel-iterations", "nan"), ("align", "--rel-iterations", "0"),
    ("align", "--null-prior", "2"), ("align", "--max-len", "5000"), ("align", "--seed", "-3"),
    ("synth", "--train", "0"), ("synth", "--max-depth", "1000"), ("synth", "--min-len", "0"),
]
BASE_ARGS = {
    "train-reorderer": "--src {w}/train.src --oracle {w}/train.oracle --model {w}/x.model",
    "reorder": "--model {w}/m.reorderer --src {w}/test.src --out {w}/o",
    "oracle": "--src {w}/test.src --align {w}/test.gold-align --out {w}/o",
    "positions": "--src {w}/test.src --order {w}/test.order --spm {w}/spm.model --out {w}/o",
    "align": "--src {w}/test.src --tgt {w}/test.tgt --out {w}/o",
    "synth": "--out-dir {w}/synth",
}


@pytest.mark.parametrize("command,option,value", NUMERIC_CASES)
def test_every_numeric_option_is_checked_before_any_work(command, option, value, work, capsys):
    args = [command, *BASE_ARGS[command].format(w=work).split(), option, value]
    line = refused(args, work, capsys, option)
    assert value in line or "must be a finite number, got inf" in line  # (1e400 reads as inf)
    # a value of the wrong form is argparse's (status 2), one out of range the range check's (status 1)
    assert line.startswith(f"xlpos-prep {command}: error: ")
    assert f"argument {option}: " in line or f"error: {option} must be " in line


def test_text_step_numeric_option_is_one_line(work):
    proc = subprocess.run([*PREP, "clean", "--src", str(work / "test.src"), "--tgt",
                           str(work / "test.tgt"), "--src-out", str(work / "a"), "--tgt-out", str(work / "b"),
                           "--ratio", "nan"], capture_output=True, text=True, env=subprocess_env(), timeout=60)
    assert proc.returncode == 1
    assert "--ratio must be a finite number, got nan" in error_line(proc.stderr)


def test_recipe_integer_settings_are_checked_naming_the_variable(tmp_path):
    for name, value in (("REORDER_SHARDS", "two"), ("ALIGN_LINES", "-5"), ("WORKERS", "0")):
        proc = subprocess.run(["bash", str(REPO / "recipes" / "quickstart.sh")], capture_output=True, text=True,
                              timeout=120, env={**subprocess_env(), "WORK": str(tmp_path / "w"), name: value})
        assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].startswith(f"error: {name} must be"), \
            proc.stderr[-2000:]
        assert not (tmp_path / "w").exists()


# ------------------------------------------------------------------------------------------------ 10. spm that does not fit
def test_a_sentencepiece_model_of_another_script_is_warned_about_with_the_rate(work, capsys, caplog):
    caplog.set_level(logging.WARNING)
    assert prep(["positions", "--src", work / "test.src", "--order", work / "test.order", "--spm", work / "ja.model",
                 "--out", work / "x"], capsys)[0] == 0
    match = re.search(r"ja\.model: (\d+\.\d)% of the \d+ pieces of \S*test\.src are <unk> \(warning above 5%\)",
                      caplog.text)
    assert match and float(match.group(1)) > 30, caplog.text
    caplog.clear()
    assert prep(["positions", "--src", work / "test.src", "--order", work / "test.order", "--spm", work / "spm.model",
                 "--out", work / "y"], capsys)[0] == 0
    assert "<unk>" not in caplog.text
    # the recipes' target side goes through `xlpos-prep spm-encode`: the same warning
    proc = subprocess.run([*PREP, "spm-encode", "--model", str(work / "ja.model"),
                           "--input", str(work / "test.tgt"), "--output", str(work / "t.pieces")],
                          capture_output=True, text=True, env=subprocess_env(), timeout=60)
    assert proc.returncode == 0 and re.search(
        r"WARNING \| \S+ \| \S*ja\.model: \d+\.\d% of the \d+ pieces of \S*test\.tgt", proc.stderr), proc.stderr
