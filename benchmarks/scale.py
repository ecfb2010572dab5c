"""What `xlpos-prep prepare` costs as the corpus grows: wall time, CPU time and peak memory of every step, their
growth fitted over corpus sizes, and the time extrapolated to WMT-sized corpora on 2 and on 32 cores.

The corpora are WMT-like in length: each sentence pair joins consecutive pairs of the Tanaka corpus
(../shared/data/enja, English -> Japanese, as WMT14's English -> German has an English source) until the English
side reaches a length drawn from a log-normal distribution (median 21 words, sigma 0.6: mean about 25; at most 250
words, the WMT recipes' cleaning limit), starting at random lines. Training pairs are joined from all but the last 4,000
Tanaka training lines, test (1,000 pairs) and valid (200 pairs) from those, so they are the same at every size.
Joined sentences keep real words, real alignments and real reordering; the vocabulary is Tanaka's, smaller than
WMT's (sentencepiece and fairseq-preprocess are fast here for that reason).

Each size runs the real pipeline (`xlpos-prep prepare`, in a child process, with the WMT recipes' reorderer
settings: --max-len 250) while a sampler reads the process tree's CPU time and resident memory every 0.25 s
(benchmarks/process_tree.py). A step's interval ends when its completion record is written (the pipeline writes
OUTPUT.done after each step): the samples of that interval give its wall time, CPU time and peak memory (the sum
of the live processes' resident sets: an upper bound, sampled, so a peak shorter than 0.25 s can be missed).
Then one epoch of fairseq-train's data loading with XL positions (the `translation_xlpos` task's batch iterator
over the training split, collation included, no model) runs in another child: its wall, CPU and peak memory.

Growth: per step, the exponent b of time ~ a * lines^b fitted on log-log axes (1 = linear), and the peak memory at
every size. Extrapolation to 4.5M (WMT14 En-De) and 20M (WMT17 Zh-En) pairs uses each step's fit with the WMT
recipes' caps: the alignment on the first 1,000,000 pairs (ALIGN_LINES) and the reorderer, its jackknife folds
included, on the first 100,000 (REORDER_TRAIN_LINES); every other step on all pairs. On c cores a step takes its
CPU time divided by min(c, how many processes it runs at once): the per-sentence steps (--workers processes, or
shard jobs), the jackknife's folds (K at once), eflomal (its two directions) and the rest on one core.

    python benchmarks/scale.py --sizes 5000,10000,20000 --workers 2 --json docs/runs/2026-12-scale/small.json
    python benchmarks/scale.py --sizes 50000,500000,2000000 --workers 2 --work /big/disk/scale     # hours

A larger size can be measured alone, with the WMT recipes' reorderer cap as its share, and fitted together
with earlier records:

    python benchmarks/scale.py --sizes 2000000 --reorder-fraction 0.05 --workers 2 --work work/scale-2m \
        --with-records docs/runs/2026-12-scale/s20k-500k-f02-w2.json --json docs/runs/2026-12-scale/s2m.json

--plot PNG draws every step's CPU time and peak memory against its lines, with the fits carried to WMT14
(benchmarks/plot_scale.py, which also draws a saved record).

A size measured before is read from its record; a size whose measurement was cut resumes when the same command
runs again (the pipeline skips its completed steps; the step that was cut is named in the record).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))
import run_records  # noqa: E402
from process_tree import Sample, TreeSampler  # noqa: E402
from xlpos_prep.io import log, write_json  # noqa: E402

SRC, TGT = "en", "ja"
HELD_LINES = 4_000          # the last Tanaka training lines: valid and test are joined from them, training pairs never
SPLIT_PAIRS = {"valid": 200, "test": 1000}
MEDIAN_WORDS, SIGMA, MAX_WORDS = 21.0, 0.6, 250
WMT_ALIGN_LINES, WMT_REORDER_LINES = 1_000_000, 100_000   # the WMT recipes' ALIGN_LINES, REORDER_TRAIN_LINES
# sentencepiece trains on a sample of 2M sentences of both sides (sentencepiece_model.train_model's
# input_sentence_size): 1M pairs' worth; it reads the rest of the corpus only to draw the sample
SPM_SAMPLE_PAIRS = 1_000_000
MEMORY_GROWTH = 1.2  # a peak that grew by less over the measured sizes is bounded (see memory_grows)
TARGETS = {"WMT14 En-De": 4_500_000, "WMT17 Zh-En": 20_000_000}
CORES = (2, 32)
PROGRESS_SECONDS = 30.0   # how often a running prepare's measured steps are saved (a cut measurement resumes)
# Steps whose completion records are written inside another step's interval (the jackknife's folds run in
# parallel within "jackknife reorderers"): left out of the per-step table, their time is their parent's. So is the
# model on all lines when it trained beside the folds (its record written after the folds' files were).
NESTED = re.compile(r"^jackknife fold \d+ ")
BESIDE_FOLDS = ("train-reorderer", "jackknife folds")


def nested_steps(records: list[tuple[float, str]]) -> set[str]:
    ends = {step: end for end, step in records}
    nested = {step for step in ends if NESTED.match(step)}
    reorderer, folds = BESIDE_FOLDS
    if reorderer in ends and folds in ends and ends[reorderer] > ends[folds]:
        nested.add(reorderer)
    return nested


# ------------------------------------------------------------------------------------------------ corpora
def joined_pairs(src: list[str], tgt: list[str], lo: int, hi: int, n: int, rng: random.Random) -> Iterator[tuple]:
    """n pairs, each the consecutive lines lo <= i < hi from a random start joined until the source reaches a
    log-normal length (at most MAX_WORDS words unless one line is longer)."""
    for _ in range(n):
        want = min(MAX_WORDS, max(1, round(rng.lognormvariate(math.log(MEDIAN_WORDS), SIGMA))))
        i = rng.randrange(lo, hi)
        s_words, t_words = src[i].split(), tgt[i].split()
        while len(s_words) < want:
            i = lo + (i + 1 - lo) % (hi - lo)
            more = src[i].split()
            if len(s_words) + len(more) > MAX_WORDS:
                break
            s_words += more
            t_words += tgt[i].split()
        yield " ".join(s_words), " ".join(t_words)


def write_corpus(data: Path, tok: Path, lines: int, seed: int) -> None:
    """WORK/tok/{train,valid,test}.{en,ja} of `lines` training pairs (see the module's docstring)."""
    src = (data / f"train.{SRC}").read_text(encoding="utf-8").splitlines()
    tgt = (data / f"train.{TGT}").read_text(encoding="utf-8").splitlines()
    if len(src) <= 2 * HELD_LINES:
        raise SystemExit(f"{data}/train.{SRC}: {len(src)} lines, the benchmark needs more than {2 * HELD_LINES}")
    pool = len(src) - HELD_LINES
    tok.mkdir(parents=True, exist_ok=True)
    parts = {"train": (0, pool, lines, seed), "valid": (pool, len(src), SPLIT_PAIRS["valid"], 10_000 + 1),
             "test": (pool, len(src), SPLIT_PAIRS["test"], 10_000 + 2)}
    for split, (lo, hi, n, split_seed) in parts.items():
        pairs = joined_pairs(src, tgt, lo, hi, n, random.Random(split_seed))
        with open(tok / f"{split}.{SRC}", "w", encoding="utf-8") as fs, \
                open(tok / f"{split}.{TGT}", "w", encoding="utf-8") as ft:
            for s, t in pairs:
                fs.write(s + "\n")
                ft.write(t + "\n")


# ------------------------------------------------------------------------------------------------ measuring
@dataclass
class StepCost:
    step: str
    wall: float          # seconds
    cpu: float           # CPU seconds of the whole process tree in the step's interval
    peak_rss: int        # bytes, sampled


def completion_records(work: Path) -> list[tuple[float, str]]:
    """(time written, step) of every completion record under `work`, one per step (its last output's)."""
    ends: dict[str, float] = {}
    for marker in work.rglob("*.done"):
        try:
            step = json.loads(marker.read_text(encoding="utf-8"))["step"]
        except (ValueError, KeyError, TypeError):
            continue  # not a completion record (fairseq-preprocess's own marker)
        ends[step] = max(ends.get(step, 0.0), marker.stat().st_mtime)
    return sorted((t, s) for s, t in ends.items())


def step_costs(samples: list[Sample], records: list[tuple[float, str]], start: float) -> list[StepCost]:
    """Cuts the samples at the steps' ends: a step's interval runs from the previous top-level step's end. Steps
    completed before `start` (an earlier, cut measurement of the same work directory) are not in this one."""
    costs, begin, nested = [], start, nested_steps(records)
    for end, step in records:
        if step in nested or end < start:
            continue
        inside = [x for x in samples if begin <= x.wall <= end]
        before = [x for x in samples if x.wall <= begin]
        cpu0 = before[-1].cpu if before else 0.0
        cpu1 = inside[-1].cpu if inside else cpu0
        costs.append(StepCost(step, round(end - begin, 2), round(max(0.0, cpu1 - cpu0), 2),
                              max((x.rss for x in inside), default=0)))
        begin = end
    return costs


@dataclass
class ChildRun:
    start: float                 # time.time() at launch
    wall: float                  # seconds
    cpu: float                   # CPU seconds of the process and every descendant
    samples: list[Sample]


def measured_child(cmd: list[str], log_path: Path, progress: Callable[[float, list[Sample]], None] | None = None,
                   every: float = 30.0) -> ChildRun:
    """Runs cmd with its output appended to log_path, sampling its process tree; `progress(start, samples so
    far)` is called every `every` seconds while it runs."""
    with open(log_path, "a", encoding="utf-8") as out:
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        sampler = TreeSampler(proc.pid).start()
        reported = t0
        while True:  # wait4 reaps the child and gives the CPU time of it and every descendant it reaped
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if progress and time.time() - reported >= every:
                progress(t0, list(sampler.samples))
                reported = time.time()
            time.sleep(0.05)
        samples = sampler.stop()
        wall = time.time() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} exited {proc.returncode}; its log: {log_path}")
    return ChildRun(t0, wall, usage.ru_utime + usage.ru_stime, samples)


