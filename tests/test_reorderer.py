"""The trained reorderer: learning a systematic reordering, the model file, the CLIs."""
from __future__ import annotations

import json
import logging
import random
import time

import numpy as np
import pytest

from xlpos_prep.cli import main as cli_main
from xlpos_prep.metrics import evaluate_orders, monotone_order
from xlpos_prep.reorderer import (
    FORMAT_NAME, ModelFileError, Reorderer, ReordererConfig, TrainOptions, train)

NOUNS = [f"n{i}" for i in range(10)]
ADJECTIVES = [f"a{i}" for i in range(5)]
VERBS = [f"v{i}" for i in range(5)]
PREPOSITIONS = [f"p{i}" for i in range(3)]


def toy_pair(rng: random.Random) -> tuple[list[str], list[int]]:
    """An SVO language with adjective-noun NPs and prepositions, and its verb-final, noun-adjective,
    postpositional target order: "a n1 v n2 p n3" -> "n1 a n3 p n2 v". Returns (source words, oracle ranks)."""
    words: list[str] = []

    def noun_phrase() -> list[int]:
        # source: [adjective] noun; target: noun [adjective]
        start = len(words)
        if rng.random() < 0.5:
            words.extend([rng.choice(ADJECTIVES), rng.choice(NOUNS)])
            return [start + 1, start]
        words.append(rng.choice(NOUNS))
        return [start]

    subject = noun_phrase()
    verb = [len(words)]
    words.append(rng.choice(VERBS))
    obj = noun_phrase()
    pp: list[int] = []
    if rng.random() < 0.5:
        prep = [len(words)]
        words.append(rng.choice(PREPOSITIONS))
        pp = noun_phrase() + prep
    target = subject + pp + obj + verb
    ranks = [0] * len(words)
    for rank, i in enumerate(target):
        ranks[i] = rank
    return words, ranks


