"""XL positions in batches (shifting, padding, fairseq's sorted collation) and their binarization."""
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch
from fairseq import utils
from fairseq.data import Dictionary, LanguagePairDataset
from fairseq.data.indexed_dataset import MMapIndexedDataset, MMapIndexedDatasetBuilder

from xlpos_prep.cli import main as xlpos_prep
from xlpos_prep.io import InputError
from xlpos.data import LanguagePairWithXLPositionsDataset, model_positions, xl_positions_prefix
from xlpos.data.binarize import binarize_xl_positions

WORDS = [f"w{i}" for i in range(30)]


@pytest.fixture(scope="module")
def dictionary() -> Dictionary:
    d = Dictionary()
    for w in WORDS:
        d.add_symbol(w)
    return d


def random_sentences(count: int, seed: int, lo: int = 1, hi: int = 9):
    rng = random.Random(seed)
    sentences, positions = [], []
    for _ in range(count):
        n = rng.randint(lo, hi)
        sentences.append([rng.randrange(len(WORDS)) for _ in range(n)])
        perm = list(range(n))
        rng.shuffle(perm)
        positions.append(perm)
    return sentences, positions


def pair_dataset(dictionary, sentences, **kwargs) -> LanguagePairDataset:
    offset, eos = dictionary.nspecial, dictionary.eos()
    src = [torch.LongTensor([offset + w for w in s] + [eos]) for s in sentences]
    sizes = [len(t) for t in src]
    return LanguagePairDataset(src, sizes, dictionary, src, sizes, dictionary, shuffle=False, **kwargs)


def expected_row(raw, pad):
    n = len(raw)
    return [x + pad + 1 for x in raw] + [n + pad + 1]


def test_model_positions_follow_fairseq_convention():
    pad = 1
    assert model_positions(torch.tensor([2, 0, 1]), pad).tolist() == [4, 2, 3, 5]
    assert model_positions(torch.tensor([], dtype=torch.long), pad).tolist() == [2]  # empty sentence: EOS only


@pytest.mark.parametrize("left_pad", [True, False])
def test_collated_positions_follow_sorted_order_and_padding(dictionary, left_pad):
    sentences, positions = random_sentences(6, seed=3)
    pad = dictionary.pad()
    dataset = LanguagePairWithXLPositionsDataset(
        pair_dataset(dictionary, sentences, left_pad_source=left_pad),
        [torch.tensor(p) for p in positions])
    batch = dataset.collater([dataset[i] for i in range(len(dataset))])
    ids = batch["id"].tolist()
    assert ids != list(range(len(ids))), "fixture must make fairseq reorder the batch"
    src_tokens = batch["net_input"]["src_tokens"]
    xl = batch["net_input"]["src_xl_positions"]
    assert xl.shape == src_tokens.shape and xl.dtype == torch.long
    assert torch.equal(xl.eq(pad), src_tokens.eq(pad))
    for row, example in enumerate(ids):
        real = xl[row][src_tokens[row].ne(pad)].tolist()
        assert real == expected_row(positions[example], pad)
        n_pad = int(src_tokens[row].eq(pad).sum())
        if n_pad:  # padding on the configured side
            assert (src_tokens[row][:n_pad] if left_pad else src_tokens[row][-n_pad:]).eq(pad).all()


@pytest.mark.parametrize("left_pad", [True, False])
def test_monotone_positions_equal_fairseq_absolute_positions(dictionary, left_pad):
    sentences, _ = random_sentences(7, seed=5)
    dataset = LanguagePairWithXLPositionsDataset(pair_dataset(dictionary, sentences, left_pad_source=left_pad), None)
    batch = dataset.collater([dataset[i] for i in range(len(dataset))])
    src_tokens = batch["net_input"]["src_tokens"]
    absolute = utils.make_positions(src_tokens, dictionary.pad())
    assert torch.equal(batch["net_input"]["src_xl_positions"], absolute)


