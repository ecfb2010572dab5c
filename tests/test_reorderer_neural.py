"""The neural BTG reorderer: the pair-score BTG search, the numpy forward pass against torch's, training on a toy
language, the model file and its one loader, the CLIs with --kind neural, and what both kinds of model record about
their source (language, words; the warning on the other side of a corpus; non-finite weights refused)."""
from __future__ import annotations

import itertools
import json
import logging
import os
import random

import numpy as np
import pytest

from test_reorderer import order_from_tree, toy_corpus, toy_pair, write_corpus
from test_sentence_bounds import check_sentence_by_sentence, joined_lines
from xlpos_prep import btg, pairbtg
from xlpos_prep.cli import main as cli_main
from xlpos_prep.metrics import evaluate_orders, monotone_order
from xlpos_prep.neural_reorderer import NeuralConfig, NeuralReorderer, NeuralTrainOptions
from xlpos_prep.reorderer import (CLI_MARGINS, CLI_NEURAL_CHUNKS, ModelFileError, Reorderer, ReordererConfig,
                                  TrainOptions, load_reorderer, read_model_file, train)
from xlpos_prep.source_vocab import SourceVocabulary, language_of_path

torch = pytest.importorskip("torch")
from xlpos_prep.neural_train import PairModel, train_neural  # noqa: E402  (needs torch)

SMALL = NeuralConfig(word_dim=16, hash_buckets=256, hidden=16, layers=1, pair_dim=16)
# train-reorderer arguments of a model trained in a second, per kind (what it learns does not matter)
TINY_TRAIN_ARGS = {"neural": ["--kind", "neural", "--epochs", "1", "--word-dim", "8", "--hash-buckets", "64",
                              "--hidden", "8", "--layers", "1", "--pair-dim", "8", "--threads", "1", "--device", "cpu"],
                   "linear": ["--iterations", "1", "--hash-bits", "12"]}


# --------------------------------------------------------------------------------------------- the pair search
def btg_orders(l: int, r: int) -> set[tuple[int, ...]]:
    """Every order a BTG derivation of [l, r) can produce."""
    if r - l == 1:
        return {(l,)}
    out = set()
    for k in range(l + 1, r):
        for a in btg_orders(l, k):
            for b in btg_orders(k, r):
                out.add(a + b)
                out.add(b + a)
    return out


def inverted_gain(order: tuple[int, ...], gain: np.ndarray) -> float:
    """Sum of gain[i, j] over pairs i < j that `order` puts j before i."""
    pos = {w: p for p, w in enumerate(order)}
    n = len(order)
    return sum(gain[i, j] for i in range(n) for j in range(i + 1, n) if pos[j] < pos[i])


def banded(gain: np.ndarray, width: int) -> np.ndarray:
    """(1, n, width) as pairbtg takes it: [0, j, delta] = gain[j - delta, j]."""
    n = gain.shape[0]
    g = np.zeros((1, n, width))
    for j in range(n):
        for d in range(1, min(width, j + 1)):
            g[0, j, d] = gain[j - d, j]
    return g


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
@pytest.mark.parametrize("trial", range(4))
def test_pair_search_finds_the_best_btg_order(n: int, trial: int):
    rng = np.random.default_rng(100 * n + trial)
    gain = rng.normal(size=(n, n))
    result = pairbtg.parse_padded(banded(gain, n), np.array([n]), max_span=64, max_term=4,
                                  inv_penalty=np.zeros(65))[0]
    best = max(inverted_gain(o, gain) for o in btg_orders(0, n))
    assert sorted(result.order.tolist()) == list(range(n))
    assert inverted_gain(tuple(result.order.tolist()), gain) == pytest.approx(max(best, 0.0))
    words = [f"w{i}" for i in range(n)]
    assert order_from_tree(btg.tree_string(result.edges, words), words) == result.order.tolist()


