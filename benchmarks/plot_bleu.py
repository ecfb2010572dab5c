"""Plot test BLEU by source-length bucket and by amount of reordering, from benchmarks/bleu.py's results JSON.

One column per language pair, two rows: BLEU per bucket of source length (words; quantile buckets of the test
set), and per bucket of how much the reorderer moves the sentence (Kendall tau of the predicted order against the
source order; "not moved" = tau 1). Lines: the vanilla Transformer, the rotary control (rope-monotone) when it
was run, and the best XL system of that pair (highest mean test BLEU among the XL systems trained on reorderer
positions: chosen after the fact, so read its line as the best case). Each point is the corpus BLEU of the bucket
with every seed's test sentences pooled (each sentence in the bucket of its own seed's data replica), the band
its bootstrap 95% interval (the JSON's "pooled_buckets", benchmarks/buckets.py).

    python benchmarks/plot_bleu.py --results results.json --out docs/bleu_by_length.png
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from plotting import pyplot, save_figure

BUCKETS = (("length", "source length (words)"),
           ("reordering", "reorderer's change of order (Kendall tau vs source order)"))
CONTROL = "rope-monotone"


def best_xl_system(summary: dict) -> str | None:
    """The XL system (reorderer positions) with the highest mean test BLEU, or None."""
    best, best_bleu = None, float("-inf")
    for system, entry in summary.items():
        if system == "vanilla" or system.endswith(("-oracle", "-monotone")):
            continue
        bleu = entry.get("test", {}).get("bleu", {}).get("mean")
        if bleu is not None and bleu > best_bleu:
            best, best_bleu = system, bleu
    return best


def plotted_systems(pair: dict) -> list[str]:
    """vanilla, the rotary control and the best XL system, those of them with pooled buckets."""
    have = pair["pooled_buckets"]["length"]["systems"]
    return [s for s in dict.fromkeys(("vanilla", CONTROL, best_xl_system(pair["summary"]))) if s and s in have]


def plot_results(results: dict, out: Path) -> None:
    plt = pyplot()

    pairs = [p for p, d in results["pairs"].items() if d.get("pooled_buckets")]
    if not pairs:
        raise ValueError("the results hold no pair with seed-pooled buckets ('pooled_buckets': bleu.py runs and "
                         "records from before 2026-12-03 lack the per-sentence figures they need)")
    fig, axes = plt.subplots(2, len(pairs), figsize=(max(6.0, 5.2 * len(pairs)), 8.0), squeeze=False)
    for col, pair_name in enumerate(pairs):
        pair = results["pairs"][pair_name]
        systems = plotted_systems(pair)
        for row, (kind, xlabel) in enumerate(BUCKETS):
            ax = axes[row][col]
            pooled = pair["pooled_buckets"][kind]
            cells = pooled["systems"]
            counts = [max((c[k]["sentences"] for c in cells.values() if c[k]), default=0)
                      for k in range(len(pooled["labels"]))]
            for system in systems:
                xs = [k for k, c in enumerate(cells[system]) if c]
                points = [cells[system][k] for k in xs]
                overall = pair["summary"][system]["test"]["bleu"]
                line, = ax.plot(xs, [c["bleu"] for c in points], marker="o",
                                label=f"{system} (test BLEU {overall['mean']:.1f}, {overall['n']} "
                                      f"seed{'s' if overall['n'] > 1 else ''})")
                ax.fill_between(xs, [c["low"] for c in points], [c["high"] for c in points], alpha=0.2,
                                color=line.get_color())
            ax.set_xticks(range(len(pooled["labels"])))
            ax.set_xticklabels([f"{label}\n(n={n})" for label, n in zip(pooled["labels"], counts)], fontsize=7)
            ax.set_xlabel(xlabel, fontsize=8)
            ax.set_ylabel("BLEU")
            ax.set_title(f"{pair_name}: BLEU by {kind}", fontsize=10)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(f"Test BLEU by bucket, seeds pooled:\nvanilla, the rotary control and the best XL system\n"
                 f"{results['config']['train']['max_update']} updates per system\nbands: bootstrap 95% intervals "
                 "(n = pooled sentences)", fontsize=9)
    save_figure(fig, out, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", required=True, help="JSON written by benchmarks/bleu.py --out")
    p.add_argument("--out", default="docs/bleu_by_length.png")
    args = p.parse_args(argv)
    with open(args.results, encoding="utf-8") as f:
        results = json.load(f)
    plot_results(results, Path(args.out))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
