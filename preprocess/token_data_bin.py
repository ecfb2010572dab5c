"""``xlpos-prep preprocess``: what ``fairseq-preprocess`` writes for a translation data-bin in its default format
(dictionaries and mmap-binarized tokens), without importing fairseq.

Importing fairseq costs seconds (it imports every task and model it has), and the pipeline paid them once a
data-bin; this module lets `prepare` build its data-bin in a process of its own that needs neither fairseq nor
torch. It covers the options the pipeline uses, under fairseq-preprocess's names: ``--source-lang``,
``--target-lang``, ``--trainpref``/``--validpref``/``--testpref``, ``--destdir``, and either
``--joined-dictionary`` (one dictionary counted on both sides of the training split) or ``--srcdict``/``--tgtdict``.
For any other option (thresholds, vocabulary limits, alignments, other dataset formats) run fairseq-preprocess.

The output is fairseq 0.12's, byte for byte (tests/test_token_data_bin.py compares the two):

  dict.{L}.txt  one ``symbol count`` line a symbol, most frequent first, ties in code-point order of the symbols
                (fairseq's ``Dictionary.finalize``), padded with ``madeupwordNNNN 0`` to a multiple of 8 entries
                with the 4 special symbols ``<s> <pad> </s> <unk>``, which are not written; a line's tokens are its
                whitespace-separated words, and every line counts one ``</s>``
  {split}.{S}-{T}.{L}.bin/.idx   every line's token ids and ``</s>``, unknown words as ``<unk>``, in the smallest
                dtype fairseq picks for the dictionary's size (``mmap_dataset``)

Lines are those of `io.iter_lines` (split at ``\\n``), as everywhere in the pipeline, so the tokens of a sentence
line up with its XL positions (`binarize`) whatever characters it holds.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np
from tqdm import tqdm

from .io import InputError, atomic_output, declare_files, iter_lines
from .mmap_dataset import mmap_dataset_output, smallest_index_dtype

logger = logging.getLogger(__name__)

BOS, PAD, EOS, UNK = "<s>", "<pad>", "</s>", "<unk>"
SPECIALS = (BOS, PAD, EOS, UNK)  # ids 0-3, in fairseq's order
PADDING_FACTOR = 8  # fairseq-preprocess's default --padding-factor

EPILOG = """examples:
  xlpos-prep preprocess --source-lang en --target-lang ja --trainpref pieces/train --validpref pieces/valid \\
      --testpref pieces/test --joined-dictionary --destdir data-bin
  xlpos-prep preprocess -s en -t ja --testpref extra/pieces --srcdict data-bin/dict.en.txt \\
      --tgtdict data-bin/dict.ja.txt --destdir extra/data-bin
  # then: xlpos-prep binarize --xlpos pieces/train.xlpos ... --data-bin data-bin --split train ... -s en -t ja
"""


class Dictionary:
    """fairseq's token dictionary: symbols (the 4 special ones first) with their counts, and symbol -> id."""

    def __init__(self, entries: Iterable[tuple[str, int]] = ()) -> None:
        self.symbols: list[str] = list(SPECIALS)
        self.counts: list[int] = [0] * len(SPECIALS)
        self.index: dict[str, int] = {s: i for i, s in enumerate(SPECIALS)}
        for symbol, count in entries:
            self.index[symbol] = len(self.symbols)
            self.symbols.append(symbol)
            self.counts.append(count)

    def __len__(self) -> int:
        return len(self.symbols)

    @classmethod
    def count(cls, paths: Iterable[str], progress: bool = False) -> "Dictionary":
        """The dictionary of the words of `paths` as fairseq-preprocess finalizes it."""
        counts: Counter[str] = Counter()
        for path in paths:
            for line in _progress(iter_lines(path), f"count {os.path.basename(path)}", progress):
                counts.update(line.split())
        for special in SPECIALS:  # counted on the special entries, which dict.txt does not list
            counts.pop(special, None)
        # fairseq: Counter(dict(sorted(...))).most_common(): by count, ties in the symbols' sorted order
        entries = sorted(sorted(counts.items()), key=lambda item: item[1], reverse=True)
        padding = -(len(SPECIALS) + len(entries)) % PADDING_FACTOR
        return cls(entries + [(f"madeupword{k:04d}", 0) for k in range(padding)])

    @classmethod
    def load(cls, path: str) -> "Dictionary":
        """A dict.L.txt as fairseq reads it (``symbol count`` lines, after the special symbols)."""
        entries, seen = [], set()
        for line_no, line in enumerate(iter_lines(path), 1):
            symbol, _, count = line.rstrip().rpartition(" ")
            if not symbol or not count.isdigit():
                raise InputError(path, line_no, "expected 'SYMBOL COUNT' (a fairseq dictionary)")
            if symbol in SPECIALS:
                raise InputError(path, line_no, f"{symbol!r} is a special symbol: a dictionary file does not list it")
            if symbol in seen:
                raise InputError(path, line_no, f"{symbol!r} is listed twice")
            seen.add(symbol)
            entries.append((symbol, int(count)))
        return cls(entries)

    def save(self, path: str) -> None:
        with atomic_output(path) as f:
            f.writelines(f"{s} {c}\n" for s, c in zip(self.symbols[len(SPECIALS):], self.counts[len(SPECIALS):]))


@dataclass(frozen=True)
class BinarizedText:
    """What one binarization of a text file wrote."""

    prefix: str  # output path without .bin/.idx
    sentences: int
    tokens: int  # EOS included, as fairseq counts them
    unknown: int  # words mapped to <unk>