def kept_chunks(order: tuple[int, ...], chunk: np.ndarray) -> float:
    """Sum of the positive chunk[k] over neighbours (k - 1, k) that `order` keeps next to each other, in order."""
    return sum(max(chunk[b], 0.0) for a, b in zip(order, order[1:]) if b == a + 1)


@pytest.mark.parametrize("n,max_term,max_span", [(2, 4, 64), (4, 2, 64), (6, 4, 64), (7, 2, 64), (7, 3, 4)])
@pytest.mark.parametrize("trial", range(4))
def test_chunk_search_finds_the_best_btg_order_with_its_kept_chunks(n: int, max_term: int, max_span: int,
                                                                    trial: int):
    rng = np.random.default_rng(1000 * n + 10 * max_term + trial)
    gain = rng.normal(size=(n, n))
    chunk = rng.normal(size=n) * 1.5
    chunk[0] = 0.0
    width = min(n, max_span)
    result = pairbtg.parse_padded(banded(gain, width), np.array([n]), max_span, max_term,
                                  np.zeros(max_span + 1), chunk=chunk[None, :])[0]
    order = tuple(result.order.tolist())

    def score(o: tuple[int, ...]) -> float:
        return inverted_gain(o, gain) + kept_chunks(o, chunk)

    if n <= max_span:
        assert score(order) == pytest.approx(max(score(o) for o in btg_orders(0, n)))
    else:  # a chain of segments: at least as good as the best order within its segments, and a BTG order
        assert order in btg_orders(0, n)
    words = [f"w{i}" for i in range(n)]
    assert order_from_tree(btg.tree_string(result.edges, words), words) == list(order)
    assert all(r - l <= max_term for t, l, _, r in result.edges.tolist() if t == btg.EDGE_F)
    # chunk scores of zero change nothing
    plain = pairbtg.parse_padded(banded(gain, width), np.array([n]), max_span, max_term, np.zeros(max_span + 1))[0]
    zero = pairbtg.parse_padded(banded(gain, width), np.array([n]), max_span, max_term, np.zeros(max_span + 1),
                                chunk=np.zeros((1, n)))[0]
    assert zero.order.tolist() == plain.order.tolist()


def test_chunk_scores_move_a_chunk_whole_and_the_fallback_counts_them():
    # the pairs want word 3 before 0 and 1 (+1 each) and after 2 (-0.4), and 0 before 1 (-0.2): alone they move
    # 2 3 ahead of 0 1 (score 2.0), breaking the chunk 1 2; with it, 3 moves before the chunk 0 1 2 (1.6 + 1.0)
    n = 4
    gain = np.zeros((n, n))
    gain[0, 3] = gain[1, 3] = 1.0
    gain[2, 3] = -0.4
    gain[0, 1] = -0.2
    chunk = np.array([[0.0, 0.0, 1.0, 0.0]])  # words 1 and 2 are one chunk
    without = pairbtg.parse_padded(banded(gain, n), np.array([n]), 64, 4, np.zeros(65))[0]
    assert without.order.tolist() == [2, 3, 0, 1]
    with_chunks = pairbtg.parse_padded(banded(gain, n), np.array([n]), 64, 4, np.zeros(65), chunk=chunk)[0]
    assert with_chunks.order.tolist() == [3, 0, 1, 2]
    # the fallback compares with the monotone order's score, which keeps every chunk: 1.0 here
    kept = pairbtg.parse_padded(banded(gain, n), np.array([n]), 64, 4, np.zeros(65), 2, 0.39, chunk=chunk)[0]
    dropped = pairbtg.parse_padded(banded(gain, n), np.array([n]), 64, 4, np.zeros(65), 2, 0.41, chunk=chunk)[0]
    assert kept.order.tolist() == [3, 0, 1, 2] and dropped.order.tolist() == [0, 1, 2, 3]


