"""`prepare` across machines: the per-sentence steps (reorder, positions, spm-encode) of contiguous line blocks as
independent shard jobs, and the merge that joins their parts back into the files a one-machine run writes.

A run does one stage of `prepare` (`Stage`): everything, the steps made once for the whole corpus (`--global-steps`:
alignment, oracle, reorderers, sentencepiece), one shard (`--shard I/N`: block I of N of every split, written under
WORK/shards/I-of-N/, a directory no other shard writes), or the merge (`--merge N`), which concatenates the shards'
parts in order and records the final outputs as the one-machine steps do, so that later runs and training see no
difference. Each shard's steps follow the completion rule on their own, so a killed shard job reruns only itself,
and the merge refuses while any shard's steps are missing or stale, naming the shard and the command to rerun.
docs/cluster.md has the Slurm recipe (recipes/slurm_prepare.sh).
"""
from __future__ import annotations

import itertools
import os
import shutil
from dataclasses import dataclass
from typing import Callable, Sequence

from .io import InputError, Shard, atomic_output

STAGES = ("all", "global", "shard", "merge")


@dataclass(frozen=True)
class Stage:
    """The part of `prepare` one run does: "all"; "global", the steps made once for the whole corpus; "shard",
    block `index` of `count` of the per-sentence steps; "merge", joining `count` shards."""
    kind: str = "all"
    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.kind not in STAGES:
            raise ValueError(f"stage must be one of {', '.join(STAGES)}, not {self.kind!r}")
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index}/{self.count}: need 0 <= I < N")

    def block(self, lines: int) -> tuple[int, int]:
        """The lines [start, end) of a split of `lines` lines that shard `index` covers (io.Shard's blocks, the
        ones `reorder --shard` and `positions --shard` take; empty when there are fewer lines than shards)."""
        return Shard(self.index, self.count).bounds(lines)

    @property
    def name(self) -> str:
        return f"shard {self.index}/{self.count}"


@dataclass(frozen=True)
class ShardFiles:
    """Where one shard keeps its part of every per-sentence output, its logs and its step times: a directory of
    its own, so that shard jobs running at once never write the same file."""
    root: str

    def tok(self, split: str, lang: str) -> str:
        return os.path.join(self.root, "tok", f"{split}.{lang}")

    def order(self, split: str) -> str:
        return os.path.join(self.root, "reorder", f"{split}.order")

    @property
    def rest_src(self) -> str:  # its training lines beyond the jackknifed ones, reordered by the full model
        return os.path.join(self.root, "reorder", "train-rest.src")

    @property
    def rest_order(self) -> str:
        return os.path.join(self.root, "reorder", "train-rest.order")

    def xlpos(self, split: str) -> str:
        return os.path.join(self.root, "pieces", f"{split}.xlpos")

    def pieces(self, split: str, lang: str) -> str:
        return os.path.join(self.root, "pieces", f"{split}.{lang}")

    @property
    def logs(self) -> str:
        return os.path.join(self.root, "logs")

    @property
    def times(self) -> str:
        return os.path.join(self.root, "times.json")


def write_block(src: str, out: str, start: int, end: int) -> None:
    """Lines [start, end) of `src` into `out`, byte for byte and streamed (a multi-GB corpus is never read whole)."""
    with open(src, "rb") as f, atomic_output(out, "wb") as o:
        o.writelines(itertools.islice(f, start, end))


def concatenate(parts: Sequence[str], out: str) -> None:
    """`parts` one after the other into `out`, byte for byte."""
    with atomic_output(out, "wb") as f:
        for part in parts:
            with open(part, "rb") as p:
                shutil.copyfileobj(p, f)


class Joiner:
    """The makes of the merge's steps: each concatenates the shards' parts of its outputs, after every shard was
    found complete and up to date (`check`, run once, before the merge writes anything)."""

    def __init__(self, count: int, check: Callable[[], None]):
        self.count = count
        self._check = check
        self._checked = False

    def checked(self, make: Callable[[], object]) -> Callable[[], None]:
        """`make`, run only once every shard passed the check."""
        def run() -> None:
            if not self._checked:
                self._check()
                self._checked = True
            make()
        return run

    def make(self, outputs: Sequence[tuple[str, Callable[[int], str | None]]]) -> Callable[[], None]:
        """A make writing each (OUTPUT, part) of `outputs`: part(i) is shard i's part of OUTPUT (None: shard i
        has no line of it)."""
        def join() -> None:
            for out, part in outputs:
                concatenate([p for p in map(part, range(self.count)) if p is not None], out)
        return self.checked(join)


def refuse_shard(stage: Stage, command: str, error: InputError) -> InputError:
    """The merge's error for shard `stage` whose step failed its check (`error`): names the shard and the command
    that makes it."""
    return InputError(error.path, error.line, f"{stage.name} is not complete ({error.message}); run `{command}` "
                      f"(with the options of the other runs) before the merge")
