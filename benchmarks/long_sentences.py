"""One sentence's cost in the BTG reorderer by its length, to 250 words and far beyond, and what bounding it costs.

WMT corpora have sentences of up to 250 words (the recipes' CLEAN_MAX_LEN) and test sets are not cleaned at all.
This measures the time and peak memory of reordering ONE sentence of n words, and the Kendall tau of long inputs,
for the linear reorderer (xlpos_prep.btg): spans of at most max_span words (64) are parsed by CKY and longer
sentences are chains of such segments, and a sentence of more than btg.MAX_PARSE_WORDS words (256) is cut into
pieces parsed one at a time, so that its memory stays that of a 256-word sentence.

Model: `xlpos-prep train-reorderer` with its defaults on the first --train-lines Tanaka En->Ja pairs (English
source, oracles from one eflomal + grow-diag-final-and alignment of those pairs and the dev set, made and cached in
--work by benchmarks/reorderer_enja.py's `prepare`). Tanaka sentences have at most 16 words, so everything here is
far longer than training.

Timing (one thread, compiled code warm, each sentence parsed alone): the dev sentences joined in order and cut to
exactly n words, --repeats sentences per length; wall time, and peak resident memory above what the process held
just before (Linux VmHWM, reset through /proc/self/clear_refs). Variants:
  cut        btg._parse_sentence with MAX_PARSE_WORDS: the search `reorder` runs;
  uncut      the same search with no cut (what reorder did before the bound);
  reorder    Reorderer.parse_batch([sentence]) with the model's defaults: the cut search plus, for a sentence
             longer than the training ones, the sentence-level fallback's second (straight) search;
  numpy      btg's numpy path, which parses while a fresh install compiles the kernel (to --numpy-max words).
Tau: the dev sentences joined whole in groups of g (xlpos_prep.stress.concatenate, the oracle is the concatenation
of theirs), corpus tau and FRS for the monotone order, the search uncut, cut at 256 (the default) and 128, and with
max_span 32 / 128 at inference; all with the sentence-level fallback off (inputs this much longer than training
would almost all fall back to monotone: the "defaults" row shows that) so that the searches are compared.
Training: one iteration of train-reorderer (its defaults, --max-len lifted) on the first --train-sentences training
sentences joined g at a time (g = 1: as they are): the same words as inputs of about 8 / 64 / 256 words, so the
seconds per word show what training on long sentences costs (the WMT recipes train on up to 250 words).

    python benchmarks/long_sentences.py --work /tmp/xlpos-long \
        --json docs/runs/2026-12-long-sentences/long_sentences.json
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import reorderer_enja as enja  # noqa: E402  (prepare: alignment and oracles, cached in --work)
from xlpos_prep.io import log  # noqa: E402

LENGTHS = (10, 25, 50, 100, 150, 200, 250, 400, 1000, 4000, 16000)
GROUPS = (8, 16, 32, 64, 128)  # Tanaka dev English: about 64, 128, 256, 512, 1024 words per joined input


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def measured(fn) -> tuple[float, float]:
    """(seconds, peak MB above the resident memory before) of fn()."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident size
    before = _status_kb("VmRSS")
    t0 = time.perf_counter()
    fn()
    seconds = time.perf_counter() - t0
    return seconds, max(_status_kb("VmHWM") - before, 0) / 1024


def long_inputs(dev: list[list[str]], n: int, count: int) -> list[list[str]]:
    """`count` inputs of exactly n words: the dev sentences joined in order from different starting sentences."""
    words = [w for s in dev for w in s]
    out = []
    for i in range(count):
        start = (i * 997) % len(words)
        ring = words[start:] + words[:start]
        while len(ring) < n:
            ring += words
        out.append(ring[:n])
    return out


