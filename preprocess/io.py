"""Shared file handling for the pipeline: line reading with located errors, atomic outputs, sharding, the
declaration and checking of the files a command reads and writes, numeric option types, step-completion markers,
and child processes that die with their parent.

Temporaries (an atomic output's `.NAME.HOST.PID.XXXX.tmp`, a `xlpos-TAG-HOST.PID.XXXX` directory) carry the host
and process id of their writer, so the next run of the same output can tell those of a dead run (SIGKILL, power
loss) from those of a run still going, and removes only the former.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import math
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence, TextIO


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


def read_lines(path: str) -> list[str]:
    """All lines of a UTF-8 text file without their newline; a decoding error names the line."""
    return list(iter_lines(path))


def read_tokens(path: str, allow_empty: bool = False, max_len: int | None = None) -> list[list[str]]:
    """Space-tokenized sentences; empty lines (unless allowed) and over-long lines are errors."""
    sents = []
    for i, line in enumerate(read_lines(path), 1):
        toks = line.split()
        if not toks and not allow_empty:
            raise InputError(path, i, "empty sentence")
        if max_len is not None and len(toks) > max_len:
            raise InputError(path, i, f"sentence of {len(toks)} tokens is longer than the limit {max_len}")
        sents.append(toks)
    if not sents:
        raise InputError(path, None, "file is empty")
    return sents


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

DONE_SUFFIX = ".done"


def done_marker(output: str | os.PathLike) -> str:
    """The marker that says the step making `output` completed: `output` + '.done', written after the outputs."""
    return os.fspath(output) + DONE_SUFFIX


def step_done(outputs: Sequence[str | os.PathLike]) -> bool:
    """True when every output exists and has its completion marker: an output alone may be a killed run's."""
    return bool(outputs) and all(os.path.exists(o) and os.path.exists(done_marker(o)) for o in outputs)


def start_step(outputs: Sequence[str | os.PathLike]) -> None:
    """Forget that the step completed before (its outputs are about to be rewritten)."""
    for o in outputs:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(done_marker(o))


def finish_step(outputs: Sequence[str | os.PathLike], step: str) -> None:
    """Mark every output complete; called only after the step returned successfully."""
    missing = [os.fspath(o) for o in outputs if not os.path.exists(o)]
    if missing:
        raise InputError(missing[0], None, f"step {step} finished without writing this output")
    for o in outputs:
        with open(done_marker(o), "w", encoding="utf-8") as f:
            f.write(f"{step}\n")


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
    # Pool.terminate() stops workers with SIGTERM: the default action, not the parent's unwinding handler.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent()


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


def run_command(prog: str, args: argparse.Namespace, run: Callable[[argparse.Namespace], Any],
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
    """argparse type: an integer; its range [lo, hi] is checked by run_command, with the option named."""
    def parse(text: str) -> int:
        try:
            return int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    parse.__name__ = "integer"
    parse.bounds = (lo, hi, False)  # type: ignore[attr-defined]
    return parse


def float_option(lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> Callable[[str], float]:
    """argparse type: a number; run_command checks that it is finite and in [lo, hi] ((lo, hi] with lo_open)."""
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
