"""Piece-level cross-lingual (XL) positions: words + word order + sentencepiece model -> one position per piece.

Contract (docs/design.md, "Piece-level XL positions"): the tokenized source line is encoded with sentencepiece; pieces
map to words through the word-boundary marker "▁" (a piece starting with it begins a new word; a lone "▁" piece,
which sentencepiece emits before a word starting with an out-of-vocabulary character, belongs to the following
word); words are laid out in the given order with each word's pieces together and in their own order; a piece's
XL position is its index in that reordered piece sequence. Positions are a permutation of 0..N-1 for N pieces
(EOS, appended later by fairseq, is not included). Any disagreement between the words and the pieces is an error
naming the file and line, never padding.

The sentencepiece model must use its default prefix marker (not `treat_whitespace_as_suffix`) and split on
whitespace (`split_by_whitespace`, the default), so no piece spans two words; both are checked per piece.
`--pieces-out` writes the exact pieces whose positions were computed, for fairseq-preprocess.

A sentencepiece model trained on other text (a Japanese model on English) still encodes every line, into
mostly `<unk>` pieces; positions then warns when more than UNK_WARN_RATE of the pieces are unknown. 5 %: a model
trained on the text itself has well under 0.1 % (character coverage 0.9995 and up), the mismatches this is meant
to catch have tens of percent (a Japanese model on English: 49 %).
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import logging

from .io import (WORKERS, InputError, Shard, atomic_output, check_same_length, count_lines, count_sentences,
                 declare_files, iter_lines, iter_tokens, shard_option)
from .metrics import parse_order_line
from .oracle import order_from_ranks, parse_ranks_line
from .parallel import map_in_order

logger = logging.getLogger(__name__)

WORD_BOUNDARY = "\u2581"  # "▁", sentencepiece's whitespace marker
MONOTONE = "monotone"
UNK_WARN_RATE = 0.05  # see the module docstring


def unk_rate_warning(n_unk: int, n_pieces: int, spm_path: str, text_path: str) -> str | None:
    """A one-line warning when more than UNK_WARN_RATE of the pieces of `text_path` are <unk>, else None."""
    if n_pieces == 0 or n_unk / n_pieces <= UNK_WARN_RATE:
        return None
    return (f"{spm_path}: {100.0 * n_unk / n_pieces:.1f}% of the {n_pieces} pieces of {text_path} are <unk> "
            f"(warning above {100 * UNK_WARN_RATE:.0f}%): this sentencepiece model does not fit this text "
            f"(another language or script?)")


def piece_word_ids(pieces: list[str]) -> list[int]:
    """Index of the source word each piece belongs to (0-based, non-decreasing)."""
    word_ids = []
    word = -1
    joins_next = False  # the previous piece was a lone "▁": this piece continues its word
    for piece in pieces:
        if WORD_BOUNDARY in piece[1:]:
            raise ValueError(f"piece {piece!r} spans a word boundary: the sentencepiece model must split on "
                             f"whitespace and mark word starts with a {WORD_BOUNDARY!r} prefix")
        if (piece.startswith(WORD_BOUNDARY) or word < 0) and not joins_next:
            word += 1
        joins_next = piece == WORD_BOUNDARY
        word_ids.append(word)
    return word_ids


def xl_positions_for_pieces(word_ids: list[int], order: list[int]) -> list[int]:
    """XL position of each piece: its index once the words are laid out in `order`, pieces of a word together."""
    n_words = len(order)
    if sorted(order) != list(range(n_words)):
        raise ValueError(f"the order is not a permutation of 0..{n_words - 1}")
    n_found = word_ids[-1] + 1 if word_ids else 0
    if n_found != n_words or any(b not in (a, a + 1) for a, b in zip([-1] + word_ids, word_ids)):
        raise ValueError(f"the pieces belong to {n_found} words but the order has {n_words}")
    first_piece = [0] * (n_words + 1)  # first_piece[w] .. first_piece[w+1]-1 are the pieces of word w
    for w in word_ids:
        first_piece[w + 1] += 1
    for w in range(n_words):
        first_piece[w + 1] += first_piece[w]
    positions = [0] * len(word_ids)
    next_position = 0
    for w in order:
        for piece in range(first_piece[w], first_piece[w + 1]):
            positions[piece] = next_position
            next_position += 1
    return positions


def xl_positions_for_line(words: list[str], order: list[int], sp) -> tuple[list[str], list[int]]:
    """Pieces of the tokenized line `words` and their XL positions under the word order `order`.

    `sp` is a sentencepiece.SentencePieceProcessor. Raises ValueError when the pieces imply a different number of
    words than `words` (e.g. a word that sentencepiece normalizes away) or `order` has the wrong length.
    """
    if len(order) != len(words):
        raise ValueError(f"the order has {len(order)} entries but the sentence has {len(words)} words")
    pieces = sp.encode(" ".join(words), out_type=str)
    word_ids = piece_word_ids(pieces)
    n_found = word_ids[-1] + 1 if word_ids else 0
    if n_found != len(words):
        vanished = [w for w in words if not sp.encode(w, out_type=str)]
        hint = f"; words sentencepiece turns into nothing: {vanished[:5]!r}" if vanished else ""
        raise ValueError(f"sentencepiece produced pieces for {n_found} words but the line has {len(words)}"
                         f"{hint}")
    return pieces, xl_positions_for_pieces(word_ids, order)


_worker_state: dict = {}


def _init_worker(spm_path: str, src_path: str, order_kind: str, order_path: str | None) -> None:
    import sentencepiece

    try:
        _worker_state["sp"] = sentencepiece.SentencePieceProcessor(model_file=spm_path)
    except (OSError, RuntimeError) as e:
        raise InputError(spm_path, None, f"cannot load the sentencepiece model "
                                         f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    _worker_state.update(src_path=src_path, order_kind=order_kind, order_path=order_path)


def _parse_order(lineno: int, n: int, text: str | None) -> list[int]:
    """Line `lineno`'s order of its n words, from the order or oracle file's line `text` (None: monotone)."""
    kind, path = _worker_state["order_kind"], _worker_state["order_path"]
    if kind == "oracle":
        return order_from_ranks(parse_ranks_line(text, path, lineno, n, _worker_state["src_path"]))
    if kind == "order":
        return parse_order_line(text, n, path, lineno)
    return list(range(n))


def _positions_job(job: tuple[int, list[str], str | None]) -> tuple[list[str], list[int], int, int]:
    lineno, words, order_text = job
    order = _parse_order(lineno, len(words), order_text)
    sp = _worker_state["sp"]
    try:
        pieces, positions = xl_positions_for_line(words, order, sp)
    except ValueError as e:
        raise InputError(_worker_state["src_path"], lineno, str(e)) from None
    unk = sp.unk_id()
    return pieces, positions, sum(sp.piece_to_id(p) == unk for p in pieces), len(words)


def run_positions(args: argparse.Namespace) -> int:
    # Streamed, never held (a WMT training split is millions of sentences): the files' line counts first, then
    # the shard's lines of the source and its order, side by side; each order line is checked where it is used.
    n = count_sentences(args.src)
    kind, order_path = (("oracle", args.oracle) if args.oracle is not None else
                        ("monotone", None) if args.order == MONOTONE else ("order", args.order))
    if order_path is not None:
        check_same_length(args.src, n, order_path, count_lines(order_path))
    start, end = Shard.parse(args.shard).bounds(n)
    orders = (itertools.islice(iter_lines(order_path), start, end) if order_path is not None
              else itertools.repeat(None))
    jobs = ((k, words, order) for k, (words, order)
            in enumerate(zip(iter_tokens(args.src, start=start, end=end), orders), start + 1))
    n_words = n_pieces = n_moved = n_unk = 0
    with atomic_output(args.out) as out, \
            (atomic_output(args.pieces_out) if args.pieces_out else contextlib.nullcontext()) as pieces_out:
        for pieces, positions, unknown, words in map_in_order(
                _positions_job, jobs, workers=args.workers, total=end - start, desc="positions",
                initializer=_init_worker, initargs=(args.spm, args.src, kind, order_path)):
            out.write(" ".join(map(str, positions)) + "\n")
            if pieces_out is not None:
                pieces_out.write(" ".join(pieces) + "\n")
            n_words += words
            n_pieces += len(positions)
            n_unk += unknown
            n_moved += sum(p != k for k, p in enumerate(positions))
    logger.info("%d sentences (lines %d-%d): %d words -> %d pieces (%.2f per word); %.1f%% of pieces moved by "
                "the order; wrote %s%s", end - start, start + 1, end, n_words, n_pieces,
                n_pieces / max(n_words, 1), 100.0 * n_moved / max(n_pieces, 1), args.out,
                f" and {args.pieces_out}" if args.pieces_out else "")
    warning = unk_rate_warning(n_unk, n_pieces, args.spm, args.src)
    if warning:
        logger.warning("%s", warning)
    return 0


def configure_positions(parser: argparse.ArgumentParser) -> None:
    parser.epilog = """examples:
  xlpos-prep positions --src train.en --order train.order --spm spm.model --out train.xlpos \\
      --pieces-out train.spm.en --workers 2
  xlpos-prep positions --src test.en --order monotone --spm spm.model --out test.xlpos
  xlpos-prep positions --src train.en --oracle train.oracle --spm spm.model --out train.oracle.xlpos

output: per line one integer per sentencepiece piece (EOS not included), a permutation of 0..N-1.
--pieces-out writes the pieces themselves, the exact input fairseq-preprocess should binarize with them.
A file literally named 'monotone' must be given as ./monotone."""
    parser.add_argument("--src", required=True, help="tokenized source sentences (words split by spaces)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--order", help="order file (per line a permutation of the word indices in target order), "
                                       "or 'monotone' for identity positions")
    which.add_argument("--oracle", help="oracle ranks instead of an order (stable sort on rank; for ablations)")
    parser.add_argument("--spm", required=True, help="sentencepiece model file")
    parser.add_argument("--out", required=True, help="output .xlpos file (written atomically)")
    parser.add_argument("--pieces-out", help="also write the sentencepiece pieces of each line here")
    parser.add_argument("--workers", type=WORKERS, default=1, help="processes (default 1)")
    parser.add_argument("--shard", type=shard_option, default="0/1",
                        help="process only contiguous shard I of N lines, e.g. 0/4")
    parser.set_defaults(run=run_positions)
    declare_files(parser, inputs=("src", "oracle", "spm"), outputs=("out", "pieces_out"),
                  derived_inputs=lambda args: [] if args.order in (None, MONOTONE) else [("--order", args.order)])
