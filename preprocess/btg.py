"""BTG forests over source spans: hashed features, CKY inference, edge-factored losses and online updates.

Everything here works on plain arrays so that the hot loops compile with numba; `xlpos_prep.reorderer` turns words
into the arrays and owns the model file, the training schedule and the CLIs.

A derivation covers the source span [0, n) with three kinds of edges over spans [l, r):
  S (straight)  children [l, k) and [k, r), output left child then right child;
  I (inverted)  the same children, output right child then left child;
  F (terminal)  the words of [l, r) in source order, for r - l <= max_term.
It yields an order: the source indices in target order.

Bounded spans. Spans longer than `max_span` are never built with S/I/F edges. When the sentence is longer than
`max_span`, the derivation is a chain of segments of at most `max_span` words, each parsed by CKY and composed
straight (edge GLUE, which carries no features). A segmentation DP picks the segments, so time is O(n * L^2) and
memory O(n * L) for L = min(n, max_span), i.e. linear in the sentence length.

Features. Every feature of an S/I edge (l, k, r) depends on at most one of: the span (l, r), the split point k,
the left child (l, k), the right child (k, r), or the two child lengths. So for one sentence all feature weights
are summed once into O(n * L) tables and the score of any of the O(n * L^2) edges is five table lookups. Features
are hashed to `hash_bits`-bit rows of a weight matrix with one column per edge type (S, I, F): the conjunction with
the edge type is the column, which also puts the S, I and F weights of one feature in the same cache line.
The optional junction features (FEAT_JUNCTION: the two words an S/I edge makes adjacent in the output) depend on
the children's derivations; like the chunk loss below they are read off the one derivation each cell keeps
(lader's beam 1), so with them the search is exact for what it returns but not guaranteed optimal.

Abstention (inference only). `inv_penalty[d]` is subtracted from the score of every I edge over d words, so an
inversion has to beat the straight alternative of its cell by that margin, and a huge penalty beyond some length
keeps longer spans straight (`inversion_penalties`; the reorderer sets it from the longest training sentence).
And a sentence longer than fallback_length words (the reorderer's: its longest training sentence) keeps its best
derivation only when that beats the best straight derivation (the monotone order) by fallback_margin times the
square of the excess length, else it gets the straight one (`parse_batch`, `fallback_thresholds`). Training never
sees either.

Losses (per sentence, with dense oracle ranks, ties allowed and never discordant):
  Kendall tau: discordant pairs. An S edge (l, k, r) adds the pairs i in [l, k), j in [k, r) with rank_i > rank_j,
    an I edge those with rank_i < rank_j, an F edge the discordant pairs inside its span; the sum over the edges of
    a derivation is exactly the discordant pairs of its order.
  Chunk (fuzzy reordering): breaks between words adjacent in the order, i.e. b directly after a with
    rank_b not in {rank_a, rank_a + 1}, plus the sentence-boundary markers (rank -1 before, max rank + 1 after).
    An S/I edge adds the break between the last word of its first child and the first word of its second child
    as realised by the children's chosen derivations (each cell keeps its first/last output word), an F edge its
    internal breaks, the root the two boundary breaks; the sum is exactly the breaks of the order. Because each
    cell keeps one derivation, searches that count breaks are approximate (exact whenever a zero-loss derivation
    exists); with Kendall tau alone both the loss-augmented and the oracle search are exact.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import numpy as np
from numba import njit, typeof

EDGE_S, EDGE_I, EDGE_F, EDGE_GLUE = 0, 1, 2, 3
EDGE_NAMES = ("S", "I", "F", "S")  # GLUE is a straight composition: it prints as S
N_COLUMNS = 3  # weight columns: S, I, F

# Search modes of the CKY.
MODE_PREDICT = 0  # maximize the model score
MODE_LOSS_AUGMENTED = 1  # maximize score + loss (the most violating derivation)
MODE_ORACLE = 2  # minimize the loss, ties broken by the model score

# Update rules of the online learner.
UPDATE_PERCEPTRON = 0
UPDATE_PA = 1  # passive-aggressive (PA-I): the smallest step that separates the oracle by its loss margin

# Feature groups (bit flags), so a model file records exactly which templates it was trained with.
FEAT_SPAN = 1  # span boundary words, outside words, length
FEAT_CHILDREN = 2  # child boundary words, child lengths, balance
FEAT_TERMINAL = 4  # the word sequence of an F span
FEAT_OUTSIDE_CHILD = 8  # outside words conjoined with child boundary words
FEAT_JUNCTION = 16  # the two words an S/I edge makes adjacent in the output, as realised by its children
FEAT_WIDE = 32  # second words inside/outside span and child boundaries, and boundary bigrams
FEAT_CONTEXT = 64  # outside words and span edges with the span length, split trigrams, child edges with lengths

# 64-bit mixing (the finalizer of MurmurHash3) in wrapping uint64 arithmetic. Word ids come from
# reorderer.WordEncoder (keyed blake2b), so no hash depends on Python's per-process string hashing.
_S33 = np.uint64(33)
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_K = np.uint64(0x9E3779B97F4A7C15)
_ZERO = np.uint64(0)
_VIEW_STRIDE = np.uint64(1000)  # template ids of view v are offset by v * 1000

# Template ids (any distinct constants; changing one changes every model: bump the model format version).
T_BIAS, T_LEN, T_SL, T_SR, T_SB, T_SA, T_SL_SR, T_SB_SL, T_SR_SA, T_SB_SA, T_SL_LEN, T_SR_LEN = (
    np.uint64(x) for x in range(1, 13))
T_TERM_SEQ = np.uint64(20)
T_LR, T_RL, T_LR_RL = np.uint64(30), np.uint64(31), np.uint64(32)
T_LL_RL, T_LL_LR, T_LEFT_LEN, T_SB_RL = np.uint64(40), np.uint64(41), np.uint64(42), np.uint64(43)
T_LR_RR, T_RL_RR, T_RIGHT_LEN, T_LR_SA = np.uint64(50), np.uint64(51), np.uint64(52), np.uint64(53)
T_BAL_SIGN, T_BAL_LENS = np.uint64(60), np.uint64(61)
T_JUNC, T_JUNC_DIST = np.uint64(70), np.uint64(71)
T_W_SL2, T_W_SR2, T_W_SB2, T_W_SA2 = np.uint64(80), np.uint64(81), np.uint64(82), np.uint64(83)
T_W_SLB, T_W_SRB, T_W_SBB, T_W_SAB = np.uint64(84), np.uint64(85), np.uint64(86), np.uint64(87)
T_W_LRB, T_W_RLB = np.uint64(88), np.uint64(89)
T_C_SB_LEN, T_C_SA_LEN, T_C_SL_SR_LEN, T_C_SB_SA_LEN = np.uint64(90), np.uint64(91), np.uint64(92), np.uint64(93)
T_C_PREV_LR_RL, T_C_LR_RL_NEXT = np.uint64(94), np.uint64(95)
T_C_LL_LEN, T_C_LR_LEN, T_C_RL_LEN, T_C_RR_LEN = np.uint64(96), np.uint64(97), np.uint64(98), np.uint64(99)

MAX_FEATURES_PER_TABLE_ENTRY = 128  # buffer size per feature function call (span features: 2 + 22 per view)
MAX_VIEWS = 4


@njit(cache=True)
def _mix(h):
    h ^= h >> _S33
    h *= _M1
    h ^= h >> _S33
    h *= _M2
    h ^= h >> _S33
    return h


@njit(cache=True)
def _f1(tpl, a):
    return _mix(tpl * _K + a)


@njit(cache=True)
def _f2(tpl, a, b):
    return _mix(_mix(tpl * _K + a) * _K + b)


@njit(cache=True)
def _f3(tpl, a, b, c):
    return _mix(_mix(_mix(tpl * _K + a) * _K + b) * _K + c)


@njit(cache=True)
def _len_bucket(d):
    if d <= 5:
        return d
    if d <= 7:
        return 6
    if d <= 10:
        return 7
    if d <= 15:
        return 8
    if d <= 25:
        return 9
    return 10


# ---------------------------------------------------------------------------------------------------------------
# Feature functions. `tok` is (n + 2, views) uint64: row 0 is the sentence-start marker, row i + 1 the word at
# source position i, row n + 1 the sentence-end marker. Each function writes hashes into `buf`, returns the count.


@njit(cache=True)
def _span_features(tok, l, r, flags, buf):
    c = 0
    if not flags & FEAT_SPAN:
        return c
    lb = np.uint64(_len_bucket(r - l))
    buf[c] = _f1(T_BIAS, _ZERO)
    c += 1
    buf[c] = _f1(T_LEN, lb)
    c += 1
    for v in range(tok.shape[1]):
        o = np.uint64(v) * _VIEW_STRIDE
        sl, sr, sb, sa = tok[l + 1, v], tok[r, v], tok[l, v], tok[r + 1, v]
        buf[c] = _f1(T_SL + o, sl)
        buf[c + 1] = _f1(T_SR + o, sr)
        buf[c + 2] = _f1(T_SB + o, sb)
        buf[c + 3] = _f1(T_SA + o, sa)
        buf[c + 4] = _f2(T_SL_SR + o, sl, sr)
        buf[c + 5] = _f2(T_SB_SL + o, sb, sl)
        buf[c + 6] = _f2(T_SR_SA + o, sr, sa)
        buf[c + 7] = _f2(T_SB_SA + o, sb, sa)
        buf[c + 8] = _f2(T_SL_LEN + o, sl, lb)
        buf[c + 9] = _f2(T_SR_LEN + o, sr, lb)
        c += 10
        if flags & FEAT_WIDE:
            # second word from each span edge, inside (none for one-word spans) and outside (the markers
            # repeat beyond the sentence)
            sl2 = tok[l + 2, v] if r - l > 1 else _ZERO
            sr2 = tok[r - 1, v] if r - l > 1 else _ZERO
            sb2 = tok[max(l - 1, 0), v]
            sa2 = tok[min(r + 2, tok.shape[0] - 1), v]
            buf[c] = _f1(T_W_SL2 + o, sl2)
            buf[c + 1] = _f1(T_W_SR2 + o, sr2)
            buf[c + 2] = _f1(T_W_SB2 + o, sb2)
            buf[c + 3] = _f1(T_W_SA2 + o, sa2)
            buf[c + 4] = _f2(T_W_SLB + o, sl, sl2)
            buf[c + 5] = _f2(T_W_SRB + o, sr2, sr)
            buf[c + 6] = _f2(T_W_SBB + o, sb2, sb)
            buf[c + 7] = _f2(T_W_SAB + o, sa, sa2)
            c += 8
        if flags & FEAT_CONTEXT:
            buf[c] = _f2(T_C_SB_LEN + o, sb, lb)
            buf[c + 1] = _f2(T_C_SA_LEN + o, sa, lb)
            buf[c + 2] = _f3(T_C_SL_SR_LEN + o, sl, sr, lb)
            buf[c + 3] = _f3(T_C_SB_SA_LEN + o, sb, sa, lb)
            c += 4
    return c


@njit(cache=True)
def _terminal_features(tok, l, r, flags, buf):
    """F-only features: the covered word sequence (F spans are short: r - l <= max_term)."""
    c = 0
    if not flags & FEAT_TERMINAL:
        return c
    for v in range(tok.shape[1]):
        h = (T_TERM_SEQ + np.uint64(v) * _VIEW_STRIDE) * _K
        for i in range(l + 1, r + 1):
            h = _mix(h * _K + tok[i, v])
        buf[c] = h
        c += 1
    return c


@njit(cache=True)
def _boundary_features(tok, k, flags, buf):
    """Split point k: the last word of the left child and the first word of the right child."""
    c = 0
    if not flags & FEAT_CHILDREN:
        return c
    for v in range(tok.shape[1]):
        o = np.uint64(v) * _VIEW_STRIDE
        lr, rl = tok[k, v], tok[k + 1, v]
        buf[c] = _f1(T_LR + o, lr)
        buf[c + 1] = _f1(T_RL + o, rl)
        buf[c + 2] = _f2(T_LR_RL + o, lr, rl)
        c += 3
        if flags & FEAT_WIDE:
            buf[c] = _f2(T_W_LRB + o, tok[k - 1, v], lr)
            buf[c + 1] = _f2(T_W_RLB + o, rl, tok[k + 2, v])
            c += 2
        if flags & FEAT_CONTEXT:
            buf[c] = _f3(T_C_PREV_LR_RL + o, tok[k - 1, v], lr, rl)
            buf[c + 1] = _f3(T_C_LR_RL_NEXT + o, lr, rl, tok[k + 2, v])
            c += 2
    return c


@njit(cache=True)
def _left_child_features(tok, l, k, flags, buf):
    c = 0
    if not flags & FEAT_CHILDREN:
        return c
    cb = np.uint64(_len_bucket(k - l))
    buf[c] = _f1(T_LEFT_LEN, cb)
    c += 1
    for v in range(tok.shape[1]):
        o = np.uint64(v) * _VIEW_STRIDE
        ll, lr, rl = tok[l + 1, v], tok[k, v], tok[k + 1, v]
        buf[c] = _f2(T_LL_RL + o, ll, rl)
        buf[c + 1] = _f2(T_LL_LR + o, ll, lr)
        c += 2
        if flags & FEAT_OUTSIDE_CHILD:
            buf[c] = _f2(T_SB_RL + o, tok[l, v], rl)
            c += 1
        if flags & FEAT_CONTEXT:
            buf[c] = _f2(T_C_LL_LEN + o, ll, cb)
            buf[c + 1] = _f2(T_C_LR_LEN + o, lr, cb)
            c += 2
    return c


@njit(cache=True)
def _right_child_features(tok, k, r, flags, buf):
    c = 0
    if not flags & FEAT_CHILDREN:
        return c
    cb = np.uint64(_len_bucket(r - k))
    buf[c] = _f1(T_RIGHT_LEN, cb)
    c += 1
    for v in range(tok.shape[1]):
        o = np.uint64(v) * _VIEW_STRIDE
        lr, rl, rr = tok[k, v], tok[k + 1, v], tok[r, v]
        buf[c] = _f2(T_LR_RR + o, lr, rr)
        buf[c + 1] = _f2(T_RL_RR + o, rl, rr)
        c += 2
        if flags & FEAT_OUTSIDE_CHILD:
            buf[c] = _f2(T_LR_SA + o, lr, tok[r + 1, v])
            c += 1
        if flags & FEAT_CONTEXT:
            buf[c] = _f2(T_C_RL_LEN + o, rl, cb)
            buf[c + 1] = _f2(T_C_RR_LEN + o, rr, cb)
            c += 2
    return c


@njit(cache=True)
def _balance_features(dl, dr, flags, buf):
    c = 0
    if not flags & FEAT_CHILDREN:
        return c
    sign = np.uint64(0 if dl == dr else (1 if dl > dr else 2))
    buf[0] = _f1(T_BAL_SIGN, sign)
    buf[1] = _f2(T_BAL_LENS, np.uint64(_len_bucket(dl)), np.uint64(_len_bucket(dr)))
    return 2


@njit(cache=True)
def _distance_bucket(delta):
    """Signed, bucketed source distance from the last word before a junction to the first word after it."""
    a = abs(delta)
    b = a if a <= 3 else (4 if a <= 6 else 5)
    return b if delta > 0 else 10 + b


@njit(cache=True)
def _junction_features(tok, a, b, flags, buf):
    """Word a directly followed by word b in the output (source positions)."""
    c = 0
    if not flags & FEAT_JUNCTION:
        return c
    buf[0] = _f1(T_JUNC_DIST, np.uint64(_distance_bucket(b - a)))
    c = 1
    for v in range(tok.shape[1]):
        o = np.uint64(v) * _VIEW_STRIDE
        buf[c] = _f2(T_JUNC + o, tok[a + 1, v], tok[b + 1, v])
        c += 1
    return c


# ---------------------------------------------------------------------------------------------------------------
# Score tables of one sentence.


@njit(cache=True)
def _row(h, mask):
    return np.int64(h & mask) * N_COLUMNS


@njit(cache=True)
def build_tables(tok, weights, mask, max_term, max_span, flags):
    """Sum the feature weights of one sentence into per-span/per-split tables.

    Returns (SP, FT, BD, P1, P2, BAL, JB): SP[l, d, t] span features of [l, l+d) for t in S, I, F; FT[l, d]
    the F-only features; BD[k, t] split point k; P1[l, d, t] left child [l, l+d); P2[k, d, t] right child
    [k, k+d); BAL[dl, dr, t] child lengths; JB[a, b - a + L - 1, t] output junction a -> b. An S/I edge
    (l, k, r) whose output puts word b right after word a (the realised last word of its first output child and
    first word of its second) scores
    SP[l, r-l, t] + BD[k, t] + P1[l, k-l, t] + P2[k, r-k, t] + BAL[k-l, r-k, t] + JB[a, b - a + L - 1, t].
    """
    n = tok.shape[0] - 2
    L = min(n, max_span)
    T = min(max_term, L)
    buf = np.empty(MAX_FEATURES_PER_TABLE_ENTRY, dtype=np.uint64)
    SP = np.zeros((n, L + 1, 3))
    FT = np.zeros((n, T + 1))
    BD = np.zeros((n + 1, 2))
    P1 = np.zeros((n, L + 1, 2))
    P2 = np.zeros((n, L + 1, 2))
    BAL = np.zeros((L + 1, L + 1, 2))
    for l in range(n):
        for d in range(1, min(L, n - l) + 1):
            r = l + d
            c = _span_features(tok, l, r, flags, buf)
            s0 = 0.0
            s1 = 0.0
            s2 = 0.0
            for j in range(c):
                row = _row(buf[j], mask)
                s0 += weights[row]
                s1 += weights[row + 1]
                s2 += weights[row + 2]
            SP[l, d, 0] = s0
            SP[l, d, 1] = s1
            SP[l, d, 2] = s2
            if d <= T:
                c = _terminal_features(tok, l, r, flags, buf)
                s2 = 0.0
                for j in range(c):
                    s2 += weights[_row(buf[j], mask) + 2]
                FT[l, d] = s2
            if d < L:
                # d as a left child [l, l+d) and as a right child [l, l+d) (split point l)
                c = _left_child_features(tok, l, r, flags, buf)
                s0 = 0.0
                s1 = 0.0
                for j in range(c):
                    row = _row(buf[j], mask)
                    s0 += weights[row]
                    s1 += weights[row + 1]
                P1[l, d, 0] = s0
                P1[l, d, 1] = s1
                c = _right_child_features(tok, l, r, flags, buf)
                s0 = 0.0
                s1 = 0.0
                for j in range(c):
                    row = _row(buf[j], mask)
                    s0 += weights[row]
                    s1 += weights[row + 1]
                P2[l, d, 0] = s0
                P2[l, d, 1] = s1
    for k in range(1, n):
        c = _boundary_features(tok, k, flags, buf)
        s0 = 0.0
        s1 = 0.0
        for j in range(c):
            row = _row(buf[j], mask)
            s0 += weights[row]
            s1 += weights[row + 1]
        BD[k, 0] = s0
        BD[k, 1] = s1
    for dl in range(1, L):
        for dr in range(1, L - dl + 1):
            c = _balance_features(dl, dr, flags, buf)
            s0 = 0.0
            s1 = 0.0
            for j in range(c):
                row = _row(buf[j], mask)
                s0 += weights[row]
                s1 += weights[row + 1]
            BAL[dl, dr, 0] = s0
            BAL[dl, dr, 1] = s1
    # junctions a -> b within one span: |b - a| <= L - 1, stored at JB[a, b - a + L - 1]
    JB = np.zeros((n, 2 * L - 1 if flags & FEAT_JUNCTION else 1, 2))
    if flags & FEAT_JUNCTION:
        for a in range(n):
            for b in range(max(0, a - L + 1), min(n, a + L)):
                if b == a:
                    continue
                c = _junction_features(tok, a, b, flags, buf)
                s0 = 0.0
                s1 = 0.0
                for j in range(c):
                    row = _row(buf[j], mask)
                    s0 += weights[row]
                    s1 += weights[row + 1]
                JB[a, b - a + L - 1, 0] = s0
                JB[a, b - a + L - 1, 1] = s1
    return SP, FT, BD, P1, P2, BAL, JB


# ---------------------------------------------------------------------------------------------------------------
# Loss tables of one sentence (training only).


@njit(cache=True)
def build_loss_tables(ranks, max_term):
    """Prefix counts for the edge-factored losses; `ranks` must be dense (0..max rank, ties allowed).

    PG[a, b] = #{i < a, j < b: rank_i > rank_j}, PL likewise with <, so the discordant pairs of an S edge are a
    rectangle sum of PG and those of an I edge of PL. FTAU[l, d]: discordant pairs inside [l, l+d) in source
    order. ABP[i]: breaks between source-adjacent words j, j+1 for j < i.
    """
    n = ranks.shape[0]
    PG = np.zeros((n + 1, n + 1), dtype=np.int64)
    PL = np.zeros((n + 1, n + 1), dtype=np.int64)
    for i in range(n):
        for j in range(n):
            g = 1 if ranks[i] > ranks[j] else 0
            s = 1 if ranks[i] < ranks[j] else 0
            PG[i + 1, j + 1] = PG[i, j + 1] + PG[i + 1, j] - PG[i, j] + g
            PL[i + 1, j + 1] = PL[i, j + 1] + PL[i + 1, j] - PL[i, j] + s
    T = max(1, min(max_term, n))
    FTAU = np.zeros((n, T + 1), dtype=np.int64)
    for l in range(n):
        acc = 0
        for d in range(1, min(T, n - l) + 1):
            j = l + d - 1
            for i in range(l, j):
                if ranks[i] > ranks[j]:
                    acc += 1
            FTAU[l, d] = acc
    ABP = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        ABP[i + 1] = ABP[i] + (_break(ranks[i], ranks[i + 1]) if i + 1 < n else 0)
    return PG, PL, FTAU, ABP


@njit(cache=True)
def _break(rank_a, rank_b):
    """1 when b directly after a in the order is a break of the fuzzy reordering score (dense ranks)."""
    return 0 if (rank_b == rank_a or rank_b == rank_a + 1) else 1


@njit(cache=True)
def _rect(P, l, k, r):
    return P[k, r] - P[l, r] - P[k, k] + P[l, k]


# ---------------------------------------------------------------------------------------------------------------
# CKY.


@njit(cache=True)
def _better(mode, score, loss, best_score, best_loss):
    if mode == MODE_PREDICT:
        return score > best_score
    if mode == MODE_LOSS_AUGMENTED:
        return score + loss > best_score + best_loss
    # oracle: lower loss; equal loss (to rounding) -> higher score
    if loss < best_loss - 1e-9:
        return True
    return loss <= best_loss + 1e-9 and score > best_score


@njit(cache=True)
def cky(n, max_term, max_span, tables, mode, ranks, loss_tables, tau_weight, chunk_weight):
    """Best derivation of one sentence under `mode`.

    Returns (order, edges, score, discordant, breaks): `order` the source indices in target order, `edges` an
    (m, 4) array of (type, l, k, r) in preorder (k = -1 for F), `score` the model score, and the discordant pairs
    and chunk breaks of the order (0 when ranks are not given, i.e. len(ranks) == 0).
    """
    # Constant arguments of jitted calls are written np.int64(-1), np.int64(0): a bare literal makes numba compile the
    # callee once more, for Literal[int] (compile time is what a fresh install waits for; see "Cold start").
    SP, FT, BD, P1, P2, BAL, JB = tables
    junctions = JB.shape[1] > 1
    use_loss = ranks.shape[0] == n  # losses are tracked whenever ranks are given; `mode` says how they count
    PG, PL, FTAU, ABP = loss_tables
    L = min(n, max_span)
    T = min(max_term, L)
    maxrank = -1
    if use_loss:
        for i in range(n):
            maxrank = max(maxrank, ranks[i])
    cs = np.full((n, L + 1), -np.inf)  # score
    cd = np.zeros((n, L + 1), dtype=np.int64)  # discordant pairs
    cb = np.zeros((n, L + 1), dtype=np.int64)  # breaks
    ct = np.full((n, L + 1), -1, dtype=np.int64)  # edge type
    ck = np.full((n, L + 1), -1, dtype=np.int64)  # split point
    cf = np.zeros((n, L + 1), dtype=np.int64)  # first output word
    cz = np.zeros((n, L + 1), dtype=np.int64)  # last output word
    root_is_cell = n <= L
    for d in range(1, L + 1):
        for l in range(0, n - d + 1):
            r = l + d
            root = root_is_cell and d == n
            b_s = -np.inf
            b_l = np.inf
            b_d = 0
            b_b = 0
            b_t = -1
            b_k = -1
            b_f = 0
            b_z = 0
            if d <= T:
                sc = SP[l, d, 2] + FT[l, d]
                dd = 0
                bb = 0
                if use_loss:
                    dd = FTAU[l, d]
                    bb = ABP[r - 1] - ABP[l]
                    if root:
                        bb += _break(np.int64(-1), ranks[l]) + _break(ranks[r - 1], maxrank + 1)
                lo = tau_weight * dd + chunk_weight * bb
                b_s, b_l, b_d, b_b, b_t, b_k, b_f, b_z = sc, lo, dd, bb, EDGE_F, -1, l, r - 1
            for k in range(l + 1, r):
                dl = k - l
                dr = r - k
                base = cs[l, dl] + cs[k, dr]
                for t in range(2):
                    sc = base + SP[l, d, t] + BD[k, t] + P1[l, dl, t] + P2[k, dr, t] + BAL[dl, dr, t]
                    if t == EDGE_S:
                        f = cf[l, dl]
                        z = cz[k, dr]
                        ja = cz[l, dl]
                        jb = cf[k, dr]
                    else:
                        f = cf[k, dr]
                        z = cz[l, dl]
                        ja = cz[k, dr]
                        jb = cf[l, dl]
                    if junctions:
                        sc += JB[ja, jb - ja + L - 1, t]
                    dd = 0
                    bb = 0
                    if use_loss:
                        dd = cd[l, dl] + cd[k, dr]
                        bb = cb[l, dl] + cb[k, dr]
                        dd += _rect(PG, l, k, r) if t == EDGE_S else _rect(PL, l, k, r)
                        bb += _break(ranks[ja], ranks[jb])
                        if root:
                            bb += _break(np.int64(-1), ranks[f]) + _break(ranks[z], maxrank + 1)
                    lo = tau_weight * dd + chunk_weight * bb
                    if b_t < 0 or _better(mode, sc, lo, b_s, b_l):
                        b_s, b_l, b_d, b_b, b_t, b_k, b_f, b_z = sc, lo, dd, bb, t, k, f, z
            cs[l, d] = b_s
            cd[l, d] = b_d
            cb[l, d] = b_b
            ct[l, d] = b_t
            ck[l, d] = b_k
            cf[l, d] = b_f
            cz[l, d] = b_z

    # Segments (only when n > L): a chain of cells composed straight without features.
    seg_start = np.zeros(n + 1, dtype=np.int64)
    if root_is_cell:
        score = cs[0, n]
        disc = cd[0, n]
        brk = cb[0, n]
    else:
        gs = np.full(n + 1, -np.inf)
        gd = np.zeros(n + 1, dtype=np.int64)
        gb = np.zeros(n + 1, dtype=np.int64)
        gz = np.zeros(n + 1, dtype=np.int64)  # last output word of the prefix [0, j)
        gs[0] = 0.0
        for j in range(1, n + 1):
            b_s = -np.inf
            b_l = np.inf
            found = False
            for d in range(1, min(L, j) + 1):
                i = j - d
                sc = gs[i] + cs[i, d]
                dd = 0
                bb = 0
                if use_loss:
                    dd = gd[i] + cd[i, d] + _rect(PG, np.int64(0), i, j)
                    bb = gb[i] + cb[i, d]
                    if i == 0:
                        bb += _break(np.int64(-1), ranks[cf[i, d]])
                    else:
                        bb += _break(ranks[gz[i]], ranks[cf[i, d]])
                    if j == n:
                        bb += _break(ranks[cz[i, d]], maxrank + 1)
                lo = tau_weight * dd + chunk_weight * bb
                if not found or _better(mode, sc, lo, b_s, b_l):
                    found = True
                    b_s, b_l = sc, lo
                    gs[j] = sc
                    gd[j] = dd
                    gb[j] = bb
                    gz[j] = cz[i, d]
                    seg_start[j] = i
        score = gs[n]
        disc = gd[n]
        brk = gb[n]

    # Read the derivation off the back pointers: an explicit stack of spans; F emits its words in source order.
    order = np.empty(n, dtype=np.int64)
    edges = np.empty((2 * n, 4), dtype=np.int64)
    m = 0
    stack_l = np.empty(2 * n + 1, dtype=np.int64)
    stack_r = np.empty(2 * n + 1, dtype=np.int64)
    sp = 0
    if root_is_cell:
        stack_l[0] = 0
        stack_r[0] = n
        sp = 1
    else:
        # segments [s_0=0, e_0), ..., [s_m, n): glue edges (GLUE, 0, s_i, e_i) for i >= 1, left-branching
        nseg = 0
        j = n
        while j > 0:
            nseg += 1
            j = seg_start[j]
        starts = np.empty(nseg, dtype=np.int64)
        ends = np.empty(nseg, dtype=np.int64)
        j = n
        for s in range(nseg - 1, -1, -1):
            starts[s] = seg_start[j]
            ends[s] = j
            j = seg_start[j]
        for s in range(nseg - 1, 0, -1):
            edges[m, 0] = EDGE_GLUE
            edges[m, 1] = 0
            edges[m, 2] = starts[s]
            edges[m, 3] = ends[s]
            m += 1
        # push segments so that the first segment is popped first
        for s in range(nseg - 1, -1, -1):
            stack_l[sp] = starts[s]
            stack_r[sp] = ends[s]
            sp += 1
    pos = 0
    while sp > 0:
        sp -= 1
        l = stack_l[sp]
        r = stack_r[sp]
        d = r - l
        t = ct[l, d]
        k = ck[l, d]
        edges[m, 0] = t
        edges[m, 1] = l
        edges[m, 2] = k
        edges[m, 3] = r
        m += 1
        if t == EDGE_F:
            for i in range(l, r):
                order[pos] = i
                pos += 1
        elif t == EDGE_S:
            stack_l[sp] = k
            stack_r[sp] = r
            stack_l[sp + 1] = l
            stack_r[sp + 1] = k
            sp += 2
        else:
            stack_l[sp] = l
            stack_r[sp] = k
            stack_l[sp + 1] = k
            stack_r[sp + 1] = r
            sp += 2
    return order, edges[:m].copy(), score, disc, brk


# ---------------------------------------------------------------------------------------------------------------
# Features of a derivation, edge losses of a derivation (tests and updates).


@njit(cache=True)
def _edge_keys(tok, t, l, k, r, ja, jb, mask, flags, buf, keys, vals, pos, sign):
    """Append the weight indices (row * 3 + column) of the features of one edge with value `sign`.

    (ja, jb): the output junction of an S/I edge (see `_realised_ends`)."""
    if t == EDGE_GLUE:
        return pos
    col = t
    c = _span_features(tok, l, r, flags, buf)
    for j in range(c):
        keys[pos] = _row(buf[j], mask) + col
        vals[pos] = sign
        pos += 1
    if t == EDGE_F:
        c = _terminal_features(tok, l, r, flags, buf)
        for j in range(c):
            keys[pos] = _row(buf[j], mask) + col
            vals[pos] = sign
            pos += 1
        return pos
    c = _boundary_features(tok, k, flags, buf)
    for j in range(c):
        keys[pos] = _row(buf[j], mask) + col
        vals[pos] = sign
        pos += 1
    c = _left_child_features(tok, l, k, flags, buf)
    for j in range(c):
        keys[pos] = _row(buf[j], mask) + col
        vals[pos] = sign
        pos += 1
    c = _right_child_features(tok, k, r, flags, buf)
    for j in range(c):
        keys[pos] = _row(buf[j], mask) + col
        vals[pos] = sign
        pos += 1
    c = _balance_features(k - l, r - k, flags, buf)
    for j in range(c):
        keys[pos] = _row(buf[j], mask) + col
        vals[pos] = sign
        pos += 1
    c = _junction_features(tok, ja, jb, flags, buf)
    for j in range(c):
        keys[pos] = _row(buf[j], mask) + col
        vals[pos] = sign
        pos += 1
    return pos


@njit(cache=True)
def _junction(t, l, k, r, first, last):
    """(a, b): the output puts word b right after word a at the junction of an S/I/GLUE edge's children."""
    if t == EDGE_I:
        return last[k, r], first[l, k]
    return last[l, k], first[k, r]


