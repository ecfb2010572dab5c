"""BTG search over pairwise precedence scores: the chart search of the neural reorderer, in numpy.

A pair model gives, for source words i < j, a *gain* g(i, j): how much it prefers j before i in the target order
to i before j (the neural reorderer: the log-odds of the inversion, or its probability minus that of the straight
order). The score of a BTG derivation is the sum of the gains of the pairs it inverts. Every pair a derivation
inverts is inverted by exactly one I edge (l, k, r): the pairs i in [l, k), j in [k, r). S edges and monotone
terminal spans invert nothing and score 0, so the monotone order scores 0 and

    score(I edge l, k, r) = Q(l, r) - Q(l, k) - Q(k, r),   Q(a, b) = the sum of g over pairs inside [a, b)

which makes every edge O(1) from a table of O(n * L) entries (the same rectangle trick as btg's `_rect` for the
tau loss, here on span-internal sums so that only pairs less than L = max_span words apart are ever needed).
With g the probability difference the search maximises the expected number of pairs in the right order, i.e.
the expected Kendall tau over the BTG-reachable orders; with log-odds it maximises the pairwise likelihood.

Abstention, as for the linear model: an I edge over d words must have a score above `inv_penalty[d]` (the
inversion margin; a huge value keeps longer spans straight), and a sentence longer than `fallback_length` keeps
its best derivation only when its score beats the monotone order (score 0) by fallback_margin * e^2 for e words
over that length, else it is monotone.

Chunks (optional): a score c(k) per pair of neighbouring source words (k - 1, k), how much the model prefers that
they stay together, next to each other and in order (one chunk, as the fuzzy reordering score counts them). A
straight span without inversions may then be taken as one terminal, scoring the c(k) of the neighbours inside it;
since a straight run can be cut anywhere into terminals, a derivation scores the positive c(k) of the neighbours it
keeps together, and the fallback compares with the monotone order's score, the positive c(k) of all neighbours. A
terminal wider than max_term is written as a chain of max_term-word F edges (its order is the same). Without chunk
scores the search is the pair search alone.

Sentences longer than max_span are chains of segments of at most max_span words composed straight (edge GLUE), the
segments chosen by a DP over the cell scores, as in btg. Sentences are searched in padded batches (the caller
groups similar lengths): every width is one set of array operations over the whole batch, and the only Python
loop per sentence is reading its derivation off the back pointers. No numba: nothing here compiles, so a first
run costs what a warm one does.
"""
from __future__ import annotations

import numpy as np

from .btg import EDGE_F, EDGE_GLUE, EDGE_I, EDGE_S, ParseResult

# An inversion must gain more than this on top of its margin: prefix-sum rounding must not turn a zero-gain tie
# (common: S and I of a span with no scored pair) into an inversion.
TIE_EPS = 1e-7


def span_sums(gains: np.ndarray, max_span: int) -> np.ndarray:
    """Q[b, l, d] = sum of gains[b, j, delta] over pairs (j - delta, j) inside [l, l + d), for d = 0..L.

    `gains` is (B, N, >= L) with gains[b, j, delta] the gain of the pair (j - delta, j), delta = 1..L-1 (column 0
    and pairs reaching before position 0 are ignored). Returns (B, N + 1, L + 1), zero where l + d > N."""
    B, N = gains.shape[:2]
    L = min(N, max_span)
    g = np.zeros((B, N, L), dtype=np.float64)
    g[:, :, 1:L] = gains[:, :, 1:L]
    j = np.arange(N)[:, None]
    g[:, :, 1:L] *= (j - np.arange(1, L)[None, :] >= 0)  # pairs reaching before the sentence start
    # S[b, j, m]: the gains of j with the m words before it
    S = np.cumsum(g, axis=2)
    # Q[l, d] = Q[l, d - 1] + S[l + d - 1, d - 1]
    Sp = np.zeros((B, N + L, L), dtype=np.float64)
    Sp[:, :N] = S
    ls = np.arange(N + 1)[:, None]
    ds = np.arange(1, L + 1)[None, :]
    inc = Sp[:, np.minimum(ls + ds - 1, N + L - 1), ds - 1]  # (B, N + 1, L)
    inc *= (ls + ds <= N)
    Q = np.zeros((B, N + 1, L + 1), dtype=np.float64)
    np.cumsum(inc, axis=2, out=Q[:, :, 1:])
    return Q


