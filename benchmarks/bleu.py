"""BLEU of the XL systems (InXL, HeadXL, rotary XL) against fairseq's vanilla Transformer on real corpora.

Pairs (corpora in ../shared/data):
  ja-en, en-ja  Tanaka corpus subset (enja/: 50k train, 500 dev; tokenized, English lowercased, Japanese KyTea).
                There is no test split: the LAST --test-lines (1000) training lines are held out as the test set
                and never trained on; --train-lines N then takes the first N of the remaining lines. dev = valid.
  en-de         Multi30k task 1 (ende/: raw cased text): train (29k), val (valid), test_2016_flickr (test).
                Tokenized with sacremoses (xlpos-prep tokenize) for alignment, reordering and sentencepiece;
                outputs are detokenized (sacremoses) before scoring against the raw references.
  synth         the quickstart's synthetic corpus (xlpos-prep synth: English-like -> head-final, made-up words;
                10k train, 500 valid, 500 test, seed 1), generated into --work; the one pair with a gold word
                alignment (test.gold-align), so --attention-aer scores attention against the truth there. Not in
                the default --pairs.

Pipeline per pair: the corpus's splits are selected and tokenized here; everything from the word alignment to the
data-bin is the package's pipeline (xlpos_prep.pipeline.prepare, the one the recipes run as `xlpos-prep prepare`;
docs/pipeline.md), in this benchmark's cache layout: align train+valid+test together (one alignment, made
en-ja / en-de, serves both directions of a corpus) -> oracle ranks per split -> BTG reorderer -> orders of every
split -> Kendall tau / FRS of the valid and test orders -> joint sentencepiece -> piece-level XL positions ->
data-bin. Every step is skipped when it completed, so a rerun resumes. Then, what is specific to this experiment:
the oracle-positions data-bin, per system and seed fairseq-train with ONE fixed small configuration and the same
update budget, decoding valid and test (xlpos_prep.translate, as the recipes decode), scores, significance.

Systems: vanilla (fairseq `--task translation --arch transformer`, same data-bin), input, head, rope
(`--task translation_xlpos --arch transformer_xlpos --xl-integration X`, the plugin's other defaults).
--ablation-oracle adds "<system>-oracle" for every selected XL system (or name them: --systems input-oracle):
trained and evaluated on valid with XL positions from the alignment oracle (ranks stably sorted) instead of the
reorderer. "<system>-monotone" (e.g. --systems rope-monotone) is the XL model given the source positions as XL
positions (--xl-positions monotone): the integration's own effect, with no reordering information. Every XL
system trained on reorderer positions is also decoded on valid with the oracle positions ("valid@oracle-positions"):
what the reorderer's test-time errors cost, without retraining. More systems by name (grammar in --help): HeadXL
variants (head-k2-l01: 2 XL heads in layers 0 and 1), InXL fusions (input-sum, input-gated), encoder-free models
(encfree-vanilla, encfree-input: --encoder-layers 0), and the controls X-monotone (rope-monotone is the rotary
baseline without XL) and X-random (trained on random permutations, --xl-contrast random).

Evidence (issue 12): every system is tested against vanilla on test, and every XL system against its controls
(X-monotone, X-random; encfree-input against encfree-vanilla; --compare A:B for any other pair), with sacreBLEU's
paired bootstrap and approximate randomization on BLEU and chrF (xlpos_prep.significance): p-values and
95% confidence intervals per seed pair (system and baseline trained with the same seed; the count of significant
pairs is reported) and on the seed-concatenated test set, labelled anti-conservative. --contrast all decodes test
again with every XL model fed monotone, reversed, random and locally shuffled XL positions (test@KIND; the BLEU
change is printed). --attention-aer scores the word alignments in every model's encoder-decoder attention
(xlpos/evaluation/align_attention.py) against the eflomal alignment of test (silver: the real corpora have no gold)
or, on synth, against the true alignment (gold; eflomal's own AER against it is reported too).
--no-train gathers what is there: every (system, seed) whose training has finished is scored (missing scores are
computed) and reported, the others are left out, so runs made by several invocations end up in one JSON.

Scores (sacreBLEU; signatures in the JSON): BLEU and chrF on test and valid; for ja-en/en-ja on the corpus's own
tokenization (BLEU tokenize=none: KyTea words for Japanese, lowercased Moses-style words for English), plus RIBES
(nltk) on the same tokens; for en-de detokenized BLEU (13a) and chrF against the raw references. Test BLEU is also
computed per bucket of source length and of how much the reorderer moves the sentence (Kendall tau of the
predicted order against the source order), for the plot (benchmarks/plot_bleu.py).

    python benchmarks/bleu.py --pairs ja-en --systems vanilla,input --seeds 1 --max-update 30 --train-lines 2000 \
        --work /tmp/bleu-smoke --out /tmp/bleu-smoke/results.json --plot /tmp/bleu-smoke/bleu.png
    python benchmarks/bleu.py --seeds 1,2 --ablation-oracle --out results.json --plot docs/bleu_by_length.png
    python benchmarks/bleu.py --pairs en-de --test-src my.en --test-ref my.de      # a further held-out set
    python benchmarks/bleu.py --no-train --seeds 1,2 --systems vanilla,input,head,rope,input-oracle --out r.json
    python benchmarks/bleu.py --pairs ja-en --systems vanilla,input,input-random,rope,rope-monotone --contrast all \
        --attention-aer --compare rope:input
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO))

from xlpos_prep.io import InputError, atomic_output, read_lines, step_done  # noqa: E402
from xlpos_prep.pipeline import (JACKKNIFE_FOLDS, Layout, PrepareConfig, StepFailed, Steps, prep_cmd,  # noqa: E402
                                 prepare)
from xlpos_prep.pipeline import run as run_step_command  # noqa: E402
from xlpos_prep.reorderer import Reorderer  # noqa: E402
from xlpos_prep import significance  # noqa: E402
from xlpos_prep.text import Detokenizer, write_lines  # noqa: E402
from xlpos_prep.systems import (ENCFREE_PREFIX, MONOTONE_SUFFIX, ORACLE_SUFFIX, RANDOM_SUFFIX,  # noqa: E402
                                SYSTEM_GRAMMAR, parse_system, task_args, train_command)
from xlpos_prep.translate import generate, hypothesis_words  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_records  # noqa: E402
from run_records import machine_info  # noqa: E402
from buckets import (BucketSpec, assign_buckets, bucket_bleu, make_buckets, order_tau,  # noqa: E402,F401
                     pooled_bucket_bleu, quantile_edges)

SYSTEMS = ("vanilla", "input", "head", "rope")
XL_SYSTEMS = ("input", "head", "rope")
VALID_ORACLE_POSITIONS = "valid@oracle-positions"
CONTRASTS = ("monotone", "reversed", "random", "local-shuffle")  # translation_xlpos --xl-contrast at test time


@dataclass(frozen=True)
class PairSpec:
    """One translation direction and where its corpus lives."""
    name: str
    corpus: str                   # directory under --data; also the cache key shared by both directions
    src: str
    tgt: str
    split_files: dict             # split -> file stem in the corpus directory; test=None: held out from train
    pretokenized: bool            # the corpus is already word-tokenized (scored on its tokens)
    ribes: bool                   # also RIBES (Japanese pairs)
    synthetic: bool = False       # generated by `xlpos-prep synth` (fixed seed), with the true test alignment

    @property
    def align_langs(self) -> tuple[str, str]:
        """The corpus's canonical (source, target) for the one alignment both directions share."""
        return {"enja": ("en", "ja"), "ende": ("en", "de")}.get(self.corpus, (self.src, self.tgt))

    @property
    def gold_alignment(self) -> str | None:
        """File name of the test set's true word alignment in the corpus directory (None: no gold exists)."""
        return "test.gold-align" if self.synthetic else None

    @property
    def bleu_tokenize(self) -> str:
        return "none" if self.pretokenized else "13a"


PAIRS: dict[str, PairSpec] = {
    "ja-en": PairSpec("ja-en", "enja", "ja", "en", {"train": "train", "valid": "dev", "test": None}, True, True),
    "en-ja": PairSpec("en-ja", "enja", "en", "ja", {"train": "train", "valid": "dev", "test": None}, True, True),
    "en-de": PairSpec("en-de", "ende", "en", "de",
                      {"train": "train", "valid": "val", "test": "test_2016_flickr"}, False, False),
    "synth": PairSpec("synth", "synth", "src", "tgt", {"train": "train", "valid": "valid", "test": "test"}, True,
                      False, synthetic=True),
}
# the synthetic corpus (xlpos-prep synth, English-like -> head-final, gold alignments): the quickstart's sizes, but
# 500 test sentences; seed fixed, so every machine generates the same corpus
SYNTH_CORPUS = {"train": 10000, "valid": 500, "test": 500, "seed": 1}
SPLITS = ("train", "valid", "test")
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

    def fairseq_args(self) -> list[str]:
        return [
            "--share-all-embeddings",
            "--encoder-layers", str(self.encoder_layers), "--decoder-layers", str(self.decoder_layers),
            "--encoder-embed-dim", str(self.embed_dim), "--decoder-embed-dim", str(self.embed_dim),
            "--encoder-ffn-embed-dim", str(self.ffn_dim), "--decoder-ffn-embed-dim", str(self.ffn_dim),
            "--encoder-attention-heads", str(self.heads), "--decoder-attention-heads", str(self.heads),
            "--dropout", str(self.dropout), "--weight-decay", str(self.weight_decay),
            "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", "0.0",
            "--lr", str(self.lr), "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(self.warmup),
            "--warmup-init-lr", "1e-07",
            "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", str(self.label_smoothing),
            "--max-tokens", str(self.max_tokens), "--max-update", str(self.max_update),
            # fairseq 0.12 drops the last batch when its size is not a multiple of this (default 8; fairseq issue
            # #5036): in training the longest sentences, in generation sentences without a translation
            "--required-batch-size-multiple", "1",
        ]


