"""Issue 15: abstention (inversion margin, longest inverted span), stress sets, word classes."""
from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from xlpos_prep import btg, stress, wordclass
from xlpos_prep.metrics import evaluate_orders, monotone_order
from xlpos_prep.reorderer import ModelFileError, Reorderer, ReordererConfig, TrainOptions, train

HASH_BITS = 8
MASK = np.uint64((1 << HASH_BITS) - 1)


def inverting_weights(bonus: float) -> np.ndarray:
    """Every I edge scores `bonus` (the bias feature's I column), everything else 0: the model reverses."""
    weights = np.zeros((1 << HASH_BITS) * btg.N_COLUMNS)
    row = int(btg._f1(btg.T_BIAS, np.uint64(0)) & MASK)
    weights[row * btg.N_COLUMNS + btg.EDGE_I] = bonus
    return weights


def parse(n: int, weights: np.ndarray, penalty: np.ndarray | None, max_span: int = 20):
    tok = np.arange(n + 2, dtype=np.uint64).reshape(-1, 1)
    orders, _, edges, _ = btg.parse_batch(tok, np.array([0, n + 2]), weights, MASK, 1, max_span, btg.FEAT_SPAN,
                                          penalty)
    return orders.tolist(), edges


@pytest.mark.parametrize("margin, inverted", [(0.0, True), (0.9, True), (1.1, False), (5.0, False)])
def test_abstention_keeps_a_span_straight_when_the_margin_is_below_the_threshold(margin, inverted):
    # two words: I scores 1.0, S 0.0; the inversion survives only a penalty below its margin of 1.0
    order, _ = parse(2, inverting_weights(1.0), btg.inversion_penalties(20, margin, 0))
    assert order == ([1, 0] if inverted else [0, 1])


def test_no_inversion_longer_than_max_invert_span():
    weights = inverting_weights(1.0)
    order, edges = parse(8, weights, None)
    assert order == list(range(7, -1, -1))  # unrestricted: the full reversal
    order, edges = parse(8, weights, btg.inversion_penalties(20, 0.0, 3))
    inverted = [(l, r) for t, l, k, r in edges.tolist() if t == btg.EDGE_I]
    assert inverted and max(r - l for l, r in inverted) <= 3
    assert order != list(range(7, -1, -1))
    order, _ = parse(8, weights, btg.inversion_penalties(20, 0.0, 1))
    assert order == list(range(8))  # no span of two or more words may invert: monotone


def test_zero_penalty_is_the_plain_model():
    rng = np.random.default_rng(3)
    weights = rng.normal(size=(1 << HASH_BITS) * btg.N_COLUMNS)
    for n in (2, 5, 13, 30):
        assert parse(n, weights, None, 12)[0] == parse(n, weights, np.zeros(13), 12)[0]


def test_penalties_shape_is_checked():
    with pytest.raises(ValueError, match="inv_penalty"):
        parse(3, inverting_weights(1.0), np.zeros(5))


def test_concatenation_oracle_is_the_concatenation_in_order():
    sentences = [["a", "b"], ["c"], ["d", "e", "f"], ["g", "h"], ["i"]]
    ranks = [[1, 0], [0], [2, 0, 1], [0, 0], [0]]
    joined, joined_ranks = stress.concatenate(sentences, ranks, groups=(2, 3))
    assert joined == [["a", "b", "c"], ["d", "e", "f", "g", "h", "i"]]
    assert joined_ranks == [[1, 0, 2], [2, 0, 1, 3, 3, 4]]
    # the parts' own oracle orders, concatenated, are a perfect order of the joined sentence
    perfect = [[1, 0, 2], [1, 2, 0, 3, 4, 5]]
    scores = evaluate_orders(perfect, joined_ranks)
    assert scores.corpus_tau == 1.0 and scores.corpus_frs == 1.0
    # and every pair across parts is in source order: monotone loses only pairs inside parts
    mono = evaluate_orders([monotone_order(3), monotone_order(6)], joined_ranks)
    assert mono.corpus_tau == 1 - 3 / (3 + 14)  # (a,b), (d,e), (d,f) of the 17 pairs with different ranks


