"""The recipes, run end to end on tiny local samples, so that none of their steps goes unexecuted.

Each recipe gets a few hundred sentence pairs cut from ../shared/data (through DATA= / ASPEC_DIR= instead of a
download) and tiny model settings (ARCH_ARGS, MAX_UPDATE): the point is that every step runs and produces what the
next one needs, not the scores. Between them the runs cover the systems baseline, xl-input and xl-head,
epoch- and update-checkpoint averaging, sharded reordering, and each recipe's own tokenization, detokenization and
scoring; the quickstart recipe (with xl-rope) runs end to end, killed and resumed, in test_kill_resume.py.
Slow: each end-to-end run takes 30-60 s on 2 cores (fairseq start-up dominates); the bad-input tests take a few
seconds.

WMT17 Zh-En has no Chinese sample in ../shared/data, so its test makes a fake one: the English side of Multi30k
with every word replaced by a Chinese word from jieba's bundled dictionary (a fixed hash of the English word) and
the two halves of each sentence swapped, written without spaces so that jieba has to segment it. It exercises the
recipe's Chinese path (NFKC, jieba, zh detokenization, sacreBLEU's zh tokenizer), not translation quality.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes"
SHARED_DATA = Path(os.environ.get("XLPOS_SHARED_DATA", REPO.parent / "shared" / "data"))

TINY_ARCH = ("--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16 --decoder-embed-dim 16 "
             "--encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 "
             "--encoder-attention-heads 2 --decoder-attention-heads 2")
TINY = {
    "ARCH_ARGS": TINY_ARCH, "MAX_UPDATE": "3", "MAX_TOKENS": "2000", "WARMUP": "10", "UPDATE_FREQ": "1",
    "REORDER_ITERATIONS": "2", "SPM_VOCAB": "300", "WORKERS": "2", "GEN_MAX_TOKENS": "4000", "AVG_LAST": "1",
    "GEN_ARGS": "--max-len-a 1 --max-len-b 5",  # an untrained model would babble up to 200 tokens
    # 2**18 hashed rows instead of the default 2**22: these corpora have a few hundred sentences, and the default's
    # ~800 MB of weights (and the time to allocate and save them) is most of a tiny reorderer's cost
    "REORDER_ARGS": "--hash-bits 18",
    # one reorderer, not the jackknife's K more: the Tanaka run keeps the pipeline's default, test_jackknife.py
    # tests the folds themselves
    "JACKKNIFE": "1",
}


def need_shared(*parts: str) -> Path:
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the recipe tests cut their samples from ../shared/data")
    return path


def head(path: Path, n: int, start: int = 0) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for k, line in enumerate(f) if start <= k < start + n]


def write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def run_recipe(script: str, env: dict, timeout: float = 400) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    for var in ("DATA", "WORK", "DIRECTION", "SIZE", "SYSTEMS", "ASPEC_DIR", "EXTRA_PARALLEL_DIR", "VERBOSE",
                "XLPOS_MIRROR", "STOP_AFTER", "URL", "VALID_SET", "TEST_SET", "CLEAN_MAX_LEN", "CLEAN_RATIO"):
        full_env.pop(var, None)
    full_env.update({"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}, **env)
    return subprocess.run(["bash", str(RECIPES / script)], env=full_env, capture_output=True, text=True,
                          timeout=timeout)


def check_ok(proc: subprocess.CompletedProcess) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    return out


def results(work: Path, systems: list[str]) -> tuple[str, dict[str, dict]]:
    """The printed table and every system's score JSON files."""
    table = (work / "results.txt").read_text(encoding="utf-8")
    scores = {}
    for system in systems:
        files = sorted((work / "scores").glob(f"{system}.*json"))
        assert files, f"no scores for {system}"
        scores[system] = {m["name"]: m for f in files for m in json.loads(f.read_text())["metrics"]}
        assert re.search(rf"^{re.escape(system)}\s+\d+\.\d\d", table, flags=re.M), table
    return table, scores


