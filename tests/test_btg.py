"""BTG forest, CKY and losses against brute force over every derivation of tiny sentences."""
from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from xlpos_prep import btg
from xlpos_prep.metrics import fuzzy_reordering_counts, kendall_tau_counts

S, I, F, GLUE = btg.EDGE_S, btg.EDGE_I, btg.EDGE_F, btg.EDGE_GLUE
# every feature group except the junction, whose weights depend on the children's derivations (not edge-local)
LOCAL_FLAGS = (btg.FEAT_SPAN | btg.FEAT_CHILDREN | btg.FEAT_TERMINAL | btg.FEAT_OUTSIDE_CHILD | btg.FEAT_WIDE
               | btg.FEAT_CONTEXT)
ALL_FLAGS = LOCAL_FLAGS | btg.FEAT_JUNCTION
HASH_BITS = 10
MASK = np.uint64((1 << HASH_BITS) - 1)


def derivations(l: int, r: int, max_term: int) -> list[list[tuple[int, int, int, int]]]:
    """Every BTG derivation of [l, r) as edge lists, parents before children."""
    out = []
    if r - l <= max_term:
        out.append([(F, l, -1, r)])
    for k in range(l + 1, r):
        for left in derivations(l, k, max_term):
            for right in derivations(k, r, max_term):
                for t in (S, I):
                    out.append([(t, l, k, r)] + left + right)
    return out


def bounded_derivations(n: int, max_term: int, max_span: int) -> list[list[tuple[int, int, int, int]]]:
    """The forest searched when n > max_span: chains of segments of <= max_span words joined by GLUE edges."""
    if n <= max_span:
        return derivations(0, n, max_term)
    out = []
    for cuts in itertools.product([False, True], repeat=n - 1):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
        segments = list(zip(bounds, bounds[1:]))
        if any(b - a > max_span for a, b in segments):
            continue
        glue = [(GLUE, 0, a, b) for a, b in reversed(segments[1:])]  # left-branching, parents first
        for parts in itertools.product(*(derivations(a, b, max_term) for a, b in segments)):
            out.append(glue + [e for part in parts for e in part])
    return out


def order_of(edges) -> list[int]:
    node = {(l, r): (t, k) for t, l, k, r in edges}
    n = max(r for _, _, _, r in edges)

    def walk(l: int, r: int) -> list[int]:
        t, k = node[(l, r)]
        if t == F:
            return list(range(l, r))
        left, right = walk(l, k), walk(k, r)
        return right + left if t == I else left + right

    return walk(0, n)


def random_sentence(rng: np.random.Generator, n: int, vocab: int = 4) -> np.ndarray:
    # a small vocabulary so that words (and hence features) repeat inside the sentence
    words = rng.integers(1, vocab + 1, size=n).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    tok = np.empty((n + 2, 1), dtype=np.uint64)
    tok[0, 0], tok[n + 1, 0] = 11, 13
    tok[1:n + 1, 0] = words
    return tok


def random_ranks(rng: np.random.Generator, n: int) -> np.ndarray:
    raw = rng.integers(0, max(1, n - 1), size=n)
    return np.unique(raw, return_inverse=True)[1].astype(np.int64)  # dense, with ties


def no_ranks():
    return (np.empty(0, dtype=np.int64),
            (np.zeros((1, 1), np.int64), np.zeros((1, 1), np.int64), np.zeros((1, 1), np.int64), np.zeros(1, np.int64)))


def as_array(edges) -> np.ndarray:
    return np.array(edges, dtype=np.int64).reshape(-1, 4)


CASES = [(n, max_term, max_span) for n in (1, 2, 3, 4, 5) for max_term in (1, 2, 3) for max_span in (8,)]
CASES += [(5, 2, 3), (6, 1, 4), (6, 2, 2)]  # sentences longer than max_span: segment chains


