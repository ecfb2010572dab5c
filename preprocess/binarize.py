"""``xlpos-prep binarize``: validate a ``.xlpos`` text file against a fairseq data-bin and binarize it.

Input: one line per sentence, one integer per source piece (EOS not included): the piece's XL position.  Each line
must be a permutation of 0..n-1 where n is the number of binarized source tokens of that sentence minus EOS (read
from ``{split}.{S}-{T}.{S}`` in the data-bin).  Output: a fairseq mmap indexed dataset
``{data_bin}/{split}.{S}-{T}.xlpos.{bin,idx}`` in the smallest unsigned dtype fairseq picks for the longest
sentence; both files are written under temporary names and renamed only when every line is valid.

The file names are the contract between this step and the plugin's dataset (`xlpos.data.xl_positions_dataset`
imports them from here). fairseq's default format is written and read by `mmap_dataset`, without fairseq; fairseq
is imported only for a data-bin in one of its other formats. This package never imports the plugin.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np
from tqdm import tqdm

from .io import InputError, count_lines, declare_files, iter_lines
from .mmap_dataset import is_mmap_dataset, mmap_dataset_output, read_sizes, smallest_index_dtype

logger = logging.getLogger(__name__)

EPILOG = """examples:
  # after xlpos-prep preprocess (or fairseq-preprocess) --source-lang en --target-lang ja --destdir data-bin ...
  xlpos-prep binarize --xlpos train.xlpos --data-bin data-bin --split train --source-lang en --target-lang ja
  xlpos-prep binarize --xlpos valid.xlpos test.xlpos --data-bin data-bin --split valid test -s en -t ja
  # writes data-bin/train.en-ja.xlpos.bin and .idx, read by fairseq-train --task translation_xlpos
"""


def xl_positions_prefix(data_bin: str, split: str, source_lang: str, target_lang: str) -> str:
    """Path of a split's binarized XL positions without the ``.bin``/``.idx`` extension."""
    return os.path.join(data_bin, f"{split}.{source_lang}-{target_lang}.xlpos")


def source_tokens_prefix(data_bin: str, split: str, source_lang: str, target_lang: str) -> Optional[str]:
    """Prefix of the binarized source tokens of a split (``{split}.{S}-{T}.{S}``, or the ``{T}-{S}`` order that
    fairseq also accepts), or None when neither exists."""
    for pair in (f"{source_lang}-{target_lang}", f"{target_lang}-{source_lang}"):
        prefix = os.path.join(data_bin, f"{split}.{pair}.{source_lang}")
        if is_mmap_dataset(prefix):  # fairseq-preprocess's default format, read without fairseq
            return prefix
        if os.path.exists(prefix + ".idx") or os.path.exists(prefix):  # another of fairseq's formats
            from fairseq.data import indexed_dataset

            if indexed_dataset.dataset_exists(prefix, impl=indexed_dataset.infer_dataset_impl(prefix)):
                return prefix
    return None


@dataclass(frozen=True)
class BinarizeSummary:
    """What one binarization wrote."""

    prefix: str  # output path without .bin/.idx
    sentences: int
    positions: int
    dtype: str


def parse_positions(line: str, path: str, line_no: int, expected: int) -> np.ndarray:
    """One line of a .xlpos file -> int64 array, checked to be a permutation of 0..expected-1."""
    tokens = line.split()
    values = []
    for token in tokens:
        digits = token[1:] if token.startswith("-") else token
        # int() would also accept '+3', '1_0' and non-ASCII digits; a positions file has none of those.
        if not (digits.isascii() and digits.isdigit()):
            raise InputError(path, line_no, f"{token!r} is not an integer")
        # A position is below the sentence length; the bound also keeps int64 from overflowing on 23 digits.
        if len(digits) > 18:
            raise InputError(path, line_no, f"position {token[:24]}{'...' if len(token) > 24 else ''} is out of "
                                            f"range [0, {expected})")
        values.append(int(token))
    if len(values) != expected:
        raise InputError(path, line_no, f"{len(values)} positions but the binarized source sentence has "
                                        f"{expected} tokens (+ EOS)")
    array = np.asarray(values, dtype=np.int64)
    out_of_range = np.nonzero((array < 0) | (array >= expected))[0]
    if len(out_of_range):
        raise InputError(path, line_no, f"position {values[out_of_range[0]]} is out of range [0, {expected})")
    counts = np.bincount(array, minlength=expected)
    if expected and counts.max() > 1:
        raise InputError(path, line_no, f"position {int(np.argmax(counts > 1))} appears {int(counts.max())} times; "
                                        "XL positions must be a permutation of 0..n-1")
    return array


