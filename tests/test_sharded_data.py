"""Large-corpus data options with XL positions: a sharded data-bin (DATA = shard1:shard2, one shard per epoch), split
shards (train, train1, ...) with --upsample-primary, and --num-batch-buckets (fairseq 0.12's own bucketing fails on
numpy 2: xlpos/data/length_buckets.py). Each through fairseq-train's entry point and in the task's batches."""
import logging
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import tiny_model_args
from test_contrastive_positions import batch_positions, generate_args, hypotheses, run_fairseq_cli
from test_task import make_task
from xlpos.data.length_buckets import bucket_boundaries


def copy_split(data_bin: Path, source: str, dest: str) -> None:
    """Every file of split `source` (tokens and XL positions) copied as split `dest`."""
    for name in os.listdir(data_bin):
        if name.startswith(source + "."):
            shutil.copy(data_bin / name, data_bin / name.replace(source + ".", dest + ".", 1))


@pytest.fixture(scope="module")
def shards(tiny_corpus, tmp_path_factory):
    """shard1 = the tiny data-bin; shard2 = the same whose train split is the test split (20 sentences)."""
    root = tmp_path_factory.mktemp("shards")
    first = tiny_corpus.copy_data_bin(root / "shard1")
    second = tiny_corpus.copy_data_bin(root / "shard2")
    for name in os.listdir(second):
        if name.startswith("train."):
            os.remove(second / name)
    copy_split(second, "test", "train")
    return first, second


@pytest.fixture(scope="module")
def split_shards(tiny_corpus, tmp_path_factory):
    """The tiny data-bin with a second training shard train1 (= the test split)."""
    data_bin = tiny_corpus.copy_data_bin(tmp_path_factory.mktemp("split") / "bin")
    copy_split(data_bin, "test", "train1")
    return data_bin


def train(tiny_corpus, data: str, tmp_path, caplog, *extra) -> str:
    """fairseq-train (tiny model, --no-save) on DATA; returns its log."""
    args = tiny_model_args(tiny_corpus, tmp_path / "ckpt", 2, tmp_path / "tb")[1:]
    args[0] = data
    k = args.index("--max-update")
    args = args[:k] + args[k + 2:] + ["--no-save", *extra]
    with caplog.at_level(logging.INFO):
        run_fairseq_cli("train", args)
    assert "done training" in caplog.text
    return caplog.text


# ---- sharded data-bin -------------------------------------------------------------------------------------------
def test_sharded_data_bin_takes_each_epochs_positions_from_its_shard(tiny_corpus, shards):
    first, second = shards
    task = make_task(f"{first}{os.pathsep}{second}")
    expected = {1: tiny_corpus.xl_positions("train"), 2: tiny_corpus.xl_positions("test"),
                3: tiny_corpus.xl_positions("train")}
    for epoch, positions in expected.items():
        task.load_dataset("train", epoch=epoch, combine=True)
        assert batch_positions(task, "train") == dict(enumerate(positions)), epoch
    task.load_dataset("valid", epoch=2)  # other splits: the first shard only
    assert batch_positions(task, "valid") == dict(enumerate(tiny_corpus.xl_positions("valid")))


def test_fairseq_train_on_a_sharded_data_bin(tiny_corpus, shards, tmp_path, caplog):
    first, second = shards
    # 300 sentences in epoch 1, 20 in epoch 2: positions of the wrong shard would fail the length check
    log = train(tiny_corpus, f"{first}{os.pathsep}{second}", tmp_path, caplog, "--max-epoch", "2")
    assert f"loaded 20 examples from: {second}/train.src-tgt.src" in log
    assert re.search(r"epoch 002 .*bsz 10\b", log)


