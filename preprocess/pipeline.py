"""The data pipeline, once: tokenized parallel splits -> word alignment -> oracle ranks -> BTG reorderer -> orders
of every split -> reordering scores -> joint sentencepiece -> pieces + piece-level XL positions -> fairseq data-bin
with binarized XL positions. The recipes run it as `xlpos-prep prepare`, benchmarks/bleu.py calls `prepare()`;
docs/pipeline.md describes every step, what it reads and writes, and the layout.

Every step runs through `Steps.step`, the one implementation of the completion rule (preprocess/io.py
check_step/start_step/finish_step): a step is skipped only while its outputs are what its inputs and settings made,
as recorded in each output's OUTPUT.done, written after them. So a run killed at any moment and started again gives
what an uninterrupted run gives, and a rerun after an input, a setting or an output changed redoes what they
decide (or stops, naming it, before retraining a model). `xlpos-prep step OUT... -- CMD` applies the same rule to
a recipe's own commands (downloads, corpus preparation). `prepare --global-steps`, `--shard I/N` and `--merge N`
run the same steps over many machines (preprocess/shards.py).

Each step runs its `xlpos-prep` subcommand (the data-bin: `preprocess` and `binarize`) as a child process:
this module never imports fairseq or torch, and a step's log says exactly what was run.

    xlpos-prep prepare --work WORK --src ja --tgt en --workers 2       # WORK/tok/{train,valid,test}.{ja,en}
    xlpos-prep step WORK/tok/train.en --stdout -- head -n 1000 corpus.en
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import functools
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from .io import (SEED, WORKERS, ExternalToolError, InputError, Shard, atomic_output, check_same_length, check_step,
                 command_record, count_lines, declare_files, directory_lock, finish_step, float_option,
                 input_identities, int_option, iter_lines, log, path_identity, run_child, shard_option, start_step,
                 step_done, write_lines)
from .shards import Joiner, ShardFiles, Stage, concatenate, refuse_shard, write_block

SPLITS = ("train", "valid", "test")
# K of the jackknifed training orders (PrepareConfig.jackknife), chosen by measurement: docs/positions.md
JACKKNIFE_FOLDS = 3
# settings a work directory made before they existed was made with (its prepare.json lacks them)
LEGACY_SETTINGS = {"jackknife": 1}
# the training lines whose orders are scored against their oracle ("evaluate train"): enough for a corpus tau
# within about 0.002, without an all-pairs count over millions of lines
TRAIN_EVAL_LINES = 50_000
ATTACH_NULL_BY_SOURCE = {"ja": "left"}  # measured better for Japanese sources (docs/reorderer.md)


def default_attach_null(src: str) -> str:
    """Where the oracle attaches a source word without alignment links: to its left neighbour's target span for
    a Japanese source (head-final: particles follow the word they belong to), else to the right one (lader's
    default). The one place this default is decided."""
    return ATTACH_NULL_BY_SOURCE.get(src, "right")


# ------------------------------------------------------------------------------------------------ steps
class Steps:
    """Runs the steps of one pipeline (or of a recipe's own commands): skips those that completed, marks the ones
    it runs complete after they return, and keeps the wall time of each beside the outputs (times.json), so that
    a resumed run still reports the first run's timings."""

    def __init__(self, times_path: str | os.PathLike | None = None):
        self.path = Path(times_path) if times_path else None
        self.times: dict[str, float] = {}
        if self.path is not None and self.path.exists():
            self.times = json.loads(self.path.read_text(encoding="utf-8"))

    def _save(self) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_output(str(self.path)) as f:
                json.dump(self.times, f, indent=2)
                f.write("\n")

    def step(self, name: str, outputs: Sequence[str | os.PathLike], make: Callable[[], object],
             inputs: Sequence[str | os.PathLike] | None = None, settings: object = None,
             expensive: bool | str = False, ignore: Sequence[str] = (),
             verify: Callable[[], object] | None = None) -> float | None:
        """Run `make` to produce `outputs` from `inputs` with `settings` (JSON: whatever else decides the outputs,
        e.g. the options of the command it runs) unless that step is done (io.check_step); its wall seconds
        (recorded ones when skipped, None when never recorded).

        A step an earlier run completed with other inputs or settings, or whose outputs changed since, is redone,
        saying why; an `expensive` step (a trained model) whose earlier outputs exist stops instead with one line
        naming the difference (`expensive` may be the hint to give; by default: delete or move the output).
        `verify` runs after `make` and raises when the outputs are not what the step must make (an unreadable
        checkpoint). `ignore`: globs of names inside directory outputs that are not part of them (a log)."""
        state = check_step(outputs, inputs, settings, ignore)
        # A time is recorded only once a step completed, so a recorded step of a work directory made before the
        # markers existed is complete too.
        before_markers = (not state.done and state.reason is None and name in self.times
                          and all(os.path.exists(p) for p in outputs))
        where = f"{os.fspath(outputs[0])}{' ...' if len(outputs) > 1 else ''}"
        unrecorded = state.upgrade or before_markers  # done by an older xlpos: what it made is recorded now
        problem = None
        if (state.done or before_markers) and unrecorded and verify is not None:
            try:
                verify()
            except ValueError as e:
                problem = str(e)
                log(f"redo: {name}: {problem}")
        if (state.done or before_markers) and problem is None:
            if unrecorded:
                finish_step(outputs, name, inputs, settings, ignore=ignore)
            log(f"skip: {name}: {where} (done{'; recorded now' if unrecorded else ''})")
            return self.times.get(name)
        if state.reason is not None:
            if expensive and state.leftover:
                hint = expensive if isinstance(expensive, str) else "delete it or move it away to redo the step"
                raise InputError(os.fspath(outputs[0]), None, f"{name} not redone: {state.reason}; {hint}")
            log(f"redo: {name}: {state.reason}")
        start_step(outputs)
        if self.times.pop(name, None) is not None:
            self._save()
        before = None if inputs is None else input_identities(inputs)  # what the outputs are made from
        t0 = time.perf_counter()
        make()
        if verify is not None:
            verify()
        finish_step(outputs, name, inputs, settings, before, ignore)  # an output not written is an error naming it
        self.times[name] = round(time.perf_counter() - t0, 2)
        self._save()
        return self.times[name]


class RequiredSteps(Steps):
    """Steps this run only takes as done: each must be (io.check_step), else the run stops, naming it and what to
    run first (`hint`). The shard jobs and the merge take the steps made once for the whole corpus this way, so that
    no two jobs ever make the same file; the merge checks each shard's steps this way too."""

    def __init__(self, hint: str = "", times_path: str | os.PathLike | None = None):
        super().__init__(times_path)
        self.hint = hint

    def step(self, name: str, outputs: Sequence[str | os.PathLike], make: Callable[[], object],
             inputs: Sequence[str | os.PathLike] | None = None, settings: object = None,
             expensive: bool | str = False, ignore: Sequence[str] = (),
             verify: Callable[[], object] | None = None) -> float | None:
        state = check_step(outputs, inputs, settings, ignore)
        if not state.done:
            what = "is not done" if state.reason is None else f"is out of date ({state.reason})"
            raise InputError(os.fspath(outputs[0]), None, f"{name} {what}" + (f"; {self.hint}" if self.hint else ""))
        return self.times.get(name)


def run_logged(cmd: Sequence[str | os.PathLike], log_path: str | os.PathLike,
               stdout_path: str | os.PathLike | None = None, verbose: bool = False,
               cpu_seconds: list[float] | None = None) -> None:
    """Run one command of a step, with its output appended to `log_path` (with `verbose`, also shown) and its
    stdout written to `stdout_path` atomically when given. A failure shows the end of the log and raises
    StepFailed, so that the step is not marked complete. `cpu_seconds`: see io.run_child (not with verbose)."""
    cmd = [os.fspath(c) for c in cmd]
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as err:
        err.write("$ " + shlex.join(cmd) + "\n")
        err.flush()
        if verbose and stdout_path is None:  # shown and kept
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            assert proc.stdout is not None
            for text in proc.stdout:
                sys.stderr.write(text)
                err.write(text)
            status = proc.wait()
        elif stdout_path is None:
            status = run_child(cmd, cpu_seconds, stdout=err, stderr=err)
        else:
            sink = None if verbose else err
            with atomic_output(os.fspath(stdout_path)) as out:
                status = run_child(cmd, cpu_seconds, stdout=out, stderr=sink)
                if status:
                    raise StepFailed(_failure(cmd, status, log_path))
    if status:
        raise StepFailed(_failure(cmd, status, log_path))


class StepFailed(ExternalToolError):
    """A command of a step failed; the message holds the end of its log."""


def _failure(cmd: list[str], status: int, log_path: Path) -> str:
    """Shows the end of the log; the one-line message of the failure."""
    sys.stderr.write("".join(log_path.read_text(encoding="utf-8", errors="replace").splitlines(True)[-25:]))
    name = " ".join(cmd[2:4]) if cmd[1:2] == ["-m"] else os.path.basename(cmd[0])  # python -m MODULE [COMMAND]
    return f"{name} failed (exit {status}); the end of its log ({log_path}) is above"


def prep_cmd(*args: str | os.PathLike) -> list[str]:
    """An `xlpos-prep` subcommand run by this interpreter (no PATH lookup)."""
    return [sys.executable, "-m", f"{__package__}.cli", *map(os.fspath, args)]


def head_lines(path: str | os.PathLike, n: int, start: int = 0) -> Iterator[str]:
    """Lines start+1..start+n of a file, streamed."""
    return itertools.islice(iter_lines(os.fspath(path)), start, start + n)


# ------------------------------------------------------------------------------------------------ configuration
@dataclass
class PrepareConfig:
    """What `prepare` does; recorded as JSON beside its outputs (Layout.config). Defaults are the recipes'."""
    src: str
    tgt: str
    workers: int = 1
    seed: int = 1
    splits: tuple = SPLITS
    align_splits: tuple = ("train", "test")  # aligned together; the test alignment only gives the oracle the
    #                                          reorderer is evaluated against, no model sees test targets
    align_lines: int = 0                     # first N training pairs aligned (0: all)
    align_reversed: bool = False             # the alignment is made target-source (one file shared by a corpus's
    #                                          two directions) and swapped for the oracle
    full_oracle: bool = False                # oracle ranks for every aligned line, not only the reorderer's
    reorder_train_lines: int = 0             # first N aligned training pairs train the reorderer (0: all)
    reorder_iterations: int = 0              # 0: train-reorderer's default
    reorder_loss: str = ""
    reorder_args: list = field(default_factory=list)
    reorder_shards: int = 1                  # >1: each split reordered as that many --shard jobs at once
    jackknife: int = JACKKNIFE_FOLDS         # K > 1: the reorderer's training lines get the orders of K reorderers,
    #                                          each trained without their fold (jackknifed_train_order); 1: off
    attach_null: str = ""                    # "": default_attach_null(src)
    eval_splits: tuple = ("test",)           # reordering scores (Kendall tau, FRS) against the oracle
    spm_vocab: int = 8000
    spm_type: str = "unigram"
    spm_coverage: float = 1.0
    data_bin: bool = True
    oracle_positions: tuple = ()             # splits that also get XL positions from their oracle ranks, in a data-bin
    #                                          of their own (Layout.oracle_data_bin): the oracle ablation
    verbose: bool = False

    def __post_init__(self) -> None:
        self._attach_null_given = bool(self.attach_null)  # (not a field: not recorded)
        self.attach_null = self.attach_null or default_attach_null(self.src)
        for what, splits in (("reordering scores", self.eval_splits), ("oracle positions", self.oracle_positions)):
            missing = [s for s in splits if s not in self.align_splits]
            if missing:
                raise ValueError(f"{what} of {', '.join(missing)} need its alignment: add it to align_splits")
        if "train" in self.oracle_positions and not (self.full_oracle and self.align_lines == 0):
            raise ValueError("oracle positions of train need oracle ranks of every training line: set full_oracle "
                             "and align every line (align_lines 0)")
        for name in ("workers", "reorder_shards", "jackknife"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")

    def recorded(self) -> dict:
        """The settings that decide the outputs (not workers, shards or verbosity)."""
        out = asdict(self)
        for key in ("workers", "reorder_shards", "verbose"):
            out.pop(key)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


@dataclass(frozen=True)
class Layout:
    """Where every file of the pipeline lives: templates with {split} and {lang}. `recipe(work)` is the layout the
    recipes document (recipes/README.md); benchmarks/bleu.py keeps its own cache layout."""
    tok: str                 # input: tokenized words, {split}.{lang}
    align_input: str         # the aligned pairs, one file per language ({lang})
    align_all: str           # their alignment (eflomal + grow-diag-final-and)
    alignment: str           # per split, source-target, the lines the oracle covers ({split})
    oracle_src: str          # source lines of a split the oracle covers only in part ({split})
    oracle: str              # oracle ranks ({split})
    reorderer_src: str       # the reorderer's training lines, when fewer than the oracle covers
    reorderer_oracle: str
    reorderer: str           # the model
    order: str               # predicted orders ({split})
    evaluation: str          # reordering scores of the predicted orders vs the oracle ({split})
    spm_prefix: str          # PREFIX.model, PREFIX.vocab
    pieces: str              # pieces fairseq binarizes ({split}.{lang})
    xlpos: str               # piece-level XL positions ({split})
    data_bin: str
    logs: str                # directory of the steps' logs
    config: str              # the recorded PrepareConfig
    times: str | None = None       # wall time per step (None: not kept)
    align_times: str | None = None  # for the alignment step, when shared with other pipelines (bleu.py)
    jackknife: str | None = None    # directory of the jackknife's folds, models and orders (None: beside the
    #                                 reorderer, REORDERER_DIR/jackknife)
    shards: str | None = None       # directory of the shard jobs' parts (None: WORK/shards, beside the config)

    @classmethod
    def recipe(cls, work: str | os.PathLike) -> "Layout":
        w = os.fspath(work)
        return cls(tok=f"{w}/tok/{{split}}.{{lang}}", align_input=f"{w}/reorder/align-input.{{lang}}",
                   align_all=f"{w}/reorder/align.txt", alignment=f"{w}/reorder/{{split}}.align",
                   oracle_src=f"{w}/reorder/{{split}}.src", oracle=f"{w}/reorder/{{split}}.oracle",
                   reorderer_src=f"{w}/reorder/train-subset.src", reorderer_oracle=f"{w}/reorder/train-subset.oracle",
                   reorderer=f"{w}/reorder/reorderer.model", order=f"{w}/reorder/{{split}}.order",
                   evaluation=f"{w}/reorder/{{split}}.tau.json", spm_prefix=f"{w}/spm/spm",
                   pieces=f"{w}/pieces/{{split}}.{{lang}}", xlpos=f"{w}/pieces/{{split}}.xlpos",
                   data_bin=f"{w}/data-bin", logs=f"{w}/logs", config=f"{w}/prepare.json")

    def path(self, slot: str, split: str = "", lang: str = "") -> str:
        return getattr(self, slot).format(split=split, lang=lang)

    def oracle_data_bin(self) -> str:
        """The data-bin of PrepareConfig.oracle_positions, beside the data-bin."""
        return self.data_bin + "-oracle"

    def oracle_xlpos(self, split: str) -> str:
        """A split's XL positions from its oracle ranks, beside its XL positions."""
        return os.path.splitext(self.path("xlpos", split))[0] + ".oracle.xlpos"

    def jackknife_path(self, name: str) -> str:
        return os.path.join(self.jackknife or os.path.join(os.path.dirname(self.reorderer), "jackknife"), name)

    def shard_files(self, index: int, count: int) -> ShardFiles:
        """Shard `index` of `count`'s own directory (shards of another count never share one)."""
        root = self.shards or os.path.join(os.path.dirname(self.config), "shards")
        return ShardFiles(os.path.join(root, f"{index}-of-{count}"))


@dataclass
class Prepared:
    """What `prepare` made: the layout, the resolved configuration, line counts and the wall time of every step
    (None: done by an earlier run that did not record it)."""
    layout: Layout
    config: PrepareConfig
    lines: dict
    seconds: dict

    @property
    def spm_model(self) -> str:
        return self.layout.spm_prefix + ".model"


# ------------------------------------------------------------------------------------------------ input checks
# Version of check_tokenized's rules, recorded with its step: a new rule rechecks work directories checked before.
TOKEN_CHECKS = 1
_invisible: re.Pattern | None = None


def _invisible_chars() -> re.Pattern:
    """Characters that sentencepiece's default normalization (nmt_nfkc) may remove or read as a space: control and
    format characters (RTL marks, zero-width spaces, BOM), separators, its own '▁' and U+FFFD."""
    global _invisible
    if _invisible is None:
        chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000
                 and unicodedata.category(chr(c)) in ("Cc", "Cf", "Zs", "Zl", "Zp")] + ["\u2581", "\ufffd"]
        _invisible = re.compile("[" + "".join(re.escape(c) for c in chars) + "]")
    return _invisible


def _word_problem(word: str, normalize: Callable[[str], str] | None) -> str | None:
    """Why sentencepiece would not see `word` as one word, or None."""
    if normalize is not None:
        parts = normalize(word).replace("\u2581", " ").split()
    else:  # (sentencepiece without its normalizer API: the characters it removes, dropped)
        parts = _invisible_chars().sub(" ", word).split()
    if len(parts) == 1:
        return None
    names = ", ".join(sorted({f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}"
                              for c in word if _invisible_chars().match(c)}))
    what = "is made only of characters" if not parts else "holds characters"
    return (f"word {word!r} {what} that sentencepiece removes or reads as spaces ({names}), so it would not be "
            f"one word of its pieces: remove them from the corpus")