def train_model(work: Path, lines: int) -> Path:
    model = work / f"en-ja.{lines}.npz"
    if not model.exists():
        for name in ("train.en", "train.en-ja.oracle"):
            sub = work / f"{name}.{lines}"
            if not sub.exists():
                enja.write_lines(sub, enja.read(work / name)[:lines])
        cmd = [sys.executable, "-m", "xlpos_prep.cli", "train-reorderer", "--src", str(work / f"train.en.{lines}"),
               "--oracle", str(work / f"train.en-ja.oracle.{lines}"), "--model", str(model)]
        log("$ " + " ".join(cmd))
        subprocess.run(cmd, check=True)
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="/tmp/xlpos-long", help="cache directory (alignment, oracles, model)")
    parser.add_argument("--data", default=str(enja.DATA), help="directory with Tanaka train/dev .en/.ja")
    parser.add_argument("--train-lines", type=int, default=20000, help="training pairs aligned and trained on")
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--repeats", type=int, default=5, help="sentences per length (up to 250 words; fewer above)")
    parser.add_argument("--numpy-max", type=int, default=250, help="longest sentence timed on the numpy path")
    parser.add_argument("--groups", default=",".join(map(str, GROUPS)), help="dev sentences per joined tau input")
    parser.add_argument("--train-groups", default="1,8,32", help="training sentences joined per training input")
    parser.add_argument("--train-sentences", type=int, default=6400, help="training sentences in each of those")
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args(argv)
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        # glibc serves a large block from the heap once a block that size was freed (its dynamic mmap threshold),
        # and the heap keeps it resident: a later sentence's tables would then cost no new resident memory. A fixed
        # threshold makes every array over 64 kB its own mapping, returned when freed, so each sentence's peak
        # above the resident memory before it is what it allocated.
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "NUMBA_NUM_THREADS": "1"}
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *sys.argv[1:]], env)
    import numpy as np

    from xlpos_prep import btg, stress
    from xlpos_prep.metrics import evaluate_orders, monotone_order
    from xlpos_prep.oracle import read_oracle
    from xlpos_prep.reorderer import Reorderer, load_reorderer

    work = Path(args.work).resolve()
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    for lang in ("en", "ja"):  # the training subset and the dev set, as prepare() reads them
        for split, n in (("train", args.train_lines), ("dev", None)):
            path = data / f"{split}.{lang}"
            if not path.exists():
                enja.write_lines(path, enja.read(Path(args.data) / f"{split}.{lang}")[:n])
    meta = enja.prepare(work, data, "right")
    model_path = train_model(work, args.train_lines)
    model = load_reorderer(str(model_path))
    assert isinstance(model, Reorderer)
    c = model.config
    dev = [line.split() for line in enja.read(work / "dev.en")]
    dev_ranks = read_oracle(str(work / "dev.en-ja.oracle"), [len(s) for s in dev])
    log(f"model {model_path.name}: max_span {c.max_span}, fallback_length {c.fallback_length}, "
        f"fallback_margin {c.fallback_margin}, max_invert_span {c.max_invert_span}; MAX_PARSE_WORDS "
        f"{btg.MAX_PARSE_WORDS}")

    def tok_of(words: list[str]) -> np.ndarray:
        tok, _ = model.encoder.encode_batch([words])
        return tok

    def search(tok: np.ndarray, max_words: int, max_span: int = c.max_span):
        pen = replace(c, max_span=max_span).inv_penalty
        return btg._parse_sentence(tok, model.weights, c.mask, c.max_term, max_span, c.feature_flags, pen,
                                   np.int64(max_words))

    # warm every compiled path once
    warm = long_inputs(dev, 600, 1)[0]
    search(tok_of(warm), btg.MAX_PARSE_WORDS)
    search(tok_of(warm), 10**9)
    model.parse_batch([warm])

    results: dict = {"meta": {**meta, "train_lines": args.train_lines, "max_span": c.max_span,
                              "max_parse_words": btg.MAX_PARSE_WORDS, "fallback_length": c.fallback_length,
                              "fallback_margin": c.fallback_margin, "max_invert_span": c.max_invert_span,
                              "hash_bits": c.hash_bits, "python": platform.python_version(),
                              "cpu": platform.processor() or platform.machine(), "threads": 1},
                     "timing": [], "tau": [], "training": []}
    # ------------------------------------------------------------------ one sentence by length
    for n in (int(x) for x in args.lengths.split(",")):
        count = args.repeats if n <= 250 else max(1, args.repeats // (2 if n <= 1000 else 5))
        row: dict = {"words": n, "sentences": count}
        inputs = long_inputs(dev, n, count)
        toks = [tok_of(w) for w in inputs]
        variants = {"cut": lambda t, w: search(t, btg.MAX_PARSE_WORDS),
                    "uncut": lambda t, w: search(t, 10**9),
                    "reorder": lambda t, w: model.parse_batch([w])}
        if n <= args.numpy_max:
            variants["numpy"] = lambda t, w: btg._np_parse_sentence(t, model.weights, c.mask, c.max_term,
                                                                    c.max_span, c.feature_flags, model._inv_penalty)
        for name, fn in variants.items():
            runs = [measured(lambda t=t, w=w: fn(t, w)) for t, w in zip(toks, inputs)]
            row[name] = {"seconds": statistics.median(r[0] for r in runs), "max_seconds": max(r[0] for r in runs),
                         "peak_mb": max(r[1] for r in runs)}
        log(f"{n:6d} words: " + "  ".join(f"{k} {v['seconds'] * 1000:8.1f} ms {v['peak_mb']:7.1f} MB"
                                           for k, v in row.items() if isinstance(v, dict)))
        results["timing"].append(row)
    # ------------------------------------------------------------------ tau of long inputs
    searches = {"uncut": dict(max_words=10**9), "cut 256 (default)": dict(max_words=btg.MAX_PARSE_WORDS),
                "cut 128": dict(max_words=128), "max_span 32": dict(max_words=btg.MAX_PARSE_WORDS, max_span=32),
                "max_span 128": dict(max_words=btg.MAX_PARSE_WORDS, max_span=128)}
    for g in (int(x) for x in args.groups.split(",")):
        joined, ranks = stress.concatenate(dev, dev_ranks, groups=(g,))
        parts = [[len(s) for s in dev[i:i + g]] for i in range(0, len(dev), g)]  # the joined sentences' lengths
        row = {"group": g, "inputs": len(joined), "avg_words": sum(map(len, joined)) / len(joined),
               "max_words": max(map(len, joined))}

        def scores(orders: list[list[int]]) -> dict:
            return {**vars(evaluate_orders(orders, ranks)), "within": within_sentences(orders, ranks, parts)}

        row["monotone"] = scores([monotone_order(len(w)) for w in joined])
        for name, kw in searches.items():
            t0 = time.perf_counter()
            orders = [search(tok_of(w), **kw)[0].tolist() for w in joined]
            row[name] = {**scores(orders), "seconds": time.perf_counter() - t0}
        row["defaults (fallback on)"] = scores(model.reorder_batch(joined))
        log(f"group {g}: {row['avg_words']:.0f} words: " + "  ".join(
            f"{k} {v['corpus_tau']:.4f}" for k, v in row.items() if isinstance(v, dict)))
        results["tau"].append(row)
    # ------------------------------------------------------------------ training on long sentences
    train = [line.split() for line in enja.read(work / f"train.en.{args.train_lines}")]
    train_ranks = read_oracle(str(work / f"train.en-ja.oracle.{args.train_lines}"), [len(s) for s in train])
    for g in (int(x) for x in args.train_groups.split(",")):
        results["training"].append(train_cost(work, train[:args.train_sentences], train_ranks[:args.train_sentences],
                                              g))
    print_tables(results)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


def train_cost(work: Path, sentences: list[list[str]], ranks: list[list[int]], g: int) -> dict:
    """One training iteration (train-reorderer's defaults otherwise) on the same sentences joined g at a time:
    wall seconds and peak resident memory of the child (os.wait4)."""
    from xlpos_prep import stress
    joined, joined_ranks = stress.concatenate(sentences, ranks, groups=(g,))
    src, oracle, model = work / f"trainjoin{g}.en", work / f"trainjoin{g}.oracle", work / f"trainjoin{g}.npz"
    enja.write_lines(src, [" ".join(w) for w in joined])
    enja.write_lines(oracle, [" ".join(map(str, r)) for r in joined_ranks])
    cmd = [sys.executable, "-m", "xlpos_prep.cli", "train-reorderer", "--src", str(src), "--oracle", str(oracle),
           "--model", str(model), "--iterations", "1", "--max-len", "100000"]
    log("$ " + " ".join(cmd))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"command failed: {' '.join(cmd)}")
    words = sum(map(len, joined))
    return {"group": g, "inputs": len(joined), "words": words, "avg_words": words / len(joined),
            "max_words": max(map(len, joined)), "seconds": time.perf_counter() - t0, "peak_mb": usage.ru_maxrss / 1024}


