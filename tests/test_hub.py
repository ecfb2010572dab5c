"""Hub interface: ``XLPosTransformerModel.from_pretrained`` -> translate raw text (single and batched) with XL
positions from the reorderer the checkpoint carries, and inspect them (conftest.py: `pipeline_model`)."""
import logging
import math
import re
import shutil
import warnings
import xml.etree.ElementTree as ET

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


# ------------------------------------------------------------------------------------------------ a quiet hub
def test_hub_prints_nothing_unless_asked(hub, pipeline_model, caplog):
    """translate(), xl_positions() and tree() log nothing and warn nothing at the default log level (fairseq logs
    four INFO lines for every batch iterator and torch warns about pin_memory on CPU); verbose=True, or a level the
    user sets on the fairseq logger, brings fairseq's lines back."""
    line = pipeline_model.corpus.lines("test")[1]

    def calls(**kwargs) -> tuple[list[str], list[str]]:
        """(logged lines, warnings) of a round of hub calls, under Python's default warning filters."""
        caplog.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.simplefilter("ignore", DeprecationWarning)  # hidden by default outside __main__
            hub.translate(line, beam=2, **kwargs)
            hub.translate([line, line + " ."], beam=2, **kwargs)
            hub.xl_positions(line)
            hub.tree(line)
        return [f"{r.name}: {r.getMessage()}" for r in caplog.records], [str(w.message) for w in caught]

    caplog.set_level(logging.DEBUG)  # what importing fairseq leaves the root logger at
    assert calls() == ([], [])
    logged, _ = calls(verbose=True)
    assert "fairseq.tasks.fairseq_task: creating new batches for epoch 1" in logged
    assert any(text.startswith("fairseq.hub_utils: H\t") for text in logged)  # fairseq's own verbose output
    fairseq_logger = logging.getLogger("fairseq")
    fairseq_logger.setLevel(logging.INFO)
    try:
        logged, _ = calls()
    finally:
        fairseq_logger.setLevel(logging.NOTSET)
    assert "fairseq.tasks.fairseq_task: creating new batches for epoch 1" in logged
    assert calls() == ([], [])


# ------------------------------------------------------------------------------------------------ pictures
def svg_texts(svg: str, cls: str) -> list[str]:
    """Texts of the SVG's elements of class `cls`, by their data-index."""
    found = [e for e in ET.fromstring(svg).iter() if cls in e.get("class", "").split()]
    return [e.text for e in sorted(found, key=lambda e: int(e.get("data-index")))]


def test_draw_tree(hub, pipeline_model, tmp_path):
    from xlpos_prep.show import xl_of_order

    line = pipeline_model.corpus.lines("test")[1]
    svg = hub.draw_tree(line, str(tmp_path / "tree.svg"))
    assert (tmp_path / "tree.svg").read_text(encoding="utf-8") == svg
    assert svg_texts(svg, "word") == line.split()
    assert [int(x) for x in svg_texts(svg, "xl")] == xl_of_order(pipeline_model.corpus.orders("test")[1])


def test_attention_map(hub, pipeline_model, tmp_path):
    """The heatmap's weights are the attention of the best translation: teacher-forced on it, they equal what
    beam search computed (fairseq keeps the last layer's mean over heads with each hypothesis)."""
    from xlpos.evaluation.attention_alignment import word_attention, word_ids
    from xlpos_prep.show import xl_of_order

    line = pipeline_model.corpus.lines("test")[1]
    amap = hub.attention_map(line, **DECODE)
    assert amap.translation == hub.translate(line, **DECODE)
    assert amap.layer == 0 and amap.head is None  # the model's one decoder layer
    assert amap.source_words == line.split()
    assert amap.xl_positions == xl_of_order(pipeline_model.corpus.orders("test")[1])
    assert amap.weights.shape == (len(amap.target_words), len(amap.source_words))
    assert "".join(amap.target_words) == amap.translation.replace(" ", "")
    assert (amap.weights >= 0).all() and (amap.weights.sum(axis=1) <= 1 + 1e-5).all()

    best = hub.generate(hub.encode(line), **DECODE)[0]
    src_pieces = [hub.task.source_dictionary[int(t)] for t in hub.encode(line)[:-1]]
    tgt_pieces = [hub.task.target_dictionary[int(t)] for t in best["tokens"][:-1]]
    searched = best["attention"].float().numpy().T[:-1, :-1]  # target x source pieces, EOS left out
    expected = word_attention(searched, word_ids(tgt_pieces), word_ids(src_pieces))
    assert amap.weights == pytest.approx(expected, abs=1e-4)

    heads = [hub.attention_map(line, layer=-1, head=h, **DECODE).weights for h in (0, 1)]
    assert (heads[0] + heads[1]) / 2 == pytest.approx(amap.weights, abs=1e-5)
    assert not np.allclose(heads[0], heads[1])
    with pytest.raises(ValueError, match="--head 2: the decoder layer has 2 heads"):
        hub.attention_map(line, head=2, **DECODE)

    amap.save(str(tmp_path / "attention.svg"))
    svg = (tmp_path / "attention.svg").read_text(encoding="utf-8")
    assert svg_texts(svg, "row") == amap.target_words and svg_texts(svg, "column") == amap.source_words
    assert [int(x) for x in svg_texts(svg, "column-note")] == amap.xl_positions


def test_attention_map_command(pipeline_model, tmp_path, capsys):
    from xlpos.evaluation.attention_map import main

    line = pipeline_model.corpus.lines("test")[1]
    base = [str(pipeline_model.save_dir), "--data", str(pipeline_model.corpus.data_bin), "--sentence", line]
    out = tmp_path / "attention.svg"
    assert main(base + ["--out", str(out), "--head", "1", "--beam", "2"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    svg = out.read_text(encoding="utf-8")
    assert "decoder layer 0 (head 1)" in svg and svg_texts(svg, "column") == line.split()
    with pytest.raises(SystemExit, match="--layer 3: the decoder has 1 layers"):
        main(base + ["--out", str(tmp_path / "x.svg"), "--layer", "3"])
    with pytest.raises(SystemExit) as bad_head:
        main(base + ["--out", str(tmp_path / "x.svg"), "--head", "first"])
    assert bad_head.value.code == 2 and "--head: 'first': 'mean' or a head index" in capsys.readouterr().err
    assert not (tmp_path / "x.svg").exists()
