"""Safe loading of fairseq checkpoints under torch >= 2.6 (``weights_only=True`` with an allowlist).

fairseq 0.12 calls ``torch.load(f, map_location=...)`` without ``weights_only``; since torch 2.6 that means
``weights_only=True`` and every fairseq checkpoint fails on ``argparse.Namespace``.  Instead of turning the
restricted unpickler off, :func:`install` gives fairseq's checkpoint code (and only it) a ``torch`` whose
``load`` runs with ``weights_only=True`` inside ``torch.serialization.safe_globals(FAIRSEQ_CHECKPOINT_GLOBALS)``.
Every other ``torch.load`` in the process keeps torch's own default and allowlist.

Every place in fairseq 0.12 that reads a pickled state with ``torch.load`` (audited with ``grep -rn torch.load``
over the installed fairseq, outside examples/ and speech/audio models) goes through one of the two patched
modules, each of whose ``torch`` name is replaced by a proxy that forwards everything but ``load``:

* ``fairseq.checkpoint_utils``: ``load_checkpoint_to_cpu`` — training resume (``Trainer.load_checkpoint``, auto
  from ``checkpoint_last.pt``, ``--restore-file``, ``--finetune-from-model``), ``fairseq-generate``,
  ``fairseq-interactive``, ``load_model_ensemble*`` (and so the hub's ``from_pretrained`` via ``hub_utils``),
  ``--load-checkpoint-on-all-dp-ranks``, each shard of a sharded/FSDP checkpoint (``-shard{i}`` files are read
  one by one with the same function); ``load_ema_from_checkpoint`` (EMA, and fairseq's EMA averaging).
* ``fairseq.distributed.utils``: ``_broadcast_object_slow``, behind ``broadcast_object`` and
  ``broadcast_tensors``, with which ``Trainer.load_checkpoint`` sends the state rank 0 loaded to the other ranks
  (every multi-process job), FSDP's ``load_state_dict`` broadcasts a consolidated state, and ZeRO's
  ``FairseqOSS.broadcast_global_state_dict`` the optimizer state. ``broadcast_object`` pickles the state with its
  tensors replaced by ``fairseq.distributed.utils._TensorPlaceholder`` (a frozen dataclass holding one int); that
  class is allowed for this module only. Tensor metadata (``torch.Size``, dtypes, devices) is in torch's own list.

Not through ``torch.load``, so not affected: ``all_gather_list`` (plain ``pickle`` of logging outputs between ranks
of one job). Not patched: fairseq's ``scripts/average_checkpoints.py`` calls the global ``torch.load`` (torch's
default refuses fairseq checkpoints); use ``recipes/average_checkpoints.py``, which reads through fairseq's loader.

Outcomes: a complete checkpoint within the allowlist loads with ``weights_only=True``. A file that is empty,
truncated, corrupt or not written by ``torch.save`` fails with :class:`UnreadableCheckpointError`, "not a readable
checkpoint: FILE: what torch found" (the CRC-32 of every record of a checkpoint file is checked first: torch's reader
does not, and flipped bytes inside tensor data would otherwise load as wrong weights). A readable checkpoint that needs anything outside the allowlist fails with
:class:`UntrustedCheckpointError`, a one-line message naming the classes and the opt-in ``XLPOS_TRUST_CHECKPOINT=1``;
with it, that one checkpoint is loaded with ``weights_only=False`` and a warning is logged. The allowlist is added
to torch's process-wide list for one load at a time, under a lock, and removed after it.

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
import contextlib
import functools
import io
import logging
import os
import pickle
import re
import shutil
import threading
import typing
import zipfile
from typing import Any, Callable, Iterator, Optional, Sequence

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


class UntrustedCheckpointError(pickle.UnpicklingError):
    """A fairseq checkpoint references a class outside the allowlist and the user has not opted in."""


class UnreadableCheckpointError(ValueError):
    """The file is not a checkpoint torch can read: empty, truncated, corrupt, or not written by ``torch.save``."""


def trust_all_checkpoints() -> bool:
    return os.environ.get(TRUST_ENV_VAR, "").strip().lower() in ("1", "true", "yes")


_BLOCKED_GLOBAL = re.compile(r"GLOBAL (\S+) was not an allowed global")
_ZIP_MAGIC = b"PK\x03\x04"
# torch.save's legacy (pre-1.6, non-zip) format starts with its magic number pickled with protocol 2.
_LEGACY_MAGIC = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2)[2:]

# torch keeps its allowlist in one process-wide set; this lock makes "add ours, load, remove ours" one step, so
# that two threads loading checkpoints (or one loading while another adds its own entries through us) never see a
# half-changed list or remove each other's entries.
_ALLOWLIST_LOCK = threading.RLock()


def _describe(f: Any) -> str:
    if isinstance(f, (str, os.PathLike)):
        return os.fspath(f)
    name = getattr(f, "name", None)
    return name if isinstance(name, str) else "in-memory checkpoint"


@contextlib.contextmanager
def _fairseq_allowlist(extra: Sequence[Callable] = ()) -> Iterator[None]:
    """Hold the lock and add the fairseq allowlist (plus ``extra``) to torch's for the duration of one load.

    Only entries the user has not allowlisted already are added, so leaving the context never removes the
    user's own ``add_safe_globals`` entries.
    """
    with _ALLOWLIST_LOCK:
        present = set(torch.serialization.get_safe_globals())
        wanted = [g for g in [*fairseq_checkpoint_globals(), *extra] if g not in present]
        with torch.serialization.safe_globals(wanted):
            yield


def _read_prefix(f: Any, start: Optional[int], n: int = 32) -> bytes:
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as handle:
            return handle.read(n)
    head = f.read(n)
    _rewind(f, start)
    return head


def _format_of(head: bytes) -> Optional[str]:
    if head.startswith(_ZIP_MAGIC):
        return "zip"
    if head[:2] == b"\x80\x02" and head[2:].startswith(_LEGACY_MAGIC):
        return "legacy"
    return None


def _unreadable(where: str, why: str) -> UnreadableCheckpointError:
    # torch's zip reader appends a paragraph of generic advice: keep its first sentence.
    why = " ".join(str(why).split()).split(". This is an internal miniz error", 1)[0]
    return UnreadableCheckpointError(f"not a readable checkpoint: {where}: {why}")


def _rewind(f: Any, start: Optional[int]) -> None:
    if start is not None:
        f.seek(start)


def _disallowed_globals(f: Any, start: Optional[int], extra: Sequence[Callable], where: str) -> list[str]:
    """Globals of a zip checkpoint outside torch's defaults + the allowlist, found without unpickling anything."""
    try:
        with _fairseq_allowlist(extra):
            names = sorted(torch.serialization.get_unsafe_globals_in_checkpoint(f))
    except Exception as error:  # a damaged archive or pickle stream: say what torch found
        raise _unreadable(where, f"{type(error).__name__}: {error}") from None
    finally:
        _rewind(f, start)
    return names


