"""Cold start of the BTG reorderer: the numpy path that bridges the compile gives the compiled kernel's output.

btg.parse_batch parses with numpy while _parse_batch_jit compiles in a background thread, then hands the rest of
the batch to the kernel; these tests pin that the numpy path is operation-for-operation the kernel (same orders and
edges, ties included), that the hand-over at any sentence gives the same batch result, and the plumbing around it.
No timings here: benchmarks/cold_start.py measures them.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from xlpos_prep import btg

REPO = Path(__file__).resolve().parents[1]
ALL_FLAGS = (btg.FEAT_SPAN | btg.FEAT_CHILDREN | btg.FEAT_TERMINAL | btg.FEAT_OUTSIDE_CHILD | btg.FEAT_WIDE
             | btg.FEAT_JUNCTION)
FLAG_SETS = [ALL_FLAGS, ALL_FLAGS & ~btg.FEAT_JUNCTION, btg.FEAT_SPAN, btg.FEAT_CHILDREN | btg.FEAT_JUNCTION,
             btg.FEAT_TERMINAL, 0]
HASH_BITS = 8
MASK = np.uint64((1 << HASH_BITS) - 1)


def batch(rng: np.random.Generator, lengths: list[int], views: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """Sentences as parse_batch takes them: word ids with a start and an end marker row, and row offsets."""
    toks, offsets = [], [0]
    for n in lengths:
        t = rng.integers(0, vocab, size=(n + 2, views)).astype(np.uint64)
        t[0], t[-1] = 2**63 + 1, 2**63 + 2  # markers: large ids exercise the wrapping hash arithmetic
        toks.append(t)
        offsets.append(offsets[-1] + n + 2)
    return np.concatenate(toks), np.array(offsets, dtype=np.int64)


def split(result: tuple[np.ndarray, ...]) -> list[tuple[list[int], list[list[int]], float]]:
    orders, order_offsets, edges, edge_offsets, scores = result
    return [(orders[order_offsets[s]:order_offsets[s + 1]].tolist(), edges[edge_offsets[s]:edge_offsets[s + 1]].tolist(),
             float(scores[s])) for s in range(order_offsets.shape[0] - 1)]


@pytest.mark.parametrize("trial", range(12))
def test_numpy_path_gives_the_kernels_derivations(trial: int):
    rng = np.random.default_rng(trial)
    # lengths past max_span (segment chains), empty and one-word sentences; weights small integers half of the
    # time so that many candidates tie and the first-best tie-breaking is what decides
    lengths = [0, 1, 2] + rng.integers(3, 45, size=5).tolist()
    tok, offsets = batch(rng, lengths, views=1 + trial % 2, vocab=5)
    if trial % 2:
        weights = rng.integers(-2, 3, size=(1 << HASH_BITS) * 3).astype(np.float64)
    else:
        weights = rng.normal(size=(1 << HASH_BITS) * 3)
    max_span = 2 + (trial * 7) % 23
    # abstention: none, a margin, a margin with a longest inverted span (1e30 beyond it)
    penalty = btg.inversion_penalties(max_span, [0.0, 0.7, 1.5][trial % 3], [0, 0, 3][trial % 3])
    if trial % 2 and trial % 3:
        penalty = np.round(penalty)  # integral margins tie with integral weights: tie-breaking under penalties
    args = (tok, offsets, weights, MASK, 1 + trial % 5, max_span, FLAG_SETS[trial % len(FLAG_SETS)], penalty)
    expected = split(btg._parse_batch_jit(*args))
    with np.errstate(over="ignore"):
        orders, edges, scores, done = btg._np_parse_batch(*args, lambda: False)
    assert done == len(lengths)
    # scores bit-identical too: the sentence-level fallback compares them
    assert [(o.tolist(), e.tolist(), sc) for o, e, sc in zip(orders, edges, scores)] == expected
    assert all(o.dtype == np.int64 and e.dtype == np.int64 and e.shape[1:] == (4,) for o, e in zip(orders, edges))


class _Pending:
    """A compile that reports done after `after` checks (the hand-over point), without starting a thread."""

    def __init__(self, after: int):
        self.checks = 0
        self.after = after
        self.done = self

    def is_set(self) -> bool:
        self.checks += 1
        return self.checks > self.after


class _Uncompiled:
    """_parse_batch_jit as a fresh process sees it: no overloads yet; calls go to the real kernel."""

    def __init__(self, real):
        self.real = real
        self.overloads: dict = {}
        self.calls = 0

    def __call__(self, *args):
        self.calls += 1
        return self.real(*args)


def _cold(monkeypatch: pytest.MonkeyPatch, args: tuple, after: int) -> _Uncompiled:
    fake = _Uncompiled(btg._parse_batch_jit)
    monkeypatch.setattr(btg, "_parse_batch_jit", fake)
    signature = tuple(btg.typeof(a) for a in args)
    monkeypatch.setitem(btg._compiles, signature, _Pending(after))
    return fake


@pytest.mark.parametrize("after", [0, 1, 2, 4, 5, 100])
def test_handing_over_to_the_kernel_mid_batch_gives_the_same_batch(monkeypatch: pytest.MonkeyPatch, after: int):
    rng = np.random.default_rng(after)
    tok, offsets = batch(rng, [7, 0, 30, 1, 12], views=1, vocab=20)
    weights = rng.normal(size=(1 << HASH_BITS) * 3)
    args = (tok, offsets, weights, MASK, 3, 10, ALL_FLAGS, btg.inversion_penalties(10, 0.5, 6))
    real = btg._parse_batch_jit(*args)
    fake = _cold(monkeypatch, args, after)
    got = btg._parse_scored(*args)  # what parse_batch runs (scores included)
    # the first check is the "already done?" one before any sentence: `after` == 0 means compiled at once
    assert fake.calls == (1 if after < 6 else 0)
    assert len(got) == len(real) == 5
    for a, b in zip(got, real):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_wait_mode_and_non_finite_weights_use_the_kernel(monkeypatch: pytest.MonkeyPatch):
    rng = np.random.default_rng(0)
    tok, offsets = batch(rng, [5, 6], views=1, vocab=20)
    weights = rng.normal(size=(1 << HASH_BITS) * 3)
    args = (tok, offsets, weights, MASK, 3, 10, ALL_FLAGS, np.zeros(11))
    fake = _cold(monkeypatch, args, after=100)
    monkeypatch.setenv(btg.COLD_START_ENV, "wait")
    btg.parse_batch(*args)
    assert fake.calls == 1
    monkeypatch.delenv(btg.COLD_START_ENV)
    weights[3] = np.inf  # argmax and the kernel's strict comparisons could differ: no numpy path
    btg.parse_batch(tok, offsets, weights, MASK, 3, 10, ALL_FLAGS)
    assert fake.calls == 2
    weights[3] = 0.0
    btg.parse_batch(tok, offsets, weights, MASK, 3, 10, ALL_FLAGS, np.full(11, np.inf))  # so are penalties
    assert fake.calls == 3


def _run(code: str, env: dict, cwd: Path = REPO) -> str:
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(cwd), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


FRESH_PROCESS = """
import sys
import numpy as np
from xlpos_prep import btg
rng = np.random.default_rng(5)
n = 25
tok = rng.integers(0, 30, size=(n + 2, 1)).astype(np.uint64)
offsets = np.array([0, n + 2], dtype=np.int64)
weights = rng.normal(size=(1 << 10) * 3)
args = (tok, offsets, weights, np.uint64(1023), 3, 12, 63, btg.inversion_penalties(12, 0.0, 0))
signature = tuple(btg.typeof(a) for a in args)
if sys.argv[1] == "probe":
    print(btg._in_disk_cache(signature))
    sys.exit()
