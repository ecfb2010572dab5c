"""Shared file handling for the pipeline: reading and atomically writing lines, with located errors; atomic
outputs, sharding, the declaration and checking of the files a command reads and writes, numeric option types,
step-completion markers, child processes that die with their parent, and the timestamped progress line.

Temporaries (an atomic output's `.NAME.HOST.PID.XXXX.tmp`, a `xlpos-TAG-HOST.PID.XXXX` directory) carry the host
and process id of their writer, so the next run of the same output can tell those of a dead run (SIGKILL, power
loss) from those of a run still going, and removes only the former.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import fnmatch
import hashlib
import itertools
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence, TextIO


class InputError(ValueError):
    """Bad user input; the message names the file and (1-based) line."""

    def __init__(self, path: str, line: int | None, message: str):
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.message = path, line, message

    def __reduce__(self):
        # Exceptions pickle through self.args (the formatted text), which this __init__ cannot take back;
        # rebuild from the parts so an InputError raised in a --workers process reaches the parent intact.
        return (type(self), (self.path, self.line, self.message))


class ExternalToolError(RuntimeError):
    """A program the pipeline runs (eflomal) failed; the message says which and how."""


def iter_lines(path: str) -> Iterator[str]:
    """The lines of a UTF-8 text file without their newline, one at a time; a decoding error names the line."""
    with open(path, "rb") as f:
        for i, raw in enumerate(f, 1):
            try:
                yield raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise InputError(path, i, f"not valid UTF-8 ({e.reason})") from None


def count_lines(path: str | os.PathLike) -> int:
    """The number of lines iter_lines yields, counted in bytes without decoding: the cheap first pass of the
    steps that stream a corpus (a shard's bounds, parallel files' line counts) instead of holding it."""
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")  # a last line without its newline


def read_lines(path: str) -> list[str]:
    """All lines of a UTF-8 text file without their newline; a decoding error names the line."""
    return list(iter_lines(path))


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> int:
    """Lines into `path` (its directory made), atomically; their count."""
    n = 0
    with atomic_output(os.fspath(path)) as f:
        for line in lines:
            f.write(line + "\n")
            n += 1
    return n


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """`obj` as indented JSON into `path` (its directory made), atomically."""
    with atomic_output(os.fspath(path)) as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def log(message: str) -> None:
    """One timestamped progress line on stderr: what the pipeline's steps and the benchmarks say as they go."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def iter_tokens(path: str, allow_empty: bool = False, max_len: int | None = None, start: int = 0,
                end: int | None = None) -> Iterator[list[str]]:
    """Space-tokenized sentences of lines start+1..end (all by default), one at a time; empty lines (unless
    allowed) and over-long lines are errors naming the line."""
    for i, line in enumerate(itertools.islice(iter_lines(path), start, end), start + 1):
        toks = line.split()
        if not toks and not allow_empty:
            raise InputError(path, i, "empty sentence")
        if max_len is not None and len(toks) > max_len:
            raise InputError(path, i, f"sentence of {len(toks)} tokens is longer than the limit {max_len}")
        yield toks


def read_tokens(path: str, allow_empty: bool = False, max_len: int | None = None) -> list[list[str]]:
    """Space-tokenized sentences (iter_tokens, held); an empty file is an error."""
    sents = list(iter_tokens(path, allow_empty, max_len))
    if not sents:
        raise InputError(path, None, "file is empty")
    return sents


def count_sentences(path: str) -> int:
    """count_lines of a file of sentences, which must have one."""
    n = count_lines(path)
    if not n:
        raise InputError(path, None, "file is empty")
    return n


def check_same_length(path_a: str, n_a: int, path_b: str, n_b: int) -> None:
    if n_a != n_b:
        line = min(n_a, n_b) + 1
        raise InputError(path_b, line, f"has {n_b} lines but {path_a} has {n_a}: files must be parallel")


# -------------------------------------------------------------------------------------------------------------
# Temporaries of dead runs

_HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "localhost"