def hypotheses_complete(work: Path, system: str, test_file: Path) -> None:
    words = (work / "out" / system / "test.words").read_text(encoding="utf-8").splitlines()
    assert len(words) == len(test_file.read_text(encoding="utf-8").splitlines())


def assert_average_of(averaged: Path, inputs: list[Path]) -> None:
    """Every parameter of `averaged` is the mean of the inputs' (recipes/average_checkpoints.py)."""
    import torch

    import xlpos  # noqa: F401  (fairseq checkpoint loading with weights_only)
    from fairseq import checkpoint_utils
    avg = checkpoint_utils.load_checkpoint_to_cpu(str(averaged))
    states = [checkpoint_utils.load_checkpoint_to_cpu(str(p))["model"] for p in inputs]
    assert "last_optimizer_state" not in avg and avg["model"].keys() == states[0].keys()
    for name, value in avg["model"].items():
        expected = sum(s[name].double() for s in states) / len(states)
        assert torch.allclose(value.double(), expected, atol=1e-6), name
    assert any(not torch.equal(states[0][n], states[1][n]) for n in states[0])  # the inputs did differ


# -------------------------------------------------------------------------------------------- end to end (slow)
def test_tanaka_without_test_split_holds_out_and_averages_epochs(tmp_path):
    enja = need_shared("enja", "train.en")
    data = tmp_path / "enja"
    for lang in ("en", "ja"):
        write(data / f"train.{lang}", head(enja.with_suffix(f".{lang}"), 300))
        write(data / f"dev.{lang}", head(enja.parent / f"dev.{lang}", 30))
    work = tmp_path / "work"
    env = {**TINY, "DATA": str(data), "WORK": str(work), "TEST_HOLDOUT": "40", "SYSTEMS": "xl-input",
           "AVG_LAST": "2", "SPM_VOCAB": "1000", "JACKKNIFE": "",  # the pipeline's default
           # 3 epochs of 1-2 updates: epoch checkpoints 1-3, the last 2 kept and averaged
           "MAX_TOKENS": "20000", "MAX_UPDATE": "100", "TRAIN_ARGS": "--max-epoch 3"}
    out = check_ok(run_recipe("tanaka_ja_en.sh", env))
    assert "the last 40 training pairs are the test set" in out
    assert json.loads((work / "prepare.json").read_text())["jackknife"] > 1
    assert (work / "tok" / "test.ja").read_text().splitlines() == head(enja.with_suffix(".ja"), 40, start=260)
    assert len((work / "tok" / "train.ja").read_text().splitlines()) == 260
    assert_average_of(work / "checkpoints" / "xl-input" / "checkpoint.avg2.pt",
                      [work / "checkpoints" / "xl-input" / f"checkpoint{e}.pt" for e in (2, 3)])
    _, scores = results(work, ["xl-input"])
    assert {"BLEU", "RIBES"} <= set(scores["xl-input"])
    hypotheses_complete(work, "xl-input", work / "tok" / "test.en")


def test_multi30k_raw_text_is_tokenized_and_detokenized(tmp_path):
    ende = need_shared("ende", "train.en")
    data = tmp_path / "m30k"
    for lang in ("en", "de"):
        write(data / f"train.{lang}", head(ende.with_suffix(f".{lang}"), 300))
        write(data / f"val.{lang}", head(ende.parent / f"val.{lang}", 30))
        write(data / f"test_2016_flickr.{lang}", head(ende.parent / f"test_2016_flickr.{lang}", 30))
    work = tmp_path / "work"
    check_ok(run_recipe("multi30k_en_de.sh", {**TINY, "DATA": str(data), "WORK": str(work), "SYSTEMS": "baseline"}))
    tok_line = (work / "tok" / "train.en").read_text().splitlines()[0]
    assert tok_line == "Two young , White males are outside near many bushes ."  # Moses, cased
    detok = (work / "out" / "baseline" / "test.detok").read_text().splitlines()
    assert len(detok) == 30 and not any(" ." in line[-2:] for line in detok if line)
    table, scores = results(work, ["baseline"])
    assert "BLEU" in scores["baseline"] and "13a" in scores["baseline"]["BLEU"]["signature"]
    # the baseline row states the monotone order's tau on the test set
    monotone = json.loads((work / "reorder" / "test.tau.json").read_text())["monotone"]["corpus_tau"]
    row = next(line for line in table.splitlines() if line.split() and line.split()[0] == "baseline")
    assert f"{monotone:.4f}" in row


