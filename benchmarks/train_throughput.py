"""End-to-end training throughput of the XL systems against the vanilla Transformer, through fairseq-train.

What a user pays is not only the model (benchmarks/speed_xl_vs_vanilla.py measures that in-process on identical
batches) but the whole of fairseq-train: loading the XL positions, the task, collating ``src_xl_positions`` into
every batch, moving them to the device, the gate.  This benchmark runs the real ``fairseq-train`` for every mode
on the same data-bin with the same seed and options, round after round, the order of the modes rotating from one
round to the next (ABAB... for two modes), so that drifting load hits every mode alike.  Per run it reads:

  steady wps   target tokens per second of training after the first --log-interval updates, from fairseq-train's
               own train_inner log lines (tokens of an interval / its wps = the interval's time; data loading,
               collation, forward/backward/step and logging all included; start-up and the first interval not)
  process      wall-clock time of the whole fairseq-train process, launch to exit (start-up included)
  steady CPU   CPU seconds of the process and its data-loader workers from the first train_inner line to the
               end, per token: the steady part again, in CPU time, which other processes on a busy machine disturb
               far less than wall-clock (read from /proc when that line appears; not a GPU speed)

and prints, per mode, the ratio to vanilla of the same round (speed XL / speed vanilla: below 1 = slower), as a
median and [min..max] over the rounds, beside the in-process ratio of speed_xl_vs_vanilla.py (same model size,
threads and device; --inprocess-updates 0 leaves it out).  `none` is transformer_xlpos with the vanilla model
(--task translation_xlpos, XL positions loaded and collated, not used): its ratio is the cost of the data path
alone.

Data: real XL positions of Tanaka Ja->En (../shared/data/enja) made by the project's pipeline
(benchmarks/bleu.py's steps: eflomal alignment, BTG reorderer, sentencepiece 8k, xlpos-prep positions + binarize),
cached in --work; or any data-bin with .xlpos files (--data-bin, --source-lang, --target-lang).

    taskset -c 1 python benchmarks/train_throughput.py --size small --max-update 60 --rounds 2     # a quick look
    taskset -c 1 python benchmarks/train_throughput.py --size tiny --max-update 400 --rounds 6     # quiet machine
    python benchmarks/train_throughput.py --size base --fp16 --max-update 300 --rounds 3            # on a GPU
    python benchmarks/train_throughput.py --paired 0,1 --size tiny --max-update 300 --rounds 6     # 2 idle cores
    python benchmarks/train_throughput.py --profile input:gated --size tiny --max-update 200       # where time goes
    python benchmarks/train_throughput.py --pool run1.json run2.json run3.json                    # runs pooled

--pool reads the --json records of earlier runs and pools every round's ratio of each mode: on a machine whose
identical runs scatter by several percent, one run's median cannot read a 2-point difference, but the geometric
mean of many rounds, with a bootstrap interval, can narrow it (pool runs of the same model size and options).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))
from process_tree import tree_cpu_seconds  # noqa: E402

MODES = ("vanilla", "none", "input:tanh", "input:gated", "input:sum", "head", "rope")

# Model sizes.  small = benchmarks/bleu.py's configuration; base = Transformer base (Vaswani et al.), what the
# GPU check measures; tiny = a model so cheap that Python-side costs weigh most, as they do on a fast GPU.
SIZES = {
    "tiny": dict(layers=1, embed_dim=64, ffn_dim=128, heads=4, max_tokens=1024),
    "small": dict(layers=3, embed_dim=256, ffn_dim=512, heads=4, max_tokens=4096),
    "base": dict(layers=6, embed_dim=512, ffn_dim=2048, heads=8, max_tokens=4096),
}


def mode_args(mode: str) -> list[str]:
    """fairseq task/model arguments of a mode.  --user-dir for vanilla too: the plugin's checkpoint-loading fix
    is imported either way, so the two processes import the same code."""
    user_dir = ["--user-dir", str(REPO / "xlpos")]
    if mode == "vanilla":
        return user_dir + ["--task", "translation", "--arch", "transformer"]
    integration, _, fusion = mode.partition(":")
    xl = user_dir + ["--task", "translation_xlpos", "--arch", "transformer_xlpos", "--xl-integration", integration]
    return xl + (["--xl-fusion", fusion] if fusion else [])


def inprocess_mode(mode: str) -> str:
    """speed_xl_vs_vanilla.py's name of a mode (integration:fusion; its default fusion is sum)."""
    return mode if ":" in mode else f"{mode}:sum"