def _untrusted(where: str, what: str, detail: str = "") -> UntrustedCheckpointError:
    return UntrustedCheckpointError(
        f"{where}: checkpoint needs {what}, outside xlpos's allowlist of fairseq checkpoint classes; unpickling it "
        f"could run arbitrary code. If you trust this file, set {TRUST_ENV_VAR}=1 to load it with "
        f"weights_only=False{detail}")


def _corrupt_record(f: Any, start: Optional[int], where: str) -> Optional[str]:
    """The first record of a zip checkpoint whose CRC-32 does not match its data, else None.

    torch's reader does not check the checksums its writer stores, so flipped bytes inside tensor data load
    silently as wrong weights; this reads the file once more (about 1 GB/s) to catch them.
    """
    try:
        with zipfile.ZipFile(f) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, EOFError, ValueError) as error:
        raise _unreadable(where, f"{type(error).__name__}: {error}") from None
    finally:
        _rewind(f, start)


def load_fairseq_checkpoint(f: Any, map_location: Any = None, extra_globals: Sequence[Callable] = (),
                            verify_checksums: bool = True, **kwargs: Any) -> Any:
    """``torch.load`` as fairseq's checkpoint code should call it: restricted unpickler + fairseq allowlist.

    ``extra_globals`` are allowed for this call only (the distributed broadcast's tensor placeholders).
    ``verify_checksums``: check the CRC-32 of every record of a zip checkpoint first (off for the broadcast, whose
    bytes come from rank 0's memory).
    Raises :class:`UnreadableCheckpointError` ("not a readable checkpoint: FILE: ...") for anything that is not a
    complete ``torch.save`` file, and :class:`UntrustedCheckpointError`, naming the classes and the opt-in, for a
    readable checkpoint that needs classes outside the allowlist.
    """
    # fairseq never chooses weights_only itself; the policy here is not something a call site may override.
    kwargs.pop("weights_only", None)
    where = _describe(f)
    if not isinstance(f, (str, os.PathLike)) and not (hasattr(f, "seek") and hasattr(f, "tell")):
        f = io.BytesIO(f.read())  # a stream: keep it, the format check and the scan read it more than once
    start = f.tell() if hasattr(f, "tell") else None
    kind = _format_of(_read_prefix(f, start))
    if kind is None:
        raise _unreadable(where, "empty, truncated or not written by torch.save (neither a zip archive nor torch's "
                                 "legacy format)")
    if kind == "zip" and verify_checksums:
        record = _corrupt_record(f, start, where)
        if record is not None:
            raise _unreadable(where, f"record {record} fails its CRC-32 check (the file is corrupt)")
    blocked = _disallowed_globals(f, start, extra_globals, where) if kind == "zip" else []
    if not blocked:
        try:
            with _fairseq_allowlist(extra_globals):
                return torch.load(f, map_location=map_location, weights_only=True, **kwargs)
        except pickle.UnpicklingError as error:
            match = _BLOCKED_GLOBAL.search(str(error))
            if match is None:  # not a class we refused: the pickle stream itself is damaged
                raise _unreadable(where, _unpickler_reason(error)) from None
            blocked = [match.group(1)]
        except (RuntimeError, EOFError, ValueError, KeyError, IndexError, OSError, zipfile.BadZipFile) as error:
            raise _unreadable(where, f"{type(error).__name__}: {error}") from None
        _rewind(f, start)
    what = ", ".join(blocked)
    if not trust_all_checkpoints():
        raise _untrusted(where, what)
    logger.warning("%s=1: loading %s with weights_only=False (it needs %s)", TRUST_ENV_VAR, where, what)
    return torch.load(f, map_location=map_location, weights_only=False, **kwargs)


