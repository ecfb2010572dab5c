"""fairseq checkpoints load with weights_only=True and xlpos's allowlist; anything else needs an explicit opt-in."""
import argparse
import io
import logging
import os
import pickle
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.distributed import utils as distributed_utils

import xlpos  # noqa: F401  (applies the fix)
from xlpos.checkpoint import (
    TRUST_ENV_VAR,
    UnreadableCheckpointError,
    UntrustedCheckpointError,
    fairseq_checkpoint_globals,
)


class NotAllowlisted:
    """A class a checkpoint may not contain unless the user trusts the file."""

    def __init__(self, value):
        self.value = value


class RunsCodeWhenUnpickled:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@pytest.fixture(autouse=True)
def no_trust_from_environment(monkeypatch):
    monkeypatch.delenv(TRUST_ENV_VAR, raising=False)


def test_real_checkpoint_loads(trained_model):
    state = checkpoint_utils.load_checkpoint_to_cpu(str(trained_model.checkpoint))
    assert state["optimizer_history"][-1]["num_updates"] == trained_model.updates
    assert state["cfg"].task._name == "translation_xlpos"
    assert any(k.startswith("encoder.") for k in state["model"])


def test_allowlist_covers_everything_the_real_checkpoint_needs(trained_model):
    with torch.serialization.safe_globals(fairseq_checkpoint_globals()):
        assert torch.serialization.get_unsafe_globals_in_checkpoint(str(trained_model.checkpoint)) == []
    # ... and it is not vacuous: without the allowlist the checkpoint needs argparse.Namespace and numpy
    needed = set(torch.serialization.get_unsafe_globals_in_checkpoint(str(trained_model.checkpoint)))
    assert "argparse.Namespace" in needed and "numpy.ndarray" in needed


def test_resaved_state_with_omegaconf_config_and_numpy_values_loads(trained_model, tmp_path):
    state = checkpoint_utils.load_checkpoint_to_cpu(str(trained_model.checkpoint))
    state["extra_state"]["numbers"] = {"scalar": np.float64(1.5), "array": np.arange(3, dtype=np.int32)}
    path = tmp_path / "resaved.pt"
    torch.save(state, path)  # cfg is now an omegaconf DictConfig, as after fairseq's own loading
    again = checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert again["cfg"].model.encoder_embed_dim == state["cfg"].model.encoder_embed_dim
    assert again["extra_state"]["numbers"]["scalar"] == 1.5
    assert again["extra_state"]["numbers"]["array"].tolist() == [0, 1, 2]


def crafted_checkpoint(trained_model, tmp_path, payload) -> str:
    state = torch.load(trained_model.checkpoint, weights_only=False)
    state["extra_state"]["payload"] = payload
    path = tmp_path / "crafted.pt"
    torch.save(state, path)
    return str(path)


def test_unknown_class_fails_with_one_line_naming_it_and_the_opt_in(trained_model, tmp_path):
    path = crafted_checkpoint(trained_model, tmp_path, NotAllowlisted(7))
    with pytest.raises(UntrustedCheckpointError) as error:
        checkpoint_utils.load_checkpoint_to_cpu(path)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(path)
    assert f"{NotAllowlisted.__module__}.NotAllowlisted" in message
    assert f"{TRUST_ENV_VAR}=1" in message


def test_opt_in_loads_that_checkpoint_with_a_warning(trained_model, tmp_path, monkeypatch, caplog):
    path = crafted_checkpoint(trained_model, tmp_path, NotAllowlisted(7))
    monkeypatch.setenv(TRUST_ENV_VAR, "1")
    with caplog.at_level(logging.WARNING, logger="xlpos.checkpoint"):
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
    assert state["extra_state"]["payload"].value == 7
    assert any("weights_only=False" in r.getMessage() and path in r.getMessage() for r in caplog.records)


def test_code_in_a_checkpoint_does_not_run(trained_model, tmp_path):
    marker = tmp_path / "ran"
    path = crafted_checkpoint(trained_model, tmp_path, RunsCodeWhenUnpickled(str(marker)))
    with pytest.raises(UntrustedCheckpointError, match=r"posix\.mkdir"):
        checkpoint_utils.load_checkpoint_to_cpu(path)
    assert not marker.exists()


def test_global_torch_load_is_untouched(trained_model):
    assert torch.load is torch.serialization.load
    before = list(torch.serialization.get_safe_globals())
    checkpoint_utils.load_checkpoint_to_cpu(str(trained_model.checkpoint))
    assert torch.serialization.get_safe_globals() == before
    # outside fairseq's checkpoint code, torch's own default still refuses the checkpoint
    with pytest.raises(pickle.UnpicklingError, match="argparse.Namespace"):
        torch.load(trained_model.checkpoint)


def test_users_own_allowlist_entries_survive_a_fairseq_load(trained_model):
    with torch.serialization.safe_globals([argparse.Namespace]):
        checkpoint_utils.load_checkpoint_to_cpu(str(trained_model.checkpoint))
        assert argparse.Namespace in torch.serialization.get_safe_globals()


