"""Oracle reordering ranks from word alignments, computed exactly as lader (Neubig et al. 2012) does.

`xlpos-prep oracle` turns Pharaoh alignments into one integer rank per source word: sorting the source words by
rank (stably) gives the oracle target-side order; equal ranks are ties (words of one block).

The definition follows lader's `CombinedAlign` (null handler + COMBINE_BLOCKS, lader's default) and `Ranks`:

1. Each source word's target span is [min, max] of the target indices it is aligned to; unaligned words have none.
2. Blocks (lader's CombineBlocks): visit the aligned words in ascending order of (span start, span end, index).
   Start a block with the first unvisited word; keep absorbing the next word in that order while its span starts
   at or before the block's current end. Absorbing a word widens the block's *source* range to the hull of the
   absorbed words, and every word inside that hull is pulled in too (including unaligned words and words visited
   earlier), with its span end widening the block's end. The block's span is (start of the word that opened it,
   final end), and every word in the source range gets it. Overlap therefore merges transitively, blocks are
   source-contiguous, and the resulting spans are pairwise identical or disjoint.
   Note (lader's behaviour, kept): a word visited earlier that lies inside a later block's source hull takes the
   later block's span, not the union with its own span - e.g. spans 5,0,5-6,1 for words 0..3 give ranks 1 1 1 0,
   not one block of all four.
3. Unaligned words (those still without a span):
   - `right` (default): take the span of the right neighbour, scanning right to left so a run of unaligned
     words all take the span of the first aligned word after them; words after the last aligned word take the
     span of the last aligned word.
   - `left`: words after the last aligned word get a span after every other span (lader: "mainly for periods"),
     so they form their own final rank; other unaligned words take the span of the left neighbour; words before
     the first aligned word take the span of the first aligned word. This is lader's rule, which differs from a
     symmetric mirror image of `right` for sentence-final unaligned words; we keep lader's.
4. Ranks: distinct spans in increasing order get ranks 0..k-1 (lader orders spans with "l < r when one end is
   smaller and the other is not larger", which is a total order on identical-or-disjoint spans).
   A sentence without any link gets rank 0 for every word.
"""
from __future__ import annotations

import argparse
import itertools
import logging
import re
from dataclasses import dataclass

from .io import (WORKERS, InputError, Shard, atomic_output, check_same_length, count_lines, count_sentences,
                 declare_files, iter_lines, iter_tokens, read_lines, shard_option)
from .parallel import map_in_order

logger = logging.getLogger(__name__)

ATTACH_NULL_CHOICES = ("right", "left")

# "i-j" (sure) or "i?j" (possible), as fast_align / awesome-align / Moses tools write them.
_LINK = re.compile(r"(\d+)[-?](\d+)")
# lader uses DBL_MAX for sentence-final unaligned words under `left`: a span after every real one.
_AFTER_ALL = float("inf")


def parse_alignment_line(line: str, n_src: int, n_tgt: int | None, path: str, lineno: int) -> list[tuple[int, int]]:
    """Sorted unique (source, target) links of one Pharaoh line; an empty line means no links.

    A malformed token or an index outside the sentence raises InputError naming `path` and `lineno`
    (target indices are checked only when `n_tgt` is given).
    """
    links = set()
    for token in line.split():
        match = _LINK.fullmatch(token)
        if match is None:
            raise InputError(path, lineno, f"malformed alignment link {token!r} (expected i-j or i?j)")
        i, j = int(match.group(1)), int(match.group(2))
        if i >= n_src:
            raise InputError(path, lineno, f"link {token}: source index {i} out of range for a sentence of "
                                           f"{n_src} words")
        if n_tgt is not None and j >= n_tgt:
            raise InputError(path, lineno, f"link {token}: target index {j} out of range for a sentence of "
                                           f"{n_tgt} words")
        links.add((i, j))
    return sorted(links)


def _word_spans(n_src: int, links: list[tuple[int, int]]) -> list[tuple[float, float] | None]:
    spans: list[tuple[float, float] | None] = [None] * n_src
    for i, j in links:
        span = spans[i]
        spans[i] = (j, j) if span is None else (min(span[0], j), max(span[1], j))
    return spans


def _combine_blocks(spans: list[tuple[float, float] | None]) -> list[tuple[float, float] | None]:
    """lader's block combination (step 2 of the module docstring); unaligned words outside blocks stay None."""
    visit = sorted((span, i) for i, span in enumerate(spans) if span is not None)
    combined = list(spans)

    def end_of(i: int) -> float:
        # Reading the original spans is equivalent to lader's in-place reads: a word pulled in from an earlier
        # block carries that block's end, which is before this block's start and cannot widen it.
        span = spans[i]
        return -1 if span is None else span[1]

    k = 0
    while k < len(visit):
        (block_start, block_end), first = visit[k]
        lo = hi = first
        k += 1
        while k < len(visit) and visit[k][0][0] <= block_end:
            word = visit[k][1]
            while lo > word:
                lo -= 1
                block_end = max(block_end, end_of(lo))
            while hi < word:
                hi += 1
                block_end = max(block_end, end_of(hi))
            k += 1
        for i in range(lo, hi + 1):
            combined[i] = (block_start, block_end)
    return combined


