"""Hub interface: ``XLPosTransformerModel.from_pretrained`` -> translate raw text (single and batched) with XL
positions from the reorderer the checkpoint carries, and inspect them (conftest.py: `pipeline_model`)."""
import math
import re
import shutil

import numpy as np
import pytest

from xlpos_prep.reorderer import Reorderer, ReordererConfig
from xlpos import XLPosHubInterface, XLPosTransformerModel
from xlpos.tasks.xl_inference import MONOTONE, REORDERER

DECODE = {"beam": 2, "max_len_a": 1, "max_len_b": 2}


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    # Tiny matrices: with two intra-op threads on a busy 2-core machine decoding is ~8x slower, not faster.
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def load(model, **kwargs) -> XLPosHubInterface:
    return XLPosTransformerModel.from_pretrained(str(model.save_dir), checkpoint_file="checkpoint_best.pt",
                                                 data_name_or_path=str(model.corpus.data_bin), **kwargs)


@pytest.fixture(scope="module")
def hub(pipeline_model) -> XLPosHubInterface:
    return load(pipeline_model)


def scores(hub, lines, **decode) -> list[float]:
    return [hypos[0]["score"].item() for hypos in hub.generate([hub.encode(line) for line in lines], **decode)]


def test_translate_single_and_batched_equal_interactive(hub, hostile_interactive):
    """Same raw lines, same decoding options as fairseq-interactive: same detokenized outputs and scores."""
    decode = {"beam": 2, "max_len_a": 0, "max_len_b": 6}
    lines = hostile_interactive.lines
    expected = dict((int(i), text) for i, text in
                    re.findall(r"^D-(\d+)\t\S+\t(.*)$", hostile_interactive.stdout, flags=re.M))
    expected_scores = dict((int(i), float(s)) for i, s in
                           re.findall(r"^H-(\d+)\t(\S+)\t", hostile_interactive.stdout, flags=re.M))
    batched = hub.translate(lines, **decode)
    assert batched == [expected[i] for i in range(len(lines))]
    assert [hub.translate(line, **decode) for line in lines[:5]] == batched[:5]
    # interactive prints base-2 scores
    got = scores(hub, lines, **decode)
    assert max(abs(g / math.log(2) - expected_scores[i]) for i, g in enumerate(got)) < 1e-4


def test_xl_positions_are_the_offline_pipelines(hub, pipeline_model):
    corpus = pipeline_model.corpus
    lines = corpus.lines("test")
    infos = hub.xl_positions(lines)
    assert [i.words for i in infos] == [line.split() for line in lines]
    assert [i.order for i in infos] == corpus.orders("test")  # `xlpos-prep reorder` with the same reorderer
    assert [i.pieces for i in infos] == corpus.pieces("test")
    assert [i.xl_positions for i in infos] == corpus.xl_positions("test")  # `xlpos-prep positions`
    assert {i.method for i in infos} == {REORDERER}
    one = hub.xl_positions(lines[1])
    assert one.as_dict()["order"] == corpus.orders("test")[1]
    assert hub.reorder(lines[1]) == [lines[1].split()[i] for i in corpus.orders("test")[1]]
    tree = hub.tree(lines[1])
    assert tree.startswith("(") and [t for t in re.split(r"[\s()]+", tree) if t not in ("", "S", "I", "F")] == \
        lines[1].split()
    # the pieces laid out by XL position are the words' pieces in reordered order
    assert "".join(one.reordered_pieces).replace("▁", "") == "".join(one.reordered_words)


def test_positions_reach_the_model(hub, pipeline_model):
    corpus = pipeline_model.corpus
    reordered = [line for line, xl in zip(corpus.lines("test"), corpus.xl_positions("test")) if xl != sorted(xl)]
    assert len(reordered) >= 5
    monotone = load(pipeline_model, xl_positions="monotone")
    assert {i.method for i in monotone.xl_positions(reordered)} == {MONOTONE}
    assert all(i.xl_positions == list(range(len(i.pieces))) for i in monotone.xl_positions(reordered))
    differences = [abs(a - b) for a, b in zip(scores(hub, reordered, **DECODE), scores(monotone, reordered, **DECODE))]
    assert max(differences) > 1e-3, differences


