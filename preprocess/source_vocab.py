"""What a reorderer knows about the text it was trained on: its language and a compact set of its words.

Both kinds of reorderer (linear and neural) keep this in their model file, so that `reorder` can tell a user who
feeds it the other side of a corpus (or another language) with one warning line, instead of silently producing
orders that mean nothing. The word set is a Bloom filter: 2**20 bits (128 KB) and two hash functions, so a
vocabulary of 50,000 words makes a word it never saw look known with probability about 1% (the estimate of the
unknown share is then about 1% low), and it costs nothing to look a word up.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

LOG2_BITS = 20
HASHES = 2
_KEY = b"xlpos-source-vocabulary"
# File suffixes that name a language: two letters, optionally with a region or script (train.en, dev.pt-BR,
# corpus.zh_Hant). Three-letter suffixes are left out: src, tok, txt, raw name file kinds far more often.
_LANG_SUFFIX = re.compile(r"[a-z]{2}(?:[-_][A-Za-z]{2,4})?")
# The share of unknown words above which `reorder` warns, and the fewest words it judges on.
WARN_UNKNOWN_SHARE = 0.5
WARN_MIN_WORDS = 10


def language_of_path(path: str) -> str | None:
    """The language code a file name ends with (train.en -> en), or None when its suffix does not look like one."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if "." not in name:
        return None
    suffix = name.rsplit(".", 1)[1]
    return suffix if _LANG_SUFFIX.fullmatch(suffix) else None


def _positions(word: str, log2_bits: int) -> tuple[int, ...]:
    digest = hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8 * HASHES, key=_KEY).digest()
    mask = (1 << log2_bits) - 1
    return tuple(int.from_bytes(digest[8 * h:8 * h + 8], "little") & mask for h in range(HASHES))


@dataclass
class SourceVocabulary:
    """The source language (None when unknown) and a Bloom filter of the training words."""

    lang: str | None
    bits: np.ndarray  # uint8, 2**log2_bits / 8 bytes
    words: int  # distinct training words
    log2_bits: int = LOG2_BITS
    _known: dict[str, bool] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], lang: str | None) -> "SourceVocabulary":
        bits = np.zeros(1 << (LOG2_BITS - 3), dtype=np.uint8)
        distinct = {w for s in sentences for w in s}
        for w in distinct:
            for p in _positions(w, LOG2_BITS):
                bits[p >> 3] |= np.uint8(1 << (p & 7))
        return cls(lang, bits, len(distinct))

    def __contains__(self, word: str) -> bool:
        known = self._known.get(word)
        if known is None:
            known = all(self.bits[p >> 3] & (1 << (p & 7)) for p in _positions(word, self.log2_bits))
            if len(self._known) < 1_000_000:
                self._known[word] = known
        return known

    def unknown(self, sentences: Iterable[Sequence[str]]) -> tuple[int, int]:
        """(words not in the training vocabulary, all words) of `sentences`, counting every token."""
        unknown = total = 0
        for s in sentences:
            for w in s:
                total += 1
                unknown += w not in self
        return unknown, total

    def warning(self, sentences: Iterable[Sequence[str]], src: str, model: str) -> str | None:
        """One line when most words of `sentences` (the file `src`) are unknown to the model `model`, else None."""
        unknown, total = self.unknown(sentences)
        if total < WARN_MIN_WORDS or unknown <= WARN_UNKNOWN_SHARE * total:
            return None
        trained = f"{self.lang} text" if self.lang else "its training text"
        return (f"{src}: {unknown / total:.0%} of its {total} words are unknown to the reorderer {model} (trained on "
                f"{trained}): is this the other side of the corpus, or another language?")

    # --- in model files: a header entry and one array ------------------------------------------------------------
    def header(self) -> dict:
        return {"lang": self.lang, "words": self.words, "log2_bits": self.log2_bits, "hashes": HASHES}

    @classmethod
    def from_file(cls, header: dict, bits: np.ndarray) -> "SourceVocabulary":
        """From a model file's header entry and its bit array; ValueError/KeyError/TypeError when malformed."""
        log2_bits = int(header["log2_bits"])
        if int(header.get("hashes", HASHES)) != HASHES or not 3 <= log2_bits <= 32:
            raise ValueError(f"unsupported source vocabulary ({header})")
        if bits.dtype != np.uint8 or bits.shape != (1 << (log2_bits - 3),):
            raise ValueError(f"source vocabulary of {bits.shape} {bits.dtype}, expected {1 << (log2_bits - 3)} bytes")
        lang = header.get("lang")
        return cls(str(lang) if lang is not None else None, bits, int(header["words"]), log2_bits)
