"""Word alignments read off an encoder-decoder attention matrix (the analysis of the paper's section 4.3).

Input: for one sentence pair, the attention of every target piece over the source pieces (EOS rows and columns
already removed), and the pieces of both sides. Pieces are grouped into words by sentencepiece's word-start marker
"▁" (a piece that starts with it opens a new word; a corpus without the marker, marker=None, has one word per
token). The piece matrix becomes a word matrix: a source word's weight is the SUM over its pieces (attention is a
distribution over source pieces, so the sum is the mass the word receives), a target word's row is the MEAN over
its pieces (each piece's row is one distribution; averaging keeps rows on the same scale for words of any length).

Extraction methods (links are (source word, target word), the Pharaoh order of the gold files):
  argmax     every target word is linked to the source word it attends to most (the usual attention alignment)
  mutual     the symmetric variant: argmax links whose target word is also the one that gives the source word
             the most weight (the intersection of the row and the column argmax; higher precision)
  threshold  every link whose word weight reaches a threshold (0 to several links per target word)

This module needs numpy only.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

WORD_MARKER = "▁"
METHODS = ("argmax", "mutual", "threshold")
DEFAULT_THRESHOLD = 0.3


def word_ids(pieces: Sequence[str], marker: str | None = WORD_MARKER) -> list[int]:
    """The word index of every piece. The first piece always opens word 0, marker or not."""
    ids, word = [], -1
    for k, piece in enumerate(pieces):
        if k == 0 or marker is None or piece.startswith(marker):
            word += 1
        ids.append(word)
    return ids


def word_attention(attn: np.ndarray, target_words: Sequence[int], source_words: Sequence[int]) -> np.ndarray:
    """(target words x source words) from (target pieces x source pieces): sum over a source word's pieces, mean over
    a target word's pieces."""
    attn = np.asarray(attn, dtype=np.float64)
    if attn.shape != (len(target_words), len(source_words)):
        raise ValueError(f"attention of shape {attn.shape} for {len(target_words)} target and {len(source_words)} "
                         f"source pieces")
    n_t = max(target_words, default=-1) + 1
    n_s = max(source_words, default=-1) + 1
    by_source = np.zeros((attn.shape[0], n_s))
    np.add.at(by_source.T, np.asarray(source_words, dtype=np.int64), attn.T)
    out = np.zeros((n_t, n_s))
    np.add.at(out, np.asarray(target_words, dtype=np.int64), by_source)
    counts = np.bincount(np.asarray(target_words, dtype=np.int64), minlength=n_t)
    return out / np.maximum(counts, 1)[:, None]


def extract_links(word_attn: np.ndarray, method: str = "argmax",
                  threshold: float = DEFAULT_THRESHOLD) -> frozenset[tuple[int, int]]:
    """(source word, target word) links from a (target words x source words) matrix."""
    w = np.asarray(word_attn)
    if w.size == 0:
        return frozenset()
    if method == "argmax":
        return frozenset((int(s), t) for t, s in enumerate(w.argmax(axis=1)))
    if method == "mutual":
        rows = w.argmax(axis=1)
        cols = w.argmax(axis=0)
        return frozenset((int(s), t) for t, s in enumerate(rows) if cols[s] == t)
    if method == "threshold":
        return frozenset((int(s), int(t)) for t, s in zip(*np.nonzero(w >= threshold)))
    raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")


def sentence_links(attn: np.ndarray, target_pieces: Sequence[str], source_pieces: Sequence[str],
                   methods: Sequence[str] = METHODS, threshold: float = DEFAULT_THRESHOLD,
                   marker: str | None = WORD_MARKER) -> dict[str, frozenset[tuple[int, int]]]:
    """Word links of one sentence pair by every method, from its piece attention (EOS excluded)."""
    w = word_attention(attn, word_ids(target_pieces, marker), word_ids(source_pieces, marker))
    return {m: extract_links(w, m, threshold) for m in methods}
