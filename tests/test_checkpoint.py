"""fairseq checkpoints load with weights_only=True and xlpos's allowlist; anything else needs an explicit opt-in."""
import argparse
import io
import logging
import os
import pickle

import numpy as np
import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.distributed import utils as distributed_utils

import xlpos  # noqa: F401  (applies the fix)
from xlpos.checkpoint import TRUST_ENV_VAR, UntrustedCheckpointError, fairseq_checkpoint_globals


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
    # Trainer.load_checkpoint sends rank 0's state to the other ranks through broadcast_object (torch.save/load).
    state = checkpoint_utils.load_checkpoint_to_cpu(str(trained_model.checkpoint))
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    received = distributed_utils.torch.load(buffer, map_location="cpu")
    assert received["optimizer_history"][-1]["num_updates"] == trained_model.updates
    assert distributed_utils.torch.distributed is torch.distributed  # everything else is still torch
