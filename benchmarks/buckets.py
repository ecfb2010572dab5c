"""Test BLEU by bucket of source length and of how much the reorderer moves the sentence (benchmarks/bleu.py).

Per run: corpus BLEU of each bucket of one test set (bucket_bleu). Over seeds (pooled_bucket_bleu): every seed's
test sentences pooled into one set per system, each sentence in the bucket of its own seed's data replica (whose
reorderer moved it), with a bootstrap confidence band (resampling the pooled sentences of a bucket, as sacreBLEU's
paired bootstrap resamples a test set: its per-sentence statistics summed), and the difference between a system and
its baseline per bucket, with a paired band (the same resampled sentences for both).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


def quantile_edges(values: Sequence[float], buckets: int) -> list[float]:
    """Upper edges (inclusive) of up to `buckets` groups with about equal counts; duplicates merged."""
    ordered = sorted(values)
    if not ordered:
        return []
    edges = []
    for k in range(1, buckets):
        edge = ordered[min(len(ordered) - 1, math.ceil(k * len(ordered) / buckets) - 1)]
        if not edges or edge > edges[-1]:
            edges.append(edge)
    if not edges or edges[-1] < ordered[-1]:
        edges.append(ordered[-1])
    return edges


def assign_buckets(values: Sequence[float], edges: Sequence[float]) -> list[int]:
    """Index of the first edge >= value (the last bucket for values above every edge)."""
    out = []
    for v in values:
        k = next((i for i, e in enumerate(edges) if v <= e), len(edges) - 1)
        out.append(k)
    return out


def order_tau(order: Sequence[int]) -> float:
    """Kendall tau of a predicted order against the source order: 1 = not moved, -1 = reversed."""
    from xlpos_prep.metrics import kendall_tau_counts
    n = len(order)
    if n < 2:
        return 1.0
    discordant, pairs = kendall_tau_counts(list(order), list(range(n)))
    return 1.0 - 2.0 * discordant / pairs


@dataclass
class BucketSpec:
    """Sentence groups of one evaluation set: by source length in words and by how much the reorderer moves it."""
    length_labels: list[str]
    length_of: list[int]          # bucket index per sentence
    reorder_labels: list[str]
    reorder_of: list[int]

    def summary(self) -> dict:
        def count(of: list[int], labels: list[str]) -> list[dict]:
            return [{"label": label, "sentences": of.count(k)} for k, label in enumerate(labels)]
        return {"length": count(self.length_of, self.length_labels),
                "reordering": count(self.reorder_of, self.reorder_labels)}


def make_buckets(sources: Sequence[Sequence[str]], orders: Sequence[Sequence[int]], n_length: int = 4,
                 n_reorder: int = 4) -> BucketSpec:
    """Buckets of one evaluation set from its source sentences and the reorderer's orders (bucket_spec)."""
    return bucket_spec([len(s) for s in sources], [order_tau(o) for o in orders], n_length, n_reorder)


def bucket_spec(lengths: Sequence[int], taus: Sequence[float], n_length: int = 4, n_reorder: int = 4) -> BucketSpec:
    """Length buckets: quantiles of the source length. Reordering buckets: sentences the reorderer leaves in
    source order (tau 1) form the first bucket; the others are split into quantiles of tau, most moved first."""
    edges = quantile_edges(lengths, n_length)
    lows = [min(lengths)] + [e + 1 for e in edges[:-1]]
    length_labels = [f"{lo}-{hi}" if lo != hi else f"{lo}" for lo, hi in zip(lows, edges)]
    length_of = assign_buckets(lengths, edges)

    moved = [t for t in taus if t < 1.0]
    tau_edges = quantile_edges(moved, n_reorder - 1) if moved else []
    reorder_labels, reorder_of = [], []
    lows_t = [min(moved)] + tau_edges[:-1] if moved else []
    for k, (lo, hi) in enumerate(zip(lows_t, tau_edges)):
        reorder_labels.append(f"tau {lo:.2f}..{hi:.2f}" if k == 0 else f"tau ({lo:.2f}..{hi:.2f}]")
    reorder_labels.append("not moved")
    moved_of = assign_buckets(moved, tau_edges)
    it = iter(moved_of)
    for t in taus:
        reorder_of.append(len(tau_edges) if t >= 1.0 else next(it))
    return BucketSpec(length_labels, length_of, reorder_labels, reorder_of)


def bucket_bleu(hyps: Sequence[str], refs: Sequence[str], of: Sequence[int], n: int, tokenize: str) -> list:
    """Corpus BLEU of each bucket (None for an empty bucket)."""
    import sacrebleu
    out = []
    for k in range(n):
        idx = [i for i, b in enumerate(of) if b == k]
        if not idx:
            out.append(None)
            continue
        bleu = sacrebleu.metrics.BLEU(tokenize=tokenize, force=tokenize == "none")
        out.append(round(bleu.corpus_score([hyps[i] for i in idx], [[refs[i] for i in idx]]).score, 2))
    return out