@dataclass
class RunResult:
    mode: str
    round: int
    process_seconds: float
    cpu_seconds: float
    updates: int
    steady_tokens: float
    steady_seconds: float
    log: str
    steady_cpu_seconds: float = float("nan")
    pair: str = ""  # --paired: the XL mode of the pair this run belongs to (both runs of a pair carry it)

    @property
    def steady_wps(self) -> float:
        return self.steady_tokens / self.steady_seconds if self.steady_seconds > 0 else float("nan")

    @property
    def steady_cpu_wps(self) -> float:
        return self.steady_tokens / self.steady_cpu_seconds if self.steady_cpu_seconds > 0 else float("nan")


def parse_inner(lines: list[str]) -> list[dict]:
    """fairseq-train's train_inner JSON records (--log-format json)."""
    out = []
    for line in lines:
        if " | train_inner | " in line:
            try:
                out.append(json.loads(line.split(" | train_inner | ", 1)[1]))
            except json.JSONDecodeError:
                pass
    return out


def steady_figures(records: list[dict]) -> tuple[float, float, int]:
    """(tokens, seconds, updates) of the logged intervals after the first.  An interval's tokens are wpb x its
    updates and its time tokens / wps (wps is fairseq's per-interval speed; ups is rounded to 0.01 and too coarse
    at CPU speeds).  The first interval carries the warm-up (allocator, first CUDA kernels) and is left out."""
    tokens = seconds = 0.0
    updates = 0
    previous = int(records[0]["num_updates"]) if records else 0
    for record in records[1:]:
        n = int(record["num_updates"]) - previous
        previous = int(record["num_updates"])
        interval_tokens = float(record["wpb"]) * n
        tokens += interval_tokens
        seconds += interval_tokens / float(record["wps"])
        updates += n
    return tokens, seconds, updates


def fairseq_command(opts: argparse.Namespace, mode: str, save_dir: Path, num_workers: int) -> list[str]:
    size = SIZES[opts.size]
    max_tokens = opts.max_tokens or size["max_tokens"]
    cmd = [sys.executable, "-m", "fairseq_cli.train", str(opts.data_bin), *mode_args(mode),
           "--source-lang", opts.source_lang, "--target-lang", opts.target_lang,
           "--share-all-embeddings",
           "--encoder-layers", str(size["layers"]), "--decoder-layers", str(size["layers"]),
           "--encoder-embed-dim", str(size["embed_dim"]), "--decoder-embed-dim", str(size["embed_dim"]),
           "--encoder-ffn-embed-dim", str(size["ffn_dim"]), "--decoder-ffn-embed-dim", str(size["ffn_dim"]),
           "--encoder-attention-heads", str(size["heads"]), "--decoder-attention-heads", str(size["heads"]),
           "--dropout", "0.1", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "5e-4",
           "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "100",
           "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
           "--max-tokens", str(max_tokens), "--max-update", str(opts.max_update), "--seed", str(opts.seed),
           "--required-batch-size-multiple", "1", "--num-workers", str(num_workers),
           # nothing but training: no validation, no checkpoint writing (both cost every mode the same)
           "--disable-validation", "--no-save", "--save-dir", str(save_dir),
           "--log-format", "json", "--log-interval", str(opts.log_interval), "--no-progress-bar"]
    if opts.device == "cpu":
        cmd.append("--cpu")
    if opts.fp16:
        cmd.append("--fp16")
    if opts.bf16:
        cmd.append("--bf16")
    return cmd + opts.extra


def child_env(opts: argparse.Namespace) -> dict:
    env = dict(os.environ)
    if opts.threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(opts.threads)
    env["PYTHONWARNINGS"] = "ignore"
    return env


