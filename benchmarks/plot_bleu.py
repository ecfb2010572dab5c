"""Plot test BLEU by source-length bucket and by amount of reordering, from benchmarks/bleu.py's results JSON.

One column per language pair, two rows: BLEU per bucket of source length (words; quantile buckets of the test
set), and per bucket of how much the reorderer moves the sentence (Kendall tau of the predicted order against the
source order; "not moved" = tau 1). Bars: the vanilla Transformer and the best XL system of that pair (highest
mean test BLEU among the XL systems trained on reorderer positions); corpus BLEU of each bucket (sacreBLEU), mean
over seeds, error bars = min..max over seeds when there are several.

    python benchmarks/plot_bleu.py --results results.json --out docs/bleu_by_length.png
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BUCKETS = (("bleu_by_length", "length", "source length (words)"),
           ("bleu_by_reordering", "reordering", "reorderer's change of order (Kendall tau vs source order)"))


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


def plot_results(results: dict, out: Path) -> None:
    import logging

    import matplotlib
    matplotlib.use("Agg")  # files only, no display
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # font search debug lines when the root logs DEBUG
    import matplotlib.pyplot as plt

    pairs = [p for p, d in results["pairs"].items() if "test" in d.get("buckets", {})]
    if not pairs:
        raise ValueError("the results hold no pair with test-set buckets")
    fig, axes = plt.subplots(2, len(pairs), figsize=(5.2 * len(pairs), 7.5), squeeze=False)
    for col, pair_name in enumerate(pairs):
        pair = results["pairs"][pair_name]
        summary = pair["summary"]
        systems = [s for s in ("vanilla", best_xl_system(summary)) if s and s in summary]
        for row, (key, kind, xlabel) in enumerate(BUCKETS):
            ax = axes[row][col]
            buckets = pair["buckets"]["test"][kind]
            labels = [f"{b['label']}\n(n={b['sentences']})" for b in buckets]
            width = 0.8 / max(1, len(systems))
            for k, system in enumerate(systems):
                stats = summary[system]["test"].get(key, [])
                means = [s.get("mean", float("nan")) if s.get("n") else float("nan") for s in stats]
                lows = [m - s["min"] if s.get("n", 0) > 1 else 0 for m, s in zip(means, stats)]
                highs = [s["max"] - m if s.get("n", 0) > 1 else 0 for m, s in zip(means, stats)]
                xs = [i + (k - (len(systems) - 1) / 2) * width for i in range(len(stats))]
                overall = summary[system]["test"]["bleu"]
                several_seeds = any(s.get("n", 0) > 1 for s in stats)
                ax.bar(xs, means, width, yerr=[lows, highs] if several_seeds else None, capsize=3,
                       label=f"{system} (test BLEU {overall['mean']:.1f}, "
                             f"{overall['n']} seed{'s' if overall['n'] > 1 else ''})")
            ax.set_xticks(range(len(labels)))
            ax.set_xticklabels(labels, fontsize=7)
            ax.set_xlabel(xlabel, fontsize=8)
            ax.set_ylabel("BLEU")
            ax.set_ylim(bottom=0)
            ax.set_title(f"{pair_name}: BLEU by {kind}", fontsize=10)
            ax.grid(axis="y", alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(f"Test BLEU by bucket: vanilla vs the best XL system\n{results['config']['train']['max_update']} "
                 "updates per system; bars: mean over seeds, error bars: min..max where several", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.stem + ".tmp" + out.suffix)  # same suffix: matplotlib picks the format from it
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(out)


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
