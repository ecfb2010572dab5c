"""The synthetic corpus: deterministic, really (and recursively) reordered, well-formed files."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from xlpos_prep.cli import main as cli_main
from xlpos_prep.synthetic import (
    TARGET_FUNCTION_WORDS, attach_unaligned, build_lexicon, generate_corpus, generate_split)


def separable_tree(perm: list[int]) -> tuple:
    """Canonical BTG tree of a permutation: ("S"|"I", children) with same-type nodes merged, or ("leaf", i).

    Children of a straight node are the finest split of the sequence into blocks covering increasing value
    ranges; an inverted node, decreasing ranges. A permutation that is not separable gives an ("X", perm) node.
    """
    if len(perm) == 1:
        return ("leaf", perm[0])
    for kind in ("S", "I"):
        cuts, lo, hi = [0], min(perm), max(perm)
        for k in range(1, len(perm)):
            prefix = perm[cuts[-1]:k]
            # values of a straight block continue upwards from the previous block's; inverted: downwards
            start = lo + cuts[-1] if kind == "S" else hi - k + 1
            if (kind == "S" and min(prefix) == start and max(prefix) == lo + k - 1) or \
                    (kind == "I" and max(prefix) == hi - cuts[-1] and min(prefix) == start):
                cuts.append(k)
        if len(cuts) > 1:
            cuts.append(len(perm))
            return (kind, [separable_tree(perm[a:b]) for a, b in zip(cuts, cuts[1:])])
    return ("X", perm)


def has_nested_inversion(tree: tuple, inside_inversion: bool = False) -> bool:
    kind, children = tree
    if kind == "leaf":
        return False
    if kind in ("I", "X") and inside_inversion:
        return True
    return any(has_nested_inversion(c, inside_inversion or kind in ("I", "X")) for c in children)


def test_separable_tree_helper():
    assert separable_tree([0, 1, 2]) == ("S", [("leaf", 0), ("leaf", 1), ("leaf", 2)])
    assert separable_tree([2, 1, 0])[0] == "I"
    assert not has_nested_inversion(separable_tree([3, 4, 2, 0, 1]))  # one inverted level
    assert has_nested_inversion(separable_tree([4, 5, 0, 2, 1, 3]))  # I( S(4,5), S(0, I(2,1), 3) )
    assert separable_tree([1, 3, 0, 2])[0] == "X"


@pytest.fixture(scope="module")
def corpus():
    return generate_corpus({"train": 1500, "valid": 200, "test": 200}, seed=3)


def test_same_seed_same_corpus_other_seed_other_corpus(corpus):
    again = generate_corpus({"train": 1500, "valid": 200, "test": 200}, seed=3)
    assert again == corpus
    other = generate_corpus({"train": 1500, "valid": 200, "test": 200}, seed=4)
    assert [p.src for p in other["test"]] != [p.src for p in corpus["test"]]


def test_test_set_does_not_depend_on_train_size_and_splits_are_disjoint(corpus):
    smaller = generate_corpus({"train": 300, "valid": 200, "test": 200}, seed=3)
    assert smaller["test"] == corpus["test"] and smaller["valid"] == corpus["valid"]
    sources = [" ".join(p.src) for split in corpus.values() for p in split]
    assert len(set(sources)) == len(sources)


def test_lengths_within_bounds(corpus):
    lengths = [len(p.src) for split in corpus.values() for p in split]
    assert min(lengths) >= 4 and max(lengths) <= 25
    assert 8 <= sum(lengths) / len(lengths) <= 18
    short = generate_split(50, seed=1, split="test", min_len=5, max_len=8)
    assert all(5 <= len(p.src) <= 8 for p in short)


def test_gold_order_is_a_permutation_consistent_with_the_alignment(corpus):
    for pair in corpus["train"]:
        n, m = len(pair.src), len(pair.tgt)
        assert sorted(pair.gold_order) == list(range(n))
        assert all(0 <= i < n and 0 <= j < m for i, j in pair.alignment)
        # Walking source words in gold order, their aligned target positions never go backwards.
        targets: dict[int, list[int]] = {}
        for i, j in pair.alignment:
            targets.setdefault(i, []).append(j)
        spans = [(min(targets[i]), max(targets[i])) for i in pair.gold_order if i in targets]
        assert all(a[1] <= b[0] or a == b for a, b in zip(spans, spans[1:])), pair


def test_reordering_is_real_and_nested(corpus):
    pairs = corpus["train"]
    non_monotone = sum(p.gold_order != sorted(p.gold_order) for p in pairs)
    trees = [separable_tree(p.gold_order) for p in pairs]
    nested = sum(has_nested_inversion(t) for t in trees)
    assert non_monotone / len(pairs) > 0.8
    assert nested / len(pairs) > 0.2
    # The orders are BTG-reachable: a BTG reorderer can in principle reproduce every one of them.
    assert all("X" not in repr(t) for t in trees)


def test_alignment_is_not_one_to_one(corpus):
    pairs = corpus["train"]
    unaligned_src = sum(len(p.src) - len({i for i, _ in p.alignment}) for p in pairs)
    unaligned_tgt = sum(len(p.tgt) - len({j for _, j in p.alignment}) for p in pairs)
    one_to_many = sum(any(sum(1 for i2, _ in p.alignment if i2 == i) > 1 for i, _ in p.alignment) for p in pairs)
    many_to_one = sum(any(sum(1 for _, j2 in p.alignment if j2 == j) > 1 for _, j in p.alignment) for p in pairs)
    words = sum(len(p.src) for p in pairs)
    assert unaligned_src / words > 0.1 and unaligned_tgt > 0.1 * words
    assert one_to_many > 0.1 * len(pairs) and many_to_one > 0.01 * len(pairs)


def test_source_and_target_vocabularies_are_disjoint(corpus):
    src_vocab = {w for split in corpus.values() for p in split for w in p.src}
    tgt_vocab = {w for split in corpus.values() for p in split for w in p.tgt}
    assert not src_vocab & tgt_vocab
    assert set(TARGET_FUNCTION_WORDS) <= tgt_vocab
    # The lexicon is fixed across seeds, so corpora from different seeds share their vocabulary.
    assert build_lexicon() == build_lexicon()


def test_attach_unaligned_follows_right_neighbour():
    # words 0 and 3 unaligned: 0 goes before 1, the trailing 3 after 2
    assert attach_unaligned(4, [2, 1]) == [2, 3, 0, 1]
    assert attach_unaligned(5, [4, 2]) == [3, 4, 0, 1, 2]  # the run 0,1 goes before 2 in source order
    assert attach_unaligned(3, []) == [0, 1, 2]


def test_cli_writes_parallel_files(tmp_path):
    out = tmp_path / "synth"
    assert cli_main(["synth", "--out-dir", str(out), "--train", "120", "--valid", "30", "--test", "40",
                     "--seed", "5"]) == 0
    for split, n in (("train", 120), ("valid", 30), ("test", 40)):
        files = {s: (out / f"{split}.{s}").read_text(encoding="utf-8").splitlines()
                 for s in ("src", "tgt", "gold-align", "gold-order")}
        assert all(len(lines) == n for lines in files.values()), split
        for src, order in zip(files["src"], files["gold-order"]):
            assert sorted(map(int, order.split())) == list(range(len(src.split())))
    first = (out / "train.src").read_bytes()
    assert cli_main(["synth", "--out-dir", str(out), "--train", "120", "--valid", "30", "--test", "40",
                     "--seed", "5", "--no-gold"]) == 0
    assert (out / "train.src").read_bytes() == first
    assert not list(out.glob(".*tmp"))


def test_cli_rejects_bad_sizes(tmp_path, capsys):
    assert cli_main(["synth", "--out-dir", str(tmp_path), "--train", "0"]) == 1
    assert "--train must be at least 1" in capsys.readouterr().err
    assert cli_main(["synth", "--out-dir", str(tmp_path), "--min-len", "30", "--max-len", "40"]) == 1
    assert not list(tmp_path.iterdir())


def test_gold_order_matches_the_oracle_of_the_gold_alignment(tmp_path):
    """The gold order follows the oracle's conventions: tau 1 against oracle ranks of the gold alignment."""
    from importlib.util import find_spec
    if find_spec("xlpos_prep.oracle") is None or find_spec("xlpos_prep.metrics") is None:
        pytest.skip("xlpos_prep.oracle / xlpos_prep.metrics not in this tree yet")
    if shutil.which("xlpos-prep") is None:
        pytest.skip("xlpos-prep is not installed (pip install -e .)")
    out = tmp_path / "synth"
    assert cli_main(["synth", "--out-dir", str(out), "--train", "1", "--valid", "1", "--test", "300"]) == 0
    subprocess.run([sys.executable, "-m", "xlpos_prep.cli", "oracle", "--src", str(out / "test.src"),
                    "--align", str(out / "test.gold-align"), "--out", str(out / "test.oracle")], check=True)
    scores_json = out / "scores.json"
    subprocess.run([sys.executable, "-m", "xlpos_prep.cli", "evaluate", "--order", str(out / "test.gold-order"),
                    "--oracle", str(out / "test.oracle"), "--json", str(scores_json)], check=True,
                   capture_output=True)
    scores = json.loads(scores_json.read_text())
    gold = scores[str(out / "test.gold-order")]
    assert gold["corpus_tau"] == 1.0 and gold["sentence_tau"] == 1.0
    assert scores["monotone"]["corpus_tau"] < 0.8  # and the oracle does see the reordering