def test_pair_search_batches_sentences_of_different_lengths_like_single_ones():
    rng = np.random.default_rng(7)
    lengths = [6, 0, 1, 4, 9]
    gains = [rng.normal(size=(n, n)) for n in lengths]
    N = max(lengths)
    padded = np.concatenate([np.pad(banded(g, N), ((0, 0), (0, N - g.shape[0]), (0, 0))) if g.shape[0] else
                             np.zeros((1, N, N)) for g in gains])
    padded[1:, :, :] += 0.0
    together = pairbtg.parse_padded(padded, np.array(lengths), 64, 4, np.zeros(65))
    for g, n, r in zip(gains, lengths, together):
        if n == 0:
            assert r.order.tolist() == [] and r.edges.shape == (0, 4)
            continue
        alone = pairbtg.parse_padded(banded(g, n), np.array([n]), 64, 4, np.zeros(65))[0]
        assert r.order.tolist() == alone.order.tolist()


def test_pair_search_segments_long_sentences_and_bounds_inversions():
    n, max_span = 150, 10
    gain = np.zeros((n, n))
    for i in range(0, n - 1, 2):
        gain[i, i + 1] = 1.0  # every adjacent pair (2m, 2m + 1) wants swapping
    result = pairbtg.parse_padded(banded(gain, max_span), np.array([n]), max_span, 4, np.zeros(max_span + 1))[0]
    expected = [i + 1 - 2 * (i % 2) for i in range(n)]
    assert result.order.tolist() == expected
    words = [f"w{i}" for i in range(n)]
    assert order_from_tree(btg.tree_string(result.edges, words), words) == expected
    # a penalty above each gain keeps every pair straight; one below lets them swap
    for margin, swapped in ((1.5, False), (0.5, True)):
        penalty = btg.inversion_penalties(max_span, margin, 0)
        order = pairbtg.parse_padded(banded(gain, max_span), np.array([n]), max_span, 4, penalty)[0].order.tolist()
        assert order == (expected if swapped else list(range(n)))


def test_pair_search_falls_back_to_monotone_below_the_threshold():
    n = 12
    gain = np.zeros((n, n))
    gain[3, 4] = 2.0  # one inversion worth 2
    g = banded(gain, n)
    for fallback_length, margin, kept in ((0, 5.0, True), (20, 5.0, True), (10, 0.4, True), (10, 0.6, False)):
        # 12 words, 2 over the fallback length: the threshold is margin * 4
        r = pairbtg.parse_padded(g, np.array([n]), 64, 4, np.zeros(65), fallback_length, margin)[0]
        assert (r.order.tolist() != list(range(n))) == kept
        words = [f"w{i}" for i in range(n)]
        assert order_from_tree(btg.tree_string(r.edges, words), words) == r.order.tolist()


# --------------------------------------------------------------------------------------------- the network
@pytest.mark.parametrize("chunks", [False, True])
def test_numpy_forward_pass_matches_torch(chunks: bool):
    torch.manual_seed(3)
    config = NeuralConfig(word_dim=12, hash_buckets=64, hidden=10, layers=2, pair_dim=9, max_span=6, chunks=chunks,
                          chunk_weight=0.5)
    net = PairModel(config, vocab_size=20, dropout=0.0).eval()
    model = NeuralReorderer(config, net.export(), [f"v{i}" for i in range(20)])
    sentences = [["v1", "v2", "zz", "v3"], ["v5"], [f"v{i % 20}" for i in range(9)], ["a", "b"]]
    G, lengths, K = model.gains(sentences)
    words, hashed, lens = model.features.encode(sentences)
    with torch.no_grad():
        logits, chunk_logits = net(torch.from_numpy(words), torch.from_numpy(hashed), torch.from_numpy(lens))
    for b, n in enumerate(lengths):
        for j in range(n):
            for d in range(1, min(j + 1, G.shape[2])):
                assert G[b, j, d] == pytest.approx(float(logits[b, j - d, j]), abs=1e-4)
    assert (K is None) == (chunk_logits is None) == (not chunks)
    if chunks:  # the search gets them weighted
        for b, n in enumerate(lengths):
            assert K[b, 1:n] == pytest.approx(0.5 * chunk_logits[b, 1:n].numpy(), abs=1e-4)


