"""Shared file handling for the pipeline: line reading with located errors, atomic outputs, sharding."""
from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from typing import Iterator, TextIO


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


def read_lines(path: str) -> list[str]:
    """All lines of a UTF-8 text file without their newline; a decoding error names the line."""
    lines = []
    with open(path, "rb") as f:
        for i, raw in enumerate(f, 1):
            try:
                lines.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as e:
                raise InputError(path, i, f"not valid UTF-8 ({e.reason})") from None
    return lines


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


@contextlib.contextmanager
def atomic_output(path: str, mode: str = "w") -> Iterator[TextIO]:
    """Write to a temporary file beside `path`, rename it into place only when the block succeeds."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
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