def test_checkpoint_carries_reorderer_spm_and_tokenizer(pipeline_model):
    from fairseq import checkpoint_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(str(pipeline_model.checkpoint))
    entry = state["task_state"]["xlpos_inference"]
    assert entry["reorderer"].numpy().tobytes() == pipeline_model.corpus.reorderer.read_bytes()
    assert entry["sentencepiece"].numpy().tobytes() == pipeline_model.corpus.spm.read_bytes()
    assert entry["word_tokenizer"] == "none" and entry["lowercase"] is False
    assert entry["reorderer_path"].endswith("training-time-files/reorderer.model")  # deleted after training
    assert state["cfg"]["task"]["xl_reorderer"] == entry["reorderer_path"]  # the path, as given, in the config


def test_model_files_given_to_from_pretrained_resolve_against_the_model_dir(pipeline_model, tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    shutil.copy(pipeline_model.checkpoint, model_dir / "checkpoint_best.pt")
    for name in ("dict.src.txt", "dict.tgt.txt"):
        shutil.copy(pipeline_model.corpus.data_bin / name, model_dir / name)
    # a reorderer that scores every derivation 0: another order than the checkpoint's reorderer
    config = ReordererConfig(hash_bits=8)
    Reorderer(config, np.zeros((1 << config.hash_bits) * 3)).save(str(model_dir / "flat.reorderer"))
    line = pipeline_model.corpus.lines("test")[1]
    flat_order = Reorderer.load(str(model_dir / "flat.reorderer")).reorder(line.split())
    assert flat_order != pipeline_model.corpus.orders("test")[1]

    # data: the model dir, which holds no binarized files to infer the language pair from
    hub = XLPosTransformerModel.from_pretrained(str(model_dir), xl_reorderer="flat.reorderer", source_lang="src",
                                                target_lang="tgt")
    assert hub.task.xl_model_file("reorderer").origin == str(model_dir / "flat.reorderer")
    assert hub.xl_positions(line).order == flat_order
    assert hub.task.xl_model_file("sentencepiece").origin.startswith("the checkpoint")
    with pytest.raises(FileNotFoundError, match=r"'missing.reorderer' not found; looked for .*model/missing"):
        XLPosTransformerModel.from_pretrained(str(model_dir), xl_reorderer="missing.reorderer", source_lang="src",
                                              target_lang="tgt")


def test_raw_text_tokenizer_options_apply(pipeline_model):
    """A checkpoint trained on tokenized lowercased words, used on raw text: moses + lowercase at inference."""
    hub = load(pipeline_model, xl_word_tokenizer="moses", xl_tokenizer_lang="en", xl_lowercase=True)
    info = hub.xl_positions("A man saw the dog, yesterday.")
    assert info.words == ["a", "man", "saw", "the", "dog", ",", "yesterday", "."]
    assert hub.translate("A man saw the dog, yesterday.", **DECODE) == \
        load(pipeline_model).translate("a man saw the dog , yesterday .", **DECODE)


def test_fairseq_sentencepiece_bpe_gets_the_same_positions(hub, pipeline_model):
    """With fairseq's own --bpe sentencepiece the task sees only token ids: positions from the decoded pieces."""
    external = load(pipeline_model, bpe="sentencepiece", sentencepiece_model=str(pipeline_model.corpus.spm))
    lines = pipeline_model.corpus.lines("test")[:8]
    assert external.translate(lines, **DECODE) == hub.translate(lines, **DECODE)
    assert scores(external, lines, **DECODE) == pytest.approx(scores(hub, lines, **DECODE), abs=1e-5)
