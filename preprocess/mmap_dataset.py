"""fairseq's ``mmap`` indexed dataset (``PREFIX.bin`` + ``PREFIX.idx``, what fairseq-preprocess writes by default),
written and its sentence sizes read without importing fairseq.

Importing fairseq costs seconds (it imports every task and model it has), paid by every process that touches a
data-bin: this module lets `xlpos-prep preprocess` and `binarize` pay none of it. The layout is fairseq 0.12's
(``fairseq.data.indexed_dataset.MMapIndexedDataset``), which reads what this module writes (the tests check it):

  PREFIX.bin  the items' values one after another, C order, in the dataset's dtype
  PREFIX.idx  9 magic bytes ``MMIDIDX\\0\\0``, version (uint64 little-endian, 1), dtype code (uint8), item count N
              (uint64), then N item sizes (int32) and N byte offsets of the items in PREFIX.bin (int64)
"""
from __future__ import annotations

import contextlib
import os
import secrets
import struct
from array import array
from typing import BinaryIO, Iterator

import numpy as np

from .io import remove_stale_temporaries, writer_tag

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
# fairseq's dtype codes (the .idx names its dtype by one of these)
DTYPE_CODES = {np.dtype(np.uint8): 1, np.dtype(np.int8): 2, np.dtype(np.int16): 3, np.dtype(np.int32): 4,
               np.dtype(np.int64): 5, np.dtype(np.float64): 6, np.dtype(np.uint16): 8, np.dtype(np.uint32): 9,
               np.dtype(np.uint64): 10}
HEADER = struct.Struct("<9sQBQ")  # magic, version, dtype code, item count


def smallest_index_dtype(max_value: int) -> np.dtype:
    """The dtype fairseq-preprocess picks for values up to `max_value` (its ``best_fitting_int_dtype``)."""
    if max_value < 65500:
        return np.dtype(np.uint16)
    return np.dtype(np.uint32) if max_value < 4294967295 else np.dtype(np.int64)


def is_mmap_dataset(prefix: str) -> bool:
    """Whether PREFIX.bin and PREFIX.idx exist and the index is an mmap dataset's."""
    try:
        with open(prefix + ".idx", "rb") as f:
            return f.read(len(MAGIC)) == MAGIC and os.path.isfile(prefix + ".bin")
    except OSError:
        return False


def read_sizes(prefix: str) -> np.ndarray:
    """The item sizes of the mmap dataset PREFIX (a copy, int64); ValueError naming the file when it is not one."""
    path = prefix + ".idx"
    with open(path, "rb") as f:
        header = f.read(HEADER.size)
        if len(header) < HEADER.size:
            raise ValueError(f"{path}: not a fairseq mmap index (only {len(header)} bytes)")
        magic, version, _, count = HEADER.unpack(header)
        if magic != MAGIC or version != VERSION:
            raise ValueError(f"{path}: not a fairseq mmap index of version {VERSION}")
        sizes = np.fromfile(f, dtype="<i4", count=count)
    if len(sizes) != count:
        raise ValueError(f"{path}: truncated: {len(sizes)} of {count} sizes")
    return sizes.astype(np.int64)


class MMapDatasetWriter:
    """Writes items to an open PREFIX.bin stream and, at :meth:`finish`, their index: the sizes are kept as 4 bytes
    an item (what the index holds), never the items."""

    def __init__(self, data: BinaryIO, dtype: np.dtype) -> None:
        self.data, self.dtype = data, np.dtype(dtype)
        if self.dtype not in DTYPE_CODES:
            raise ValueError(f"fairseq's mmap datasets have no dtype {self.dtype}")
        self.sizes = array("i")

    def add(self, values: np.ndarray) -> None:
        self.data.write(np.ascontiguousarray(values, dtype=self.dtype).tobytes())
        self.sizes.append(len(values))

    def finish(self, index: BinaryIO) -> None:
        sizes = np.frombuffer(self.sizes, dtype=np.int32) if self.sizes else np.zeros(0, np.int32)
        offsets = np.zeros(len(sizes), dtype=np.int64)
        np.cumsum(sizes[:-1], dtype=np.int64, out=offsets[1:])
        index.write(HEADER.pack(MAGIC, VERSION, DTYPE_CODES[self.dtype], len(sizes)))
        index.write(sizes.astype("<i4").tobytes())
        index.write((offsets * self.dtype.itemsize).astype("<i8").tobytes())


@contextlib.contextmanager
def mmap_dataset_output(prefix: str, dtype: np.dtype) -> Iterator[MMapDatasetWriter]:
    """A writer of the dataset PREFIX.bin/.idx whose two files appear, renamed from temporary names beside them,
    only when the block succeeds (a failure or a kill leaves no half-written dataset)."""
    directory, base = os.path.dirname(prefix) or ".", os.path.basename(prefix)
    for ext in (".bin", ".idx"):  # those of a killed run (the pid in the name is dead)
        remove_stale_temporaries(directory, f".{base}{ext}.", ".tmp")
    # Unique temp names in the target directory (so the final rename is atomic), created with open() so the files
    # get the usual permissions (mkstemp would make them owner-only).
    tag = f"{writer_tag()}.{secrets.token_hex(4)}"
    temps = [os.path.join(directory, f".{base}{ext}.{tag}.tmp") for ext in (".bin", ".idx")]
    try:
        with open(temps[0], "wb") as data:
            writer = MMapDatasetWriter(data, dtype)
            yield writer
        with open(temps[1], "wb") as index:
            writer.finish(index)
        os.replace(temps[0], prefix + ".bin")
        os.replace(temps[1], prefix + ".idx")
    except BaseException:
        for tmp in temps:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        raise
