"""Plot what `xlpos-prep prepare` costs as the corpus grows, from a benchmarks/scale.py --json record.

Two panels, both over the lines each step works on (log-log): CPU seconds and peak memory of every step that took
at least MIN_CPU seconds at the largest measured size. Markers are the measurements; the dashed line carries each
step to WMT14 En-De's 4.5M pairs with the WMT recipes' caps (alignment 1M pairs, reorderer 100k) by the record's
own fits, the ones its extrapolated hours and gigabytes come from: CPU time by the larger of the step's power law
and its straight line, memory linearly for the steps whose peak grew and flat for the others.

    python benchmarks/plot_scale.py --record docs/runs/2026-12-scale/zen4-s20k-500k-2m-w2.json \
        --out docs/runs/2026-12-scale/zen4-s20k-500k-2m-w2.png
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402
from plotting import pyplot, save_figure  # noqa: E402

MIN_CPU = 10.0  # CPU seconds at the largest size: below it a step is mostly its process's start-up
TARGET = "WMT14 En-De"


def measured_points(record: dict) -> dict[str, list[tuple[int, float, int]]]:
    """Per step of the record's sizes (valid/test steps left out: their split does not grow): its (lines it works
    on, CPU seconds, peak bytes) at each size, smallest first."""
    points: dict[str, list[tuple[int, float, int]]] = {}
    for r in sorted(record["records"], key=lambda r: r["lines"]):
        for c in r["steps"]:
            kind, _ = scale.step_kind(c["step"])
            if kind != "fixed":
                lines = scale.lines_of(kind, r["lines"], r["aligned_lines"], r["reorder_lines"])
                points.setdefault(c["step"], []).append((lines, c["cpu"], c["peak_rss"]))
    return points


def plotted_steps(record: dict, min_cpu: float = MIN_CPU) -> list[str]:
    """The steps worth a line: at least min_cpu CPU seconds at the largest size, most expensive first."""
    largest = {step: pts[-1][1] for step, pts in measured_points(record).items()}
    return sorted((s for s, cpu in largest.items() if cpu >= min_cpu), key=lambda s: -largest[s])


def plot_record(record: dict, out: Path) -> None:
    plt = pyplot()

    steps = plotted_steps(record)
    if not steps:
        raise ValueError(f"the record holds no step of at least {MIN_CPU:.0f} CPU seconds")
    points, fits = measured_points(record), record["fits"]
    pairs = scale.TARGETS[TARGET]
    peaks = scale.extrapolate_memory(fits, pairs)
    fig, (ax_cpu, ax_mem) = plt.subplots(1, 2, figsize=(12.0, 5.2))
    for step in steps:
        xs = [x for x, _, _ in points[step]]
        end = scale.wmt_lines(step, pairs)
        line, = ax_cpu.plot(xs, [cpu for _, cpu, _ in points[step]], marker="o", label=step)
        color = line.get_color()
        if end > xs[-1]:
            ax_cpu.plot([xs[-1], end], [points[step][-1][1], scale.step_cpu(fits[step], end)], ls="--", color=color)
        sampled = [(x, rss / 2**20) for x, _, rss in points[step] if rss > 0]
        grows = scale.memory_grows(fits[step])
        ax_mem.plot([x for x, _ in sampled], [mb for _, mb in sampled], marker="o", color=color,
                    label=step + (" (grows)" if grows else ""))
        if sampled and end > sampled[-1][0]:
            ax_mem.plot([sampled[-1][0], end], [sampled[-1][1], peaks[step] / 2**20], ls="--", color=color)
    ax_cpu.plot([1e4, pairs], [1.0, pairs / 1e4], ls=":", color="grey", label="slope 1: linear")
    ax_cpu.set_ylabel("CPU seconds")
    ax_mem.set_ylabel("peak memory of the step's processes (MB)")
    for ax in (ax_cpu, ax_mem):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("lines the step works on")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    sizes = ", ".join(f"{r['lines']:,}" for r in sorted(record["records"], key=lambda r: r["lines"]))
    machines = sorted({r.get("machine", "unknown machine") for r in record["records"]})
    fig.suptitle(f"xlpos-prep prepare at {sizes} training pairs ({'; '.join(machines)})\n"
                 f"dashed: the record's fits carried to {TARGET} ({pairs:,} pairs, alignment capped at "
                 f"{scale.WMT_ALIGN_LINES:,}, reorderer at {scale.WMT_REORDER_LINES:,})", fontsize=9)
    save_figure(fig, out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--record", required=True, type=Path, help="JSON written by benchmarks/scale.py --json")
    p.add_argument("--out", required=True, type=Path, help="the PNG to write")
    args = p.parse_args(argv)
    try:
        record = json.loads(args.record.read_text(encoding="utf-8"))
        plot_record(record, args.out)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {args.record}: not a plottable scale record ({e!r})", file=sys.stderr)
        return 2
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