def check_tokenized(tok: dict, splits: Sequence[str], langs: Sequence[str], out: str) -> None:
    """Every split before any work, naming the user's file and line: the two sides have the same number of lines,
    no line is empty, and every word stays one word through sentencepiece's normalization (what `positions`
    checks, otherwise found only after alignment and reorderer training). Writes the line counts to `out`."""
    normalize = None
    with contextlib.suppress(ImportError, AttributeError, RuntimeError):
        import sentencepiece
        normalize = sentencepiece.SentencePieceNormalizer(rule_name="nmt_nfkc").normalize
    suspect = _invisible_chars()
    counts: dict = {}
    for split in splits:
        n = {}
        for lang in langs:
            path = tok[split, lang]
            k = 0
            for k, line in enumerate(iter_lines(path), 1):
                words = line.split()
                if not words:
                    raise InputError(path, k, "empty line: every line must hold a sentence")
                if suspect.search(line):
                    for word in words:
                        problem = _word_problem(word, normalize) if suspect.search(word) else None
                        if problem:
                            raise InputError(path, k, problem)
            if k == 0:
                raise InputError(path, None, "file is empty")
            n[lang] = k
        check_same_length(tok[split, langs[0]], n[langs[0]], tok[split, langs[1]], n[langs[1]])
        counts[split] = n[langs[0]]
    with atomic_output(out) as f:
        json.dump({"lines": counts}, f, indent=2)
        f.write("\n")


