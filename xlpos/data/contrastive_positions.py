"""Contrastive XL positions: replace a sentence's XL positions by a controlled permutation (``--xl-contrast``).

A trained XL model is fed positions that carry no reordering information, or deliberately wrong information, to
measure how much it relies on them; ``fairseq-train --xl-contrast random`` trains the matching control system.

Every permutation is made at WORD level: a word's pieces stay together and in their order, as in positions made
by ``xlpos-prep positions`` (docs/design.md, "Piece-level XL positions"), so the model never sees a split word. A
token starts a word when its dictionary symbol begins with sentencepiece's word-boundary marker ``▁`` (a lone
``▁`` piece joins the piece after it, as :func:`preprocess.subword.piece_word_ids` reads pieces); the first token
always starts one. A dictionary without any ``▁`` symbol is word-level: every token is a word.

Contrasts (``N`` pieces, ``W`` words, output = raw 0-based XL positions, a permutation of 0..N-1):

* ``none``: the positions as loaded (the data-bin's ``.xlpos`` file, the reorderer, or monotone).
* ``monotone``: the absolute positions 0..N-1.
* ``reversed``: the words in reverse source order.
* ``random``: a uniformly random word order.
* ``local-shuffle``: the LOADED word order, with words permuted uniformly within consecutive windows of ``K``
  positions of that order (the last window may be shorter): word order is perturbed locally, long-range
  reordering is kept.

Randomness is a function of ``(seed, key)`` only, where the key is the sentence index in its split (data-bin) or
the input index (raw input): the same sentence gets the same permutation in every epoch, batch and worker.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

WORD_BOUNDARY = "\u2581"  # "▁", as preprocess.subword (not imported: numba stays out of the data loader)

NONE, MONOTONE, REVERSED, RANDOM, LOCAL_SHUFFLE = "none", "monotone", "reversed", "random", "local-shuffle"
CONTRASTS = (NONE, MONOTONE, REVERSED, RANDOM, LOCAL_SHUFFLE)
# Contrasts that do not look at the loaded positions: with them no .xlpos file or reorderer is needed.
IGNORES_LOADED = (MONOTONE, REVERSED, RANDOM)

# Separate random streams for data-bin sentences and raw inputs, so that sentence 5 of a split and raw input 5 are
# not tied to one another.
SPLIT_SENTENCE, RAW_INPUT, TRAINING_NOISE = 0, 1, 2


def validate_contrast(contrast: str, window: int, seed: int) -> None:
    """One-line errors naming the option, for values fairseq's argparse cannot check."""
    if contrast not in CONTRASTS:
        raise ValueError(f"--xl-contrast {contrast!r}: choose one of {', '.join(CONTRASTS)}")
    if window < 2:
        raise ValueError(f"--xl-contrast-window {window}: must be at least 2 (a window of 1 moves no word)")
    if seed < 0:
        raise ValueError(f"--xl-contrast-seed {seed}: must be a non-negative integer")


class WordStarts:
    """Which token ids of a dictionary begin a word, precomputed once for fast per-sentence lookups."""

    def __init__(self, dictionary):
        symbols = [str(s) for s in dictionary.symbols]
        marked = np.array([s.startswith(WORD_BOUNDARY) for s in symbols], dtype=bool)
        # Special symbols (<s>, <pad>, </s>, <unk>) never carry the marker; only real entries decide the vocabulary
        # kind.
        self.word_level = not marked[dictionary.nspecial:].any()
        self._marked = marked
        self._lone = np.array([s == WORD_BOUNDARY for s in symbols], dtype=bool)

    def word_ids(self, tokens: np.ndarray) -> np.ndarray:
        """Index of the word each token (EOS excluded) belongs to: 0-based, non-decreasing, steps of 0 or 1."""
        n = len(tokens)
        if self.word_level or n == 0:
            return np.arange(n, dtype=np.int64)
        starts = self._marked[tokens]
        starts[1:] &= ~self._lone[tokens[:-1]]  # a lone "▁" starts the word of the piece after it
        starts[0] = True
        return np.cumsum(starts, dtype=np.int64) - 1


