"""Calibrating the reorderer's sentence-level fallback (issue 15) on training data, not on dev or the stress sets.

The short-half models of benchmarks/reorderer_stress.py (trained on the training sentences of at most the median
length, 11 words for Japanese) reorder training sentences longer than that, which they never saw: every k-th of
them, --sentences in all. For each fallback margin (`reorder --fallback-margin`, threshold margin * e^2 for a
sentence e words longer than the model's longest training sentence) this prints corpus tau / FRS and, per
sentence length, FRS minus monotone FRS; the chosen default is the smallest margin whose worst length bucket is
at or above monotone for every model given (and whose corpus tau is). Either kind of model (linear or neural);
the margins are in each kind's score units (summed feature weights, summed pair log-odds). Everything runs in
this process (models loaded once, the fallback overridden with with_abstention). Lines are parsed whole
(`split_sentences` off): the fallback is judged on a line's length, and a line of several sentences split would be
judged on its sentences' lengths instead (sentence splitting is measured apart, docs/reorderer.md).

    python benchmarks/reorderer_stress.py --work /work/r15 --directions ja-en --tag ctxfb   # makes the models
    python benchmarks/reorderer_fallback.py --work /work/r15 --models ctxfb,ctxfbs2 --oracles ja-en,ja-en-left
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import reorderer_enja as enja  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="/tmp/xlpos-stress", help="reorderer_stress.py's --work")
    parser.add_argument("--models", default="ctxfb,ctxfbs2", help="model tags of reorderer_stress.py (--tag)")
    parser.add_argument("--oracles", default="ja-en,ja-en-left",
                        help="oracle names: ja-en (attach-null right), ja-en-left, en-ja")
    parser.add_argument("--margins", default="0,0.5,1,1.5,2,3", help="fallback margins to try")
    parser.add_argument("--sentences", type=int, default=3000, help="long training sentences used")
    args = parser.parse_args(argv)
    from xlpos_prep.metrics import evaluate_orders, monotone_order
    from xlpos_prep.oracle import read_oracle
    from xlpos_prep.reorderer import load_reorderer

    work = Path(args.work)
    margins = [float(x) for x in args.margins.split(",")]
    worst = {m: 1.0 for m in margins}
    worst_tau = {m: 1.0 for m in margins}  # corpus tau - monotone, worst model and oracle
    for oracle in args.oracles.split(","):
        src = oracle.split("-")[0]
        train = [line.split() for line in enja.read(work / f"train.{src}")]
        ranks = read_oracle(str(work / f"train.{oracle}.oracle"), [len(s) for s in train])
        threshold = statistics.median(len(s) for s in train)
        long = [i for i, s in enumerate(train) if len(s) > threshold]
        pick = long[::max(1, len(long) // args.sentences)][:args.sentences]
        words = [train[i] for i in pick]
        gold = [ranks[i] for i in pick]
        lengths = np.array([len(s) for s in words])
        mono = [monotone_order(len(s)) for s in words]
        buckets = {n: np.flatnonzero(lengths == n) for n in sorted(set(lengths.tolist()))}

        def frs(orders: list[list[int]], idx: np.ndarray) -> float:
            return evaluate_orders([orders[i] for i in idx], [gold[i] for i in idx]).corpus_frs

        m_all = evaluate_orders(mono, gold)
        print(f"\n{oracle}: {len(words)} training sentences of {threshold + 1:g}-{lengths.max()} words (of "
              f"{len(long)}); monotone tau {m_all.corpus_tau:.4f} FRS {m_all.corpus_frs:.4f}")
        print(f"{'model':10} {'margin':>6} {'tau':>7} {'FRS':>7} | FRS - monotone by length "
              + " ".join(f"{n:>7}" for n in buckets))
        for tag in args.models.split(","):
            model = load_reorderer(str(work / "models" / f"{tag}.{oracle}.short.npz"))  # linear or neural
            if model.config.fallback_length == 0:  # a model from before the fallback: its training's longest
                model = model.with_abstention(fallback_length=int(threshold))
            for margin in margins:
                orders = model.with_abstention(fallback_margin=margin, split_sentences=False).reorder_batch(words)
                s = evaluate_orders(orders, gold)
                diffs = [frs(orders, idx) - frs(mono, idx) for idx in buckets.values()]
                worst[margin] = min(worst[margin], min(diffs))
                worst_tau[margin] = min(worst_tau[margin], s.corpus_tau - m_all.corpus_tau)
                print(f"{tag:10} {margin:6g} {s.corpus_tau:7.4f} {s.corpus_frs:7.4f} |{'':25}"
                      + " ".join(f"{d:+7.4f}" for d in diffs), flush=True)
    ok = [m for m in margins if worst[m] >= 0 and worst_tau[m] >= 0]
    print("\nworst length bucket over all models and oracles, FRS - monotone: "
          + ", ".join(f"{m:g}: {worst[m]:+.4f}" for m in margins))
    print("worst model and oracle, corpus tau - monotone: "
          + ", ".join(f"{m:g}: {worst_tau[m]:+.4f}" for m in margins))
    print(f"smallest margin at or above monotone FRS (every length) and tau everywhere: {min(ok):g}" if ok
          else "no margin tried passes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