def _unpickler_reason(error: pickle.UnpicklingError) -> str:
    """The restricted unpickler's own reason, on one line, without torch's generic advice around it."""
    text = str(error)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1]
    text = text.split("Check the documentation of torch.load", 1)[0]
    return " ".join(text.split())


class _TorchWithSafeLoad:
    """Stands in for the ``torch`` module inside one fairseq module: ``load`` is safe, the rest is torch's."""

    def __init__(self, module: Any, extra_globals: Sequence[Callable] = (), verify_checksums: bool = True):
        self._module = module
        self._extra_globals = tuple(extra_globals)
        self._verify_checksums = verify_checksums

    def load(self, f: Any, map_location: Any = None, **kwargs: Any) -> Any:
        return load_fairseq_checkpoint(f, map_location=map_location, extra_globals=self._extra_globals,
                                       verify_checksums=self._verify_checksums, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def __repr__(self) -> str:
        return f"<torch for fairseq checkpoint loading (xlpos): {self._module!r}>"


# fairseq modules whose `torch.load` reads checkpoints (see the module docstring).
PATCHED_MODULES = ("fairseq.checkpoint_utils", "fairseq.distributed.utils")


def _module_load_options(name: str) -> dict:
    """How one patched module loads: what it may unpickle beyond the allowlist, whether to verify checksums."""
    if name == "fairseq.distributed.utils":
        # broadcast_object pickles rank 0's (already checked) state with every tensor replaced by this frozen
        # dataclass holding one int; the tensors travel separately through broadcast_tensors. The bytes come
        # from rank 0's memory, not from a file that could be damaged: no checksum pass.
        from fairseq.distributed.utils import _TensorPlaceholder

        return {"extra_globals": (_TensorPlaceholder,), "verify_checksums": False}
    return {}


# ---------------------------------------------------------------------------------------------------------------
# Saving and resuming training: a full disk never leaves a run that cannot be resumed
#
# fairseq writes the first checkpoint of a save through FILE.tmp and a rename, but then copies it to the others
# (checkpoint_best.pt -> checkpoint_last.pt) in place: a disk that fills during the copy leaves checkpoint_last.pt
# truncated at its final name, and every resume fails on it. install() makes that copy atomic too, removes the
# partial FILE.tmp of a failed save (the space it holds), and lets a resume whose checkpoint_last.pt cannot be read
# start from the newest checkpoint that can, with a warning naming both.

# fairseq's checkpoint names (not averaged ones such as checkpoint.avg5.pt)
FAIRSEQ_CHECKPOINT = re.compile(r"checkpoint(?:_last|_best|\d+|_\d+_\d+|\.best_.+)\.pt")


def checkpoint_problem(path: str, full: bool = False) -> Optional[str]:
    """Why `path` is not a complete checkpoint (empty, truncated: its zip directory, at the end, is missing), or
    None. `full`: also check the CRC-32 of every record (reads the whole file)."""
    try:
        kind = _format_of(_read_prefix(path, None))
        if kind is None:
            return "empty, truncated or not written by torch.save"
        if kind == "zip":
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip() if full else None
            if bad is not None:
                return f"record {bad} fails its CRC-32 check"
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def newest_readable_checkpoint(save_dir: str, besides: str) -> Optional[str]:
    """The most recently written of fairseq's checkpoints in `save_dir` other than `besides` that reads
    completely, or None."""
    try:
        names = [n for n in os.listdir(save_dir) if FAIRSEQ_CHECKPOINT.fullmatch(n)]
    except OSError:
        return None
    paths = [os.path.join(save_dir, n) for n in names if os.path.join(save_dir, n) != besides]
    for path in sorted(paths, key=lambda p: os.stat(p).st_mtime_ns, reverse=True):
        if checkpoint_problem(path, full=True) is None:
            return path
    return None


def atomic_copy(src: str, dst: str) -> None:
    """Copy `src` to `dst` through a temporary file beside `dst`, renamed into place when complete: a failure (a
    full disk) leaves `dst` as it was and no partial file."""
    from xlpos_prep.io import atomic_output

    with atomic_output(dst, "wb") as out, open(src, "rb") as data:
        shutil.copyfileobj(data, out, 1 << 20)
        out.flush()
        os.fsync(out.fileno())  # the rename must not reach the disk before the bytes do


class _AtomicCopyPathManager:
    """fairseq's PathManager inside ``fairseq.checkpoint_utils``, with ``copy`` of local files made atomic."""

    def __init__(self, manager: Any):
        self._manager = manager

    def copy(self, src_path: str, dst_path: str, overwrite: bool = False, **kwargs: Any) -> bool:
        remote = any(self._manager.path_requires_pathmanager(p) for p in (src_path, dst_path))
        if remote or kwargs or (not overwrite and os.path.exists(dst_path)):
            return self._manager.copy(src_path, dst_path, overwrite=overwrite, **kwargs)
        atomic_copy(src_path, dst_path)
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._manager, name)