def _attach_unaligned(spans: list[tuple[float, float] | None], attach_null: str) -> list[tuple[float, float] | None]:
    spans = list(spans)
    aligned = [i for i, span in enumerate(spans) if span is not None]
    if not aligned:
        return spans
    first, last = aligned[0], aligned[-1]
    if attach_null == "right":
        for i in range(last - 1, -1, -1):
            if spans[i] is None:
                spans[i] = spans[i + 1]
        for i in range(last + 1, len(spans)):
            spans[i] = spans[last]
    elif attach_null == "left":
        for i in range(last + 1, len(spans)):
            spans[i] = (_AFTER_ALL, _AFTER_ALL)
        for i in range(first + 1, last):
            if spans[i] is None:
                spans[i] = spans[i - 1]
        for i in range(first):
            spans[i] = spans[first]
    else:
        raise ValueError(f"attach_null must be one of {ATTACH_NULL_CHOICES}, got {attach_null!r}")
    return spans


def oracle_ranks(n_src: int, links: list[tuple[int, int]], attach_null: str = "right") -> list[int]:
    """lader's oracle ranks of the `n_src` source words under the alignment `links` (see the module docstring)."""
    if attach_null not in ATTACH_NULL_CHOICES:
        raise ValueError(f"attach_null must be one of {ATTACH_NULL_CHOICES}, got {attach_null!r}")
    for i, _ in links:
        if not 0 <= i < n_src:
            raise ValueError(f"source index {i} out of range for a sentence of {n_src} words")
    spans = _attach_unaligned(_combine_blocks(_word_spans(n_src, links)), attach_null)
    if any(span is None for span in spans):  # no link at all: everything ties
        return [0] * n_src
    rank_of_span = {span: r for r, span in enumerate(sorted(set(spans)))}
    return [rank_of_span[span] for span in spans]


def order_from_ranks(ranks: list[int]) -> list[int]:
    """Source indices in oracle target order: a stable sort on rank (ties keep source order)."""
    return sorted(range(len(ranks)), key=ranks.__getitem__)


def btg_closest_order(ranks: list[int]) -> list[int]:
    """The BTG permutation of the source words with the fewest pairs in the wrong order against `ranks`: the best
    order any BTG reorderer can output, so its Kendall tau is the ceiling of every BTG reorderer on these oracles
    (the oracle order itself need not be a BTG permutation). Pairs that the oracle ties cost nothing; a straight
    node wins a tie against an inverted one. Exact, O(n^3) (a CKY over spans with rectangle sums of wrong pairs)."""
    n = len(ranks)
    if n < 2:
        return list(range(n))
    # above[i][j] = #{a < i, b < j: ranks[a] > ranks[b]}, below likewise with <
    above = [[0] * (n + 1) for _ in range(n + 1)]
    below = [[0] * (n + 1) for _ in range(n + 1)]
    for a in range(n):
        for b in range(n):
            above[a + 1][b + 1] = above[a][b + 1] + above[a + 1][b] - above[a][b] + (ranks[a] > ranks[b])
            below[a + 1][b + 1] = below[a][b + 1] + below[a + 1][b] - below[a][b] + (ranks[a] < ranks[b])

    def across(table: list[list[int]], left: int, split: int, right: int) -> int:
        return table[split][right] - table[left][right] - table[split][split] + table[left][split]

    cost = [[0] * (n + 1) for _ in range(n + 1)]
    best: dict[tuple[int, int], tuple[int, bool]] = {}
    for width in range(2, n + 1):
        for left in range(n - width + 1):
            right = left + width
            found = None
            for split in range(left + 1, right):
                inner = cost[left][split] + cost[split][right]
                straight = inner + across(above, left, split, right)  # a left word ranked after a right one
                inverted = inner + across(below, left, split, right)
                for total, invert in ((straight, False), (inverted, True)):
                    if found is None or total < found[0]:
                        found = (total, split, invert)
            cost[left][right] = found[0]
            best[left, right] = found[1:]

    def order(left: int, right: int) -> list[int]:
        if right - left == 1:
            return [left]
        split, invert = best[left, right]
        first, second = order(left, split), order(split, right)
        return second + first if invert else first + second

    return order(0, n)


def read_oracle(path: str, lengths: list[int] | None = None, lengths_from: str = "the source") -> list[list[int]]:
    """Oracle rank lines as written by `xlpos-prep oracle`.

    Every line must hold dense ranks (each of 0..max used at least once, which the metrics rely on); with
    `lengths` (the word counts of the file `lengths_from`), line k must hold exactly lengths[k] ranks. Errors
    name the file and line.
    """
    lines = read_lines(path)
    if lengths is not None:
        check_same_length(lengths_from, len(lengths), path, len(lines))
    return [parse_ranks_line(line, path, lineno, None if lengths is None else lengths[lineno - 1], lengths_from)
            for lineno, line in enumerate(lines, 1)]