def test_wmt14_sharded_reordering_update_averaging_and_compound_split(tmp_path):
    ende = need_shared("ende", "train.en")
    data = tmp_path / "wmt14"
    for lang in ("en", "de"):
        train = head(ende.with_suffix(f".{lang}"), 300)
        train[5] = ""  # raw training text may hold empty lines; cleaning must drop the pair
        write(data / f"train.{lang}", train)
        write(data / f"valid.{lang}", head(ende.parent / f"val.{lang}", 30))
        write(data / f"test.{lang}", head(ende.parent / f"test_2016_flickr.{lang}", 30))
    work = tmp_path / "work"
    env = {**TINY, "DATA": str(data), "WORK": str(work), "SYSTEMS": "xl-head", "MAX_UPDATE": "4",
           "SAVE_INTERVAL_UPDATES": "2", "AVG_LAST": "2", "REORDER_SHARDS": "2", "ALIGN_LINES": "250",
           "REORDER_TRAIN_LINES": "200", "CLEAN_RATIO": "9"}
    out = check_ok(run_recipe("wmt14_en_de.sh", env))
    assert "clean: kept 299 of 300" in out
    # the reorderer may learn from every training sentence the cleaning kept (CLEAN_MAX_LEN, 250), not only from
    # those of train-reorderer's default --max-len (100)
    from xlpos_prep.reorderer import load_reorderer
    assert load_reorderer(str(work / "reorder" / "reorderer.model")).training["options"]["max_len"] == 250
    assert len((work / "reorder" / "train.src").read_text().splitlines()) == 200
    orders = (work / "reorder" / "train.order").read_text().splitlines()
    assert len(orders) == 299 and not list((work / "reorder").glob("*.shard*"))
    assert_average_of(work / "checkpoints" / "xl-head" / "checkpoint.avg2.pt",
                      [work / "checkpoints" / "xl-head" / f"checkpoint_1_{u}.pt" for u in (2, 4)])
    table, scores = results(work, ["xl-head"])
    assert {"sacreBLEU", "cs-BLEU"} <= set(scores["xl-head"])
    assert "compound-split" in table


