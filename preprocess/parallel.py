"""Order-preserving per-sentence map over a process pool, with a tqdm progress bar on stderr."""
from __future__ import annotations

import sys
from typing import Any, Callable, Iterable, Iterator, TypeVar

from tqdm import tqdm

from .io import fork_pool

Item = TypeVar("Item")
Result = TypeVar("Result")


def map_in_order(fn: Callable[[Item], Result], items: Iterable[Item], *, workers: int = 1, total: int | None = None,
                 desc: str = "", initializer: Callable[..., Any] | None = None, initargs: tuple = (),
                 chunksize: int = 256) -> Iterator[Result]:
    """Yield fn(item) for every item, in input order.

    `initializer(*initargs)` runs once, in this process, before any item: its errors (a missing model file...)
    surface here as ordinary exceptions. Workers are forked afterwards and inherit the state it set up; they do
    not rerun it, because multiprocessing.Pool respawns workers whose initializer fails, forever.
    workers == 1 runs in this process; otherwise a pool of `workers` forked processes. `fn` must be a
    module-level function. Exceptions raised by `fn` propagate to the caller (InputError pickles intact).
    Workers die with this process (PR_SET_PDEATHSIG) and ignore Ctrl-C, which this process handles.
    """
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    if initializer is not None:
        initializer(*initargs)
    bar = tqdm(total=total, desc=desc, unit="sent", file=sys.stderr, disable=None, mininterval=1.0)
    try:
        if workers == 1:
            for item in items:
                yield fn(item)
                bar.update(1)
        else:
            with fork_pool(workers) as pool:
                for result in pool.imap(fn, items, chunksize=chunksize):
                    yield result
                    bar.update(1)
    finally:
        bar.close()