def reorderer_settings(cfg: PrepareConfig) -> dict:
    """What decides a reorderer trained by train_reorderer besides its training files: recorded with it."""
    return {"seed": cfg.seed, "iterations": cfg.reorder_iterations, "loss": cfg.reorder_loss,
            "args": list(cfg.reorder_args)}


# ------------------------------------------------------------------------------------------------ the pipeline
def prepare(cfg: PrepareConfig, layout: Layout, stage: Stage = Stage(), wait: bool = False) -> Prepared:
    """Run (or resume) every step for the tokenized splits at layout.tok, or the part of them `stage` says
    (preprocess/shards.py); see the module docstring. One run per work directory (the directory of layout.config)
    at a time, and one per shard directory: a second one stops, naming the first's pid, or with `wait` waits for
    it to end (io.directory_lock)."""
    if stage.kind == "shard":
        directory = layout.shard_files(stage.index, stage.count).root
    else:
        directory = os.path.dirname(os.path.abspath(layout.config))
    with directory_lock(directory, wait=wait):
        return _prepare(cfg, layout, stage)


@dataclass
class Corpus:
    """What the per-sentence steps need of the steps made once: the files they read and the line counts."""
    tok: dict               # (split, lang) -> tokenized words
    lines: dict             # split -> lines
    reorder_lines: int      # the reorderer's training lines (the first ones of the training split)
    folded: str | None      # their jackknifed orders (None: no jackknife)
    spm_model: str