# ------------------------------------------------------------------------------------------------ small helpers
def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(str(path)) as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def run(cmd: Sequence, log_path: Path, stdout_path: Path | None = None,
        cpu_seconds: list[float] | None = None) -> float:
    """A command of a step (xlpos_prep.pipeline.run: output appended to log_path, stdout to stdout_path
    atomically); its wall seconds (its CPU seconds appended to cpu_seconds when given). A failure raises
    StepFailed, which main() turns into one line."""
    log("$ " + shlex.join(str(c) for c in cmd))
    t0 = time.perf_counter()
    run_step_command(cmd, log_path, stdout_path, cpu_seconds=cpu_seconds)
    return time.perf_counter() - t0


# ------------------------------------------------------------------------------------------------ scoring
def score_translations(hyps: list[str], refs: list[str], tokenize: str, ribes_tokens: tuple | None,
                       buckets: BucketSpec | None) -> dict:
    """BLEU + chrF (sacreBLEU, with signatures) and RIBES on given token lists (xlpos_prep.scoring, as the recipes
    score), plus BLEU per bucket."""
    from xlpos_prep.scoring import corpus_scores
    out = corpus_scores(hyps, refs, tokenize, chrf=True, ribes_tokens=ribes_tokens)
    if buckets is not None:
        out["bleu_by_length"] = bucket_bleu(hyps, refs, buckets.length_of, len(buckets.length_labels), tokenize)
        out["bleu_by_reordering"] = bucket_bleu(hyps, refs, buckets.reorder_of, len(buckets.reorder_labels),
                                                tokenize)
    return out


def summarize(values: Sequence[float]) -> dict:
    """Mean and spread over seeds (sample standard deviation, min, max)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"n": 0}
    return {"mean": round(statistics.fmean(vals), 2),
            "std": round(statistics.stdev(vals), 2) if len(vals) > 1 else None,
            "min": min(vals), "max": max(vals), "n": len(vals), "values": list(vals)}


# ------------------------------------------------------------------------------------------------ fairseq logs
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


# ------------------------------------------------------------------------------------------------ data preparation
@dataclass
class EvalSet:
    """One evaluation set of a pair: binarized data, scoring references and bucket definitions."""
    name: str                     # valid | test | extra:<name>
    data_bin: Path
    subset: str                   # fairseq --gen-subset
    refs: list[str]               # what hypotheses are scored against (raw text for en-de)
    ref_tokens: list[list[str]]   # tokenized references (RIBES)
    buckets: BucketSpec | None
    generate_args: tuple = ()     # further fairseq-generate options (contrastive XL positions)
    xl_only: bool = False         # only for XL models reading the reorderer's positions


@dataclass
class PreparedPair:
    spec: PairSpec
    root: Path
    data_bin: Path
    oracle_data_bin: Path
    gold_alignment: Path                             # what --attention-aer scores against (attention_reference)
    eval_sets: dict = field(default_factory=dict)   # name -> EvalSet
    info: dict = field(default_factory=dict)         # for the JSON


def corpus_lines_tag(spec: PairSpec, args: argparse.Namespace) -> str:
    tag = f"train{args.train_lines or 'all'}"
    if spec.split_files["test"] is None:
        tag += f"-holdout{args.test_lines}"
    if args.data_replica:
        tag += f"-replica{args.data_replica}"
    return tag


def select_splits(spec: PairSpec, data: Path, lang: str, train_lines: int, test_lines: int) -> dict[str, list[str]]:
    """The lines of every split of one language. Without a test file the test set is the LAST test_lines
    training lines, removed from training; then train_lines (if > 0) keeps the first lines of the rest."""
    lines = {s: read_lines(str(data / f"{stem}.{lang}")) for s, stem in spec.split_files.items() if stem}
    if spec.split_files["test"] is None:
        if len(lines["train"]) <= test_lines:
            raise SystemExit(f"{data}/train.{lang}: {len(lines['train'])} lines, not more than --test-lines "
                             f"{test_lines}")
        lines["test"] = lines["train"][-test_lines:]
        lines["train"] = lines["train"][:-test_lines]
    if train_lines:
        lines["train"] = lines["train"][:train_lines]
    return lines


def corpus_dir(spec: PairSpec, args: argparse.Namespace) -> Path:
    """Where the pair's corpus files are: under --data, or, for the synthetic pair, generated once into --work by
    `xlpos-prep synth` with the fixed SYNTH_CORPUS settings (seconds; the same files on every machine)."""
    if not spec.synthetic:
        return Path(args.data) / spec.corpus
    root = Path(args.work) / f"corpus-{spec.corpus}"
    out = root / "generated"
    sizes = [f"--{split}={SYNTH_CORPUS[split]}" for split in SPLITS]
    Steps(root / "times.json").step("synth", [out], lambda: run(
        prep_cmd("synth", "--out-dir", out, *sizes, "--seed", str(SYNTH_CORPUS["seed"])), root / "logs" / "synth.log"))
    return out


def prepare_corpus(spec: PairSpec, args: argparse.Namespace) -> tuple[Path, dict]:
    """Tokenized splits of both languages and raw references, shared by the corpus's two directions (so is the
    alignment the pipeline makes under align/). Returns (directory, info)."""
    root = Path(args.work) / f"corpus-{spec.corpus}" / corpus_lines_tag(spec, args)
    times = Steps(root / "times.json")
    data = corpus_dir(spec, args)
    langs = spec.align_langs
    tok = root / "tok"
    raw = root / "raw"

    def make_text() -> None:
        from xlpos_prep.text import check_parallel
        for lang in langs:
            lines = select_splits(spec, data, lang, args.train_lines, args.test_lines)
            for split in SPLITS:
                write_lines(raw / f"{split}.{lang}", lines[split])
        for lang in langs:
            for split in SPLITS:
                if spec.pretokenized:
                    write_lines(tok / f"{split}.{lang}", (" ".join(x.split()) for x in read_lines(
                        str(raw / f"{split}.{lang}"))))
                else:
                    run(prep_cmd("tokenize", "--lang", lang, "--input", raw / f"{split}.{lang}",
                                 "--output", tok / f"{split}.{lang}", "--workers", str(args.workers)),
                        root / "logs" / "tokenize.log")
        for split in SPLITS:
            check_parallel([str(tok / f"{split}.{lang}") for lang in langs])

    outputs = [tok / f"{s}.{lang}" for s in SPLITS for lang in langs] + [raw / f"{s}.{lang}" for s in SPLITS
                                                                          for lang in langs]
    times.step("tokenize", outputs, make_text)
    counts = {s: len(read_lines(str(tok / f"{s}.{langs[0]}"))) for s in SPLITS}
    held_out = spec.split_files["test"] is None
    info = {"corpus": str(data), "sentences": counts,
            "align_seconds": None,  # the pipeline's alignment step (prepare_pair)
            "test_set": (f"last {args.test_lines} lines of {data}/train.* (held out, never trained on)"
                         if spec.split_files["test"] is None else f"{data}/{spec.split_files['test']}.*"),
            "valid_set": f"{data}/{spec.split_files['valid']}.*",
            "train_set": f"{'first ' + str(args.train_lines) + ' lines of ' if args.train_lines else ''}"
                         f"{data}/train.*{' without the held-out test lines' if held_out else ''}",
            # (the words of the runs recorded so far were made by recipes/text_tools.py, now xlpos-prep tokenize:
            # the same tokenizer; the text is kept so that those records regenerate byte for byte)
            "tokenization": "as distributed" if spec.pretokenized else
                            "sacremoses (recipes/text_tools.py tokenize, escape=False, aggressive dash splits)"}
    return root, info


def pipeline_layout(spec: PairSpec, corpus_root: Path, root: Path) -> Layout:
    """This benchmark's cache layout of the pipeline's files: tokens and the alignment per corpus (both directions
    share them), the rest per pair and data setting."""
    a0, a1 = spec.align_langs
    c, r = str(corpus_root), str(root)
    return Layout(tok=f"{c}/tok/{{split}}.{{lang}}", align_input=f"{c}/align/all.{{lang}}",
                  align_all=f"{c}/align/all.align", alignment=f"{r}/oracle/{{split}}.align",
                  oracle_src=f"{r}/oracle/{{split}}.src", oracle=f"{r}/oracle/{{split}}.oracle",
                  reorderer_src=f"{r}/reorder/train-subset.src", reorderer_oracle=f"{r}/reorder/train-subset.oracle",
                  reorderer=f"{r}/reorder/reorderer.npz", order=f"{r}/reorder/{{split}}.order",
                  evaluation=f"{r}/reorder/{{split}}.scores.json", spm_prefix=f"{r}/spm/spm",
                  pieces=f"{r}/pieces/{{split}}.{{lang}}", xlpos=f"{r}/pieces/{{split}}.xlpos",
                  data_bin=f"{r}/data-bin", logs=f"{r}/logs", config=f"{r}/prepare.json",
                  times=f"{r}/times.json", align_times=f"{c}/times.json")


def adopt_earlier_cache(spec: PairSpec, layout: Layout) -> None:
    """A cache made before this benchmark ran the package's pipeline: its alignment step's outputs were the
    per-split files align/SPLIT.A0-A1.align (made from align/all.align), its oracle step wrote oracle/SPLIT.align
    before the oracle ranks, and the reordering scores had no marker. Those files are complete when the steps
    that made them completed: mark them, so that the pipeline skips what is done."""
    from xlpos_prep.io import finish_step
    a0, a1 = spec.align_langs
    align_dir = Path(layout.align_all).parent
    if step_done([align_dir / f"{x}.{a0}-{a1}.align" for x in SPLITS]) and os.path.exists(layout.align_all):
        finish_step([layout.align_all], "align (train+valid+test), made by an earlier bleu.py")
    for split in SPLITS:
        if step_done([layout.path("oracle", split)]) and os.path.exists(layout.path("alignment", split)):
            finish_step([layout.path("alignment", split)], f"alignment {split}, made by an earlier bleu.py")
    for split in ("valid", "test"):
        if step_done([layout.path("order", split)]) and os.path.exists(layout.path("evaluation", split)):
            finish_step([layout.path("evaluation", split)], f"evaluate {split}, made by an earlier bleu.py")


def contrast_set_name(kind: str, args: argparse.Namespace) -> str:
    """test@KIND, with the window of local-shuffle and a seed other than the task's default 1."""
    name = f"test@{kind}" + (f"-k{args.contrast_window}" if kind == "local-shuffle" else "")
    return name + (f"-s{args.contrast_seed}" if kind in ("random", "local-shuffle") and args.contrast_seed != 1 else "")


