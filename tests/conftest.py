"""Shared fixtures: a tiny synthetic parallel corpus binarized for fairseq, with XL positions, and a model
trained on it through the real fairseq-train CLI.

Corpus: 300/40/20 train/valid/test sentences of 3-8 words from a 30-word vocabulary (``w0``..``w29``); the
target is the source with each word upper-cased (``W3``) and laid out in a fixed reordering (even source indices
left to right, then odd ones right to left), so the XL positions of every sentence are known exactly.
"""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
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


def run_cli(args: list[str], cwd: Path | None = None, stdin: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """Run a CLI; on failure, fail the test with the end of its output."""
    proc = subprocess.run(args, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout,
                          env=subprocess_env())
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, args[:2]))} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-5000:]}")
    return proc


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


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> TinyCorpus:
    """Raw files, fairseq-preprocess output (joined dictionary) and binarized XL positions of every split."""
    from xlpos.data.binarize import binarize_xl_positions

    root = tmp_path_factory.mktemp("tiny_corpus")
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
    return corpus


def tiny_model_args(corpus: TinyCorpus, save_dir: Path, max_update: int, tensorboard_dir: Path) -> list[str]:
    """fairseq-train arguments for a 1-layer, 16-dim transformer_xlpos (InXL) that trains in seconds."""
    return [
        cli("fairseq-train"), str(corpus.data_bin), "--user-dir", str(PLUGIN_DIR),
        "--task", "translation_xlpos", "--arch", "transformer_xlpos", "--xl-integration", "input",
        "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--share-all-embeddings",
        "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "600", "--max-update", str(max_update),
        "--cpu", "--seed", "1", "--no-progress-bar", "--log-interval", "1",
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


@pytest.fixture(scope="session")
def trained_model(tiny_corpus, tmp_path_factory) -> TrainedModel:
    """A transformer_xlpos model trained for a few updates with the real fairseq-train CLI."""
    root = tmp_path_factory.mktemp("trained")
    save_dir, tensorboard_dir, updates = root / "checkpoints", root / "tensorboard", 6
    proc = run_cli(tiny_model_args(tiny_corpus, save_dir, updates, tensorboard_dir))
    return TrainedModel(tiny_corpus, save_dir, tensorboard_dir, updates, proc.stdout + proc.stderr)
