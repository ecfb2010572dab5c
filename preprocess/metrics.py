"""Reordering quality against oracle ranks: Kendall tau and the fuzzy reordering score, as lader computes them.

An *order* lists source indices in predicted target order (lader's output format); *ranks* are oracle ranks
(preprocess/oracle.py), dense integers with ties.

- Kendall tau (lader's LossTau): over pairs of source words whose oracle ranks differ, a pair is discordant when
  the order puts the word with the higher rank first. tau = 1 - discordant / pairs. A sentence without such pairs
  scores 1 on its own and adds 0/0 to the corpus totals.
- Fuzzy reordering score (lader's LossFuzzy/LossChunk): walk the order between a start marker (rank -1) and an
  end marker (rank max+1); a step from rank a to rank b is fine when b == a or b == a + 1 (lader's
  Ranks::IsContiguous - so ties may follow each other in either source order), otherwise it is a break.
  FRS = 1 - breaks / (n + 1). As in lader, when all words share one rank nothing can be misordered: the sentence
  adds 0/0 (scores 1 on its own). lader keeps n + 1 as the denominator even when ties make it unreachable.
"""
from __future__ import annotations

import argparse
import bisect
import json
import logging
import sys
from dataclasses import asdict, dataclass

from .io import InputError, atomic_output, check_same_length, declare_files, read_lines
from .oracle import read_oracle

logger = logging.getLogger(__name__)


def ranks_of_order(order: list[int]) -> list[int]:
    """Inverse permutation: xl[order[k]] = k, the cross-lingual position of each source word."""
    xl = [0] * len(order)
    for k, i in enumerate(order):
        xl[i] = k
    return xl


def monotone_order(n: int) -> list[int]:
    return list(range(n))


def reversed_order(n: int) -> list[int]:
    return list(range(n - 1, -1, -1))


def kendall_tau_counts(order: list[int], ranks: list[int]) -> tuple[int, int]:
    """(discordant pairs, pairs with different oracle ranks) of one sentence."""
    seq = [ranks[i] for i in order]
    # Inversions counted right to left with a sorted list: O(n log n) comparisons, list moves in C.
    discordant = 0
    seen: list[int] = []
    for r in reversed(seq):
        discordant += bisect.bisect_left(seen, r)
        bisect.insort(seen, r)
    counts: dict[int, int] = {}
    for r in seq:
        counts[r] = counts.get(r, 0) + 1
    n = len(seq)
    pairs = n * (n - 1) // 2 - sum(c * (c - 1) // 2 for c in counts.values())
    return discordant, pairs


def agreed_kendall_tau_counts(order: list[int], ranks: list[int], other: list[int]) -> tuple[int, int]:
    """(discordant pairs, pairs) of one sentence over only the word pairs that `ranks` and `other` (a second
    oracle of the sentence, e.g. from an independent alignment) both order, and order the same way: Kendall tau on
    what two draws of the oracle agree on, so that the oracle's own noise does not count against the order."""
    position = ranks_of_order(order)
    discordant = pairs = 0
    for i in range(len(order)):
        for j in range(i + 1, len(order)):
            if ranks[i] == ranks[j] or other[i] == other[j] or (ranks[i] < ranks[j]) != (other[i] < other[j]):
                continue
            pairs += 1
            discordant += (position[i] < position[j]) != (ranks[i] < ranks[j])
    return discordant, pairs


def fuzzy_reordering_counts(order: list[int], ranks: list[int]) -> tuple[int, int]:
    """(breaks, n + 1) of one sentence; (0, 0) when all oracle ranks are equal (nothing can be misordered)."""
    if not ranks or max(ranks) == 0:
        return 0, 0
    top = max(ranks)
    previous = -1
    breaks = 0
    for i in order:
        r = ranks[i]
        if r != previous and r != previous + 1:
            breaks += 1
        previous = r
    if previous != top:  # last word -> end marker (rank top + 1)
        breaks += 1
    return breaks, len(order) + 1


@dataclass(frozen=True)
class ReorderingScores:
    corpus_tau: float
    sentence_tau: float
    corpus_frs: float
    sentence_frs: float
    n_sentences: int


def _score(loss: int, total: int) -> float:
    return 1.0 if total == 0 else 1.0 - loss / total