def test_concatenation_cycles_group_sizes_and_keeps_every_sentence():
    sentences = [[f"w{i}"] * (1 + i % 3) for i in range(20)]
    ranks = [list(range(len(s))) for s in sentences]
    joined, joined_ranks = stress.concatenate(sentences, ranks)
    assert sum(len(s) for s in joined) == sum(len(s) for s in sentences)
    groups = stress.CONCAT_GROUPS
    assert len(joined) == next(g for g in range(1, 20) if sum(groups[i % len(groups)] for i in range(g)) >= 20)
    assert all(sorted(set(r)) == list(range(max(r) + 1)) for r in joined_ranks)  # dense


def test_length_split():
    sentences = [["x"] * n for n in (3, 9, 5, 5, 12)]
    assert stress.median_length(sentences) == 5
    assert stress.length_split(sentences, 5) == ([0, 2, 3], [1, 4])


def corpus(count: int, seed: int) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    dets, nouns, verbs = ["the", "a", "my"], [f"n{i}" for i in range(12)], [f"v{i}" for i in range(8)]
    return [[str(rng.choice(dets)), str(rng.choice(nouns)), str(rng.choice(verbs)), str(rng.choice(dets)),
             str(rng.choice(nouns))] for _ in range(count)]


def test_word_classes_are_deterministic_for_a_seed_and_group_words_by_context():
    sentences = corpus(400, 0)
    a = wordclass.learn_classes(sentences, 3, seed=7)
    assert a == wordclass.learn_classes(sentences, 3, seed=7)
    assert set(a) == {w for s in sentences for w in s}
    # determiners, nouns and verbs occur in disjoint contexts: three classes, one per part of speech
    by_class = {}
    for w, c in a.items():
        by_class.setdefault(c, set()).add(w[0] if w[0] in "nv" else "d")
    assert sorted(map(sorted, by_class.values())) == [["d"], ["n"], ["v"]]


def test_class_view_model_round_trips_with_its_classes(tmp_path):
    sentences = corpus(200, 1)
    ranks = [[0, 1, 4, 2, 3] for _ in sentences]  # verb-final
    model = train(sentences, ranks, ReordererConfig(hash_bits=12, views=("word", "class4")),
                  TrainOptions(iterations=2), progress=False)
    assert model.classes is not None and set(model.classes.values()) <= set(range(4))
    path = str(tmp_path / "m.npz")
    model.save(path)
    loaded = Reorderer.load(path)
    assert loaded.classes == model.classes
    assert loaded.reorder_batch(sentences[:20]) == model.reorder_batch(sentences[:20])
    assert loaded.reorder(["the", "n1", "v2", "a", "n3"]) == [0, 1, 3, 4, 2]
    # rebuilt from its parts, as xlpos's inference does to drop learner state: the classes come along
    rebuilt = Reorderer(loaded.config, loaded.weights, loaded.training)
    assert rebuilt.classes == model.classes
    assert rebuilt.reorder_batch(sentences[:20]) == model.reorder_batch(sentences[:20])


def test_class_view_model_without_its_classes_is_refused(tmp_path):
    model = train(corpus(30, 1), [[0, 1, 4, 2, 3]] * 30, ReordererConfig(hash_bits=10, views=("word", "class3")),
                  TrainOptions(iterations=1), progress=False)
    path = tmp_path / "m.npz"
    model.save(str(path))
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    header = json.loads(str(arrays["header"]))
    del header["training"]["word_classes"]
    arrays["header"] = np.array(json.dumps(header))
    np.savez(path, **arrays)
    with pytest.raises(ModelFileError, match="corrupt.*word_classes"):
        Reorderer.load(str(path))


def test_training_sets_the_longest_inverted_span_from_the_data():
    sentences = corpus(50, 2)
    ranks = [[0, 1, 4, 2, 3] for _ in sentences]
    model = train(sentences, ranks, ReordererConfig(hash_bits=10), TrainOptions(iterations=1), progress=False)
    assert model.config.max_invert_span == 2 * 5
    model = train(sentences, ranks, ReordererConfig(hash_bits=10), TrainOptions(iterations=1, max_invert_span=0),
                  progress=False)
    assert model.config.max_invert_span == 0


