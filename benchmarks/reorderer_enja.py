"""The BTG reorderer on real data: En-Ja (Tanaka corpus subset), both directions, against lader's anchors.

Steps (each cached in --work, so a rerun only redoes what is missing):
  1. align train+dev together with `xlpos-prep align` (eflomal, grow-diag-final-and); the time is recorded once;
  2. oracle ranks for En->(Ja order) from the alignment and for Ja->(En order) from the swapped alignment;
  3. for each direction and training size (first N training sentences): `xlpos-prep train-reorderer` in a child
     process (wall time, peak RSS of that child from os.wait4), then `xlpos-prep reorder` of dev (wall time of
     the whole command) and in-process reordering speed (model loaded and compiled code warm);
  4. corpus and sentence-level Kendall tau / fuzzy reordering score on dev for the reorderer, the monotone and
     the reversed order (preprocess.metrics, lader's definitions).

The training uses the defaults of `xlpos-prep train-reorderer` (no dev set: a fixed number of iterations, as the
lader anchor) unless --train-args says otherwise.

Oracles: eflomal seeds itself from /dev/urandom, so alignments (and monotone scores) differ slightly from the
anchor's. The anchor's Ja->En monotone tau (0.679) matches oracles made with `--attach-null left` (about 0.67 here)
rather than the pipeline default `right` (about 0.76), so Ja->En is worth running both ways (--attach-null).

    python benchmarks/reorderer_enja.py                          # 5k and 50k, both directions
    python benchmarks/reorderer_enja.py --sizes 5000 --directions en-ja --train-args "--iterations 5"
    python benchmarks/reorderer_enja.py --eval-split tune        # score on train[-1000:] (for tuning, not dev)
    python benchmarks/reorderer_enja.py --sizes 49000 --eval-split tune   # tune lines held out of a full-size model

Anchors (lader, word features, beam 1, 5k x 10 iterations, on this 500-sentence dev with eflomal+gdfa oracles):
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from xlpos_prep.io import log

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "enja"
LADER = {  # direction -> (corpus tau, corpus FRS) of lader, monotone as measured with lader's oracles
    "en-ja": {"lader tau": 0.789, "lader FRS": 0.667, "monotone tau": 0.719, "monotone FRS": 0.668,
              "lader train s": 150, "lader train MB": 1600},
    "ja-en": {"lader tau": 0.761, "lader FRS": 0.754, "monotone tau": 0.679, "monotone FRS": 0.757,
              "lader train s": 280, "lader train MB": 4300},
}
LADER_SPEED = (100, 230)  # sentences/s reordering
TUNE_LINES = 1000  # --eval-split tune: the last lines of train (never in the first 5k; in the 50k set!)

__doc__ += "".join(f"  {d}: lader tau {a['lader tau']}, FRS {a['lader FRS']}; monotone tau {a['monotone tau']}, "
                   f"FRS {a['monotone FRS']}\n" for d, a in LADER.items())


def run_child(cmd: list[str]) -> tuple[float, float]:
    """Run a command; (wall seconds, peak resident memory of that child in MB). Fails loudly."""
    log("$ " + " ".join(shlex.quote(c) for c in cmd))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"command failed with exit code {proc.returncode}: {' '.join(cmd)}")
    return seconds, usage.ru_maxrss / 1024


def prep(*args: str) -> list[str]:
    return [sys.executable, "-m", "xlpos_prep.cli", *args]


def write_lines(path: Path, lines: list[str]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    tmp.replace(path)


def read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def prepare(work: Path, data: Path, attach_null: str, align_args: tuple[str, ...] = ()) -> dict:
    """Alignment and oracles for both directions; returns {"align_seconds": ...}.

    Oracle files of `--attach-null left` get the suffix "-left" (train.ja-en-left.oracle), so both can coexist.
    `align_args` are extra `xlpos-prep align` options (e.g. more eflomal samplers); the cache in `work` holds one
    alignment, so a directory aligned with other options is refused rather than silently reused.
    """
    work.mkdir(parents=True, exist_ok=True)
    lines = {lang: {split: read(data / f"{split}.{lang}") for split in ("train", "dev")} for lang in ("en", "ja")}
    n_train, n_dev = len(lines["en"]["train"]), len(lines["en"]["dev"])
    for lang in ("en", "ja"):
        for split in ("train", "dev"):
            if not (work / f"{split}.{lang}").exists():
                write_lines(work / f"{split}.{lang}", lines[lang][split])
        if not (work / f"all.{lang}").exists():
            write_lines(work / f"all.{lang}", lines[lang]["train"] + lines[lang]["dev"])
    meta_path = work / "align.json"
    if not (work / "all.en-ja.align").exists():
        seconds, peak = run_child(prep("align", "--src", str(work / "all.en"), "--tgt", str(work / "all.ja"),
                                       "--out", str(work / "all.en-ja.align"), *align_args))
        meta_path.write_text(json.dumps({"align_seconds": seconds, "align_peak_mb": peak,
                                         "sentences": n_train + n_dev, "align_args": list(align_args)}))
    meta = json.loads(meta_path.read_text())
    if meta.get("align_args", []) != list(align_args):
        raise SystemExit(f"{work} was aligned with options {meta.get('align_args', [])}, not {list(align_args)}: "
                         "use another --work")
    align = read(work / "all.en-ja.align")
    swapped = [" ".join(f"{j}-{i}" for i, j in (link.split("-") for link in line.split())) for line in align]
    for direction, links, src in (("en-ja", align, "en"), ("ja-en", swapped, "ja")):
        for split, part in (("train", links[:n_train]), ("dev", links[n_train:])):
            align_path = work / f"{split}.{direction}.align"
            oracle_path = work / f"{split}.{oracle_name(direction, attach_null)}.oracle"
            if not align_path.exists():
                write_lines(align_path, part)
            if not oracle_path.exists():
                run_child(prep("oracle", "--src", str(work / f"{split}.{src}"), "--align", str(align_path),
                               "--out", str(oracle_path), "--attach-null", attach_null))
    return meta


def oracle_name(direction: str, attach_null: str) -> str:
    return direction if attach_null == "right" else f"{direction}-{attach_null}"


def warm_up(work: Path) -> float:
    """Train and reorder a 50-sentence corpus once, so numba's on-disk cache is filled before anything is timed.

    Returns the seconds it took (a fresh checkout pays this compilation once; later runs load the cache)."""
    src = subset(work, "warmup.en", read(work / "train.en")[:50])
    oracle = subset(work, "warmup.en-ja.oracle", read(work / "train.en-ja.oracle")[:50])
    model = work / "warmup.npz"
    seconds, _ = run_child(prep("train-reorderer", "--src", str(src), "--oracle", str(oracle), "--model", str(model),
                                "--iterations", "1", "--dev-src", str(src), "--dev-oracle", str(oracle)))
    more, _ = run_child(prep("reorder", "--model", str(model), "--src", str(src), "--out", str(work / "warmup.order"),
                             "--trees", str(work / "warmup.trees")))
    return seconds + more


def subset(work: Path, name: str, lines: list[str]) -> Path:
    path = work / name
    if not path.exists():
        write_lines(path, lines)
    return path


def bench(work: Path, direction: str, attach_null: str, size: int, train_args: list[str], tag: str,
          eval_split: str, speed_repeats: int) -> dict:
    from xlpos_prep.metrics import evaluate_orders, monotone_order, reversed_order
    from xlpos_prep.oracle import read_oracle
    from xlpos_prep.reorderer import load_reorderer

    src_lang = direction.split("-")[0]
    direction = oracle_name(direction, attach_null)  # file names from here on
    train_src = read(work / f"train.{src_lang}")
    train_oracle = read(work / f"train.{direction}.oracle")
    if eval_split == "dev":
        eval_src, eval_oracle = work / f"dev.{src_lang}", work / f"dev.{direction}.oracle"
    else:  # tune: the last TUNE_LINES training lines, never part of the first 5k
        eval_src = subset(work, f"tune.{src_lang}", train_src[-TUNE_LINES:])
        eval_oracle = subset(work, f"tune.{direction}.oracle", train_oracle[-TUNE_LINES:])
    size = min(size, len(train_src))
    src = subset(work, f"train{size}.{src_lang}", train_src[:size])
    oracle = subset(work, f"train{size}.{direction}.oracle", train_oracle[:size])
    models = work / "models"
    models.mkdir(exist_ok=True)
    model = models / f"{direction}.{size}{('.' + tag) if tag else ''}.npz"
    train_s, train_mb = run_child(prep("train-reorderer", "--src", str(src), "--oracle", str(oracle),
                                       "--model", str(model), *train_args))
    order_path = work / f"{eval_split}.{direction}.{size}{('.' + tag) if tag else ''}.order"
    cli_s, _ = run_child(prep("reorder", "--model", str(model), "--src", str(eval_src), "--out", str(order_path)))

    sentences = [line.split() for line in read(eval_src)]
    ranks = read_oracle(str(eval_oracle), [len(s) for s in sentences])
    orders = [[int(x) for x in line.split()] for line in read(order_path)]
    reorderer = load_reorderer(str(model))  # either kind (--train-args "--kind neural ...")
    reorderer.reorder_batch(sentences[:10])  # compiled code loaded, word cache irrelevant (fresh per call)
    t0 = time.perf_counter()
    for _ in range(speed_repeats):
        # measure with word hashing included, as a fresh process would
        (reorderer.features if reorderer.kind == "neural" else reorderer.encoder)._cache.clear()
        again = reorderer.reorder_batch(sentences)
    speed = speed_repeats * len(sentences) / (time.perf_counter() - t0)
    assert again == orders, "in-process reordering differs from the CLI output"
    scores = {name: evaluate_orders(o, ranks) for name, o in
              (("reorderer", orders), ("monotone", [monotone_order(len(s)) for s in sentences]),
               ("reversed", [reversed_order(len(s)) for s in sentences]))}
    return {"direction": direction.split("-left")[0], "oracle": f"attach-null {attach_null}", "size": size, "train_s": train_s, "train_mb": train_mb, "cli_s": cli_s,
            "speed": speed, "scores": {k: vars(v) for k, v in scores.items()},
            "training": reorderer.training.get("options"), "model_mb": model.stat().st_size / 2**20}


def print_table(meta: dict, rows: list[dict], eval_split: str) -> None:
    print(f"\nalignment (eflomal + gdfa, train+dev, {meta.get('sentences')} pairs): {meta['align_seconds']:.0f} s, "
          f"peak {meta.get('align_peak_mb', 0):.0f} MB")
    print(f"warm-up (tiny train + reorder, fills numba's compilation cache if needed): "
          f"{meta['warm_up_seconds']:.1f} s")
    print(f"scores on {eval_split} (corpus level; /s = sentence average), oracles with "
          f"{rows[0]['oracle'] if rows else '?'}")
    head = (f"{'direction':9} {'train':>6} {'train s':>8} {'peak MB':>8} {'sent/s':>8} {'CLI s':>6}  "
            f"{'tau':>6} {'FRS':>6} {'tau/s':>6} {'FRS/s':>6} | {'mono tau':>8} {'mono FRS':>8} "
            f"{'rev tau':>7} {'rev FRS':>7}")
    print(head)
    print("-" * len(head))
    for r in rows:
        s, m, v = r["scores"]["reorderer"], r["scores"]["monotone"], r["scores"]["reversed"]
        print(f"{r['direction']:9} {r['size']:>6} {r['train_s']:8.1f} {r['train_mb']:8.0f} {r['speed']:8.0f} "
              f"{r['cli_s']:6.1f}  {s['corpus_tau']:6.4f} {s['corpus_frs']:6.4f} {s['sentence_tau']:6.4f} "
              f"{s['sentence_frs']:6.4f} | {m['corpus_tau']:8.4f} {m['corpus_frs']:8.4f} {v['corpus_tau']:7.4f} "
              f"{v['corpus_frs']:7.4f}")
    if eval_split == "dev":
        print("\nlader anchors (5k x 10 iterations, beam 1), speed "
              f"{LADER_SPEED[0]}-{LADER_SPEED[1]} sent/s:")
        for d, a in LADER.items():
            print(f"  {d}: tau {a['lader tau']:.3f} FRS {a['lader FRS']:.3f} (monotone tau {a['monotone tau']:.3f} "
                  f"FRS {a['monotone FRS']:.3f}); training {a['lader train s']} s, {a['lader train MB']} MB")
        for r in rows:
            s = r["scores"]["reorderer"]
            a = LADER[r["direction"]]
            print(f"  ours {r['direction']} {r['size']}: tau {s['corpus_tau'] - a['lader tau']:+.4f}, "
                  f"FRS {s['corpus_frs'] - a['lader FRS']:+.4f} vs lader; speed x{r['speed'] / LADER_SPEED[1]:.1f}"
                  f"..x{r['speed'] / LADER_SPEED[0]:.1f}; training time x{r['train_s'] / a['lader train s']:.2f}, "
                  f"memory x{r['train_mb'] / a['lader train MB']:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="/tmp/xlpos-bench", help="cache and output directory")
    parser.add_argument("--data", default=str(DATA), help="directory with train/dev .en/.ja")
    parser.add_argument("--sizes", default="5000,50000", help="training sizes (first N sentences)")
    parser.add_argument("--directions", default="en-ja,ja-en")
    parser.add_argument("--attach-null", choices=("right", "left"), default="right",
                        help="oracle option for unaligned source words (right: the pipeline default)")
    parser.add_argument("--train-args", default="", help="extra arguments for train-reorderer (quoted)")
    parser.add_argument("--tag", default="", help="suffix of model/order file names (for experiments)")
    parser.add_argument("--eval-split", choices=("dev", "tune"), default="dev",
                        help="dev (report) or tune: the last 1000 training lines (for choosing defaults)")
    parser.add_argument("--speed-repeats", type=int, default=3, help="in-process passes over the eval set")
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    os.chdir(Path(__file__).resolve().parents[1])  # so `python -m xlpos_prep.cli` finds this checkout
    sys.path.insert(0, os.getcwd())
    work = Path(args.work)
    meta = prepare(work, Path(args.data), args.attach_null)
    meta["warm_up_seconds"] = warm_up(work)
    rows = []
    for direction in args.directions.split(","):
        for size in (int(x) for x in args.sizes.split(",")):
            rows.append(bench(work, direction, args.attach_null, size, shlex.split(args.train_args), args.tag,
                              args.eval_split, args.speed_repeats))
            print_table(meta, rows[-1:], args.eval_split)
    print("\n=== summary ===")
    print_table(meta, rows, args.eval_split)
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