def toy_corpus(count: int, seed: int) -> tuple[list[list[str]], list[list[int]]]:
    rng = random.Random(seed)
    pairs = [toy_pair(rng) for _ in range(count)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


SMALL = ReordererConfig(hash_bits=16)


@pytest.fixture(scope="module")
def toy_model() -> Reorderer:
    sentences, ranks = toy_corpus(300, seed=1)
    return train(sentences, ranks, SMALL, TrainOptions(iterations=5), progress=False)


def test_learns_a_systematic_reordering(toy_model):
    sentences, ranks = toy_corpus(200, seed=2)  # held out
    scores = evaluate_orders(toy_model.reorder_batch(sentences), ranks)
    monotone = evaluate_orders([monotone_order(len(s)) for s in sentences], ranks)
    assert monotone.corpus_tau < 0.75 and monotone.corpus_frs < 0.6  # the task really needs reordering
    assert scores.corpus_tau > 0.97
    assert scores.corpus_frs > 0.95
    assert toy_model.reorder(["a1", "n2", "v3", "n4", "p0", "n5"]) == [1, 0, 5, 4, 3, 2]


def test_python_api(toy_model):
    words = ["n1", "v2", "a3", "n4"]
    order = toy_model.reorder(words)
    assert order == [0, 3, 2, 1]
    assert toy_model.reorder_batch([words, [], ["n3"]]) == [order, [], [0]]
    tree = toy_model.tree(words)
    assert tree.startswith("(") and order_from_tree(tree, words) == order


def test_a_1000_word_sentence_is_reordered_quickly(toy_model):
    # longer than max_span (64): CKY over segments of <= 64 words, composed straight (see preprocess.btg)
    rng = random.Random(3)
    words = [w for _ in range(200) for w in toy_pair(rng)[0]][:1000]
    toy_model.reorder(words[:70])  # compiled code warm
    t0 = time.perf_counter()
    order = toy_model.reorder(words)
    assert time.perf_counter() - t0 < 5.0
    assert sorted(order) == list(range(1000)) and order != list(range(1000))
    assert order_from_tree(toy_model.tree(words), words) == order


def order_from_tree(tree: str, words: list[str]) -> list[int]:
    """Read a bracketed BTG tree back into an order (the documented format)."""
    tokens = tree.replace("(", " ( ").replace(")", " ) ").split()
    position = 0

    def node(i: int) -> tuple[list[int], int]:
        nonlocal position
        assert tokens[i] == "("
        label = tokens[i + 1]
        i += 2
        if label == "F":
            out = []
            while tokens[i] != ")":
                assert tokens[i] == words[position]
                out.append(position)
                position += 1
                i += 1
            return out, i + 1
        assert label in ("S", "I")
        left, i = node(i)
        right, i = node(i)
        assert tokens[i] == ")"
        return (right + left if label == "I" else left + right), i + 1

    order, end = node(0)
    assert end == len(tokens) and position == len(words)
    return order


def test_model_file_round_trip(tmp_path, toy_model):
    path = str(tmp_path / "m.npz")
    toy_model.save(path)
    loaded = Reorderer.load(path)
    assert loaded.config == toy_model.config
    assert np.array_equal(loaded.weights, toy_model.weights)
    sentences, _ = toy_corpus(50, seed=3)
    assert loaded.reorder_batch(sentences) == toy_model.reorder_batch(sentences)
    with np.load(path, allow_pickle=False) as npz:
        header = json.loads(str(npz["header"]))
    assert header["format"] == FORMAT_NAME and header["version"] == 1
    assert header["config"]["hash_bits"] == 16 and header["training"]["options"]["iterations"] == 5


def test_bad_model_files_give_one_line_errors(tmp_path, toy_model, capsys):
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"this is not a model")
    with pytest.raises(ModelFileError, match=r"garbage\.npz: not an xlpos reorderer model"):
        Reorderer.load(str(garbage))
    other = tmp_path / "other.npz"
    np.savez(other, weights=np.zeros(3))
    with pytest.raises(ModelFileError, match=r"other\.npz: not an xlpos reorderer model"):
        Reorderer.load(str(other))
    single = tmp_path / "single.npy"
    np.save(single, np.zeros(3))
    with pytest.raises(ModelFileError, match=r"single\.npy: not an xlpos reorderer model"):
        Reorderer.load(str(single))
    with pytest.raises(FileNotFoundError):
        Reorderer.load(str(tmp_path / "missing.npz"))
    future = tmp_path / "future.npz"
    np.savez(future, header=np.array(json.dumps({"format": FORMAT_NAME, "version": 99})))
    with pytest.raises(ModelFileError, match=r"future\.npz: unsupported version 99"):
        Reorderer.load(str(future))
    truncated = tmp_path / "truncated.npz"
    toy_model.save(str(truncated))
    truncated.write_bytes(truncated.read_bytes()[:1000])
    with pytest.raises(ModelFileError, match=r"truncated\.npz"):
        Reorderer.load(str(truncated))
    src = tmp_path / "s.txt"
    src.write_text("n1 v1 n2\n")
    assert cli_main(["reorder", "--model", str(garbage), "--src", str(src), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "garbage.npz: not an xlpos reorderer model" in err[0]
    assert not (tmp_path / "o").exists()


def write_corpus(tmp_path, name: str, sentences, ranks) -> tuple[str, str]:
    src, oracle = tmp_path / f"{name}.src", tmp_path / f"{name}.oracle"
    src.write_text("".join(" ".join(s) + "\n" for s in sentences))
    oracle.write_text("".join(" ".join(map(str, r)) + "\n" for r in ranks))
    return str(src), str(oracle)


def test_cli_train_reorder_trees_shards_and_workers(tmp_path):
    src, oracle = write_corpus(tmp_path, "train", *toy_corpus(200, seed=4))
    dev_src, dev_oracle = write_corpus(tmp_path, "dev", *toy_corpus(50, seed=5))
    model = str(tmp_path / "model.npz")
    assert cli_main(["train-reorderer", "--src", src, "--oracle", oracle, "--model", model, "--iterations", "3",
                     "--hash-bits", "16", "--dev-src", dev_src, "--dev-oracle", dev_oracle]) == 0
    trained = Reorderer.load(model)
    history = trained.training["history"]
    assert [h["iteration"] for h in history] == [1, 2, 3] and all(h["dev"] for h in history)
    best = max(history, key=lambda h: h["dev"]["corpus_tau"] + h["dev"]["corpus_frs"])
    assert trained.training["best_iteration"] == best["iteration"]

    test_sents, test_ranks = toy_corpus(90, seed=6)
    test_sents[10] = []  # an empty line stays an empty line
    test_src = tmp_path / "test.src"
    test_src.write_text("".join(" ".join(s) + "\n" for s in test_sents))
    out, trees = tmp_path / "test.order", tmp_path / "test.trees"
    assert cli_main(["reorder", "--model", model, "--src", str(test_src), "--out", str(out),
                     "--trees", str(trees)]) == 0
    orders = [[int(x) for x in line.split()] for line in out.read_text().splitlines()]
    tree_lines = trees.read_text().splitlines()
    assert len(orders) == len(tree_lines) == 90
    assert orders[10] == [] and tree_lines[10] == ""
    for words, order, tree in zip(test_sents, orders, tree_lines):
        assert sorted(order) == list(range(len(words)))
        if words:
            assert order_from_tree(tree, words) == order
    assert orders == trained.reorder_batch(test_sents)

    shards = []
    for i in range(3):
        part = tmp_path / f"test.order.{i}"
        assert cli_main(["reorder", "--model", model, "--src", str(test_src), "--out", str(part),
                         "--shard", f"{i}/3"]) == 0
        shards.append(part.read_text())
    assert "".join(shards) == out.read_text()

    parallel = tmp_path / "test.order.parallel"
    assert cli_main(["reorder", "--model", model, "--src", str(test_src), "--out", str(parallel),
                     "--workers", "2"]) == 0
    assert parallel.read_text() == out.read_text()


def test_training_is_deterministic_and_resumable(tmp_path):
    src, oracle = write_corpus(tmp_path, "train", *toy_corpus(150, seed=7))
    common = ["train-reorderer", "--src", src, "--oracle", oracle, "--hash-bits", "14", "--resumable"]
    full, again, part = (str(tmp_path / name) for name in ("full.npz", "again.npz", "part.npz"))
    assert cli_main(common + ["--model", full, "--iterations", "4"]) == 0
    assert cli_main(common + ["--model", again, "--iterations", "4"]) == 0
    assert cli_main(common + ["--model", part, "--iterations", "2"]) == 0
    assert cli_main(common + ["--model", part, "--iterations", "4", "--resume"]) == 0
    a, b, c = (Reorderer.load(p) for p in (full, again, part))
    assert np.array_equal(a.weights, b.weights)
    assert np.array_equal(a.weights, c.weights) and np.array_equal(a.state[0], c.state[0])
    assert c.training["iterations_done"] == 4 and len(c.training["history"]) == 4
    other_seed = str(tmp_path / "seed2.npz")
    assert cli_main(common + ["--model", other_seed, "--iterations", "4", "--seed", "2"]) == 0
    assert not np.array_equal(a.weights, Reorderer.load(other_seed).weights)
    # a model saved without its learner state cannot be resumed
    plain = str(tmp_path / "plain.npz")
    assert cli_main(["train-reorderer", "--src", src, "--oracle", oracle, "--hash-bits", "14", "--model", plain,
                     "--iterations", "1"]) == 0
    assert Reorderer.load(plain).state is None
    assert cli_main(["train-reorderer", "--src", src, "--oracle", oracle, "--model", plain, "--iterations", "2",
                     "--resume"]) == 1


def test_training_input_errors_and_long_sentences(tmp_path, caplog, capsys):
    sentences, ranks = toy_corpus(40, seed=8)
    sentences.append(["n1"] * 30)
    ranks.append(list(range(30)))
    src, oracle = write_corpus(tmp_path, "train", sentences, ranks)
    model = str(tmp_path / "m.npz")
    with caplog.at_level(logging.INFO):
        assert cli_main(["train-reorderer", "--src", src, "--oracle", oracle, "--model", model,
                         "--iterations", "1", "--hash-bits", "12", "--max-len", "20"]) == 0
    assert "skipping 1 of 41 training sentences longer than --max-len 20" in caplog.text
    assert Reorderer.load(model).training["skipped_too_long"] == 1

    bad = tmp_path / "bad.oracle"
    lines = open(oracle).read().splitlines()
    lines[4] = lines[4] + " 0"
    bad.write_text("\n".join(lines) + "\n")
    assert cli_main(["train-reorderer", "--src", src, "--oracle", str(bad), "--model", model]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.oracle:5:" in err[0]


def test_suffix_view_generalizes_to_unseen_words():
    """With the `suffix1` view, words never seen in training are reordered by their last letter."""
    category = {**{w: "o" for w in NOUNS}, **{w: "y" for w in ADJECTIVES}, **{w: "u" for w in VERBS},
                **{w: "e" for w in PREPOSITIONS}}

    def restem(sentences, stem):
        return [[f"{stem}{w[1:]}{category[w]}" for w in s] for s in sentences]

    train_sents, train_ranks = toy_corpus(300, seed=9)
    test_sents, test_ranks = toy_corpus(100, seed=10)
    train_sents, test_sents = restem(train_sents, "t"), restem(test_sents, "unseen")
    scores = {}
    for views in (("word",), ("word", "suffix1")):
        model = train(train_sents, train_ranks, ReordererConfig(hash_bits=16, views=views),
                      TrainOptions(iterations=5), progress=False)
        scores[views] = evaluate_orders(model.reorder_batch(test_sents), test_ranks).corpus_tau
    assert scores[("word", "suffix1")] > 0.95
    assert scores[("word",)] < scores[("word", "suffix1")] - 0.1