def _removing_partial_saves(save: Callable) -> Callable:
    """fairseq's torch_persistent_save, removing the FILE.tmp a failed save leaves (a full disk: free its space)."""
    @functools.wraps(save)
    def persistent_save(obj: Any, filename: Any, async_write: bool = False) -> Any:
        try:
            return save(obj, filename, async_write)
        except BaseException:
            if isinstance(filename, str) and not async_write:
                with contextlib.suppress(OSError):
                    os.unlink(filename + ".tmp")
            raise
    persistent_save._xlpos = True  # type: ignore[attr-defined]
    return persistent_save


class _RestoreFrom:
    """A checkpoint configuration with another ``restore_file`` (the rest read from the original)."""

    def __init__(self, cfg: Any, restore_file: str):
        self._cfg, self.restore_file = cfg, restore_file

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cfg, name)


def _resuming_from_readable(load: Callable) -> Callable:
    """fairseq's load_checkpoint (training resume): when SAVE_DIR/checkpoint_last.pt exists but cannot be read,
    resume from the newest checkpoint that can, with a warning naming both; stop with one line when none can."""
    @functools.wraps(load)
    def load_checkpoint(cfg: Any, trainer: Any, **passthrough_args: Any) -> Any:
        last = os.path.join(cfg.save_dir, "checkpoint_last.pt")
        default = cfg.restore_file == "checkpoint_last.pt" and not getattr(trainer, "checkpoint_suffix", "")
        problem = checkpoint_problem(last) if default and os.path.isfile(last) else None
        if problem is not None:
            fallback = newest_readable_checkpoint(cfg.save_dir, besides=last)
            if fallback is None:
                raise UnreadableCheckpointError(
                    f"not a readable checkpoint: {last}: {problem}; no other checkpoint in {cfg.save_dir} reads: "
                    f"move {last} away to train from the start")
            logger.warning("%s is not a readable checkpoint (%s): resuming from %s, the newest readable checkpoint "
                           "in %s", last, problem, fallback, cfg.save_dir)
            cfg = _RestoreFrom(cfg, fallback)
        return load(cfg, trainer, **passthrough_args)
    load_checkpoint._xlpos = True  # type: ignore[attr-defined]
    return load_checkpoint


