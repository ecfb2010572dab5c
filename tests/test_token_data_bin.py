"""`xlpos-prep preprocess` writes what fairseq-preprocess writes, byte for byte, without importing fairseq: the
dictionaries (counts, ties, padding, special symbols in the text) and the binarized tokens (unknown words, empty
lines, the dtype of a large vocabulary), with a joined dictionary and with given ones; bad options and dictionary
files are one-line errors."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cli, subprocess_env

# ties in count (ordered by code point), non-ASCII symbols, the special symbols as words, an empty line, words that
# only valid/test have (-> <unk>), tabs and repeated spaces between words
TEXT = {
    "train": {"en": ["b a a c", "zeta Ä é a", "", "<unk> x </s> x", "c\tb  b", "ü ü ü z"],
              "ja": ["な に に", "ぬ ね の", "は", "", "ね の な", "ひ <pad> ふ"]},
    "valid": {"en": ["a b unseen", "x"], "ja": ["な new", ""]},
    "test": {"en": ["c z q", "a"], "ja": ["ひ ふ", "に zz"]},
}


def write_corpus(root: Path, text: dict) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for split, sides in text.items():
        for lang, lines in sides.items():
            (root / f"{split}.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return root


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), timeout=300)


def ours(text: Path, dest: Path, *dicts: str) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "xlpos_prep.cli", "preprocess", "-s", "en", "-t", "ja",
                *(a for split in ("train", "valid", "test") if (text / f"{split}.en").exists()
                  for a in (f"--{split}pref", str(text / split))),
                *(dicts or ["--joined-dictionary"]), "--destdir", str(dest)])


def fairseqs(text: Path, dest: Path, *dicts: str) -> None:
    proc = run([cli("fairseq-preprocess"), "--source-lang", "en", "--target-lang", "ja",
                *(a for split in ("train", "valid", "test") if (text / f"{split}.en").exists()
                  for a in (f"--{split}pref", str(text / split))),
                *(dicts or ["--joined-dictionary"]), "--destdir", str(dest), "--workers", "1"])
    assert proc.returncode == 0, proc.stderr[-3000:]


def files(dest: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(dest.iterdir()) if p.name != "preprocess.log"}


def test_joined_and_given_dictionaries_equal_fairseq_preprocess(tmp_path):
    text = write_corpus(tmp_path / "text", TEXT)
    proc = ours(text, tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    fairseqs(text, tmp_path / "fairseq")
    got, want = files(tmp_path / "ours"), files(tmp_path / "fairseq")
    assert sorted(got) == sorted(want) and len(want) == 2 + 3 * 2 * 2
    assert [name for name in want if got[name] != want[name]] == []
    assert "x 2" in want["dict.en.txt"].decode() and "madeupword0000 0" in want["dict.en.txt"].decode()

    # a further test set binarized with those dictionaries (the pipeline's extra test sets)
    extra = write_corpus(tmp_path / "extra", {"test": {"en": ["q a b", "zeta"], "ja": ["な zz", "ぬ"]}})
    given = ["--srcdict", str(tmp_path / "fairseq" / "dict.en.txt"), "--tgtdict", str(tmp_path / "fairseq" /
                                                                                      "dict.ja.txt")]
    assert ours(extra, tmp_path / "ours-extra", *given).returncode == 0
    fairseqs(extra, tmp_path / "fairseq-extra", *given)
    assert files(tmp_path / "ours-extra") == files(tmp_path / "fairseq-extra")


def test_a_large_vocabulary_is_binarized_as_fairseq_does_without_importing_it(tmp_path):
    # 70,000 types: past uint16, fairseq's tokens are uint32
    words = [f"w{k}" for k in range(70_000)]
    lines = [" ".join(words[k:k + 700]) for k in range(0, len(words), 700)]
    text = write_corpus(tmp_path / "text", {"train": {"en": lines, "ja": lines[:3]}})
    probe = ("import sys, runpy; sys.argv = ['xlpos-prep'] + sys.argv[1:]\n"
             "try:\n    runpy.run_module('xlpos_prep.cli', run_name='__main__')\n"
             "except SystemExit as e:\n    assert not e.code, e.code\n"
             "assert 'fairseq' not in sys.modules and 'torch' not in sys.modules, 'fairseq or torch imported'\n")
    proc = run([sys.executable, "-c", probe, "preprocess", "-s", "en", "-t", "ja", "--trainpref", str(text / "train"),
                "--joined-dictionary", "--destdir", str(tmp_path / "ours")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    fairseqs(text, tmp_path / "fairseq")
    assert files(tmp_path / "ours") == files(tmp_path / "fairseq")


@pytest.mark.parametrize("args, message", [
    (["--validpref", "V", "--joined-dictionary"], "--joined-dictionary counts the training text: give --trainpref"),
    (["--trainpref", "T", "--srcdict", "D"], "--srcdict needs --tgtdict"),
    (["--joined-dictionary", "--trainpref", "T", "--srcdict", "D"], "not allowed with argument"),
])
def test_bad_options_are_one_line_errors(tmp_path, args, message):
    proc = run([sys.executable, "-m", "xlpos_prep.cli", "preprocess", "-s", "en", "-t", "ja", *args,
                "--destdir", str(tmp_path / "out")])
    assert proc.returncode != 0 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("line, message", [
    ("a", "expected 'SYMBOL COUNT'"),
    ("a 3\nb x", "expected 'SYMBOL COUNT'"),
    ("a 3\na 2", "'a' is listed twice"),
    ("<unk> 4", "'<unk>' is a special symbol"),
])
def test_a_bad_dictionary_file_is_named_with_its_line(tmp_path, line, message):
    text = write_corpus(tmp_path / "text", {"test": {"en": ["a"], "ja": ["a"]}})
    bad = tmp_path / "dict.en.txt"
    bad.write_text(line + "\n", encoding="utf-8")
    good = tmp_path / "dict.ja.txt"
    good.write_text("a 1\n", encoding="utf-8")
    proc = ours(text, tmp_path / "out", "--srcdict", str(bad), "--tgtdict", str(good))
    lineno = len(line.splitlines())
    assert proc.returncode != 0 and f"{bad}:{lineno}" in proc.stderr and message in proc.stderr
    assert not any((tmp_path / "out").glob("*.bin"))