def _prepare(cfg: PrepareConfig, layout: Layout, stage: Stage) -> Prepared:
    # The shard jobs and the merge only read what the steps made once for the whole corpus made: a shard job
    # running them would race the other shards for the same files.
    shared = stage.kind in ("shard", "merge")
    if shared:
        once: Steps = RequiredSteps("run `xlpos-prep prepare --global-steps` (with the options of this run) first",
                                    layout.times)
        align_steps: Steps = RequiredSteps(once.hint, layout.align_times) if layout.align_times else once
    else:
        once = Steps(layout.times)
        align_steps = Steps(layout.align_times) if layout.align_times else once
    s, t = cfg.src, cfg.tgt
    tok = {(split, lang): layout.path("tok", split, lang) for split in cfg.splits for lang in (s, t)}
    for path in tok.values():
        if not os.path.isfile(path):
            raise InputError(path, None, "tokenized input not found")
    # A work directory made before steps left .done markers: its trained models would be paired with redone (and,
    # eflomal being unseeded, different) data. Say so before redoing anything.
    if os.path.exists(os.path.join(layout.data_bin, "preprocess.done")) and not step_done([layout.data_bin]):
        raise InputError(layout.data_bin, None, "made by an older xlpos whose steps left no completion markers "
                         "(OUTPUT.done): delete the work directory, or move it away, and rerun")
    once.step("check input", [os.path.join(layout.logs, "input-check.json")], lambda: check_tokenized(
        tok, cfg.splits, (s, t), os.path.join(layout.logs, "input-check.json")), inputs=list(tok.values()),
        settings={"splits": list(cfg.splits), "languages": [s, t], "checks": TOKEN_CHECKS})
    _record_config(cfg, layout, {"shard": (), "merge": MERGE_SETTINGS}.get(stage.kind))
    n = {split: count_lines(tok[split, s]) for split in cfg.splits}
    n_align = min(cfg.align_lines or n["train"], n["train"])
    n_reorder = min(cfg.reorder_train_lines or n_align, n_align)
    # the lines of each split the oracle covers: all aligned ones, or only the reorderer's training lines
    covered = {split: (n_align if cfg.full_oracle else n_reorder) if split == "train" else n[split]
               for split in cfg.align_splits}
    seconds: dict = {}
    logs = Path(layout.logs)

    # ---- word alignment of the aligned splits at once (eflomal learns from all of them)
    a0, a1 = (t, s) if cfg.align_reversed else (s, t)
    counts = {split: n_align if split == "train" else n[split] for split in cfg.align_splits}
    align_name = f"align ({'+'.join(cfg.align_splits)})"

    def make_alignment() -> None:
        log(f"align: {' + '.join(f'{counts[x]} {x}' for x in cfg.align_splits)} sentence pairs")
        for lang in (a0, a1):
            write_lines(layout.path("align_input", lang=lang),
                        (line for x in cfg.align_splits for line in head_lines(tok[x, lang], counts[x])))
        run_logged(prep_cmd("align", "--src", layout.path("align_input", lang=a0), "--tgt",
                            layout.path("align_input", lang=a1), "--out", layout.align_all, "--seed", str(cfg.seed)),
                   logs / "align.log", verbose=cfg.verbose)

    seconds[align_name] = align_steps.step(
        align_name, [layout.align_all], make_alignment,
        inputs=[tok[x, lang] for x in cfg.align_splits for lang in (a0, a1)],
        settings={"languages": [a0, a1], "lines": counts, "seed": cfg.seed},
        expensive=f"delete it, and {layout.reorderer} made from it, to redo the alignment")
    if count_lines(layout.align_all) != sum(counts.values()):
        raise InputError(layout.align_all, None, f"has {count_lines(layout.align_all)} lines, not the "
                         f"{sum(counts.values())} of the aligned pairs: the corpus changed since it was made; "
                         f"delete it (and what was made from it) to redo the alignment")

    # ---- per split: the source-target alignment of the covered lines, and their oracle ranks
    start = 0
    for split in cfg.align_splits:
        first = start
        start += counts[split]

        def make_split_alignment(split=split, first=first) -> None:
            links = head_lines(layout.align_all, covered[split], first)
            if cfg.align_reversed:
                links = (" ".join(f"{j}-{i}" for i, j in (x.split("-") for x in line.split())) for line in links)
            write_lines(layout.path("alignment", split), links)

        seconds[f"alignment {split}"] = once.step(
            f"alignment {split}", [layout.path("alignment", split)], make_split_alignment, inputs=[layout.align_all],
            settings={"first": first, "lines": covered[split], "reversed": cfg.align_reversed})
        src = tok[split, s]
        if covered[split] < n[split]:
            src = layout.path("oracle_src", split)
            seconds[f"oracle source {split}"] = once.step(
                f"oracle source {split}", [src],
                lambda split=split, src=src: write_lines(src, head_lines(tok[split, s], covered[split])),
                inputs=[tok[split, s]], settings={"lines": covered[split]})
        oracle = layout.path("oracle", split)

        def make_oracle(src=src, split=split, oracle=oracle) -> None:
            run_logged(prep_cmd("oracle", "--src", src, "--align", layout.path("alignment", split), "--out", oracle,
                                "--attach-null", cfg.attach_null, "--workers", str(cfg.workers)),
                       logs / "oracle.log", verbose=cfg.verbose)

        seconds[f"oracle {split}"] = once.step(f"oracle {split}", [oracle], make_oracle,
                                               inputs=[src, layout.path("alignment", split)],
                                               settings={"attach_null": cfg.attach_null})

    # ---- the reorderer, on the first n_reorder covered training lines
    train_src = tok["train", s] if covered["train"] == n["train"] else layout.path("oracle_src", "train")
    train_oracle = layout.path("oracle", "train")
    if n_reorder < covered["train"]:
        def make_subset() -> None:
            write_lines(layout.reorderer_src, head_lines(train_src, n_reorder))
            write_lines(layout.reorderer_oracle, head_lines(train_oracle, n_reorder))
        seconds["reorderer training lines"] = once.step(
            "reorderer training lines", [layout.reorderer_src, layout.reorderer_oracle], make_subset,
            inputs=[train_src, train_oracle], settings={"lines": n_reorder})
        train_src, train_oracle = layout.reorderer_src, layout.reorderer_oracle

    def make_reorderer() -> None:
        log(f"train-reorderer: {n_reorder} sentences")
        train_reorderer(cfg, train_src, train_oracle, layout.reorderer, logs / "train-reorderer.log")

    reorderer_inputs = [train_src, train_oracle]

    def reorderer_step() -> float | None:
        return once.step("train-reorderer", [layout.reorderer], make_reorderer, inputs=reorderer_inputs,
                         settings=reorderer_settings(cfg), expensive=True)

    # The reorderer's own training lines get jackknifed orders: a model labels the sentences it was trained on far
    # better than new ones (docs/positions.md). The model on all lines trains beside the folds' models (K + 1
    # independent trainings, cfg.workers at a time: no core waits while one model trains alone), unless an earlier
    # run's model is in the way: that step then stops at once, naming it, before any fold trains.
    state = check_step([layout.reorderer], reorderer_inputs, reorderer_settings(cfg))
    together = cfg.jackknife > 1 and not (state.done or state.leftover or isinstance(once, RequiredSteps))
    if not together:
        seconds["train-reorderer"] = reorderer_step()
    folded = None
    if cfg.jackknife > 1:
        folded = jackknife_folds(once, cfg, layout, train_src, train_oracle, n_reorder, logs, seconds,
                                 reorderer_step if together else None)
    if together:  # trained beside the folds, or not yet if their orders were all done
        done = step_done([layout.reorderer], reorderer_inputs, reorderer_settings(cfg))
        seconds["train-reorderer"] = once.times.get("train-reorderer") if done else reorderer_step()

    # ---- joint sentencepiece: before the shard jobs, which encode; one machine trains it after the orders
    spm_model = layout.spm_prefix + ".model"

    def train_spm() -> None:
        seconds["spm-train"] = once.step("spm-train", [spm_model], lambda: (
            log(f"sentencepiece: joint {cfg.spm_type} model, vocabulary {cfg.spm_vocab}"),
            run_logged(prep_cmd("spm-train", "--input", tok["train", s], tok["train", t], "--model-prefix",
                                layout.spm_prefix, "--vocab-size", str(cfg.spm_vocab), "--model-type", cfg.spm_type,
                                "--character-coverage", str(cfg.spm_coverage), "--threads", str(cfg.workers), "--seed",
                                str(cfg.seed)), logs / "spm.log", verbose=cfg.verbose)),
            inputs=[tok["train", s], tok["train", t]],
            settings={"vocab": cfg.spm_vocab, "type": cfg.spm_type, "coverage": cfg.spm_coverage, "seed": cfg.seed})

    if stage.kind != "all":
        train_spm()
    corpus = Corpus(tok, n, n_reorder, folded, spm_model)
    lines = {"sentences": n, "aligned_train": n_align, "reorderer_train": n_reorder}
    if stage.kind == "global":
        log("prepare: the steps made once are done; the per-sentence steps are next (--shard I/N, then --merge N)")
        return Prepared(layout, cfg, lines, seconds)
    if stage.kind == "shard":
        files = layout.shard_files(stage.index, stage.count)
        shard_steps(Steps(files.times), cfg, layout, corpus, stage, seconds)
        log(f"prepare: {stage.name} done ({files.root})")
        return Prepared(layout, cfg, lines, seconds)

    # ---- the orders of every split, training included, so that training and test see the same kind of XL
    # positions (docs/design.md). A merge joins the shards' parts of each per-sentence output.
    steps = Steps(layout.times) if shared else once
    joiner = None
    if stage.kind == "merge":
        joiner = Joiner(stage.count, lambda: check_shards(cfg, layout, corpus, stage.count))
    orders(steps, cfg, layout, corpus, seconds, joiner)

    # the training lines' orders against their oracle, beside the held-out splits': the gap jackknifing closes
    train_eval = layout.path("evaluation", "train")
    seconds["evaluate train"] = steps.step("evaluate train", [train_eval], lambda: evaluate_reordering(
        layout.path("order", "train"), train_oracle, train_eval, limit=min(n_reorder, TRAIN_EVAL_LINES)),
        inputs=[layout.path("order", "train"), train_oracle], settings={"lines": min(n_reorder, TRAIN_EVAL_LINES)})
    for split in cfg.eval_splits:
        if split == "train":
            continue
        out = layout.path("evaluation", split)
        seconds[f"evaluate {split}"] = steps.step(f"evaluate {split}", [out], lambda split=split, out=out: (
            evaluate_reordering(layout.path("order", split), layout.path("oracle", split), out)),
            inputs=[layout.path("order", split), layout.path("oracle", split)])

    # ---- pieces and their XL positions
    if stage.kind == "all":
        train_spm()
    all_pieces(steps, cfg, layout, corpus, seconds, joiner)

    # ---- the data-bin: fairseq-preprocess's (joined dictionary) + binarized XL positions. Not sharded: the
    # dictionary counts the pieces of the whole training split; the binarization streams every file once.
    if cfg.data_bin:
        prefix = {split: layout.path("pieces", split, "").rstrip(".") for split in cfg.splits}
        seconds["data-bin"] = steps.step("data-bin", [layout.data_bin], lambda: make_data_bin(
            s, t, prefix, layout.data_bin, {split: layout.path("xlpos", split) for split in cfg.splits},
            logs / "preprocess.log", verbose=cfg.verbose),
            inputs=[p for split in cfg.splits for p in (f"{prefix[split]}.{s}", f"{prefix[split]}.{t}",
                                                        layout.path("xlpos", split))],
            settings={"languages": [s, t], "splits": list(cfg.splits)})
        if cfg.oracle_positions:
            seconds["data-bin-oracle"] = oracle_data_bin(steps, cfg, layout)
    return Prepared(layout, cfg, lines, seconds)


def _parts(layout: Layout, joiner: Joiner | None) -> Callable[[Callable[[ShardFiles], str]], Callable[[int], str]]:
    """part(slot): shard i -> the file `slot` names in shard i's directory."""
    files = [layout.shard_files(i, joiner.count) for i in range(joiner.count)] if joiner else []
    return lambda slot: lambda i: slot(files[i])


def orders(steps: Steps, cfg: PrepareConfig, layout: Layout, corpus: Corpus, seconds: dict,
           joiner: Joiner | None = None) -> None:
    """The orders of every split as one machine makes them (the training split's from the jackknife's folds and
    the full model). With `joiner` (the merge), the same steps, recorded with the same inputs and settings, are
    made by concatenating the shards' parts instead."""
    s, n, n_reorder, model = cfg.src, corpus.lines, corpus.reorder_lines, layout.reorderer
    logs = Path(layout.logs)
    count = joiner.count if joiner else 1
    part = _parts(layout, joiner)
    checked = joiner.checked if joiner else (lambda make: make)  # (a merge writes only once every shard is done)
    for split in cfg.splits:
        order = layout.path("order", split)
        if split == "train" and corpus.folded is not None:
            parts = [corpus.folded]
            if n["train"] > n_reorder:  # the lines no reorderer was trained on: the full model's orders
                rest_src, rest_order = layout.jackknife_path("rest.src"), layout.jackknife_path("rest.order")
                seconds["jackknife rest source"] = steps.step("jackknife rest source", [rest_src], checked(
                    lambda: write_lines(rest_src, itertools.islice(iter_lines(corpus.tok["train", s]), n_reorder,
                                                                   None))),
                    inputs=[corpus.tok["train", s]], settings={"first": n_reorder})
                if joiner is None:
                    seconds["reorder train rest"] = reorder(steps, model, rest_src, rest_order, "reorder train rest",
                                                            cfg.workers, cfg.reorder_shards, logs, cfg.verbose)
                else:
                    def rest_part(i: int) -> str | None:
                        has_rest = _rest_block(Stage("shard", i, count), corpus) is not None
                        return layout.shard_files(i, count).rest_order if has_rest else None
                    seconds["reorder train rest"] = steps.step("reorder train rest", [rest_order], joiner.make(
                        [(rest_order, rest_part)]), inputs=[model, rest_src])
                parts.append(rest_order)
            seconds["reorder train"] = steps.step("reorder train", [order], checked(
                lambda parts=parts: concatenate(parts, layout.path("order", "train"))), inputs=parts)
        elif joiner is None:
            seconds[f"reorder {split}"] = reorder(steps, model, corpus.tok[split, s], order, f"reorder {split}",
                                                  cfg.workers, cfg.reorder_shards, logs, cfg.verbose)
        else:
            seconds[f"reorder {split}"] = steps.step(f"reorder {split}", [order], joiner.make(
                [(order, part(lambda f, split=split: f.order(split)))]), inputs=[model, corpus.tok[split, s]])