def install_saving() -> None:
    """Hook fairseq's training saves and resume (see above); idempotent, fairseq's code is not changed."""
    from fairseq import checkpoint_utils

    if not isinstance(checkpoint_utils.PathManager, _AtomicCopyPathManager):
        checkpoint_utils.PathManager = _AtomicCopyPathManager(checkpoint_utils.PathManager)
    if not getattr(checkpoint_utils.torch_persistent_save, "_xlpos", False):
        checkpoint_utils.torch_persistent_save = _removing_partial_saves(checkpoint_utils.torch_persistent_save)
    if not getattr(checkpoint_utils.load_checkpoint, "_xlpos", False):
        checkpoint_utils.load_checkpoint = _resuming_from_readable(checkpoint_utils.load_checkpoint)


def install() -> None:
    """Route the ``torch.load`` of fairseq's checkpoint-loading modules through :func:`load_fairseq_checkpoint`,
    and make training saves atomic and resumable (:func:`install_saving`).

    Idempotent; the global ``torch.load`` and torch's global allowlist are left untouched.
    """
    import importlib

    for name in PATCHED_MODULES:
        module = importlib.import_module(name)
        if not isinstance(module.torch, _TorchWithSafeLoad):
            module.torch = _TorchWithSafeLoad(module.torch, **_module_load_options(name))
    install_saving()


def installed() -> bool:
    import importlib

    return all(isinstance(importlib.import_module(n).torch, _TorchWithSafeLoad) for n in PATCHED_MODULES)