def test_wat17_ja_en_from_an_aspec_layout(tmp_path):
    pytest.importorskip("fugashi", reason="Japanese segmentation needs pip install -e '.[recipes]'")
    enja = need_shared("enja", "train.en")
    en, ja = head(enja.with_suffix(".en"), 360), head(enja.with_suffix(".ja"), 360)
    raw_ja = [line.replace(" ", "") for line in ja]  # ASPEC's Japanese is unsegmented
    aspec = tmp_path / "ASPEC" / "ASPEC-JE"
    write(aspec / "train" / "train-1.txt", [f"0.9 ||| D{k} ||| {k} ||| {j} ||| {e}"
                                             for k, (j, e) in enumerate(zip(raw_ja[:200], en[:200]))])
    write(aspec / "train" / "train-2.txt", [f"0.5 ||| D{k} ||| {k} ||| {j} ||| {e}"
                                             for k, (j, e) in enumerate(zip(raw_ja[200:300], en[200:300]))])
    write(aspec / "dev" / "dev.txt", [f"D{k} ||| {k} ||| {j} ||| {e}" for k, (j, e) in
                                      enumerate(zip(raw_ja[300:330], en[300:330]))])
    write(aspec / "test" / "test.txt", [f"D{k} ||| {k} ||| {j} ||| {e}" for k, (j, e) in
                                        enumerate(zip(raw_ja[330:], en[330:]))])
    work = tmp_path / "work"
    env = {**TINY, "ASPEC_DIR": str(aspec.parent), "WORK": str(work), "DIRECTION": "en-ja", "SYSTEMS": "xl-input",
           "SPM_VOCAB": "1000"}
    check_ok(run_recipe("wat17_ja_en.sh", env))
    assert len((work / "raw" / "train.ja").read_text().splitlines()) == 300  # both training files
    assert " " in (work / "tok" / "test.ja").read_text().splitlines()[0]  # segmented by fugashi
    detok = (work / "out" / "xl-input" / "test.detok").read_text().splitlines()
    assert len(detok) == 30
    _, scores = results(work, ["xl-input"])
    assert {"tok-BLEU", "RIBES", "sacreBLEU"} <= set(scores["xl-input"])
    assert "tok:char" in scores["xl-input"]["sacreBLEU"]["signature"]
    # the checkpoint translates raw English as the corpus was made: Moses-normalized and tokenized in, Japanese
    # words joined without spaces out
    from xlpos.models.transformer_xlpos import XLPosTransformerModel
    hub = XLPosTransformerModel.from_pretrained(str(work / "checkpoints" / "xl-input"),
                                                checkpoint_file="checkpoint_best.pt",
                                                data_name_or_path=str(work / "data-bin"))
    line = "“This is a pen,” he said."
    subprocess.run([sys.executable, "-m", "xlpos_prep.cli", "tokenize", "--lang", "en", "--normalize",
                    "--input", str(write(tmp_path / "raw.en", [line])), "--output", str(tmp_path / "tok.en")],
                   check=True)
    assert hub.tokenizer.encode(line) == (tmp_path / "tok.en").read_text().strip() != line
    assert hub.tokenizer.decode("これ は ペン です 。") == "これはペンです。"
    assert isinstance(hub.translate(line, beam=2), str)


def fake_chinese(english: list[str]) -> list[str]:
    """Chinese-looking sentences: words from jieba's dictionary for the English words, halves swapped."""
    import jieba
    with jieba.get_dict_file() as f:
        entries = [line.split() for line in f.read().decode("utf-8").splitlines()]
    words = sorted((w for w, freq, *_ in entries if len(w) == 2 and int(freq) > 2000 and
                    all("\u4e00" <= c <= "\u9fff" for c in w)))
    out = []
    for line in english:
        tokens = re.findall(r"\w+|[.,]", line.lower())
        zh = [{".": "。", ",": "，"}.get(t) or words[zlib.crc32(t.encode()) % len(words)] for t in tokens]
        body, end = (zh[:-1], zh[-1:]) if zh and zh[-1] == "。" else (zh, [])
        half = len(body) // 2
        out.append("".join(body[half:] + body[:half] + end))
    return out


def test_wmt17_zh_en_on_a_fake_chinese_sample(tmp_path):
    pytest.importorskip("jieba", reason="Chinese segmentation needs pip install -e '.[recipes]'")
    ende = need_shared("ende", "train.en")
    data = tmp_path / "zh"
    for split, (path, n) in {"train": (ende, 300), "valid": (ende.parent / "val.en", 30),
                             "test": (ende.parent / "test_2016_flickr.en", 30)}.items():
        english = head(path, n)
        write(data / f"{split}.en", english)
        write(data / f"{split}.zh", fake_chinese(english))
    work = tmp_path / "work"
    check_ok(run_recipe("wmt17_zh_en.sh", {**TINY, "DATA": str(data), "WORK": str(work), "SYSTEMS": "baseline",
                                         "SPM_VOCAB": "1000"}))
    assert " " in (work / "tok" / "valid.zh").read_text().splitlines()[0]  # segmented by jieba
    _, scores = results(work, ["baseline"])
    assert "13a" in scores["baseline"]["sacreBLEU"]["signature"]
    hypotheses_complete(work, "baseline", work / "tok" / "test.zh")


