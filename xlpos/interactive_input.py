"""fairseq-interactive input that one bad byte cannot stop.

fairseq 0.12 reads `--input` (a file, or `-` for stdin) in `fairseq_cli.interactive.buffered_read` through
`fileinput` with strict UTF-8: a single invalid byte raises UnicodeDecodeError inside the read loop, and no line
is translated, not even those before it. Importing the plugin (`--user-dir xlpos`, which fairseq does while
parsing the command line, before reading starts) replaces that function in the loaded `fairseq_cli.interactive`
module with `buffered_read` below: same batching and stripping, same universal newlines, but invalid bytes become
U+FFFD and each affected line is reported as `FILE:LINE: ...` on the log. fairseq's files are not edited; nothing
happens unless fairseq-interactive is the running program.
"""
from __future__ import annotations

import io
import logging
import re
import sys
from typing import BinaryIO, Iterator

logger = logging.getLogger("xlpos.interactive_input")

# surrogateescape turns each undecodable byte 0xXY into the lone surrogate U+DCXY, which valid UTF-8 never yields.
_ESCAPED = re.compile("[\udc80-\udcff]")


def decoded_lines(stream: BinaryIO, name: str) -> Iterator[str]:
    """Lines of a binary stream as text (universal newlines, as fileinput's text mode): invalid UTF-8 bytes are
    replaced by U+FFFD, and every line that had some is reported with `name` and its 1-based line number."""
    text = io.TextIOWrapper(stream, encoding="utf-8", errors="surrogateescape", newline=None)
    try:
        for lineno, line in enumerate(text, 1):
            bad = _ESCAPED.findall(line)
            if bad:
                shown = " ".join(f"0x{ord(c) - 0xDC00:02x}" for c in bad[:8]) + (" ..." if len(bad) > 8 else "")
                logger.warning("%s:%d: %d byte(s) that are not valid UTF-8 (%s) replaced by U+FFFD", name, lineno,
                               len(bad), shown)
                line = _ESCAPED.sub("\ufffd", line)
            yield line
    finally:
        text.detach()  # the stream belongs to the caller (stdin must not be closed behind its back)


def buffered_read(input: str, buffer_size: int) -> Iterator[list[str]]:
    """fairseq_cli.interactive.buffered_read (same signature and batches), reading with `decoded_lines`."""
    buffer: list[str] = []
    if input == "-":
        lines = decoded_lines(sys.stdin.buffer, "<stdin>")
        opened = None
    else:
        opened = open(input, "rb")
        lines = decoded_lines(opened, input)
    try:
        for line in lines:
            buffer.append(line.strip())
            if len(buffer) >= buffer_size:
                yield buffer
                buffer = []
    finally:
        if opened is not None:
            opened.close()
    if buffer:
        yield buffer


def _is_fairseq_reader(function: object) -> bool:
    code = getattr(function, "__code__", None)
    return code is not None and code.co_filename.replace("\\", "/").endswith("fairseq_cli/interactive.py")


def install() -> bool:
    """Replace fairseq-interactive's reader when fairseq-interactive is the running program; True if replaced.

    It runs as `fairseq_cli.interactive` (the console script) or as `__main__` (`python -m`); either is already
    loaded when fairseq imports the plugin. Other programs (fairseq-train, the hub) are left alone.
    """
    replaced = False
    for name in ("fairseq_cli.interactive", "__main__"):
        module = sys.modules.get(name)
        if module is not None and _is_fairseq_reader(getattr(module, "buffered_read", None)):
            module.buffered_read = buffered_read
            replaced = True
    return replaced


install()