@pytest.fixture(scope="module")
def toy_neural() -> NeuralReorderer:
    sentences, ranks = toy_corpus(400, seed=1)
    options = NeuralTrainOptions(epochs=12, lr=1e-2, batch_pairs=2000, threads=1, device="cpu")
    return train_neural(sentences, ranks, SMALL, options, progress=False)


def test_learns_a_systematic_reordering(toy_neural):
    sentences, ranks = toy_corpus(200, seed=2)  # held out
    scores = evaluate_orders(toy_neural.reorder_batch(sentences), ranks)
    assert evaluate_orders([monotone_order(len(s)) for s in sentences], ranks).corpus_tau < 0.75
    assert scores.corpus_tau > 0.97 and scores.corpus_frs > 0.95
    assert toy_neural.reorder(["a1", "n2", "v3", "n4", "p0", "n5"]) == [1, 0, 5, 4, 3, 2]
    words = ["n1", "v2", "a3", "n4"]
    assert order_from_tree(toy_neural.tree(words), words) == toy_neural.reorder(words)
    assert toy_neural.reorder_batch([words, [], ["n3"]]) == [toy_neural.reorder(words), [], [0]]


def test_a_line_of_several_sentences_is_reordered_sentence_by_sentence(toy_neural):
    check_sentence_by_sentence(toy_neural, joined_lines(40, seed=5))


def test_a_long_line_is_reordered_in_pieces_with_a_consistent_tree(toy_neural):
    rng = random.Random(3)
    words = [w for _ in range(200) for w in toy_pair(rng)[0]][:700]
    model = toy_neural.with_abstention(fallback_margin=0.0)  # no fallback: the pieces are far longer than training
    order = model.reorder(words)
    assert sorted(order) == list(range(700)) and order != list(range(700))
    assert order_from_tree(model.tree(words), words) == order
    # cut at 233 and 466 (three pieces of at most 256 words), each reordered on its own
    assert order[:233] == model.reorder(words[:233])
    assert order[466:] == [i + 466 for i in model.reorder(words[466:])]
    # the sentence-level fallback judges each piece: a margin no piece beats keeps the line monotone
    assert toy_neural.with_abstention(fallback_margin=1e6).reorder(words) == list(range(700))


def test_training_is_deterministic_and_records_its_longest_sentence(toy_neural):
    sentences, ranks = toy_corpus(400, seed=1)
    options = NeuralTrainOptions(epochs=1, batch_pairs=2000, threads=1, device="cpu")
    a, b = (train_neural(sentences, ranks, SMALL, options, progress=False) for _ in range(2))
    assert all(np.array_equal(a.weights[k], b.weights[k]) for k in a.weights)
    longest = max(len(s) for s in sentences)
    assert a.config.fallback_length == longest and a.config.max_invert_span == 2 * longest


def test_model_file_round_trip_and_the_one_loader(tmp_path, toy_neural):
    path = str(tmp_path / "m.npz")
    toy_neural.save(path)
    loaded = load_reorderer(path)
    assert isinstance(loaded, NeuralReorderer) and loaded.config == toy_neural.config
    sentences, _ = toy_corpus(50, seed=5)
    assert loaded.reorder_batch(sentences) == toy_neural.reorder_batch(sentences)
    with pytest.raises(ModelFileError, match=r"m\.npz: not a linear xlpos reorderer"):
        Reorderer.load(path)
    header, arrays = read_model_file(path)
    arrays["header"] = np.array(json.dumps({**header, "version": 7}))
    np.savez(tmp_path / "future.npz", **arrays)
    with pytest.raises(ModelFileError, match=r"future\.npz: unsupported version 7"):
        load_reorderer(str(tmp_path / "future.npz"))