def within_sentences(orders: list[list[int]], ranks: list[list[int]], parts: list[list[int]]) -> dict:
    """Corpus tau and FRS over the words of each joined sentence alone (its words in the order the output puts
    them, against its own oracle): how well each sentence is reordered inside a long input, which the scores of
    the whole input hide (the pairs across sentences, almost all of them, are in order whatever the search does)."""
    from xlpos_prep.metrics import evaluate_orders
    sub_orders, sub_ranks = [], []
    for order, rank, lengths in zip(orders, ranks, parts):
        start = 0
        for n in lengths:
            inside = [i - start for i in order if start <= i < start + n]
            sub_orders.append(inside)
            part = rank[start:start + n]
            dense = {r: k for k, r in enumerate(sorted(set(part)))}
            sub_ranks.append([dense[r] for r in part])
            start += n
    s = evaluate_orders(sub_orders, sub_ranks)
    return {"corpus_tau": s.corpus_tau, "corpus_frs": s.corpus_frs}


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = a + b x: (a, b, R^2)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    ss = sum((y - my) ** 2 for y in ys)
    res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    return a, b, 1 - res / ss if ss else 1.0


def print_tables(results: dict) -> None:
    m = results["meta"]
    print(f"\nOne sentence alone, median of its length's sentences (ms) and peak memory above the process's (MB); "
          f"max_span {m['max_span']}, MAX_PARSE_WORDS {m['max_parse_words']}, 1 thread")
    names = ("cut", "uncut", "reorder", "numpy")
    print(f"{'words':>6} | " + " | ".join(f"{n:>18}" for n in names))
    for row in results["timing"]:
        cells = [f"{row[n]['seconds'] * 1000:9.1f} {row[n]['peak_mb']:7.1f}" if n in row else f"{'-':>18}"
                 for n in names]
        print(f"{row['words']:6d} | " + " | ".join(cells))
    for name in ("cut", "uncut", "reorder"):
        pts = [(r["words"], r[name]["seconds"]) for r in results["timing"] if r["words"] >= 100]
        if len(pts) >= 3:
            a, b, r2 = linear_fit([p[0] for p in pts], [p[1] for p in pts])
            print(f"  {name}: time = {a * 1000:.2f} ms + {b * 1e6:.1f} us/word (n >= 100, R^2 {r2:.4f})")
    if results.get("training"):
        print("\nOne training iteration (train-reorderer defaults, a child process) on the same training sentences "
              "joined g at a time")
        print(f"{'g':>4} {'inputs':>6} {'words':>6} {'max':>5} | {'seconds':>8} {'ms/1k words':>11} {'peak MB':>8}")
        for r in results["training"]:
            print(f"{r['group']:4d} {r['inputs']:6d} {r['avg_words']:6.0f} {r['max_words']:5d} | {r['seconds']:8.1f} "
                  f"{r['seconds'] / r['words'] * 1e6:11.1f} {r['peak_mb']:8.0f}")
    cols = ["monotone", "uncut", "cut 256 (default)", "cut 128", "max_span 32", "max_span 128",
            "defaults (fallback on)"]
    for key, what in ((None, "the whole input"), ("within", "each joined sentence alone")):
        print(f"\nLong inputs (dev sentences joined in groups of g): corpus tau / FRS over {what}; the searches "
              f"with the fallback off")
        print(f"{'g':>4} {'n':>4} {'words':>6} {'max':>5} | " + " | ".join(f"{c:>17}" for c in cols))
        for row in results["tau"]:
            cells = [row[c][key] if key else row[c] for c in cols]
            print(f"{row['group']:4d} {row['inputs']:4d} {row['avg_words']:6.0f} {row['max_words']:5d} | "
                  + " | ".join(f"{s['corpus_tau']:.4f} / {s['corpus_frs']:.4f}" for s in cells))


if __name__ == "__main__":
    sys.exit(main())