@njit(cache=True)
def feature_difference(tok, edges_plus, edges_minus, mask, flags):
    """Sparse phi(edges_plus) - phi(edges_minus) as (weight indices, values), zeros dropped, indices sorted."""
    per_edge = 4 * MAX_FEATURES_PER_TABLE_ENTRY
    cap = (edges_plus.shape[0] + edges_minus.shape[0]) * per_edge + 1
    keys = np.empty(cap, dtype=np.int64)
    vals = np.empty(cap)
    buf = np.empty(MAX_FEATURES_PER_TABLE_ENTRY, dtype=np.uint64)
    pos = np.int64(0)  # not a literal 0: one compiled _edge_keys, not two
    n = tok.shape[0] - 2
    for side in range(2):
        edges = edges_plus if side == 0 else edges_minus
        sign = 1.0 if side == 0 else -1.0
        first, last = _realised_ends(edges, n)
        for e in range(edges.shape[0]):
            t, l, k, r = edges[e, 0], edges[e, 1], edges[e, 2], edges[e, 3]
            ja, jb = (-1, -1) if t == EDGE_F else _junction(t, l, k, r, first, last)
            pos = _edge_keys(tok, t, l, k, r, ja, jb, mask, flags, buf, keys, vals, pos, sign)
    idx = np.argsort(keys[:pos], kind="mergesort")
    out_k = np.empty(pos, dtype=np.int64)
    out_v = np.empty(pos)
    m = 0
    i = 0
    while i < pos:
        key = keys[idx[i]]
        v = 0.0
        while i < pos and keys[idx[i]] == key:
            v += vals[idx[i]]
            i += 1
        if v != 0.0:
            out_k[m] = key
            out_v[m] = v
            m += 1
    return out_k[:m].copy(), out_v[:m].copy()