def test_a_model_with_chunks_learns_saves_and_loads_and_older_files_read_as_without(tmp_path, toy_neural):
    from dataclasses import replace
    sentences, ranks = toy_corpus(400, seed=1)
    options = NeuralTrainOptions(epochs=12, lr=1e-2, batch_pairs=2000, threads=1, device="cpu")
    model = train_neural(sentences, ranks, replace(SMALL, chunks=True), options, progress=False)
    assert model.config.chunks and "chunk.wl" in model.weights
    held_out, held_ranks = toy_corpus(200, seed=2)
    scores = evaluate_orders(model.reorder_batch(held_out), held_ranks)
    assert scores.corpus_tau > 0.97 and scores.corpus_frs > 0.95
    path = str(tmp_path / "chunks.npz")
    model.save(path)
    loaded = load_reorderer(path)
    assert loaded.config == model.config and loaded.reorder_batch(held_out) == model.reorder_batch(held_out)
    # the chunk weight is a search setting: 0 searches on the pairs alone
    assert loaded.with_abstention(chunk_weight=0.0).config.chunk_weight == 0.0
    # a model file written before chunks existed has neither field in its header
    toy_neural.save(str(tmp_path / "plain.npz"))
    header, arrays = read_model_file(str(tmp_path / "plain.npz"))
    config = {k: v for k, v in header["config"].items() if k not in ("chunks", "chunk_weight")}
    arrays["header"] = np.array(json.dumps({**header, "config": config}))
    np.savez(tmp_path / "older.npz", **arrays)
    older = load_reorderer(str(tmp_path / "older.npz"))
    assert not older.config.chunks and older.reorder_batch(held_out) == toy_neural.reorder_batch(held_out)


class Interrupted(Exception):
    pass


def test_snapshot_is_refused_for_reordering_and_training_resumes_to_the_same_model(tmp_path):
    sentences, ranks = toy_corpus(200, seed=1)
    src, oracle = write_corpus(tmp_path, "train", sentences, ranks)
    base = ["train-reorderer", "--kind", "neural", "--src", src, "--oracle", oracle, "--word-dim", "16",
            "--hash-buckets", "256", "--hidden", "16", "--layers", "1", "--pair-dim", "16", "--threads", "1",
            "--device", "cpu", "--batch-pairs", "2000", "--epochs", "3"]
    full = str(tmp_path / "full.npz")
    assert cli_main(base + ["--model", full]) == 0
    # the same run interrupted after epoch 2, as the CLI runs it: its snapshot is what --resume continues
    part = str(tmp_path / "part.npz")

    def save_then_stop(snapshot: NeuralReorderer) -> None:
        snapshot.save(part + ".snapshot")
        if snapshot.training["epochs_done"] == 2:
            raise Interrupted

    config = NeuralConfig(**{**SMALL.__dict__, "fallback_margin": CLI_MARGINS["neural"][1],
                             "chunks": CLI_NEURAL_CHUNKS})  # what the CLI trains
    with pytest.raises(Interrupted):
        train_neural(sentences, ranks, config, NeuralTrainOptions(epochs=3, batch_pairs=2000, threads=1,
                                                                  device="cpu"), on_epoch=save_then_stop,
                     progress=False)
    with pytest.raises(ModelFileError, match=r"part\.npz\.snapshot: an incomplete reorderer .* after 2 of 3 epochs"):
        load_reorderer(part + ".snapshot")
    assert cli_main(base + ["--model", part, "--resume"]) == 0
    assert not os.path.exists(part + ".snapshot")
    a, b = load_reorderer(full), load_reorderer(part)
    assert a.state is None and b.state is None
    assert all(np.allclose(a.weights[k], b.weights[k], atol=1e-6) for k in a.weights)