def prepare_command(work: Path, workers: int, jackknife: int, reorder_lines: int) -> list[str]:
    """The pipeline as the WMT recipes run it, every training pair aligned, the first reorder_lines training the
    reorderer."""
    return [sys.executable, "-m", "xlpos_prep.cli", "prepare", "--work", str(work), "--src", SRC, "--tgt", TGT,
            "--workers", str(workers), "--jackknife", str(jackknife), "--reorder-train-lines", str(reorder_lines),
            "--reorder-args", f"--max-len {MAX_WORDS}"]


def epoch_command(data_bin: Path, max_tokens: int) -> list[str]:
    return [sys.executable, __file__, "--epoch", str(data_bin), "--max-tokens", str(max_tokens)]


def epoch_main(data_bin: str, max_tokens: int) -> None:
    """(child) One epoch of the training split as fairseq-train's data loader reads it (no model): the XL task's
    dataset, batches of max_tokens, every example read and every batch collated. Prints one JSON line."""
    import resource

    from xl_data_path import load_train  # the task and data-bin as fairseq-train loads them

    t0, c0 = time.time(), time.process_time()
    dataset = load_train("translation_xlpos", Path(data_bin), SRC, TGT, "train")
    batches = dataset.batch_by_size(dataset.ordered_indices(), max_tokens=max_tokens,
                                    required_batch_size_multiple=1)
    tokens = 0
    for batch in batches:
        tokens += int(dataset.collater([dataset[i] for i in batch])["ntokens"])
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"wall": round(time.time() - t0, 2), "cpu": round(time.process_time() - c0, 2),
                      "batches": len(batches), "target_tokens": tokens, "peak_rss": usage.ru_maxrss * 1024}))