@pytest.mark.parametrize("n,max_term,max_span", CASES)
def test_cky_finds_the_best_derivation(n, max_term, max_span):
    rng = np.random.default_rng(100 * n + 10 * max_term + max_span)
    forest = [as_array(d) for d in bounded_derivations(n, max_term, max_span)]
    for trial in range(3):
        tok = random_sentence(rng, n)
        weights = rng.normal(size=(1 << HASH_BITS) * 3)
        tables = btg.build_tables(tok, weights, MASK, max_term, max_span, LOCAL_FLAGS)
        ranks, loss_tables = no_ranks()
        order, edges, score, _, _ = btg.cky(n, max_term, max_span, tables, btg.MODE_PREDICT, ranks, loss_tables,
                                            0.0, 0.0)
        scores = [btg.derivation_score(tables, d, n, max_span) for d in forest]
        assert score == pytest.approx(max(scores), abs=1e-9)
        assert btg.derivation_score(tables, edges, n, max_span) == pytest.approx(score, abs=1e-9)
        assert order.tolist() == order_of(edges.tolist())
        assert sorted(order.tolist()) == list(range(n))


@pytest.mark.parametrize("n,max_term,max_span", [(4, 2, 8), (5, 1, 8), (5, 3, 8), (6, 2, 3)])
def test_edge_factored_losses_equal_direct_tau_and_fuzzy_counts(n, max_term, max_span):
    rng = np.random.default_rng(n * max_term)
    forest = bounded_derivations(n, max_term, max_span)
    for trial in range(4):
        ranks = random_ranks(rng, n)
        loss_tables = btg.build_loss_tables(ranks, max_term)
        for d in forest:
            order = order_of(d)
            disc, brk = btg.derivation_loss(as_array(d), n, ranks, loss_tables)
            assert disc == kendall_tau_counts(order, ranks.tolist())[0]
            assert brk == fuzzy_reordering_counts(order, ranks.tolist())[0]


@pytest.mark.parametrize("n,max_term,max_span", [(4, 1, 8), (5, 2, 8), (5, 1, 3), (6, 2, 4)])
def test_oracle_and_loss_augmented_search_against_brute_force(n, max_term, max_span):
    rng = np.random.default_rng(7 * n + max_term)
    forest = [as_array(d) for d in bounded_derivations(n, max_term, max_span)]
    for trial in range(4):
        tok = random_sentence(rng, n)
        ranks = random_ranks(rng, n)
        weights = rng.normal(size=(1 << HASH_BITS) * 3)
        tables = btg.build_tables(tok, weights, MASK, max_term, max_span, LOCAL_FLAGS)
        loss_tables = btg.build_loss_tables(ranks, max_term)
        scores = np.array([btg.derivation_score(tables, d, n, max_span) for d in forest])
        losses = np.array([btg.derivation_loss(d, n, ranks, loss_tables) for d in forest])
        tau = losses[:, 0].astype(float)
        # Kendall tau alone factors exactly over edges: both searches are exact
        _, e, s, dd, bb = btg.cky(n, max_term, max_span, tables, btg.MODE_ORACLE, ranks, loss_tables, 1.0, 0.0)
        assert dd == tau.min()
        assert s == pytest.approx(scores[tau == tau.min()].max(), abs=1e-9)  # ties broken by model score
        _, e, s, dd, bb = btg.cky(n, max_term, max_span, tables, btg.MODE_LOSS_AUGMENTED, ranks, loss_tables,
                                  0.5, 0.0)
        assert s + 0.5 * dd == pytest.approx((scores + 0.5 * tau).max(), abs=1e-9)
        # with breaks, whatever the search returns reports the true losses of its order
        for mode in (btg.MODE_ORACLE, btg.MODE_LOSS_AUGMENTED):
            order, e, s, dd, bb = btg.cky(n, max_term, max_span, tables, mode, ranks, loss_tables, 1.0, 3.0)
            assert dd == kendall_tau_counts(order.tolist(), ranks.tolist())[0]
            assert bb == fuzzy_reordering_counts(order.tolist(), ranks.tolist())[0]
            assert s == pytest.approx(btg.derivation_score(tables, e, n, max_span), abs=1e-9)
        combined = losses[:, 0] + 3.0 * losses[:, 1]
        _, _, _, dd, bb = btg.cky(n, max_term, max_span, tables, btg.MODE_ORACLE, ranks, loss_tables, 1.0, 3.0)
        assert dd + 3.0 * bb >= combined.min()
        if combined.min() == 0:  # a perfect derivation exists: the oracle search finds one
            assert dd + 3.0 * bb == 0