def data_tag(spec: PairSpec, args: argparse.Namespace) -> str:
    reord = f"ro{args.reorder_iterations or 'def'}" + (f"x{args.reorder_lines}" if args.reorder_lines else "")
    if args.reorder_args:  # other reorderer settings make other data: their own replica folder
        reord += ".a" + hashlib.sha1(" ".join(shlex.split(args.reorder_args)).encode()).hexdigest()[:8]
    if args.jackknife > 1:  # data of K = 1 keeps the folder name it had before jackknifing existed
        reord += f".jk{args.jackknife}"
    return f"{corpus_lines_tag(spec, args)}.spm{args.spm_vocab}.{reord}"


def reorderer_settings(model: Path) -> dict:
    """The model file's configuration and training options (no weights, no training history)."""
    header = Reorderer.load(str(model)).header()
    return {**header["config"], "training": header["training"].get("options", {})}


def prepare_pair(spec: PairSpec, args: argparse.Namespace, extra_sets: list[tuple[str, Path, Path]]) -> PreparedPair:
    corpus_root, corpus_info = prepare_corpus(spec, args)
    root = Path(args.work) / spec.name / data_tag(spec, args)
    times = Steps(root / "times.json")
    logs = root / "logs"
    s, t = spec.src, spec.tgt
    tok = corpus_root / "tok"
    layout = pipeline_layout(spec, corpus_root, root)
    adopt_earlier_cache(spec, layout)
    # the pipeline, with what this benchmark needs besides the recipes' defaults: every split aligned (valid's
    # oracle serves the oracle-positions ablation), in the corpus's canonical direction, oracle ranks of every
    # aligned training line, reordering scores on valid and test
    prepared = prepare(PrepareConfig(
        src=s, tgt=t, workers=args.workers, align_splits=SPLITS, align_reversed=(s, t) != spec.align_langs,
        full_oracle=True, reorder_train_lines=args.reorder_lines, reorder_iterations=args.reorder_iterations,
        reorder_args=shlex.split(args.reorder_args), jackknife=args.jackknife,
        eval_splits=("valid", "test"), spm_vocab=args.spm_vocab, spm_type="unigram",
        seed=args.data_replica or 1), layout)
    times = Steps(root / "times.json")  # as prepare() left it
    corpus_info["align_seconds"] = prepared.seconds["align (train+valid+test)"]
    oracle_dir = root / "oracle"
    reo = root / "reorder"
    model = Path(layout.reorderer)
    reorderer_seconds = prepared.seconds["train-reorderer"]
    reorder_seconds = {split: prepared.seconds[f"reorder {split}"] for split in SPLITS}
    reordering = {split: read_json(Path(layout.path("evaluation", split))) for split in ("valid", "test")}
    log(f"{spec.name}: reorderer on test: tau {reordering['test']['reorderer']['corpus_tau']:.4f} "
        f"FRS {reordering['test']['reorderer']['corpus_frs']:.4f} (monotone tau "
        f"{reordering['test']['monotone']['corpus_tau']:.4f})")
    spm = root / "spm" / "spm"
    pieces = root / "pieces"
    data_bin = Path(layout.data_bin)

    # ---- oracle ablation: the same tokens, XL positions from the oracle ranks (cheap: seconds)
    oracle_bin = root / "data-bin-oracle"

    def make_oracle_bin() -> None:
        tmp = root / "data-bin-oracle.tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        for f in data_bin.iterdir():
            if f.name.startswith("dict.") or (f.name.split(".")[0] in ("train", "valid")
                                              and ".xlpos." not in f.name):
                link = tmp / f.name
                if not link.exists():
                    link.symlink_to(f.resolve())
        for split in ("train", "valid"):
            run(prep_cmd("positions", "--src", tok / f"{split}.{s}", "--oracle", oracle_dir / f"{split}.oracle",
                     "--spm", f"{spm}.model", "--out", pieces / f"{split}.oracle.xlpos",
                     "--workers", str(args.workers)), logs / "positions.log")
            run(prep_cmd("binarize", "--xlpos", pieces / f"{split}.oracle.xlpos", "--data-bin", tmp, "--split",
                     split, "--source-lang", s, "--target-lang", t, "--no-progress"), logs / "preprocess.log")
        tmp.replace(oracle_bin)

    times.step("data-bin-oracle", [oracle_bin], make_oracle_bin)

    gold = Path(corpus_info["corpus"]) / spec.gold_alignment if spec.gold_alignment else oracle_dir / "test.align"
    pair = PreparedPair(spec, root, data_bin, oracle_bin, gold)
    corpus_raw = corpus_root / "raw"
    for split in ("valid", "test"):
        sources = [x.split() for x in read_lines(str(tok / f"{split}.{s}"))]
        orders = [[int(i) for i in x.split()] for x in read_lines(str(reo / f"{split}.order"))]
        if split == "test":  # what the seed-pooled buckets need of this replica (pooled_bucket_bleu)
            test_sentences = {"source_words": [len(x) for x in sources],
                              "reorderer_tau": [round(order_tau(o), 4) for o in orders]}
        refs = read_lines(str((tok if spec.pretokenized else corpus_raw) / f"{split}.{t}"))
        ref_tokens = [x.split() for x in read_lines(str(tok / f"{split}.{t}"))]
        pair.eval_sets[split] = EvalSet(split, data_bin, split, refs, ref_tokens, make_buckets(sources, orders))
    # the reorderer-trained XL models decoding with oracle positions: how much the reorderer's test-time
    # errors cost, without retraining (the '-oracle' systems answer the question with retraining)
    valid = pair.eval_sets["valid"]
    pair.eval_sets[VALID_ORACLE_POSITIONS] = EvalSet(VALID_ORACLE_POSITIONS, oracle_bin, "valid", valid.refs,
                                                     valid.ref_tokens, None, xl_only=True)
    test = pair.eval_sets["test"]
    for kind in args.contrast:
        # the same trained XL model fed other XL positions at test time: what its reorderer positions are worth
        extra_args = ("--xl-contrast", kind, "--xl-contrast-seed", str(args.contrast_seed))
        if kind == "local-shuffle":
            extra_args += ("--xl-contrast-window", str(args.contrast_window))
        pair.eval_sets[contrast_set_name(kind, args)] = EvalSet(
            contrast_set_name(kind, args), data_bin, "test", test.refs, test.ref_tokens, None, extra_args, True)
    for name, src_path, ref_path in extra_sets:
        pair.eval_sets[f"extra:{name}"] = prepare_extra(spec, args, root, times, name, src_path, ref_path,
                                                        model, f"{spm}.model", data_bin)

    if not spec.pretokenized:
        # ceiling of the scoring pipeline: the references tokenized and detokenized again, scored as hypotheses
        detok = Detokenizer("moses", t)
        test = pair.eval_sets["test"]
        roundtrip = [detok(" ".join(x)) for x in test.ref_tokens]
        corpus_info["detokenization_roundtrip"] = {
            "identical_lines": sum(a == b for a, b in zip(roundtrip, test.refs)), "lines": len(test.refs),
            "bleu": score_translations(roundtrip, test.refs, spec.bleu_tokenize, None, None)["bleu"]}
    pair.info = {
        **corpus_info,
        "work": str(root),
        "data_replica": args.data_replica,
        "reorderer": {"train_seconds": reorderer_seconds, "reorder_seconds": reorder_seconds,
                      "iterations": args.reorder_iterations or "train-reorderer default",
                      "train_sentences": args.reorder_lines or corpus_info["sentences"]["train"],
                      "model_mb": round(model.stat().st_size / 2**20, 2),
                      # the settings it was trained and reorders with (features, hash bits, abstention, learner):
                      # train-reorderer's defaults may change between commits, so every record says which it used
                      "config": reorderer_settings(model)},
        "reordering_vs_oracle": reordering,
        # the reorderer's own training lines: their orders (jackknifed with K > 1) against their oracle, the gap
        # to the held-out splits' being what jackknifing closes
        "train_reordering_vs_oracle": read_json(Path(layout.path("evaluation", "train"))),
        "jackknife": args.jackknife,
        "spm": {"vocab": args.spm_vocab, "type": "unigram", "joint": True},
        "buckets": {name: e.buckets.summary() for name, e in pair.eval_sets.items() if e.buckets},
        "test_sentences": test_sentences,
        "prep_step_seconds": times.times,
    }
    if spec.gold_alignment:
        # the silver standard's own quality: the replica's eflomal alignment of test against the true one
        aer = evaluation_module("aer")
        silver = aer.read_links(str(oracle_dir / "test.align"))
        pair.info["eflomal_vs_gold"] = asdict(aer.score_alignments(silver, aer.read_gold(str(gold))))
    return pair