# ------------------------------------------------------------------------------------------------ growth
# How many lines a step works on (of N training pairs; A aligned, R training the reorderer) and how many
# processes it runs at once (W: the per-sentence steps' workers or shard jobs, K: the jackknife's folds), by name.
# A step of valid or test works on a split whose size does not change with the corpus.
STEP_KINDS: list[tuple[str, str, str]] = [  # the first match decides
    (r" (valid|test)$", "fixed", "W"),
    (r"^align \(", "A", "2"),                       # eflomal: its forward and reverse models
    (r"^(alignment|oracle source|reorderer training lines)", "R", "1"),
    (r"^oracle train", "R", "W"),
    (r"^train-reorderer", "R", "1"),
    (r"^jackknife (folds|orders)", "R", "1"),
    # the folds' models, and the one on all lines when it trains beside them: K + 1 jobs of about K x one model's
    # CPU (the full model and K folds of (K-1)/K of the lines), whose longest job is the full model: CPU / K at most
    (r"^jackknife reorderers", "R", "K"),
    (r"^evaluate train", "R", "1"),
    (r"^(jackknife rest source|reorder train rest)", "N-R", "W"),
    (r"^(positions|spm-encode) train", "N", "W"),
    (r"^data-bin", "N", "W"),
    (r"^spm-train", "S", "1"),
    (r"^(check input|reorder train)", "N", "1"),
]