def test_cli_train_reorder_trees_shards_and_kind_options(tmp_path, capsys):
    sentences, ranks = toy_corpus(300, seed=1)
    src, oracle = write_corpus(tmp_path, "train", sentences, ranks)
    model = str(tmp_path / "m.npz")
    assert cli_main(["train-reorderer", "--kind", "neural", "--src", src, "--oracle", oracle, "--model", model,
                     "--epochs", "10", "--lr", "0.01", "--word-dim", "16", "--hash-buckets", "256", "--hidden",
                     "16", "--layers", "1", "--pair-dim", "16", "--threads", "1", "--device", "cpu",
                     "--batch-pairs", "2000", "--src-lang", "xx"]) == 0
    trained = load_reorderer(model)
    assert trained.config.split_sentences is True
    assert trained.source.lang == "xx" and trained.config.fallback_margin == CLI_MARGINS["neural"][1]
    assert trained.config.chunks
    test_sents, test_ranks = toy_corpus(100, seed=9)
    test_src, _ = write_corpus(tmp_path, "test", test_sents, test_ranks)
    out, trees = str(tmp_path / "o"), str(tmp_path / "t")
    assert cli_main(["reorder", "--model", model, "--src", test_src, "--out", out, "--trees", trees]) == 0
    orders = [[int(x) for x in line.split()] for line in open(out)]
    assert orders == trained.reorder_batch(test_sents)
    assert evaluate_orders(orders, test_ranks).corpus_tau > 0.95
    for line, words, order in zip(open(trees), test_sents, orders):
        assert order_from_tree(line.strip(), words) == order
    shards = []
    for i in range(3):
        part = str(tmp_path / f"o{i}")
        assert cli_main(["reorder", "--model", model, "--src", test_src, "--out", part, "--shard", f"{i}/3",
                         "--workers", "2"]) == 0
        shards += open(part).read().splitlines()
    assert shards == open(out).read().splitlines()
    capsys.readouterr()
    for bad in (["--kind", "neural", "--hash-bits", "12"], ["--epochs", "3"], ["--no-chunks"]):
        assert cli_main(["train-reorderer", "--src", src, "--oracle", oracle, "--model", str(tmp_path / "x"),
                         *bad]) != 0
        assert "is an option of --kind" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "x")
    pairs_only = str(tmp_path / "pairs.npz")
    assert cli_main(["train-reorderer", "--kind", "neural", "--no-chunks", "--src", src, "--oracle", oracle,
                     "--model", pairs_only, *TINY_TRAIN_ARGS["neural"][2:]]) == 0
    assert not load_reorderer(pairs_only).config.chunks


# --------------------------------------------------------------------------------------------- both kinds
def test_language_of_path():
    assert language_of_path("data/train.en") == "en"
    assert language_of_path("dev.pt-BR") == "pt-BR"
    for path in ("train-subset.src", "corpus.txt", "noext", "a.tok", "x.EN1"):
        assert language_of_path(path) is None


def test_source_vocabulary_counts_unknown_words_and_survives_the_file(tmp_path):
    vocab = SourceVocabulary.build([["the", "cat"], ["a", "dog", "the"]], "en")
    assert vocab.unknown([["the", "dog", "runs"], ["猫"]]) == (2, 4)
    assert vocab.warning([["the", "cat"]] * 10, "x.en", "m") is None
    line = vocab.warning([["猫", "が", "the"]] * 10, "x.ja", "m")
    assert line is not None and "\n" not in line and "67%" in line and "en text" in line and "x.ja" in line
    assert vocab.warning([["猫"]] * 3, "x.ja", "m") is None  # too few words to judge
    sentences, ranks = toy_corpus(50, seed=1)
    model = train(sentences, ranks, ReordererConfig(hash_bits=10), TrainOptions(iterations=1), progress=False,
                  src_lang="zz")
    path = str(tmp_path / "lin.npz")
    model.save(path)
    loaded = load_reorderer(path)
    assert isinstance(loaded, Reorderer) and loaded.source.lang == "zz" and "n1" in loaded.source
    assert "never-seen" not in loaded.source