def prepare_extra(spec: PairSpec, args: argparse.Namespace, root: Path, times: Steps, name: str,
                  src_path: Path, ref_path: Path, model: Path, spm_model: str, data_bin: Path) -> EvalSet:
    """A further held-out set (--test-src/--test-ref, in the pair's own format): tokenized, reordered by the
    pair's reorderer, binarized with the pair's dictionary."""
    d = root / "extra" / name
    logs = root / "logs"
    s, t = spec.src, spec.tgt
    src_lines, ref_lines = read_lines(str(src_path)), read_lines(str(ref_path))
    if len(src_lines) != len(ref_lines):
        raise SystemExit(f"{src_path} has {len(src_lines)} lines but {ref_path} has {len(ref_lines)}")

    def make() -> None:
        from xlpos_prep.pipeline import make_data_bin
        from xlpos_prep.text import check_parallel
        for lang, path in ((s, src_path), (t, ref_path)):
            if spec.pretokenized:
                write_lines(d / f"tok.{lang}", (" ".join(x.split()) for x in read_lines(str(path))))
            else:
                run(prep_cmd("tokenize", "--lang", lang, "--input", path, "--output", d / f"tok.{lang}"),
                    logs / "extra.log")
        check_parallel([str(d / f"tok.{s}"), str(d / f"tok.{t}")])
        # the pair's reorderer, sentencepiece model and dictionaries, applied as the pipeline applies them
        run(prep_cmd("reorder", "--model", model, "--src", d / f"tok.{s}", "--out", d / "test.order",
                     "--workers", str(args.workers)), logs / "extra.log")
        run(prep_cmd("positions", "--src", d / f"tok.{s}", "--order", d / "test.order", "--spm", spm_model,
                     "--out", d / "pieces.xlpos", "--pieces-out", d / f"pieces.{s}"), logs / "extra.log")
        run(prep_cmd("spm-encode", "--model", spm_model, "--input", d / f"tok.{t}", "--output", d / f"pieces.{t}"),
            logs / "extra.log")
        make_data_bin(s, t, {"test": str(d / "pieces")}, str(d / "data-bin"), {"test": str(d / "pieces.xlpos")},
                      args.workers, logs / "extra.log", dicts=str(data_bin))

    times.step(f"extra {name}", [d / "data-bin"], make)
    sources = [x.split() for x in read_lines(str(d / f"tok.{s}"))]
    orders = [[int(i) for i in x.split()] for x in read_lines(str(d / "test.order"))]
    refs = [" ".join(x.split()) for x in ref_lines] if spec.pretokenized else ref_lines
    return EvalSet(f"extra:{name}", d / "data-bin", "test", refs, [x.split() for x in read_lines(str(d / f"tok.{t}"))],
                   make_buckets(sources, orders))


# ------------------------------------------------------------------------------------------------ systems
def device_args() -> list[str]:
    import torch
    return [] if torch.cuda.is_available() else ["--cpu"]


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
    cmd = train_command(data_bin, spec, pair.spec.src, pair.spec.tgt, run_dir, [
        *cfg.fairseq_args(), "--seed", str(seed), "--no-epoch-checkpoints", "--disable-validation", "--log-format",
        "json", "--log-interval", str(args.log_interval), "--no-progress-bar", *device_args()])
    log(f"train {pair.spec.name} {system} seed {seed} ({cfg.max_update} updates)")
    cpu: list[float] = []
    seconds = run(cmd, run_dir / "train.log", cpu_seconds=cpu)
    stats = parse_train_log(run_dir / "train.log")
    # CPU seconds: this run's own work, whatever else the machine ran (wall seconds grow with the load)
    meta = {"seconds": round(seconds, 1), "cpu_seconds": round(cpu[0], 1), "resumed_from_checkpoint": resumed,
            **stats,
            "updates_per_s": round(stats.get("updates", cfg.max_update) / seconds, 3),
            "command": shlex.join(map(str, cmd))}
    write_json(meta_path, meta)
    return meta


def evaluate_system(pair: PreparedPair, system: str, seed: int, cfg: TrainConfig, eval_set: EvalSet,
                    args: argparse.Namespace) -> dict:
    run_dir = pair.root / "runs" / cfg.tag() / f"{system}.seed{seed}"
    key = eval_set.name.replace(":", "_")
    score_path = run_dir / "scores" / f"{key}.json"
    if score_path.exists():
        return read_json(score_path)
    spec = parse_system(system)
    data_bin = eval_set.data_bin
    if spec.oracle:
        if eval_set.name != "valid":
            raise ValueError("oracle systems are evaluated on valid only")
        data_bin = pair.oracle_data_bin
    gen = run_dir / "gen" / f"{key}.txt"
    seconds = None
    if not step_done([gen]) and not gen.exists():  # (written atomically: runs before the markers left none)
        fairseq_args = (*task_args(spec), "--beam", str(cfg.beam), "--lenpen", str(cfg.lenpen), "--max-len-a", "2",
                        "--max-len-b", "10", "--max-tokens", str(args.gen_max_tokens), "--seed", str(seed),
                        *eval_set.generate_args, *device_args())
        seconds = Steps().step(f"generate {key}", [gen], lambda: generate(
            gen, run_dir / "generate.log", data_bin, run_dir / "checkpoint_last.pt", pair.spec.src, pair.spec.tgt,
            eval_set.subset, fairseq_args))
    # the recipes' decoding (xlpos-prep translate): best hypotheses in input order -> sentencepiece-decoded words
    _, words = hypothesis_words(gen, len(eval_set.refs), str(pair.root / "spm" / "spm.model"))
    detok = Detokenizer("none" if pair.spec.pretokenized else "moses", pair.spec.tgt)
    hyps = [detok(" ".join(w.split())) for w in words]
    write_lines(run_dir / "hyp" / f"{key}.txt", hyps)
    ribes = ([w.split() for w in words], eval_set.ref_tokens) if pair.spec.ribes else None
    scores = score_translations(hyps, eval_set.refs, pair.spec.bleu_tokenize, ribes, eval_set.buckets)
    scores["generate_seconds"] = round(seconds, 1) if seconds is not None else None
    write_json(score_path, scores)
    log(f"{pair.spec.name} {system} seed {seed} {eval_set.name}: BLEU {scores['bleu']} chrF {scores['chrf']}"
        + (f" RIBES {scores['ribes']}" if "ribes" in scores else ""))
    return scores


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


def run_jobs(keys: list[tuple], work: Callable, jobs: int) -> dict:
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


# ------------------------------------------------------------------------------------------------ evidence
def evaluation_module(name: str):
    """xlpos/evaluation/NAME.py loaded from its file: importing the xlpos package would import fairseq (seconds of
    CPU, and it configures logging) for modules that need neither (aer)."""
    import importlib.util
    key = f"xlpos_evaluation_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, REPO / "xlpos" / "evaluation" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module  # dataclasses look their module up while the classes are made
        spec.loader.exec_module(module)
    return sys.modules[key]


def parse_compare(text: str, systems: Sequence[str]) -> tuple[str, str]:
    """--compare SYSTEM:BASELINE, both among --systems."""
    system, sep, baseline = text.partition(":")
    if not sep or not system or not baseline or system == baseline:
        raise ValueError(f"--compare {text}: expected SYSTEM:BASELINE, two different systems")
    missing = [s for s in (system, baseline) if s not in systems]
    if missing:
        raise ValueError(f"--compare {text}: {', '.join(missing)} not among --systems")
    return system, baseline


def parse_contrast(text: str) -> list[str]:
    """--contrast: 'none', 'all' or comma-separated kinds of CONTRASTS."""
    kinds = split_list(text)
    if kinds == ["none"]:
        return []
    if kinds == ["all"]:
        return list(CONTRASTS)
    bad = [k for k in kinds if k not in CONTRASTS]
    if bad or not kinds:
        raise SystemExit(f"--contrast {text}: choose from {', '.join(CONTRASTS)}, all or none")
    return kinds