def run_once(opts: argparse.Namespace, mode: str, round_index: int, log_dir: Path, core: int | None = None,
             pair: str = "") -> RunResult:
    """One fairseq-train run of `mode`; on CPU core `core` alone (its data-loader workers too) when given."""
    suffix = f".pair-{pair.replace(':', '-')}" if pair else ""
    log_path = log_dir / f"{mode.replace(':', '-')}.round{round_index}{suffix}.log"
    pin = None if core is None else (lambda: os.sched_setaffinity(0, {core}))
    with tempfile.TemporaryDirectory(prefix="xlpos-throughput-") as save_dir:
        cmd = fairseq_command(opts, mode, Path(save_dir), opts.num_workers)
        start = time.perf_counter()
        cpu_at_first_log = None
        with open(log_path, "w", encoding="utf-8") as log:
            log.write("$ " + shlex.join(cmd) + "\n")
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=child_env(opts),
                                    cwd=REPO, text=True, errors="replace", preexec_fn=pin)
            for line in proc.stdout:
                log.write(line)
                if cpu_at_first_log is None and " | train_inner | " in line:
                    cpu_at_first_log = tree_cpu_seconds(proc.pid)
            # this child's own resource use (with the workers it reaped), not that of all children: under --paired
            # two runs end side by side
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
    text = log_path.read_text(encoding="utf-8", errors="replace")
    if proc.returncode != 0:
        sys.stderr.write("".join(text.splitlines(True)[-30:]))
        raise SystemExit(f"fairseq-train ({mode}) exited {proc.returncode}; log: {log_path}")
    records = parse_inner(text.splitlines())
    if len(records) < 2:
        raise SystemExit(f"{log_path}: {len(records)} train_inner lines; give --max-update at least twice "
                         f"--log-interval ({opts.log_interval})")
    tokens, seconds, _ = steady_figures(records)
    cpu = usage.ru_utime + usage.ru_stime
    steady_cpu = cpu - cpu_at_first_log if cpu_at_first_log is not None else float("nan")
    return RunResult(mode, round_index, wall, cpu, int(records[-1]["num_updates"]), tokens, seconds, str(log_path),
                     steady_cpu, pair)


def run_pair(opts: argparse.Namespace, mode: str, round_index: int, log_dir: Path,
             cores: tuple[int, int]) -> tuple[RunResult, RunResult]:
    """vanilla on cores[0] and `mode` on cores[1], at the same time: whatever state the machine is in (load,
    clock, caches), both runs meet it."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        base = pool.submit(run_once, opts, "vanilla", round_index, log_dir, cores[0], mode)
        own = pool.submit(run_once, opts, mode, round_index, log_dir, cores[1], mode)
        return base.result(), own.result()


def ratio_summary(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.3f} [{min(values):.3f}..{max(values):.3f}]"


def pooled_ratios(paths: list[Path], key: str = "ratio_steady_wps") -> dict[str, list[float]]:
    """Every round's ratio to vanilla of each XL mode, from the --json records of earlier runs."""
    pooled: dict[str, list[float]] = {}
    for path in paths:
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))["summary"]
            for mode, figures in summary.items():
                if mode != "vanilla":
                    pooled.setdefault(mode, []).extend(float(r) for r in figures[key])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"{path}: not a train_throughput.py --json record ({type(e).__name__}: {e})")
    return pooled


def geometric_mean_interval(ratios: list[float], samples: int = 10000, seed: int = 1) -> tuple[float, float, float]:
    """Geometric mean of the ratios and its 95% percentile-bootstrap interval (rounds resampled with replacement)."""
    logs = [math.log(r) for r in ratios]
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(logs, k=len(logs))) for _ in range(samples))
    low, high = means[int(0.025 * samples)], means[int(0.975 * samples) - 1]
    return math.exp(statistics.fmean(logs)), math.exp(low), math.exp(high)


def print_pooled(paths: list[Path]) -> int:
    pooled = pooled_ratios(paths)
    print(f"steady wps, XL / vanilla of the same round (below 1: slower), every round of {len(paths)} runs pooled")
    print(f"{'mode':<12} {'rounds':>6}  {'geometric mean [95% bootstrap]':>30}  {'median [min..max]':>24}")
    for mode, ratios in pooled.items():
        mean, low, high = geometric_mean_interval(ratios)
        print(f"{mode:<12} {len(ratios):>6}  {f'{mean:.3f} [{low:.3f}..{high:.3f}]':>30}  {ratio_summary(ratios):>24}")
    return 0