def pooled_bucket_bleu(items: dict[str, dict[str, tuple[list[str], list[str]]]], lengths: dict[str, list[int]],
                       taus: dict[str, list[float]], tokenize: str, samples: int = 1000, seed: int = 12345,
                       n_length: int = 4, n_reorder: int = 4, compare: Sequence[tuple[str, str]] = ()) -> dict:
    """BLEU per bucket of the seed-pooled test sets, with a bootstrap 95% band; and per bucket the difference of
    each `compare` pair (system, baseline), with a paired bootstrap band.

    items: system -> seed -> (hypotheses, references); lengths/taus: seed -> per-sentence source length and
    reorderer tau of that seed's data replica (the lengths are the same in every replica, the taus are not).
    Bucket edges come from all seeds' sentences together, so a sentence's bucket depends on its own replica's
    reorderer; a system and its baseline of the same seed share the buckets. A difference pools the seeds both
    systems have and resamples the same sentences for both (as sacreBLEU's paired bootstrap does a test set), so
    the band is of the difference, not two bands side by side. Returns {"method", "length"|"reordering":
    {"labels", "systems": {system: [{"bleu", "low", "high", "sentences", "seeds"} or None per bucket]},
    "deltas": [{"system", "baseline", "seeds", "cells": [{"delta", "low", "high", "sentences"} or None]}]}}.
    """
    import numpy as np
    from sacrebleu.metrics import BLEU

    seeds = sorted({s for by_seed in items.values() for s in by_seed}, key=str)
    missing = [s for s in seeds if s not in lengths or s not in taus]
    if missing:
        raise ValueError(f"no per-sentence lengths/taus of the data replica of seed {missing[0]}")
    all_lengths = [x for s in seeds for x in lengths[s]]
    all_taus = [x for s in seeds for x in taus[s]]
    spec = bucket_spec(all_lengths, all_taus, n_length, n_reorder)
    offset, start = 0, {}
    for s in seeds:
        start[s] = offset
        offset += len(lengths[s])
    metric = BLEU(tokenize=tokenize, force=tokenize == "none")

    def score(stats) -> float:
        return metric._compute_score_from_stats(stats).score

    def band(values: list[float]) -> tuple[float, float]:
        values = sorted(values)
        return round(values[int(0.025 * samples)], 2), round(values[min(samples - 1, int(0.975 * samples))], 2)

    statistics = {system: {s: metric._extract_corpus_statistics(*_checked(system, s, pair, len(lengths[s])))
                           for s, pair in by_seed.items()} for system, by_seed in items.items()}
    rng = np.random.default_rng(seed)
    delta_rng = np.random.default_rng(seed + 1)  # its own stream: adding a pair leaves every system's band as it was
    out: dict = {"method": f"seed-pooled test sentences; corpus BLEU per bucket; 95% band: 2.5th..97.5th percentile "
                           f"of {samples} bootstrap resamples of the bucket's pooled sentences (sacreBLEU statistics); "
                           f"a difference resamples the same sentences for the system and its baseline"}
    for kind, of, labels in (("length", spec.length_of, spec.length_labels),
                             ("reordering", spec.reorder_of, spec.reorder_labels)):
        def rows(system: str, k: int, among: Sequence[str]) -> np.ndarray:
            """The statistics of the system's sentences in bucket k, of the seeds `among`, in pooled order."""
            by_seed = statistics[system]
            found = [row for s in among if s in by_seed for i, row in enumerate(by_seed[s]) if of[start[s] + i] == k]
            return np.array(found, dtype=np.int64) if found else np.zeros((0, 0), dtype=np.int64)

        systems: dict = {}
        for system, by_seed in items.items():
            cells = []
            for k in range(len(labels)):
                matrix = rows(system, k, seeds)
                if not len(matrix):
                    cells.append(None)
                    continue
                draws = rng.integers(0, len(matrix), size=(samples, len(matrix)))
                low, high = band([score(matrix[d].sum(0)) for d in draws])
                cells.append({"bleu": round(score(matrix.sum(0)), 2), "low": low, "high": high,
                              "sentences": len(matrix), "seeds": len(by_seed)})
            systems[system] = cells
        deltas = []
        for system, baseline in compare:
            shared = [s for s in seeds if s in items.get(system, {}) and s in items.get(baseline, {})]
            if not shared:
                continue
            cells = []
            for k in range(len(labels)):
                a, b = rows(system, k, shared), rows(baseline, k, shared)
                if not len(a):
                    cells.append(None)
                    continue
                draws = delta_rng.integers(0, len(a), size=(samples, len(a)))
                low, high = band([score(a[d].sum(0)) - score(b[d].sum(0)) for d in draws])
                cells.append({"delta": round(score(a.sum(0)) - score(b.sum(0)), 2), "low": low, "high": high,
                              "sentences": len(a)})
            deltas.append({"system": system, "baseline": baseline, "seeds": shared, "cells": cells})
        out[kind] = {"labels": labels, "systems": systems, "deltas": deltas}
    return out


def _checked(system: str, seed: str, pair: tuple[list[str], list[str]], sentences: int
             ) -> tuple[list[str], list[list[str]]]:
    """(hypotheses, [references]) of one run, after checking both cover the seed's test sentences."""
    hyps, refs = pair
    if len(hyps) != sentences or len(refs) != len(hyps):
        raise ValueError(f"{system} seed {seed}: {len(hyps)} hypotheses, {len(refs)} references, "
                         f"{sentences} test sentences")
    return hyps, [refs]
