"""Word tokenizers and detokenizers for raw text at inference time (fairseq-interactive, hub ``translate()``).

The reorderer and the sentencepiece model were trained on *tokenized words* (DESIGN.md), so raw input must be
tokenized exactly as the training corpus was. The rules here are those of ``recipes/text_tools.py tokenize``:

* ``none``  — the input is already tokenized: split on whitespace.
* ``moses`` — sacremoses' Moses tokenizer for ``lang`` with aggressive dash splitting and no XML escaping
  (``--normalize``: Moses punctuation normalization first, with unicode punctuation replaced and control
  characters removed).
* ``ja``    — fugashi (MeCab) with unidic-lite, the surface of every non-blank morpheme.
* ``zh``    — jieba, every non-blank word.
  (``--normalize`` for ja/zh: NFKC, which maps full-width Latin letters and digits to ASCII.)

Then whitespace inside tokens splits them, and ``lowercase`` lowercases every token. fugashi and jieba are
optional (``pip install -e '.[recipes]'``) and imported only when chosen, with an error that says how to install
them.

Detokenizers turn the target words (sentencepiece-decoded hypotheses) into text: ``none`` keeps the tokens
separated by spaces, ``moses`` uses sacremoses' detokenizer, ``ja``/``zh`` remove spaces except between two
Latin letters or digits. This module never imports fairseq or torch.
"""
from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import dataclass
from typing import Callable, Optional

WORD_TOKENIZERS = ("none", "moses", "ja", "zh")
DETOKENIZERS = WORD_TOKENIZERS

_INSTALL_HINT = "pip install -e '.[recipes]' (or pip install {package})"


@dataclass(frozen=True)
class WordTokenizerSpec:
    """How raw source text was turned into the words the reorderer and sentencepiece were trained on."""

    kind: str = "none"
    lang: str = "en"  # sacremoses language code (moses only)
    normalize: bool = False
    lowercase: bool = False

    def __post_init__(self) -> None:
        if self.kind not in WORD_TOKENIZERS:
            raise ValueError(f"unknown word tokenizer {self.kind!r}; choose one of {', '.join(WORD_TOKENIZERS)}")

    def describe(self) -> str:
        parts = [self.kind if self.kind != "moses" else f"moses ({self.lang})"]
        if self.normalize:
            parts.append("normalized")
        if self.lowercase:
            parts.append("lowercased")
        return ", ".join(parts)


def _import_optional(module: str, package: str, what: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{what} needs {package}: {_INSTALL_HINT.format(package=package)} ({e})") from None


def _segmenter(spec: WordTokenizerSpec) -> Callable[[str], list[str]]:
    if spec.kind == "none":
        return str.split
    if spec.kind == "moses":
        sacremoses = _import_optional("sacremoses", "sacremoses", "the moses word tokenizer")
        moses = sacremoses.MosesTokenizer(lang=spec.lang)

        def moses_tokenize(text: str) -> list[str]:
            # aggressive dash splitting and no XML escaping, as recipes/text_tools.py tokenizes training data
            return moses.tokenize(text, escape=False, aggressive_dash_splits=True)
        return moses_tokenize
    if spec.kind == "ja":
        fugashi = _import_optional("fugashi", "fugashi[unidic-lite]", "Japanese word segmentation")
        try:
            tagger = fugashi.Tagger()
        except RuntimeError as e:  # fugashi without a dictionary
            raise ImportError(f"Japanese word segmentation needs a MeCab dictionary for fugashi: "
                              f"{_INSTALL_HINT.format(package='unidic-lite')} ({str(e).splitlines()[0]})") from None

        def segment_ja(text: str) -> list[str]:
            return [w.surface for w in tagger(text) if w.surface.strip()]
        return segment_ja
    jieba = _import_optional("jieba", "jieba", "Chinese word segmentation")
    jieba.setLogLevel(logging.WARNING)

    def segment_zh(text: str) -> list[str]:
        return [w for w in jieba.cut(text) if w.strip()]
    return segment_zh


def _normalizer(spec: WordTokenizerSpec) -> Optional[Callable[[str], str]]:
    if not spec.normalize or spec.kind == "none":
        return None
    if spec.kind in ("ja", "zh"):
        return lambda text: unicodedata.normalize("NFKC", text)
    sacremoses = _import_optional("sacremoses", "sacremoses", "Moses punctuation normalization")
    return sacremoses.MosesPunctNormalizer(lang=spec.lang, pre_replace_unicode_punct=True,
                                           post_remove_control_chars=True).normalize


class WordTokenizer:
    """Raw line -> list of words, as the training corpus was tokenized (see the module docstring)."""

    def __init__(self, spec: WordTokenizerSpec):
        self.spec = spec
        self._segment = _segmenter(spec)
        self._normalize = _normalizer(spec)

    def __call__(self, line: str) -> list[str]:
        if self._normalize is not None:
            line = self._normalize(line)
        line = " ".join(line.split())  # collapse whitespace; tokens never contain spaces
        if not line:
            return []
        words = [t for token in self._segment(line) for t in token.split()]
        return [w.lower() for w in words] if self.spec.lowercase else words


_CJK_JOINER = re.compile(r"(?<![A-Za-z0-9]) | (?![A-Za-z0-9])")


class Detokenizer:
    """Target words (space-separated) -> text."""

    def __init__(self, kind: str = "none", lang: str = "en"):
        if kind not in DETOKENIZERS:
            raise ValueError(f"unknown detokenizer {kind!r}; choose one of {', '.join(DETOKENIZERS)}")
        self.kind = kind
        self._moses = None
        if kind == "moses":
            sacremoses = _import_optional("sacremoses", "sacremoses", "the moses detokenizer")
            self._moses = sacremoses.MosesDetokenizer(lang=lang)

    def __call__(self, text: str) -> str:
        if self.kind == "none":
            return text
        if self._moses is not None:
            return self._moses.detokenize(text.split())
        # No spaces between words in these scripts; keep spaces only between two Latin/digit characters.
        return _CJK_JOINER.sub("", " ".join(text.split()))