def summarize(results: list[RunResult], modes: list[str]) -> dict:
    """Per mode: its own figures and its ratio to vanilla of the same round (under --paired: of the same pair), as
    speeds (XL / vanilla)."""
    by = {(r.mode, r.round, r.pair): r for r in results}
    out = {}
    for mode in modes:
        own = [r for r in results if r.mode == mode]
        base = [by[("vanilla", r.round, r.pair)] for r in own]
        out[mode] = {
            "steady_wps": [round(r.steady_wps, 1) for r in own],
            "process_seconds": [round(r.process_seconds, 2) for r in own],
            "cpu_seconds": [round(r.cpu_seconds, 2) for r in own],
            "updates": [r.updates for r in own],
            "ratio_steady_wps": [r.steady_wps / b.steady_wps for r, b in zip(own, base)],
            "ratio_process": [b.process_seconds / r.process_seconds for r, b in zip(own, base)],
            "ratio_cpu": [b.cpu_seconds / r.cpu_seconds for r, b in zip(own, base)],
            "ratio_steady_cpu": [r.steady_cpu_wps / b.steady_cpu_wps for r, b in zip(own, base)],
        }
    return out


def inprocess_ratios(opts: argparse.Namespace, modes: list[str]) -> dict[str, list[float]]:
    """speed_xl_vs_vanilla.py on the same model size, threads and device: mode -> per-round wall wps ratios."""
    import speed_xl_vs_vanilla as speed

    size = SIZES[opts.size]
    xl_modes = [m for m in modes if m != "vanilla"]
    argv = ["--data", str(opts.inprocess_data or Path(opts.data) / "enja"), "--lines", str(opts.inprocess_lines), "--updates", str(opts.inprocess_updates),
            "--rounds", str(opts.inprocess_rounds), "--modes", ",".join(inprocess_mode(m) for m in xl_modes),
            "--embed-dim", str(size["embed_dim"]), "--ffn-dim", str(size["ffn_dim"]), "--layers", str(size["layers"]),
            "--heads", str(size["heads"]), "--max-tokens", str(opts.max_tokens or size["max_tokens"]),
            "--threads", str(opts.threads or 0), "--device", opts.device, "--seed", str(opts.seed)]
    if opts.fp16:
        argv.append("--fp16")
    if opts.bf16:
        argv.append("--bf16")
    print(f"in-process: python benchmarks/speed_xl_vs_vanilla.py {shlex.join(argv)}", flush=True)
    wps = speed.measure(speed.build_parser().parse_args(argv))
    vanilla = wps["vanilla"]
    return {m: [v[0] / b[0] for v, b in zip(wps[inprocess_mode(m)], vanilla)] for m in xl_modes}


def prepare_data(opts: argparse.Namespace) -> None:
    """Tanaka Ja->En with real XL positions, made (once, cached in --work) by benchmarks/bleu.py's pipeline."""
    import bleu

    args = bleu.build_parser().parse_args(["--work", str(opts.work), "--data", str(opts.data),
                                           "--train-lines", str(opts.train_lines),
                                           "--workers", str(opts.workers), "--jackknife", str(opts.jackknife)])
    pair = bleu.prepare_pair(bleu.PAIRS["ja-en"], args, [])
    opts.data_bin, opts.source_lang, opts.target_lang = pair.data_bin, "ja", "en"


# Runs fairseq-train's main module under cProfile timed by the process's CPU clock: on a shared machine wall-clock
# profiles mostly measure the other processes.
PROFILE_RUNNER = """
import cProfile, runpy, sys, time
out = sys.argv.pop(1)
sys.argv[0] = "fairseq-train"
profiler = cProfile.Profile(time.process_time)
profiler.enable()
try:
    runpy.run_module("fairseq_cli.train", run_name="__main__", alter_sys=True)
finally:
    profiler.disable()
    profiler.dump_stats(out)
"""

PROFILE_FILTER = r"xlpos|data_utils|language_pair_dataset|iterators|collat|getitem|indexed_dataset|train_step|_forward_xl|forward_scriptable|trainer.py.*(train_step|_prepare_sample)|task_step"