def significance_pairs(systems: Sequence[str], compare: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """(system, baseline) pairs to test on test: every system against vanilla, every XL system against its controls
    without XL information (X-monotone, X-random), encfree-X against encfree-vanilla, and the --compare pairs.
    Oracle systems are left out: they are evaluated on valid only."""
    run = [s for s in systems if not parse_system(s).oracle]
    out = [(s, "vanilla") for s in run if "vanilla" in run and s != "vanilla"]
    for s in run:
        spec = parse_system(s)
        if spec.reads_reorderer:
            out += [(s, s + suffix) for suffix in (MONOTONE_SUFFIX, RANDOM_SUFFIX) if s + suffix in run]
        if s.startswith(ENCFREE_PREFIX) and s != ENCFREE_PREFIX + "vanilla" and ENCFREE_PREFIX + "vanilla" in run:
            out.append((s, ENCFREE_PREFIX + "vanilla"))
    out += [c for c in compare if c not in out and c[0] in run and c[1] in run]  # (runs missing: left out)
    return out


def pair_significance(pair: PreparedPair, runs: dict, cfg: TrainConfig, compare: Sequence[tuple[str, str]],
                      args: argparse.Namespace) -> list[dict]:
    """significance_tests of a prepared pair, from the hypotheses its runs stored; cached beside the runs."""
    return significance_tests(pair.spec, runs, pair.eval_sets["test"].refs, compare, args,
                              stored_hypotheses(pair, cfg), pair.root / "runs" / cfg.tag() / "significance")


def stored_hypotheses(pair: PreparedPair, cfg: TrainConfig) -> Callable[[str, str], list[str] | None]:
    """(system, seed) -> the test hypotheses a run of this work directory stored (None: none)."""
    def hypotheses(name: str, seed: str) -> list[str] | None:
        path = pair.root / "runs" / cfg.tag() / f"{name}.seed{seed}" / "hyp" / "test.txt"
        return read_lines(str(path)) if path.exists() else None
    return hypotheses


def seed_pooled_buckets(spec: PairSpec, runs: dict, refs: list[str], hypotheses: Callable[[str, str], list[str] | None],
                        figures: dict[str, dict | None]) -> dict | None:
    """Test BLEU by length and reordering bucket with every seed's sentences pooled, and a bootstrap band
    (buckets.pooled_bucket_bleu). figures: seed -> its data replica's "test_sentences" (pair info). None when a
    replica lacks them (records made before) or no run stored its hypotheses."""
    items: dict = {}
    for system, by_seed in runs.items():
        if system.endswith(ORACLE_SUFFIX):  # evaluated on valid only
            continue
        for seed in by_seed:
            hyps = hypotheses(system, seed)
            if hyps is not None and (figures.get(seed) or {}).get("reorderer_tau"):
                items.setdefault(system, {})[seed] = (hyps, refs)
    if not items:
        return None
    used = {seed for by_seed in items.values() for seed in by_seed}
    return pooled_bucket_bleu(items, {x: figures[x]["source_words"] for x in used},
                              {x: figures[x]["reorderer_tau"] for x in used}, spec.bleu_tokenize)


def significance_tests(spec: PairSpec, runs: dict, refs: list[str], compare: Sequence[tuple[str, str]],
                       args: argparse.Namespace, hypotheses: Callable[[str, str], list[str] | None],
                       cache: Path | None) -> list[dict]:
    """sacreBLEU's paired bootstrap and approximate randomization (xlpos_prep.significance) of every pair
    of significance_pairs on test; one test per seed pair (the same seed) and one on the seed-concatenated test
    set. Cached in `cache` (when given), keyed by the hypotheses and the settings."""
    sig = significance
    out = []
    for system, baseline in significance_pairs(list(runs), compare):
        hyps = {name: {seed: hypotheses(name, seed) for seed in runs[name]} for name in (system, baseline)}
        missing = [f"{name} seed {seed}" for name, by_seed in hyps.items() for seed, h in by_seed.items() if h is None]
        if missing:
            log(f"significance {system} vs {baseline}: no stored hypotheses of {missing[0]}; left out")
            continue
        digest = hashlib.sha1()  # over what the hypothesis files hold (the key of caches made before)
        for name in (system, baseline):
            for seed, lines in sorted(hyps[name].items()):
                digest.update(f"{name}.{seed}\n".encode() + "".join(x + "\n" for x in lines).encode())
        key = {"hypotheses_sha1": digest.hexdigest(), "bs_samples": args.bs_samples, "ar_trials": args.ar_trials,
               "tokenize": spec.bleu_tokenize}
        path = cache / f"test.{system}.vs.{baseline}.json" if cache else None
        if path and path.exists() and read_json(path).get("key") == key:
            out.append(read_json(path))
            continue
        log(f"{spec.name}: significance of {system} against {baseline} on test")
        [comparison] = sig.compare_over_seeds(baseline, hyps[baseline], {system: hyps[system]}, refs,
                                              tokenize=spec.bleu_tokenize, bs_samples=args.bs_samples,
                                              ar_trials=args.ar_trials)
        record = {"set": "test", **comparison.to_dict(), "key": key}
        if path:
            write_json(path, record)
        out.append(record)
    return out


def test_references(spec: PairSpec, args: argparse.Namespace) -> list[str]:
    """What test hypotheses are scored against, read from the corpus as prepare_corpus reads it."""
    lines = select_splits(spec, corpus_dir(spec, args), spec.tgt, args.train_lines, args.test_lines)["test"]
    return [" ".join(x.split()) for x in lines] if spec.pretokenized else lines


def attention_reference(spec: PairSpec) -> str:
    """What --attention-aer scores a pair's attention against."""
    return (f"gold: the true alignment of test ({spec.gold_alignment}, written by xlpos-prep synth)"
            if spec.gold_alignment else "silver: eflomal alignment of test (grow-diag-final-and)")


def attention_entry(spec: PairSpec, record: dict) -> dict:
    return {"gold": attention_reference(spec), "layer": record["layer"], "head": record["head"],
            "scores": record["scores"]}


def gather_from_records(spec: PairSpec, systems: Sequence[str], seeds: Sequence[int], cfg: TrainConfig,
                        compare: Sequence[tuple[str, str]], args: argparse.Namespace) -> dict | None:
    """One pair's results from the committed records alone (--no-train --records): no data, work directory or
    checkpoint. Significance is recomputed from the recorded hypotheses and the corpus's references. None when
    the pair has no record yet."""
    runs: dict = {}
    data: dict = {}
    for system in systems:
        for seed in seeds:
            key = run_records.RunKey(spec.name, system, seed)
            if not run_records.has_record(args.records, key):
                log(f"--no-train: {spec.name} {system} seed {seed} has no record in {args.records}; left out")
                continue
            record = run_records.read_record(args.records, key, cfg.tag())
            evals, attention = {}, None
            for rel, obj in record["files"].items():
                folder, name = rel.split("/", 1)
                if folder == "scores":
                    stem = name[:-len(".json")]
                    evals["extra:" + stem[len("extra_"):] if stem.startswith("extra_") else stem] = obj
                elif rel == f"attention/test.layer{args.attention_layer}.json":
                    attention = attention_entry(spec, obj)
            runs.setdefault(system, {})[str(seed)] = {"train": record["train"], "eval": evals,
                                                      **({"attention": attention} if attention else {})}
            data.setdefault(str(seed), []).append((system, record["provenance"].get("data")))

    def hypotheses(name: str, seed: str) -> list[str] | None:
        try:
            return run_records.read_hypotheses(args.records, run_records.RunKey(spec.name, name, int(seed)), "test")
        except run_records.RecordError:
            return None

    if not runs:
        return None
    makings = {seed: replica_makings(records) for seed, records in data.items()}
    remade = {seed: [{"systems": m["systems"], **{k: (m["data"] or {}).get(k) for k in MAKING_FIGURES}}
                     for m in found] for seed, found in makings.items() if len(found) > 1}
    for seed, found in remade.items():
        log(f"--no-train: {spec.name} seed {seed}: its records come from {len(found)} makings of data replica {seed} "
            f"(" + "; ".join(", ".join(m["systems"]) for m in found) + "); the seed's figures are those of the "
            f"making {', '.join(found[0]['systems'])} used")
    by_seed = {seed: found[0]["data"] for seed, found in makings.items()}
    # the pair's figures of the first seed's data replica (what one run of bleu.py reports), every replica's beside
    first = next((d for d in by_seed.values() if d), {})
    refs = test_references(spec, args)
    return {**first, "records": str(args.records), "data_by_seed": by_seed, "runs": runs,
            **({"replica_makings": remade} if remade else {}),
            "summary": pair_summary(runs),
            "significance": significance_tests(spec, runs, refs, compare, args, hypotheses, None),
            "pooled_buckets": seed_pooled_buckets(
                spec, runs, refs, hypotheses, {seed: (d or {}).get("test_sentences") for seed, d in by_seed.items()})}


MAKING_FIGURES = ("reorderer", "reordering_vs_oracle")  # what tells two makings of a replica apart, in the results


def replica_makings(records: Sequence[tuple[str, dict | None]]) -> list[dict]:
    """The makings of one seed's data replica that its records ((system, provenance data) each) come from: a replica
    made again (another machine, a lost work directory) has another eflomal alignment, since eflomal cannot be
    seeded, so another reorderer and other XL positions. Records of one making carry identical figures. Returns
    [{"systems", "data"}], the making read by the most systems that read the reorderer first (its figures are the
    seed's: the reordering buckets and the replica table), then in the order of the records."""
    found: dict[str, dict] = {}
    for system, data in records:
        key = json.dumps(data, sort_keys=True)
        found.setdefault(key, {"systems": [], "data": data})["systems"].append(system)
    return sorted(found.values(), key=lambda m: -sum(parse_system(s).reads_reorderer for s in m["systems"]))


def attention_path(run_dir: Path, args: argparse.Namespace) -> Path:
    return run_dir / "attention" / f"test.layer{args.attention_layer}.json"


def attention_aer(pair: PreparedPair, system: str, seed: int, cfg: TrainConfig, args: argparse.Namespace) -> dict:
    """AER of the word alignments in the model's encoder-decoder attention (xlpos/evaluation/align_attention.py,
    force-decoding the references) on test, against the true alignment where the corpus has one (synth), else
    against the eflomal alignment of test: silver, not gold."""
    run_dir = pair.root / "runs" / cfg.tag() / f"{system}.seed{seed}"
    layer = args.attention_layer
    out = attention_path(run_dir, args)
    if not out.exists():
        run([sys.executable, "-m", "xlpos.evaluation.align_attention", pair.data_bin, "--path",
             run_dir / "checkpoint_last.pt", "--gen-subset", "test", "--layer", str(layer),
             "--gold", pair.gold_alignment, "--out-prefix", run_dir / "attention" / f"test.layer{layer}",
             "--json", out, "--max-tokens", str(args.gen_max_tokens)], run_dir / "attention.log")
    return attention_entry(pair.spec, read_json(out))


def contrast_drops(entry: dict) -> dict:
    """test@KIND BLEU minus test BLEU (means over seeds) of one system's summary."""
    test = (entry.get("test") or {}).get("bleu") or {}
    return {name: round(e["bleu"]["mean"] - test["mean"], 2) for name, e in entry.items()
            if name.startswith("test@") and isinstance(e, dict) and (e.get("bleu") or {}).get("n") and test.get("n")}


# ------------------------------------------------------------------------------------------------ report
METRICS = ("bleu", "chrf", "ribes")


def pair_summary(runs: dict) -> dict:
    """Per system and evaluation set: mean/spread over seeds of each metric and of the bucket BLEUs; deltas of
    every system's mean against vanilla's."""
    out: dict = {}
    for system, by_seed in runs.items():
        sets = sorted({name for r in by_seed.values() for name in r["eval"]})
        out[system] = {}
        for name in sets:
            per = [r["eval"][name] for r in by_seed.values() if name in r["eval"]]
            entry = {m: summarize([p.get(m) for p in per]) for m in METRICS if any(m in p for p in per)}
            for bucket_key in ("bleu_by_length", "bleu_by_reordering"):
                if all(bucket_key in p for p in per):
                    entry[bucket_key] = [summarize(list(vals)) for vals in zip(*(p[bucket_key] for p in per))]
            out[system][name] = entry
        out[system]["train_seconds"] = summarize([r["train"]["seconds"] for r in by_seed.values()])
    if "vanilla" in out:
        for system, entry in out.items():
            for name, metrics in entry.items():
                if system != "vanilla" and isinstance(metrics, dict) and name in out["vanilla"]:
                    metrics["delta_vs_vanilla"] = paired_deltas(runs[system], runs["vanilla"], name)
    for system, by_seed in runs.items():  # after the deltas, which are for evaluation sets only
        aers = [r["attention"]["scores"]["argmax"]["aer"] for r in by_seed.values() if "attention" in r]
        if aers:
            out[system]["attention_aer"] = summarize(aers)
        drops = contrast_drops(out[system])
        if drops:
            out[system]["contrast_drop_bleu"] = drops
    return out


def paired_deltas(system: dict, baseline: dict, eval_set: str) -> dict:
    """Per metric, the mean over the seeds that both runs' sets have of system minus baseline (the same seed is the
    same data replica): a difference of means over different seeds would mix the spread between replicas into the
    difference while a campaign is part-way through a seed."""
    out = {}
    for m in METRICS:
        diffs = [system[seed]["eval"][eval_set][m] - baseline[seed]["eval"][eval_set][m]
                 for seed in system if seed in baseline
                 and m in system[seed]["eval"].get(eval_set, {}) and m in baseline[seed]["eval"].get(eval_set, {})]
        if diffs:
            out[m] = round(statistics.fmean(diffs), 2)
    return out


def code_version() -> str:
    """The checkout's commit ('+modified' when tracked files differ from it): which code made a record."""
    import subprocess
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + ("+modified" if dirty else "")


def markdown_table(results: dict) -> str:
    """The results as one Markdown table (the README's): per pair and system, mean ± sample std over seeds."""
    def cell(entry: dict | None, metric: str, signed: bool = False) -> str:
        m = (entry or {}).get(metric) or {}
        if not m.get("n"):
            return "–"
        text = f"{m['mean']:+.2f}" if signed else f"{m['mean']:.2f}"
        return text + (f" ± {m['std']:.2f}" if m.get("std") is not None else "")

    reference = ("gold on synth, else silver" if any(PAIRS[p].gold_alignment for p in results["pairs"] if p in PAIRS)
                 else "silver")
    lines = ["| pair | system | seeds | test BLEU | Δ BLEU vs vanilla, same seeds | p vs vanilla (BS / AR) | "
             "± 95% CI of test BLEU | "
             f"test chrF | test RIBES | dev BLEU | dev BLEU, oracle positions | attention AER ({reference}) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for pair_name, pair in results["pairs"].items():
        # records made before the significance tests existed have none: their cells stay empty
        vs_vanilla = {r["system"]: r for r in pair.get("significance", []) if r["baseline"] == "vanilla"}
        for system, entry in pair["summary"].items():
            test, valid = entry.get("test"), entry.get("valid")
            delta = (test or {}).get("delta_vs_vanilla", {}).get("bleu")
            seeds = ",".join(pair["runs"].get(system, {}))
            oracle = (cell(valid, "bleu") if system.endswith(ORACLE_SUFFIX)
                      else cell(entry.get(VALID_ORACLE_POSITIONS), "bleu"))
            dev = "–" if system.endswith(ORACLE_SUFFIX) else cell(valid, "bleu")
            p_cell, ci_cell = significance_cells(vs_vanilla.get(system), "BLEU")
            lines.append(f"| {pair_name} | {system} | {seeds} | {cell(test, 'bleu')} | "
                         f"{'–' if delta is None else f'{delta:+.2f}'} | {p_cell} | {ci_cell} | {cell(test, 'chrf')} | "
                         f"{cell(test, 'ribes')} | {dev} | {oracle} | {cell(entry, 'attention_aer')} |")
    lines += significance_markdown(results) + contrast_markdown(results) + replica_markdown(results)
    for pair_name, pair in results["pairs"].items():
        if pair.get("eflomal_vs_gold"):
            lines += ["", f"{pair_name}: eflomal's alignment of test (grow-diag-final-and; the silver standard of the "
                      f"other pairs) scores AER {pair['eflomal_vs_gold']['aer']:.3f} against the gold."]
    return "\n".join(lines) + "\n"


def significance_cells(record: dict | None, metric: str) -> tuple[str, str]:
    """('p bootstrap / p AR', '±CI') of one comparison record: one seed pair as it is, marked * when significant;
    several as the largest p-values and the count of significant seed pairs; the CI is the widest of the system's
    bootstrap 95% intervals (half-width)."""
    if not record or not record["seed_pairs"]:
        return "–", "–"
    tests = [next(t for t in p["comparison"]["tests"] if t["metric"].startswith(metric)) for p in record["seed_pairs"]]
    name = tests[0]["metric"]
    bs, ar = max(t["p_bootstrap"] for t in tests), max(t["p_randomization"] for t in tests)
    ci = f"±{max(t['system_ci95'] for t in tests):.2f}"
    count = record["significant_seed_pairs"][name]
    if len(tests) == 1:
        return f"{p_value(bs)} / {p_value(ar)}{'*' if count else ''}", ci
    return f"≤{p_value(bs)} / ≤{p_value(ar)} ({count}/{len(tests)})", ci


def p_value(p: float) -> str:
    """Three decimals, or two significant digits below 0.001: approximate randomization's floor with 10,000
    trials is 1/10001, which three decimals would print as 0.000."""
    return f"{p:.3f}" if p >= 0.001 else f"{p:.2g}"


def significance_markdown(results: dict) -> list[str]:
    """Every significance comparison (vanilla and the named pairs), BLEU and chrF."""
    rows = [(pair_name, r) for pair_name, pair in results["pairs"].items() for r in pair.get("significance", [])]
    if not rows:
        return []
    lines = ["", "Significance on test (sacreBLEU paired bootstrap, 1000 resamples / approximate randomization, "
             "10000 trials, unless the JSON says otherwise): p-values, the largest over seed pairs; (k/n): seed "
             "pairs significant by both tests at p < 0.05; * one seed pair, significant.", "",
             "| pair | system | baseline | seed pairs | Δ BLEU | p BLEU (BS / AR) | ± 95% CI of the system's BLEU | "
             "Δ chrF | p chrF (BS / AR) |", "|---|---|---|---|---|---|---|---|---|"]
    for pair_name, r in rows:
        seeds = ",".join(f"{p['system_seed']}" if p["system_seed"] == p["baseline_seed"] else
                         f"{p['system_seed']}/{p['baseline_seed']}" for p in r["seed_pairs"])
        deltas = {}
        for metric in ("BLEU", "chrF"):
            values = [next(t["delta"] for t in p["comparison"]["tests"] if t["metric"].startswith(metric))
                      for p in r["seed_pairs"]]
            deltas[metric] = f"{statistics.fmean(values):+.2f}" if values else "–"
        p_bleu, ci_bleu = significance_cells(r, "BLEU")
        p_chrf, _ = significance_cells(r, "chrF")
        lines.append(f"| {pair_name} | {r['system']} | {r['baseline']} | {seeds} | {deltas['BLEU']} | {p_bleu} | "
                     f"{ci_bleu} | {deltas['chrF']} | {p_chrf} |")
    return lines


def contrast_markdown(results: dict) -> list[str]:
    """Test BLEU of every XL model decoded with contrastive XL positions, and its drop from test BLEU."""
    rows = [(pair_name, system, entry) for pair_name, pair in results["pairs"].items()
            for system, entry in pair["summary"].items() if entry.get("contrast_drop_bleu")]
    if not rows:
        return []
    names = sorted({n for _, _, e in rows for n in e["contrast_drop_bleu"]})
    lines = ["", "Contrastive XL positions at test time (the same trained model; BLEU and its change from test "
             "BLEU with reorderer positions):", "",
             "| pair | system | test BLEU | " + " | ".join(n.replace("test@", "") for n in names) + " |",
             "|---|---|---|" + "---|" * len(names)]
    for pair_name, system, entry in rows:
        cells = [f"{entry[n]['bleu']['mean']:.2f} ({entry['contrast_drop_bleu'][n]:+.2f})"
                 if n in entry["contrast_drop_bleu"] else "–" for n in names]
        lines.append(f"| {pair_name} | {system} | {entry['test']['bleu']['mean']:.2f} | " + " | ".join(cells) + " |")
    return lines


def replica_markdown(results: dict) -> list[str]:
    """Per pair, what each seed's data replica (its own eflomal alignment, oracle and reorderer) gives on test:
    the reorderer's order against that replica's oracle, monotone's beside it, and their spread over replicas; the
    spread of the BLEU means above includes this."""
    columns = [(kind, metric) for kind in ("reorderer", "monotone") for metric in ("corpus_tau", "corpus_frs")]
    rows = []
    for pair_name, pair in results["pairs"].items():
        replicas = {seed: d["reordering_vs_oracle"]["test"] for seed, d in (pair.get("data_by_seed") or {}).items()
                    if d and d.get("reordering_vs_oracle")}
        makings = pair.get("replica_makings") or {}
        for seed, r in sorted(replicas.items(), key=lambda kv: int(kv[0])):
            # a replica made more than once: a row per making, the seed's (r) first
            labelled = ([(f"{seed}, made for {', '.join(m['systems'])}",
                          (m.get("reordering_vs_oracle") or {}).get("test")) for m in makings[seed]]
                        if seed in makings else [(seed, r)])
            for label, figures in labelled:
                cells = [f"{figures[k][m]:.4f}" for k, m in columns] if figures else ["–"] * len(columns)
                rows.append(f"| {pair_name} | {label} | " + " | ".join(cells) + " |")
        if len(replicas) > 1:
            values = [[r[k][m] for r in replicas.values()] for k, m in columns]
            rows.append(f"| {pair_name} | mean ± sd | " + " | ".join(
                f"{statistics.fmean(v):.4f} ± {statistics.stdev(v):.4f}" for v in values) + " |")
    if not rows:
        return []
    remade = [f"{pair_name} {seed}" for pair_name, pair in results["pairs"].items()
              for seed in sorted(pair.get("replica_makings") or {}, key=int)]
    return ["", "Data replicas (seed N's runs use replica N: its own alignment, oracle and reorderer): test order "
            "against that replica's oracle, corpus Kendall tau / fuzzy reordering score."
            + (" Made more than once (eflomal cannot be seeded, so each making has its own alignment and reorderer;"
               f" the runs of each making are named, and the mean uses the first): {', '.join(remade)}."
               if remade else ""), "",
            "| pair | replica | reorderer tau | reorderer FRS | monotone tau | monotone FRS |",
            "|---|---|---|---|---|---|", *rows]


def print_table(results: dict) -> None:
    for pair_name, pair in results["pairs"].items():
        r = pair["reordering_vs_oracle"]["test"]
        print(f"\n{pair_name}: test {pair['sentences']['test']} sentences ({pair['test_set']}); reorderer vs test "
              f"oracle: tau {r['reorderer']['corpus_tau']:.4f} FRS {r['reorderer']['corpus_frs']:.4f} "
              f"(monotone tau {r['monotone']['corpus_tau']:.4f} FRS {r['monotone']['corpus_frs']:.4f})")
        steps = pair["prep_step_seconds"]
        print(f"data: {pair['sentences']['train']} training pairs; alignment {pair['align_seconds'] or 0:.0f} s, "
              f"reorderer training {steps.get('train-reorderer') or 0:.0f} s, reordering train "
              f"{steps.get('reorder train') or 0:.0f} s (times of the run that made them)")
        header = (f"{'system':<14} {'test BLEU':>14} {'chrF':>14} {'RIBES':>14} {'dev BLEU':>14} "
                  f"{'dev@oracle':>14} {'train s':>9}")
        print(header)
        print("-" * len(header))

        def cell(entry: dict | None, metric: str) -> str:
            if not entry or metric not in entry or not entry[metric].get("n"):
                return f"{'-':>14}"
            m = entry[metric]
            spread = f"±{m['std']:.2f}" if m.get("std") is not None else ""
            return f"{m['mean']:>8.2f}{spread:<6}"

        for system, entry in pair["summary"].items():
            test = entry.get("test")
            print(f"{system:<14} {cell(test, 'bleu')} {cell(test, 'chrf')} {cell(test, 'ribes')} "
                  f"{cell(entry.get('valid'), 'bleu')} {cell(entry.get(VALID_ORACLE_POSITIONS), 'bleu')} "
                  f"{entry['train_seconds'].get('mean', 0):>9.0f}")
        for system, entry in pair["summary"].items():
            for name in entry:
                if name.startswith("extra:"):
                    print(f"{system:<14} {name}: BLEU {cell(entry[name], 'bleu').strip()}")
            if entry.get("contrast_drop_bleu"):
                print(f"{system:<14} test BLEU with contrastive XL positions (change from reorderer positions): "
                      + ", ".join(f"{n[len('test@'):]} {entry[n]['bleu']['mean']:.2f} ({d:+.2f})"
                                  for n, d in entry["contrast_drop_bleu"].items()))
            if entry.get("attention_aer", {}).get("n"):
                print(f"{system:<14} attention AER on test, {attention_reference(PAIRS[pair_name])}: "
                      f"{cell(entry, 'attention_aer').strip()}")
        if pair.get("eflomal_vs_gold"):
            print(f"eflomal alignment of test (the silver standard) against the gold: AER "
                  f"{pair['eflomal_vs_gold']['aer']:.3f}")
        if pair.get("significance"):
            print(f"\nsignificance on test ({pair_name}):")
            print(significance.format_table(pair["significance"]))
        sig = next((run["eval"]["test"]["bleu_signature"] for runs in pair["runs"].values() for run in runs.values()
                    if "test" in run["eval"]), None)
        if sig:
            print(f"sacreBLEU: {sig}")


# ------------------------------------------------------------------------------------------------ main
def parse_extra_sets(args: argparse.Namespace, pairs: list[str]) -> dict[str, list[tuple[str, Path, Path]]]:
    """--test-src/--test-ref, paired in order; `PAIR:PATH` names the pair, needed when several are selected."""
    srcs, refs = args.test_src or [], args.test_ref or []
    if len(srcs) != len(refs):
        raise SystemExit(f"{len(srcs)} --test-src but {len(refs)} --test-ref: give them in pairs")
    out: dict[str, list] = {p: [] for p in pairs}
    for k, (src, ref) in enumerate(zip(srcs, refs), 1):
        targets = []
        for which in (src, ref):
            head, sep, rest = which.partition(":")
            targets.append((head, rest) if sep and head in PAIRS else (None, which))
        (p_src, src_path), (p_ref, ref_path) = targets
        pair = p_src or p_ref
        if p_src and p_ref and p_src != p_ref:
            raise SystemExit(f"--test-src {src} and --test-ref {ref} name different pairs")
        if pair is None:
            if len(pairs) != 1:
                raise SystemExit(f"--test-src {src}: several pairs selected; prefix the files with the pair, "
                                 f"e.g. --test-src {pairs[0]}:{src}")
            pair = pairs[0]
        if pair not in out:
            raise SystemExit(f"--test-src {src}: pair {pair} is not selected (--pairs)")
        for path in (src_path, ref_path):
            if not Path(path).is_file():
                raise SystemExit(f"{path}: file not found")
        name = f"{k}-" + re.sub(r"[^A-Za-z0-9_.-]", "_", Path(src_path).stem)
        out[pair].append((name, Path(src_path).resolve(), Path(ref_path).resolve()))
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=SYSTEM_GRAMMAR)
    p.add_argument("--pairs", default="ja-en,en-ja,en-de", help="comma-separated: " + ", ".join(PAIRS))
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help=f"comma-separated system names (default {','.join(SYSTEMS)}; grammar below)")
    p.add_argument("--seeds", default="1,2", help="comma- or space-separated training seeds (default 1,2)")
    p.add_argument("--ablation-oracle", action="store_true",
                   help="also train every selected XL system on oracle XL positions (evaluated on valid)")
    p.add_argument("--contrast", default="none",
                   help="also decode test with contrastive XL positions, every XL model trained on reorderer "
                        f"positions: comma-separated {', '.join(CONTRASTS)}, 'all' or 'none' (default)")
    p.add_argument("--contrast-window", type=int, default=3, help="window K of local-shuffle (default 3)")
    p.add_argument("--contrast-seed", type=int, default=1, help="seed of random and local-shuffle (default 1)")
    p.add_argument("--compare", action="append", default=[],
                   help="SYSTEM:BASELINE, a further pair for the significance tests (repeatable); every system is "
                        "tested against vanilla, and X against X-monotone and X-random when both were run")
    p.add_argument("--bs-samples", type=int, default=1000, help="paired bootstrap resamples (sacreBLEU default 1000)")
    p.add_argument("--ar-trials", type=int, default=10000,
                   help="paired approximate randomization trials (sacreBLEU default 10000)")
    p.add_argument("--attention-aer", action="store_true",
                   help="also score the word alignments of every model's encoder-decoder attention on test against "
                        "the eflomal alignment of test (silver: the real corpora have no gold alignment) or, for "
                        "synth, against its true alignment")
    p.add_argument("--attention-layer", type=int, default=-1,
                   help="decoder layer of --attention-aer (default -1, the last)")
    p.add_argument("--work", default="/tmp/xlpos-bleu", help="cache directory; every step is skipped when done")
    p.add_argument("--data", default=str(DATA), help="directory holding enja/ and ende/")
    p.add_argument("--out", default="results.json", help="JSON with every figure")
    p.add_argument("--records", type=Path,
                   help="directory of committed run records (benchmarks/run_records.py): every finished run is "
                        "recorded there, and a recorded run is not trained again; with --no-train, the results "
                        "are gathered from the records alone (no work directory, data or checkpoint needed)")
    p.add_argument("--data-replica", type=int, default=0,
                   help="N > 0: a data replica of its own (alignment, oracle, reorderer seeded N, XL positions), "
                        "so that runs of several replicas show the spread the unseeded alignment adds (0: the "
                        "shared cache, default)")
    p.add_argument("--no-train", action="store_true",
                   help="train nothing: report (and score, where scores are missing) the runs already trained")
    p.add_argument("--prepare-only", action="store_true",
                   help="only the data steps (alignment, reorderer, XL positions, data-bin) and reordering scores")
    p.add_argument("--markdown", help="also write the results as a Markdown table (the README's) to this file")
    p.add_argument("--plot", help="also draw BLEU by length / reordering bucket to this PNG (needs matplotlib)")
    p.add_argument("--train-lines", type=int, default=0, help="train on the first N training lines (0: all)")
    p.add_argument("--test-lines", type=int, default=1000,
                   help="Tanaka: hold out the last N training lines as the test set (default 1000)")
    p.add_argument("--test-src", action="append", help="a further held-out source file ([PAIR:]PATH, the pair's "
                   "format: tokenized for ja-en/en-ja, raw for en-de); repeatable")
    p.add_argument("--test-ref", action="append", help="its reference ([PAIR:]PATH); repeatable")
    p.add_argument("--spm-vocab", type=int, default=8000, help="joint sentencepiece vocabulary (default 8000)")
    p.add_argument("--reorder-iterations", type=int, default=0,
                   help="reorderer training passes (0: xlpos-prep train-reorderer's default)")
    p.add_argument("--reorder-lines", type=int, default=0,
                   help="train the reorderer on the first N training lines (0: all)")
    p.add_argument("--jackknife", type=int, default=JACKKNIFE_FOLDS, metavar="K",
                   help=f"the pipeline's --jackknife: K reorderers label the reorderer's own training lines "
                        f"(default {JACKKNIFE_FOLDS}; 1: the model trained on them, as data made before K existed)")
    p.add_argument("--reorder-args", default="",
                   help="further train-reorderer arguments, e.g. '--features span,wide --fallback-margin 0'. A "
                        "campaign names its reorderer settings here, so that its data replicas do not change when "
                        "train-reorderer's defaults do (each record also lists the settings its model used)")
    defaults = TrainConfig()
    p.add_argument("--max-update", type=int, default=defaults.max_update,
                   help=f"updates per system (default {defaults.max_update}, ~10-15 min on 2 CPU cores)")
    p.add_argument("--max-tokens", type=int, default=defaults.max_tokens)
    p.add_argument("--lr", type=float, default=defaults.lr)
    p.add_argument("--warmup-updates", type=int, default=0, help="0: max-update / 5, at most 4000")
    p.add_argument("--dropout", type=float, default=defaults.dropout)
    p.add_argument("--layers", type=int, default=defaults.encoder_layers, help="encoder and decoder layers")
    p.add_argument("--embed-dim", type=int, default=defaults.embed_dim)
    p.add_argument("--ffn-dim", type=int, default=defaults.ffn_dim)
    p.add_argument("--heads", type=int, default=defaults.heads)
    p.add_argument("--beam", type=int, default=defaults.beam)
    p.add_argument("--gen-max-tokens", type=int, default=6000, help="fairseq-generate --max-tokens")
    p.add_argument("--log-interval", type=int, default=25, help="fairseq-train --log-interval")
    p.add_argument("--threads", type=int, default=1,
                   help="torch/OpenMP threads of each fairseq-train/generate (default 1; 0: torch's default, one per "
                        "core). Measured on a shared 2-core machine: 2 threads ran 3.5x slower than 1 (OpenMP threads "
                        "spin while other processes hold the cores); use --jobs to occupy more cores")
    p.add_argument("--jobs", type=int, default=1,
                   help="systems/seeds trained and decoded at once (default 1; 2 on an otherwise idle 2-core machine)")
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                   help="processes for the per-sentence steps (default: all cores)")
    return p