@njit(cache=True)
def derivation_score(tables, edges, n, max_span):
    """Model score of a derivation from the sentence's tables (sum of its edge scores)."""
    SP, FT, BD, P1, P2, BAL, JB = tables
    L = min(n, max_span)
    first, last = _realised_ends(edges, n)
    s = 0.0
    for e in range(edges.shape[0]):
        t, l, k, r = edges[e, 0], edges[e, 1], edges[e, 2], edges[e, 3]
        if t == EDGE_F:
            s += SP[l, r - l, 2] + FT[l, r - l]
        elif t != EDGE_GLUE:
            s += SP[l, r - l, t] + BD[k, t] + P1[l, k - l, t] + P2[k, r - k, t] + BAL[k - l, r - k, t]
            if JB.shape[1] > 1:
                a, b = _junction(t, l, k, r, first, last)
                s += JB[a, b - a + L - 1, t]
    return s


@njit(cache=True)
def _realised_ends(edges, n):
    """First and last output word of every span of the derivation, keyed by (l, r) in dense (n+1)^2 arrays."""
    first = np.full((n + 1, n + 1), -1, dtype=np.int64)
    last = np.full((n + 1, n + 1), -1, dtype=np.int64)
    # edges are in preorder: children come after parents, so resolve in reverse
    for e in range(edges.shape[0] - 1, -1, -1):
        t, l, k, r = edges[e, 0], edges[e, 1], edges[e, 2], edges[e, 3]
        if t == EDGE_F:
            first[l, r] = l
            last[l, r] = r - 1
        elif t == EDGE_I:
            first[l, r] = first[k, r]
            last[l, r] = last[l, k]
        else:
            first[l, r] = first[l, k]
            last[l, r] = last[k, r]
    return first, last