in_cache = btg._in_disk_cache
btg._in_disk_cache = lambda signature: False  # as on a fresh install, whatever this checkout's cache holds
first = btg.parse_batch(*args)
assert len(btg._compiles) == 1  # a background compile started (it may have finished already)
btg.wait_for_compile()
assert signature in btg._parse_batch_jit.overloads
assert in_cache(signature)  # the compile (or cache load) left it where numba's own lookup finds it
again = btg.parse_batch(*args)
assert all(np.array_equal(a, b) for a, b in zip(first, again))
print("ok", first[0].tolist() != list(range(n)))
"""


def test_fresh_process_compiles_in_the_background_and_gives_the_kernels_output():
    # The first call returns before any compiled code is loaded; the background thread then compiles (or loads)
    # the kernel into numba's cache, and both give the same result. Uses the checkout's cache: at most one compile.
    code = FRESH_PROCESS.replace("sys.argv[1]", "'run'")
    assert _run(code, dict(os.environ)).split() == ["ok", "True"]


def test_an_empty_cache_is_seen_as_empty(tmp_path: Path):
    code = FRESH_PROCESS.replace("sys.argv[1]", "'probe'")
    assert _run(code, dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))).split() == ["False"]


def test_read_only_package_keeps_its_compiled_code_in_the_user_cache(tmp_path: Path):
    # An install whose package directory is not writable (numba cannot create xlpos_prep/__pycache__; here it is a
    # file, which stops root as well): numba's cache=True falls back to the user cache dir, so the compile is still
    # paid once per install, not once per process.
    pkg = tmp_path / "site" / "xlpos_prep"
    shutil.copytree(REPO / "preprocess", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "__pycache__").write_text("not a directory\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"), XDG_CACHE_HOME=str(tmp_path / "xdg"),
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("NUMBA_CACHE_DIR", None)
    out = _run("import xlpos_prep.btg as b; print(b.__file__); print(b._parse_batch_jit._cache._cache_path)", env,
               cwd=tmp_path)  # not the checkout: `python -c` puts the working directory first on sys.path
    module, cache_path = out.split()
    assert module == str(pkg / "btg.py")
    assert cache_path.startswith(str(tmp_path / "xdg"))


class _SlowCompile:
    """A background compile that is still running (a thread that sleeps) when the test forks."""

    def __init__(self, seconds: float):
        self.thread = threading.Thread(target=time.sleep, args=(seconds,))
        self.thread.start()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_fork_waits_for_a_running_compile(monkeypatch: pytest.MonkeyPatch):
    # A child forked while the compile thread holds numba's compiler lock would inherit the lock held by a thread
    # that does not exist there: its next compile would hang. The at-fork hook waits for the compile instead.
    slow = _SlowCompile(0.5)
    monkeypatch.setitem(btg._compiles, ("test",), slow)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    alive_after_fork = slow.thread.is_alive()
    os.waitpid(pid, 0)
    assert not alive_after_fork