def step_kind(step: str) -> tuple[str, str]:
    for pattern, lines, parallel in STEP_KINDS:
        if re.search(pattern, step):
            return lines, parallel
    return "N", "1"


def lines_of(kind: str, n: int, aligned: int, reorder: int) -> int:
    return {"A": aligned, "R": reorder, "N-R": n - reorder, "N": n, "S": min(n, SPM_SAMPLE_PAIRS), "fixed": 1}[kind]


def power_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(a, b) of y = a * x^b, least squares on log-log axes (b = 1 with one point)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(pts) < 2:
        return (ys[-1] / xs[-1] if xs and xs[-1] else 0.0), 1.0
    mx, my = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    b = sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx else 1.0
    return math.exp(my - b * mx), b


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(c, m) of y = c + m * x, least squares (m = 0 with one point)."""
    if len(xs) < 2:
        return (ys[-1] if ys else 0.0), 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    m = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - m * mx, m


def parallelism(code: str, cores: int, folds: int) -> int:
    return {"1": 1, "2": min(2, cores), "W": cores, "K": min(folds, cores)}[code]


def step_cpu(fit: dict, lines: int) -> float:
    """CPU seconds of a step on `lines` lines: the larger of its power law and its straight line (start-up plus a
    cost per line). A step whose small sizes are mostly start-up fits a power below 1 that would shrink its cost
    per line forever; the straight line keeps the measured cost per line."""
    if fit["kind"] == "fixed":
        return fit["cpu_a"]
    power = fit["cpu_a"] * lines ** fit["cpu_b"]
    return max(power, fit.get("cpu_c", 0.0) + max(fit.get("cpu_m", 0.0), 0.0) * lines)


def memory_grows(fit: dict) -> bool:
    """Whether a step's peak memory grew with the corpus: by more than MEMORY_GROWTH from its smallest sampled size
    to its largest. A step that holds its input grows nearly as fast as it (the alignment 6x, sentencepiece's sample
    17x over 25x the corpus); one that streams moves by its sampler's and allocator's noise (the reorder of the
    training split: 911 -> 998 MB on one machine, 975 -> 908 MB on another over the same 25x), which a straight line
    would carry to gigabytes at WMT sizes."""
    if fit["kind"] == "fixed" or fit["rss_m"] <= 0:
        return False
    sampled = [peak for _, peak in sorted(zip(fit["lines"], fit["peak_rss"])) if peak > 0]
    return len(sampled) > 1 and sampled[-1] > MEMORY_GROWTH * sampled[0]


def wmt_lines(step: str, pairs: int) -> int:
    """The lines a step works on in a run of `pairs` training pairs with the WMT recipes' caps."""
    kind, _ = step_kind(step)
    return lines_of(kind, pairs, min(pairs, WMT_ALIGN_LINES), min(pairs, WMT_REORDER_LINES))


