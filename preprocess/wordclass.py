"""Word classes learned from the training source text, for the reorderer's `classK` word view.

Each word seen at least `min_count` times is described by the counts of its left and right neighbours among the
`contexts` most frequent words (plus the sentence markers), square-rooted and normalized (Hellinger), projected
to `dims` dimensions by a seeded Gaussian matrix, and clustered into `k` classes by k-means (k-means++
initialisation). Everything is seeded and sorted, so the same corpus and seed give the same classes. Rarer words
and words never seen get no class (the view gives them one shared id).
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

UNKNOWN = -1


def learn_classes(sentences: Sequence[Sequence[str]], k: int, seed: int = 1, min_count: int = 2,
                  contexts: int = 500, dims: int = 64, iterations: int = 20) -> dict[str, int]:
    """word -> class id in 0..k-1 for the words of `sentences` seen at least `min_count` times."""
    if k < 2:
        raise ValueError(f"need at least 2 word classes, got {k}")
    counts = Counter(w for s in sentences for w in s)
    vocab = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    if len(vocab) <= k:
        return {w: i for i, w in enumerate(vocab)}
    index = {w: i for i, w in enumerate(vocab)}
    ctx_words = vocab[:contexts]
    ctx = {w: j for j, w in enumerate(ctx_words)}
    bos, eos = len(ctx_words), len(ctx_words) + 1  # sentence markers as contexts
    width = len(ctx_words) + 2
    rows, cols = [], []
    for s in sentences:
        for i, w in enumerate(s):
            r = index.get(w)
            if r is None:
                continue
            left = bos if i == 0 else ctx.get(s[i - 1])
            right = eos if i == len(s) - 1 else ctx.get(s[i + 1])
            if left is not None:
                rows.append(r)
                cols.append(left)
            if right is not None:
                rows.append(r)
                cols.append(width + right)
    m = np.zeros((len(vocab), 2 * width), dtype=np.float64)
    np.add.at(m, (np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)), 1.0)
    m = np.sqrt(m)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    m /= np.maximum(norms, 1e-12)
    rng = np.random.default_rng(seed)
    x = m @ rng.standard_normal((2 * width, dims))
    # k-means++ initialisation, then Lloyd iterations (empty clusters keep their centre)
    centres = np.empty((k, dims))
    centres[0] = x[rng.integers(len(vocab))]
    d2 = ((x - centres[0]) ** 2).sum(axis=1)
    for c in range(1, k):
        total = d2.sum()
        pick = int(rng.choice(len(vocab), p=d2 / total)) if total > 0 else int(rng.integers(len(vocab)))
        centres[c] = x[pick]
        d2 = np.minimum(d2, ((x - centres[c]) ** 2).sum(axis=1))
    sq = (x ** 2).sum(axis=1, keepdims=True)
    assign = np.zeros(len(vocab), dtype=np.int64)
    for _ in range(iterations):
        dist = sq - 2 * x @ centres.T + (centres ** 2).sum(axis=1)
        new = dist.argmin(axis=1)
        if _ > 0 and np.array_equal(new, assign):
            break
        assign = new
        sums = np.zeros((k, dims))
        np.add.at(sums, assign, x)
        sizes = np.bincount(assign, minlength=k)
        filled = sizes > 0
        centres[filled] = sums[filled] / sizes[filled, None]
    return {w: int(c) for w, c in zip(vocab, assign)}