@pytest.mark.parametrize("kind", ["linear", "neural"])
def test_reorder_warns_once_when_the_input_looks_like_the_other_side(tmp_path, caplog, kind):
    sentences, ranks = toy_corpus(200, seed=1)
    src, oracle = write_corpus(tmp_path, "train", sentences, ranks)
    model = str(tmp_path / "m.npz")
    extra = TINY_TRAIN_ARGS[kind]
    en = tmp_path / "train.en"
    os.rename(src, en)  # the language comes from the file name
    assert cli_main(["train-reorderer", "--src", str(en), "--oracle", oracle, "--model", model, *extra]) == 0
    assert load_reorderer(model).source.lang == "en"
    other = tmp_path / "other.ja"
    other.write_text("猫 が 好き で す\n" * 5, encoding="utf-8")
    same = tmp_path / "same.en"
    same.write_text("n1 v2 n3\n" * 5, encoding="utf-8")
    for path, warned in ((other, True), (same, False)):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert cli_main(["reorder", "--model", model, "--src", str(path), "--out", str(tmp_path / "o")]) == 0
        lines = [r.getMessage() for r in caplog.records if "unknown to the reorderer" in r.getMessage()]
        assert len(lines) == (1 if warned else 0)
        if warned:
            assert lines[0].startswith(f"{path}: 100% of its 25 words")


@pytest.mark.parametrize("kind", ["linear", "neural"])
def test_a_model_with_non_finite_weights_is_refused_naming_the_file(tmp_path, toy_neural, kind):
    path = str(tmp_path / "bad.npz")
    if kind == "linear":
        weights = np.zeros((1 << 8) * 3)
        weights[5] = np.nan
        Reorderer(ReordererConfig(hash_bits=8), weights).save(path)
    else:
        weights = dict(toy_neural.weights)
        weights["pair.w"] = weights["pair.w"].copy()
        weights["pair.w"][0] = np.inf
        NeuralReorderer(toy_neural.config, weights, toy_neural.vocab).save(path)
    with pytest.raises(ModelFileError, match=r"bad\.npz: the model has non-finite weights"):
        load_reorderer(path)
    assert cli_main(["reorder", "--model", path, "--src", path, "--out", str(tmp_path / "o")]) != 0
    assert not os.path.exists(tmp_path / "o")


def test_itertools_sanity_of_the_brute_force():
    # the enumeration above is the BTG set: all 6 orders of 3 words, 22 of the 24 of 4 (not 2413 / 3142)
    assert len(btg_orders(0, 3)) == 6
    assert set(itertools.permutations(range(4))) - btg_orders(0, 4) == {(1, 3, 0, 2), (2, 0, 3, 1)}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_training_on_a_gpu_gives_a_model_that_reorders_without_one():
    sentences, ranks = toy_corpus(400, seed=1)
    options = NeuralTrainOptions(epochs=12, lr=1e-2, batch_pairs=2000, device="cuda")
    model = train_neural(sentences, ranks, SMALL, options, progress=False)
    assert model.training["device"].startswith("cuda")
    held_out, held_ranks = toy_corpus(200, seed=2)
    assert evaluate_orders(model.reorder_batch(held_out), held_ranks).corpus_tau > 0.97  # numpy inference


def test_checkpoints_and_translation_inputs_carry_a_neural_reorderer(tmp_path, toy_neural):
    from fairseq.data import Dictionary

    from xlpos.tasks import xl_inference
    path = str(tmp_path / "neural.npz")
    toy_neural.save(path)
    stored = xl_inference.read_reorderer_file(path)  # what a checkpoint keeps
    carried = xl_inference.load_reorderer(xl_inference.model_file_from_tensor(
        "reorderer", xl_inference.model_file_to_tensor(stored), "checkpoint"))
    assert isinstance(carried, NeuralReorderer)
    words = ["a1", "n2", "v3", "n4", "p0", "n5"]
    src_dict = Dictionary()
    for w in words:
        src_dict.add_symbol(w)
    info = xl_inference.XLPositionPipeline(src_dict, carried).analyze_words([words])[0]
    assert info.method == xl_inference.REORDERER and info.order == [1, 0, 5, 4, 3, 2]
    assert sorted(range(6), key=lambda i: info.xl_positions[i]) == info.order  # word i sits at xl_positions[i]