def profile(opts: argparse.Namespace, mode: str) -> int:
    """One fairseq-train run under cProfile (CPU time), data loading in the main thread (--num-workers 0
    --data-buffer-size 0) so that the profile sees collation too; prints the functions with the most own time, then the data path, task and
    model functions by cumulative time."""
    import pstats

    out = Path(opts.profile_out or (Path(opts.work) / f"profile-{mode.replace(':', '-')}.prof"))
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="xlpos-throughput-") as save_dir:
        # --data-buffer-size 0: fairseq otherwise collates in a background thread, which cProfile does not see
        cmd = fairseq_command(opts, mode, Path(save_dir), 0) + ["--data-buffer-size", "0"]
        cmd = [cmd[0], "-c", PROFILE_RUNNER, str(out), *cmd[3:]]
        print("$ " + shlex.join(cmd), flush=True)
        proc = subprocess.run(cmd, env=child_env(opts), cwd=REPO, stdout=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise SystemExit(f"profiled fairseq-train exited {proc.returncode}")
    stats = pstats.Stats(str(out))
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(PROFILE_FILTER, 40)
    print(f"profile: {out} (python -m pstats {out})")
    return 0


def core_pair(text: str) -> tuple[int, int]:
    try:
        a, b = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--paired wants two CPU cores A,B, e.g. 0,1, not {text!r}") from None
    usable = os.sched_getaffinity(0)
    if a == b or not {a, b} <= usable:
        raise argparse.ArgumentTypeError(f"--paired wants two different cores of {sorted(usable)}, not {text!r}")
    return a, b


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default=",".join(MODES),
                   help="comma-separated; vanilla is always run (the baseline). XL modes: integration[:fusion], "
                        "integration one of none, input, head, rope (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=4, help="alternating rounds (default 4)")
    p.add_argument("--paired", type=core_pair, metavar="A,B",
                   help="run vanilla and each XL mode at the same time, one on CPU core A and one on core B (the "
                        "cores swapped from one pair to the next), each ratio from its own pair: on a machine whose "
                        "speed drifts between runs, both runs of a pair meet the same state")
    p.add_argument("--max-update", type=int, default=200, help="updates per fairseq-train run (default 200)")
    p.add_argument("--log-interval", type=int, default=20,
                   help="fairseq-train --log-interval; the first interval is left out of the steady figure")
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--max-tokens", type=int, default=0, help="default: the size's (tiny 1024, others 4096)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when available")
    p.add_argument("--fp16", action="store_true", help="fairseq-train --fp16 (GPU)")
    p.add_argument("--bf16", action="store_true", help="fairseq-train --bf16 (GPU)")
    p.add_argument("--threads", type=int, default=1,
                   help="OMP/MKL threads of each run (default 1; 0: torch's default). The runs are sequential")
    p.add_argument("--num-workers", type=int, default=1, help="fairseq-train --num-workers (default 1, fairseq's)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data-bin", type=Path, help="a data-bin with .xlpos files (default: Tanaka, prepared in --work)")
    p.add_argument("--source-lang", default="ja")
    p.add_argument("--target-lang", default="en")
    p.add_argument("--work", type=Path, default=REPO / "work" / "bench", help="cache of the prepared data and logs")
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data", help="directory holding enja/")
    p.add_argument("--train-lines", type=int, default=0, help="prepare only the first N training lines (0: all)")
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)), help="data preparation processes")
    p.add_argument("--jackknife", type=int, default=1,
                   help="the pipeline's --jackknife (default 1: how the training positions were made does not change "
                        "what reading them costs)")
    p.add_argument("--inprocess-updates", type=int, default=10,
                   help="updates per round of the in-process measurement (0: leave it out)")
    p.add_argument("--inprocess-rounds", type=int, default=3)
    p.add_argument("--inprocess-lines", type=int, default=2000)
    p.add_argument("--inprocess-data", type=Path,
                   help="folder with word-level train.en and train.ja for the in-process run (default: --data/enja)")
    p.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    p.add_argument("--profile", metavar="MODE", help="instead of the benchmark: profile one run of MODE")
    p.add_argument("--pool", type=Path, nargs="+", metavar="JSON",
                   help="instead of the benchmark: pool the rounds of earlier runs' --json records per mode")
    p.add_argument("--profile-out", help="where the .prof file goes (default: --work/profile-MODE.prof)")
    p.add_argument("extra", nargs=argparse.REMAINDER,
                   help="after '--': further fairseq-train arguments for every run")
    return p


