"""Shared fixtures: a tiny synthetic parallel corpus binarized for fairseq, with XL positions, and a model
trained on it through the real fairseq-train CLI.

Corpus: 300/40/20 train/valid/test sentences of 3-8 words from a 30-word vocabulary (``w0``..``w29``); the
target is the source with each word upper-cased (``W3``) and laid out in a fixed reordering (even source indices
left to right, then odd ones right to left), so the XL positions of every sentence are known exactly.
"""
from __future__ import annotations

import fcntl
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[1]

# One intra-op thread for torch in the test processes too (the CLIs they start get it from subprocess_env): the
# tests' tensors are tiny, and with the suite's two pytest-xdist workers on 2 cores a second thread per worker only
# spins. Measured on a loaded 2-core machine: test_models' briefly trained model took 149 s of CPU with torch's
# default of 2 threads, 20 s with 1. (Set before anything imports torch; an OMP_NUM_THREADS of the caller is kept.)
os.environ.setdefault("OMP_NUM_THREADS", "1")
PLUGIN_DIR = REPO / "xlpos"
SPLIT_SIZES = {"train": 300, "valid": 40, "test": 20}
VOCAB = [f"w{i}" for i in range(30)]


def target_order(n: int) -> list[int]:
    """Source indices in target order: evens ascending, then odds descending."""
    return list(range(0, n, 2)) + list(range(n - 1 if n % 2 == 0 else n - 2, 0, -2))


def xl_positions_for(n: int) -> list[int]:
    """XL position of each source word: its index in the target order."""
    xl = [0] * n
    for k, i in enumerate(target_order(n)):
        xl[i] = k
    return xl


def cli(name: str) -> str:
    """A console script of the venv running the tests."""
    local = Path(sys.executable).with_name(name)
    return str(local) if local.exists() else (shutil.which(name) or name)