def terminal_scores(chunk: np.ndarray, max_span: int) -> np.ndarray:
    """T[b, l, d] = the sum of chunk[b, k] for l < k < l + d: what the straight span [l, l + d) scores as one
    terminal. `chunk` is (B, N) with chunk[b, k] the score of keeping words k - 1 and k together (column 0 and
    padding ignored). Returns (B, N, L + 1), zero where l + d > N."""
    B, N = chunk.shape
    L = min(N, max_span)
    c = np.zeros((B, N + 1), dtype=np.float64)
    c[:, 2:] = np.cumsum(chunk[:, 1:], axis=1)  # c[m] = sum of chunk[k] for 0 < k < m
    ls = np.arange(N)[:, None]
    ds = np.arange(L + 1)[None, :]
    ends = np.maximum(ls + ds, ls + 1)  # [l, l + d) sums chunk over l < k < l + d; d <= 1: nothing
    T = c[:, np.minimum(ends, N)] - c[:, ls + 1]
    return np.where(ls + ds <= N, T, 0.0)


def monotone_scores(chunk: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """What the monotone order scores per sentence: the positive chunk scores of all its neighbours (the straight
    run cut into terminals at every negative one). A terminal holds at most max_span words, so in a sentence longer
    than the chart's max_span a run of max_span or more positive neighbours must be cut and this is an upper bound
    of what the chart gives the monotone order: the fallback compares the model's order with it, erring towards
    monotone."""
    k = np.arange(chunk.shape[1])[None, :]
    inside = (k >= 1) & (k < lengths[:, None])
    return np.where(inside, np.maximum(chunk, 0.0), 0.0).sum(axis=1)


def chart(Q: np.ndarray, max_span: int, inv_penalty: np.ndarray, terminal: np.ndarray | None = None
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Best-derivation chart of a padded batch: (cs, ck, ct), each (B, N, L + 1) over cells [l, l + d).

    cs: best score; ck: split point of its edge; ct: EDGE_S / EDGE_I, or EDGE_F for one word and for a straight
    span whose `terminal` score (terminal_scores; None: no chunk scores) is at least that of every edge. Ties go
    to the terminal, then to the straight edge and then to the leftmost split point."""
    B, N1, _ = Q.shape
    N = N1 - 1
    L = min(N, max_span)
    cs = np.zeros((B, N, L + 1))
    ck = np.full((B, N, L + 1), -1, dtype=np.int32)
    ct = np.full((B, N, L + 1), EDGE_F, dtype=np.int8)
    for d in range(2, L + 1):
        nl = N - d + 1
        dl = np.arange(1, d)
        k = np.arange(nl)[:, None] + dl[None, :]  # (nl, d - 1)
        dr = d - dl
        straight = cs[:, :nl, 1:d] + cs[:, k, dr]  # (B, nl, d - 1)
        gain = Q[:, :nl, d][:, :, None] - Q[:, :nl, 1:d] - Q[:, k, dr] - inv_penalty[d]
        inv = gain > TIE_EPS
        cand = straight + np.where(inv, gain, 0.0)
        best = np.argmax(cand, axis=2)  # first maximum: the leftmost split
        cs[:, :nl, d] = np.take_along_axis(cand, best[:, :, None], axis=2)[:, :, 0]
        ck[:, :nl, d] = np.arange(nl)[None, :] + 1 + best
        ct[:, :nl, d] = np.where(np.take_along_axis(inv, best[:, :, None], axis=2)[:, :, 0], EDGE_I, EDGE_S)
        if terminal is not None:
            whole = terminal[:, :nl, d] >= cs[:, :nl, d]
            cs[:, :nl, d] = np.where(whole, terminal[:, :nl, d], cs[:, :nl, d])
            ct[:, :nl, d] = np.where(whole, EDGE_F, ct[:, :nl, d])
            ck[:, :nl, d] = np.where(whole, -1, ck[:, :nl, d])
    return cs, ck, ct


def _segments(cs_row: np.ndarray, n: int, L: int) -> tuple[list[tuple[int, int]], float]:
    """Best chain of cells covering [0, n) (btg's segmentation DP): (segment bounds, total score)."""
    gs = np.full(n + 1, -np.inf)
    gs[0] = 0.0
    start = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):
        d = np.arange(1, min(L, j) + 1)
        sc = gs[j - d] + cs_row[j - d, d]
        b = int(np.argmax(sc))
        gs[j] = sc[b]
        start[j] = j - d[b]
    bounds = []
    j = n
    while j > 0:
        bounds.append((int(start[j]), j))
        j = int(start[j])
    return bounds[::-1], float(gs[n])


def _derivation(cs: np.ndarray, ck: np.ndarray, ct: np.ndarray, n: int, L: int,
                max_term: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(order, edges, score) of one sentence from its chart rows. A span of at most max_term words whose best
    derivation inverts nothing (score 0: every inversion taken has a positive score) is one F edge, and so is a
    terminal of the chart (a wider one: a chain of them)."""
    edges: list[tuple[int, int, int, int]] = []
    stack: list[tuple[int, int]] = []
    if n <= L:
        stack.append((0, n))
        score = float(cs[0, n])
    else:
        bounds, score = _segments(cs, n, L)
        edges += [(EDGE_GLUE, 0, s, e) for s, e in reversed(bounds[1:])]
        stack += reversed(bounds)
    cs_l, ck_l, ct_l = cs.tolist(), ck.tolist(), ct.tolist()
    order: list[int] = []
    while stack:
        l, r = stack.pop()
        d = r - l
        if d == 1 or (d <= max_term and cs_l[l][d] == 0.0) or ct_l[l][d] == EDGE_F:
            edges += straight_edges(l, r, max_term)
            order.extend(range(l, r))
            continue
        t, k = ct_l[l][d], ck_l[l][d]
        edges.append((t, l, k, r))
        stack += [(k, r), (l, k)] if t == EDGE_S else [(l, k), (k, r)]
    return np.array(order, dtype=np.int64), np.array(edges, dtype=np.int64).reshape(-1, 4), score


def straight_edges(l: int, r: int, max_term: int) -> list[tuple[int, int, int, int]]:
    """The span [l, r) in source order as a straight tree: F spans of max_term words, right-branching S edges."""
    edges = []
    while r - l > max_term:
        edges.append((EDGE_S, l, l + max_term, r))
        edges.append((EDGE_F, l, -1, l + max_term))
        l += max_term
    if r > l:
        edges.append((EDGE_F, l, -1, r))
    return edges


def monotone_derivation(n: int, max_term: int) -> ParseResult:
    """The monotone order as a straight tree (straight_edges)."""
    return ParseResult(np.arange(n, dtype=np.int64), np.array(straight_edges(0, n, max_term),
                                                               dtype=np.int64).reshape(-1, 4))


def parse_padded(gains: np.ndarray, lengths: np.ndarray, max_span: int, max_term: int, inv_penalty: np.ndarray,
                 fallback_length: int = 0, fallback_margin: float = 0.0, chunk: np.ndarray | None = None
                 ) -> list[ParseResult]:
    """Best derivations of a padded batch: sentence b has lengths[b] words and gains[b, j, delta] for the pair
    (j - delta, j) (see `span_sums`); gains of padding positions are ignored. `chunk` (B, N): the optional chunk
    scores, chunk[b, k] for the neighbours (k - 1, k).

    `inv_penalty`: one entry per span length 0..max_span (btg.inversion_penalties). A sentence of n >
    fallback_length > 0 words whose best score is below the monotone order's (0 without chunk scores) plus
    fallback_margin * (n - fallback_length)**2 is monotone.
    """
    if inv_penalty.shape[0] < max_span + 1:
        raise ValueError(f"inv_penalty needs {max_span + 1} entries, got {inv_penalty.shape[0]}")
    B, N = gains.shape[:2]
    if N == 0:
        return [monotone_derivation(0, max_term) for _ in range(B)]
    L = min(N, max_span)
    terminal = None if chunk is None else terminal_scores(chunk, max_span)
    cs, ck, ct = chart(span_sums(gains, max_span), max_span, inv_penalty, terminal)
    monotone = np.zeros(B) if chunk is None else monotone_scores(chunk, lengths)
    out = []
    for b in range(B):
        n = int(lengths[b])
        if n == 0:
            out.append(monotone_derivation(0, max_term))
            continue
        order, edges, score = _derivation(cs[b, :n], ck[b, :n], ct[b, :n], n, L, max_term)
        excess = n - fallback_length
        if (fallback_length > 0 and fallback_margin > 0 and excess > 0
                and score - monotone[b] < fallback_margin * excess**2):
            out.append(monotone_derivation(n, max_term))
        else:
            out.append(ParseResult(order, edges))
    return out
