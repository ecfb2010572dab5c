"""Stress sets for the reorderer: inputs unlike its training data, each with an oracle.

- `concatenate`: sentences longer than anything in training, made by joining consecutive held-out sentence pairs.
  The oracle of a joined sentence is the concatenation of the parts' oracles in order (the ranks of part p are
  shifted past those of parts 0..p-1): the target sentences, joined in the same order, are what it aligns to.
- `length_split`: a corpus split at its median source length, to train on the short half and test on the long one.
"""
from __future__ import annotations

import statistics
from typing import Sequence

# Group sizes of `concatenate`, cycled: on Tanaka dev, joined sentences of 45 English / 64 Japanese words on
# average, up to 109 / 149 (training sentences have at most 16).
CONCAT_GROUPS = (2, 3, 4, 6, 8, 12)


def concatenate(sentences: Sequence[Sequence[str]], ranks: Sequence[Sequence[int]],
                groups: Sequence[int] = CONCAT_GROUPS) -> tuple[list[list[str]], list[list[int]]]:
    """Join consecutive sentences in groups of groups[0], groups[1], ... (cycled; the last group takes what is left).

    Returns (joined sentences, joined dense ranks): part p's ranks are shifted by 1 + the largest rank of the parts
    before it, so every word of part p comes after every word of the earlier parts in the oracle order."""
    if len(sentences) != len(ranks):
        raise ValueError(f"{len(sentences)} sentences but {len(ranks)} rank lines")
    if not groups or min(groups) < 1:
        raise ValueError(f"group sizes must be >= 1, got {list(groups)}")
    out_words: list[list[str]] = []
    out_ranks: list[list[int]] = []
    i = g = 0
    while i < len(sentences):
        size = groups[g % len(groups)]
        words: list[str] = []
        joined: list[int] = []
        offset = 0
        for w, r in zip(sentences[i:i + size], ranks[i:i + size]):
            if len(w) != len(r):
                raise ValueError(f"sentence {i + 1}: {len(w)} words but {len(r)} ranks")
            words.extend(w)
            joined.extend(x + offset for x in r)
            offset += (max(r) + 1) if r else 0
        out_words.append(words)
        out_ranks.append(joined)
        i += size
        g += 1
    return out_words, out_ranks


def median_length(sentences: Sequence[Sequence[str]]) -> float:
    return statistics.median(len(s) for s in sentences)


def length_split(sentences: Sequence[Sequence[str]], threshold: float) -> tuple[list[int], list[int]]:
    """(indices of sentences of at most `threshold` words, indices of the longer ones), in corpus order."""
    short = [i for i, s in enumerate(sentences) if len(s) <= threshold]
    long = [i for i, s in enumerate(sentences) if len(s) > threshold]
    return short, long
