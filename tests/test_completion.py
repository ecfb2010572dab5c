"""A step is done only while its outputs are what its inputs and settings made: the completion record
(xlpos_prep.io check_step/finish_step, pipeline.Steps) against what a careless or unlucky user does between runs.
Changed inputs, settings and outputs, old markers, two runs at once, full disks, and each row of the table of
cases it was built for: `xlpos-prep train` into a deleted save directory, `translate` after a failed or
redirected run, `prepare` with bad splits, `evaluate` with files that disagree. Every case ends with what an
uninterrupted clean run gives. Runs of fairseq itself (resuming from a damaged checkpoint) are in
test_checkpoint.py; a prepare run with every step, in test_pipeline.py."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import zipfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import subprocess_env
from xlpos_prep import cli as prep_cli
from xlpos_prep import io as prep_io
from xlpos_prep.io import LOCK_NAME, InputError, check_step, done_marker, finish_step, step_done
from xlpos_prep.pipeline import Steps

PREP = [sys.executable, "-m", "xlpos_prep.cli"]


def prep(args: list, capsys) -> tuple[int, str]:
    """xlpos-prep in-process: (exit status, stderr)."""
    try:
        status = prep_cli.main([str(a) for a in args])
    except SystemExit as e:
        status = e.code
    return status, capsys.readouterr().err


def error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1, err
    return lines[0]


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------------ the class
class Upper:
    """A step of Python: OUT = the upper-cased IN, `times` times; counts how often it ran."""

    def __init__(self, root: Path):
        self.src, self.out, self.runs = root / "in.txt", root / "out" / "out.txt", 0

    def step(self, times: int = 1, expensive: bool = False) -> None:
        def make() -> None:
            self.runs += 1
            self.out.parent.mkdir(exist_ok=True)
            self.out.write_text(self.src.read_text().upper() * times)
        Steps().step("upper", [self.out], make, inputs=[self.src], settings={"times": times}, expensive=expensive)

    def clean(self, times: int = 1) -> str:
        return self.src.read_text().upper() * times


def test_a_changed_input_setting_or_output_redoes_the_step(tmp_path, capfd):
    s = Upper(tmp_path)
    s.src.write_text("abc\n")
    s.step()
    s.step()
    assert s.runs == 1 and s.out.read_text() == s.clean()
    s.src.write_text("xyz\n")  # same size, other bytes
    s.step()
    assert s.runs == 2 and s.out.read_text() == s.clean()
    assert "redo: upper: its input" in capfd.readouterr().err
    s.step(times=2)  # a setting
    assert s.runs == 3 and s.out.read_text() == s.clean(2)
    assert "settings changed (times: 1, now 2)" in capfd.readouterr().err
    s.out.unlink()  # a deleted output
    s.step(times=2)
    assert s.runs == 4 and s.out.read_text() == s.clean(2)
    with open(s.out, "r+") as f:  # a truncated one
        f.truncate(3)
    s.step(times=2)
    assert s.runs == 5 and s.out.read_text() == s.clean(2)
    stat = s.out.stat()
    s.out.write_text(s.out.read_text().lower())  # changed in place, its time put back: the bytes tell
    os.utime(s.out, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    s.step(times=2)
    assert s.runs == 6 and s.out.read_text() == s.clean(2)
    os.unlink(done_marker(s.out))  # a run killed after writing its output
    s.step(times=2)
    assert s.runs == 7 and s.out.read_text() == s.clean(2)
    s.step(times=2)
    assert s.runs == 7


def test_copies_with_new_times_and_a_moved_directory_keep_their_records(tmp_path):
    s = Upper(tmp_path / "a")
    s.src.parent.mkdir()
    s.src.write_text("abc\n")
    s.step()
    for path in (s.src, s.out):  # `cp` without -p: same bytes, new times
        os.utime(path, ns=(1, 10**18))
    s.step()
    assert s.runs == 1
    shutil.move(tmp_path / "a", tmp_path / "b")  # the work directory moved as a whole
    moved = Upper(tmp_path / "b")
    moved.step()
    assert moved.runs == 0


def test_an_expensive_step_stops_naming_the_difference_and_runs_once_its_output_is_gone(tmp_path):
    s = Upper(tmp_path)
    s.src.write_text("abc\n")
    s.step(expensive=True)
    s.src.write_text("abcd\n")
    before = files_of(tmp_path)
    with pytest.raises(InputError, match=r"out\.txt: upper not redone: its input .*in\.txt changed \(5 bytes, not 4 "
                                         r"bytes\); delete it or move it away to redo the step"):
        s.step(expensive=True)
    assert files_of(tmp_path) == before
    with pytest.raises(InputError, match=r"settings changed \(times: 1, now 3\)"):
        s.step(times=3, expensive=True)
    s.out.unlink()
    s.step(times=3, expensive=True)
    assert s.runs == 2 and s.out.read_text() == s.clean(3)


@pytest.mark.parametrize("old_marker", ["", "upper\n"])
def test_markers_of_an_older_xlpos_count_once_and_are_recorded(old_marker, tmp_path, capfd):
    s = Upper(tmp_path)
    s.src.write_text("abc\n")
    s.out.parent.mkdir()
    s.out.write_text("ABC\n")
    Path(done_marker(s.out)).write_text(old_marker)
    s.step()
    assert s.runs == 0 and "(done; recorded now)" in capfd.readouterr().err
    assert json.loads(Path(done_marker(s.out)).read_text())["settings"] == {"times": 1}
    s.src.write_text("xyz\n")  # from now on the record tells
    s.step()
    assert s.runs == 1 and s.out.read_text() == s.clean()
    # an old marker beside an empty or missing output is not taken as done (a full disk, a deleted model)
    for damage in (lambda: s.out.write_text(""), s.out.unlink):
        damage()
        Path(done_marker(s.out)).write_text(old_marker)
        s.step()
        assert s.out.read_text() == s.clean()
    assert s.runs == 3


def test_a_full_disk_while_marking_leaves_no_marker_and_the_rerun_redoes_the_step(tmp_path, monkeypatch):
    s = Upper(tmp_path)
    s.src.write_text("abc\n")

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(prep_io.json, "dump", no_space)
        with pytest.raises(OSError, match="No space left"):
            s.step()
    assert sorted(p.name for p in s.out.parent.iterdir()) == ["out.txt"]  # no marker, no temporary
    s.step()
    assert s.runs == 2 and step_done([s.out], [s.src], {"times": 1})


def test_outputs_alone_and_records_of_another_step_are_not_done(tmp_path):
    out = tmp_path / "o.txt"
    out.write_text("x")
    assert not check_step([out]).done and not check_step([]).done
    finish_step([out], "one")
    assert step_done([out]) and not step_done([out, tmp_path / "p.txt"])
    other = tmp_path / "p.txt"
    other.write_text("y")
    os.replace(done_marker(out), done_marker(other))  # a marker moved beside another file
    state = check_step([other])
    assert not state.done and "records another step" in state.reason


# ------------------------------------------------------------------------------------------------ xlpos-prep step
UPPER_CODE = "import sys; print(open(sys.argv[1]).read().upper(), end='')"


def test_step_records_its_command_and_the_files_it_reads(tmp_path, capsys):
    data, out = tmp_path / "data" / "in.txt", tmp_path / "work" / "out.txt"
    data.parent.mkdir()
    data.write_text("abc\n")

    def step(code: str = UPPER_CODE) -> str:
        status, err = prep(["step", out, "--stdout", "--", sys.executable, "-c", code, data], capsys)
        assert status == 0, err
        return err

    assert "skip" not in step() and out.read_text() == "ABC\n"
    assert "skip: " in step()
    data.write_text("defg\n")  # the file it reads changed
    assert "redo: " in step() and out.read_text() == "DEFG\n"
    assert "redo: " in step(UPPER_CODE + " or 0") and out.read_text() == "DEFG\n"  # another command
    data.unlink()  # an input gone: the output is kept (it could not be redone)
    assert "skip: " in step(UPPER_CODE + " or 0") and out.read_text() == "DEFG\n"
    assert list(out.parent.glob(".*")) == []  # the lock is gone with the run


def test_a_failing_step_is_redone_with_its_fixed_command(tmp_path, capsys):
    out = tmp_path / "out.txt"
    status, err = prep(["step", out, "--", sys.executable, "-c", f"open({str(out)!r}, 'w').write('half'); "
                                                               f"raise SystemExit(1)"], capsys)
    assert status == 1 and out.read_text() == "half" and not os.path.exists(done_marker(out))
    status, err = prep(["step", out, "--", sys.executable, "-c", f"open({str(out)!r}, 'w').write('whole')"], capsys)
    assert status == 0 and out.read_text() == "whole" and step_done([out])


# ------------------------------------------------------------------------------------------------ one run at a time
@contextmanager
def lock_held_by_another_process(directory: Path):
    """A process holding `directory`'s lock as a run does; killed (SIGKILL: its lock file stays) at the end."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom xlpos_prep.io import directory_lock\n"
                               "with directory_lock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(120)",
         str(directory)], stdout=subprocess.PIPE, text=True, env=subprocess_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        holder.stdout.close()


