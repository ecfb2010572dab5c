"""Safe loading of fairseq checkpoints under torch >= 2.6 (``weights_only=True`` with an allowlist).

fairseq 0.12 calls ``torch.load(f, map_location=...)`` without ``weights_only``; since torch 2.6 that means
``weights_only=True`` and every fairseq checkpoint fails on ``argparse.Namespace``.  Instead of turning the
restricted unpickler off, :func:`install` gives fairseq's checkpoint code (and only it) a ``torch`` whose
``load`` runs with ``weights_only=True`` inside ``torch.serialization.safe_globals(FAIRSEQ_CHECKPOINT_GLOBALS)``.
Every other ``torch.load`` in the process keeps torch's own default and allowlist.

Patched call sites (each module's ``torch`` name is replaced by a proxy that forwards everything but ``load``):

* ``fairseq.checkpoint_utils``: ``load_checkpoint_to_cpu`` (training resume via ``Trainer.load_checkpoint``,
  ``fairseq-generate``, ``fairseq-interactive``, ``load_model_ensemble*``, hub ``from_pretrained``) and
  ``load_ema_from_checkpoint``.
* ``fairseq.distributed.utils``: ``broadcast_object``, with which ``Trainer.load_checkpoint`` sends the state that
  rank 0 loaded to the other ranks in multi-GPU training.

A checkpoint that needs anything outside the allowlist fails with :class:`UntrustedCheckpointError`, a one-line
message naming the classes and the opt-in ``XLPOS_TRUST_CHECKPOINT=1``; with it, that one checkpoint is loaded with
``weights_only=False`` and a warning is logged.

How the allowlist was determined: checkpoints written by fairseq-train 0.12.3 (torch 2.13, numpy 2.4) with
arch transformer / transformer_iwslt_de_en / transformer_xlpos, optimizers adam / nag, schedulers inverse_sqrt /
reduce_lr_on_plateau / fixed, ``--store-ema``, ``--eval-bleu --best-checkpoint-metric bleu`` and
``--keep-best-checkpoints`` were scanned with ``torch.serialization.get_unsafe_globals_in_checkpoint``:

* every checkpoint: ``argparse.Namespace`` (the model args of architectures registered the argparse way);
* with ``--eval-bleu``: ``numpy._core.multiarray._reconstruct``, ``numpy.ndarray``, ``numpy.dtype`` (the BLEU
  n-gram counts are numpy arrays inside the saved metrics state);
* a checkpoint re-saved from ``checkpoint_utils.load_checkpoint_to_cpu`` (a common way to strip optimizer state)
  holds ``cfg`` as an omegaconf DictConfig: ``omegaconf.dictconfig.DictConfig``, ``omegaconf.listconfig.ListConfig``,
  ``omegaconf.nodes.AnyNode``, ``omegaconf.base.ContainerMetadata``, ``omegaconf.base.Metadata``, ``typing.Any``,
  ``collections.defaultdict``, ``builtins.dict``, ``builtins.list``, ``builtins.int``.

Added beyond what was observed, because fairseq stores numbers it gets from numpy in the same places:
``numpy._core.multiarray.scalar`` (numpy scalars), and the numpy-1.x spellings ``numpy.core.multiarray._reconstruct``
/ ``numpy.core.multiarray.scalar`` used by checkpoints pickled under numpy < 2.  ``fairseq.dataclass.constants``
ChoiceEnum members never occur: fairseq saves ``cfg`` with ``enum_to_str=True``, and its dynamically created enum
classes cannot be pickled at all.
"""
from __future__ import annotations

import argparse
import collections
import logging
import os
import pickle
import re
import typing
from typing import Any, Callable, Optional

import numpy as np
import torch

logger = logging.getLogger(__name__)

TRUST_ENV_VAR = "XLPOS_TRUST_CHECKPOINT"


def _omegaconf_globals() -> list[Callable]:
    from omegaconf import DictConfig, ListConfig
    from omegaconf.base import ContainerMetadata, Metadata
    from omegaconf.nodes import AnyNode

    return [DictConfig, ListConfig, ContainerMetadata, Metadata, AnyNode]


def _numpy_globals() -> list[Callable | tuple[Callable, str]]:
    multiarray = np._core.multiarray if hasattr(np, "_core") else np.core.multiarray
    entries: list[Callable | tuple[Callable, str]] = [np.ndarray, np.dtype]
    # Unpickling a dtype instance builds an object of its class (numpy.dtypes.Int64DType, ...): allow the
    # numeric and boolean ones, not object/string/void dtypes, which fairseq never stores.
    entries += sorted({type(np.dtype(code)) for code in "?bBhHiIlLqQefdgFD"}, key=lambda t: t.__name__)
    # numpy 2 pickles these as numpy._core.multiarray.*, numpy 1.x as numpy.core.multiarray.*: accept both.
    for package in ("numpy._core", "numpy.core"):
        entries += [(multiarray._reconstruct, f"{package}.multiarray._reconstruct"),
                    (multiarray.scalar, f"{package}.multiarray.scalar")]
    return entries


def fairseq_checkpoint_globals() -> list[Callable | tuple[Callable, str]]:
    """The classes/functions (beyond torch's defaults) that fairseq checkpoints are allowed to reference."""
    return [
        argparse.Namespace,
        collections.defaultdict,
        typing.Any,
        dict,
        list,
        int,
        *_omegaconf_globals(),
        *_numpy_globals(),
    ]


