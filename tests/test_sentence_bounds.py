"""A line of several sentences is reordered sentence by sentence (xlpos_prep.sentence_bounds), by either kind."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from test_reorderer import SMALL, order_from_tree, toy_corpus, toy_pair
from xlpos_prep.cli import main as cli_main
from xlpos_prep.reorderer import Reorderer, TrainOptions, load_reorderer, train
from xlpos_prep.sentence_bounds import sentence_cuts


@pytest.mark.parametrize("line, cuts", [
    ("take your time . there 's no hurry .", [0, 4, 9]),
    ("again ? not again ! !", [0, 2, 6]),
    ('he said " go . " and left .', [0, 6, 9]),
    ("ご ゆっくり どうぞ 。 急 ぐ 必要 は な い 。", [0, 4, 11]),
    ("it costs 3.5 dollars in the u.s. .", [0, 8]),
    ("well ... i think so .", [0, 6]),
    ("no final stop", [0, 3]),
    (". . a", [0, 2, 3]),
    ("", [0, 0]),
])
def test_a_sentence_ends_at_final_punctuation_and_the_closers_after_it(line, cuts):
    assert sentence_cuts(line.split()) == cuts


def joined_lines(count: int, seed: int) -> list[tuple[list[str], list[list[str]]]]:
    """(line, its sentences): two to four toy sentences, each ended by '.'."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        parts = [toy_pair(rng)[0] + ["."] for _ in range(rng.randint(2, 4))]
        out.append(([w for p in parts for w in p], parts))
    return out


def check_sentence_by_sentence(model, lines) -> None:
    """Each sentence of a line gets the order it gets as a line of its own, in sentence order, and the tree
    says the same order; parsed whole (split off, no fallback), some line moves a word across a sentence end."""
    split = model.with_abstention(split_sentences=True)
    whole = model.with_abstention(split_sentences=False, fallback_margin=0.0)
    crossed = 0
    orders = split.reorder_batch([line for line, _ in lines])
    for (line, parts), order in zip(lines, orders):
        expected, offset = [], 0
        for p in parts:
            expected += [offset + i for i in split.reorder(p)]
            offset += len(p)
        assert order == expected
        assert order_from_tree(split.tree(line), line) == order
        whole_order = whole.reorder(line)
        ends = np.cumsum([len(p) for p in parts])
        crossed += any(sorted(whole_order[:e]) != list(range(e)) for e in ends[:-1])
    assert crossed > 0


@pytest.fixture(scope="module")
def linear_model() -> Reorderer:
    sentences, ranks = toy_corpus(300, seed=1)
    return train(sentences, ranks, SMALL, TrainOptions(iterations=5), progress=False)


def test_the_linear_reorderer_orders_a_line_sentence_by_sentence(linear_model):
    check_sentence_by_sentence(linear_model, joined_lines(40, seed=5))


def test_train_reorderer_splits_by_default_reorder_can_turn_it_off_and_old_files_never_split(tmp_path):
    sentences, ranks = toy_corpus(200, seed=1)
    src, oracle = tmp_path / "train.src", tmp_path / "train.oracle"
    src.write_text("".join(" ".join(s) + "\n" for s in sentences))
    oracle.write_text("".join(" ".join(map(str, r)) + "\n" for r in ranks))
    model = tmp_path / "m.npz"
    assert cli_main(["train-reorderer", "--src", str(src), "--oracle", str(oracle), "--model", str(model),
                     "--hash-bits", "12", "--iterations", "2", "--src-lang", "xx"]) == 0
    trained = load_reorderer(str(model))
    assert trained.config.split_sentences is True
    lines = joined_lines(20, seed=7)
    test = tmp_path / "test.src"
    test.write_text("".join(" ".join(line) + "\n" for line, _ in lines))
    outs = {}
    for name, extra in (("default", []), ("whole", ["--no-split-sentences"])):
        out = tmp_path / f"{name}.order"
        assert cli_main(["reorder", "--model", str(model), "--src", str(test), "--out", str(out), *extra]) == 0
        outs[name] = [[int(x) for x in o.split()] for o in out.read_text().splitlines()]
    assert outs["default"] == trained.reorder_batch([line for line, _ in lines])
    assert outs["whole"] == trained.with_abstention(split_sentences=False).reorder_batch([line for line, _ in lines])
    assert outs["whole"] != outs["default"]
    # a model file written before the setting existed holds no such field: it parses lines whole, as it did
    with np.load(model, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    header = json.loads(str(arrays["header"]))
    del header["config"]["split_sentences"]
    arrays["header"] = np.array(json.dumps(header))
    old = tmp_path / "old.npz"
    np.savez(old, **arrays)
    assert load_reorderer(str(old)).config.split_sentences is False