def without_fields(path, out, config=(), options=()) -> None:
    """Copy a model file without some header fields: a model as written before those fields existed."""
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    header = json.loads(str(arrays["header"]))
    for key in config:
        del header["config"][key]
    for key in options:
        del header["training"]["options"][key]
    arrays["header"] = np.array(json.dumps(header))
    np.savez(out, **arrays)


def test_models_written_before_abstention_load_without_it(tmp_path):
    model = Reorderer(ReordererConfig(hash_bits=8, max_invert_span=7, invert_margin=0.5),
                      inverting_weights(1.0))
    path = tmp_path / "new.npz"
    model.save(str(path))
    old = tmp_path / "old.npz"
    without_fields(path, old, config=("max_invert_span", "invert_margin"))
    assert zipfile.is_zipfile(old)
    loaded = Reorderer.load(str(old))
    assert (loaded.config.max_invert_span, loaded.config.invert_margin) == (0, 0.0)
    words = [f"w{i}" for i in range(9)]
    assert loaded.reorder(words) == list(range(8, -1, -1))  # the plain model: full reversal
    assert Reorderer.load(str(path)).reorder(words) != list(range(8, -1, -1))


# --- sentence-level fallback to monotone (inputs longer than training) --------------------------------------------


def parse_fallback(n: int, weights: np.ndarray, fallback_length: int, fallback_margin: float) -> list[int]:
    tok = np.arange(n + 2, dtype=np.uint64).reshape(-1, 1)
    orders, _, _, _ = btg.parse_batch(tok, np.array([0, n + 2]), weights, MASK, 1, 20, btg.FEAT_SPAN, None,
                                      fallback_length, fallback_margin)
    return orders.tolist()


@pytest.mark.parametrize("n, margin, reversed_", [
    (4, 100.0, True),  # not longer than fallback_length: never tested, whatever the margin
    (5, 1.5, True),  # e = 1: the reversal (4 I edges, score 4) beats straight (0) by more than 1.5 * 1
    (6, 1.0, True),  # e = 2: 5 > 1.0 * 4
    (6, 1.5, False),  # e = 2: 5 < 1.5 * 4: monotone
    (9, 1.5, False),  # e = 5: 8 < 37.5
    (9, 0.0, True),  # margin 0: the plain model
])
def test_fallback_keeps_long_unconfident_sentences_monotone(n, margin, reversed_):
    # every I edge scores 1, so the best derivation is the full reversal (n - 1 I edges over single words) and
    # beats the best straight derivation (score 0) by n - 1
    order = parse_fallback(n, inverting_weights(1.0), 4, margin)
    assert order == (list(range(n - 1, -1, -1)) if reversed_ else list(range(n)))


def test_fallback_is_per_sentence_in_a_batch_and_gives_the_straight_tree():
    weights = inverting_weights(1.0)
    lengths = [6, 3, 0, 9, 5, 1]
    toks, offsets = [], [0]
    for n in lengths:
        toks.append(np.arange(n + 2, dtype=np.uint64).reshape(-1, 1))
        offsets.append(offsets[-1] + n + 2)
    tok, offsets = np.concatenate(toks), np.array(offsets)
    orders, oo, edges, eo = btg.parse_batch(tok, offsets, weights, MASK, 1, 20, btg.FEAT_SPAN, None, 4, 1.5)
    got = [orders[oo[s]:oo[s + 1]].tolist() for s in range(len(lengths))]
    assert got == [list(range(6)), [2, 1, 0], [], list(range(9)), [4, 3, 2, 1, 0], [0]]
    for s in (0, 3):  # the fallen-back sentences carry their best straight derivation: no I edge
        e = edges[eo[s]:eo[s + 1]]
        assert btg.EDGE_I not in e[:, 0] and e.shape[0] == 2 * lengths[s] - 1
    assert btg.EDGE_I in edges[eo[4]:eo[5]][:, 0]


def test_fallback_thresholds():
    assert btg.fallback_thresholds(np.array([3, 4, 5, 7]), 4, 1.5).tolist() == [0, 0, 1.5, 13.5]
    assert btg.fallback_thresholds(np.array([30]), 0, 1.5).tolist() == [0]  # no fallback length: no test
    assert btg.fallback_thresholds(np.array([30]), 4, 0.0).tolist() == [0]