def test_junction_features_score_consistently():
    """Junction weights depend on the children's chosen derivations: the search stays consistent with the
    score of the derivation it returns, and never beats the brute-force best."""
    rng = np.random.default_rng(5)
    n, max_term, max_span = 5, 2, 8
    forest = [as_array(d) for d in derivations(0, n, max_term)]
    for trial in range(5):
        tok = random_sentence(rng, n)
        weights = rng.normal(size=(1 << HASH_BITS) * 3)
        tables = btg.build_tables(tok, weights, MASK, max_term, max_span, ALL_FLAGS)
        ranks, loss_tables = no_ranks()
        _, edges, score, _, _ = btg.cky(n, max_term, max_span, tables, btg.MODE_PREDICT, ranks, loss_tables, 0, 0)
        assert score == pytest.approx(btg.derivation_score(tables, edges, n, max_span), abs=1e-9)
        assert score <= max(btg.derivation_score(tables, d, n, max_span) for d in forest) + 1e-9


@pytest.mark.parametrize("flags", [LOCAL_FLAGS, ALL_FLAGS])
def test_update_features_match_the_scored_features(flags):
    """w . phi(y) from the sparse features used by updates equals the table score of y: training moves
    exactly the weights that inference reads."""
    rng = np.random.default_rng(11)
    n, max_term, max_span = 6, 2, 4  # includes segments
    forest = bounded_derivations(n, max_term, max_span)
    empty = np.zeros((0, 4), dtype=np.int64)
    for trial in range(3):
        tok = random_sentence(rng, n)
        weights = rng.normal(size=(1 << HASH_BITS) * 3)
        tables = btg.build_tables(tok, weights, MASK, max_term, max_span, flags)
        for d in rng.choice(len(forest), size=20, replace=False):
            edges = as_array(forest[d])
            keys, vals = btg.feature_difference(tok, edges, empty, MASK, flags)
            assert float(weights[keys] @ vals) == pytest.approx(
                btg.derivation_score(tables, edges, n, max_span), abs=1e-9)
            keys, vals = btg.feature_difference(tok, edges, edges, MASK, flags)
            assert len(keys) == 0


def test_hash_is_the_documented_64_bit_mix():
    """The numba hash must be plain wrapping 64-bit arithmetic (models must mean the same on every machine)."""
    m64 = (1 << 64) - 1

    def mix(h):
        h ^= h >> 33
        h = (h * 0xFF51AFD7ED558CCD) & m64
        h ^= h >> 33
        h = (h * 0xC4CEB9FE1A85EC53) & m64
        return h ^ (h >> 33)

    k = 0x9E3779B97F4A7C15
    for a, b in [(0, 0), (1, 2), (m64, 12345), (0x8000000000000000, m64 - 1)]:
        expected = mix((mix((int(btg.T_LR_RL) * k + a) & m64) * k + b) & m64)
        assert int(btg._f2(btg.T_LR_RL, np.uint64(a), np.uint64(b))) == expected


def test_long_sentence_is_reordered_in_bounded_time_and_memory():
    rng = np.random.default_rng(0)
    n = 1000
    tok = random_sentence(rng, n, vocab=50)
    weights = rng.normal(size=(1 << HASH_BITS) * 3)
    offsets = np.array([0, n + 2], dtype=np.int64)
    btg.parse_batch(tok[:12].copy(), np.array([0, 12]), weights, MASK, 3, 20, ALL_FLAGS)  # compile outside timing
    btg.wait_for_compile()  # on an empty numba cache the first call returns through the numpy path
    t0 = time.perf_counter()
    orders, order_offsets, edges, edge_offsets = btg.parse_batch(tok, offsets, weights, MASK, 3, 20, ALL_FLAGS)
    seconds = time.perf_counter() - t0
    assert sorted(orders.tolist()) == list(range(n))
    assert orders.tolist() != list(range(n))  # random weights do reorder
    # every CKY span is within max_span; only GLUE edges are longer
    spans = edges[:, 3] - edges[:, 1]
    assert spans[edges[:, 0] != GLUE].max() <= 20
    assert seconds < 5.0, f"1000 words took {seconds:.1f}s"
    # linear in n: twice the words, about twice the time (generous bound against machine noise)
    tok2 = random_sentence(rng, 2 * n, vocab=50)
    t0 = time.perf_counter()
    orders2, *_ = btg.parse_batch(tok2, np.array([0, 2 * n + 2], dtype=np.int64), weights, MASK, 3, 20, ALL_FLAGS)
    assert sorted(orders2.tolist()) == list(range(2 * n))
    assert time.perf_counter() - t0 < 6 * seconds + 0.5


