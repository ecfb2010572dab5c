"""Jackknifed training orders (`prepare --jackknife K`): every line the reorderer is trained on gets the order of a
reorderer that never saw it, lines beyond the reorderer's get the full model's, the folds resume one by one, and
the training lines' orders are scored against their oracle beside the held-out splits'."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_pipeline import corpus, quick, shared_alignment
from xlpos_prep.io import step_done
from xlpos_prep.pipeline import Layout, interleave_folds, prepare, write_folds
from xlpos_prep.reorderer import Reorderer


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_folds_are_interleaved_and_interleave_back(tmp_path):
    src = tmp_path / "src"
    oracle = tmp_path / "oracle"
    src.write_text("".join(f"w{i} x\n" for i in range(11)))
    oracle.write_text("".join("0 1\n" for _ in range(11)))

    def fold(k: int, kind: str) -> str:
        return str(tmp_path / f"fold{k}.{kind}")

    write_folds(str(src), str(oracle), 10, 3, fold)  # line 11 is beyond the 10 lines folded
    assert lines(Path(fold(0, "held.src"))) == ["w0 x", "w3 x", "w6 x", "w9 x"]
    assert lines(Path(fold(1, "held.src"))) == ["w1 x", "w4 x", "w7 x"]
    assert lines(Path(fold(1, "train.src"))) == ["w0 x", "w2 x", "w3 x", "w5 x", "w6 x", "w8 x", "w9 x"]
    assert len(lines(Path(fold(1, "train.oracle")))) == 7
    out = tmp_path / "joined"
    interleave_folds([fold(k, "held.src") for k in range(3)], 10, str(out))
    assert lines(out) == [f"w{i} x" for i in range(10)]
    with pytest.raises(ValueError, match=r"fold1\.held\.src.* ends before line 4, which line 11 of the jackknifed"):
        interleave_folds([fold(k, "held.src") for k in range(3)], 14, str(out))
    assert lines(out) == [f"w{i} x" for i in range(10)]  # a failed step leaves its output as it was


def test_prepare_jackknifes_the_reorderers_training_lines_and_resumes_fold_by_fold(tmp_path):
    work = tmp_path / "w"
    corpus(work, "en", "ja", n=120)
    shared_alignment(work, "en", "ja", 120)
    cfg = dict(src="en", tgt="ja", reorder_train_lines=100, jackknife=3)
    prepare(quick(**cfg), Layout.recipe(work))
    r, jk = work / "reorder", work / "reorder" / "jackknife"
    assert json.loads((work / "prepare.json").read_text())["jackknife"] == 3
    train_words = [x.split() for x in lines(work / "tok" / "train.en")]
    order = [[int(x) for x in line.split()] for line in lines(r / "train.order")]
    assert len(order) == 120
    for k in range(3):
        model = Reorderer.load(str(jk / f"fold{k + 1}-of-3.model"))
        held = [i for i in range(100) if i % 3 == k]
        # the fold's lines carry its own model's orders, and that model was trained without them
        assert [order[i] for i in held] == model.reorder_batch([train_words[i] for i in held])
        assert lines(jk / f"fold{k + 1}-of-3.train.src") == [
            " ".join(train_words[i]) for i in range(100) if i % 3 != k]
    full = Reorderer.load(str(r / "reorderer.model"))
    assert order[100:] == full.reorder_batch(train_words[100:])  # beyond the reorderer's lines: the full model
    scores = json.loads((r / "train.tau.json").read_text())
    assert scores["reorderer"]["n_sentences"] == 100 and set(scores) == {"reorderer", "monotone", "reversed"}

    # a run killed after two folds, while the model on all lines still trained beside the third: the rerun trains
    # only those two, and ends where an uninterrupted run does
    before = {p: p.stat().st_mtime_ns for p in jk.glob("fold[12]-of-3.model")}
    for path in (jk / "fold3-of-3.model", jk / "fold3-of-3.held.order", r / "reorderer.model"):
        path.unlink()
        Path(f"{path}.done").unlink()
    for path in (jk / "train-3-folds.order", r / "train.order"):
        Path(f"{path}.done").unlink()
    prepare(quick(**cfg), Layout.recipe(work))
    assert {p: p.stat().st_mtime_ns for p in before} == before
    assert [[int(x) for x in line.split()] for line in lines(r / "train.order")] == order
    assert step_done([r / "train.order", jk / "fold3-of-3.model", r / "reorderer.model"])


def test_jackknife_1_labels_the_training_lines_with_the_model_trained_on_them(tmp_path):
    work = tmp_path / "w"
    corpus(work, "en", "ja", n=60)
    shared_alignment(work, "en", "ja", 60)
    prepare(quick(src="en", tgt="ja", jackknife=1), Layout.recipe(work))
    assert not (work / "reorder" / "jackknife").exists()
    words = [x.split() for x in lines(work / "tok" / "train.en")]
    full = Reorderer.load(str(work / "reorder" / "reorderer.model"))
    assert [[int(x) for x in line.split()] for line in lines(work / "reorder" / "train.order")] == \
        full.reorder_batch(words)


def test_too_few_lines_for_the_folds_is_one_line_naming_the_option(tmp_path):
    work = tmp_path / "w"
    corpus(work, "en", "ja", n=60)
    shared_alignment(work, "en", "ja", 60)
    with pytest.raises(ValueError, match=r"5 reorderer training lines cannot make 3 jackknife folds of two or more: "
                                         r"use --jackknife 1"):
        prepare(quick(src="en", tgt="ja", reorder_train_lines=5, jackknife=3), Layout.recipe(work))


def test_a_work_directory_made_before_jackknifing_is_not_mixed_with_jackknifed_orders(tmp_path):
    work = tmp_path / "w"
    corpus(work, "en", "ja", n=60)
    shared_alignment(work, "en", "ja", 60)
    prepare(quick(src="en", tgt="ja", jackknife=1), Layout.recipe(work))
    recorded = json.loads((work / "prepare.json").read_text())
    del recorded["jackknife"]  # as an older xlpos wrote it
    (work / "prepare.json").write_text(json.dumps(recorded))
    with pytest.raises(ValueError, match=r"made with other settings \(jackknife: 1, now 3\)"):
        prepare(quick(src="en", tgt="ja", jackknife=3), Layout.recipe(work))
    prepare(quick(src="en", tgt="ja", jackknife=1), Layout.recipe(work))  # what it was made with: resumes
