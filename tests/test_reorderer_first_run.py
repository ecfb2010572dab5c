"""A fresh install's first `xlpos-prep reorder` of a few sentences compiles nothing it does not need.

The linear model's compiled parse kernel takes ~10 s of CPU to compile; a short job parses with btg's numpy path
(the same derivations) instead of starting that compile, which the process would wait for at exit. The neural
model needs no compiled code at all. Checked through numba's cache directory: a compile writes the kernel there.
No timings (benchmarks/cold_start.py --cli-model measures them)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import subprocess_env
from test_reorderer import toy_corpus, write_corpus
from test_reorderer_neural import TINY_TRAIN_ARGS
from xlpos_prep.cli import main as cli_main
from xlpos_prep.reorderer import load_reorderer


def fresh_reorder(tmp_path, model: str, src: str, out: str) -> list[str]:
    """`xlpos-prep reorder` in a child with an empty numba cache; the files numba wrote there."""
    cache = tmp_path / "numba-cache"
    cache.mkdir(exist_ok=True)
    env = subprocess_env()
    env["NUMBA_CACHE_DIR"] = str(cache)
    env.pop("XLPOS_BTG_COLD_START", None)
    proc = subprocess.run([sys.executable, "-m", "xlpos_prep.cli", "reorder", "--model", model, "--src", src,
                           "--out", out], env=env, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sorted(p.name for p in cache.rglob("*") if p.is_file())


@pytest.mark.parametrize("kind", ["linear", "neural"])
def test_a_short_first_reorder_compiles_nothing(tmp_path, kind):
    sentences, ranks = toy_corpus(150, seed=1)
    src, oracle = write_corpus(tmp_path, "train", sentences, ranks)
    model = str(tmp_path / "m.npz")
    assert cli_main(["train-reorderer", "--src", src, "--oracle", oracle, "--model", model,
                     *TINY_TRAIN_ARGS[kind]]) == 0
    test, _ = write_corpus(tmp_path, "test", *toy_corpus(20, seed=5))
    out = str(tmp_path / "out")
    written = fresh_reorder(tmp_path, model, test, out)
    assert not [name for name in written if "parse_batch" in name], written
    expected = load_reorderer(model).reorder_batch([line.split() for line in open(test)])
    assert [[int(x) for x in line.split()] for line in open(out)] == expected
