"""The XL data path alone: CPU time to read and collate training examples with XL positions, against fairseq's own
translation dataset on the same data-bin, in the same process and round.

What fairseq-train's data loader does per example: `dataset[i]` (fairseq reads source and target from the
data-bin; the XL task also reads the example's XL positions and puts them in fairseq's convention), then
`collater` per batch (the XL task also places the positions like the source tokens). On a fast GPU, or with a
small model, the loader's CPU time is what the XL task adds to a training step (benchmarks/train_throughput.py
measures the whole of fairseq-train; its "none" mode is this data path with the vanilla model). CPU time of this
process is read (time.process_time), so other processes on the machine disturb it far less than wall time.

    python benchmarks/xl_data_path.py --data-bin work/bench/ja-en/train20000-holdout1000.spm8000.rodef/data-bin \
        --source-lang ja --target-lang en --rounds 5
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def load_train(task_name: str, data_bin: Path, src: str, tgt: str, split: str):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    import xlpos  # noqa: F401  (registers the task)

    parser = options.get_training_parser(default_task=task_name)
    args = options.parse_args_and_arch(parser, [str(data_bin), "--task", task_name, "-s", src, "-t", tgt,
                                                "--arch", "transformer"])
    task = tasks.setup_task(convert_namespace_to_omegaconf(args).task)
    task.load_dataset(split)
    return task.dataset(split)


def time_dataset(dataset, batch: int) -> tuple[float, float]:
    """CPU microseconds per example of dataset[i] over the split, and of collater per example (batches of `batch`)."""
    n = len(dataset)
    c0 = time.process_time()
    items = [dataset[i] for i in range(n)]
    c1 = time.process_time()
    for start in range(0, n - batch + 1, batch):
        dataset.collater(items[start:start + batch])
    c2 = time.process_time()
    return 1e6 * (c1 - c0) / n, 1e6 * (c2 - c1) / (n // batch * batch)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-bin", type=Path, required=True, help="a data-bin with .xlpos files (xlpos-prep prepare)")
    p.add_argument("--source-lang", required=True)
    p.add_argument("--target-lang", required=True)
    p.add_argument("--split", default="train")
    p.add_argument("--batch", type=int, default=64, help="examples per collated batch (default 64)")
    p.add_argument("--rounds", type=int, default=5)
    opts = p.parse_args(argv)
    logging.disable(logging.WARNING)
    datasets = {name: load_train(name, opts.data_bin, opts.source_lang, opts.target_lang, opts.split)
                for name in ("translation", "translation_xlpos")}
    rows: dict[str, list[tuple[float, float]]] = {name: [] for name in datasets}
    for r in range(opts.rounds):
        for name, dataset in (datasets.items() if r % 2 == 0 else reversed(list(datasets.items()))):
            rows[name].append(time_dataset(dataset, opts.batch))
        print(f"round {r + 1}: " + "  ".join(f"{name} item {rows[name][-1][0]:.1f} us, collate {rows[name][-1][1]:.1f} "
                                             f"us/example" for name in datasets), flush=True)
    base, xl = rows["translation"], rows["translation_xlpos"]
    ratios = [(b[0] + b[1]) / (x[0] + x[1]) for b, x in zip(base, xl)]
    print(f"\n{len(datasets['translation'])} examples of {opts.data_bin} ({opts.split}), {opts.rounds} rounds, "
          f"CPU time of this process")
    for name, label in (("translation", "fairseq translation"), ("translation_xlpos", "translation_xlpos")):
        item = statistics.median(x[0] for x in rows[name])
        collate = statistics.median(x[1] for x in rows[name])
        print(f"  {label:20} item {item:6.1f} us + collate {collate:6.1f} us = {item + collate:6.1f} us/example")
    print(f"  speed XL / fairseq (examples per CPU second): median {statistics.median(ratios):.3f} "
          f"[{min(ratios):.3f}..{max(ratios):.3f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