def test_tree_string_format():
    # order: w1 w2 w4 w3 -> (S (F w1 w2) (I (F w3) (F w4)))
    edges = np.array([(S, 0, 2, 4), (F, 0, -1, 2), (I, 2, 3, 4), (F, 2, -1, 3), (F, 3, -1, 4)], dtype=np.int64)
    assert btg.tree_string(edges, ["w1", "w2", "w3", "w4"]) == "(S (F w1 w2) (I (F w3) (F w4)))"
    assert order_of(edges.tolist()) == [0, 1, 3, 2]
    assert btg.tree_string(np.array([(F, 0, -1, 2)]), ["(", "a)"]) == "(F -LRB- a-RRB-)"
    # segments of long sentences are joined by straight nodes
    glued = np.array([(GLUE, 0, 2, 3), (F, 0, -1, 2), (F, 2, -1, 3)], dtype=np.int64)
    assert btg.tree_string(glued, ["a", "b", "c"]) == "(S (F a b) (F c))"


@pytest.mark.parametrize("flags", [LOCAL_FLAGS, btg.FEAT_SPAN | btg.FEAT_CONTEXT, btg.FEAT_CHILDREN | btg.FEAT_CONTEXT,
                                   LOCAL_FLAGS | btg.FEAT_JUNCTION])
def test_numpy_path_gives_the_kernels_derivations_with_context_features(flags):
    """The cold-start numpy path mirrors every feature group, the context group included (tests/test_cold_start.py
    covers the others with more settings)."""
    rng = np.random.default_rng(flags)
    lengths = [0, 1, 2, 7, 13, 30]
    toks, offsets = [], [0]
    for n in lengths:
        t = rng.integers(0, 5, size=(n + 2, 2)).astype(np.uint64)
        t[0], t[-1] = 2**63 + 1, 2**63 + 2
        toks.append(t)
        offsets.append(offsets[-1] + n + 2)
    tok, offsets = np.concatenate(toks), np.array(offsets, dtype=np.int64)
    weights = rng.normal(size=(1 << HASH_BITS) * 3)
    args = (tok, offsets, weights, MASK, 3, 12, flags, btg.inversion_penalties(12, 0.5, 0))
    orders, order_offsets, edges, edge_offsets, scores = btg._parse_batch_jit(*args)
    with np.errstate(over="ignore"):
        np_orders, np_edges, np_scores, done = btg._np_parse_batch(*args, lambda: False)
    assert done == len(lengths)
    for s in range(len(lengths)):
        assert np_orders[s].tolist() == orders[order_offsets[s]:order_offsets[s + 1]].tolist()
        assert np_edges[s].tolist() == edges[edge_offsets[s]:edge_offsets[s + 1]].tolist()
    assert np_scores == scores.tolist()  # bit-identical: the fallback compares them
    # the group changes the scores: without it the same weights give other tables
    with_ctx = btg.build_tables(toks[4], weights, MASK, 3, 12, flags)
    without = btg.build_tables(toks[4], weights, MASK, 3, 12, flags & ~btg.FEAT_CONTEXT)
    assert not all(np.array_equal(a, b) for a, b in zip(with_ctx, without))


# ---------------------------------------------------------------------------------------------------------------
# Sentences longer than MAX_PARSE_WORDS: cut into pieces, so that one sentence's memory is bounded.
def _sentence(rng, n: int, views: int = 2) -> np.ndarray:
    t = rng.integers(0, 7, size=(n + 2, views)).astype(np.uint64)
    t[0], t[-1] = 2**63 + 1, 2**63 + 2
    return t