def _progress(lines: Iterable[str], what: str, show: bool) -> Iterable[str]:
    return tqdm(lines, desc=what, unit=" lines", file=sys.stderr, disable=not show)


def binarize_text(path: str, dictionary: Dictionary, prefix: str, progress: bool = False) -> BinarizedText:
    """Every line of `path` as token ids + EOS into PREFIX.bin/.idx (written under temporary names, then renamed)."""
    unk, eos, index = dictionary.index[UNK], dictionary.index[EOS], dictionary.index
    dtype = smallest_index_dtype(len(dictionary))
    sentences = tokens = unknown = 0
    with mmap_dataset_output(prefix, dtype) as writer:
        for line in _progress(iter_lines(path), f"binarize {os.path.basename(path)}", progress):
            words = line.split()
            ids = [index.get(w, unk) for w in words]
            unknown += ids.count(unk) - words.count(UNK)  # (a literal <unk> in the text is not a replacement)
            ids.append(eos)
            writer.add(np.asarray(ids, dtype=dtype))
            sentences += 1
            tokens += len(ids)
    return BinarizedText(prefix, sentences, tokens, unknown)


def split_prefixes(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(split, text prefix) of --trainpref/--validpref/--testpref; comma-separated prefixes are fairseq's further
    splits (valid, valid1, ...)."""
    found = []
    for split, value in (("train", args.trainpref), ("valid", args.validpref), ("test", args.testpref)):
        for k, prefix in enumerate(value.split(",") if value else []):
            found.append((split if k == 0 else f"{split}{k}", prefix))
    return found


def dataset_prefix(destdir: str, split: str, src: str, tgt: str, lang: str) -> str:
    return os.path.join(destdir, f"{split}.{src}-{tgt}.{lang}")


def _run(args: argparse.Namespace) -> Optional[int]:
    s, t = args.source_lang, args.target_lang
    splits = split_prefixes(args)
    os.makedirs(args.destdir, exist_ok=True)
    if args.joined_dictionary:
        src_dict = tgt_dict = Dictionary.count([f"{args.trainpref}.{s}", f"{args.trainpref}.{t}"],
                                               progress=not args.no_progress)
    else:
        src_dict, tgt_dict = Dictionary.load(args.srcdict), Dictionary.load(args.tgtdict)
    for lang, dictionary in ((s, src_dict), (t, tgt_dict)):
        dictionary.save(os.path.join(args.destdir, f"dict.{lang}.txt"))
        for split, prefix in splits:
            done = binarize_text(f"{prefix}.{lang}", dictionary, dataset_prefix(args.destdir, split, s, t, lang),
                                 progress=not args.no_progress)
            logger.info("[%s] %s.%s: %d sents, %d tokens, %.3g%% replaced by %s; dictionary %d types", lang, prefix,
                        lang, done.sentences, done.tokens, 100 * done.unknown / max(done.tokens, 1), UNK,
                        len(dictionary))
    logger.info("wrote %s", args.destdir)
    return 0


def configure_preprocess(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-s", "--source-lang", required=True, metavar="S", help="source language code")
    parser.add_argument("-t", "--target-lang", required=True, metavar="T", help="target language code")
    parser.add_argument("--trainpref", metavar="PREFIX", help="training text: PREFIX.S and PREFIX.T")
    parser.add_argument("--validpref", metavar="PREFIX", help="validation text (comma-separated: valid, valid1, ..)")
    parser.add_argument("--testpref", metavar="PREFIX", help="test text (comma-separated: test, test1, ..)")
    parser.add_argument("--destdir", required=True, metavar="DIR", help="the data-bin to write")
    dicts = parser.add_mutually_exclusive_group(required=True)
    dicts.add_argument("--joined-dictionary", action="store_true",
                       help="one dictionary of both languages' training text")
    dicts.add_argument("--srcdict", metavar="FILE", help="the source dictionary (with --tgtdict)")
    parser.add_argument("--tgtdict", metavar="FILE", help="the target dictionary (with --srcdict)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.epilog = EPILOG
    parser.set_defaults(run=_run)
    declare_files(parser, inputs=("srcdict", "tgtdict"), derived_inputs=_inputs, derived_outputs=_outputs)


def _inputs(args: argparse.Namespace) -> list[tuple[str, str]]:
    # (checked here, before any file: an option missing or in the wrong company is a one-line error)
    if args.joined_dictionary and not args.trainpref:
        raise ValueError("--joined-dictionary counts the training text: give --trainpref")
    if args.srcdict and not args.tgtdict:
        raise ValueError("--srcdict needs --tgtdict (or --joined-dictionary for neither)")
    if args.tgtdict and not args.srcdict:
        raise ValueError("--tgtdict needs --srcdict")
    splits = split_prefixes(args)
    if not splits:
        raise ValueError("nothing to binarize: give --trainpref, --validpref and/or --testpref")
    return [(f"the {split} text ({lang})", f"{prefix}.{lang}") for split, prefix in splits
            for lang in (args.source_lang, args.target_lang)]


def _outputs(args: argparse.Namespace) -> list[tuple[str, str]]:
    s, t = args.source_lang, args.target_lang
    found = [(f"the {lang} dictionary", os.path.join(args.destdir, f"dict.{lang}.txt")) for lang in (s, t)]
    return found + [(f"the binarized {split} text ({lang})", dataset_prefix(args.destdir, split, s, t, lang) + ext)
                    for split, _ in split_prefixes(args) for lang in (s, t) for ext in (".bin", ".idx")]