@njit(cache=True)
def derivation_loss(edges, n, ranks, loss_tables):
    """(discordant pairs, breaks) of a derivation summed edge by edge (the factorization the CKY uses)."""
    PG, PL, FTAU, ABP = loss_tables
    first, last = _realised_ends(edges, n)
    maxrank = -1
    for i in range(n):
        maxrank = max(maxrank, ranks[i])
    disc = 0
    brk = _break(np.int64(-1), ranks[first[0, n]]) + _break(ranks[last[0, n]], maxrank + 1)
    for e in range(edges.shape[0]):
        t, l, k, r = edges[e, 0], edges[e, 1], edges[e, 2], edges[e, 3]
        if t == EDGE_F:
            d = r - l
            disc += FTAU[l, d]
            brk += ABP[r - 1] - ABP[l]
        else:
            disc += _rect(PL, l, k, r) if t == EDGE_I else _rect(PG, l, k, r)
            a, b = _junction(t, l, k, r, first, last)
            brk += _break(ranks[a], ranks[b])
    return disc, brk


# ---------------------------------------------------------------------------------------------------------------
# Batched inference and training.


@njit(cache=True)
def _penalize_inversions(SP, inv_penalty):
    """SP[l, d, I] -= inv_penalty[d] for every span: an I edge must beat the best S edge of its cell by the
    penalty to be chosen, otherwise the span stays straight (the abstention of `inversion_penalties`)."""
    for l in range(SP.shape[0]):
        for d in range(1, SP.shape[1]):
            SP[l, d, 1] -= inv_penalty[d]


def inversion_penalties(max_span: int, margin: float, max_invert_span: int) -> np.ndarray:
    """Per span length d = 0..max_span, what an I edge over d words must beat the straight alternative by.

    `margin` (>= 0, in model-score units) for spans of up to `max_invert_span` words (0: any length) and no
    inversion at all beyond (a penalty of 1e30: an I edge can never win, since an S edge of the same cell exists
    and every score stays finite, which keeps the numpy path's argmax equal to the kernel's comparisons)."""
    pen = np.full(max_span + 1, float(margin))
    if max_invert_span > 0:
        pen[max_invert_span + 1:] = 1e30
    return pen