def test_distributed_state_broadcast_uses_the_same_loader(trained_model):
    # Trainer.load_checkpoint sends rank 0's state to the other ranks with broadcast_object: the state is pickled
    # with every tensor replaced by fairseq's _TensorPlaceholder, and the receiving ranks torch.load it.
    state = checkpoint_utils.load_checkpoint_to_cpu(str(trained_model.checkpoint))
    tensors = []
    skeleton = distributed_utils._split_tensors_from_obj(state, tensors)
    buffer = io.BytesIO()
    torch.save(skeleton, buffer)  # what _broadcast_object_slow sends
    received = distributed_utils.torch.load(io.BytesIO(buffer.getvalue()), map_location="cpu")
    rebuilt = distributed_utils._put_tensors_in_obj(received, tensors)
    assert rebuilt["optimizer_history"][-1]["num_updates"] == trained_model.updates
    assert all(torch.equal(rebuilt["model"][k], v) for k, v in state["model"].items())
    assert distributed_utils.torch.distributed is torch.distributed  # everything else is still torch
    # the placeholder is allowed for the broadcast only, not in checkpoint files
    path = io.BytesIO(buffer.getvalue())
    with pytest.raises(UntrustedCheckpointError, match="_TensorPlaceholder"):
        checkpoint_utils.torch.load(path, map_location="cpu")


def test_a_code_running_broadcast_is_refused(trained_model, tmp_path):
    marker = tmp_path / "ran"
    buffer = io.BytesIO()
    torch.save({"state": RunsCodeWhenUnpickled(str(marker))}, buffer)
    with pytest.raises(UntrustedCheckpointError, match=r"posix\.mkdir"):
        distributed_utils.torch.load(io.BytesIO(buffer.getvalue()), map_location="cpu")
    assert not marker.exists()


def damaged_copies(source: Path, tmp_path: Path) -> dict:
    data = source.read_bytes()
    flipped = bytearray(data)
    middle = len(data) // 2
    flipped[middle:middle + 64] = bytes(b ^ 0xFF for b in flipped[middle:middle + 64])
    copies = {
        "empty": b"",
        "truncated": data[: len(data) // 2],
        "header only": data[:40],
        "tail cut": data[:-100],
        "text": b"this is not a checkpoint\n",
        "plain pickle": pickle.dumps({"model": {}}),
        "bytes flipped": bytes(flipped),
    }
    paths = {}
    for name, content in copies.items():
        path = tmp_path / (name.replace(" ", "_") + ".pt")
        path.write_bytes(content)
        paths[name] = path
    return paths


def test_damaged_checkpoints_say_not_readable_and_never_suggest_trusting_them(trained_model, tmp_path):
    for name, path in damaged_copies(trained_model.checkpoint, tmp_path).items():
        with pytest.raises(UnreadableCheckpointError) as error:
            checkpoint_utils.load_checkpoint_to_cpu(str(path))
        message = str(error.value)
        assert message.startswith(f"not a readable checkpoint: {path}"), (name, message)
        assert "\n" not in message and TRUST_ENV_VAR not in message, (name, message)


def test_damaged_checkpoint_stays_unreadable_with_the_opt_in(trained_model, tmp_path, monkeypatch):
    monkeypatch.setenv(TRUST_ENV_VAR, "1")
    path = damaged_copies(trained_model.checkpoint, tmp_path)["truncated"]
    with pytest.raises(UnreadableCheckpointError):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))


def test_concurrent_loads_leave_the_global_allowlist_as_it_was(trained_model):
    data = trained_model.checkpoint.read_bytes()
    before = set(torch.serialization.get_safe_globals())
    errors = []

    def load_many():
        try:
            for _ in range(5):
                checkpoint_utils.torch.load(io.BytesIO(data), map_location="cpu")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=load_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert set(torch.serialization.get_safe_globals()) == before


def test_training_resumes_from_the_newest_readable_checkpoint_when_the_last_is_truncated(trained_model, tmp_path):
    """A disk that filled while fairseq copied checkpoint_best.pt to checkpoint_last.pt left the latter truncated:
    training resumes from the former, with a warning naming both, and trains on to what resuming from an intact
    checkpoint_last.pt gives."""
    from conftest import run_cli, tiny_model_args

    saves = {}
    for name in ("intact", "truncated"):
        save = tmp_path / name
        shutil.copytree(trained_model.save_dir, save)
        last = save / "checkpoint_last.pt"
        (save / "checkpoint_best.pt").write_bytes(last.read_bytes())  # the save the copy was made from
        if name == "truncated":
            last.write_bytes(last.read_bytes()[:last.stat().st_size // 2])
        proc = run_cli(tiny_model_args(trained_model.corpus, save, trained_model.updates + 2, tmp_path / f"tb-{name}"))
        saves[name] = save
        if name == "truncated":
            log = proc.stdout + proc.stderr
            assert (f"{last} is not a readable checkpoint (BadZipFile" in log
                    and f"resuming from {save / 'checkpoint_best.pt'}, the newest readable checkpoint" in log), log
    states = {name: checkpoint_utils.load_checkpoint_to_cpu(str(save / "checkpoint_last.pt"))
              for name, save in saves.items()}
    assert [s["optimizer_history"][-1]["num_updates"] for s in states.values()] == [trained_model.updates + 2] * 2
    intact, resumed = states["intact"]["model"], states["truncated"]["model"]
    assert intact.keys() == resumed.keys() and all(torch.equal(intact[k], resumed[k]) for k in intact)


def test_a_resume_with_no_readable_checkpoint_stops_naming_the_file(trained_model, tmp_path):
    from conftest import subprocess_env, tiny_model_args

    save = tmp_path / "save"
    save.mkdir()
    (save / "checkpoint_last.pt").write_bytes(trained_model.checkpoint.read_bytes()[:1000])
    proc = subprocess.run(tiny_model_args(trained_model.corpus, save, trained_model.updates + 1, tmp_path / "tb"),
                          capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert proc.returncode != 0
    assert (f"not a readable checkpoint: {save / 'checkpoint_last.pt'}: " in proc.stderr
            and f"move {save / 'checkpoint_last.pt'} away to train from the start" in proc.stderr), proc.stderr[-3000:]