def extrapolate_memory(fits: dict[str, dict], pairs: int) -> dict[str, float]:
    """Per step, its peak memory (bytes, with the benchmark's --workers) at `pairs` training pairs with the WMT
    recipes' caps: its measured peak, or, where it grew with the corpus, its linear fit in the lines it works on,
    at least the peak measured on no more lines (a size measured beyond a recipe's cap, e.g. 2M aligned pairs,
    says nothing of the capped step)."""
    peaks = {}
    for step, fit in fits.items():
        if not memory_grows(fit):
            peaks[step] = max(fit["peak_rss"])
            continue
        lines = wmt_lines(step, pairs)
        below = [peak for x, peak in zip(fit["lines"], fit["peak_rss"]) if x <= lines]
        peaks[step] = max([fit["rss_c"] + fit["rss_m"] * lines, *below])
    return peaks


def extrapolate(fits: dict[str, dict], pairs: int, cores: int, folds: int) -> float:
    """Seconds of the whole pipeline for `pairs` training pairs with the WMT recipes' caps on `cores` cores."""
    total = 0.0
    for step, fit in fits.items():
        kind, code = step_kind(step)
        lines = wmt_lines(step, pairs)
        if kind == "N-R" and lines == 0:
            continue
        total += step_cpu(fit, lines) / parallelism(code, cores, folds)
    return total