def _source_sizes(data_bin: str, split: str, source_lang: str, target_lang: str) -> tuple[str, np.ndarray]:
    prefix = source_tokens_prefix(data_bin, split, source_lang, target_lang)
    if prefix is None:
        expected = os.path.join(data_bin, f"{split}.{source_lang}-{target_lang}.{source_lang}")
        raise FileNotFoundError(f"{expected}.bin/.idx not found: binarize the tokens of split '{split}' first "
                                f"(xlpos-prep preprocess or fairseq-preprocess, --source-lang {source_lang} "
                                f"--target-lang {target_lang})")
    if is_mmap_dataset(prefix):
        return prefix, read_sizes(prefix)
    from fairseq.data import Dictionary, indexed_dataset

    impl = indexed_dataset.infer_dataset_impl(prefix)
    dictionary = None
    if impl == "raw":
        dictionary = Dictionary.load(os.path.join(data_bin, f"dict.{source_lang}.txt"))
    dataset = indexed_dataset.make_dataset(prefix, impl, dictionary=dictionary)
    # A copy: fairseq's mmap sizes are a view that dies with the dataset object.
    return prefix, np.array(dataset.sizes, dtype=np.int64)


def binarize_xl_positions(xlpos_path: str, data_bin: str, split: str, source_lang: str, target_lang: str,
                          progress: bool = True) -> BinarizeSummary:
    """Validate every line of `xlpos_path` and write ``{split}.{S}-{T}.xlpos.{bin,idx}`` into `data_bin`."""
    source_prefix, source_sizes = _source_sizes(data_bin, split, source_lang, target_lang)
    source_name = source_prefix + ".bin"
    n_lines = count_lines(xlpos_path)  # the lines themselves are streamed below: a corpus is never held
    if n_lines < len(source_sizes):
        raise InputError(xlpos_path, n_lines + 1, f"file ends after {n_lines} lines but {source_name} has "
                                                  f"{len(source_sizes)} sentences")
    if n_lines > len(source_sizes):
        raise InputError(xlpos_path, len(source_sizes) + 1, f"extra line: {source_name} has only "
                                                            f"{len(source_sizes)} sentences")
    max_position = int(source_sizes.max()) - 1 if len(source_sizes) else 0
    dtype = smallest_index_dtype(max_position)
    prefix = xl_positions_prefix(data_bin, split, source_lang, target_lang)
    total = 0
    with mmap_dataset_output(prefix, dtype) as writer:
        for line_no, (line, size) in enumerate(
                tqdm(zip(iter_lines(xlpos_path), source_sizes), total=n_lines,
                     desc=f"binarize {os.path.basename(xlpos_path)}", unit=" sent", file=sys.stderr,
                     disable=not progress), 1):
            positions = parse_positions(line, xlpos_path, line_no, int(size) - 1)
            writer.add(positions)
            total += len(positions)
    summary = BinarizeSummary(prefix, n_lines, total, np.dtype(dtype).name)
    logger.info("wrote %s.{bin,idx}: %d sentences, %d positions, dtype %s", prefix, summary.sentences,
                summary.positions, summary.dtype)
    return summary


def _run(args: argparse.Namespace) -> Optional[int]:
    pairs = split_files(args.split, args.xlpos)
    # Every split in one process: a data-bin's splits pay one start-up.
    for split, xlpos_path in pairs:
        binarize_xl_positions(xlpos_path, args.data_bin, split, args.source_lang, args.target_lang,
                              progress=not args.no_progress)
    return 0


def split_files(splits: list[str], xlpos_paths: list[str]) -> list[tuple[str, str]]:
    """--split and --xlpos paired in order; a count mismatch or a split named twice is a ValueError."""
    if len(splits) != len(xlpos_paths):
        raise ValueError(f"--split names {len(splits)} split(s) but --xlpos gives {len(xlpos_paths)} file(s): "
                         "give one file per split, in the same order")
    twice = sorted({s for s in splits if splits.count(s) > 1})
    if twice:
        raise ValueError(f"--split names {twice[0]!r} twice")
    return list(zip(splits, xlpos_paths))


def configure_binarize(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--xlpos", required=True, nargs="+", metavar="FILE",
                        help="XL positions: one line per sentence, one integer per source piece (no EOS); one "
                             "file per --split, in the same order")
    parser.add_argument("--data-bin", required=True, metavar="DIR",
                        help="data-bin holding {split}.{S}-{T}.{S}.bin/.idx (by xlpos-prep preprocess or "
                             "fairseq-preprocess)")
    parser.add_argument("--split", required=True, nargs="+", metavar="SPLIT",
                        help="split name(s) as binarized by fairseq (train, valid, test, ...)")
    parser.add_argument("-s", "--source-lang", required=True, metavar="S", help="source language code")
    parser.add_argument("-t", "--target-lang", required=True, metavar="T", help="target language code")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.epilog = EPILOG
    parser.set_defaults(run=_run)
    declare_files(parser, inputs=("xlpos",), input_dirs=("data_bin",), derived_outputs=_outputs)


def _outputs(args: argparse.Namespace) -> list[tuple[str, str]]:
    # (checked here, before the files: a split named twice would otherwise read as two outputs on one file)
    splits = [split for split, _ in split_files(args.split, args.xlpos)]
    return [(f"the binarized positions of {split}", xl_positions_prefix(args.data_bin, split, args.source_lang,
                                                                        args.target_lang) + ext)
            for split in splits for ext in (".bin", ".idx")]