def test_a_second_run_in_a_directory_stops_naming_the_first_and_a_killed_runs_lock_is_taken_over(tmp_path,
                                                                                                    capsys):
    work = tmp_path / "work"
    (work / "data-bin").mkdir(parents=True)
    runs = {
        "prepare": ["prepare", "--work", work, "--src", "ja", "--tgt", "en"],
        "step": ["step", work / "x.txt", "--stdout", "--", "echo", "x"],
    }
    with lock_held_by_another_process(work) as pid:
        for name, args in runs.items():
            before = files_of(work)
            status, err = prep(args, capsys)
            line = error_line(err)
            assert status == 1 and f"{work}: in use by another run (pid {pid}" in line, (name, line)
            assert files_of(work) == before
        save = work / "checkpoints" / "m"
        with lock_held_by_another_process(save) as train_pid:
            status, err = prep(["train", "--system", "vanilla", "--data-bin", work / "data-bin", "--save-dir", save,
                                "--source-lang", "ja", "--target-lang", "en", "--", "--cpu"], capsys)
            assert status == 1 and f"in use by another run (pid {train_pid}" in error_line(err)
    assert (work / LOCK_NAME).exists()  # what a killed run leaves
    status, err = prep(runs["step"], capsys)
    assert status == 0 and (work / "x.txt").read_text() == "x\n" and not (work / LOCK_NAME).exists()