# ------------------------------------------------------------------------------------------------ one size
def measure_size(root: Path, data: Path, lines: int, opts: argparse.Namespace) -> dict:
    """Prepares a fresh corpus of `lines` training pairs and measures every step; the record is kept in
    ROOT/N/scale.json, and a size with a record is not run again (delete the directory to remeasure).

    A measurement that is cut (the machine goes back, Ctrl-C) resumes: the steps measured so far are kept in
    ROOT/N/partial.json while prepare runs, and the next run of the same size lets the pipeline skip the steps it
    completed and measures the rest. The step that was running when it was cut is measured from the resumption
    only (the time it had spent is lost, and a step that resumes its own parts, such as the jackknife's folds,
    reads cheaper): the record names it in `resumed_steps`."""
    work = root / str(lines)
    record_path, partial_path = work / "scale.json", work / "partial.json"
    if record_path.exists():
        log(f"{lines} pairs: measured before ({record_path})")
        return json.loads(record_path.read_text(encoding="utf-8"))
    reorder = max(2 * opts.jackknife, int(lines * opts.reorder_fraction))
    cmd = prepare_command(work, opts.workers, opts.jackknife, reorder)
    partial = json.loads(partial_path.read_text(encoding="utf-8")) if partial_path.exists() else None
    if partial and partial["command"] != shlex.join(cmd):
        raise SystemExit(f"{partial_path}: measured with `{partial['command']}`, not `{shlex.join(cmd)}`: "
                         "delete the directory to remeasure")
    if partial is None:
        if work.exists():  # cut before its corpus was whole: nothing of it was measured
            import shutil
            shutil.rmtree(work)
        log(f"{lines} pairs: writing the corpus")
        write_corpus(data, work / "tok", lines, opts.seed)
        words = sum(len(line.split()) for line in open(work / "tok" / f"train.{SRC}", encoding="utf-8"))
        partial = {"command": shlex.join(cmd), "source_words": words, "steps": [], "intervals": [],
                   "resumed_steps": [], "prepare_done": False}
        write_json(partial_path, partial)
    if not partial["prepare_done"]:
        measured = list(partial["steps"])
        if partial["intervals"]:
            log(f"{lines} pairs: resuming a cut measurement ({len(measured)} steps measured before)")

        def keep(start: float, samples: list[Sample], wall: float | None = None, cpu: float | None = None) -> None:
            new = [asdict(c) for c in step_costs(samples, completion_records(work), start)]
            if new and partial["intervals"] and new[0]["step"] not in partial["resumed_steps"]:
                partial["resumed_steps"].append(new[0]["step"])
            interval = {"start": start, "wall": round(wall if wall is not None else time.time() - start, 2),
                        "cpu": round(cpu if cpu is not None else (samples[-1].cpu if samples else 0.0), 2),
                        "peak_rss": max((x.rss for x in samples), default=0)}
            write_json(partial_path, {**partial, "steps": measured + new,
                                      "intervals": partial["intervals"] + [interval], "prepare_done": wall is not None})

        log(f"{lines} pairs ({partial['source_words']} source words): {shlex.join(cmd)}")
        run = measured_child(cmd, work / "prepare.log", progress=keep, every=PROGRESS_SECONDS)
        keep(run.start, run.samples, run.wall, run.cpu)
        partial = json.loads(partial_path.read_text(encoding="utf-8"))
    intervals = partial["intervals"]
    log(f"{lines} pairs: prepare took {sum(i['wall'] for i in intervals):.0f} s, "
        f"{sum(i['cpu'] for i in intervals):.0f} CPU-s; one epoch of data loading next")
    (work / "epoch.log").unlink(missing_ok=True)
    epoch_run = measured_child(epoch_command(work / "data-bin", opts.max_tokens), work / "epoch.log")
    epoch = json.loads((work / "epoch.log").read_text(encoding="utf-8").strip().splitlines()[-1])
    record = {"lines": lines, "source_words": partial["source_words"], "reorder_lines": reorder,
              "aligned_lines": lines, "workers": opts.workers, "jackknife": opts.jackknife,
              "command": partial["command"],
              "prepare": {"wall": round(sum(i["wall"] for i in intervals), 2),
                          "cpu": round(sum(i["cpu"] for i in intervals), 2),
                          "peak_rss": max((i["peak_rss"] for i in intervals), default=0)},
              "steps": partial["steps"],
              "epoch": {**epoch, "process_wall": round(epoch_run.wall, 2)},
              "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "load_before": opts.load_before}
    if len(intervals) > 1:
        record["intervals"] = len(intervals)
        record["resumed_steps"] = partial["resumed_steps"]
    write_json(record_path, record)
    return record


def machine() -> str:
    return f"{run_records.cpu_model()}, {len(os.sched_getaffinity(0))} cores"


def mixed_machines(records: list[dict]) -> str | None:
    """A warning when the sizes were measured on different machines (--with-records from another session): their
    growth fits then mix two machines' speeds."""
    machines: dict[str, list[int]] = {}
    for r in sorted(records, key=lambda r: r["lines"]):
        machines.setdefault(r.get("machine", "unknown"), []).append(r["lines"])
    if len(machines) < 2:
        return None
    return ("warning: the sizes were measured on different machines, so the growth fits mix their speeds: "
            + "; ".join(f"{m}: {', '.join(map(str, sizes))} pairs" for m, sizes in machines.items()))


# ------------------------------------------------------------------------------------------------ report
def fits_of(records: list[dict]) -> dict[str, dict]:
    """Per step: the power-law fits of its CPU and wall time in the lines it works on, and its peak memory."""
    steps: dict[str, list[tuple[int, dict]]] = {}
    for r in records:
        for c in r["steps"]:
            kind, _ = step_kind(c["step"])
            steps.setdefault(c["step"], []).append(
                (lines_of(kind, r["lines"], r["aligned_lines"], r["reorder_lines"]), c))
    fits = {}
    for step, points in steps.items():
        kind, _ = step_kind(step)
        xs = [float(x) for x, _ in points]
        if kind == "fixed":  # the same split at every size: its mean cost
            cpu = sum(c["cpu"] for _, c in points) / len(points)
            fits[step] = {"kind": kind, "cpu_a": cpu, "cpu_b": 0.0, "wall_b": 0.0,
                          "peak_rss": [c["peak_rss"] for _, c in points]}
            continue
        cpu_a, cpu_b = power_fit(xs, [max(c["cpu"], 0.01) for _, c in points])
        _, wall_b = power_fit(xs, [max(c["wall"], 0.01) for _, c in points])
        cpu_c, cpu_m = linear_fit(xs, [c["cpu"] for _, c in points])
        # a step shorter than the sampler's interval may have no memory sample at a size: no figure there
        sampled = [(x, float(c["peak_rss"])) for x, (_, c) in zip(xs, points) if c["peak_rss"] > 0]
        rss_c, rss_m = linear_fit([x for x, _ in sampled], [y for _, y in sampled]) if sampled else (0.0, 0.0)
        fits[step] = {"kind": kind, "cpu_a": cpu_a, "cpu_b": cpu_b, "wall_b": wall_b, "cpu_c": cpu_c,
                      "cpu_m": cpu_m, "lines": xs, "peak_rss": [c["peak_rss"] for _, c in points], "rss_c": rss_c,
                      "rss_m": rss_m}
    return fits


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def report(records: list[dict], folds: int) -> dict:
    records = sorted(records, key=lambda r: r["lines"])
    sizes = [r["lines"] for r in records]
    fits = fits_of(records)
    print(f"\nper step: CPU seconds / peak memory (MB) at {', '.join(map(str, sizes))} training pairs; "
          f"growth exponent b of CPU time ~ lines^b (1 = linear), lines = what the step works on; CPU-s per "
          f"1,000 lines: the straight line's slope")
    print(f"{'step':34} {'lines':>6} " + " ".join(f"{s:>16}" for s in sizes)
          + f" {'b (CPU)':>8} {'b (wall)':>8} {'s/1k':>6}")
    for step, fit in fits.items():
        cells = []
        for r in records:
            c = next((c for c in r["steps"] if c["step"] == step), None)
            cells.append(f"{c['cpu']:8.1f} / {c['peak_rss'] / 2**20:5.0f}" if c else f"{'-':>16}")
        # a step of a few seconds is mostly its process's start-up: its exponent says little
        small = "" if fit["kind"] == "fixed" or cells[-1].strip() == "-" or float(cells[-1].split("/")[0]) >= 10 \
            else "*"
        b = "const" if fit["kind"] == "fixed" else f"{fit['cpu_b']:7.2f}{small}"
        wb = "" if fit["kind"] == "fixed" else f"{fit['wall_b']:8.2f}"
        per_k = "" if fit["kind"] == "fixed" else f"{1000 * fit['cpu_m']:6.2f}"
        print(f"{step[:34]:34} {fit['kind']:>6} " + " ".join(cells) + f" {b:>8} {wb:>8} {per_k:>6}")
    print("* under 10 CPU seconds at the largest size: start-up weighs, the exponent is no growth figure")
    warning = mixed_machines(records)
    if warning:
        print(warning)
    for r in records:
        if r.get("resumed_steps"):
            print(f"{r['lines']} pairs were measured in {r['intervals']} pieces (a cut measurement resumed): "
                  f"{', '.join(r['resumed_steps'])} measured from the resumption only (cheaper than whole where a step "
                  "resumes its own parts)")
    print("one epoch of data loading (XL task, every batch collated): "
          + ", ".join(f"{r['lines']}: {r['epoch']['cpu']:.1f} CPU-s, {r['epoch']['peak_rss'] / 2**20:.0f} MB"
                      for r in records))
    print("whole prepare: " + ", ".join(f"{r['lines']}: {r['prepare']['wall']:.0f} s wall, {r['prepare']['cpu']:.0f} "
                                        f"CPU-s, peak {r['prepare']['peak_rss'] / 2**20:.0f} MB" for r in records))
    extrapolated = {}
    print(f"\nextrapolated prepare time with the WMT recipes' caps (align {WMT_ALIGN_LINES:,} pairs, reorderer "
          f"{WMT_REORDER_LINES:,}), jackknife {folds} folds:")
    for name, pairs in TARGETS.items():
        for cores in CORES:
            seconds = extrapolate(fits, pairs, cores, folds)
            extrapolated[f"{name}, {cores} cores"] = round(seconds)
            print(f"  {name} ({pairs:,} pairs) on {cores:2d} cores: {hours(seconds)}")
    memory = {}
    growing = [step for step, fit in fits.items() if memory_grows(fit)]
    print(f"\npeak memory grew by more than {MEMORY_GROWTH - 1:.0%} over the sizes (it holds what it works "
          f"on): {', '.join(growing) or 'no step'}; every other step's is bounded")
    print("extrapolated peak memory (the process tree of each step with the measured --workers; linear in the "
          "lines a step works on where it grew, otherwise as measured); the largest steps:")
    for name, pairs in TARGETS.items():
        peaks = extrapolate_memory(fits, pairs)
        memory[name] = {step: round(peak / 2**20) for step, peak in peaks.items()}
        top = sorted(peaks.items(), key=lambda item: -item[1])[:5]
        print(f"  {name} ({pairs:,} pairs): " + ", ".join(f"{step} {peak / 2**30:.1f} GB" for step, peak in top))
    return {"fits": fits, "extrapolated_seconds": extrapolated, "extrapolated_peak_mb": memory,
            "memory_grows": growing}


def earlier_records(paths: list[Path], measured: set[int], folds: int) -> list[dict]:
    """The records of earlier runs' --json files, but for the sizes in `measured` (and the first of two files
    recording one size). Records of another jackknife are refused: the fits would mix two pipelines."""
    records: dict[int, dict] = {}
    for path in paths:
        try:
            found = json.loads(path.read_text(encoding="utf-8"))["records"]
        except (OSError, ValueError, KeyError) as e:
            raise SystemExit(f"--with-records {path}: not a scale benchmark record ({e})") from None
        for r in found:
            if r["jackknife"] != folds:
                raise SystemExit(f"--with-records {path}: {r['lines']} pairs were measured with --jackknife "
                                 f"{r['jackknife']}, not {folds}")
            if r["lines"] not in measured:
                records.setdefault(r["lines"], r)
    return list(records.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="5000,10000,20000", help="training pairs, comma-separated")
    p.add_argument("--work", type=Path, default=REPO / "work" / "scale")
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "enja")
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--jackknife", type=int, default=3)
    p.add_argument("--reorder-fraction", type=float, default=0.5,
                   help="the share of training pairs that train the reorderer (the rest are reordered by it)")
    p.add_argument("--seed", type=int, default=1, help="of the corpus's sampling")
    p.add_argument("--max-tokens", type=int, default=4096, help="batch size of the data-loading epoch")
    p.add_argument("--json", type=Path, help="write the records, fits and extrapolation here")
    p.add_argument("--with-records", type=Path, nargs="+", default=[], metavar="JSON",
                   help="also fit the sizes recorded in these earlier --json files (a size measured now replaces "
                        "theirs); with --sizes '' only they are reported")
    p.add_argument("--plot", type=Path, metavar="PNG",
                   help="also draw every step's CPU time and peak memory against its lines (benchmarks/plot_scale.py; "
                        "needs matplotlib)")
    p.add_argument("--epoch", help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    if opts.epoch:
        epoch_main(opts.epoch, opts.max_tokens)
        return 0
    sizes = [int(x) for x in opts.sizes.split(",") if x.strip()]
    opts.load_before = os.getloadavg()[0]
    records = [measure_size(opts.work, opts.data, n, opts) for n in sizes]
    records += earlier_records(opts.with_records, set(sizes), opts.jackknife)
    if not records:
        p.error("nothing to report: give --sizes or --with-records")
    summary = {"command": shlex.join(sys.argv), "records": records, **report(records, opts.jackknife)}
    if opts.json:
        opts.json.parent.mkdir(parents=True, exist_ok=True)
        opts.json.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    if opts.plot:
        from plot_scale import plot_record
        plot_record(summary, opts.plot)
        log(f"plot: {opts.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