def test_positions_survive_sequence_length_padding(dictionary):
    sentences, positions = random_sentences(5, seed=11)
    pad = dictionary.pad()
    dataset = LanguagePairWithXLPositionsDataset(pair_dataset(dictionary, sentences, pad_to_multiple=8),
                                                 [torch.tensor(p) for p in positions])
    batch = dataset.collater([dataset[i] for i in range(len(dataset))])
    src_tokens = batch["net_input"]["src_tokens"]
    assert src_tokens.size(1) % 8 == 0
    for row, example in enumerate(batch["id"].tolist()):
        xl_row = batch["net_input"]["src_xl_positions"][row]
        assert xl_row[src_tokens[row].ne(pad)].tolist() == expected_row(positions[example], pad)


def test_truncated_source_gets_reranked_positions(dictionary):
    pad = dictionary.pad()
    sentences = [[1, 2, 3, 4, 5]]
    truncated = pair_dataset(dictionary, [s[:3] for s in sentences])  # what --truncate-source leaves
    dataset = LanguagePairWithXLPositionsDataset(truncated, [torch.tensor([4, 0, 3, 1, 2])], truncate_source=True)
    # kept pieces have XL 4, 0, 3: their order among themselves is 2, 0, 1
    assert dataset[0]["xl_positions"].tolist() == [2, 0, 1]
    batch = dataset.collater([dataset[0]])
    assert batch["net_input"]["src_xl_positions"][0].tolist() == expected_row([2, 0, 1], pad)


def test_length_mismatch_is_an_error_not_a_misalignment(dictionary):
    sentences = [[1, 2, 3], [4, 5]]
    dataset = LanguagePairWithXLPositionsDataset(pair_dataset(dictionary, sentences, append_bos=True),
                                                 [torch.tensor([0, 1, 2]), torch.tensor([1, 0])], name="train.xl")
    with pytest.raises(ValueError, match=r"train.xl: sentence 1 has 3 XL positions but its source has 4 tokens"):
        dataset[0]


def test_last_partial_batch_is_kept(dictionary):
    sentences, positions = random_sentences(20, seed=2)
    dataset = LanguagePairWithXLPositionsDataset(pair_dataset(dictionary, sentences),
                                                 [torch.tensor(p) for p in positions])
    indices = dataset.ordered_indices()
    batches = dataset.batch_by_size(indices, max_sentences=8, required_batch_size_multiple=8)
    assert sorted(np.concatenate(batches).tolist()) == list(range(20))
    assert [len(b) for b in batches] == [8, 8, 4]


# ---- binarization ---------------------------------------------------------------------------------------------

def write_source_tokens(data_bin, split, lengths, src="en", tgt="ja"):
    """A data-bin holding only `{split}.{src}-{tgt}.{src}` with sentences of the given piece counts (+ EOS)."""
    os.makedirs(data_bin, exist_ok=True)
    prefix = os.path.join(data_bin, f"{split}.{src}-{tgt}.{src}")
    builder = MMapIndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for n in lengths:
        builder.add_item(torch.tensor([4 + i for i in range(n)] + [2]))
    builder.finalize(prefix + ".idx")


def leftovers(data_bin):
    return sorted(f for f in os.listdir(data_bin) if "xlpos" in f)


def test_binarize_round_trip_with_crlf_and_empty_sentence(tmp_path):
    data_bin = tmp_path / "bin"
    write_source_tokens(data_bin, "train", [3, 0, 2])
    xlpos = tmp_path / "train.xlpos"
    xlpos.write_bytes(b"2 0 1\r\n\r\n1 0\r\n")
    summary = binarize_xl_positions(str(xlpos), str(data_bin), "train", "en", "ja", progress=False)
    assert summary.sentences == 3 and summary.positions == 5
    prefix = xl_positions_prefix(str(data_bin), "train", "en", "ja")
    assert summary.prefix == prefix and prefix.endswith("train.en-ja.xlpos")
    stored = MMapIndexedDataset(prefix)
    assert [stored[i].tolist() for i in range(len(stored))] == [[2, 0, 1], [], [1, 0]]
    assert leftovers(data_bin) == ["train.en-ja.xlpos.bin", "train.en-ja.xlpos.idx"]