# ------------------------------------------------------------------------------------------------ xlpos-prep train
class FakeTrain:
    """Stands in for fairseq-train inside `xlpos-prep train` (pipeline.run_logged): writes checkpoints that hold the
    options they were trained with, resumes from checkpoint_last.pt when it is there, counts its runs."""

    def __init__(self, monkeypatch, truncate: bool = False):
        self.runs, self.truncate = 0, truncate
        monkeypatch.setattr("xlpos_prep.pipeline.run_logged", self)

    def __call__(self, cmd, log_path, verbose=False, **kwargs):
        self.runs += 1
        save = Path(cmd[cmd.index("--save-dir") + 1])
        options = " ".join(cmd[cmd.index("--target-lang") + 2:])
        for name in ("checkpoint_best.pt", "checkpoint_last.pt"):
            with zipfile.ZipFile(save / name, "w") as z:
                z.writestr("options", options)
        if self.truncate:
            with open(save / "checkpoint_last.pt", "r+b") as f:
                f.truncate(10)
        Path(log_path).open("a").write("trained\n")


def test_train_into_a_deleted_or_damaged_save_dir_and_with_other_settings(tmp_path, capsys, monkeypatch):
    data_bin, save = tmp_path / "data-bin", tmp_path / "checkpoints" / "m"
    data_bin.mkdir()
    (data_bin / "dict.ja.txt").write_text("a 1\n")

    def train(*options: str) -> tuple[int, str]:
        return prep(["train", "--system", "vanilla", "--data-bin", data_bin, "--save-dir", save, "--source-lang",
                     "ja", "--target-lang", "en", "--", "--max-update", *options], capsys)

    fake = FakeTrain(monkeypatch)
    assert train("2")[0] == 0 and fake.runs == 1
    assert train("2")[0] == 0 and fake.runs == 1
    shutil.rmtree(save)  # deleted to retrain: retrained, not "done" with no model
    assert train("2")[0] == 0 and fake.runs == 2 and (save / "checkpoint_last.pt").exists()
    # a checkpoint damaged after training (a full disk): kept and named, with what to do
    with open(save / "checkpoint_last.pt", "r+b") as f:
        f.truncate(10)
    before = files_of(tmp_path)
    status, err = train("2")
    line = error_line(err)
    assert status == 1 and "changed since the step completed (checkpoint_last.pt: 10 bytes, not" in line
    assert f"delete {save}.done" in line
    assert files_of(tmp_path) == before and fake.runs == 2
    os.unlink(f"{save}.done")  # as the message says: train on from its checkpoints
    assert train("2")[0] == 0 and fake.runs == 3
    # other settings, other data: kept and named
    status, err = train("4")
    assert status == 1 and re.search(r"--max-update 2 .*, now .* --max-update 4", error_line(err)) and fake.runs == 3
    (data_bin / "dict.ja.txt").write_text("a 2\n")
    status, err = train("2")
    assert status == 1 and "data-bin changed (dict.ja.txt modified)" in error_line(err)
    # a run whose command succeeds but leaves an unreadable checkpoint is not done
    shutil.rmtree(save)
    FakeTrain(monkeypatch, truncate=True)
    status, err = train("2")
    assert status == 1 and "checkpoint_last.pt: not a readable checkpoint" in error_line(err)
    assert not os.path.exists(f"{save}.done")
    fake = FakeTrain(monkeypatch)
    assert train("2")[0] == 0 and fake.runs == 1