# ---- split shards and --upsample-primary --------------------------------------------------------------------------
@pytest.mark.parametrize("upsample, copies", [(None, 1), ("3", 3)])
def test_split_shards_with_upsample_primary(tiny_corpus, split_shards, upsample, copies):
    """fairseq's default --upsample-primary (-1) crashed fairseq 0.12 on split shards; it means 1 copy here."""
    task = make_task(split_shards, *(["--upsample-primary", upsample] if upsample else []))
    task.load_dataset("train", combine=True)
    expected = tiny_corpus.xl_positions("train") * copies + tiny_corpus.xl_positions("test")
    assert batch_positions(task, "train") == dict(enumerate(expected))


def test_fairseq_train_on_split_shards_with_default_upsample(tiny_corpus, split_shards, tmp_path, caplog):
    log = train(tiny_corpus, str(split_shards), tmp_path, caplog, "--max-update", "2")
    assert f"loaded 20 examples from: {split_shards}/train1.src-tgt.src" in log


def test_bad_upsample_primary_is_a_one_line_error(split_shards):
    with pytest.raises(ValueError, match=r"^--upsample-primary 0: must be a positive number of copies") as error:
        make_task(split_shards, "--upsample-primary", "0")
    assert "\n" not in str(error.value)


# ---- --num-batch-buckets ------------------------------------------------------------------------------------------
def test_bucket_boundaries_are_fairseqs():
    sizes = np.random.default_rng(0).integers(1, 50, size=500)
    # numpy 1's percentile(interpolation="lower") == numpy 2's percentile(method="lower"): fairseq's get_buckets
    expected = np.unique(np.sort(sizes)[np.floor(np.linspace(0, 100, 9)[1:] / 100 * (len(sizes) - 1)).astype(int)])
    assert bucket_boundaries(sizes, 8).tolist() == expected.tolist()


def test_bucketed_batches_keep_positions_on_real_tokens(tiny_corpus):
    task = make_task(tiny_corpus.data_bin, "--num-batch-buckets", "3")
    task.load_dataset("valid")
    pair = task.dataset("valid").dataset
    widths = {int(n) for _, n in pair.buckets}
    assert 1 < len(widths) <= 3
    pad = task.source_dictionary.pad()
    expected = tiny_corpus.xl_positions("valid")
    seen = []
    # fixed batch shapes need --max-tokens (fairseq derives each bucket's batch size from it)
    for batch in task.get_batch_iterator(dataset=task.dataset("valid"), max_tokens=60,
                                         max_positions=(1024, 1024)).next_epoch_itr(shuffle=False):
        src, xl = batch["net_input"]["src_tokens"], batch["net_input"]["src_xl_positions"]
        assert src.size(1) in widths  # padded to its bucket, not to its longest sentence
        for row, i in enumerate(batch["id"].tolist()):
            real = (xl[row][src[row].ne(pad)] - pad - 1).tolist()
            assert real == expected[i] + [len(expected[i])]
            assert xl[row][src[row].eq(pad)].eq(pad).all()
            seen.append(i)
    assert sorted(seen) == list(range(len(expected)))


def test_fairseq_train_and_generate_with_batch_buckets(trained_model, tiny_corpus, tmp_path, caplog):
    log = train(tiny_corpus, str(tiny_corpus.data_bin), tmp_path, caplog, "--max-update", "2",
                "--num-batch-buckets", "4")
    assert "bucketing source lengths" in log
    plain = hypotheses(run_fairseq_cli("generate", generate_args(trained_model)))
    bucketed_args = generate_args(trained_model, "--num-batch-buckets", "4")
    with pytest.raises(ValueError, match=r"^--num-batch-buckets needs --max-tokens"):
        run_fairseq_cli("generate", bucketed_args)
    bucketed = hypotheses(run_fairseq_cli("generate", bucketed_args + ["--max-tokens", "100"]))
    assert sorted(bucketed) == sorted(plain) == list(range(tiny_corpus.sizes["test"]))
    # the same positions reach the model: the same hypotheses; padding only changes float sums
    assert [bucketed[i][1] for i in plain] == [plain[i][1] for i in plain]
    assert max(abs(bucketed[i][0] - plain[i][0]) for i in plain) < 1e-4
