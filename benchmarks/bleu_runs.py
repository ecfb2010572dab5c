"""The BLEU benchmark's runs (benchmarks/bleu.py): its one training configuration, a system trained with one seed on
a prepared pair and decoded on each evaluation set (through the package's systems and decoding, as the recipes
train and decode), the attention alignments of a trained model, and several runs at once. A run's directory
(PAIR/DATA_TAG/runs/CONFIG_TAG/SYSTEM.seedN) and its JSON files are what campaigns and their records rely on.
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
import re
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable

from xlpos_prep.io import log, read_json, read_lines, step_done, write_json, write_lines
from xlpos_prep.pipeline import Steps, run_logged
from xlpos_prep.systems import parse_system, task_args, train_command
from xlpos_prep.text import Detokenizer
from xlpos_prep.train_options import TrainOptions
from xlpos_prep.translate import generate, hypothesis_words

import run_records
from bleu_corpus import REPO, EvalSet, PairSpec, PreparedPair, attention_reference, score_translations
from run_records import CURVE_DIR, machine_info


# glibc malloc kept from handing large blocks back to the kernel between batches (inherited by every child). CPU
# fairseq-train otherwise spends a quarter of its CPU time in the kernel, re-faulting freed memory: measured on
# Tanaka Ja-En, 2+2 layers, width 128, 60 updates, one thread, two runs each in alternating order, 2026-12-03:
# user + system CPU 46.5 + 13.3 s and 54.0 + 15.1 s without, 44.8 + 1.2 s and 47.1 + 1.1 s with.
GLIBC_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(2**30), "MALLOC_TRIM_THRESHOLD_": str(2**32),
                    "MALLOC_TOP_PAD_": str(2**28)}


@dataclass(frozen=True)
class TrainConfig:
    """The one model and training configuration every system shares (only the encoder's XL part differs)."""
    encoder_layers: int = 3
    decoder_layers: int = 3
    embed_dim: int = 256
    ffn_dim: int = 512
    heads: int = 4
    dropout: float = 0.1
    lr: float = 1e-3
    warmup_updates: int = 0       # 0: max_update // 5, at most 4000
    max_tokens: int = 4096
    max_update: int = 800
    weight_decay: float = 0.0001
    label_smoothing: float = 0.1
    beam: int = 5
    lenpen: float = 1.0

    @property
    def warmup(self) -> int:
        return self.warmup_updates or max(1, min(4000, self.max_update // 5))

    def tag(self) -> str:
        """Directory name of the runs made with this configuration: readable budget + hash of the rest."""
        digest = hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:8]
        return f"u{self.max_update}-{digest}"

    def options(self) -> TrainOptions:
        """Its training options, in the one form `xlpos-prep train` and the recipes use."""
        return TrainOptions(lr=self.lr, warmup_updates=self.warmup, dropout=self.dropout,
                            weight_decay=self.weight_decay, label_smoothing=self.label_smoothing,
                            max_tokens=self.max_tokens, max_update=self.max_update)

    def fairseq_args(self) -> list[str]:
        return self.options().fairseq_args(model=[
            "--encoder-layers", str(self.encoder_layers), "--decoder-layers", str(self.decoder_layers),
            "--encoder-embed-dim", str(self.embed_dim), "--decoder-embed-dim", str(self.embed_dim),
            "--encoder-ffn-embed-dim", str(self.ffn_dim), "--decoder-ffn-embed-dim", str(self.ffn_dim),
            "--encoder-attention-heads", str(self.heads), "--decoder-attention-heads", str(self.heads)])


def device_args() -> list[str]:
    import torch
    return [] if torch.cuda.is_available() else ["--cpu"]


def parse_train_log(path: Path) -> dict:
    """Figures of fairseq-train's JSON log: parameters, last training stats, steady-state updates/s."""
    params = trained = None
    inner, epochs = [], []
    for line in read_lines(str(path)):
        m = re.search(r"num\. shared model params: ([\d,]+) \(num\. trained: ([\d,]+)\)", line)
        if m:
            params, trained = (int(x.replace(",", "")) for x in m.groups())
        for tag, sink in ((" | train_inner | ", inner), (" | train | ", epochs)):
            if tag in line:
                try:
                    sink.append(json.loads(line.split(tag, 1)[1]))
                except json.JSONDecodeError:
                    pass
    out: dict = {"params": params, "trained_params": trained}
    if epochs:
        # end-of-epoch stats carry a "train_" prefix: train_loss, train_nll_loss, train_num_updates, ...
        last = epochs[-1]
        out.update({"epochs": int(last.get("epoch", 0)), "final_epoch_loss": float(last["train_loss"]),
                    "final_epoch_nll_loss": float(last["train_nll_loss"]),
                    "updates": int(last["train_num_updates"])})
    if inner:
        out["last_logged_loss"] = float(inner[-1]["loss"])
    if len(inner) >= 2:
        # between the first and last logged intervals: no start-up, checkpoint saving mostly excluded
        du = int(inner[-1]["num_updates"]) - int(inner[0]["num_updates"])
        dt = float(inner[-1]["wall"]) - float(inner[0]["wall"])
        if du > 0 and dt > 0:
            out["steady_updates_per_s"] = round(du / dt, 3)
        out["words_per_batch"] = float(inner[-1]["wpb"])
    return out


@functools.lru_cache(maxsize=None)
def code_version() -> str:
    """The checkout's commit ('+modified' when tracked files differ from it): which code made a record. Read once
    per process (bleu.py reads it as it starts): a run trains for an hour, and a commit made meanwhile is not the
    code it runs."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + ("+modified" if dirty else "")


def train_system(pair: PreparedPair, system: str, seed: int, cfg: TrainConfig, args: argparse.Namespace) -> dict:
    run_dir = pair.root / "runs" / cfg.tag() / f"{system}.seed{seed}"
    meta_path = run_dir / "train.json"
    if meta_path.exists():
        log(f"skip training {pair.spec.name} {system} seed {seed}: {meta_path} exists")
        return read_json(meta_path)
    spec = parse_system(system)
    data_bin = pair.oracle_data_bin if spec.oracle else pair.data_bin
    write_json(run_dir / "config.json", asdict(cfg))
    resumed = (run_dir / "checkpoint_last.pt").exists()
    # the recipes' fairseq-train of a system (xlpos_prep.systems), with this benchmark's one configuration
    # --save-interval-updates only saves checkpoints (validation stays off): the training is the same
    curve = ["--save-interval-updates", str(args.curve_every)] if args.curve_every else []
    cmd = train_command(data_bin, spec, pair.spec.src, pair.spec.tgt, run_dir, [
        *cfg.fairseq_args(), "--seed", str(seed), "--no-epoch-checkpoints", "--disable-validation", "--log-format",
        "json", "--log-interval", str(args.log_interval), "--no-progress-bar", *curve, *device_args()])
    log(f"train {pair.spec.name} {system} seed {seed} ({cfg.max_update} updates)")
    cpu: list[float] = []
    t0 = time.perf_counter()
    run_logged(cmd, run_dir / "train.log", cpu_seconds=cpu)
    seconds = time.perf_counter() - t0
    stats = parse_train_log(run_dir / "train.log")
    # CPU seconds: this run's own work, whatever else the machine ran (wall seconds grow with the load)
    meta = {"seconds": round(seconds, 1), "cpu_seconds": round(cpu[0], 1), "resumed_from_checkpoint": resumed,
            **stats,
            "updates_per_s": round(stats.get("updates", cfg.max_update) / seconds, 3),
            "command": shlex.join(map(str, cmd)), "code": code_version()}  # the record's own code may be later
    write_json(meta_path, meta)
    return meta


def evaluate_system(pair: PreparedPair, system: str, seed: int, cfg: TrainConfig, eval_set: EvalSet,
                    args: argparse.Namespace) -> dict:
    run_dir = pair.root / "runs" / cfg.tag() / f"{system}.seed{seed}"
    key = eval_set.name.replace(":", "_")
    score_path = run_dir / "scores" / f"{key}.json"
    if score_path.exists():
        return read_json(score_path)
    hyps, scores = decode_and_score(pair, system, seed, cfg, eval_set, args, run_dir / "checkpoint_last.pt",
                                    run_dir / "gen" / f"{key}.txt")
    write_lines(run_dir / "hyp" / f"{key}.txt", hyps)
    write_json(score_path, scores)
    log(f"{pair.spec.name} {system} seed {seed} {eval_set.name}: BLEU {scores['bleu']} chrF {scores['chrf']}"
        + (f" RIBES {scores['ribes']}" if "ribes" in scores else ""))
    return scores


def decode_and_score(pair: PreparedPair, system: str, seed: int, cfg: TrainConfig, eval_set: EvalSet,
                     args: argparse.Namespace, checkpoint: Path, gen: Path) -> tuple[list[str], dict]:
    """(detokenized hypotheses, scores) of one checkpoint on one evaluation set; fairseq-generate's output `gen` is
    kept, so that scoring again decodes nothing."""
    spec = parse_system(system)
    data_bin = eval_set.data_bin
    if spec.oracle:
        if eval_set.name != "valid":
            raise ValueError("oracle systems are evaluated on valid only")
        data_bin = pair.oracle_data_bin
    seconds = None
    if not step_done([gen]) and not gen.exists():  # (written atomically: runs before the markers left none)
        fairseq_args = (*task_args(spec), "--beam", str(cfg.beam), "--lenpen", str(cfg.lenpen), "--max-len-a", "2",
                        "--max-len-b", "10", "--max-tokens", str(args.gen_max_tokens), "--seed", str(seed),
                        *eval_set.generate_args, *device_args())
        seconds = Steps().step(f"generate {gen.stem}", [gen], lambda: generate(
            gen, checkpoint.parent / "generate.log", data_bin, checkpoint, pair.spec.src, pair.spec.tgt,
            eval_set.subset, fairseq_args))
    # the recipes' decoding (xlpos-prep translate): best hypotheses in input order -> sentencepiece-decoded words
    _, words = hypothesis_words(gen, len(eval_set.refs), str(pair.root / "spm" / "spm.model"))
    detok = Detokenizer("none" if pair.spec.pretokenized else "moses", pair.spec.tgt)
    hyps = [detok(" ".join(w.split())) for w in words]
    ribes = ([w.split() for w in words], eval_set.ref_tokens) if pair.spec.ribes else None
    scores = score_translations(hyps, eval_set.refs, pair.spec.bleu_tokenize, ribes, eval_set.buckets)
    scores["generate_seconds"] = round(seconds, 1) if seconds is not None else None
    return hyps, scores


INTERVAL_CHECKPOINT = re.compile(r"^checkpoint_\d+_(?P<updates>\d+)\.pt$")  # fairseq's --save-interval-updates


def curve_checkpoints(run_dir: Path, every: int, final_updates: int) -> dict[int, Path]:
    """Update count -> checkpoint of the points of a run's dev curve: the checkpoints fairseq-train saved every
    `every` updates (--save-interval-updates), and the final one (checkpoint_last.pt) at `final_updates`."""
    points = {}
    for path in run_dir.glob("checkpoint_*_*.pt"):
        m = INTERVAL_CHECKPOINT.match(path.name)
        if m and int(m["updates"]) % every == 0 and int(m["updates"]) < final_updates:
            points[int(m["updates"])] = path
    if (run_dir / "checkpoint_last.pt").exists():
        points[final_updates] = run_dir / "checkpoint_last.pt"
    return dict(sorted(points.items()))


def dev_curve(pair: PreparedPair, system: str, seed: int, cfg: TrainConfig, args: argparse.Namespace,
              final_updates: int) -> list[dict]:
    """Dev BLEU and chrF of a run every --curve-every updates ({"updates": U, "bleu": .., "chrf": ..} in order of
    U), from the checkpoints it saved as it trained; the final point is the run's own valid score. Each point is
    written to RUN/curve/valid.uU.json (the record keeps them) and is skipped when there."""
    run_dir = pair.root / "runs" / cfg.tag() / f"{system}.seed{seed}"
    eval_set = pair.eval_sets["valid"]
    points = curve_checkpoints(run_dir, args.curve_every, final_updates)
    if len(points) <= 1 and not list((run_dir / CURVE_DIR).glob("valid.u*.json")):
        log(f"{pair.spec.name} {system} seed {seed}: no checkpoint every {args.curve_every} updates (trained "
            f"without --curve-every?): its dev curve is its final score only")
    for updates, checkpoint in points.items():
        path = run_dir / CURVE_DIR / f"valid.u{updates}.json"
        if path.exists():
            continue
        if updates == final_updates:
            scores = evaluate_system(pair, system, seed, cfg, eval_set, args)
        else:
            _, scores = decode_and_score(pair, system, seed, cfg, eval_set, args, checkpoint,
                                         run_dir / "gen" / CURVE_DIR / f"valid.u{updates}.txt")
            log(f"{pair.spec.name} {system} seed {seed} valid after {updates} updates: BLEU {scores['bleu']}")
        write_json(path, {"updates": updates, "bleu": scores["bleu"], "chrf": scores["chrf"]})
    return curve_points(read_json(p) for p in (run_dir / CURVE_DIR).glob("valid.u*.json"))


def curve_points(points: Iterable[dict]) -> list[dict]:
    """The points of a dev curve (the contents of its files), in order of updates."""
    return sorted(points, key=lambda point: point["updates"])


def train_and_evaluate(pair: PreparedPair, system: str, seed: int, cfg: TrainConfig,
                       args: argparse.Namespace) -> dict | None:
    """Train one system with one seed, then score it on every evaluation set (oracle systems: valid only).
    With --no-train, None for a run whose training has not finished."""
    run_dir = pair.root / "runs" / cfg.tag() / f"{system}.seed{seed}"
    key = run_records.RunKey(pair.spec.name, system, seed)
    if args.records and not (run_dir / "train.json").exists() and run_records.has_record(args.records, key):
        # finished in an earlier session or on another machine: its scores and hypotheses, not its checkpoint
        run_records.import_run(args.records, key, run_dir, cfg.tag())
        log(f"{pair.spec.name} {system} seed {seed}: taken from the record in {args.records}")
    if args.no_train and not (run_dir / "train.json").exists():
        log(f"--no-train: {pair.spec.name} {system} seed {seed} has not been trained; left out")
        return None
    train = train_system(pair, system, seed, cfg, args)
    spec = parse_system(system)
    if spec.oracle:
        names = ["valid"]
    else:  # other positions mean nothing to models that do not read the reorderer's (vanilla, controls)
        names = [n for n, e in pair.eval_sets.items() if spec.reads_reorderer or not e.xl_only]
    checkpoint = (run_dir / "checkpoint_last.pt").exists()
    if args.records and not checkpoint and run_records.has_record(args.records, key):
        # a run from its record: what it was scored on then, nothing new (no checkpoint to decode with)
        unscored = [n for n in names if not (run_dir / "scores" / f"{n.replace(':', '_')}.json").exists()]
        if unscored:
            log(f"{pair.spec.name} {system} seed {seed}: no checkpoint here, so not scored on {', '.join(unscored)}")
        names = [n for n in names if n not in unscored]
    out = {"train": train,
           "eval": {name: evaluate_system(pair, system, seed, cfg, pair.eval_sets[name], args) for name in names}}
    if args.curve_every:
        out["curve"] = dev_curve(pair, system, seed, cfg, args, int(train.get("updates") or cfg.max_update))
    if args.attention_aer and not spec.oracle and (checkpoint or attention_path(run_dir, args).exists()):
        out["attention"] = attention_aer(pair, system, seed, cfg, args)
    if args.records and not run_records.has_record(args.records, key):
        run_records.export_run(run_dir, args.records, key, cfg.tag(), {
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": machine_info(), "code": code_version(),
            "data": pair.info,  # the data replica: sizes, reorderer and its tau, buckets, step times
            "bleu_py_config": {"train_lines": args.train_lines, "test_lines": args.test_lines,
                               "spm_vocab": args.spm_vocab, "reorder_iterations": args.reorder_iterations,
                               "reorder_lines": args.reorder_lines, "reorder_args": args.reorder_args,
                               "jackknife": args.jackknife, "contrast": args.contrast,
                               "contrast_window": args.contrast_window, "contrast_seed": args.contrast_seed}})
        log(f"{pair.spec.name} {system} seed {seed}: recorded in {args.records}")
    return out


def run_threads(keys: list[tuple], work: Callable, jobs: int) -> dict:
    """work(*key) for every key, `jobs` at a time (threads driving child processes); the first failure stops
    the jobs not yet started and is raised once the running ones have ended."""
    if jobs <= 1:
        return {key: work(*key) for key in keys}
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {key: pool.submit(work, *key) for key in keys}
        finished, _ = wait(futures.values(), return_when=FIRST_EXCEPTION)
        failed = [f for f in finished if f.exception() is not None]
        if failed:
            for f in futures.values():
                f.cancel()
            raise failed[0].exception()
        return {key: f.result() for key, f in futures.items()}


def attention_path(run_dir: Path, args: argparse.Namespace) -> Path:
    return run_dir / "attention" / f"test.layer{args.attention_layer}.json"


def attention_entry(spec: PairSpec, record: dict) -> dict:
    return {"gold": attention_reference(spec), "layer": record["layer"], "head": record["head"],
            "scores": record["scores"]}


def attention_aer(pair: PreparedPair, system: str, seed: int, cfg: TrainConfig, args: argparse.Namespace) -> dict:
    """AER of the word alignments in the model's encoder-decoder attention (xlpos/evaluation/align_attention.py,
    force-decoding the references) on test, against the true alignment where the corpus has one (synth), else
    against the eflomal alignment of test: silver, not gold."""
    run_dir = pair.root / "runs" / cfg.tag() / f"{system}.seed{seed}"
    layer = args.attention_layer
    out = attention_path(run_dir, args)
    if not out.exists():
        run_logged([sys.executable, "-m", "xlpos.evaluation.align_attention", pair.data_bin, "--path",
                    run_dir / "checkpoint_last.pt", "--gen-subset", "test", "--layer", str(layer),
                    "--gold", pair.gold_alignment, "--out-prefix", run_dir / "attention" / f"test.layer{layer}",
                    "--json", out, "--max-tokens", str(args.gen_max_tokens)], run_dir / "attention.log")
    return attention_entry(pair.spec, read_json(out))