def split_list(text: str) -> list[str]:
    return [x for x in re.split(r"[,\s]+", text) if x]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.time()
    pairs = split_list(args.pairs)
    systems = split_list(args.systems)
    seeds = [int(x) for x in split_list(args.seeds)]
    bad = [x for x in pairs if x not in PAIRS]
    if bad or not pairs:
        raise SystemExit(f"unknown pair(s) {', '.join(bad) or '(none)'}; choose from {', '.join(PAIRS)}")
    if not systems:
        raise SystemExit("--systems: give at least one system")
    try:
        specs = {s: parse_system(s) for s in systems}
        compare = [parse_compare(c, systems) for c in args.compare]
    except ValueError as e:
        raise SystemExit(str(e))
    args.contrast = parse_contrast(args.contrast)
    if not seeds:
        raise SystemExit("--seeds: give at least one seed")
    extra = parse_extra_sets(args, pairs)
    if args.jobs < 1:
        raise SystemExit("--jobs must be at least 1")
    if args.threads:
        # inherited by every fairseq child process
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    for name, value in GLIBC_MALLOC_ENV.items():  # a value set by the user wins
        os.environ.setdefault(name, value)
    cfg = TrainConfig(encoder_layers=args.layers, decoder_layers=args.layers, embed_dim=args.embed_dim,
                      ffn_dim=args.ffn_dim, heads=args.heads, dropout=args.dropout, lr=args.lr,
                      warmup_updates=args.warmup_updates, max_tokens=args.max_tokens, max_update=args.max_update,
                      beam=args.beam)
    all_systems = systems + [s + ORACLE_SUFFIX for s in systems
                             if args.ablation_oracle and specs[s].reads_reorderer and s + ORACLE_SUFFIX not in systems]
    results: dict = {
        "benchmark": "BLEU of XL systems vs the vanilla Transformer (benchmarks/bleu.py)",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "command": shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv),
        "machine": {},
        "config": {"train": {**asdict(cfg), "warmup": cfg.warmup, "fairseq_args": cfg.fairseq_args(),
                             "checkpoint": "checkpoint_last.pt (no validation during training)",
                             "decoding": f"beam {cfg.beam}, lenpen {cfg.lenpen}, max len 2*src+10"},
                   "pairs": pairs, "systems": all_systems, "seeds": seeds, "train_lines": args.train_lines,
                   "test_lines": args.test_lines, "spm_vocab": args.spm_vocab,
                   "reorder_iterations": args.reorder_iterations or "default",
                   "reorder_lines": args.reorder_lines or "all", "reorder_args": args.reorder_args,
                   "jackknife": args.jackknife, "work": str(Path(args.work).resolve()),
                   "threads": args.threads or "torch default", "jobs": args.jobs,
                   "malloc_env": {name: os.environ[name] for name in GLIBC_MALLOC_ENV},
                   "xl_positions": "predicted by the BTG reorderer on every split (training included); "
                                   "'-oracle' systems: oracle ranks from the alignment, evaluated on valid only; "
                                   "valid@oracle-positions: the reorderer-trained systems decoding valid with "
                                   "oracle positions",
                   "contrast": {"kinds": args.contrast, "window": args.contrast_window, "seed": args.contrast_seed,
                                "what": "test@KIND: the trained XL models decoding test with --xl-contrast KIND"},
                   "significance": {"tests": "sacreBLEU paired bootstrap resampling and paired approximate "
                                             "randomization (sacrebleu.significance.PairedTest), BLEU and chrF, test",
                                    "bs_samples": args.bs_samples, "ar_trials": args.ar_trials,
                                    "seeds": "one test per seed pair (system and baseline trained with the same "
                                             "seed), the count of significant seed pairs (both tests p < 0.05, "
                                             "delta != 0), and the seed-concatenated test set (anti-conservative)",
                                    "pairs": "every system vs vanilla; X vs X-monotone and X-random; encfree-X vs "
                                             "encfree-vanilla; --compare"},
                   "attention_aer": ({"layer": args.attention_layer, "method": "argmax per target word, pieces "
                                      "grouped into words; force-decoded references",
                                      "gold": {p: attention_reference(PAIRS[p]) for p in pairs}}
                                     if args.attention_aer else None),
                   "scoring": {p: {"bleu_tokenize": PAIRS[p].bleu_tokenize,
                                   "references": "corpus tokenization" if PAIRS[p].pretokenized else
                                   "raw text; hypotheses detokenized with sacremoses",
                                   "ribes": PAIRS[p].ribes} for p in pairs}},
        "pairs": {},
    }
    for pair_name in pairs:
        spec = PAIRS[pair_name]
        if args.no_train and args.records:
            gathered = gather_from_records(spec, all_systems, seeds, cfg, compare, args)
            if gathered is None:
                log(f"--no-train: {pair_name} has no record in {args.records} yet; left out")
                continue
            results["pairs"][pair_name] = gathered
            results["machine"] = machine_info()
            write_json(Path(args.out), results)
            continue
        t0 = time.perf_counter()
        pair = prepare_pair(spec, args, extra[pair_name])
        prep_seconds = time.perf_counter() - t0
        jobs = [] if args.prepare_only else [(system, seed) for system in all_systems for seed in seeds]
        done = run_jobs(jobs, lambda system, seed: train_and_evaluate(pair, system, seed, cfg, args), args.jobs)
        runs: dict = {}
        for (system, seed) in jobs:  # the order of the flags, whatever order the jobs finished in
            if done[(system, seed)] is not None:
                runs.setdefault(system, {})[str(seed)] = done[(system, seed)]
        results["pairs"][pair_name] = {
            **pair.info, "prep_seconds_this_run": round(prep_seconds, 1), "runs": runs, "summary": pair_summary(runs),
            "significance": pair_significance(pair, runs, cfg, compare, args),
            "pooled_buckets": seed_pooled_buckets(spec, runs, pair.eval_sets["test"].refs,
                                                  stored_hypotheses(pair, cfg),
                                                  {seed: pair.info["test_sentences"] for seed in map(str, seeds)})}
        results["machine"] = machine_info()
        results["wall_seconds_this_run"] = round(time.time() - started, 1)
        write_json(Path(args.out), results)  # after every pair, so a long run shows progress
    print_table(results)
    log(f"results: {args.out}")
    if args.markdown:
        with atomic_output(args.markdown) as f:
            f.write(markdown_table(results))
        log(f"markdown table: {args.markdown}")
    if args.plot and not args.prepare_only:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from plot_bleu import plot_results
        plot_results(results, Path(args.plot))
        log(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (StepFailed, InputError) as e:  # (a failed step: the end of its log is above)
        sys.exit(f"bleu.py: error: {e}")
