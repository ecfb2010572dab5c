"""The one data pipeline (xlpos_prep.pipeline): what `prepare` writes and records, where the oracle's defaults come
from, the alignment shared by a corpus's two directions, resuming, the completion rule for a recipe's own commands
(`xlpos-prep step`), and the package's import rules. The end-to-end runs through the recipes are in
test_recipes.py and test_kill_resume.py; these stop before fairseq (--no-data-bin), so they take seconds."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, subprocess_env
from xlpos_prep import cli as prep_cli
from xlpos_prep.io import step_done
from xlpos_prep.pipeline import Layout, PrepareConfig, default_attach_null, parse_step, prepare

SHARED = REPO.parent / "shared" / "data" / "enja"


def corpus(work: Path, src: str, tgt: str, n: int = 120) -> None:
    """WORK/tok/{train,valid,test}.{src,tgt} from the Tanaka sample (train: n lines, valid/test: 20)."""
    if not (SHARED / "train.en").exists():
        pytest.skip(f"{SHARED} is absent")
    lines = {lang: (SHARED / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:n + 40] for lang in (src, tgt)}
    for split, (a, b) in {"train": (0, n), "valid": (n, n + 20), "test": (n + 20, n + 40)}.items():
        for lang in (src, tgt):
            path = work / "tok" / f"{split}.{lang}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(x + "\n" for x in lines[lang][a:b]), encoding="utf-8")


def quick(**kw) -> PrepareConfig:
    """Settings for a run of seconds: one reorderer (no jackknife, the default's K more: test_jackknife.py passes
    its own), one iteration, a small vocabulary, no data-bin."""
    kw.setdefault("jackknife", 1)
    return PrepareConfig(reorder_iterations=1, spm_vocab=600, data_bin=False, workers=1, **kw)


def shared_alignment(work: Path, first: str, second: str, n_train: int) -> list[str]:
    """A made-up alignment of the first n_train training pairs + test in the FIRST-SECOND direction (word k to word
    k+1, as far as both have words), in place of eflomal's, with its completion marker: the pipeline takes it as
    its alignment step's output, as bleu.py's two directions of a corpus share one. Its lines."""
    r = work / "reorder"
    r.mkdir(parents=True, exist_ok=True)
    lines = []
    for split, n in (("train", n_train), ("test", None)):
        a = (work / "tok" / f"{split}.{first}").read_text(encoding="utf-8").splitlines()[:n]
        b = (work / "tok" / f"{split}.{second}").read_text(encoding="utf-8").splitlines()[:n]
        lines += [" ".join(f"{k}-{k + 1}" for k in range(min(len(x.split()), len(y.split()) - 1)))
                  for x, y in zip(a, b)]
    (r / "align.txt").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    (r / "align.txt.done").write_text("made by the test\n")
    return lines


def test_prepare_layout_japanese_default_shared_alignment_and_resume(tmp_path, capfd):
    work = tmp_path / "w"
    corpus(work, "ja", "en")
    links = shared_alignment(work, "en", "ja", 120)
    cfg = dict(src="ja", tgt="en", reorder_train_lines=100, align_reversed=True)
    done = prepare(quick(**cfg), Layout.recipe(work))
    recorded = json.loads((work / "prepare.json").read_text())
    assert recorded["attach_null"] == "left" == default_attach_null("ja") and default_attach_null("en") == "right"
    assert "attach_null=left" in capfd.readouterr().err  # logged with the other settings
    r = work / "reorder"
    # the oracle covers the reorderer's 100 training lines (its source cut to them), and the test set, and reads
    # the en-ja alignment as ja-en
    train_align = (r / "train.align").read_text().splitlines()
    assert train_align == [" ".join(f"{k + 1}-{k}" for k in range(len(x.split()))) for x in links[:100]]
    assert len((r / "train.oracle").read_text().splitlines()) == 100 == len((r / "train.src").read_text().splitlines())
    assert (r / "test.align").read_text().splitlines() == [" ".join("-".join(p.split("-")[::-1]) for p in x.split())
                                                          for x in links[120:]]
    assert len((r / "test.oracle").read_text().splitlines()) == 20
    for split in ("train", "valid", "test"):
        pieces = (work / "pieces" / f"{split}.ja").read_text().splitlines()
        xlpos = (work / "pieces" / f"{split}.xlpos").read_text().splitlines()
        assert [len(x.split()) for x in xlpos] == [len(p.split()) for p in pieces]
        assert len((work / "pieces" / f"{split}.en").read_text().splitlines()) == len(pieces)
    taus = json.loads((r / "test.tau.json").read_text())
    assert set(taus) == {"reorderer", "monotone", "reversed"}
    assert done.lines == {"sentences": {"train": 120, "valid": 20, "test": 20}, "aligned_train": 120,
                          "reorderer_train": 100}
    assert all(step_done([p]) for p in (r / "reorderer.model", work / "spm" / "spm.model", r / "test.order"))
    # a rerun skips every step; another setting in the same work directory is refused, naming it
    before = {p: p.stat().st_mtime_ns for p in work.rglob("*") if p.is_file() and not p.name.endswith(".done")}
    prepare(quick(**cfg), Layout.recipe(work))
    assert {p: p.stat().st_mtime_ns for p in before} == before
    with pytest.raises(ValueError, match=r"prepare.json: made with other settings \(attach_null: 'left', now "
                                         r"'right'\)"):
        prepare(quick(**cfg, attach_null="right"), Layout.recipe(work))
    # a work directory whose oracle was made before the Japanese default keeps it, and says so: one made by an
    # older xlpos, without prepare.json and with markers that record nothing
    (work / "prepare.json").unlink()
    for marker in work.rglob("*.done"):
        marker.write_text("made by an older xlpos\n")
    prepare(quick(**cfg), Layout.recipe(work))
    recorded = json.loads((work / "prepare.json").read_text())
    assert recorded["attach_null"] == "right" and "before prepare.json existed" in recorded["note"]
    assert {p: p.stat().st_mtime_ns for p in before if p.name != "prepare.json"} == {
        p: t for p, t in before.items() if p.name != "prepare.json"}
    prepare(quick(**cfg), Layout.recipe(work))  # and its reruns take that as their setting
    with pytest.raises(ValueError, match=r"attach_null: 'right', now 'left'"):
        prepare(quick(**cfg, attach_null="left"), Layout.recipe(work))


def test_changed_corpus_is_named(tmp_path):
    work = tmp_path / "w"
    corpus(work, "en", "ja", n=60)
    shared_alignment(work, "en", "ja", 59)  # one training line fewer than the corpus has now
    with pytest.raises(ValueError, match=r"align\.txt: has 79 lines, not the 80 of the aligned pairs: the corpus "
                                         r"changed"):
        prepare(quick(src="en", tgt="ja"), Layout.recipe(work))


def test_prepare_cli_errors_are_one_line(tmp_path, capsys):
    assert prep_cli.main(["prepare", "--work", str(tmp_path), "--src", "en", "--tgt", "de"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"xlpos-prep prepare: error: {tmp_path}/tok/train.en: tokenized input not found"]


def test_prepare_cli_oracle_positions_make_the_oracle_data_bin(tmp_path, capsys):
    """--oracle-positions train: every training line gets oracle ranks, and data-bin-oracle holds the data-bin's
    dictionaries with training XL positions made from them; with --align-lines it stops naming both options."""
    work = tmp_path / "w"
    corpus(work, "en", "ja", n=60)
    # a made-up alignment that reverses every sentence (word k to word m-1-k of the shorter side's m), so the
    # oracle order is far from the reorderer's (one pass over 40 lines)
    lines = []
    for split, n in (("train", 60), ("test", None)):
        a = (work / "tok" / f"{split}.en").read_text(encoding="utf-8").splitlines()[:n]
        b = (work / "tok" / f"{split}.ja").read_text(encoding="utf-8").splitlines()[:n]
        lines += [" ".join(f"{k}-{m - 1 - k}" for k in range(m)) for m in (min(len(x.split()), len(y.split()))
                                                                            for x, y in zip(a, b))]
    (work / "reorder").mkdir()
    (work / "reorder" / "align.txt").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    (work / "reorder" / "align.txt.done").write_text("made by the test\n")
    base = ["prepare", "--work", str(work), "--src", "en", "--tgt", "ja", "--jackknife", "1", "--reorder-iterations",
            "1", "--spm-vocab", "600", "--reorder-train-lines", "40", "--oracle-positions", "train"]
    assert prep_cli.main(base + ["--align-lines", "30"]) == 1
    assert capsys.readouterr().err.strip() == ("xlpos-prep prepare: error: --oracle-positions train needs every "
                                               "training line aligned: leave out --align-lines")
    assert not (work / "prepare.json").exists()
    assert prep_cli.main(base) == 0
    recorded = json.loads((work / "prepare.json").read_text())
    assert recorded["oracle_positions"] == ["train"] and recorded["full_oracle"] is True
    assert len((work / "reorder" / "train.oracle").read_text().splitlines()) == 60  # not only the reorderer's 40
    oracle_bin, data_bin = work / "data-bin-oracle", work / "data-bin"
    assert (oracle_bin / "dict.en.txt").read_bytes() == (data_bin / "dict.en.txt").read_bytes()
    assert {p.name for p in oracle_bin.glob("train.en-ja.*")} >= {"train.en-ja.en.bin", "train.en-ja.xlpos.bin"}
    oracle_xlpos = (work / "pieces" / "train.oracle.xlpos").read_text().splitlines()
    xlpos = (work / "pieces" / "train.xlpos").read_text().splitlines()
    assert [len(x.split()) for x in oracle_xlpos] == [len(x.split()) for x in xlpos] and oracle_xlpos != xlpos
    assert (oracle_bin / "train.en-ja.xlpos.bin").read_bytes() != (data_bin / "train.en-ja.xlpos.bin").read_bytes()


def test_step_runs_once_marks_and_stops_on_failure(tmp_path, capfd):
    out = tmp_path / "a" / "out.txt"
    args = ["step", str(out), "--stdout", "--", sys.executable, "-c", "print('made')"]
    assert prep_cli.main(args) == 0 and out.read_text() == "made\n" and step_done([out])
    assert prep_cli.main(args) == 0 and "skip: " in capfd.readouterr().err  # completed: skipped
    out.write_text("changed\n")  # an output changed since is not what the step made: redone
    assert prep_cli.main(args) == 0 and out.read_text() == "made\n" and "redo: " in capfd.readouterr().err
    failed = tmp_path / "failed.txt"
    assert prep_cli.main(["step", str(failed), "--stdout", "--", "false"]) == 1
    assert not failed.exists() and not step_done([failed]) and list(tmp_path.iterdir()) == [tmp_path / "a"]
    assert capfd.readouterr().err.strip().endswith(f"false failed (exit 1); {failed} not written")
    # a command that succeeds without making its output is not marked done
    assert prep_cli.main(["step", str(failed), "--", "true"]) == 1 and not step_done([failed])
    with pytest.raises(ValueError, match="--stdout writes one output, not 2"):
        parse_step(["a", "b", "--stdout", "--", "true"])
    with pytest.raises(ValueError, match="expected OUTPUT"):
        parse_step(["a", "true"])


def test_recipe_system_names_and_the_train_command():
    from xlpos_prep.systems import parse_system, plugin_dir, task_args, train_command
    baseline, xl_head = parse_system("baseline"), parse_system("xl-head")
    assert baseline.name == "baseline" and baseline.task_args == parse_system("vanilla").task_args
    assert xl_head.task_args == parse_system("head").task_args and xl_head.reads_reorderer
    assert task_args(xl_head, "transformer_xlpos_wmt_en_de")[-4:] == ["--arch", "transformer_xlpos_wmt_en_de",
                                                                     "--xl-integration", "head"]
    assert plugin_dir() == str(REPO / "xlpos") and task_args(baseline)[:2] == ["--user-dir", plugin_dir()]
    cmd = train_command("bin", parse_system("encfree-input"), "ja", "en", "ckpt", ["--encoder-layers", "3", "--cpu"])
    # the system's own model options come after the shared ones, so --encoder-layers 0 wins
    assert cmd[cmd.index("--cpu"):] == ["--cpu", "--encoder-layers", "0", "--save-dir", "ckpt"]
    with pytest.raises(ValueError, match="unknown system xl-foo"):
        parse_system("xl-foo")


def test_installed_package_name_and_no_fairseq_or_torch_at_import(tmp_path):
    """xlpos_prep imports from anywhere; the folder's own name does not (a user's `preprocess` module is theirs);
    the pipeline and the text, scoring, sentencepiece and decoding modules load without fairseq or torch."""
    code = ("import sys, xlpos_prep.pipeline, xlpos_prep.text, xlpos_prep.scoring, xlpos_prep.sentencepiece_model, "
            "xlpos_prep.translate, xlpos_prep.systems, xlpos_prep.cli\n"
            "heavy = sorted(m for m in ('torch', 'fairseq', 'xlpos') if m in sys.modules)\n"
            "try:\n    import preprocess\n    found = preprocess.__file__\nexcept ImportError:\n    found = None\n"
            "print(heavy, found)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env=subprocess_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[0] == "[] None"


def test_prepare_redoes_what_changed_and_ends_as_a_clean_run(tmp_path, capfd):
    """After a completed run: an input of a later step changed, an output deleted, another truncated, a later
    setting changed. The rerun redoes those steps and what depends on them, and ends with the files a clean run on
    the final input and settings makes. A changed input of the alignment and the reorderer (expensive) stops
    with one line naming it, before any work."""
    work, clean = tmp_path / "w", tmp_path / "clean"
    corpus(work, "en", "ja", n=60)
    shared_alignment(work, "en", "ja", 60)
    prepare(quick(src="en", tgt="ja"), Layout.recipe(work))
    valid = work / "tok" / "valid.ja"
    lines = valid.read_text(encoding="utf-8").splitlines()
    valid.write_text("\n".join([lines[1]] + lines[1:]) + "\n", encoding="utf-8")
    (work / "reorder" / "test.order").unlink()
    with open(work / "pieces" / "train.xlpos", "r+") as f:
        f.truncate(5)
    capfd.readouterr()
    prepare(quick(src="en", tgt="ja", spm_coverage=0.9999), Layout.recipe(work))
    err = capfd.readouterr().err
    assert "settings changed (spm_coverage: 1.0, now 0.9999)" in err and "redo: spm-encode valid" in err
    assert "redo: positions train" in err and "skip: train-reorderer" in err
    shutil.copytree(work / "tok", clean / "tok")
    shared_alignment(clean, "en", "ja", 60)
    prepare(quick(src="en", tgt="ja", spm_coverage=0.9999), Layout.recipe(clean))

    def made(root: Path) -> dict[str, bytes]:
        # (not the models: the reorderer's header records training times, sentencepiece's a temporary path)
        return {str(p.relative_to(root)): p.read_bytes().replace(str(root).encode(), b"WORK")
                for p in root.rglob("*") if p.is_file() and p.parts[len(root.parts)] in ("reorder", "pieces", "spm")
                and not p.name.endswith((".done", ".model"))}

    assert made(work) == made(clean) and len(made(work)) >= 20
    assert {"pieces/valid.ja", "reorder/test.order", "pieces/train.xlpos", "spm/spm.vocab"} <= set(made(work))
    # the alignment's input changed: stops naming it, changes nothing
    train = work / "tok" / "train.en"
    train.write_text(train.read_text(encoding="utf-8").replace(" ", "  ", 1), encoding="utf-8")
    before = {p: p.stat().st_mtime_ns for p in work.rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match=r"align\.txt: align \(train\+test\) not redone: its input .*tok/train\.en "
                                         r"changed \(.*\); delete it, and .*reorderer\.model made from it"):
        prepare(quick(src="en", tgt="ja", spm_coverage=0.9999), Layout.recipe(work))
    assert {p: p.stat().st_mtime_ns for p in work.rglob("*") if p.is_file() and p.name != "input-check.json"
            and not p.name.startswith("input-check.json")} == {p: t for p, t in before.items()
                                                               if not p.name.startswith("input-check.json")}
