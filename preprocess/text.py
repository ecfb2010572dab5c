"""Word tokenization of raw text, one implementation for the corpus (`xlpos-prep tokenize`, the recipes'
tokenization step) and for inference (fairseq-interactive, hub ``translate()``, through ``xlpos.tokenize``), plus
the other text steps of the pipeline: detokenization, cleaning of training pairs, and parallel-file checks.

The reorderer and the sentencepiece model were trained on *tokenized words* (docs/design.md), so raw input must be
tokenized exactly as the training corpus was; checkpoints store the `WordTokenizerSpec` (as `--xl-word-tokenizer`,
`--xl-normalize`, ...) and the same class tokenizes both. The rules:

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

    xlpos-prep tokenize --lang de --normalize --input raw.de --output tok.de --workers 4
    xlpos-prep detokenize --lang de --input hyp.words --output hyp.detok
    xlpos-prep clean --src tok.en --tgt tok.de --src-out clean.en --tgt-out clean.de --max-len 250 --ratio 1.5
    xlpos-prep check-parallel train.en train.de
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import unicodedata
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from .io import (WORKERS, InputError, atomic_output, check_same_length, count_lines, declare_files, float_option,
                 fork_pool, int_option, iter_lines, pool_worker_setup, write_lines)

logger = logging.getLogger(__name__)

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
            # aggressive dash splitting and no XML escaping, as in fairseq's WMT preparation scripts
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


# languages written without spaces between words: their own segmenter and detokenizer; the others: sacremoses
UNSPACED_LANGUAGES = {"ja": "ja", "zh": "zh"}


def tokenizer_kind(lang: str) -> str:
    """The word tokenizer (and detokenizer) of a language: fugashi for ja, jieba for zh, sacremoses for others."""
    return UNSPACED_LANGUAGES.get(lang, "moses")


def spec_for_language(lang: str, normalize: bool = False, lowercase: bool = False) -> WordTokenizerSpec:
    return WordTokenizerSpec(tokenizer_kind(lang), lang, normalize, lowercase)


def detokenizer_for_language(lang: str) -> Detokenizer:
    return Detokenizer(tokenizer_kind(lang), lang)


def raw_text_options(src: str, tgt: str, normalize: bool = False) -> list[str]:
    """The checkpoint options that let fairseq-interactive and the hub take raw `src` text and give `tgt` text:
    words split as `xlpos-prep tokenize --lang SRC [--normalize]` split the corpus, joined back as `detokenize`."""
    return ["--xl-word-tokenizer", tokenizer_kind(src), "--xl-detokenizer", tokenizer_kind(tgt),
            *(["--xl-normalize"] if normalize else [])]


# ---------------------------------------------------------------------------------------------------- tokenize
CHUNK = 2000  # lines per task when tokenizing with several workers
_TOKENIZER: WordTokenizer | None = None


def _make_tokenizer(spec: WordTokenizerSpec) -> WordTokenizer:
    try:
        return WordTokenizer(spec)
    except ImportError as e:  # an optional segmenter: one line saying how to install it
        raise ValueError(str(e)) from None


def _init_worker(spec: WordTokenizerSpec) -> None:
    global _TOKENIZER
    pool_worker_setup()
    _TOKENIZER = _make_tokenizer(spec)


def _tokenize_chunk(lines: list[str]) -> list[str]:
    assert _TOKENIZER is not None
    return [" ".join(_TOKENIZER(line)) for line in lines]


def _line_chunks(path: str) -> Iterator[list[str]]:
    """CHUNK lines at a time, so that a multi-million-line corpus is never held in memory at once."""
    chunk: list[str] = []
    for line in iter_lines(path):
        chunk.append(line)
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def run_tokenize(args: argparse.Namespace) -> int:
    from tqdm import tqdm
    spec = spec_for_language(args.lang, args.normalize, args.lowercase)
    bar = tqdm(desc=f"tokenize {os.path.basename(args.input)}", unit=" lines", file=sys.stderr, leave=False)
    n = 0
    with atomic_output(args.output) as out:
        if args.workers > 1:
            _make_tokenizer(spec)  # a missing segmenter fails here, once, not in every worker
            with fork_pool(args.workers, _init_worker, (spec,)) as pool:
                for done in pool.imap(_tokenize_chunk, _line_chunks(args.input)):
                    out.writelines(line + "\n" for line in done)
                    n += len(done)
                    bar.update(len(done))
        else:
            tokenize = _make_tokenizer(spec)
            for chunk in _line_chunks(args.input):
                out.writelines(" ".join(tokenize(line)) + "\n" for line in chunk)
                n += len(chunk)
                bar.update(len(chunk))
    bar.close()
    logger.info("tokenized %d lines (%s) -> %s", n, spec.describe(), args.output)
    return 0


def configure_tokenize(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lang", required=True, help="ja: fugashi, zh: jieba, others: sacremoses (Moses rules)")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--normalize", action="store_true",
                   help="Moses punctuation normalization first (ja/zh: NFKC)")
    p.add_argument("--lowercase", action="store_true")
    p.add_argument("--workers", type=WORKERS, default=1)
    p.set_defaults(run=run_tokenize)
    declare_files(p, inputs=("input",), outputs=("output",))


def run_detokenize(args: argparse.Namespace) -> int:
    try:
        detok = detokenizer_for_language(args.lang)
    except ImportError as e:
        raise ValueError(str(e)) from None
    write_lines(args.output, (detok(line) for line in iter_lines(args.input)))
    return 0


def configure_detokenize(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lang", required=True, help="ja/zh: no spaces between words; others: sacremoses")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.set_defaults(run=run_detokenize)
    declare_files(p, inputs=("input",), outputs=("output",))


# ---------------------------------------------------------------------------------------------------- clean, check
def keep_pair(n_src: int, n_tgt: int, max_len: int, ratio: float) -> bool:
    """A training pair is kept with 1..max_len tokens on both sides and a length ratio of at most `ratio`."""
    return 1 <= n_src <= max_len and 1 <= n_tgt <= max_len and max(n_src, n_tgt) <= ratio * min(n_src, n_tgt)


def run_clean(args: argparse.Namespace) -> int:
    n = count_lines(args.src)
    check_same_length(args.src, n, args.tgt, count_lines(args.tgt))
    kept = 0
    with atomic_output(args.src_out) as src_out, atomic_output(args.tgt_out) as tgt_out:  # streamed, not held
        for s, t in zip(iter_lines(args.src), iter_lines(args.tgt)):
            if keep_pair(len(s.split()), len(t.split()), args.max_len, args.ratio):
                src_out.write(s + "\n")
                tgt_out.write(t + "\n")
                kept += 1
        if not kept:
            raise InputError(args.src, None, f"cleaning {args.src} / {args.tgt} left no sentence pair")
    print(f"clean: kept {kept} of {n} pairs (1-{args.max_len} tokens, ratio <= {args.ratio})", file=sys.stderr)
    return 0


def configure_clean(p: argparse.ArgumentParser) -> None:
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--src-out", required=True)
    p.add_argument("--tgt-out", required=True)
    p.add_argument("--max-len", type=int_option(1, 1_000_000), default=250)
    p.add_argument("--ratio", type=float_option(1, 1e6), default=1.5 * 1.5 * 2, help="max length ratio (default 4.5)")
    p.set_defaults(run=run_clean)
    declare_files(p, inputs=("src", "tgt"), outputs=("src_out", "tgt_out"))


def check_parallel(paths: list[str], allow_empty: bool = False) -> int:
    """Files exist, have equal line counts and (unless allowed) no empty line: the aligner and reorderer need
    words. Their line count; InputError naming the file and line otherwise."""
    counts = []
    for path in paths:
        if not os.path.isfile(path):
            raise InputError(path, None, "file not found")
        if allow_empty:
            counts.append((path, count_lines(path)))
            continue
        k = 0
        for k, line in enumerate(iter_lines(path), 1):
            if not line.strip():
                raise InputError(path, k, "empty line; remove the pair from both files (or run the recipe's "
                                          "cleaning step)")
        counts.append((path, k))
    for path, n in counts[1:]:
        check_same_length(counts[0][0], counts[0][1], path, n)
    return counts[0][1]


def run_check_parallel(args: argparse.Namespace) -> int:
    check_parallel(args.files, args.allow_empty)
    return 0


def configure_check_parallel(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+")
    p.add_argument("--allow-empty", action="store_true", help="only compare line counts")
    p.set_defaults(run=run_check_parallel)
    declare_files(p, inputs=("files",))