def writer_tag() -> str:
    """HOST.PID of this process, as the names of its temporaries carry it."""
    return f"{_HOST}.{os.getpid()}"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale_temporaries(directory: str, prefix: str, suffix: str = "") -> list[str]:
    """Remove `prefix + HOST.PID. ... + suffix` entries of `directory` left by dead processes of this host.

    Entries of live processes (another run writing the same output right now) and of other hosts (a shared
    file system) are kept. Returns the removed paths.
    """
    pattern = re.compile(re.escape(prefix) + r"([A-Za-z0-9-]+)\.(\d+)\.[^/]*" + re.escape(suffix))
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = pattern.fullmatch(name)
        if match is None or match.group(1) != _HOST or _process_alive(int(match.group(2))):
            continue
        path = os.path.join(directory, name)
        with contextlib.suppress(OSError):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            removed.append(path)
    return removed


@contextlib.contextmanager
def atomic_output(path: str, mode: str = "w") -> Iterator[TextIO]:
    """Write to a temporary file beside `path`, rename it into place only when the block succeeds.

    A symlink is followed (the link stays, its target is replaced); a device or pipe (`/dev/stdout`, a FIFO) is
    written directly, since renaming onto it would replace the device node instead of writing to it."""
    if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
        with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
        return
    path = os.path.realpath(path) if os.path.islink(path) else path
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    base = os.path.basename(path)
    remove_stale_temporaries(directory, f".{base}.", ".tmp")
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.{writer_tag()}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
        # mkstemp makes the file owner-only; give the result the permissions a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def private_temp_dir(tag: str) -> Iterator[str]:
    """A fresh directory `xlpos-TAG-HOST.PID.XXXX` in the system temp dir, removed afterwards; those of dead
    runs with the same tag are removed first, so killed runs do not accumulate."""
    root = tempfile.gettempdir()
    prefix = f"xlpos-{tag}-"
    remove_stale_temporaries(root, prefix)
    path = tempfile.mkdtemp(prefix=f"{prefix}{writer_tag()}.", dir=root)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -------------------------------------------------------------------------------------------------------------
# Step completion: the one rule of the pipeline (pipeline.Steps, `xlpos-prep step` for the recipes' own commands)
#
# A step is done only while its outputs are what its inputs and settings made. OUTPUT.done, written (atomically)
# after the outputs, holds the step's record: its settings, and the identity of every input and output when it
# completed (size and modification time; the content hash of files up to HASH_LIMIT, so that a copy with new
# times is still recognised). A deleted, truncated or changed output, a changed input or setting makes the step
# not done. Paths are recorded relative to the marker, so a work directory moved as a whole keeps its records.

DONE_SUFFIX = ".done"
RECORD_FORMAT = 1
HASH_LIMIT = 16 << 20     # files up to this size are hashed when a step completes (never a multi-GB corpus)
TREE_LIMIT = 20_000       # a directory of more files is not followed (its changes are not seen)


def done_marker(output: str | os.PathLike) -> str:
    """The marker that says the step making `output` completed: `output` + '.done', written after the outputs."""
    return os.fspath(output) + DONE_SUFFIX


_hashes: dict[tuple, str] = {}


def _file_hash(path: str, st: os.stat_result) -> str:
    # (ctime too: a file rewritten in place with its modification time put back has a new ctime)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _hashes:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        _hashes[key] = digest.hexdigest()
    return _hashes[key]


def _skipped(name: str, directory: str, ignore: Sequence[str]) -> bool:
    """Entries of a directory that are not part of its identity: hidden ones (temporaries, locks), markers,
    temporaries, the outputs of other steps (they have their own marker) and the step's own `ignore` globs."""
    return (name.startswith(".") or name.endswith(DONE_SUFFIX) or name.endswith(".tmp")
            or os.path.exists(os.path.join(directory, name + DONE_SUFFIX))
            or any(fnmatch.fnmatch(name, pattern) for pattern in ignore))