def test_train_markers_of_an_older_xlpos_beside_an_empty_save_dir_retrain(tmp_path, capsys, monkeypatch):
    data_bin, save = tmp_path / "data-bin", tmp_path / "checkpoints" / "m"
    data_bin.mkdir()
    save.mkdir(parents=True)
    Path(f"{save}.done").write_text("vanilla model\n")  # what the old `xlpos-prep train` left, save dir emptied
    fake = FakeTrain(monkeypatch)
    status, err = prep(["train", "--system", "vanilla", "--data-bin", data_bin, "--save-dir", save, "--source-lang",
                        "ja", "--target-lang", "en", "--", "--cpu"], capsys)
    assert status == 0 and fake.runs == 1 and "skip" not in err


# ------------------------------------------------------------------------------------------------ xlpos-prep translate
@pytest.fixture(scope="module")
def spm_model(tmp_path_factory) -> Path:
    import sentencepiece
    root = tmp_path_factory.mktemp("spm")
    (root / "text").write_text("".join(f"the cat {w} sat on a mat\n" for w in ("big", "small", "red")) * 20)
    sentencepiece.SentencePieceTrainer.train(input=str(root / "text"), model_prefix=str(root / "spm"),
                                             vocab_size=30, minloglevel=2, hard_vocab_limit=False, num_threads=1)
    return root / "spm.model"


class FakeGenerate:
    """Stands in for fairseq-generate: one hypothesis per sentence, or none past --max-source-positions (as
    fairseq skips over-long inputs with status 0); the hypothesis names the checkpoint."""

    def __init__(self, monkeypatch):
        self.runs = 0
        monkeypatch.setattr("xlpos_prep.translate.generate", self)

    def __call__(self, output, log_path, data_bin, checkpoint, source_lang, target_lang, subset, fairseq_args):
        self.runs += 1
        limit = int(fairseq_args[fairseq_args.index("--max-source-positions") + 1])
        with open(output, "w") as f:
            for i in range(min(3, limit)):
                f.write(f"H-{i}\t-0.5\t\u2581{Path(checkpoint).stem}\n")