def allowlisted_global_names() -> list[str]:
    """``module.name`` of every allowlisted global, as they appear in pickles (for reports and messages)."""
    names = []
    for entry in fairseq_checkpoint_globals():
        if isinstance(entry, tuple):
            names.append(entry[1])
        elif entry is typing.Any:
            names.append("typing.Any")
        else:
            names.append(f"{entry.__module__}.{entry.__qualname__}")
    return sorted(names)


class UntrustedCheckpointError(pickle.UnpicklingError):
    """A fairseq checkpoint references a class outside the allowlist and the user has not opted in."""


def trust_all_checkpoints() -> bool:
    return os.environ.get(TRUST_ENV_VAR, "").strip().lower() in ("1", "true", "yes")


_BLOCKED_GLOBAL = re.compile(r"GLOBAL (\S+) was not an allowed global")


def _describe(f: Any) -> str:
    if isinstance(f, (str, os.PathLike)):
        return os.fspath(f)
    name = getattr(f, "name", None)
    return name if isinstance(name, str) else "in-memory checkpoint"


def _fairseq_allowlist() -> torch.serialization.safe_globals:
    """Context manager adding the fairseq allowlist for the duration of one load.

    Only entries the user has not allowlisted already are added, so leaving the context never removes the
    user's own ``add_safe_globals`` entries. (torch keeps this list process-wide: during the load, other threads
    see the same additions.)
    """
    present = set(torch.serialization.get_safe_globals())
    return torch.serialization.safe_globals([g for g in fairseq_checkpoint_globals() if g not in present])


def _blocked_globals(f: Any, start: Optional[int], error: pickle.UnpicklingError) -> list[str]:
    """All disallowed globals of the checkpoint if it can be scanned, else the one named in torch's error."""
    try:
        if start is not None:
            f.seek(start)
        with _fairseq_allowlist():
            names = sorted(torch.serialization.get_unsafe_globals_in_checkpoint(f))
        if names:
            return names
    except Exception:  # legacy (non-zip) format or unreadable: fall back to the error text
        pass
    match = _BLOCKED_GLOBAL.search(str(error))
    return [match.group(1)] if match else []


def _unpickler_reason(error: pickle.UnpicklingError) -> str:
    """The restricted unpickler's own reason, on one line, without torch's generic advice around it."""
    text = str(error)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1]
    text = text.split("Check the documentation of torch.load", 1)[0]
    return " ".join(text.split())


def load_fairseq_checkpoint(f: Any, map_location: Any = None, **kwargs: Any) -> Any:
    """``torch.load`` as fairseq's checkpoint code should call it: restricted unpickler + fairseq allowlist."""
    # fairseq never chooses weights_only itself; the policy here is not something a call site may override.
    kwargs.pop("weights_only", None)
    start = f.tell() if hasattr(f, "tell") and hasattr(f, "seek") else None
    try:
        with _fairseq_allowlist():
            return torch.load(f, map_location=map_location, weights_only=True, **kwargs)
    except pickle.UnpicklingError as error:
        where = _describe(f)
        blocked = _blocked_globals(f, start, error)
        what = ", ".join(blocked) if blocked else "content the restricted unpickler rejects"
        if not trust_all_checkpoints():
            detail = "" if blocked else f" ({_unpickler_reason(error)})"
            raise UntrustedCheckpointError(
                f"{where}: checkpoint needs {what}, outside xlpos's allowlist of fairseq checkpoint classes; "
                f"unpickling it could run arbitrary code. If you trust this file, set {TRUST_ENV_VAR}=1 to load "
                f"it with weights_only=False{detail}"
            ) from None
        logger.warning("%s=1: loading %s with weights_only=False (it needs %s)", TRUST_ENV_VAR, where, what)
        if start is not None:
            f.seek(start)
        return torch.load(f, map_location=map_location, weights_only=False, **kwargs)


class _TorchWithSafeLoad:
    """Stands in for the ``torch`` module inside one fairseq module: ``load`` is safe, the rest is torch's."""

    def __init__(self, module: Any):
        self._module = module

    def load(self, f: Any, map_location: Any = None, **kwargs: Any) -> Any:
        return load_fairseq_checkpoint(f, map_location=map_location, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def __repr__(self) -> str:
        return f"<torch for fairseq checkpoint loading (xlpos): {self._module!r}>"


# fairseq modules whose `torch.load` reads checkpoints (see the module docstring).
PATCHED_MODULES = ("fairseq.checkpoint_utils", "fairseq.distributed.utils")


def install() -> None:
    """Route the ``torch.load`` of fairseq's checkpoint-loading modules through :func:`load_fairseq_checkpoint`.

    Idempotent; the global ``torch.load`` and torch's global allowlist are left untouched.
    """
    import importlib

    for name in PATCHED_MODULES:
        module = importlib.import_module(name)
        if not isinstance(module.torch, _TorchWithSafeLoad):
            module.torch = _TorchWithSafeLoad(module.torch)


def installed() -> bool:
    import importlib

    return all(isinstance(importlib.import_module(n).torch, _TorchWithSafeLoad) for n in PATCHED_MODULES)
