"""Reordering a line sentence by sentence: where its sentences end, and their derivations composed straight.

A line of a parallel corpus can hold several sentences ("take your time . there 's no hurry ."), and its
translation keeps them in order: no target order moves a word across a sentence end. A reorderer that parses such
a line whole may still do so (an inversion over the boundary), and the longer the line, the more its sentence-level
fallback keeps it monotone altogether. With `split_sentences` (a model setting, on for models trained by
`train-reorderer` and off for files written before it) each sentence of a line is parsed alone and the sentences'
derivations are joined by straight nodes in their order: every sentence gets the order it would get as a line of
its own, and the result stays one BTG permutation with one tree. On Tanaka dev sentences joined in groups of 2-12
this takes both reorderers from at or just below the monotone order to well above it (docs/reorderer.md). This is
this project's choice; the paper does not discuss inputs of several sentences.

A sentence ends at a token that is only sentence-final punctuation (".", "!", "?" and their full-width forms),
together with the closing quotes and brackets right after it; a line never ends up with an empty sentence, and a
run of such tokens ("! !") ends one sentence. Tokens like "3.5" or "u.s." are not ends (the input is tokenized),
nor is an ellipsis, which more often pauses a sentence than ends it.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .btg import EDGE_F, EDGE_GLUE, ParseResult

SENTENCE_ENDS = frozenset({".", "!", "?", "。", "！", "？", "．"})
CLOSERS = frozenset({'"', "'", ")", "]", "}", "」", "』", "”", "’", "）", "&quot;", "&apos;", "''"})


def sentence_cuts(words: Sequence[str]) -> list[int]:
    """The boundaries of the sentences of one line: [0, end of sentence 1, ..., len(words)]."""
    cuts = [0]
    n = len(words)
    i = 0
    while i < n:
        if words[i] in SENTENCE_ENDS:
            j = i + 1
            while j < n and (words[j] in SENTENCE_ENDS or words[j] in CLOSERS):
                j += 1
            if j < n:
                cuts.append(j)
            i = j
        else:
            i += 1
    cuts.append(n)
    return cuts if n else [0, 0]


def compose_straight(results: Sequence[ParseResult], cuts: Sequence[int]) -> ParseResult:
    """One derivation of the whole line from its pieces' (piece k spans words cuts[k]..cuts[k+1]): each piece's
    edges shifted into place, and straight (GLUE) rows joining the pieces left to right, last first (as btg
    writes a chain)."""
    if len(results) == 1:
        return results[0]
    glue = [(EDGE_GLUE, 0, a, b) for a, b in reversed(list(zip(cuts[1:-1], cuts[2:])))]
    shifted = [r.edges + np.array([0, a, a, a], dtype=r.edges.dtype) for r, a in zip(results, cuts)]
    for e in shifted:
        e[e[:, 0] == EDGE_F, 2] = -1  # an F edge has no split point
    edges = np.concatenate([np.array(glue, dtype=np.int64).reshape(-1, 4)] + shifted)
    order = np.concatenate([r.order + a for r, a in zip(results, cuts)])
    return ParseResult(order, edges)


def parse_in_pieces(parse: Callable[[list[Sequence[str]]], list[ParseResult]], sentences: Sequence[Sequence[str]],
                    cuts_of: Callable[[Sequence[str]], list[int]]) -> list[ParseResult]:
    """`parse` over every line's pieces (cut where cuts_of says) in one batch, then each line's pieces composed."""
    bounds = [cuts_of(s) for s in sentences]
    if all(len(c) <= 2 for c in bounds):
        return parse(list(sentences))
    pieces = [s[a:b] for s, cuts in zip(sentences, bounds) for a, b in zip(cuts, cuts[1:])]
    parsed = iter(parse(pieces))
    return [compose_straight([next(parsed) for _ in cuts[1:]], cuts) for cuts in bounds]