def test_translate_after_a_failed_run_or_with_another_checkpoint_redoes_generation(tmp_path, capsys, monkeypatch,
                                                                                  spm_model):
    (tmp_path / "data-bin").mkdir()
    for name in ("a.pt", "b.pt"):
        (tmp_path / name).write_bytes(b"model " + name.encode())
    out = tmp_path / "out"
    fake = FakeGenerate(monkeypatch)

    def translate(checkpoint: str, positions: str) -> tuple[int, str]:
        return prep(["translate", "--data-bin", tmp_path / "data-bin", "--path", tmp_path / checkpoint,
                     "--source-lang", "ja", "--target-lang", "en", "--spm", spm_model, "--expected", "3",
                     "--out-dir", out, "--", "--max-source-positions", positions], capsys)

    status, err = translate("a.pt", "2")  # too small: one sentence skipped, status 0 from fairseq
    assert status == 1 and "2 hypotheses for 3 test sentences" in error_line(err)
    assert not os.path.exists(out / "generate.txt.done")
    assert translate("a.pt", "1024")[0] == 0 and fake.runs == 2  # the fixed options: generated again
    assert (out / "test.pieces").read_text().split() == ["\u2581a"] * 3
    assert translate("a.pt", "1024")[0] == 0 and fake.runs == 2
    assert translate("b.pt", "1024")[0] == 0 and fake.runs == 3  # another checkpoint
    assert (out / "test.pieces").read_text().split() == ["\u2581b"] * 3
    (tmp_path / "b.pt").write_bytes(b"retrained b")  # the same checkpoint file, retrained
    assert translate("b.pt", "1024")[0] == 0 and fake.runs == 4


# ------------------------------------------------------------------------------------------------ prepare's input
def tiny_tok(work: Path, lines: int = 6) -> dict[tuple[str, str], Path]:
    """WORK/tok/{train,valid,test}.{ja,en}, a few distinct lines each."""
    paths = {}
    for split in ("train", "valid", "test"):
        for lang, words in (("ja", "猫 が 魚 を 食べ た"), ("en", "the cat ate a fish")):
            path = work / "tok" / f"{split}.{lang}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(f"{words} {split}{k}\n" for k in range(lines)), encoding="utf-8")
            paths[split, lang] = path
    return paths


def drop_last_line(path: Path) -> None:
    path.write_text("".join(path.read_text(encoding="utf-8").splitlines(True)[:-1]), encoding="utf-8")


@pytest.mark.parametrize("split", ["valid", "test"])
def test_prepare_names_a_split_one_line_short_before_aligning(split, tmp_path, capsys):
    work = tmp_path / "w"
    tok = tiny_tok(work)
    drop_last_line(tok[split, "ja"])
    status, err = prep(["prepare", "--work", work, "--src", "ja", "--tgt", "en"], capsys)
    line = error_line(err)
    assert status == 1 and line.endswith(f"{tok[split, 'en']}:6: has 6 lines but {tok[split, 'ja']} has 5: files "
                                         f"must be parallel")
    assert not (work / "reorder").exists() and not (work / "prepare.json").exists()


@pytest.mark.parametrize("token, names", [("\u200f\u200f", "U+200F RIGHT-TO-LEFT MARK"),
                                          ("\u200b", "U+200B ZERO WIDTH SPACE"),
                                          ("a\u200fb", "U+200F RIGHT-TO-LEFT MARK")])
