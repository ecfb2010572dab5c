"""Task translation_xlpos: XL positions from files, monotone mode, errors, inference paths."""
import os
import shutil

import pytest
import torch
from fairseq import options, tasks, utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

import xlpos  # noqa: F401  (registers the task)
from xlpos.tasks import TranslationXLPosTask


def make_task(data_bin, *extra: str) -> TranslationXLPosTask:
    """The task exactly as fairseq-generate would configure it from these command-line arguments."""
    parser = options.get_generation_parser(default_task="translation_xlpos")
    args = options.parse_args_and_arch(parser, [str(data_bin), "--task", "translation_xlpos", "-s", "src",
                                                "-t", "tgt", *extra])
    return tasks.setup_task(convert_namespace_to_omegaconf(args).task)


def first_batches(task, split, max_sentences=16):
    itr = task.get_batch_iterator(dataset=task.dataset(split), max_sentences=max_sentences,
                                  max_positions=(1024, 1024), num_workers=0).next_epoch_itr(shuffle=False)
    return list(itr)


def assert_batch_positions(batch, expected_raw, pad):
    src_tokens = batch["net_input"]["src_tokens"]
    xl = batch["net_input"]["src_xl_positions"]
    assert xl.shape == src_tokens.shape
    for row, example in enumerate(batch["id"].tolist()):
        raw = expected_raw[example]
        assert xl[row][src_tokens[row].ne(pad)].tolist() == [x + pad + 1 for x in raw] + [len(raw) + pad + 1]
        assert xl[row][src_tokens[row].eq(pad)].eq(pad).all()


def test_file_positions_reach_every_batch(tiny_corpus):
    task = make_task(tiny_corpus.data_bin)
    task.load_dataset("valid")
    expected = tiny_corpus.xl_positions("valid")
    seen = []
    for batch in first_batches(task, "valid", max_sentences=7):
        assert_batch_positions(batch, expected, task.source_dictionary.pad())
        seen += batch["id"].tolist()
    assert sorted(seen) == list(range(tiny_corpus.sizes["valid"]))


def test_monotone_mode_needs_no_files(tiny_corpus, tmp_path):
    data_bin = tiny_corpus.copy_data_bin(tmp_path / "bin", with_xl_positions=False)
    task = make_task(data_bin, "--xl-positions", "monotone")
    task.load_dataset("test")
    for batch in first_batches(task, "test"):
        src_tokens = batch["net_input"]["src_tokens"]
        assert torch.equal(batch["net_input"]["src_xl_positions"],
                           utils.make_positions(src_tokens, task.source_dictionary.pad()))


def test_missing_files_error_says_how_to_make_them(tiny_corpus, tmp_path):
    data_bin = tiny_corpus.copy_data_bin(tmp_path / "bin", with_xl_positions=False)
    task = make_task(data_bin)
    with pytest.raises(FileNotFoundError) as error:
        task.load_dataset("test")
    message = str(error.value)
    assert os.path.join(str(data_bin), "test.src-tgt.xlpos.bin") in message
    assert "xlpos-prep binarize --xlpos test.xlpos" in message and "--xl-positions monotone" in message


def test_stale_positions_are_rejected_with_file_and_line(tiny_corpus, tmp_path):
    data_bin = tiny_corpus.copy_data_bin(tmp_path / "bin")
    for ext in (".bin", ".idx"):  # valid's positions standing in for test's: same kind of file, wrong lengths
        shutil.copy(data_bin / f"valid.src-tgt.xlpos{ext}", data_bin / f"test.src-tgt.xlpos{ext}")
    task = make_task(data_bin)
    with pytest.raises(ValueError, match=r"test.src-tgt.xlpos.bin: 40 sentences but .*test.src-tgt.src.bin has 20"):
        task.load_dataset("test")


def test_combined_shards_keep_positions_aligned(tiny_corpus, tmp_path):
    data_bin = tiny_corpus.copy_data_bin(tmp_path / "bin")
    for name in os.listdir(data_bin):  # a second shard "valid1" = copy of test, as fairseq names extra shards
        if name.startswith("test."):
            shutil.copy(data_bin / name, data_bin / name.replace("test.", "valid1.", 1))
    task = make_task(data_bin, "--upsample-primary", "2")  # the primary shard twice (default: once)
    task.load_dataset("valid", combine=True)
    valid = tiny_corpus.xl_positions("valid")
    expected = valid + valid + tiny_corpus.xl_positions("test")
    assert len(task.dataset("valid")) == len(expected)
    for batch in first_batches(task, "valid"):
        assert_batch_positions(batch, expected, task.source_dictionary.pad())