# -------------------------------------------------------------------------------------------- bad input (fast)
def test_wat17_without_the_licensed_corpus_says_where_to_get_it(tmp_path):
    proc = run_recipe("wat17_ja_en.sh", {"WORK": str(tmp_path / "w")})
    assert proc.returncode != 0
    assert "ASPEC_DIR is not set" in proc.stderr and "https://jipsti.jst.go.jp/aspec/" in proc.stderr
    proc = run_recipe("wat17_ja_en.sh", {"WORK": str(tmp_path / "w"), "ASPEC_DIR": str(tmp_path)})
    assert proc.returncode != 0 and f"{tmp_path}/train/train-1.txt not found" in proc.stderr
    assert not (tmp_path / "w").exists()  # stopped before doing anything


def test_malformed_aspec_line_is_named(tmp_path):
    aspec = tmp_path / "ASPEC-JE"
    write(aspec / "train" / "train-1.txt", ["0.9 ||| D ||| 1 ||| 猫 ||| cat", "0.9 ||| D ||| 2 ||| 犬"])
    write(aspec / "train" / "train-2.txt", ["0.9 ||| D ||| 3 ||| 鳥 ||| bird"])
    write(aspec / "dev" / "dev.txt", ["D ||| 1 ||| 猫 ||| cat"])
    write(aspec / "test" / "test.txt", ["D ||| 1 ||| 猫 ||| cat"])
    proc = run_recipe("wat17_ja_en.sh", {"WORK": str(tmp_path / "w"), "ASPEC_DIR": str(aspec)})
    assert proc.returncode != 0
    assert f"{aspec}/train/train-1.txt:2: expected at least 5" in proc.stderr


def test_mismatched_line_counts_stop_the_recipe(tmp_path):
    data = tmp_path / "d"
    for split in ("train", "valid", "test"):
        write(data / f"{split}.src", ["a b c", "d e f"])
        write(data / f"{split}.tgt", ["x y z", "u v w"])
    write(data / "valid.tgt", ["x y z"])
    proc = run_recipe("quickstart.sh", {"DATA": str(data), "WORK": str(tmp_path / "w")})
    assert proc.returncode != 0
    assert f"{data}/valid.tgt:2: has 1 lines but {data}/valid.src has 2: files must be parallel" in proc.stderr


def test_missing_corpus_file_says_what_data_must_hold(tmp_path):
    data = tmp_path / "m30k"
    for name in ("train", "val"):
        for lang in ("en", "de"):
            write(data / f"{name}.{lang}", ["A dog runs ."])
    proc = run_recipe("multi30k_en_de.sh", {"DATA": str(data), "WORK": str(tmp_path / "w")})
    assert proc.returncode != 0
    assert f"{data}/test_2016_flickr.en not found" in proc.stderr
    assert "DATA must hold raw train/val/test_2016_flickr.{en,de}" in proc.stderr


def test_empty_line_in_tokenized_corpus_is_named(tmp_path):
    data = tmp_path / "d"
    for split in ("train", "valid", "test"):
        write(data / f"{split}.src", ["a b c", "d e f"])
        write(data / f"{split}.tgt", ["x y z", "u v w"])
    write(data / "train.tgt", ["x y z", ""])
    proc = run_recipe("quickstart.sh", {"DATA": str(data), "WORK": str(tmp_path / "w")})
    assert proc.returncode != 0 and f"{data}/train.tgt:2: empty line" in proc.stderr


def test_unknown_system_direction_and_size_are_rejected(tmp_path):
    proc = run_recipe("quickstart.sh", {"SYSTEMS": "baseline xl-foo", "WORK": str(tmp_path / "w")})
    assert proc.returncode != 0 and "unknown system 'xl-foo'" in proc.stderr
    proc = run_recipe("tanaka_ja_en.sh", {"DIRECTION": "ja-fr", "WORK": str(tmp_path / "w")})
    assert proc.returncode != 0 and "DIRECTION must be ja-en or en-ja" in proc.stderr
    proc = run_recipe("wmt14_en_de.sh", {"SIZE": "huge", "WORK": str(tmp_path / "w")})
    assert proc.returncode != 0 and "SIZE must be base or big" in proc.stderr