# Long sentences. The derivation of a sentence longer than max_span is already a chain of segments, so its time is
# linear in its length, but its tables and chart hold O(n * max_span) numbers (7 kB per word measured at the default
# max_span 64): a 100,000-word line, a file whose line ends were lost, would take 700 MB. A sentence of more than
# MAX_PARSE_WORDS words is therefore cut into ceil(n / MAX_PARSE_WORDS) pieces of equal length (at least
# MAX_PARSE_WORDS / 2 words each), each parsed with the words on either side of it as its boundary rows and composed
# straight like the segments of one chain: the chain search with a segment boundary forced at each cut. So one
# sentence never holds more than the tables of MAX_PARSE_WORDS words, and its time is the sum of its pieces'.
# Every feature of a span inside a piece is the one it has in the whole sentence except, next to a cut, the second
# word outside the span (FEAT_WIDE), which repeats the boundary row as it does at a sentence end. 256: no sentence
# of the WMT recipes' training data (CLEAN_MAX_LEN 250 words) is cut; benchmarks/long_sentences.py measured what
# cutting costs and saves (docs/runs/2026-12-long-sentences).
MAX_PARSE_WORDS = 256


@njit(cache=True)
def _parse_piece(tok, weights, mask, max_term, max_span, flags, inv_penalty):
    """(order, edges, score) of the best derivation of one sentence (n >= 1 words), uncut."""
    n = tok.shape[0] - 2
    no_ranks = np.empty(0, dtype=np.int64)
    predict = np.int64(MODE_PREDICT)  # a non-literal int: one compiled cky for all modes, not one per mode
    no_loss = (np.zeros((1, 1), dtype=np.int64), np.zeros((1, 1), dtype=np.int64),
               np.zeros((1, 1), dtype=np.int64), np.zeros(1, dtype=np.int64))
    tables = build_tables(tok, weights, mask, max_term, max_span, flags)
    _penalize_inversions(tables[0], inv_penalty)
    order, edges, score, _, _ = cky(n, max_term, max_span, tables, predict, no_ranks, no_loss, 0.0, 0.0)
    return order, edges, score


@njit(cache=True)
def _add_piece(order, glue, ng, trees, nt, o, e, a, b, first):
    """Put the derivation (o, e) of the piece [a, b) of a cut sentence into the sentence's order, its glue rows
    (in segment order, `ng` so far) and its subtree rows (`nt` so far); returns the new (ng, nt).

    cky writes a chain as its GLUE rows, last segment first, then each segment's subtree in preorder; a piece
    parsed as one cell has no GLUE row. The piece's first segment ends where its second begins (the k of its
    last GLUE row) or at its end, and gets a GLUE row of its own unless it starts the sentence."""
    for i in range(b - a):
        order[a + i] = o[i] + a
    m = e.shape[0]
    g = 0
    while g < m and e[g, 0] == EDGE_GLUE:
        g += 1
    first_end = e[g - 1, 2] if g > 0 else b - a
    if not first:
        glue[ng, 0] = EDGE_GLUE
        glue[ng, 1] = 0
        glue[ng, 2] = a
        glue[ng, 3] = a + first_end
        ng += 1
    for i in range(g - 1, -1, -1):
        glue[ng, 0] = EDGE_GLUE
        glue[ng, 1] = 0
        glue[ng, 2] = e[i, 2] + a
        glue[ng, 3] = e[i, 3] + a
        ng += 1
    for i in range(g, m):
        trees[nt, 0] = e[i, 0]
        trees[nt, 1] = e[i, 1] + a
        trees[nt, 2] = e[i, 2] + a if e[i, 2] >= 0 else e[i, 2]
        trees[nt, 3] = e[i, 3] + a
        nt += 1
    return ng, nt


@njit(cache=True)
def _join_pieces(glue, ng, trees, nt):
    """The edges of a cut sentence as cky writes a chain: GLUE rows last segment first, then the subtrees."""
    edges = np.empty((ng + nt, 4), dtype=np.int64)
    for i in range(ng):
        for j in range(4):
            edges[i, j] = glue[ng - 1 - i, j]
    for i in range(nt):
        for j in range(4):
            edges[ng + i, j] = trees[i, j]
    return edges


@njit(cache=True)
def _parse_sentence(tok, weights, mask, max_term, max_span, flags, inv_penalty, max_words):
    """(order, edges, score) of one sentence of n >= 1 words; cut into pieces when n > max_words (see
    MAX_PARSE_WORDS). The score of a cut sentence is the sum of its pieces' (GLUE edges carry no features)."""
    n = tok.shape[0] - 2
    if n <= max_words:
        return _parse_piece(tok, weights, mask, max_term, max_span, flags, inv_penalty)
    pieces = (n + max_words - 1) // max_words
    order = np.empty(n, dtype=np.int64)
    glue = np.empty((n, 4), dtype=np.int64)
    trees = np.empty((2 * n, 4), dtype=np.int64)
    ng = 0
    nt = 0
    score = 0.0
    for p in range(pieces):
        a = p * n // pieces
        b = (p + 1) * n // pieces
        o, e, sc = _parse_piece(tok[a:b + 2].copy(), weights, mask, max_term, max_span, flags, inv_penalty)
        score += sc
        ng, nt = _add_piece(order, glue, ng, trees, nt, o, e, a, b, p == 0)
    return order, _join_pieces(glue, ng, trees, nt), score


@njit(cache=True)
def _parse_batch_jit(tok_flat, offsets, weights, mask, max_term, max_span, flags, inv_penalty):
    """Best derivations of sentences tok_flat[offsets[s]:offsets[s+1]] (each with its two boundary rows).

    `inv_penalty[d]` is subtracted from the score of every I edge over a span of d words (abstention, see
    `inversion_penalties`; zeros: the plain model score). Returns (orders, order_offsets, edges, edge_offsets,
    scores): concatenated orders and (m, 4) edge arrays, and each derivation's score (penalties included; 0 for an
    empty sentence).
    """
    ns = offsets.shape[0] - 1
    order_offsets = np.zeros(ns + 1, dtype=np.int64)
    for s in range(ns):
        order_offsets[s + 1] = order_offsets[s] + (offsets[s + 1] - offsets[s] - 2)
    orders = np.empty(order_offsets[ns], dtype=np.int64)
    edges_all = np.empty((2 * order_offsets[ns] + 1, 4), dtype=np.int64)
    edge_offsets = np.zeros(ns + 1, dtype=np.int64)
    scores = np.zeros(ns)
    for s in range(ns):
        tok = tok_flat[offsets[s]:offsets[s + 1]].copy()  # C-contiguous: one compiled specialization
        n = tok.shape[0] - 2
        if n == 0:
            edge_offsets[s + 1] = edge_offsets[s]
            continue
        order, edges, score = _parse_sentence(tok, weights, mask, max_term, max_span, flags, inv_penalty,
                                              np.int64(MAX_PARSE_WORDS))
        scores[s] = score
        # Element loops, not slice assignments: a slice assignment compiles numba's shape-mismatch error message
        # (string formatting, about 4 s of the 15 s CPU that the first call spent compiling).
        o = order_offsets[s]
        for i in range(n):
            orders[o + i] = order[i]
        m = edges.shape[0]
        e0 = edge_offsets[s]
        for i in range(m):
            for j in range(4):
                edges_all[e0 + i, j] = edges[i, j]
        edge_offsets[s + 1] = e0 + m
    return orders, order_offsets, edges_all[:edge_offsets[ns]].copy(), edge_offsets, scores


@njit(cache=True)
def train_batch(tok_flat, offsets, ranks_flat, rank_offsets, sentence_ids, weights, sums, counter, mask,
                max_term, max_span, flags, tau_weights, chunk_weights, update_rule, pa_c):
    """One online pass over `sentence_ids` (in that order), updating `weights` in place.

    Per sentence: the loss-augmented derivation y- = argmax score + loss and the latent oracle y+ = the lowest-
    loss derivation (ties by score); if loss(y-) > loss(y+) the weights move by step * (phi(y+) - phi(y-)).
    `sums` accumulates (examples before this one) * update, so that averaged = weights - sums / counter is the
    mean of the weights after each example; `counter` is a one-element array counting examples seen. tau_weights/chunk_weights: per-sentence loss weights (normalization
    is the caller's choice). Returns (updates, total loss of y-, total loss of y+, total oracle discordant pairs,
    total oracle breaks).
    """
    augmented = np.int64(MODE_LOSS_AUGMENTED)  # non-literal ints: one compiled cky for all modes
    oracle = np.int64(MODE_ORACLE)
    updates = 0
    total_pred = 0.0
    total_orc = 0.0
    orc_disc = 0
    orc_brk = 0
    for q in range(sentence_ids.shape[0]):
        s = sentence_ids[q]
        tok = tok_flat[offsets[s]:offsets[s + 1]].copy()  # C-contiguous: one compiled specialization
        ranks = ranks_flat[rank_offsets[s]:rank_offsets[s + 1]].copy()
        n = tok.shape[0] - 2
        counter[0] += 1.0
        if n < 2:
            continue
        tw = tau_weights[s]
        cw = chunk_weights[s]
        tables = build_tables(tok, weights, mask, max_term, max_span, flags)
        loss_tables = build_loss_tables(ranks, max_term)
        _, e_pred, s_pred, d_pred, b_pred = cky(n, max_term, max_span, tables, augmented, ranks, loss_tables, tw, cw)
        _, e_orc, s_orc, d_orc, b_orc = cky(n, max_term, max_span, tables, oracle, ranks, loss_tables, tw, cw)
        l_pred = tw * d_pred + cw * b_pred
        l_orc = tw * d_orc + cw * b_orc
        total_pred += l_pred
        total_orc += l_orc
        orc_disc += d_orc
        orc_brk += b_orc
        if l_pred <= l_orc + 1e-12:
            continue
        keys, vals = feature_difference(tok, e_orc, e_pred, mask, flags)
        if keys.shape[0] == 0:
            continue
        if update_rule == UPDATE_PERCEPTRON:
            step = 1.0
        else:
            norm2 = 0.0
            for j in range(vals.shape[0]):
                norm2 += vals[j] * vals[j]
            violation = (l_pred - l_orc) - (s_orc - s_pred)
            if violation <= 0.0:
                continue
            step = min(pa_c, violation / norm2)
        # averaged = mean over examples of the weights after each example: an update at example t (counter = t)
        # is present in N - t + 1 of N of them, i.e. delta - delta * (t - 1) / N
        c = counter[0] - 1.0
        for j in range(keys.shape[0]):
            delta = step * vals[j]
            weights[keys[j]] += delta
            sums[keys[j]] += c * delta
        updates += 1
    return updates, total_pred, total_orc, orc_disc, orc_brk


