"""fairseq's multi-process training with the plugin: the real fairseq-train CLI, 2 processes on CPU (gloo).

Every rank but 0 receives the checkpoint state through fairseq's ``broadcast_object`` rather than from disk, so
resume and ``--restore-file`` exercise the path that multi-GPU jobs take (``--finetune-from-model`` too: it
loads through the same call).
"""
from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import NO_PREFETCH_THREAD, PLUGIN_DIR, cli, run_cli, subprocess_env

WORLD_SIZE = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_args(data_bin: Path, save_dir: Path, max_update: int, mode: str) -> list[str]:
    return [
        str(data_bin), "--user-dir", str(PLUGIN_DIR), "--task", "translation_xlpos", "--arch", "transformer_xlpos",
        *(["--xl-integration", mode] if mode != "default" else []),
        "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--share-all-embeddings",
        "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "300", "--max-update", str(max_update),
        "--cpu", "--seed", "1", "--no-progress-bar", "--log-interval", "1", "--disable-validation",
        "--save-dir", str(save_dir), "--no-epoch-checkpoints", *NO_PREFETCH_THREAD,
    ]


def train_two_ranks(args: list[str], log_dir: Path, name: str) -> list[str]:
    """Run fairseq-train as 2 gloo processes; fail with both logs unless every rank exits 0. Returns the logs."""
    port = free_port()
    procs, logs = [], []
    for rank in range(WORLD_SIZE):
        log = log_dir / f"{name}.rank{rank}.log"
        logs.append(log)
        with open(log, "w") as out:
            procs.append(subprocess.Popen(
                [cli("fairseq-train"), *args, "--distributed-world-size", str(WORLD_SIZE),
                 "--distributed-rank", str(rank), "--distributed-init-method", f"tcp://127.0.0.1:{port}",
                 "--distributed-no-spawn", "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp"],
                stdout=out, stderr=subprocess.STDOUT, env=subprocess_env()))
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=300))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
    texts = [log.read_text() for log in logs]
    if any(codes):
        pytest.fail(f"{name}: exit codes {codes}\n" + "\n".join(f"--- rank {r}:\n{t[-3000:]}"
                                                               for r, t in enumerate(texts)))
    return texts


def updates_of(checkpoint: Path) -> int:
    from fairseq import checkpoint_utils

    import xlpos  # noqa: F401  (safe loading)

    return checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))["optimizer_history"][-1]["num_updates"]


def first_logged_update(log: str) -> int:
    return int(re.search(r"num_updates=(\d+)", log).group(1))


# One XL mode: what crosses ranks (the checkpoint's broadcast) does not depend on it; every mode's loading of
# another checkpoint through the real CLI is covered by test_finetune_xl_model_from_a_vanilla_checkpoint below.
@pytest.mark.parametrize("mode", ["default"])
def test_train_resume_and_restore_with_two_processes(tiny_corpus, tmp_path, mode):
    data = tiny_corpus.data_bin
    first = tmp_path / "first"

    train_two_ranks(tiny_args(data, first, 3, mode), tmp_path, "train")
    assert updates_of(first / "checkpoint_last.pt") == 3

    # Resume: every rank loads checkpoint_last (rank 0 from disk, the others through the broadcast).
    logs = train_two_ranks(tiny_args(data, first, 5, mode), tmp_path, "resume")
    assert updates_of(first / "checkpoint_last.pt") == 5
    assert first_logged_update(logs[0]) == 4  # continued from update 3, not restarted

    # --restore-file of another run, optimizer reset: the weights and the update count carry over.
    restored = tmp_path / "restored"
    logs = train_two_ranks([*tiny_args(data, restored, 7, mode), "--restore-file",
                            str(first / "checkpoint_last.pt"), "--reset-optimizer"], tmp_path, "restore")
    assert "Loaded checkpoint" in logs[0] and str(first / "checkpoint_last.pt") in logs[0]
    assert updates_of(restored / "checkpoint_last.pt") == 7
    # (--finetune-from-model loads through this same call, fairseq's checkpoint_utils.load_checkpoint ->
    # Trainer.load_checkpoint and its broadcast, with the optimizer, scheduler, meters and data iterator reset in
    # each process: its XL checks are the single-process test below, for every mode)


@pytest.fixture(scope="module")
def vanilla_checkpoint(tiny_corpus, tmp_path_factory) -> Path:
    """fairseq's own transformer and translation task: a checkpoint that knows nothing of xlpos."""
    save_dir = tmp_path_factory.mktemp("vanilla")
    args = tiny_args(tiny_corpus.data_bin, save_dir, 3, "default")
    args[args.index("translation_xlpos")] = "translation"
    args[args.index("transformer_xlpos")] = "transformer"
    run_cli([cli("fairseq-train"), *args])
    return save_dir / "checkpoint_last.pt"


@pytest.mark.parametrize("mode", ["default", "sum", "head", "rope"])
def test_finetune_xl_model_from_a_vanilla_checkpoint(tiny_corpus, vanilla_checkpoint, tmp_path, mode):
    fusion = ["--xl-integration", "input", "--xl-fusion", "sum"] if mode == "sum" else []
    args = tiny_args(tiny_corpus.data_bin, tmp_path / "xl", 2, "default" if mode == "sum" else mode)
    proc = run_cli([cli("fairseq-train"), *args, *fusion, "--finetune-from-model", str(vanilla_checkpoint)])
    log = proc.stdout + proc.stderr
    assert "loaded checkpoint" in log.lower() and first_logged_update(log) == 1
    from fairseq import checkpoint_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "xl" / "checkpoint_last.pt"))
    assert state["optimizer_history"][-1]["num_updates"] == 2
    # the default fusion has parameters (filled with their initial values), sum, head and rope none
    assert any(k.startswith("encoder.xl_fusion.") for k in state["model"]) == (mode == "default")