@pytest.mark.parametrize("lines, line_no, message", [
    ("0 1 2\n1 x\n", 2, "'x' is not an integer"),
    ("0 1 2\n1.0 0\n", 2, "'1.0' is not an integer"),
    ("0 1\n1 0\n", 1, "2 positions but the binarized source sentence has 3 tokens"),
    ("0 1 2\n2 0\n", 2, r"position 2 is out of range \[0, 2\)"),
    ("0 -1 2\n1 0\n", 1, r"position -1 is out of range \[0, 3\)"),
    ("0 2 2\n1 0\n", 1, "position 2 appears 2 times"),
    ("0 1 2\n", 2, "file ends after 1 lines but .* has 2 sentences"),
    ("0 1 2\n1 0\n0\n", 3, "extra line: .* has only 2 sentences"),
])
def test_binarize_rejects_bad_lines_without_output(tmp_path, lines, line_no, message):
    data_bin = tmp_path / "bin"
    write_source_tokens(data_bin, "valid", [3, 2])
    xlpos = tmp_path / "valid.xlpos"
    xlpos.write_text(lines)
    with pytest.raises(InputError, match=rf"^{xlpos}:{line_no}: {message}") as error:
        binarize_xl_positions(str(xlpos), str(data_bin), "valid", "en", "ja", progress=False)
    assert "\n" not in str(error.value)
    assert leftovers(data_bin) == []


def test_failed_binarize_keeps_previous_output(tmp_path):
    data_bin = tmp_path / "bin"
    write_source_tokens(data_bin, "train", [2])
    good, bad = tmp_path / "good.xlpos", tmp_path / "bad.xlpos"
    good.write_text("1 0\n")
    bad.write_text("1 1\n")
    binarize_xl_positions(str(good), str(data_bin), "train", "en", "ja", progress=False)
    with pytest.raises(InputError):
        binarize_xl_positions(str(bad), str(data_bin), "train", "en", "ja", progress=False)
    assert MMapIndexedDataset(xl_positions_prefix(str(data_bin), "train", "en", "ja"))[0].tolist() == [1, 0]
    assert leftovers(data_bin) == ["train.en-ja.xlpos.bin", "train.en-ja.xlpos.idx"]


def test_binarize_reads_source_from_reverse_pair_directory(tmp_path):
    data_bin = tmp_path / "bin"
    write_source_tokens(data_bin, "train", [2], src="en", tgt="ja")  # train.en-ja.en
    xlpos = tmp_path / "train.xlpos"
    xlpos.write_text("0 1\n")
    # ja->en direction has no source tokens of its own here: an error that says what to run
    with pytest.raises(FileNotFoundError,
                       match="train.ja-en.ja.bin/.idx not found: binarize the tokens of split 'train' first"):
        binarize_xl_positions(str(xlpos), str(data_bin), "train", "ja", "en", progress=False)
    # en as source with a data-bin written as ja-en is found
    write_source_tokens(tmp_path / "bin2", "train", [2], src="en", tgt="ja")
    os.rename(tmp_path / "bin2" / "train.en-ja.en.bin", tmp_path / "bin2" / "train.ja-en.en.bin")
    os.rename(tmp_path / "bin2" / "train.en-ja.en.idx", tmp_path / "bin2" / "train.ja-en.en.idx")
    summary = binarize_xl_positions(str(xlpos), str(tmp_path / "bin2"), "train", "en", "ja", progress=False)
    assert summary.prefix.endswith("train.en-ja.xlpos")