def _order_from_edges(edges: np.ndarray, n: int) -> list[int]:
    """The order a derivation yields, read iteratively (chains of hundreds of segments nest that deep)."""
    node = {(l, r): (t, k) for t, l, k, r in edges.tolist()}
    out, stack = [], [(0, n)]
    while stack:
        l, r = stack.pop()
        t, k = node[(l, r)]
        if t == F:
            out.extend(range(l, r))
        elif t == I:
            stack += [(l, k), (k, r)]
        else:  # S and GLUE: left child first
            stack += [(k, r), (l, k)]
    return out


@pytest.mark.parametrize("flags", [btg.FEAT_SPAN | btg.FEAT_CHILDREN | btg.FEAT_TERMINAL | btg.FEAT_OUTSIDE_CHILD
                                   | btg.FEAT_CONTEXT | btg.FEAT_JUNCTION, LOCAL_FLAGS])
def test_a_sentence_over_max_parse_words_is_cut_into_one_valid_derivation(flags):
    rng = np.random.default_rng(7)
    cap = btg.MAX_PARSE_WORDS
    n = 2 * cap + 37  # three pieces
    tok = _sentence(rng, n)
    weights = rng.normal(size=(1 << HASH_BITS) * 3)
    max_term, max_span = 3, 8
    pen = btg.inversion_penalties(max_span, 0.2, 0)
    order, edges, score = btg._parse_sentence(tok, weights, MASK, max_term, max_span, flags, pen, np.int64(cap))
    assert sorted(order.tolist()) == list(range(n))
    assert _order_from_edges(edges, n) == order.tolist()
    # no edge crosses a cut: the pieces [0, 195), [195, 390), [390, 549) are composed straight (GLUE)
    cuts = [p * n // 3 for p in (1, 2)]
    for t, l, k, r in edges.tolist():
        if t != GLUE:
            assert not any(l < c < r for c in cuts), (t, l, k, r)
    glue_splits = {k for t, _, k, _ in edges.tolist() if t == GLUE}
    assert set(cuts) <= glue_splits
    # the search over the whole sentence (no cut) finds at least this score
    _, _, uncut = btg._parse_sentence(tok, weights, MASK, max_term, max_span, flags, pen, np.int64(10 * n))
    assert score <= uncut + 1e-9
    if not flags & btg.FEAT_WIDE:
        # without the second-outside-word features every edge scores as in the whole sentence: the pieces' scores
        # add up to the derivation's score on the uncut sentence's tables
        tables = btg.build_tables(tok, weights, MASK, max_term, max_span, flags)
        btg._penalize_inversions(tables[0], pen)
        assert btg.derivation_score(tables, edges, n, max_span) == pytest.approx(score, rel=1e-12, abs=1e-9)
    # a sentence of exactly MAX_PARSE_WORDS words is not cut
    short = tok[:cap + 2].copy()
    short[-1] = tok[-1]
    got = btg._parse_sentence(short, weights, MASK, max_term, max_span, flags, pen, np.int64(cap))
    whole = btg._parse_piece(short, weights, MASK, max_term, max_span, flags, pen)
    assert got[0].tolist() == whole[0].tolist() and got[1].tolist() == whole[1].tolist() and got[2] == whole[2]


def test_numpy_path_cuts_long_sentences_as_the_kernel_does():
    rng = np.random.default_rng(11)
    lengths = [5, btg.MAX_PARSE_WORDS + 90, 40]
    toks = [_sentence(rng, n) for n in lengths]
    offsets = np.cumsum([0] + [n + 2 for n in lengths]).astype(np.int64)
    tok = np.concatenate(toks)
    weights = rng.normal(size=(1 << HASH_BITS) * 3)
    args = (tok, offsets, weights, MASK, 3, 8, LOCAL_FLAGS, btg.inversion_penalties(8, 0.5, 0))
    orders, order_offsets, edges, edge_offsets, scores = btg._parse_batch_jit(*args)
    with np.errstate(over="ignore"):
        np_orders, np_edges, np_scores, done = btg._np_parse_batch(*args, lambda: False)
    assert done == len(lengths)
    assert (edges[edge_offsets[1]:edge_offsets[2], 0] == GLUE).any()  # the long one is a chain of pieces
    joined = btg._concat(np_orders, np_edges)
    assert all(np.array_equal(a, b) for a, b in zip(joined, (orders, order_offsets, edges, edge_offsets)))
    assert np_scores == scores.tolist()