def all_pieces(steps: Steps, cfg: PrepareConfig, layout: Layout, corpus: Corpus, seconds: dict,
               joiner: Joiner | None = None) -> None:
    """Source pieces with their XL positions and target pieces of every split (`pieces`); with `joiner` (the
    merge), the shards' parts concatenated, as `orders`."""
    s, t = cfg.src, cfg.tgt
    part = _parts(layout, joiner)
    for split in cfg.splits:
        xlpos, src_pieces, tgt_pieces = (layout.path("xlpos", split), layout.path("pieces", split, s),
                                         layout.path("pieces", split, t))
        makes = None
        if joiner is not None:
            makes = (joiner.make([(xlpos, part(lambda f, split=split: f.xlpos(split))),
                                  (src_pieces, part(lambda f, split=split: f.pieces(split, s)))]),
                     joiner.make([(tgt_pieces, part(lambda f, split=split: f.pieces(split, t)))]))
        seconds.update(pieces(steps, cfg, SplitPieces(split, corpus.tok[split, s], corpus.tok[split, t],
                                                      layout.path("order", split), xlpos, src_pieces, tgt_pieces),
                              corpus.spm_model, Path(layout.logs), makes))


def _rest_block(stage: Stage, corpus: Corpus) -> tuple[int, int] | None:
    """The lines of the shard's block of the training split beyond the jackknifed ones (None: no such line)."""
    a, b = stage.block(corpus.lines["train"])
    a, b = max(a, corpus.reorder_lines), max(b, corpus.reorder_lines)
    return (a, b) if b > a else None


def shard_steps(steps: Steps, cfg: PrepareConfig, layout: Layout, corpus: Corpus, stage: Stage,
                seconds: dict) -> None:
    """The per-sentence steps of one shard (`stage`): for the block of lines it covers of each split, its words,
    their orders (jackknifed training lines: their lines of the jackknife's orders), pieces and XL positions, in
    the shard's own directory. The merge runs the same function with RequiredSteps to check that a shard is
    complete and up to date."""
    s, t = cfg.src, cfg.tgt
    files = layout.shard_files(stage.index, stage.count)
    logs = Path(files.logs)
    for split in cfg.splits:
        a, b = stage.block(corpus.lines[split])
        src, tgt, order = files.tok(split, s), files.tok(split, t), files.order(split)
        for lang, path in ((s, src), (t, tgt)):
            seconds[f"lines {split}.{lang}"] = steps.step(
                f"{stage.name} lines of {split}.{lang}", [path],
                lambda src=corpus.tok[split, lang], path=path, a=a, b=b: write_block(src, path, a, b),
                inputs=[corpus.tok[split, lang]], settings={"lines": [a, b]})
        outputs = [order, files.xlpos(split), files.pieces(split, s), files.pieces(split, t)]
        if a == b:  # more shards than lines: this one has none of the split (and the commands refuse empty files)
            def write_empty(outputs: list = outputs) -> None:
                for path in outputs:
                    write_lines(path, [])
            seconds[f"no lines {split}"] = steps.step(f"{stage.name} {split}: no lines", outputs, write_empty,
                                                      inputs=[src, tgt])
            continue
        if split == "train" and corpus.folded is not None:
            rest = _rest_block(stage, corpus)
            if rest is not None:
                seconds["train rest source"] = steps.step(
                    f"{stage.name} train rest source", [files.rest_src],
                    lambda: write_block(corpus.tok["train", s], files.rest_src, *rest),
                    inputs=[corpus.tok["train", s]], settings={"lines": list(rest)})
                seconds["reorder train rest"] = reorder(steps, layout.reorderer, files.rest_src, files.rest_order,
                                                        f"{stage.name} reorder train rest", cfg.workers,
                                                        cfg.reorder_shards, logs, cfg.verbose)
            folded = [a, max(a, min(b, corpus.reorder_lines))]  # its lines of the jackknifed orders
            parts = [corpus.folded] + ([files.rest_order] if rest else [])

            def make_train_order() -> None:
                with atomic_output(order, "wb") as f, open(corpus.folded, "rb") as jackknifed:
                    f.writelines(itertools.islice(jackknifed, *folded))
                    if rest is not None:
                        with open(files.rest_order, "rb") as p:
                            shutil.copyfileobj(p, f)

            seconds["reorder train"] = steps.step(f"{stage.name} reorder train", [order], make_train_order,
                                                  inputs=parts, settings={"jackknifed lines": folded})
        else:
            seconds[f"reorder {split}"] = reorder(steps, layout.reorderer, src, order, f"{stage.name} reorder {split}",
                                                  cfg.workers, cfg.reorder_shards, logs, cfg.verbose)
        seconds.update(pieces(steps, cfg, SplitPieces(split, src, tgt, order, files.xlpos(split),
                                                      files.pieces(split, s), files.pieces(split, t)),
                              corpus.spm_model, logs))


def check_shards(cfg: PrepareConfig, layout: Layout, corpus: Corpus, count: int) -> None:
    """Every shard of `count` complete and made from the files and settings the merge joins; else one line naming
    the first shard that is not, and why."""
    for i in range(count):
        stage = Stage("shard", i, count)
        try:
            shard_steps(RequiredSteps(), cfg, layout, corpus, stage, {})
        except InputError as e:
            raise refuse_shard(stage, f"xlpos-prep prepare --shard {i}/{count}", e) from None


# settings that decide only steps after the reorderer (a change redoes them, see _record_config)
LATER_SETTINGS = ("eval_splits", "spm_vocab", "spm_type", "spm_coverage", "data_bin", "oracle_positions")
# those that decide only steps after the shards': a merge may change them
MERGE_SETTINGS = ("eval_splits", "data_bin", "oracle_positions")