def _tree(root: str, ignore: Sequence[str]) -> dict:
    files: dict[str, list[int]] = {}
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not _skipped(d, directory, ignore))
        for name in names:
            if _skipped(name, directory, ignore):
                continue
            path = os.path.join(directory, name)
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(path)
                files[os.path.relpath(path, root)] = [st.st_size, st.st_mtime_ns]
            if len(files) > TREE_LIMIT:
                return {"entries": "many"}  # (not followed: "/" named in a command must not walk the disk)
    return {"files": files}


def path_identity(path: str | os.PathLike, ignore: Sequence[str] = ()) -> dict | None:
    """What a step records of a file (size, modification time, content hash up to HASH_LIMIT) or a directory (the
    size and time of each file in it, see _skipped); None when it does not exist."""
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISDIR(st.st_mode):
        return _tree(path, ignore)
    found: dict[str, Any] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if stat.S_ISREG(st.st_mode) and st.st_size <= HASH_LIMIT:
        found["sha256"] = _file_hash(path, st)
    return found


def _size_text(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= 10 * scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def identity_change(path: str | os.PathLike, recorded: dict | None, ignore: Sequence[str] = ()) -> str | None:
    """How `path` differs from its recorded identity, in a few words ('missing', '3 bytes, not 1.2 MiB', ...);
    None when it is the same."""
    path = os.fspath(path)
    if recorded is None:
        return None if not os.path.exists(path) else "new"
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    if "files" in recorded or "entries" in recorded:
        if not stat.S_ISDIR(st.st_mode):
            return "no longer a directory"
        return _tree_change(_tree(path, ignore), recorded)
    if stat.S_ISDIR(st.st_mode):
        return "now a directory"
    if st.st_size != recorded["size"]:
        return f"{_size_text(st.st_size)}, not {_size_text(recorded['size'])}"
    if "sha256" not in recorded or not stat.S_ISREG(st.st_mode):
        return None if st.st_mtime_ns == recorded["mtime_ns"] else "modified"
    # the bytes tell, whatever the times say (a copy with new times is the same; an edit with its time put back
    # is not)
    return None if _file_hash(path, st) == recorded["sha256"] else "same size, other contents"


def _tree_change(now: dict, recorded: dict) -> str | None:
    if "entries" in recorded or "entries" in now:
        return None if "entries" in recorded and "entries" in now else "many more or fewer files"
    old, new = recorded["files"], now["files"]
    if not new and old:
        return "empty"
    missing = sorted(set(old) - set(new))
    if missing:
        return f"{missing[0]} missing" + (f", and {len(missing) - 1} more files" if len(missing) > 1 else "")
    for name in sorted(old):
        if new[name][0] != old[name][0]:
            return f"{name}: {_size_text(new[name][0])}, not {_size_text(old[name][0])}"
        if new[name][1] != old[name][1]:
            return f"{name} modified"
    added = sorted(set(new) - set(old))
    return f"new file {added[0]}" if added else None


@dataclass(frozen=True)
class StepState:
    """Whether a step is done (check_step). `reason`: why not, when an earlier run completed it with other inputs,
    settings or outputs (None: it never completed). `leftover`: some output of an earlier run exists (rerunning
    replaces it). `upgrade`: done, but its record is older or less complete than this version writes."""

    done: bool
    reason: str | None = None
    leftover: bool = False
    upgrade: bool = False


def _read_record(marker: str) -> dict | None:
    """The record of a marker; None for a marker of an older xlpos (empty, or the step's name)."""
    try:
        with open(marker, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:
        return None
    if not text.startswith("{"):
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    return record if isinstance(record, dict) and record.get("format") == RECORD_FORMAT else None


def _absolute(recorded: dict, marker: str) -> dict:
    base = os.path.dirname(os.path.abspath(marker))
    return {os.path.normpath(os.path.join(base, k)): v for k, v in recorded.items()}


def _relative(paths: dict, marker: str) -> dict:
    base = os.path.dirname(os.path.abspath(marker))
    return {os.path.relpath(k, base): v for k, v in paths.items()}


def _nonempty(path: str, ignore: Sequence[str]) -> bool:
    found = path_identity(path, ignore)
    return found is not None and (bool(found.get("files")) or "entries" in found or found.get("size", 0) > 0)


def settings_change(recorded: Any, now: Any) -> str | None:
    """The first difference between recorded settings and today's, in a few words; None when equal."""
    if recorded == now:
        return None
    if isinstance(recorded, dict) and isinstance(now, dict):
        for key in sorted(set(recorded) | set(now), key=str):
            if recorded.get(key) != now.get(key):
                if isinstance(recorded.get(key), list) and isinstance(now.get(key), list):
                    return f"{key}: {_list_change(recorded[key], now[key])}"
                return f"{key}: {_short(recorded.get(key))}, now {_short(now.get(key))}"
    return f"{_short(recorded)}, now {_short(now)}"


def _list_change(old: list, new: list) -> str:
    k = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    window = slice(max(0, k - 2), k + 3)
    return f"... {' '.join(map(str, old[window]))} ..., now ... {' '.join(map(str, new[window]))} ..."


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _normalized(settings: Any) -> Any:
    return None if settings is None else json.loads(json.dumps(settings))


def check_step(outputs: Sequence[str | os.PathLike], inputs: Sequence[str | os.PathLike] | None = None,
               settings: Any = None, ignore: Sequence[str] = ()) -> StepState:
    """Whether the step making `outputs` from `inputs` with `settings` (JSON) is done: every output has a marker
    whose record matches its outputs as they are now and, where given, these inputs and settings. An input that
    no longer exists is not a difference (the step could not be redone without it), nor one that did not exist
    when the step ran. `ignore`: globs of names
    inside directory outputs that are not part of them (a log). A marker of an older xlpos (no record) counts as
    done when every output exists and is not empty (StepState.upgrade: write its record)."""
    outputs = [os.fspath(o) for o in outputs]
    if not outputs:
        return StepState(False)

    def not_done(reason: str | None) -> StepState:
        return StepState(False, reason, any(_nonempty(o, ignore) for o in outputs))

    upgrade = False
    for output in outputs:
        marker = done_marker(output)
        if not os.path.exists(marker):
            return not_done(None)
        record = _read_record(marker)
        if record is None:  # an older xlpos's marker: nothing recorded to compare
            if not all(_nonempty(o, ignore) for o in outputs):
                return not_done(f"{output} is missing or empty")
            upgrade = True
            continue
        reason = _record_change(record, marker, output, inputs, settings, ignore)
        if reason is not None:
            return not_done(reason)
        upgrade = upgrade or (settings is not None and record.get("settings") is None) or (
            inputs is not None and record.get("inputs") is None)
    return StepState(True, upgrade=upgrade)


def _record_change(record: dict, marker: str, output: str, inputs: Sequence[str | os.PathLike] | None,
                   settings: Any, ignore: Sequence[str]) -> str | None:
    recorded_outputs = _absolute(record.get("outputs") or {}, marker)
    key = os.path.abspath(output)
    if key not in recorded_outputs:
        return f"{output}.done records another step ({record.get('step')})"
    change = identity_change(output, recorded_outputs[key], ignore)
    if change is not None:
        return f"{output} changed since the step completed ({change})"
    if settings is not None and record.get("settings") is not None:
        change = settings_change(record["settings"], _normalized(settings))
        if change is not None:
            return f"settings changed ({change})"
    if inputs is not None and record.get("inputs") is not None:
        recorded_inputs = _absolute(record["inputs"], marker)
        given = [os.fspath(p) for p in inputs]
        for path in given:
            old = recorded_inputs.get(os.path.abspath(path))
            if old is None:  # it did not exist when the step ran (so it was not read), or the step wrote it
                continue
            change = identity_change(path, old)
            if change is not None and change != "missing":
                return f"its input {path} changed ({change})"
        wanted = {os.path.abspath(p) for p in given}
        for path in recorded_inputs:
            if path not in wanted and os.path.exists(path):
                return f"{os.path.relpath(path)} is no longer an input"
    return None


def step_done(outputs: Sequence[str | os.PathLike], inputs: Sequence[str | os.PathLike] | None = None,
              settings: Any = None) -> bool:
    """True when the step making `outputs` is done (check_step): every output has its completion marker and is
    what the step made; where given, from these inputs and settings. An output alone may be a killed run's."""
    return check_step(outputs, inputs, settings).done


def input_identities(inputs: Sequence[str | os.PathLike]) -> dict[str, dict | None]:
    """The identity of each input now (absolute path -> path_identity): taken before a step runs, recorded after."""
    return {os.path.abspath(p): path_identity(p) for p in inputs}


def start_step(outputs: Sequence[str | os.PathLike]) -> None:
    """Forget that the step completed before (its outputs are about to be rewritten)."""
    for o in outputs:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(done_marker(o))


def finish_step(outputs: Sequence[str | os.PathLike], step: str, inputs: Sequence[str | os.PathLike] | None = None,
                settings: Any = None, before: dict[str, dict | None] | None = None,
                ignore: Sequence[str] = ()) -> None:
    """Mark every output complete, recording the step's settings, its inputs' identity (`before`: as they were
    when it started, input_identities; else now) and its outputs'; called only after the step returned
    successfully (only the identities of `inputs` are kept from `before`). Each marker is written atomically: a full
    disk leaves no marker, never an empty one."""
    missing = [os.fspath(o) for o in outputs if not os.path.exists(o)]
    if missing:
        raise InputError(missing[0], None, f"step {step} finished without writing this output")
    if inputs is not None:
        wanted = {os.path.abspath(p) for p in inputs}
        before = input_identities(inputs) if before is None else {k: v for k, v in before.items() if k in wanted}
    made = {os.path.abspath(o): path_identity(o, ignore) for o in outputs}
    for o in outputs:
        marker = done_marker(o)
        record = {"format": RECORD_FORMAT, "step": step, "settings": _normalized(settings),
                  "inputs": None if before is None else _relative(before, marker), "outputs": _relative(made, marker)}
        with atomic_output(marker) as f:
            json.dump(record, f, indent=1, ensure_ascii=False)
            f.write("\n")


def command_record(command: Sequence[str], outputs: Sequence[str | os.PathLike]) -> tuple[list[str], list[str]]:
    """(the command as a step records it, its inputs) for a step that runs `command` to make `outputs` (`xlpos-prep
    step`): the inputs are the words (or --option=VALUE values) naming an existing file or directory other than
    the program and the outputs; in the recorded command, every word that names a path is written relative to
    the first output's directory, so that a work directory moved as a whole keeps its records."""
    base = os.path.dirname(os.path.abspath(outputs[0]))
    made = {os.path.abspath(o) for o in outputs}
    recorded, inputs = [], []
    for k, word in enumerate(command):
        prefix, value = (word.split("=", 1)[0] + "=", word.split("=", 1)[1]) if word.startswith("-") and "=" in word \
            else ("", word)
        if not value or "://" in value or not (os.path.isabs(value) or "/" in value or os.path.exists(value)):
            recorded.append(word)
            continue
        recorded.append(prefix + "@" + os.path.relpath(os.path.abspath(value), base))
        if k > 0 and os.path.abspath(value) not in made and (os.path.isfile(value) or os.path.isdir(value)):
            inputs.append(value)
    return recorded, inputs


# -------------------------------------------------------------------------------------------------------------
# One run per directory

LOCK_NAME = ".xlpos.lock"
_held_locks: dict[str, int] = {}


def _lock_holder(path: str) -> str:
    for _ in range(20):  # the holder writes its pid right after taking the lock
        with contextlib.suppress(OSError):
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read().strip()
            if text:
                pid, _, command = text.partition(" ")
                return f"pid {pid}" + (f": {command}" if command else "")
        time.sleep(0.05)
    return "pid unknown"


@contextlib.contextmanager
def directory_lock(directory: str | os.PathLike, wait: bool = False) -> Iterator[None]:
    """Hold DIRECTORY/.xlpos.lock (an exclusive fcntl lock, made if needed) while the block runs: one run per work
    directory (prepare), save directory (train) or output directory (translate, step). A second run meets it with
    one line naming the holder's pid, or, with `wait`, says whom it waits for and takes the lock when the holder
    ends (runs that share a directory on purpose: a benchmark's runs of one data cache, whose steps the first run
    makes and the others skip). The lock goes with its process, so a killed run's file is simply taken over; the
    file is removed when the block ends. Re-entrant within a process."""
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, LOCK_NAME)
    key = os.path.realpath(path)
    if key in _held_locks:
        _held_locks[key] += 1
        try:
            yield
        finally:
            _held_locks[key] -= 1
        return
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                os.close(fd)
                raise InputError(directory, None, f"in use by another run ({_lock_holder(path)}); wait for it to "
                                                  f"end, or stop it") from None
            log(f"{directory}: in use by another run ({_lock_holder(path)}); waiting for it to end")
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:  # (else the holder removed the file while we opened it: try the new one)
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {shlex.join(sys.argv)}\n".encode("utf-8", "replace"))
        _held_locks[key] = 1
        yield
    finally:
        _held_locks.pop(key, None)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # while still holding it: a run waiting on this file retries on the new one
        os.close(fd)


# -------------------------------------------------------------------------------------------------------------
# Child processes

_PR_SET_PDEATHSIG = 1
_libc: Any = None


def _load_libc() -> Any:
    # Loaded in the parent: a forked child should not run the dynamic loader before exec.
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            _libc = False
    return _libc


def die_with_parent(parent_pid: int | None = None, sig: int = signal.SIGKILL) -> None:
    """In a child process: be killed with `sig` when the parent dies (Linux; a no-op elsewhere).

    Without this a SIGKILLed `xlpos-prep align` leaves eflomal running on, and pool workers waiting forever.
    """
    libc = _libc if _libc is not None else _load_libc()
    if libc:
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def pool_worker_setup() -> None:
    """Initializer of every worker pool: die with the parent; leave Ctrl-C to the parent, which stops the pool
    (otherwise every worker prints its own KeyboardInterrupt traceback); die quietly on SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Pool.terminate() stops workers with SIGTERM: the default action, not the parent's unwinding handler. A pool
    # made by fork_pool holds SIGTERM back until here, so a worker never runs the parent's handler.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    die_with_parent()


def fork_pool(workers: int, initializer: Callable[..., None] = pool_worker_setup,
              initargs: tuple = ()) -> Any:
    """A pool of `workers` forked processes whose initializer must call pool_worker_setup first.

    SIGTERM is blocked while the pool forks its workers (and in the pool's own threads, which fork replacements):
    a worker forked with this process's SIGTERM handler (run_cli's, which raises KeyboardInterrupt) and terminated
    before its initializer ran could lose that exception in the interpreter's cleanup code and then wait for work
    forever, with Pool.terminate() waiting for it (seen once in a test run on a loaded machine). Held back, the
    signal reaches the worker once pool_worker_setup has installed the default action, and the worker dies."""
    import multiprocessing
    masking = hasattr(signal, "pthread_sigmask")
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}) if masking else None
    try:
        return multiprocessing.get_context("fork").Pool(workers, initializer, initargs)
    finally:
        if masking:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def run_child(args: Sequence[str], cpu_seconds: list[float] | None = None, **kwargs: Any) -> int:
    """Run a program that dies with this process (PR_SET_PDEATHSIG) and is killed if this process is
    interrupted or fails while waiting; returns its exit status. With `cpu_seconds`, the CPU time (user + system)
    of the program and the descendants it waited for is appended to it: its own, whatever else the machine runs."""
    _load_libc()
    parent = os.getpid()
    proc = subprocess.Popen(list(args), preexec_fn=lambda: die_with_parent(parent), **kwargs)
    try:
        if cpu_seconds is None:
            return proc.wait()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        cpu_seconds.append(usage.ru_utime + usage.ru_stime)
        return proc.returncode
    except BaseException:
        proc.kill()
        proc.wait()
        raise


# -------------------------------------------------------------------------------------------------------------
# Files a command reads and writes

Paths = Callable[[argparse.Namespace], list[tuple[str, str]]]


@dataclass(frozen=True)
class CommandFiles:
    """Which arguments of a subcommand name files it reads and files it writes (argparse dests), plus outputs
    derived from the arguments (`derived`: args -> [(what, path)])."""

    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    input_dirs: tuple[str, ...] = ()
    output_dirs: tuple[str, ...] = ()
    derived_inputs: Paths | None = None
    derived_outputs: Paths | None = None


def declare_files(parser: argparse.ArgumentParser, **files: Any) -> None:
    """Declare the files of a subcommand (see CommandFiles); the CLI checks them before the command runs."""
    parser.set_defaults(command_files=CommandFiles(**files))


def _named(args: argparse.Namespace, dests: Sequence[str]) -> list[tuple[str, str]]:
    found = []
    for dest in dests:
        value = getattr(args, dest, None)
        for path in ([] if value is None else value if isinstance(value, list) else [value]):
            found.append(("--" + dest.replace("_", "-"), os.fspath(path)))
    return found


def same_file(a: str, b: str) -> bool:
    """Whether two paths are one file: the same inode (hard links, symlinks) or the same resolved name."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b))


def _nearest_existing(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def check_command_files(args: argparse.Namespace) -> None:
    """Refuse, before any work, a command whose output is one of its inputs or another of its outputs, an input
    that is a directory, or an output that is a directory or lies under a file."""
    spec: CommandFiles | None = getattr(args, "command_files", None)
    if spec is None:
        return
    inputs = _named(args, spec.inputs) + (spec.derived_inputs(args) if spec.derived_inputs else [])
    input_dirs = _named(args, spec.input_dirs)
    outputs = _named(args, spec.outputs) + (spec.derived_outputs(args) if spec.derived_outputs else [])
    output_dirs = _named(args, spec.output_dirs)
    for what, path in inputs:  # (a missing input is left to the command, whose message says what it is)
        if os.path.isdir(path):
            raise InputError(path, None, f"is a directory, but {what} must be a file")
    for what, path in input_dirs:
        if not os.path.isdir(path):
            raise InputError(path, None, f"{'is not a directory' if os.path.exists(path) else 'no such directory'}"
                                         f" ({what})")
    for what, path in output_dirs:
        if os.path.exists(path) and not os.path.isdir(path):
            raise InputError(path, None, f"exists and is not a directory ({what})")
    for what, path in outputs:
        if os.path.isdir(path):
            raise InputError(path, None, f"is a directory, but {what} must be a file name")
        if path.endswith(os.sep) or path.endswith("/"):
            raise InputError(path, None, f"{what} must be a file name, not a directory")
        ancestor = _nearest_existing(os.path.dirname(os.path.abspath(path)) or ".")
        if not os.path.isdir(ancestor):
            raise InputError(path, None, f"cannot be created: {ancestor} is not a directory ({what})")
    for k, (what, path) in enumerate(outputs):
        for in_what, in_path in inputs + input_dirs:
            if same_file(path, in_path):
                raise InputError(path, None, f"{what} is also the input {in_what}: refusing to overwrite an input")
        for other_what, other_path in outputs[:k]:
            if same_file(path, other_path):
                raise InputError(path, None, f"{what} and {other_what} are the same file: give each output its "
                                             f"own name")


# -------------------------------------------------------------------------------------------------------------
# The error boundary of a command line tool

def _interrupt(signum: int, frame: Any) -> None:
    # SIGTERM (timeout, kill, a cluster's preemption) unwinds like Ctrl-C: temporaries are removed, children
    # killed, and no partial output is renamed into place.
    raise KeyboardInterrupt(signal.Signals(signum).name)


def describe_os_error(e: OSError) -> str:
    """`path: reason` of an OSError (`a -> b: reason` for a rename)."""
    what = e.strerror or str(e) or type(e).__name__
    name = None if e.filename is None else (e.filename or "''")  # an empty path would vanish from the line
    if name is not None and e.filename2 is not None:
        return f"{name} -> {e.filename2}: {what}"
    if name is not None:
        return f"{name}: {what}"
    return what


def run_cli(prog: str, args: argparse.Namespace, run: Callable[[argparse.Namespace], Any],
                parser: argparse.ArgumentParser | None = None) -> int:
    """Check the numeric options of `parser` and the declared files of `args`, then run; every expected failure
    becomes one line `PROG: error: FILE[:LINE]: what` and a non-zero status (130 when interrupted), never a
    traceback."""
    def fail(message: str, status: int = 1) -> int:
        print(f"{prog}: error: {str(message).replace(chr(10), ' ')}", file=sys.stderr)
        return status

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        if parser is not None:
            check_numeric_options(parser, args)
        check_command_files(args)  # before any work: an output that is an input would be destroyed
        return int(run(args) or 0)
    except KeyboardInterrupt as e:
        return fail(f"interrupted ({e.args[0] if e.args else 'SIGINT'}); the output being written was not "
                    f"replaced", 130)
    except OSError as e:
        return fail(describe_os_error(e))
    except (InputError, ValueError, OverflowError, ExternalToolError) as e:
        return fail(str(e) or type(e).__name__)
    finally:
        signal.signal(signal.SIGTERM, previous)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the option (the usage is one `--help` away)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# -------------------------------------------------------------------------------------------------------------
# Numeric options

def _bounds_text(lo: float | None, hi: float | None, lo_open: bool) -> str:
    parts = []
    if lo is not None:
        parts.append(f"greater than {lo}" if lo_open else f"at least {lo}")
    if hi is not None:
        parts.append(f"at most {hi}")
    return " and ".join(parts)


def int_option(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """argparse type: an integer; its range [lo, hi] is checked by run_cli, with the option named."""
    def parse(text: str) -> int:
        try:
            return int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    parse.__name__ = "integer"
    parse.bounds = (lo, hi, False)  # type: ignore[attr-defined]
    return parse


def float_option(lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> Callable[[str], float]:
    """argparse type: a number; run_cli checks that it is finite and in [lo, hi] ((lo, hi] with lo_open)."""
    def parse(text: str) -> float:
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    parse.__name__ = "number"
    parse.bounds = (lo, hi, lo_open)  # type: ignore[attr-defined]
    return parse


def check_numeric_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every option typed int_option/float_option is finite and in its range; else a ValueError naming it."""
    for action in parser._actions:  # argparse keeps no public list of a parser's options
        bounds = getattr(action.type, "bounds", None)
        value = getattr(args, action.dest, None)
        if bounds is None or value is None:
            continue
        lo, hi, lo_open = bounds
        name = action.option_strings[-1] if action.option_strings else action.dest
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value}")
        if (lo is not None and (value <= lo if lo_open else value < lo)) or (hi is not None and value > hi):
            raise ValueError(f"{name} must be {_bounds_text(lo, hi, lo_open)}, got {value}")


SEED = int_option(0, 2**32 - 1)  # numpy's and random's seeds alike accept this range
WORKERS = int_option(1, 1024)


# -------------------------------------------------------------------------------------------------------------
# Shards

@dataclass(frozen=True)
class Shard:
    """Shard `index` (0-based) of `count`: a contiguous block of lines, so shards concatenate back in order."""

    index: int = 0
    count: int = 1

    @classmethod
    def parse(cls, text: str) -> "Shard":
        try:
            i, n = (int(x) for x in text.split("/"))
        except ValueError:
            raise ValueError(f"--shard must look like I/N (e.g. 0/8), got {text!r}") from None
        if n < 1 or not 0 <= i < n:
            raise ValueError(f"--shard {text}: need 0 <= I < N")
        return cls(i, n)

    def bounds(self, total: int) -> tuple[int, int]:
        per, extra = divmod(total, self.count)
        start = self.index * per + min(self.index, extra)
        return start, start + per + (1 if self.index < extra else 0)


def shard_option(text: str) -> str:
    """argparse type for --shard: checked at parse time, kept as text (Shard.parse reads it)."""
    try:
        Shard.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).replace("--shard ", "")) from None
    return text