def test_prepare_names_a_word_sentencepiece_would_lose_before_aligning(token, names, tmp_path, capsys):
    work = tmp_path / "w"
    tok = tiny_tok(work)
    lines = tok["train", "ja"].read_text(encoding="utf-8").splitlines()
    lines[2] = f"猫 {token} 魚"
    tok["train", "ja"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    status, err = prep(["prepare", "--work", work, "--src", "ja", "--tgt", "en"], capsys)
    line = error_line(err)
    assert status == 1 and f"{tok['train', 'ja']}:3: word {token!r}" in line and names in line
    assert not (work / "reorder").exists()


def test_prepare_names_an_empty_line_before_aligning(tmp_path, capsys):
    work = tmp_path / "w"
    tok = tiny_tok(work)
    tok["valid", "en"].write_text("a\n\nb\nc\nd\ne\n")
    status, err = prep(["prepare", "--work", work, "--src", "ja", "--tgt", "en"], capsys)
    assert status == 1 and f"{tok['valid', 'en']}:2: empty line" in error_line(err)


def test_the_input_check_passes_a_real_corpus():
    from xlpos_prep.pipeline import check_tokenized
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "enja"
    if not (shared / "train.ja").exists():
        pytest.skip(f"{shared} is absent")
    tok = {("dev", lang): str(shared / f"dev.{lang}") for lang in ("ja", "en")}
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"xlpos-check-{os.getpid()}.json"
    try:
        check_tokenized(tok, ["dev"], ["ja", "en"], str(out))
        assert json.loads(out.read_text())["lines"]["dev"] == 500
    finally:
        out.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------ evaluate
def test_evaluate_with_an_order_and_an_oracle_of_different_lengths_names_both(tmp_path, capsys):
    (tmp_path / "o.oracle").write_text("0 1 2\n1 0\n")
    (tmp_path / "p.order").write_text("0 1 2\n2 1 0\n")
    status, err = prep(["evaluate", "--order", tmp_path / "p.order", "--oracle", tmp_path / "o.oracle"], capsys)
    line = error_line(err)
    assert status == 1 and f"{tmp_path / 'p.order'}:2: orders 3 words, but line 2 of {tmp_path / 'o.oracle'} has " \
                           f"2: the two files disagree about this sentence" in line


# ------------------------------------------------------------------------------------------------ full disks
@contextmanager
def small_disk(path: Path, size: str):
    """A tmpfs of `size` at `path` (root only; skips otherwise), unmounted afterwards."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


FILL_IGNORING_ERRORS = """import sys
try:
    with open(sys.argv[1], 'w') as f:
        for _ in range(200):
            f.write('x' * 1023 + chr(10))
except OSError:
    pass  # ignores the full disk, exits 0
"""


def test_a_step_whose_command_ignores_a_full_disk_is_not_done_and_reruns_once_there_is_space(tmp_path, capsys):
    with small_disk(tmp_path / "disk", "64k") as disk:
        out = disk / "out.txt"
        args = ["step", out, "--", sys.executable, "-c", FILL_IGNORING_ERRORS, out]
        status, err = prep(args, capsys)
        assert status == 1 and "No space left on device" in error_line(err)
        assert not os.path.exists(done_marker(out)) and [p.name for p in disk.iterdir()] == ["out.txt"]
        assert prep(args, capsys)[0] == 1  # still full: still not done
        subprocess.run(["mount", "-o", "remount,size=1m", str(disk)], check=True)
        status, err = prep(args, capsys)
        assert status == 0 and out.read_text() == ("x" * 1023 + "\n") * 200 and step_done([out])


def test_a_checkpoint_copy_on_a_full_disk_leaves_the_old_file_whole(tmp_path):
    from fairseq import checkpoint_utils

    import xlpos  # noqa: F401  (installs the hooks)
    with small_disk(tmp_path / "disk", "96k") as disk:
        best, last = disk / "checkpoint_best.pt", disk / "checkpoint_last.pt"
        last.write_bytes(b"L" * 20_000)
        best.write_bytes(b"B" * 40_000)
        with pytest.raises(OSError, match="No space left"):
            checkpoint_utils.PathManager.copy(str(best), str(last), overwrite=True)
        assert last.read_bytes() == b"L" * 20_000 and sorted(p.name for p in disk.iterdir()) == [best.name, last.name]
        last.unlink()  # with room, the copy is the file
        assert checkpoint_utils.PathManager.copy(str(best), str(last), overwrite=True)
        assert last.read_bytes() == best.read_bytes()