def positions_of_word_order(word_ids: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Piece XL positions when the words are laid out in `order` (word indices), each word's pieces together and
    in order: the vectorized form of :func:`preprocess.subword.xl_positions_for_pieces`."""
    lengths = np.bincount(word_ids, minlength=len(order)).astype(np.int64)
    first_piece = np.cumsum(lengths) - lengths  # index of each word's first piece in source order
    # Where each word starts in the reordered sequence: the total length of the words laid out before it.
    start = np.empty(len(order), dtype=np.int64)
    start[order] = np.cumsum(lengths[order]) - lengths[order]
    offset_in_word = np.arange(len(word_ids), dtype=np.int64) - first_piece[word_ids]
    return start[word_ids] + offset_in_word


def loaded_word_order(word_ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The word order the loaded piece positions express: words sorted by the XL position of their first piece
    (positions made for the same pieces keep a word's pieces together, so this is exact for them)."""
    n_words = int(word_ids[-1]) + 1 if len(word_ids) else 0
    first = np.full(n_words, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, word_ids, positions)
    return np.argsort(first, kind="stable")


def rng_for(seed: int, domain: int, key: int) -> np.random.Generator:
    """The random stream of one sentence: a function of (seed, domain, key) only."""
    return np.random.default_rng([seed, domain, key])


def contrast_positions(contrast: str, word_ids: np.ndarray, loaded: Optional[np.ndarray],
                       rng: Optional[np.random.Generator], window: int) -> np.ndarray:
    """Raw XL positions of one sentence under `contrast` (see the module docstring).

    Args:
        word_ids: word index of each piece (:meth:`WordStarts.word_ids`).
        loaded: the positions as loaded (used by ``none`` and ``local-shuffle``; None means monotone).
        rng: the sentence's random stream (``random``, ``local-shuffle``).
        window: K of ``local-shuffle``.
    """
    n = len(word_ids)
    if contrast == NONE:
        return np.arange(n, dtype=np.int64) if loaded is None else np.asarray(loaded, dtype=np.int64)
    if contrast == MONOTONE:
        return np.arange(n, dtype=np.int64)
    n_words = int(word_ids[-1]) + 1 if n else 0
    if contrast == REVERSED:
        order = np.arange(n_words - 1, -1, -1, dtype=np.int64)
    elif contrast == RANDOM:
        order = rng.permutation(n_words)
    elif contrast == LOCAL_SHUFFLE:
        order = (np.arange(n_words, dtype=np.int64) if loaded is None
                 else loaded_word_order(word_ids, np.asarray(loaded, dtype=np.int64)))
        for begin in range(0, n_words, window):
            order[begin:begin + window] = rng.permutation(order[begin:begin + window])
    else:
        raise ValueError(f"--xl-contrast {contrast!r}: choose one of {', '.join(CONTRASTS)}")
    return positions_of_word_order(word_ids, order)


def noisy_word_order(order: np.ndarray, rng: np.random.Generator, strength: float) -> np.ndarray:
    """`order` (word indices) with each word moved by sorting its rank + U(0, strength): the word-shuffle noise
    of Lample et al. (2018, unsupervised MT), here applied to the XL word order. Below 1 nothing moves; a word
    never moves more than `strength` places; at 2, about one adjacent pair in eight is swapped."""
    keys = np.arange(len(order), dtype=np.float64) + rng.uniform(0.0, strength, len(order))
    return order[np.argsort(keys, kind="stable")]


class PositionNoise:
    """``--xl-position-noise``: a fresh perturbation of the XL word order of every training sentence in every
    epoch, so that a model is trained on positions as uncertain as the ones it meets at test time, in a new way
    each time it sees a sentence. A function of (epoch, sentence index) only: the same in every worker and on
    resume."""

    def __init__(self, strength: float, dictionary):
        if strength < 0:
            raise ValueError(f"--xl-position-noise {strength}: must be 0 (off) or positive")
        self.strength = float(strength)
        self.word_starts = WordStarts(dictionary)

    def apply(self, tokens: torch.Tensor, positions: torch.Tensor, epoch: int, key: int) -> torch.Tensor:
        """Noisy raw XL positions of one sentence (tokens without EOS; positions: its raw XL positions)."""
        ids = tokens.cpu().numpy().astype(np.int64, copy=False)
        word_ids = self.word_starts.word_ids(ids)
        if len(word_ids) < 2:
            return positions
        order = loaded_word_order(word_ids, positions.numpy().astype(np.int64, copy=False))
        rng = np.random.default_rng([TRAINING_NOISE, epoch, key])
        return torch.from_numpy(positions_of_word_order(word_ids, noisy_word_order(order, rng, self.strength)))


class XLContrast:
    """The task's ``--xl-contrast`` settings applied to token-id sentences.

    Args:
        contrast, window, seed: ``--xl-contrast``, ``--xl-contrast-window``, ``--xl-contrast-seed``.
        dictionary: the source dictionary (word starts).
    """

    def __init__(self, contrast: str, window: int, seed: int, dictionary):
        validate_contrast(contrast, window, seed)
        self.contrast = contrast
        self.window = int(window)
        self.seed = int(seed)
        self.word_starts = WordStarts(dictionary)

    @property
    def active(self) -> bool:
        return self.contrast != NONE

    @property
    def ignores_loaded(self) -> bool:
        return self.contrast in IGNORES_LOADED

    def describe(self) -> str:
        extra = {RANDOM: f", seed {self.seed}", LOCAL_SHUFFLE: f", window {self.window}, seed {self.seed}"}
        return f"--xl-contrast {self.contrast}{extra.get(self.contrast, '')}"

    def apply(self, tokens: torch.Tensor, loaded: Optional[torch.Tensor], domain: int, key: int) -> torch.Tensor:
        """Contrasted raw XL positions of one sentence.

        Args:
            tokens: the sentence's source token ids, EOS excluded (N tokens).
            loaded: its raw XL positions as loaded (N values), or None for monotone.
            domain, key: :data:`SPLIT_SENTENCE` and the sentence index in its split, or :data:`RAW_INPUT` and the
                input index.
        """
        if not self.active:
            return loaded if loaded is not None else torch.arange(tokens.numel(), dtype=torch.long)
        ids = tokens.numpy() if tokens.device.type == "cpu" else tokens.cpu().numpy()
        word_ids = self.word_starts.word_ids(ids.astype(np.int64, copy=False))
        rng = rng_for(self.seed, domain, key) if self.contrast in (RANDOM, LOCAL_SHUFFLE) else None
        loaded_np = None if loaded is None else loaded.numpy().astype(np.int64, copy=False)
        return torch.from_numpy(contrast_positions(self.contrast, word_ids, loaded_np, rng, self.window))

    def apply_all(self, sentences: Sequence[torch.Tensor], loaded: Sequence[Optional[torch.Tensor]], domain: int,
                  keys: Sequence[int]) -> list[torch.Tensor]:
        return [self.apply(t, p, domain, k) for t, p, k in zip(sentences, loaded, keys)]