def parse_ranks_line(line: str, path: str, lineno: int, n: int | None = None,
                     lengths_from: str = "the source") -> list[int]:
    """One line of read_oracle's file (line `lineno` of `path`); with `n`, it must hold n ranks (the words of
    line `lineno` of `lengths_from`)."""
    try:
        ranks = [int(x) for x in line.split()]
    except ValueError:
        raise InputError(path, lineno, "ranks must be space-separated integers") from None
    if ranks and (min(ranks) < 0 or len(set(ranks)) != max(ranks) + 1):
        raise InputError(path, lineno, "ranks must be dense: every rank in 0..max used at least once")
    if n is not None and len(ranks) != n:
        raise InputError(path, lineno, f"{len(ranks)} ranks for a source sentence of {n} words "
                                       f"({lengths_from}:{lineno})")
    return ranks


@dataclass(frozen=True)
class _OracleJob:
    lineno: int
    n_src: int
    n_tgt: int | None
    line: str


_worker_config: dict = {}


def _init_worker(align_path: str, attach_null: str) -> None:
    _worker_config.update(align_path=align_path, attach_null=attach_null)


def _oracle_job(job: _OracleJob) -> tuple[list[int], int, int]:
    links = parse_alignment_line(job.line, job.n_src, job.n_tgt, _worker_config["align_path"], job.lineno)
    ranks = oracle_ranks(job.n_src, links, _worker_config["attach_null"])
    n_aligned = len({i for i, _ in links})
    return ranks, len(links), n_aligned


def run_oracle(args: argparse.Namespace) -> int:
    # Streamed, never held: the line counts first, then the shard's lines of the three files side by side.
    n = count_sentences(args.src)
    for other in (args.align, args.tgt):
        if other is not None:
            check_same_length(args.src, n, other, count_lines(other))
    start, end = Shard.parse(args.shard).bounds(n)
    sources = iter_tokens(args.src, start=start, end=end)
    targets = (iter_tokens(args.tgt, start=start, end=end) if args.tgt is not None else itertools.repeat(None))
    jobs = (_OracleJob(k, len(src), None if tgt is None else len(tgt), line) for k, (src, tgt, line)
            in enumerate(zip(sources, targets, itertools.islice(iter_lines(args.align), start, end)), start + 1))
    n_words = n_links = n_aligned = n_unlinked_sents = n_ranks = 0
    with atomic_output(args.out) as out:
        for ranks, links, aligned in map_in_order(_oracle_job, jobs, workers=args.workers, total=end - start,
                                                  desc="oracle", initializer=_init_worker,
                                                  initargs=(args.align, args.attach_null)):
            out.write(" ".join(map(str, ranks)) + "\n")
            n_words += len(ranks)
            n_links += links
            n_aligned += aligned
            n_unlinked_sents += links == 0
            n_ranks += max(ranks) + 1 if ranks else 0
    n_sents = end - start
    logger.info("%d sentences (lines %d-%d), %d words, %d links; %.1f%% of words aligned; %d sentences without "
                "links; %.2f ranks per sentence (%.2f words); wrote %s", n_sents, start + 1, end, n_words,
                n_links, 100.0 * n_aligned / max(n_words, 1), n_unlinked_sents, n_ranks / max(n_sents, 1),
                n_words / max(n_sents, 1), args.out)
    return 0


def configure_oracle(parser: argparse.ArgumentParser) -> None:
    parser.epilog = """examples:
  xlpos-prep oracle --src train.en --align train.align --out train.oracle
  xlpos-prep oracle --src train.en --tgt train.ja --align train.align --out train.oracle --workers 2
  xlpos-prep oracle --src train.en --align train.align --out train.oracle.0 --shard 0/4

output: one line per sentence, one integer rank per source word (ties allowed); a stable sort of the source
words by rank gives the oracle target-side order."""
    parser.add_argument("--src", required=True, help="tokenized source sentences (for the word counts)")
    parser.add_argument("--align", required=True, help="Pharaoh alignments 'i-j' (0-based source-target)")
    parser.add_argument("--out", required=True, help="output oracle rank file (written atomically)")
    parser.add_argument("--tgt", help="tokenized target sentences; when given, target indices are range-checked")
    parser.add_argument("--attach-null", choices=ATTACH_NULL_CHOICES, default="right",
                        help="attach unaligned source words to the right (default) or left neighbour, as lader")
    parser.add_argument("--workers", type=WORKERS, default=1, help="processes (default 1)")
    parser.add_argument("--shard", type=shard_option, default="0/1",
                        help="process only contiguous shard I of N lines, e.g. 0/4")
    parser.set_defaults(run=run_oracle)
    declare_files(parser, inputs=("src", "align", "tgt"), outputs=("out",))
