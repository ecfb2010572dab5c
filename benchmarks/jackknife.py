"""Jackknifed training positions: how close the training lines' orders come to held-out ones, per number of folds K,
and what the folds cost.

A reorderer labels the sentences it was trained on far better than new ones, so an XL model trained on its
orders of its own training lines learns from positions more accurate than any it meets at test time.
`xlpos-prep prepare --jackknife K` labels those lines with K reorderers, each trained without its fold. For each
K this benchmark makes the pipeline's data the way benchmarks/bleu.py does (its cache, its data replicas: the
eflomal alignment is shared by every K of a replica, so only the reorderers differ) and reports, against the
oracles:

  train      corpus Kendall tau / FRS of the reorderer's training lines' orders (jackknifed for K > 1)
  held-out   the same for bleu.py's test split: the last --test-lines training lines, which no reorderer saw
             (the figure K is chosen on; dev, bleu.py's valid split, is reported beside it, not chosen on)
  gap        train - held-out corpus tau: what jackknifing should bring to 0
  noise      for K = 1, the train tau left by the task's training-position noise at several strengths
  cost       wall seconds of the jackknife's steps (its K reorderers and their orders) against the one
             reorderer every K trains, and the largest peak memory of one reorderer's training

    python benchmarks/jackknife.py --pairs ja-en,en-ja --folds 1,3,5,10 --workers 2 \
        --json docs/runs/2026-12-jackknife/jackknife.json --markdown docs/runs/2026-12-jackknife/README.md
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import bleu  # noqa: E402

JACKKNIFE_STEPS = ("jackknife folds", "jackknife reorderers", "jackknife orders", "jackknife rest source",
                   "reorder train rest", "reorder train")


def peak_memory_mb(log: Path) -> float | None:
    """The largest 'peak memory N MB' a train-reorderer log reports (None: no such line)."""
    if not log.exists():
        return None
    found = [float(x) for x in re.findall(r"peak memory (\d+) MB", log.read_text(encoding="utf-8"))]
    return max(found) if found else None


def measure(pair_name: str, folds: int, opts: argparse.Namespace) -> dict:
    args = bleu.build_parser().parse_args([
        "--work", str(opts.work), "--data", str(opts.data), "--workers", str(opts.workers),
        "--jackknife", str(folds), "--data-replica", str(opts.data_replica), "--prepare-only"])
    spec = bleu.PAIRS[pair_name]
    t0 = time.perf_counter()
    pair = bleu.prepare_pair(spec, args, [])
    wall = time.perf_counter() - t0
    info = pair.info
    root = pair.root
    steps = json.loads((root / "times.json").read_text(encoding="utf-8"))
    jackknife_seconds = sum(v for k, v in steps.items() if k in JACKKNIFE_STEPS and v is not None)
    logs = root / "logs"
    memory = [m for m in [peak_memory_mb(logs / "train-reorderer.log")] +
              [peak_memory_mb(p) for p in sorted(logs.glob("jackknife-fold*.log"))] if m is not None]

    def scores(d: dict) -> dict:
        return {"tau": round(d["reorderer"]["corpus_tau"], 4), "frs": round(d["reorderer"]["corpus_frs"], 4),
                "monotone_tau": round(d["monotone"]["corpus_tau"], 4), "sentences": d["reorderer"]["n_sentences"]}

    train = scores(info["train_reordering_vs_oracle"])
    held = scores(info["reordering_vs_oracle"]["test"])
    dev = scores(info["reordering_vs_oracle"]["valid"])
    return {"pair": pair_name, "folds": folds, "replica": opts.data_replica, "train": train, "held_out": held,
            "dev": dev, "gap": round(train["tau"] - held["tau"], 4),
            "seconds": {"reorderer": steps.get("train-reorderer"), "jackknife": round(jackknife_seconds, 1),
                        "this_call": round(wall, 1)},
            "peak_memory_mb": max(memory) if memory else None, "root": str(root)}


def noisy_training_tau(root: Path, strength: float, epochs: int = 3) -> float:
    """Corpus tau against the oracle of the training lines' orders under --xl-position-noise `strength`, averaged
    over `epochs` epochs: the noise the task adds to training positions, applied to whole words as the task does."""
    import numpy as np

    from xlpos.data.contrastive_positions import TRAINING_NOISE, noisy_word_order
    from xlpos_prep.metrics import evaluate_orders
    from xlpos_prep.oracle import read_oracle

    ranks = read_oracle(str(root / "oracle" / "train.oracle"))
    orders = [np.array([int(x) for x in line.split()]) for line in
              (root / "reorder" / "train.order").read_text(encoding="utf-8").splitlines()[:len(ranks)]]
    taus = []
    for epoch in range(1, epochs + 1):
        noisy = [noisy_word_order(o, np.random.default_rng([TRAINING_NOISE, epoch, i]), strength).tolist()
                 for i, o in enumerate(orders)]
        taus.append(evaluate_orders(noisy, ranks).corpus_tau)
    return round(sum(taus) / len(taus), 4)


def markdown(rows: list[dict], opts: argparse.Namespace) -> str:
    out = ["# Jackknifed training positions: train/held-out gap and cost per number of folds", "",
           "Made by `python benchmarks/jackknife.py " + " ".join(sys.argv[1:]) + "`.", "",
           f"Tanaka (`{opts.data}`), bleu.py's data: reorderer trained on all training lines but the last "
           "1,000 (held out: bleu.py's test split), dev = the 500 dev sentences; corpus Kendall tau and FRS "
           "against each split's oracle (eflomal grow-diag-final-and, the pipeline's attachment); data replica "
           f"{opts.data_replica}, one alignment shared by every K. Seconds: wall, `--workers {opts.workers}`.", "",
           "| pair | K | train tau | held-out tau | gap | dev tau | train FRS | held-out FRS | reorderer s | "
           "jackknife s | peak MB |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['pair']} | {r['folds']} | {r['train']['tau']:.4f} | {r['held_out']['tau']:.4f} | "
                   f"{r['gap']:+.4f} | {r['dev']['tau']:.4f} | {r['train']['frs']:.4f} | "
                   f"{r['held_out']['frs']:.4f} | {r['seconds']['reorderer']} | {r['seconds']['jackknife']} | "
                   f"{r['peak_memory_mb']} |")
    noisy = [r for r in rows if r.get("noise")]
    if noisy:
        out += ["", "Training-position noise (`--xl-position-noise S`, the task's per-epoch perturbation of whole "
                "words, mean of epochs 1-3) applied to the K = 1 training orders: the train tau it leaves, against "
                "the held-out tau it should match.", "", "| pair | S | noisy train tau | held-out tau | gap |",
                "|---|---|---|---|---|"]
        for r in noisy:
            for strength, tau in r["noise"].items():
                out.append(f"| {r['pair']} | {strength} | {tau:.4f} | {r['held_out']['tau']:.4f} | "
                           f"{tau - r['held_out']['tau']:+.4f} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", default="ja-en", help="comma-separated bleu.py pairs (default ja-en)")
    p.add_argument("--folds", default="1,3,5,10", help="comma-separated K values (default 1,3,5,10)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--noise", default="1.5,2,2.5,3",
                   help="--xl-position-noise strengths to score on the K = 1 training orders ('' : none)")
    p.add_argument("--data-replica", type=int, default=1)
    p.add_argument("--work", type=Path, default=bleu.REPO / "work" / "bleu")
    p.add_argument("--data", type=Path, default=bleu.REPO.parent / "shared" / "data")
    p.add_argument("--json", type=Path)
    p.add_argument("--markdown", type=Path)
    opts = p.parse_args(argv)
    rows = []
    for pair_name in opts.pairs.split(","):
        for folds in (int(k) for k in opts.folds.split(",")):
            rows.append(measure(pair_name, folds, opts))
            r = rows[-1]
            if folds == 1 and opts.noise:
                r["noise"] = {s: noisy_training_tau(Path(r["root"]), float(s)) for s in opts.noise.split(",")}
                print(f"{pair_name} K=1 with training noise: {r['noise']}", flush=True)
            print(f"{pair_name} K={folds}: train tau {r['train']['tau']:.4f}, held-out {r['held_out']['tau']:.4f} "
                  f"(gap {r['gap']:+.4f}), dev {r['dev']['tau']:.4f}; reorderer {r['seconds']['reorderer']} s, "
                  f"jackknife {r['seconds']['jackknife']} s, peak {r['peak_memory_mb']} MB", flush=True)
            if opts.json:
                opts.json.parent.mkdir(parents=True, exist_ok=True)
                opts.json.write_text(json.dumps({"rows": rows}, indent=1) + "\n", encoding="utf-8")
            if opts.markdown:
                opts.markdown.parent.mkdir(parents=True, exist_ok=True)
                opts.markdown.write_text(markdown(rows, opts), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