def test_truncated_sources_get_consistent_positions(tiny_corpus):
    task = make_task(tiny_corpus.data_bin, "--truncate-source", "--max-source-positions", "4")
    task.load_dataset("valid")
    pad = task.source_dictionary.pad()
    full = tiny_corpus.xl_positions("valid")
    # kept: the first 3 pieces, whose XL positions are re-ranked among themselves
    expected = [torch.argsort(torch.argsort(torch.tensor(p[:3]))).tolist() for p in full]
    for batch in first_batches(task, "valid"):
        assert batch["net_input"]["src_tokens"].size(1) <= 4
        assert_batch_positions(batch, expected, pad)


def encode(task, sentences):
    return [task.source_dictionary.encode_line(s, add_if_not_exist=False).long() for s in sentences]


def test_inference_dataset_has_positions_from_the_extension_point(tiny_corpus):
    class Reversed(TranslationXLPosTask):
        def xl_positions_for_inference(self, src_tokens):
            return [torch.arange(int(t.ne(self.source_dictionary.pad()).sum()) - 2, -1, -1) for t in src_tokens]

    base = make_task(tiny_corpus.data_bin, "--xl-positions", "monotone")
    task = Reversed(base.cfg, base.src_dict, base.tgt_dict)
    tokens = encode(task, ["w1 w2 w3", "w4 w5", "w6 w7 w8 w9"])
    dataset = task.build_dataset_for_inference(tokens, [t.numel() for t in tokens])
    batch = dataset.collater([dataset[i] for i in range(len(tokens))])
    expected = [list(range(len(t) - 2, -1, -1)) for t in tokens]
    assert_batch_positions(batch, expected, task.source_dictionary.pad())


class RecordingGenerator:
    def __init__(self):
        self.samples = []

    def generate(self, models, sample, **kwargs):
        self.samples.append(sample)
        return []


def test_inference_step_restores_positions_dropped_by_interactive(tiny_corpus):
    task = make_task(tiny_corpus.data_bin, "--xl-positions", "monotone")
    tokens = encode(task, ["w1 w2 w3", "w4 w5", "w6 w7 w8 w9"])
    dataset = task.build_dataset_for_inference(tokens, [t.numel() for t in tokens])
    batch = dataset.collater([dataset[i] for i in range(len(tokens))])
    # what fairseq-interactive passes: only src_tokens and src_lengths survive
    sample = {"net_input": {k: batch["net_input"][k] for k in ("src_tokens", "src_lengths")}}
    generator = RecordingGenerator()
    task.inference_step(generator, [], sample)
    (seen,) = generator.samples
    assert torch.equal(seen["net_input"]["src_xl_positions"], batch["net_input"]["src_xl_positions"])
    assert "src_xl_positions" not in sample["net_input"]  # the caller's dict is not modified


def test_inference_step_keeps_positions_it_is_given(tiny_corpus):
    task = make_task(tiny_corpus.data_bin)
    task.load_dataset("test")
    batch = first_batches(task, "test")[0]
    generator = RecordingGenerator()
    task.inference_step(generator, [], batch)
    assert generator.samples[0]["net_input"]["src_xl_positions"] is batch["net_input"]["src_xl_positions"]


class OnDevice(torch.Tensor):
    """A CPU tensor standing for one on a GPU: tensors computed from it stay 'on the device', and every method
    that would copy it to the host (cpu, to, tolist, item, numpy) is recorded and returns a plain CPU tensor."""

    copies_to_host: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("cpu", "to", "tolist", "item", "numpy", "__array__") and isinstance(args[0], cls):
            cls.copies_to_host.append(name)
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **(kwargs or {}))
                # (.cpu() of a CPU tensor is the tensor itself: make the "host copy" a plain tensor)
                return out.as_subclass(torch.Tensor) if isinstance(out, torch.Tensor) else out
        return super().__torch_function__(func, types, args, kwargs)


@pytest.mark.parametrize("mode", ["file", "monotone"])
def test_interactive_batch_positions_cross_to_the_host_once(tiny_corpus, mode):
    task = make_task(tiny_corpus.data_bin, "--xl-positions", mode)
    tokens = encode(task, ["w1 w2 w3", "w4 w5", "w6 w7 w8 w9", "w1", "w2 w3 w4 w5 w6"])
    dataset = task.build_dataset_for_inference(tokens, [t.numel() for t in tokens])
    batch = dataset.collater([dataset[i] for i in range(len(tokens))])
    OnDevice.copies_to_host.clear()
    xl = task.xl_positions_for_batch(batch["net_input"]["src_tokens"].as_subclass(OnDevice))
    assert OnDevice.copies_to_host == ["cpu"]  # one transfer per batch, not one per sentence
    assert torch.equal(xl, batch["net_input"]["src_xl_positions"])