# ---------------------------------------------------------------------------------------------------------------
# Cold start: inference while the kernels compile.
#
# Compiling the inference kernels (_parse_batch_jit and everything it calls) costs about 10 s of CPU, paid by the
# first process after an install (later processes load numba's on-disk cache: cache=True above). So that the
# first sentences do not wait for it, `parse_batch` compiles in a background thread and meanwhile parses with
# the numpy code below, which mirrors build_tables and cky (MODE_PREDICT) operation for operation: the same
# hashes, the same sums in the same order, the same first-best tie-breaking. Its output is identical to the
# compiled kernel's (tests/test_cold_start.py); it is slower (vectorized over spans, not compiled), which is why it
# only bridges the compile.

# _len_bucket's pure-Python original: calling the jitted one here would compile it
_LEN_BUCKETS = np.array([_len_bucket.py_func(d) for d in range(1025)], dtype=np.uint64)


def _np_mix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> _S33)
    h = h * _M1
    h = h ^ (h >> _S33)
    h = h * _M2
    return h ^ (h >> _S33)


def _np_f1(tpl: np.uint64, a: np.ndarray) -> np.ndarray:
    return _np_mix(tpl * _K + a)


def _np_f2(tpl: np.uint64, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _np_mix(_np_mix(tpl * _K + a) * _K + b)


def _np_f3(tpl: np.uint64, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    return _np_mix(_np_mix(_np_mix(tpl * _K + a) * _K + b) * _K + c)


def _np_sum(hashes: list[np.ndarray], weights: np.ndarray, mask: np.uint64, column: int, size: int) -> np.ndarray:
    """Per item, 0.0 + the weights of its features in buffer order: the kernels' sums, term by term."""
    acc = np.zeros(size)
    for h in hashes:
        acc += weights[(h & mask).astype(np.int64) * N_COLUMNS + column]
    return acc


def _np_bucket(d: np.ndarray) -> np.ndarray:
    return _LEN_BUCKETS[np.minimum(d, _LEN_BUCKETS.shape[0] - 1)]


def _np_build_tables(tok: np.ndarray, weights: np.ndarray, mask: np.uint64, max_term: int, max_span: int,
                     flags: int) -> tuple[np.ndarray, ...]:
    """build_tables for one sentence, vectorized over the spans/split points of each table."""
    n = tok.shape[0] - 2
    L = min(n, max_span)
    T = min(max_term, L)
    views = tok.shape[1]
    SP = np.zeros((n, L + 1, 3))
    FT = np.zeros((n, T + 1))
    BD = np.zeros((n + 1, 2))
    P1 = np.zeros((n, L + 1, 2))
    P2 = np.zeros((n, L + 1, 2))
    BAL = np.zeros((L + 1, L + 1, 2))
    # every span [l, l + d), d <= min(L, n - l), in the kernel's loop order (l outer, d inner)
    ls, ds = [], []
    for l in range(n):
        m = min(L, n - l)
        ls.append(np.full(m, l, dtype=np.int64))
        ds.append(np.arange(1, m + 1, dtype=np.int64))
    l_all = np.concatenate(ls)
    d_all = np.concatenate(ds)
    r_all = l_all + d_all
    size = l_all.shape[0]
    if flags & FEAT_SPAN:
        lb = _np_bucket(d_all)
        hs = [_np_f1(T_BIAS, np.zeros(size, dtype=np.uint64)), _np_f1(T_LEN, lb)]
        for v in range(views):
            o = np.uint64(v) * _VIEW_STRIDE
            sl, sr, sb, sa = tok[l_all + 1, v], tok[r_all, v], tok[l_all, v], tok[r_all + 1, v]
            hs += [_np_f1(T_SL + o, sl), _np_f1(T_SR + o, sr), _np_f1(T_SB + o, sb), _np_f1(T_SA + o, sa),
                   _np_f2(T_SL_SR + o, sl, sr), _np_f2(T_SB_SL + o, sb, sl), _np_f2(T_SR_SA + o, sr, sa),
                   _np_f2(T_SB_SA + o, sb, sa), _np_f2(T_SL_LEN + o, sl, lb), _np_f2(T_SR_LEN + o, sr, lb)]
            if flags & FEAT_WIDE:
                wide = d_all > 1
                sl2 = np.where(wide, tok[np.minimum(l_all + 2, n + 1), v], _ZERO)
                sr2 = np.where(wide, tok[r_all - 1, v], _ZERO)
                sb2 = tok[np.maximum(l_all - 1, 0), v]
                sa2 = tok[np.minimum(r_all + 2, n + 1), v]
                hs += [_np_f1(T_W_SL2 + o, sl2), _np_f1(T_W_SR2 + o, sr2), _np_f1(T_W_SB2 + o, sb2),
                       _np_f1(T_W_SA2 + o, sa2), _np_f2(T_W_SLB + o, sl, sl2), _np_f2(T_W_SRB + o, sr2, sr),
                       _np_f2(T_W_SBB + o, sb2, sb), _np_f2(T_W_SAB + o, sa, sa2)]
            if flags & FEAT_CONTEXT:
                hs += [_np_f2(T_C_SB_LEN + o, sb, lb), _np_f2(T_C_SA_LEN + o, sa, lb),
                       _np_f3(T_C_SL_SR_LEN + o, sl, sr, lb), _np_f3(T_C_SB_SA_LEN + o, sb, sa, lb)]
        for t in range(3):
            SP[l_all, d_all, t] = _np_sum(hs, weights, mask, t, size)
    if flags & FEAT_TERMINAL:
        term = d_all <= T
        tl, td = l_all[term], d_all[term]
        hs = []
        for v in range(views):
            h = np.full(tl.shape[0], (T_TERM_SEQ + np.uint64(v) * _VIEW_STRIDE) * _K)
            for i in range(T):  # word i of each span, for the spans that have one
                has = td > i
                h = np.where(has, _np_mix(h * _K + tok[np.minimum(tl + 1 + i, n + 1), v]), h)
            hs.append(h)
        FT[tl, td] = _np_sum(hs, weights, mask, 2, tl.shape[0])
    if flags & FEAT_CHILDREN:
        child = d_all < L
        cl, cd, cr = l_all[child], d_all[child], r_all[child]
        # [cl, cr) as a left child (split point cr) and as a right child (split point cl)
        left = [_np_f1(T_LEFT_LEN, _np_bucket(cd))]
        right = [_np_f1(T_RIGHT_LEN, _np_bucket(cd))]
        for v in range(views):
            o = np.uint64(v) * _VIEW_STRIDE
            ll, lr, rl = tok[cl + 1, v], tok[cr, v], tok[cr + 1, v]
            left += [_np_f2(T_LL_RL + o, ll, rl), _np_f2(T_LL_LR + o, ll, lr)]
            if flags & FEAT_OUTSIDE_CHILD:
                left.append(_np_f2(T_SB_RL + o, tok[cl, v], rl))
            if flags & FEAT_CONTEXT:
                left += [_np_f2(T_C_LL_LEN + o, ll, _np_bucket(cd)), _np_f2(T_C_LR_LEN + o, lr, _np_bucket(cd))]
            lr, rl, rr = tok[cl, v], tok[cl + 1, v], tok[cr, v]
            right += [_np_f2(T_LR_RR + o, lr, rr), _np_f2(T_RL_RR + o, rl, rr)]
            if flags & FEAT_OUTSIDE_CHILD:
                right.append(_np_f2(T_LR_SA + o, lr, tok[cr + 1, v]))
            if flags & FEAT_CONTEXT:
                right += [_np_f2(T_C_RL_LEN + o, rl, _np_bucket(cd)), _np_f2(T_C_RR_LEN + o, rr, _np_bucket(cd))]
        for t in range(2):
            P1[cl, cd, t] = _np_sum(left, weights, mask, t, cl.shape[0])
            P2[cl, cd, t] = _np_sum(right, weights, mask, t, cl.shape[0])
        ks = np.arange(1, n, dtype=np.int64)
        hs = []
        for v in range(views):
            o = np.uint64(v) * _VIEW_STRIDE
            lr, rl = tok[ks, v], tok[ks + 1, v]
            hs += [_np_f1(T_LR + o, lr), _np_f1(T_RL + o, rl), _np_f2(T_LR_RL + o, lr, rl)]
            if flags & FEAT_WIDE:
                hs += [_np_f2(T_W_LRB + o, tok[ks - 1, v], lr), _np_f2(T_W_RLB + o, rl, tok[ks + 2, v])]
            if flags & FEAT_CONTEXT:
                hs += [_np_f3(T_C_PREV_LR_RL + o, tok[ks - 1, v], lr, rl),
                       _np_f3(T_C_LR_RL_NEXT + o, lr, rl, tok[ks + 2, v])]
        for t in range(2):
            BD[ks, t] = _np_sum(hs, weights, mask, t, ks.shape[0])
        dl, dr = np.nonzero(np.add.outer(np.arange(L + 1), np.arange(L + 1)) <= L)
        keep = (dl >= 1) & (dl < L) & (dr >= 1)
        dl, dr = dl[keep], dr[keep]
        sign = np.where(dl == dr, 0, np.where(dl > dr, 1, 2)).astype(np.uint64)
        hs = [_np_f1(T_BAL_SIGN, sign), _np_f2(T_BAL_LENS, _np_bucket(dl), _np_bucket(dr))]
        for t in range(2):
            BAL[dl, dr, t] = _np_sum(hs, weights, mask, t, dl.shape[0])
    JB = np.zeros((n, 2 * L - 1 if flags & FEAT_JUNCTION else 1, 2))
    if flags & FEAT_JUNCTION:
        a, b = np.nonzero(np.abs(np.subtract.outer(np.arange(n), np.arange(n))) <= L - 1)
        keep = a != b
        a, b = a[keep], b[keep]
        delta = b - a
        dist = np.where(np.abs(delta) <= 3, np.abs(delta), np.where(np.abs(delta) <= 6, 4, 5))
        dist = np.where(delta > 0, dist, 10 + dist).astype(np.uint64)
        hs = [_np_f1(T_JUNC_DIST, dist)]
        for v in range(views):
            hs.append(_np_f2(T_JUNC + np.uint64(v) * _VIEW_STRIDE, tok[a + 1, v], tok[b + 1, v]))
        for t in range(2):
            JB[a, delta + L - 1, t] = _np_sum(hs, weights, mask, t, a.shape[0])
    return SP, FT, BD, P1, P2, BAL, JB


def _np_parse(tok: np.ndarray, weights: np.ndarray, mask: np.uint64, max_term: int, max_span: int,
              flags: int, inv_penalty: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(order, edges, score) of cky(MODE_PREDICT) for one sentence of n >= 1 words, vectorized over the cells of a
    width.

    The kernel keeps the first candidate and replaces it only by a strictly higher score, scanning F, then
    k = l+1.. with S before I; np.argmax over the candidates in that order returns that same first maximum
    (scores are finite: the caller checks the weights)."""
    n = tok.shape[0] - 2
    SP, FT, BD, P1, P2, BAL, JB = _np_build_tables(tok, weights, mask, max_term, max_span, flags)
    SP[:, 1:, 1] -= inv_penalty[1:SP.shape[1]]  # _penalize_inversions, the same subtraction per entry
    junctions = JB.shape[1] > 1
    L = min(n, max_span)
    T = min(max_term, L)
    cs = np.full((n, L + 1), -np.inf)
    ct = np.full((n, L + 1), -1, dtype=np.int64)
    ck = np.full((n, L + 1), -1, dtype=np.int64)
    cf = np.zeros((n, L + 1), dtype=np.int64)
    cz = np.zeros((n, L + 1), dtype=np.int64)
    for d in range(1, L + 1):
        l = np.arange(0, n - d + 1, dtype=np.int64)
        cand = []
        if d <= T:
            cand.append((SP[l, d, 2] + FT[l, d])[:, None])
        if d > 1:
            dl = np.arange(1, d, dtype=np.int64)[None, :]
            dr = d - dl
            k = l[:, None] + dl
            lb = np.broadcast_to(l[:, None], k.shape)
            base = cs[lb, dl] + cs[k, dr]
            both = np.empty(k.shape + (2,))
            for t in range(2):
                sc = base + SP[l, d, t][:, None]
                sc = sc + BD[k, t]
                sc = sc + P1[lb, dl, t]
                sc = sc + P2[k, dr, t]
                sc = sc + BAL[dl, dr, t]
                if junctions:
                    ja, jb = (cz[lb, dl], cf[k, dr]) if t == EDGE_S else (cz[k, dr], cf[lb, dl])
                    sc = sc + JB[ja, jb - ja + L - 1, t]
                both[:, :, t] = sc
            cand.append(both.reshape(l.shape[0], -1))  # k-major, S before I: the kernel's scan order
        scores = np.concatenate(cand, axis=1)
        best = np.argmax(scores, axis=1)
        cs[l, d] = scores[l, best]
        is_f = np.zeros(l.shape[0], dtype=bool)
        if d <= T:
            is_f = best == 0
            best = best - 1
        t = np.where(is_f, EDGE_F, best % 2)
        k = np.where(is_f, -1, l + 1 + best // 2)
        kk = np.where(is_f, l, k)  # any valid index where F ignores it
        dl, dr = kk - l, l + d - kk
        ct[l, d] = t
        ck[l, d] = k
        cf[l, d] = np.where(is_f, l, np.where(t == EDGE_S, cf[l, dl], cf[kk, dr]))
        cz[l, d] = np.where(is_f, l + d - 1, np.where(t == EDGE_S, cz[kk, dr], cz[l, dl]))
    edges: list[tuple[int, int, int, int]] = []
    stack: list[tuple[int, int]] = []
    if n <= L:
        stack.append((0, n))
        score = float(cs[0, n])
    else:
        # segmentation DP (the kernel's, without losses): the first best segment length d = 1, 2, ...
        gs = np.full(n + 1, -np.inf)
        gs[0] = 0.0
        seg_start = np.zeros(n + 1, dtype=np.int64)
        for j in range(1, n + 1):
            d = np.arange(1, min(L, j) + 1)
            i = j - d
            sc = gs[i] + cs[i, d]
            b = int(np.argmax(sc))
            gs[j] = sc[b]
            seg_start[j] = i[b]
        bounds = []
        j = n
        while j > 0:
            bounds.append((int(seg_start[j]), j))
            j = int(seg_start[j])
        bounds.reverse()
        edges += [(EDGE_GLUE, 0, s, e) for s, e in reversed(bounds[1:])]
        stack += reversed(bounds)
        score = float(gs[n])
    ct_l, ck_l = ct.tolist(), ck.tolist()
    order: list[int] = []
    while stack:
        l, r = stack.pop()
        t, k = ct_l[l][r - l], ck_l[l][r - l]
        edges.append((t, l, k, r))
        if t == EDGE_F:
            order.extend(range(l, r))
        elif t == EDGE_S:
            stack += [(k, r), (l, k)]
        else:
            stack += [(l, k), (k, r)]
    return np.array(order, dtype=np.int64), np.array(edges, dtype=np.int64).reshape(-1, 4), score


def _np_parse_sentence(tok: np.ndarray, weights: np.ndarray, mask: np.uint64, max_term: int, max_span: int,
                       flags: int, inv_penalty: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """_parse_sentence with MAX_PARSE_WORDS by the numpy path: the same pieces, joined by the same (interpreted)
    code."""
    n = tok.shape[0] - 2
    if n <= MAX_PARSE_WORDS:
        return _np_parse(tok, weights, mask, max_term, max_span, flags, inv_penalty)
    pieces = -(-n // MAX_PARSE_WORDS)
    order = np.empty(n, dtype=np.int64)
    glue = np.empty((n, 4), dtype=np.int64)
    trees = np.empty((2 * n, 4), dtype=np.int64)
    ng = nt = 0
    score = 0.0
    for p in range(pieces):
        a, b = p * n // pieces, (p + 1) * n // pieces
        o, e, sc = _np_parse(np.ascontiguousarray(tok[a:b + 2]), weights, mask, max_term, max_span, flags,
                             inv_penalty)
        score += sc
        ng, nt = _add_piece.py_func(order, glue, ng, trees, nt, o, e, a, b, p == 0)
    return order, _join_pieces.py_func(glue, ng, trees, nt), score


def _np_parse_batch(tok_flat: np.ndarray, offsets: np.ndarray, weights: np.ndarray, mask: np.uint64, max_term: int,
                    max_span: int, flags: int, inv_penalty: np.ndarray,
                    stop) -> tuple[list[np.ndarray], list[np.ndarray], list[float], int]:
    """Parse sentences in order until `stop()` is true: (orders, edges, scores) of the sentences done and their
    count."""
    orders, edges, scores = [], [], []
    s = 0
    with np.errstate(over="ignore"):  # the hashes wrap around in uint64 arithmetic, as in the kernels
        while s < offsets.shape[0] - 1 and not stop():
            tok = np.ascontiguousarray(tok_flat[offsets[s]:offsets[s + 1]])
            if tok.shape[0] > 2:
                o, e, sc = _np_parse_sentence(tok, weights, mask, max_term, max_span, flags, inv_penalty)
            else:
                o, e, sc = np.empty(0, dtype=np.int64), np.empty((0, 4), dtype=np.int64), 0.0
            orders.append(o)
            edges.append(e)
            scores.append(sc)
            s += 1
    return orders, edges, scores, s


COLD_START_ENV = "XLPOS_BTG_COLD_START"  # "interpreted" (default): the numpy path bridges the compile; "wait": don't


class _Compile:
    """One background compilation of _parse_batch_jit for one argument signature."""

    def __init__(self, signature: tuple) -> None:
        self.done = threading.Event()
        # Not a daemon: a process that finishes its sentences before the compile does waits for it at exit, so that
        # the compiled code reaches numba's cache and the next process starts warm.
        self.thread = threading.Thread(target=self._run, args=(signature,), name="xlpos-btg-compile")
        self.thread.start()

    def _run(self, signature: tuple) -> None:
        try:
            _parse_batch_jit.compile(signature)  # loads from numba's cache when it can
        except Exception:  # noqa: BLE001 - the next call of the kernel compiles in the caller and raises it there
            pass
        finally:
            self.done.set()


_compiles: dict[tuple, _Compile] = {}
_compiles_lock = threading.Lock()


def _wait_for_compiles() -> None:
    for c in list(_compiles.values()):
        c.thread.join()


# A fork while the thread holds numba's compiler lock would leave the child a lock nobody releases (its next
# compile would hang): forks wait for the compile instead, as they would have before it ran in the background.
os.register_at_fork(before=_wait_for_compiles)


def _in_disk_cache(signature: tuple) -> bool:
    """Whether numba's cache holds _parse_batch_jit for these argument types, by the lookup numba itself does
    (Dispatcher.compile -> Cache.load_overload: the index for the source file's stamp, keyed by signature, CPU and
    bytecode). numba internals: if they change, the answer is False and the first call bridges a cache load."""
    try:
        cache = _parse_batch_jit._cache
        key = cache._index_key(signature, _parse_batch_jit.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:  # noqa: BLE001 - a missing or unreadable cache, or another numba: not cached
        return False


def wait_for_compile() -> None:
    """Block until the background compilations that `parse_batch` started have finished (benchmarks, tests)."""
    _wait_for_compiles()


def _parse_scored(tok_flat: np.ndarray, offsets: np.ndarray, weights: np.ndarray, mask: np.uint64, max_term: int,
                  max_span: int, flags: int, inv_penalty: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """_parse_batch_jit's (orders, order_offsets, edges, edge_offsets, scores), bridged by the numpy path while the
    kernel compiles (see `parse_batch`)."""
    args = (tok_flat, offsets, weights, mask, max_term, max_span, flags, inv_penalty)
    # Once any version is compiled, straight to the kernel: numba.typeof of the arguments costs more than
    # parsing a short sentence, and a further signature (unusual argument types) just compiles there, as before.
    if _parse_batch_jit.overloads or os.environ.get(COLD_START_ENV, "interpreted") == "wait":
        return _parse_batch_jit(*args)
    signature = tuple(typeof(a) for a in args)
    if _in_disk_cache(signature):
        return _parse_batch_jit(*args)  # loading the cached code takes a fraction of a second: not worth bridging
    with _compiles_lock:
        compile_ = _compiles.get(signature)
        if compile_ is None:
            compile_ = _compiles[signature] = _Compile(signature)
    if compile_.done.is_set() or not np.isfinite(weights).all() or not np.isfinite(inv_penalty).all():
        # the numpy path's argmax matches the kernel's strict comparisons only for finite scores
        return _parse_batch_jit(*args)
    orders, edges, scores, done = _np_parse_batch(tok_flat, offsets, weights, mask, max_term, max_span, flags,
                                                  inv_penalty, compile_.done.is_set)
    ns = offsets.shape[0] - 1
    if done < ns:
        rest = np.ascontiguousarray(offsets[done:] - offsets[done])
        r_orders, r_order_offsets, r_edges, r_edge_offsets, r_scores = _parse_batch_jit(
            tok_flat[offsets[done]:], rest, weights, mask, max_term, max_span, flags, inv_penalty)
        for s in range(ns - done):
            orders.append(r_orders[r_order_offsets[s]:r_order_offsets[s + 1]])
            edges.append(r_edges[r_edge_offsets[s]:r_edge_offsets[s + 1]])
        scores.extend(r_scores.tolist())
    return _concat(orders, edges) + (np.array(scores, dtype=np.float64),)


def _concat(orders: list[np.ndarray], edges: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-sentence orders and edge arrays -> (orders, order_offsets, edges, edge_offsets), concatenated."""
    ns = len(orders)
    order_offsets = np.zeros(ns + 1, dtype=np.int64)
    np.cumsum([o.shape[0] for o in orders], out=order_offsets[1:])
    edge_offsets = np.zeros(ns + 1, dtype=np.int64)
    np.cumsum([e.shape[0] for e in edges], out=edge_offsets[1:])
    all_orders = np.concatenate(orders) if orders else np.empty(0, dtype=np.int64)
    all_edges = np.concatenate(edges) if edges else np.empty((0, 4), dtype=np.int64)
    return all_orders.astype(np.int64, copy=False), order_offsets, all_edges.astype(np.int64, copy=False), edge_offsets


def fallback_thresholds(lengths: np.ndarray, fallback_length: int, fallback_margin: float) -> np.ndarray:
    """What the best derivation of a sentence of n words must beat the best straight one by (model-score units):
    fallback_margin * (n - fallback_length)**2 for sentences longer than fallback_length words, else 0 (no test).
    fallback_margin 0 (or fallback_length 0): none (the plain model)."""
    excess = np.maximum(np.asarray(lengths, dtype=np.float64) - fallback_length, 0.0)
    if fallback_margin <= 0 or fallback_length <= 0:
        return np.zeros_like(excess)
    return fallback_margin * excess * excess


def parse_batch(tok_flat: np.ndarray, offsets: np.ndarray, weights: np.ndarray, mask: np.uint64, max_term: int,
                max_span: int, flags: int, inv_penalty: np.ndarray | None = None, fallback_length: int = 0,
                fallback_margin: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Best derivations of sentences tok_flat[offsets[s]:offsets[s+1]] (each with its two boundary rows).

    `inv_penalty`: float64, one entry per span length 0..max_span (see `inversion_penalties`); None: zeros.
    Returns (orders, order_offsets, edges, edge_offsets): concatenated orders and (m, 4) edge arrays.
    With compiled code (this process compiled it, or numba's cache had it) this is _parse_batch_jit. Otherwise
    the compile starts in a background thread and sentences are parsed by the numpy path until it is done,
    the rest by the compiled kernel: same output, first sentence in well under a second instead of after the
    compile (see "Cold start" above). XLPOS_BTG_COLD_START=wait compiles first instead, as before.

    Sentence-level fallback (abstention on inputs longer than training): a sentence of n > fallback_length words
    whose best derivation (with the inversion penalties) does not beat its best straight derivation (no I edge,
    i.e. the monotone order) by `fallback_thresholds` gets that straight derivation instead. The straight one is
    found by a second search of those sentences only, with every I edge penalized by 1e30 (so in-domain input,
    at most fallback_length words, costs nothing more).
    """
    if inv_penalty is None:
        inv_penalty = np.zeros(max_span + 1)
    if inv_penalty.shape != (max_span + 1,) or inv_penalty.dtype != np.float64:
        raise ValueError(f"inv_penalty must be float64 of shape ({max_span + 1},), got {inv_penalty.dtype} "
                         f"{inv_penalty.shape}")
    orders, order_offsets, edges, edge_offsets, scores = _parse_scored(tok_flat, offsets, weights, mask, max_term,
                                                                       max_span, flags, inv_penalty)
    lengths = np.diff(offsets) - 2
    thresholds = fallback_thresholds(lengths, fallback_length, fallback_margin)
    tested = np.flatnonzero(thresholds > 0)
    if tested.size == 0:
        return orders, order_offsets, edges, edge_offsets
    sub_tok = np.concatenate([tok_flat[offsets[s]:offsets[s + 1]] for s in tested])
    sub_offsets = np.zeros(tested.size + 1, dtype=np.int64)
    np.cumsum(lengths[tested] + 2, out=sub_offsets[1:])
    straight = np.full(max_span + 1, 1e30)  # no I edge can win (finite: see inversion_penalties)
    s_orders, s_order_offsets, s_edges, s_edge_offsets, s_scores = _parse_scored(
        sub_tok, sub_offsets, weights, mask, max_term, max_span, flags, straight)
    fall = scores[tested] - s_scores < thresholds[tested]
    if not fall.any():
        return orders, order_offsets, edges, edge_offsets
    out_orders = [orders[order_offsets[s]:order_offsets[s + 1]] for s in range(lengths.shape[0])]
    out_edges = [edges[edge_offsets[s]:edge_offsets[s + 1]] for s in range(lengths.shape[0])]
    for j in np.flatnonzero(fall):
        s = tested[j]
        out_orders[s] = s_orders[s_order_offsets[j]:s_order_offsets[j + 1]]
        out_edges[s] = s_edges[s_edge_offsets[j]:s_edge_offsets[j + 1]]
    return _concat(out_orders, out_edges)


@dataclass(frozen=True)
class ParseResult:
    """One sentence's best derivation: the order (source indices in target order) and its edges."""

    order: np.ndarray
    edges: np.ndarray  # (m, 4): type, l, k (-1 for F), r; preorder


def tree_string(edges: np.ndarray, words: list[str]) -> str:
    """Bracketed BTG tree: (S left right), (I left right), (F w ...); words keep source order inside F.

    `(I (F a) (F b))` means "b a". Brackets inside words are escaped as -LRB-/-RRB- (Penn Treebank style) so the
    string parses unambiguously. Segments of sentences longer than max_span are joined by S nodes.
    """
    n = len(words)
    if n == 0:
        return ""
    node: dict[tuple[int, int], tuple[int, int]] = {}
    for t, l, k, r in edges.tolist():
        node[(l, r)] = (t, k)

    def esc(w: str) -> str:
        return w.replace("(", "-LRB-").replace(")", "-RRB-")

    # iterative to survive 1000-word sentences (Python recursion limit)
    out: list[str] = []
    stack: list[tuple[int, int] | str] = [(0, n)]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        l, r = item
        t, k = node[(l, r)]
        if t == EDGE_F:
            out.append("(F " + " ".join(esc(w) for w in words[l:r]) + ")")
        else:
            out.append("(" + EDGE_NAMES[t] + " ")
            # children in source order; the label says how they are output
            stack.extend([")", (k, r), " ", (l, k)])
    return "".join(out)