def test_cli_reports_one_line_error(tmp_path, capsys):
    data_bin = tmp_path / "bin"
    write_source_tokens(data_bin, "test", [2, 2])
    xlpos = tmp_path / "test.xlpos"
    xlpos.write_text("0 1\n0 0\n")
    code = xlpos_prep(["binarize", "--xlpos", str(xlpos), "--data-bin", str(data_bin), "--split", "test",
                       "-s", "en", "-t", "ja", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1].startswith(f"xlpos-prep binarize: error: {xlpos}:2: position 0 appears 2 times")
    assert leftovers(data_bin) == []


def test_cli_binarizes_several_splits_in_one_run_and_pairs_them_in_order(tmp_path, capsys):
    data_bin = tmp_path / "bin"
    write_source_tokens(data_bin, "train", [2, 1])
    write_source_tokens(data_bin, "valid", [3])
    (tmp_path / "train.xlpos").write_text("1 0\n0\n")
    (tmp_path / "valid.xlpos").write_text("2 0 1\n")
    args = ["binarize", "--xlpos", str(tmp_path / "train.xlpos"), str(tmp_path / "valid.xlpos"),
            "--data-bin", str(data_bin), "-s", "en", "-t", "ja", "--no-progress"]
    # a file short of its split, a split named twice: one line naming the option, nothing written
    for splits, message in ((["train"], "--split names 1 split(s) but --xlpos gives 2 file(s)"),
                            (["train", "train"], "--split names 'train' twice")):
        assert xlpos_prep([*args, "--split", *splits]) == 1
        assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"xlpos-prep binarize: error: {message}")
        assert leftovers(data_bin) == []
    assert xlpos_prep([*args, "--split", "train", "valid"]) == 0
    read = {split: MMapIndexedDataset(str(data_bin / f"{split}.en-ja.xlpos")) for split in ("train", "valid")}
    assert [read["train"][i].tolist() for i in range(2)] == [[1, 0], [0]]
    assert read["valid"][0].tolist() == [2, 0, 1]


def test_mmap_writer_writes_fairseqs_bytes_and_reads_its_sizes(tmp_path):
    from xlpos_prep.mmap_dataset import MMapDatasetWriter, read_sizes, smallest_index_dtype

    items = [[3, 0, 2, 1], [], [0], list(range(70000))[::-1]]
    for dtype in (np.uint16, np.uint32, np.int64):
        kept = [i for i in items if not i or max(i) < np.iinfo(dtype).max]
        theirs = MMapIndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=dtype)
        for item in kept:
            theirs.add_item(torch.tensor(item, dtype=torch.int64))
        theirs.finalize(str(tmp_path / "theirs.idx"))
        with open(tmp_path / "ours.bin", "wb") as data, open(tmp_path / "ours.idx", "wb") as index:
            ours = MMapDatasetWriter(data, dtype)
            for item in kept:
                ours.add(np.array(item, dtype=np.int64))
            ours.finish(index)
        for ext in (".bin", ".idx"):
            assert (tmp_path / f"ours{ext}").read_bytes() == (tmp_path / f"theirs{ext}").read_bytes(), (dtype, ext)
        assert read_sizes(str(tmp_path / "theirs")).tolist() == [len(i) for i in kept]
    assert [smallest_index_dtype(v) for v in (0, 65499, 65500, 2**32)] == [np.uint16, np.uint16, np.uint32, np.int64]
    (tmp_path / "bad.idx").write_bytes(b"TNTIDX\x00\x00" + bytes(20))
    with pytest.raises(ValueError, match="bad.idx: not a fairseq mmap index"):
        read_sizes(str(tmp_path / "bad"))


def test_binarize_of_a_default_data_bin_does_not_import_fairseq(tmp_path):
    """fairseq's import costs seconds in every process that pays it: binarizing fairseq-preprocess's default
    format needs none of it."""
    data_bin = tmp_path / "bin"
    write_source_tokens(data_bin, "train", [2])
    (tmp_path / "train.xlpos").write_text("1 0\n")
    script = ("import sys; from xlpos_prep.cli import main; "
              f"code = main(['binarize', '--xlpos', {str(tmp_path / 'train.xlpos')!r}, '--data-bin', "
              f"{str(data_bin)!r}, '--split', 'train', '-s', 'en', '-t', 'ja']); "
              "sys.exit(code or 3 * any(m == 'fairseq' or m.startswith('fairseq.') for m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert MMapIndexedDataset(str(data_bin / "train.en-ja.xlpos"))[0].tolist() == [1, 0]