def test_trained_model_falls_back_only_on_sentences_longer_than_its_training():
    sentences = corpus(200, 3)  # 5 words each
    ranks = [[0, 1, 4, 2, 3] for _ in sentences]  # verb-final
    model = train(sentences, ranks, ReordererConfig(hash_bits=12, fallback_margin=1.5), TrainOptions(iterations=2),
                  progress=False)
    assert (model.config.fallback_length, model.config.fallback_margin) == (5, 1.5)
    plain = model.with_abstention(fallback_margin=0.0)
    in_domain = corpus(30, 4)
    assert model.reorder_batch(in_domain) == plain.reorder_batch(in_domain)
    assert model.reorder(["the", "n1", "v2", "a", "n3"]) == [0, 1, 3, 4, 2]
    # three sentences joined: 10 words over the training length, so the model keeps its order only if it beats
    # monotone by 150: these weights (steps of at most 0.1) cannot
    joined = [w for s in corpus(3, 5) for w in s]
    assert plain.reorder(joined) != list(range(15))  # the plain model reorders it
    assert model.reorder(joined) == list(range(15))
    assert model.tree(joined).count("(I ") == 0
    # and the CLI override: a fallback length of 20 leaves it to the model
    assert model.with_abstention(fallback_length=20).reorder(joined) == plain.reorder(joined)


def test_train_reorderer_defaults_store_the_fallback_and_reorder_overrides_it(tmp_path):
    from xlpos_prep.cli import main as cli_main
    from xlpos_prep.reorderer import CLI_FALLBACK_MARGIN
    sentences = corpus(120, 6)
    src, oracle = tmp_path / "train.src", tmp_path / "train.oracle"
    src.write_text("".join(" ".join(s) + "\n" for s in sentences))
    oracle.write_text("0 1 4 2 3\n" * len(sentences))
    model = tmp_path / "m.npz"
    assert cli_main(["train-reorderer", "--src", str(src), "--oracle", str(oracle), "--model", str(model),
                     "--hash-bits", "12", "--iterations", "2"]) == 0
    config = Reorderer.load(str(model)).config
    assert (config.fallback_length, config.fallback_margin) == (5, CLI_FALLBACK_MARGIN) and CLI_FALLBACK_MARGIN > 0
    test = tmp_path / "test.src"
    test.write_text(" ".join(w for s in corpus(3, 5) for w in s) + "\nthe n1 v2 a n3\n")
    outs = {}
    for name, extra in (("default", []), ("off", ["--fallback-margin", "0"]), ("far", ["--fallback-length", "20"])):
        out = tmp_path / f"{name}.order"
        assert cli_main(["reorder", "--model", str(model), "--src", str(test), "--out", str(out), *extra]) == 0
        outs[name] = out.read_text().splitlines()
    assert outs["default"] == [" ".join(map(str, range(15))), "0 1 3 4 2"]
    assert outs["off"] == outs["far"] and outs["off"][0] != outs["default"][0] and outs["off"][1] == "0 1 3 4 2"


def test_models_written_before_the_fallback_load_without_it_and_reorder_as_before(tmp_path):
    sentences = corpus(200, 3)
    model = train(sentences, [[0, 1, 4, 2, 3] for _ in sentences],
                  ReordererConfig(hash_bits=12, invert_margin=0.5, fallback_margin=1.5), TrainOptions(iterations=2),
                  progress=False)
    path = tmp_path / "new.npz"
    model.save(str(path))
    old = tmp_path / "old.npz"
    without_fields(path, old, config=("fallback_length", "fallback_margin"), options=("fallback_length",))
    loaded = Reorderer.load(str(old))
    assert (loaded.config.fallback_length, loaded.config.fallback_margin) == (0, 0.0)
    assert loaded.config.invert_margin == 0.5
    inputs = corpus(20, 4) + [[w for s in corpus(3, 5) for w in s]]
    assert loaded.reorder_batch(inputs) == model.with_abstention(fallback_margin=0.0).reorder_batch(inputs)
    assert loaded.reorder_batch(inputs) != model.reorder_batch(inputs)  # the fallback did change something