def subprocess_env() -> dict:
    env = dict(os.environ)
    # The safe checkpoint path must work on its own; never let an inherited opt-out hide a failure.
    for var in ("XLPOS_TRUST_CHECKPOINT", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_WEIGHTS_ONLY_LOAD"):
        env.pop(var, None)
    env["PYTHONWARNINGS"] = "ignore"
    env["OMP_NUM_THREADS"] = "1"
    return env


# For fairseq-train runs of a few updates in a subprocess. fairseq prefetches batches in a daemon thread
# (BufferedIterator); a run that ends a few batches into an epoch exits while that thread may be inside a torch op
# that released the GIL, and Python 3.11's finalization then ends the thread through a C++ noexcept frame: the
# process aborts ("terminate called without an active exception", exit -6) after training and saving. Seen in CI on
# a loaded 2-core machine; runs of real length have their buffer full long before they end.
NO_PREFETCH_THREAD = ["--data-buffer-size", "0"]


def run_cli(args: list[str], cwd: Path | None = None, stdin: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """Run a CLI; on failure, fail the test with the end of its output."""
    proc = subprocess.run(args, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout,
                          env=subprocess_env())
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, args[:2]))} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-5000:]}")
    return proc


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """A directory that `build(root)` fills once per test run. Under pytest-xdist every worker is a session of its
    own: the first worker to need it builds it, under a lock, in the directory the workers' temporary directories
    share, and the others wait and reuse it (a failed build leaves nothing marked: the next one starts afresh)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    root, done = base / f"once-{name}", base / f"once-{name}.done"
    with open(base / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            build(root)
            done.touch()
    return root


@dataclass(frozen=True)
class TinyCorpus:
    raw_dir: Path
    data_bin: Path
    source_lang: str = "src"
    target_lang: str = "tgt"
    sizes: dict = field(default_factory=lambda: dict(SPLIT_SIZES))

    def raw(self, split: str, kind: str) -> Path:
        """Raw text file of a split; kind is the source/target language or 'xlpos'."""
        return self.raw_dir / f"{split}.{kind}"

    def sentences(self, split: str) -> list[list[str]]:
        return [line.split() for line in self.raw(split, self.source_lang).read_text().splitlines()]

    def xl_positions(self, split: str) -> list[list[int]]:
        return [[int(x) for x in line.split()] for line in self.raw(split, "xlpos").read_text().splitlines()]

    def copy_data_bin(self, dest: Path, with_xl_positions: bool = True) -> Path:
        shutil.copytree(self.data_bin, dest,
                        ignore=None if with_xl_positions else shutil.ignore_patterns("*.xlpos.*"))
        return dest


def write_corpus(raw_dir: Path, seed: int = 1234) -> None:
    rng = random.Random(seed)
    raw_dir.mkdir(parents=True, exist_ok=True)
    for split, count in SPLIT_SIZES.items():
        src, tgt, xl = [], [], []
        for _ in range(count):
            words = [rng.choice(VOCAB) for _ in range(rng.randint(3, 8))]
            src.append(" ".join(words))
            tgt.append(" ".join(words[i].upper() for i in target_order(len(words))))
            xl.append(" ".join(map(str, xl_positions_for(len(words)))))
        for kind, lines in (("src", src), ("tgt", tgt), ("xlpos", xl)):
            (raw_dir / f"{split}.{kind}").write_text("\n".join(lines) + "\n")


def build_tiny_corpus(root: Path) -> None:
    from xlpos.data.binarize import binarize_xl_positions

    corpus = TinyCorpus(raw_dir=root / "raw", data_bin=root / "data-bin")
    write_corpus(corpus.raw_dir)
    args = [cli("fairseq-preprocess"), "--source-lang", corpus.source_lang, "--target-lang", corpus.target_lang,
            "--destdir", str(corpus.data_bin), "--joined-dictionary", "--workers", "1"]
    for split in SPLIT_SIZES:  # --trainpref, --validpref, --testpref
        args += [f"--{split}pref", str(corpus.raw_dir / split)]
    run_cli(args)
    for split in SPLIT_SIZES:
        binarize_xl_positions(str(corpus.raw(split, "xlpos")), str(corpus.data_bin), split, corpus.source_lang,
                              corpus.target_lang, progress=False)


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> TinyCorpus:
    """Raw files, fairseq-preprocess output (joined dictionary) and binarized XL positions of every split."""
    root = built_once(tmp_path_factory, "tiny_corpus", build_tiny_corpus)
    return TinyCorpus(raw_dir=root / "raw", data_bin=root / "data-bin")


def tiny_model_args(corpus: TinyCorpus, save_dir: Path, max_update: int, tensorboard_dir: Path) -> list[str]:
    """fairseq-train arguments for a 1-layer, 16-dim transformer_xlpos (InXL) that trains in seconds."""
    return [
        cli("fairseq-train"), str(corpus.data_bin), "--user-dir", str(PLUGIN_DIR),
        "--task", "translation_xlpos", "--arch", "transformer_xlpos", "--xl-integration", "input",
        "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--share-all-embeddings",
        "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "600", "--max-update", str(max_update),
        "--cpu", "--seed", "1", "--no-progress-bar", "--log-interval", "1", *NO_PREFETCH_THREAD,
        "--save-dir", str(save_dir), "--tensorboard-logdir", str(tensorboard_dir),
        # BLEU validation puts numpy arrays into the checkpoint's metrics state: the allowlist must cover them.
        "--eval-bleu", "--eval-bleu-detok", "space", "--eval-bleu-args", '{"beam": 1, "max_len_a": 1, "max_len_b": 2}',
        "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric",
    ]


@dataclass(frozen=True)
class TrainedModel:
    corpus: TinyCorpus
    save_dir: Path
    tensorboard_dir: Path
    updates: int
    log: str

    @property
    def checkpoint(self) -> Path:
        return self.save_dir / "checkpoint_last.pt"


TINY_MODEL_UPDATES = 6


@pytest.fixture(scope="session")
def trained_model(tiny_corpus, tmp_path_factory) -> TrainedModel:
    """A transformer_xlpos model trained for a few updates with the real fairseq-train CLI."""
    def build(root: Path) -> None:
        proc = run_cli(tiny_model_args(tiny_corpus, root / "checkpoints", TINY_MODEL_UPDATES, root / "tensorboard"))
        (root / "fairseq-train.log").write_text(proc.stdout + proc.stderr)

    root = built_once(tmp_path_factory, "trained_model", build)
    return TrainedModel(tiny_corpus, root / "checkpoints", root / "tensorboard", TINY_MODEL_UPDATES,
                        (root / "fairseq-train.log").read_text())


# ---------------------------------------------------------------------------------------------------------------
# A sentencepiece + reorderer model: the whole pipeline, for raw-text inference (interactive, hub)

PIPELINE_SPLIT_SIZES = {"train": 300, "valid": 30, "test": 24}


@dataclass(frozen=True)
class PipelineCorpus:
    """Synthetic tokenized corpus (``xlpos-prep synth``), a reorderer trained on its gold orders, a joint
    sentencepiece model, and a data-bin of pieces with XL positions made by the offline pipeline. The test split's
    orders, positions and pieces come from the real CLIs (``xlpos-prep reorder`` and ``positions``)."""

    root: Path
    raw_dir: Path  # {split}.src / {split}.tgt: tokenized words
    pieces_dir: Path  # {split}.src (pieces, from `positions --pieces-out`), {split}.tgt, {split}.xlpos, {split}.order
    reorderer: Path
    spm: Path
    data_bin: Path
    source_lang: str = "src"
    target_lang: str = "tgt"

    def lines(self, split: str) -> list[str]:
        return (self.raw_dir / f"{split}.src").read_text(encoding="utf-8").splitlines()

    def pieces(self, split: str) -> list[list[str]]:
        return [line.split() for line in (self.pieces_dir / f"{split}.src").read_text(encoding="utf-8").splitlines()]

    def xl_positions(self, split: str) -> list[list[int]]:
        return [[int(x) for x in line.split()] for line in (self.pieces_dir / f"{split}.xlpos").read_text().splitlines()]

    def orders(self, split: str) -> list[list[int]]:
        return [[int(x) for x in line.split()] for line in (self.pieces_dir / f"{split}.order").read_text().splitlines()]


def _ranks_of_order(order: list[int]) -> list[int]:
    ranks = [0] * len(order)
    for k, i in enumerate(order):
        ranks[i] = k
    return ranks


def pipeline_corpus_at(root: Path) -> PipelineCorpus:
    return PipelineCorpus(root, root / "raw", root / "pieces", root / "reorderer.model", root / "spm.model",
                          root / "data-bin")


def build_pipeline_corpus(root: Path) -> None:
    import sentencepiece

    from xlpos_prep.reorderer import Reorderer
    from xlpos_prep.subword import xl_positions_for_line
    from xlpos.data.binarize import binarize_xl_positions

    layout = pipeline_corpus_at(root)
    raw, pieces_dir, data_bin = layout.raw_dir, layout.pieces_dir, layout.data_bin
    pieces_dir.mkdir()
    prep = cli("xlpos-prep")
    run_cli([prep, "synth", "--out-dir", str(raw), "--seed", "3", "--max-len", "14",
             *[a for split, n in PIPELINE_SPLIT_SIZES.items() for a in (f"--{split}", str(n))]])
    gold = [[int(x) for x in line.split()] for line in (raw / "train.gold-order").read_text().splitlines()]
    (raw / "train.oracle").write_text("".join(" ".join(map(str, _ranks_of_order(o))) + "\n" for o in gold))
    reorderer_path = layout.reorderer
    run_cli([prep, "train-reorderer", "--src", str(raw / "train.src"), "--oracle", str(raw / "train.oracle"),
             "--model", str(reorderer_path), "--iterations", "2", "--hash-bits", "16"])
    sentencepiece.SentencePieceTrainer.train(
        input=f"{raw / 'train.src'},{raw / 'train.tgt'}", model_prefix=str(layout.spm.with_suffix("")),
        vocab_size=200, model_type="unigram", character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0, minloglevel=2,
        hard_vocab_limit=False, num_threads=1)
    spm_path = layout.spm
    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_path))
    reorderer = Reorderer.load(str(reorderer_path))
    for split in PIPELINE_SPLIT_SIZES:
        src, out = raw / f"{split}.src", pieces_dir / split
        if split == "test":  # the offline pipeline exactly as a user runs it
            run_cli([prep, "reorder", "--model", str(reorderer_path), "--src", str(src), "--out", f"{out}.order"])
            run_cli([prep, "positions", "--src", str(src), "--order", f"{out}.order", "--spm", str(spm_path),
                     "--out", f"{out}.xlpos", "--pieces-out", f"{out}.src"])
        else:  # the same functions in-process, faster
            sentences = [line.split() for line in src.read_text(encoding="utf-8").splitlines()]
            orders = reorderer.reorder_batch(sentences)
            done = [xl_positions_for_line(words, order, sp) for words, order in zip(sentences, orders)]
            Path(f"{out}.order").write_text("".join(" ".join(map(str, o)) + "\n" for o in orders))
            Path(f"{out}.xlpos").write_text("".join(" ".join(map(str, p)) + "\n" for _, p in done))
            Path(f"{out}.src").write_text("".join(" ".join(p) + "\n" for p, _ in done), encoding="utf-8")
        targets = (raw / f"{split}.tgt").read_text(encoding="utf-8").splitlines()
        Path(f"{out}.tgt").write_text("".join(" ".join(sp.encode(t, out_type=str)) + "\n" for t in targets),
                                      encoding="utf-8")
    # (the pipeline's own data-bin writer; the tiny corpus above goes through fairseq-preprocess itself)
    run_cli([sys.executable, "-m", "xlpos_prep.cli", "preprocess", "--source-lang", "src", "--target-lang", "tgt",
             "--destdir", str(data_bin), "--joined-dictionary",
             *[a for split in PIPELINE_SPLIT_SIZES for a in (f"--{split}pref", str(pieces_dir / split))]])
    for split in PIPELINE_SPLIT_SIZES:
        binarize_xl_positions(str(pieces_dir / f"{split}.xlpos"), str(data_bin), split, "src", "tgt", progress=False)


@pytest.fixture(scope="session")
def pipeline_corpus(tmp_path_factory) -> PipelineCorpus:
    return pipeline_corpus_at(built_once(tmp_path_factory, "pipeline_corpus", build_pipeline_corpus))


@dataclass(frozen=True)
class PipelineModel:
    corpus: PipelineCorpus
    save_dir: Path
    log: str

    @property
    def checkpoint(self) -> Path:
        return self.save_dir / "checkpoint_best.pt"


@pytest.fixture(scope="session")
def pipeline_model(pipeline_corpus, tmp_path_factory) -> PipelineModel:
    """transformer_xlpos (InXL) trained with --xl-reorderer/--xl-spm on the pipeline corpus. The model files are
    given from a directory that is deleted after training: everything inference needs must be in the checkpoint."""
    def build(root: Path) -> None:
        given = root / "training-time-files"
        given.mkdir()
        shutil.copy(pipeline_corpus.reorderer, given / "reorderer.model")
        shutil.copy(pipeline_corpus.spm, given / "spm.model")
        proc = run_cli(pipeline_model_args(pipeline_corpus, given, root / "checkpoints"), timeout=300)
        shutil.rmtree(given)
        (root / "fairseq-train.log").write_text(proc.stdout + proc.stderr)

    root = built_once(tmp_path_factory, "pipeline_model", build)
    return PipelineModel(pipeline_corpus, root / "checkpoints", (root / "fairseq-train.log").read_text())


def pipeline_model_args(pipeline_corpus: PipelineCorpus, given: Path, save_dir: Path) -> list[str]:
    return [
        cli("fairseq-train"), str(pipeline_corpus.data_bin), "--user-dir", str(PLUGIN_DIR),
        "--task", "translation_xlpos", "--arch", "transformer_xlpos", "--xl-integration", "input",
        "--xl-reorderer", str(given / "reorderer.model"), "--xl-spm", str(given / "spm.model"),
        "--xl-word-tokenizer", "none",
        "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--share-all-embeddings",
        "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "1000", "--max-update", "80",
        "--cpu", "--seed", "1", "--no-progress-bar", "--log-interval", "5", "--no-epoch-checkpoints",
        *NO_PREFETCH_THREAD, "--save-dir", str(save_dir)]


# Raw input that must never stop fairseq-interactive: each line gets a translation or a clear message.
HOSTILE_LINES = [
    "",  # empty
    "   ",  # blank
    "a man saw the dog .",  # ordinary
    " ".join(["the", "big", "dog", "saw", "a", "cat", "."] * 300),  # 2100 words: more than the model's 1024
    "zorblax quuxified the flibbertigibbet .",  # unknown words
    "a ☃ saw ü ÿ 日本語 Ω .",  # characters outside the sentencepiece and fairseq vocabularies
    "the cat 猫 saw a Собака and a κύων .",  # mixed scripts
    "the \u200b dog",  # a word sentencepiece normalizes away
    "x" * 3000,  # one enormous word
    "\t. , ; -- !! ??",  # punctuation only
]
# Short outputs keep the 1023-token source cheap to decode; --max-tokens below the longest input must not stop it.
HOSTILE_DECODE = ["--beam", "2", "--max-len-a", "0", "--max-len-b", "6", "--max-tokens", "600", "--cpu"]


@dataclass(frozen=True)
class InteractiveRun:
    lines: list
    stdout: str
    log: str  # stdout + stderr


@pytest.fixture(scope="session")
def hostile_interactive(pipeline_model, tmp_path_factory) -> InteractiveRun:
    """fairseq-interactive on HOSTILE_LINES with the pipeline model (exit code 0 is checked by run_cli)."""
    def build(root: Path) -> None:
        proc = run_cli([cli("fairseq-interactive"), str(pipeline_model.corpus.data_bin), "--user-dir",
                        str(PLUGIN_DIR), "--task", "translation_xlpos", "--path", str(pipeline_model.checkpoint),
                        *HOSTILE_DECODE], stdin="".join(line + "\n" for line in HOSTILE_LINES), timeout=300)
        (root / "stdout").write_text(proc.stdout, encoding="utf-8")
        (root / "stderr").write_text(proc.stderr, encoding="utf-8")

    root = built_once(tmp_path_factory, "hostile_interactive", build)
    stdout, stderr = ((root / name).read_text(encoding="utf-8") for name in ("stdout", "stderr"))
    return InteractiveRun(list(HOSTILE_LINES), stdout, stdout + stderr)


# ---------------------------------------------------------------------------------------------------------------
# Order: the longest tests first. pytest.ini runs the suite on 2 pytest-xdist workers with work stealing: a long test
# that starts last keeps one worker busy while the other has nothing left, so these start first (the rest keep
# their order). CPU seconds measured on a loaded 2-core machine: the kill-and-resume test ~210, the recipes' data
# ~75 (12 tests), the jackknife's prepare ~40, test_models' three briefly trained models, the 2-process training
# runs, the model shared by test_hub and test_interactive ~50 (built by whichever test needs it first).
SLOW_FIRST = (
    "test_kill_resume.py::test_quickstart_killed_in_every_step_resumes_to_the_uninterrupted_result",
    "test_jackknife.py::test_prepare_jackknifes_the_reorderers_training_lines_and_resumes_fold_by_fold",
    "test_recipe_data.py",
    "test_models.py::test_beam_search_batched_equals_one_sentence_at_a_time",
    "test_distributed.py",
    "test_hub.py",
)


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        name = item.nodeid.rsplit("/", 1)[-1]
        return next((k for k, prefix in enumerate(SLOW_FIRST) if name.startswith(prefix)), len(SLOW_FIRST))

    items[:] = sorted(items, key=rank)  # stable: the order within each rank is pytest's