def _record_config(cfg: PrepareConfig, layout: Layout, may_change: Sequence[str] | None = None) -> None:
    """prepare.json holds the settings the outputs were made with. Each step records the settings it uses and is
    redone when they change, but a setting the reorderer depends on stops here, naming it, while the reorderer
    exists (retraining it is expensive, and the steps before it would be redone first). A work directory made
    before the file existed gets it, saying that its oracle (if made) used lader's default attachment.
    With `may_change` (a shard job, a merge), the file must exist and only those settings may differ from it:
    those runs redo nothing made once, nor what the shards made."""
    path = Path(layout.config)
    recorded = cfg.recorded()
    old = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
    differ: list = []

    def listed(keys: list) -> str:
        return ", ".join(f"{k}: {old[k]!r}, now {recorded[k]!r}" for k in keys)

    if old is not None:
        if "note" in old and not cfg._attach_null_given:  # an oracle made before the default: kept, see below
            cfg.attach_null = recorded["attach_null"] = old["attach_null"]
        old = {**{k: v for k, v in LEGACY_SETTINGS.items() if k not in old}, **old}
        differ = [k for k in recorded if k in old and old[k] != recorded[k]]
    if may_change is not None:
        if old is None:
            raise InputError(str(path), None, "not found: run `xlpos-prep prepare --global-steps` first")
        fixed = [k for k in differ if k not in may_change]
        if fixed:
            raise InputError(str(path), None, f"made with other settings ({listed(fixed)}): give the shard jobs "
                             f"and the merge the options of the --global-steps run")
    if old is not None:
        if not differ:
            return
        # Every step records its own settings and is redone when they change; a setting the reorderer depends on
        # stops here instead while the reorderer exists, before any step before it is redone.
        blocking = [k for k in differ if k not in LATER_SETTINGS]
        if blocking and os.path.exists(layout.reorderer):
            raise InputError(str(path), None, f"made with other settings ({listed(blocking)}): use another work "
                             f"directory, or delete it to start over (or delete {layout.reorderer} to retrain the "
                             f"reorderer with them)")
        log(f"prepare: settings changed ({listed(differ)}): the steps they decide are redone")
        recorded.pop("note", None)
    elif step_done([layout.path("oracle", "train")], settings={"attach_null": "right"}):  # its record, if any
        recorded["attach_null"] = "right"
        recorded["note"] = "the oracle was made before prepare.json existed, with lader's default --attach-null right"
        if cfg.attach_null != "right":
            log(f"note: {layout.path('oracle', 'train')} was made before --attach-null {cfg.attach_null} became "
                f"the default for {cfg.src} sources; it is kept (delete the work directory to redo it)")
        cfg.attach_null = "right"
    log("prepare: " + ", ".join(f"{k}={v}" for k, v in recorded.items() if k != "note"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(str(path)) as f:
        json.dump(recorded, f, indent=2)
        f.write("\n")


def reorder(steps: Steps, model: str, src: str, out: str, name: str, workers: int = 1, shards: int = 1,
            logs: Path | None = None, verbose: bool = False) -> float | None:
    """`xlpos-prep reorder` of one file; with shards > 1 as that many --shard jobs at once (each a step of its own,
    so a killed run redoes only unfinished shards), concatenated in order."""
    log_path = logs / "reorder.log" if logs else None
    if shards <= 1 or step_done([out], [model, src]):
        command = prep_cmd("reorder", "--model", model, "--src", src, "--out", out, "--workers", str(workers))
        return steps.step(name, [out], lambda: run_logged(command, log_path, verbose=verbose), inputs=[model, src])

    def make() -> None:
        per_shard = -(-workers // shards)
        parts = [f"{out}.shard{i}" for i in range(shards)]
        before = input_identities([model, src])  # a shard of a killed run is kept only if made from these
        todo = [i for i in range(shards) if not step_done([parts[i]], [model, src], {"shard": f"{i}/{shards}"})]
        procs = []
        for i in todo:
            start_step([parts[i]])
            cmd = prep_cmd("reorder", "--model", model, "--src", src, "--out", parts[i], "--shard", f"{i}/{shards}",
                           "--workers", str(per_shard))
            log("$ " + shlex.join(cmd))
            procs.append((i, subprocess.Popen(cmd)))
        failed = [i for i, p in procs if p.wait() != 0]
        if failed:
            raise StepFailed(f"reordering {src} failed (--shard {failed[0]}/{shards})")
        for i, _ in procs:
            finish_step([parts[i]], f"{name} shard {i}", [model, src], {"shard": f"{i}/{shards}"}, before)
        with atomic_output(out) as f:
            for part in parts:
                with open(part, encoding="utf-8") as p:
                    shutil.copyfileobj(p, f)
        for part in parts:
            for path in (part, part + ".done"):
                os.unlink(path)

    return steps.step(name, [out], make, inputs=[model, src])


def train_reorderer(cfg: PrepareConfig, src: str, oracle: str, model: str, log_path: Path) -> None:
    """`xlpos-prep train-reorderer` with the configuration's options: the one command every reorderer of a pipeline
    (the model, the jackknife's) is trained with. A killed run's snapshot (MODEL.snapshot) is resumed, which gives
    the model an uninterrupted run gives."""
    resume = os.path.exists(model + ".snapshot")
    if resume:
        log(f"train-reorderer: resuming the snapshot of {model}")
    run_logged(prep_cmd("train-reorderer", "--src", src, "--oracle", oracle, "--model", model, "--seed", str(cfg.seed),
                        "--src-lang", cfg.src,
                        *(["--iterations", str(cfg.reorder_iterations)] if cfg.reorder_iterations else []),
                        *(["--loss", cfg.reorder_loss] if cfg.reorder_loss else []), *cfg.reorder_args,
                        *(["--resume"] if resume else [])),
               log_path, verbose=cfg.verbose)


def write_folds(src: str, oracle: str, n_lines: int, folds: int, path: Callable[[int, str], str]) -> None:
    """Split the first n_lines of `src` and `oracle` into `folds` folds, line i into fold i mod K (interleaved,
    so that a corpus sorted by origin or length gives every fold the same mix): per fold k, the other folds' lines
    (path(k, "train.src"/"train.oracle")) and its own source lines (path(k, "held.src")). Streams."""
    with contextlib.ExitStack() as stack:
        out = {(k, kind): stack.enter_context(atomic_output(path(k, kind)))
               for k in range(folds) for kind in ("train.src", "train.oracle", "held.src")}
        pairs = zip(itertools.islice(iter_lines(src), n_lines), itertools.islice(iter_lines(oracle), n_lines))
        for i, (words, ranks) in enumerate(pairs):
            held = i % folds
            out[held, "held.src"].write(words + "\n")
            for k in range(folds):
                if k != held:
                    out[k, "train.src"].write(words + "\n")
                    out[k, "train.oracle"].write(ranks + "\n")


def interleave_folds(parts: Sequence[str], n_lines: int, out: str) -> None:
    """The inverse of write_folds' split: line i of `out` is the next line of parts[i mod K]."""
    readers = [iter_lines(p) for p in parts]
    with atomic_output(out) as f:
        for i in range(n_lines):
            line = next(readers[i % len(parts)], None)
            if line is None:
                raise InputError(parts[i % len(parts)], None, f"ends before line {i // len(parts) + 1}, which "
                                 f"line {i + 1} of the jackknifed orders needs")
            f.write(line + "\n")


def jackknife_folds(steps: Steps, cfg: PrepareConfig, layout: Layout, src: str, oracle: str, n_reorder: int,
                    logs: Path, seconds: dict, beside: Callable[[], object] | None = None) -> str:
    """The jackknifed orders of the reorderer's n_reorder training lines (`src`, `oracle`); their file. The lines
    are split into K folds and each fold is reordered by a reorderer trained, with the same options and seed, on
    the other K-1 folds (training lines beyond n_reorder are reordered by the model trained on all of them, as
    every other split is: `orders`). So the training split's XL positions are as accurate as those of
    sentences no reorderer saw, which is what the translation model meets at test time. Folds train `cfg.workers`
    at a time, with `beside` (the model on all lines, the longest job: first) when the folds train; each fold's
    model and order follows the completion rule, so a killed run redoes only unfinished folds."""
    folds = cfg.jackknife
    if n_reorder < 2 * folds:
        raise InputError(src, None, f"{n_reorder} reorderer training lines cannot make {folds} jackknife folds of "
                         f"two or more: use --jackknife 1 (or fewer folds)")
    def fold(k: int, kind: str) -> str:
        return layout.jackknife_path(f"fold{k + 1}-of-{folds}.{kind}")

    # the fold's reorderer, named like the full model (.model, .npz)
    models = [fold(k, os.path.splitext(layout.reorderer)[1].lstrip(".") or "model") for k in range(folds)]

    fold_files = [fold(k, kind) for k in range(folds) for kind in ("train.src", "train.oracle", "held.src")]
    seconds["jackknife folds"] = steps.step("jackknife folds", fold_files, lambda: (
        os.makedirs(os.path.dirname(fold_files[0]), exist_ok=True),
        write_folds(src, oracle, n_reorder, folds, fold)), inputs=[src, oracle], settings={"lines": n_reorder})
    orders = [fold(k, "held.order") for k in range(folds)]

    def fold_job(k: int) -> None:
        model = models[k]
        log_path = logs / f"jackknife-fold{k + 1}.log"
        model_inputs = [fold(k, "train.src"), fold(k, "train.oracle")]
        if not step_done([model], model_inputs, reorderer_settings(cfg)):
            start_step([model])
            before = input_identities(model_inputs)
            log(f"jackknife: training the reorderer of fold {k + 1} of {folds}")
            train_reorderer(cfg, fold(k, "train.src"), fold(k, "train.oracle"), model, log_path)
            finish_step([model], f"jackknife fold {k + 1} train-reorderer", model_inputs, reorderer_settings(cfg),
                        before)
        start_step([orders[k]])
        before = input_identities([model, fold(k, "held.src")])
        run_logged(prep_cmd("reorder", "--model", model, "--src", fold(k, "held.src"), "--out", orders[k], "--workers",
                            str(max(1, cfg.workers // min(cfg.workers, folds)))), log_path, verbose=cfg.verbose)
        finish_step([orders[k]], f"jackknife fold {k + 1} reorder", [model, fold(k, "held.src")], None, before)
        log(f"jackknife: fold {k + 1} of {folds} reordered")

    def make_orders() -> None:
        todo = [k for k in range(folds) if not step_done([orders[k]], [models[k], fold(k, "held.src")])]
        jobs = ([beside] if beside is not None else []) + [functools.partial(fold_job, k) for k in todo]
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(cfg.workers, len(jobs)))) as pool:
            for future in [pool.submit(job) for job in jobs]:
                future.result()  # the first failure, after the running jobs end (their work is kept)

    seconds["jackknife reorderers"] = steps.step("jackknife reorderers", orders, make_orders, inputs=fold_files,
                                                 settings=reorderer_settings(cfg))
    folded = layout.jackknife_path(f"train-{folds}-folds.order")
    seconds["jackknife orders"] = steps.step("jackknife orders", [folded],
                                             lambda: interleave_folds(orders, n_reorder, folded), inputs=orders,
                                             settings={"lines": n_reorder})
    return folded


def evaluate_reordering(order: str, oracle: str, out: str, limit: int | None = None) -> None:
    """Kendall tau and FRS of the predicted orders and of the monotone and reversed baselines vs the oracle; with
    `limit`, of the first `limit` lines of both files (the order file may hold more lines than the oracle)."""
    from .metrics import evaluate_orders, monotone_order, parse_order_line, read_orders, reversed_order
    from .oracle import read_oracle
    ranks = read_oracle(oracle)
    if limit is None:
        lengths = [len(r) for r in ranks]
        orders = read_orders(order, lengths, oracle)
    else:
        ranks = ranks[:limit]
        lengths = [len(r) for r in ranks]
        lines = list(itertools.islice(iter_lines(order), limit))
        if len(lines) < len(ranks):
            raise InputError(order, None, f"has {len(lines)} lines, fewer than the {len(ranks)} of {oracle} it is "
                             f"scored against")
        orders = [parse_order_line(line, k, order, i, oracle) for i, (line, k) in enumerate(zip(lines, lengths), 1)]
    with atomic_output(out) as f:
        json.dump({name: asdict(evaluate_orders(o, ranks)) for name, o in (
            ("reorderer", orders), ("monotone", [monotone_order(k) for k in lengths]),
            ("reversed", [reversed_order(k) for k in lengths]))}, f, indent=2)
        f.write("\n")


@dataclass(frozen=True)
class SplitPieces:
    """The files of one split's pieces steps: its words and orders in, its pieces and XL positions out."""
    split: str
    src: str
    tgt: str
    order: str
    xlpos: str
    src_pieces: str
    tgt_pieces: str


def pieces(steps: Steps, cfg: PrepareConfig, files: SplitPieces, spm_model: str, logs: Path,
           makes: tuple[Callable[[], object], Callable[[], object]] | None = None) -> dict[str, float | None]:
    """Source pieces with their XL positions (`positions` writes both, so they line up exactly) and target pieces;
    the wall seconds of the two steps, by name. `makes`: what makes each of them in place of its command (the
    merge's concatenations)."""
    f = files
    position_make, encode_make = makes or (
        lambda: run_logged(prep_cmd("positions", "--src", f.src, "--order", f.order, "--spm", spm_model,
                                    "--out", f.xlpos, "--pieces-out", f.src_pieces, "--workers", str(cfg.workers)),
                           logs / "positions.log", verbose=cfg.verbose),
        lambda: run_logged(prep_cmd("spm-encode", "--model", spm_model, "--input", f.tgt, "--output", f.tgt_pieces),
                           logs / "spm.log", verbose=cfg.verbose))
    return {f"positions {f.split}": steps.step(f"positions {f.split}", [f.xlpos, f.src_pieces], position_make,
                                               inputs=[f.src, f.order, spm_model]),
            f"spm-encode {f.split}": steps.step(f"spm-encode {f.split}", [f.tgt_pieces], encode_make,
                                                inputs=[f.tgt, spm_model])}


def oracle_data_bin(steps: Steps, cfg: PrepareConfig, layout: Layout) -> float | None:
    """Layout.oracle_data_bin: the data-bin's dictionaries and the tokens of cfg.oracle_positions' splits, linked,
    with each split's XL positions made from its oracle ranks, which must cover every line (full_oracle, every line
    aligned). Its wall seconds (Steps.step)."""
    s, t = cfg.src, cfg.tgt
    dest, splits = layout.oracle_data_bin(), cfg.oracle_positions
    spm_model = layout.spm_prefix + ".model"
    logs = Path(layout.logs)

    def make() -> None:
        tmp = dest + ".tmp"  # a killed run's is taken up where it stopped
        os.makedirs(tmp, exist_ok=True)
        for name in os.listdir(layout.data_bin):
            if name.startswith("dict.") or (name.split(".")[0] in splits and ".xlpos." not in name):
                link = os.path.join(tmp, name)
                if not os.path.exists(link):
                    os.symlink(os.path.realpath(os.path.join(layout.data_bin, name)), link)
        for split in splits:
            run_logged(prep_cmd("positions", "--src", layout.path("tok", split, s),
                                "--oracle", layout.path("oracle", split), "--spm", spm_model,
                                "--out", layout.oracle_xlpos(split), "--workers", str(cfg.workers)),
                       logs / "positions.log", verbose=cfg.verbose)
        binarize_positions(tmp, {split: layout.oracle_xlpos(split) for split in splits}, s, t, logs / "preprocess.log",
                           cfg.verbose)
        os.replace(tmp, dest)

    return steps.step("data-bin-oracle", [dest], make, settings={"splits": list(splits)},
                      inputs=[layout.data_bin, spm_model, *(p for split in splits for p in (
                          layout.path("tok", split, s), layout.path("oracle", split)))])


def make_data_bin(src: str, tgt: str, prefixes: dict, dest: str, xlpos: dict, log_path: Path,
                  dicts: str | None = None, verbose: bool = False) -> None:
    """The data-bin fairseq-preprocess would make of the pieces (`prefixes`: split -> PREFIX of PREFIX.{src,tgt};
    a joined dictionary, or the dictionaries of the data-bin `dicts`), made by `xlpos-prep preprocess` without
    fairseq, and `xlpos-prep binarize` of each split's XL positions, built in DEST.tmp and renamed when complete."""
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)  # a killed run's
    names = {"train": "--trainpref", "valid": "--validpref", "test": "--testpref"}
    args = [a for split, prefix in prefixes.items() for a in (names[split], prefix)]
    args += (["--srcdict", f"{dicts}/dict.{src}.txt", "--tgtdict", f"{dicts}/dict.{tgt}.txt"] if dicts
             else ["--joined-dictionary"])
    log(f"data-bin -> {dest}")
    run_logged(prep_cmd("preprocess", "--source-lang", src, "--target-lang", tgt, *args, "--destdir", tmp,
                        "--no-progress"), log_path, verbose=verbose)
    binarize_positions(tmp, xlpos, src, tgt, log_path, verbose)
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.replace(tmp, dest)


def binarize_positions(data_bin: str, xlpos: dict, src: str, tgt: str, log_path: Path, verbose: bool) -> None:
    """`xlpos-prep binarize` of every split's XL positions (`xlpos`: split -> .xlpos file) into `data_bin`, in one
    process (a start-up, not one a split)."""
    if xlpos:
        run_logged(prep_cmd("binarize", "--xlpos", *xlpos.values(), "--split", *xlpos, "--data-bin", data_bin,
                            "--source-lang", src, "--target-lang", tgt, "--no-progress"), log_path, verbose=verbose)


# ------------------------------------------------------------------------------------------------ CLI: prepare
def run_prepare(args: argparse.Namespace) -> int:
    cfg = PrepareConfig(
        src=args.src, tgt=args.tgt, workers=args.workers, seed=args.seed, align_lines=args.align_lines,
        reorder_train_lines=args.reorder_train_lines, reorder_iterations=args.reorder_iterations,
        reorder_loss=args.reorder_loss or "", reorder_args=shlex.split(args.reorder_args or ""),
        reorder_shards=args.reorder_shards, jackknife=args.jackknife, attach_null=args.attach_null or "",
        spm_vocab=args.spm_vocab, spm_type=args.spm_type, spm_coverage=args.spm_coverage,
        data_bin=not args.no_data_bin, verbose=args.verbose_steps,
        **oracle_settings(args.oracle_positions, args.align_lines))
    if args.global_steps:
        stage = Stage("global")
    elif args.shard is not None:
        shard = Shard.parse(args.shard)
        stage = Stage("shard", shard.index, shard.count)
    elif args.merge is not None:
        stage = Stage("merge", 0, args.merge)
    else:
        stage = Stage()
    prepare(cfg, Layout.recipe(args.work), stage)
    return 0


def split_list(text: str) -> tuple[str, ...]:
    """argparse type: comma-separated split names, each once."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in SPLITS]
    if not names or unknown or len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"expected some of {', '.join(SPLITS)}, comma-separated, each once; "
                                         f"not {text!r}")
    return names


def oracle_settings(splits: tuple[str, ...] | None, align_lines: int) -> dict:
    """PrepareConfig's settings for --oracle-positions: those splits aligned (with test, as always), their
    reordering scored, and, with train, the oracle ranks of every training line."""
    if not splits:
        return {}
    if "train" in splits and align_lines:
        raise ValueError("--oracle-positions train needs every training line aligned: leave out --align-lines")
    aligned = tuple(s for s in SPLITS if s in ("train", "test") or s in splits)
    return {"oracle_positions": splits, "align_splits": aligned, "full_oracle": "train" in splits,
            "eval_splits": tuple(s for s in aligned if s != "train")}


def configure_prepare(p: argparse.ArgumentParser) -> None:
    p.epilog = """examples:
  xlpos-prep prepare --work work --src ja --tgt en --workers 2
  xlpos-prep prepare --work work --src en --tgt de --align-lines 1000000 --reorder-train-lines 100000 \\
      --spm-vocab 32000 --spm-type bpe --reorder-shards 4 --workers 16

across machines (the same options for every run; recipes/slurm_prepare.sh submits them as Slurm jobs):
  xlpos-prep prepare --work work --src en --tgt de --global-steps     # alignment, oracle, reorderers, spm: once
  xlpos-prep prepare --work work --src en --tgt de --shard 0/64       # ... and 1/64 ... 63/64, on any machines
  xlpos-prep prepare --work work --src en --tgt de --merge 64         # joins them, then scores and data-bin

reads WORK/tok/{train,valid,test}.{SRC,TGT} (tokenized words, one sentence per line, no empty line) and writes
WORK/reorder/, WORK/spm/, WORK/pieces/, WORK/data-bin/ and WORK/prepare.json (the settings); see docs/pipeline.md.
Every step is skipped when it completed: rerun to resume. The merged work directory holds exactly what one
machine's run writes (and WORK/shards/, which can be deleted then)."""
    p.add_argument("--work", required=True, help="work directory holding tok/")
    p.add_argument("--src", required=True, help="source language code (file suffix)")
    p.add_argument("--tgt", required=True, help="target language code")
    p.add_argument("--workers", type=WORKERS, default=1, help="processes for per-sentence steps")
    p.add_argument("--seed", type=SEED, default=1)
    p.add_argument("--align-lines", type=int_option(0, 10**12), default=0,
                   help="align the first N training pairs (plus test; 0: all)")
    p.add_argument("--reorder-train-lines", type=int_option(0, 10**12), default=0,
                   help="train the reorderer on the first N aligned pairs (0: all)")
    p.add_argument("--reorder-iterations", type=int_option(0, 10_000), default=10,
                   help="reorderer training passes (default 10; 0: train-reorderer's default)")
    p.add_argument("--reorder-loss", help="the reorderer's training loss (default: train-reorderer's)")
    p.add_argument("--reorder-args", help="further train-reorderer options, one string")
    p.add_argument("--reorder-shards", type=int_option(1, 1024), default=1,
                   help="reorder each split as N parallel --shard jobs")
    p.add_argument("--jackknife", type=int_option(1, 100), default=JACKKNIFE_FOLDS, metavar="K",
                   help=f"label the reorderer's own training lines with K reorderers, each trained without its "
                        f"fold, so that training positions are as accurate as test ones (default {JACKKNIFE_FOLDS}; "
                        f"1: label them with the model trained on them)")
    p.add_argument("--attach-null", choices=("left", "right"),
                   help="oracle attachment of unaligned source words (default: left for a ja source, else right)")
    p.add_argument("--spm-vocab", type=int_option(2, 10_000_000), default=8000)
    p.add_argument("--spm-type", choices=("unigram", "bpe"), default="unigram")
    p.add_argument("--spm-coverage", type=float_option(0, 1, lo_open=True), default=1.0)
    p.add_argument("--oracle-positions", type=split_list, metavar="SPLITS",
                   help="also make WORK/data-bin-oracle: these splits (e.g. train,valid) with XL positions from "
                        "their oracle ranks instead of the reorderer's, for the oracle ablation; aligns them (with "
                        "train: every training line) and scores their reordering")
    p.add_argument("--no-data-bin", action="store_true",
                   help="stop before the data-bin (the binarized tokens and XL positions)")
    p.add_argument("--verbose-steps", action="store_true", help="show every step's log as well as writing it")
    stage = p.add_mutually_exclusive_group()
    stage.add_argument("--global-steps", action="store_true",
                       help="run only the steps made once for the whole corpus (alignment, oracle, reorderers, "
                            "sentencepiece) and stop: the per-sentence steps are then --shard and --merge runs")
    stage.add_argument("--shard", type=shard_option, metavar="I/N",
                       help="the per-sentence steps (reorder, positions, spm-encode) of contiguous block I of N "
                            "(0 <= I < N) of every split, into WORK/shards/I-of-N/; after --global-steps; the N "
                            "shards may run at once, on any machines sharing WORK")
    stage.add_argument("--merge", type=int_option(1, 1_000_000), metavar="N",
                       help="join the N shards' parts into the final orders, pieces and XL positions, then score "
                            "the orders and make the data-bin; refuses while a shard is missing or out of date")
    p.set_defaults(run=run_prepare)
    declare_files(p, input_dirs=("work",))


# ------------------------------------------------------------------------------------------------ CLI: step
@dataclass
class StepRequest:
    """`xlpos-prep step` parsed: what the command makes and how to run it."""
    outputs: list
    command: list
    stdout: bool = False
    log: str | None = None
    show: bool = False
    message: str | None = None


def parse_step(words: Sequence[str]) -> StepRequest:
    words = list(words)
    if "--" not in words:
        raise ValueError("expected OUTPUT... [--stdout] [--log FILE [--show]] [--message TEXT] -- COMMAND...")
    cut = words.index("--")
    head, command = words[:cut], words[cut + 1:]
    req = StepRequest([], command)
    k = 0
    while k < len(head):
        word = head[k]
        if word in ("--log", "--message"):
            if k + 1 >= len(head):
                raise ValueError(f"{word} needs a value")
            setattr(req, word[2:], head[k + 1])
            k += 2
            continue
        if word in ("--stdout", "--show"):
            setattr(req, word[2:], True)
        elif word.startswith("--"):
            raise ValueError(f"unknown option {word} before '--'")
        else:
            req.outputs.append(word)
        k += 1
    if not req.outputs or not req.command:
        raise ValueError("expected OUTPUT... -- COMMAND... (at least one of each)")
    if req.stdout and len(req.outputs) != 1:
        raise ValueError(f"--stdout writes one output, not {len(req.outputs)}")
    return req


def run_step(args: argparse.Namespace) -> int:
    """OUTPUT... [options] -- CMD...: run CMD unless the step making OUTPUT... completed; mark it complete after
    (Steps.step, the pipeline's own rule)."""
    req = parse_step(args.words)
    name = req.message or os.path.basename(req.command[0])
    command, inputs = command_record(req.command, req.outputs)
    ran = []

    def make() -> None:
        ran.append(time.perf_counter())
        before = input_identities(inputs)
        if req.message:
            log(req.message)
        if req.log is not None:
            run_logged(req.command, req.log, stdout_path=req.outputs[0] if req.stdout else None, verbose=req.show)
        elif req.stdout:
            with atomic_output(req.outputs[0]) as out:
                status = run_child(req.command, stdout=out)
                if status:  # leaves no output: atomic_output removes its temporary
                    raise StepFailed(f"{os.path.basename(req.command[0])} failed (exit {status}); {req.outputs[0]} "
                                     f"not written")
        else:
            status = run_child(req.command)
            if status:
                raise StepFailed(f"{os.path.basename(req.command[0])} failed (exit {status}); {req.outputs[0]} not "
                                 f"marked done")
        # a file the command names that changed while it ran is one it writes without its being an OUTPUT: not an
        # input (recorded as one, it would make every rerun run it again)
        inputs[:] = [p for p in inputs if path_identity(p) == before[os.path.abspath(p)]]

    with directory_lock(os.path.dirname(os.path.abspath(req.outputs[0]))):
        Steps().step(name, req.outputs, make, inputs=inputs, settings={"command": command, "stdout": req.stdout})
    if ran and req.message:
        log(f"done in {time.perf_counter() - ran[0]:.0f} s: {' '.join(req.outputs)}")
    return 0


def configure_step(p: argparse.ArgumentParser) -> None:
    p.usage = "xlpos-prep step OUTPUT... [--stdout] [--log FILE [--show]] [--message TEXT] -- COMMAND [ARG...]"
    p.epilog = """examples:
  xlpos-prep step data/train.en --stdout -- curl -fsSL https://example.org/train.en
  xlpos-prep step ckpt/xl-input --log ckpt/xl-input/train.log --message "train xl-input" -- fairseq-train ...

COMMAND makes OUTPUT...; it is skipped while every OUTPUT is what this command made from the files it names
(recorded in OUTPUT.done, written after it succeeded and every OUTPUT exists), else run: a changed command, a
changed file it reads or a changed, truncated or deleted OUTPUT runs it again. One step per output directory at
a time. --stdout: COMMAND's standard output is OUTPUT,
written atomically. --log: COMMAND's output is appended to FILE (--show: and shown), whose end is shown when it
fails. --message: logged when the step runs. The rule is the pipeline's (docs/pipeline.md)."""
    p.add_argument("words", nargs=argparse.REMAINDER, help="OUTPUT... [options] -- COMMAND...")
    p.set_defaults(run=run_step)