def evaluate_orders(orders: list[list[int]], ranks: list[list[int]]) -> ReorderingScores:
    """Corpus-level (summed counts) and sentence-average tau and FRS of `orders` against oracle `ranks`."""
    if len(orders) != len(ranks):
        raise ValueError(f"{len(orders)} orders for {len(ranks)} oracle rank lines")
    discordant = pairs = breaks = slots = 0
    tau_sum = frs_sum = 0.0
    for order, sentence_ranks in zip(orders, ranks):
        d, p = kendall_tau_counts(order, sentence_ranks)
        b, s = fuzzy_reordering_counts(order, sentence_ranks)
        discordant, pairs, breaks, slots = discordant + d, pairs + p, breaks + b, slots + s
        tau_sum += _score(d, p)
        frs_sum += _score(b, s)
    n = len(orders)
    return ReorderingScores(corpus_tau=_score(discordant, pairs), sentence_tau=tau_sum / n if n else 1.0,
                            corpus_frs=_score(breaks, slots), sentence_frs=frs_sum / n if n else 1.0,
                            n_sentences=n)


def parse_order_line(line: str, n: int, path: str, lineno: int, reference: str | None = None) -> list[int]:
    """One order line: must be a permutation of 0..n-1 (lader's output may carry extra tab-separated fields).
    `reference`: the file `n` comes from; a permutation of another length then names both files, since either
    may be the wrong one."""
    fields = line.split("\t", 1)[0].split()
    try:
        order = [int(x) for x in fields]
    except ValueError:
        raise InputError(path, lineno, "an order must be space-separated integers") from None
    if reference is not None and len(order) != n and sorted(order) == list(range(len(order))):
        raise InputError(path, lineno, f"orders {len(order)} words, but line {lineno} of {reference} has {n}: the "
                                       f"two files disagree about this sentence (is one of them from another "
                                       f"corpus or split?)")
    if len(order) != n or sorted(order) != list(range(n)):
        raise InputError(path, lineno, f"not a permutation of 0..{n - 1} (the sentence has {n} words): "
                                       f"{' '.join(fields[:20])}{' ...' if len(fields) > 20 else ''}")
    return order


def read_orders(path: str, lengths: list[int], reference: str = "the reference") -> list[list[int]]:
    """An order file whose line k must be a permutation of 0..lengths[k]-1; errors name the file and line.

    `reference` names the file the lengths come from, for the line-count error and a line of another length.
    """
    lines = read_lines(path)
    check_same_length(reference, len(lengths), path, len(lines))
    return [parse_order_line(line, n, path, k, reference) for k, (line, n) in enumerate(zip(lines, lengths), 1)]


def run_evaluate(args: argparse.Namespace) -> int:
    ranks = read_oracle(args.oracle)
    lengths = [len(r) for r in ranks]
    systems: list[tuple[str, list[list[int]]]] = []
    for path in args.order:
        systems.append((path, read_orders(path, lengths, args.oracle)))
    systems.append(("monotone", [monotone_order(n) for n in lengths]))
    systems.append(("reversed", [reversed_order(n) for n in lengths]))
    scores = {name: evaluate_orders(orders, ranks) for name, orders in systems}
    width = max(len(name) for name in scores)
    print(f"{'order':<{width}}  {'tau':>7}  {'tau/sent':>8}  {'FRS':>7}  {'FRS/sent':>8}  sentences")
    for name, s in scores.items():
        print(f"{name:<{width}}  {s.corpus_tau:7.4f}  {s.sentence_tau:8.4f}  {s.corpus_frs:7.4f}  "
              f"{s.sentence_frs:8.4f}  {s.n_sentences}")
    if args.json:
        with atomic_output(args.json) as f:
            json.dump({name: asdict(s) for name, s in scores.items()}, f, indent=2)
            f.write("\n")
    sys.stdout.flush()
    return 0


def configure_evaluate(parser: argparse.ArgumentParser) -> None:
    parser.epilog = """examples:
  xlpos-prep evaluate --order dev.order --oracle dev.oracle
  xlpos-prep evaluate --order dev.order dev.lader.order --oracle dev.oracle --json dev.scores.json

prints corpus-level (tau, FRS) and sentence-average (tau/sent, FRS/sent) scores of each order file and of the
monotone and reversed baselines."""
    parser.add_argument("--order", nargs="+", required=True,
                        help="order file(s): per line a permutation of the source word indices in target order")
    parser.add_argument("--oracle", required=True, help="oracle ranks from `xlpos-prep oracle`")
    parser.add_argument("--json", help="also write the scores as JSON here")
    parser.set_defaults(run=run_evaluate)
    declare_files(parser, inputs=("order", "oracle"), outputs=("json",))