def main(argv: list[str] | None = None) -> int:
    opts = build_parser().parse_args(argv)
    if opts.pool:
        return print_pooled(opts.pool)
    if opts.extra and opts.extra[0] == "--":
        opts.extra = opts.extra[1:]
    if opts.device is None:
        import torch
        opts.device = "cuda" if torch.cuda.is_available() else "cpu"
    if (opts.fp16 or opts.bf16) and opts.device != "cuda":
        raise SystemExit("--fp16/--bf16 need --device cuda (fairseq's half-precision training is GPU-only)")
    if opts.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    modes = ["vanilla"] + [m for m in opts.modes.split(",") if m and m != "vanilla"]
    from xlpos.models.transformer_xlpos import XL_FUSIONS, XL_INTEGRATIONS  # the plugin's own lists
    for mode in modes[1:]:
        integration, _, fusion = mode.partition(":")
        if integration not in XL_INTEGRATIONS or fusion not in ("", *XL_FUSIONS):
            raise SystemExit(f"unknown mode {mode!r}; modes are integration[:fusion], e.g. input:gated, rope")
    if opts.data_bin is None:
        prepare_data(opts)
    if opts.profile:
        return profile(opts, opts.profile)

    log_dir = Path(opts.work) / "throughput-logs" / time.strftime("%Y%m%d-%H%M%S")
    log_dir.mkdir(parents=True, exist_ok=True)
    size = SIZES[opts.size]
    print(f"fairseq-train end to end: data-bin {opts.data_bin} ({opts.source_lang}->{opts.target_lang}); "
          f"{opts.size} model ({size['layers']}+{size['layers']} layers, dim {size['embed_dim']}, ffn "
          f"{size['ffn_dim']}, heads {size['heads']}), --max-tokens {opts.max_tokens or size['max_tokens']}, "
          f"{opts.max_update} updates per run, log interval {opts.log_interval}, device {opts.device}"
          f"{' fp16' if opts.fp16 else ''}{' bf16' if opts.bf16 else ''}, threads {opts.threads or 'default'}, "
          f"num-workers {opts.num_workers}, {opts.rounds} rounds of {len(modes)} modes; logs {log_dir}", flush=True)
    results: list[RunResult] = []

    def show(k: int, r: RunResult) -> None:
        results.append(r)
        where = f" (pair {r.pair})" if r.pair and r.mode == "vanilla" else ""
        print(f"round {k + 1} {r.mode:<12} steady {r.steady_wps:9.1f} wps, {r.steady_cpu_wps:9.1f} tokens/CPU-s  "
              f"process {r.process_seconds:7.2f} s, CPU {r.cpu_seconds:7.2f} s  ({r.updates} updates){where}",
              flush=True)

    for k in range(opts.rounds):
        if opts.paired:
            for i, mode in enumerate(modes[1:]):
                cores = opts.paired if (k + i) % 2 == 0 else opts.paired[::-1]  # each mode meets both cores
                for r in run_pair(opts, mode, k, log_dir, cores):
                    show(k, r)
            continue
        order = modes[k % len(modes):] + modes[: k % len(modes)]  # rotate the starting mode every round
        for mode in order:
            show(k, run_once(opts, mode, k, log_dir))

    summary = summarize(results, modes)
    inprocess = inprocess_ratios(opts, modes) if opts.inprocess_updates > 0 else {}
    columns = (("ratio_steady_wps", "ratio steady wps"), ("ratio_steady_cpu", "ratio steady CPU"),
               ("ratio_process", "ratio process time"))
    header = (f"{'mode':<12} {'steady wps':>10}  " + "  ".join(f"{name:>22}" for _, name in columns)
              + f"  {'in-process (wall)':>22}")
    print(f"\nspeed XL / vanilla per round (below 1: slower), median [min..max] over {opts.rounds} rounds; "
          "steady wps: median of the mode's own runs")
    print(header)
    print("-" * len(header))
    for mode in modes:
        s = summary[mode]
        cells = [f"{'(baseline)':>22}" if mode == "vanilla" else f"{ratio_summary(s[key]):>22}" for key, _ in columns]
        print(f"{mode:<12} {statistics.median(s['steady_wps']):>10.1f}  " + "  ".join(cells)
              + f"  {ratio_summary(inprocess.get(mode, [])):>22}")
    if opts.json:
        opts.json.parent.mkdir(parents=True, exist_ok=True)
        record = {"command": shlex.join([sys.executable, *sys.argv]), "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                  "options": {k: str(v) for k, v in vars(opts).items()}, "summary": summary,
                  "inprocess_ratio_wall_wps": inprocess,
                  "runs": [{**r.__dict__, "steady_wps": r.steady_wps, "steady_cpu_wps": r.steady_cpu_wps}
                           for r in results]}
        opts.json.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        print(f"figures: {opts.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
