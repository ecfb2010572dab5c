"""Alignment quality of the model's attention: AER with sure/possible gold links (xlpos/evaluation/aer.py), pieces
to words and link extraction (attention_alignment.py), and the force-decoding command (align_attention.py) on a
tiny model trained through the real fairseq-train CLI."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, run_cli, target_order
from xlpos.evaluation import aer
from xlpos.evaluation.attention_alignment import extract_links, sentence_links, word_attention, word_ids


def test_gold_formats_sure_possible_one_based_and_reversed() -> None:
    g = aer.parse_gold_line("0-0 1S1 2P2 3?2")
    assert g.sure == {(0, 0), (1, 1)} and g.possible == {(0, 0), (1, 1), (2, 2), (3, 2)}
    assert aer.parse_gold_line("1-1 2-3", one_based=True).sure == {(0, 0), (1, 2)}
    assert aer.parse_gold_line("0-2", reverse=True).sure == {(2, 0)}
    dashes_possible = aer.parse_gold_line("0-0 1S1", dash="possible")
    assert dashes_possible.sure == {(1, 1)} and dashes_possible.possible == {(0, 0), (1, 1)}
    with pytest.raises(ValueError, match=r"^g.txt:3: bad link '1x2'"):
        aer.parse_gold_line("0-0 1x2", where="g.txt:3")
    with pytest.raises(ValueError, match="index 0 in a 1-based file"):
        aer.parse_gold_line("0-1", one_based=True, where="g.txt:1")


def test_aer_equals_the_hand_computed_value() -> None:
    # sentence 1: S = {0-0, 1-1}, P = S + {2-2, 3-2}; A = {0-0, 2-2, 3-3}
    # sentence 2: S = {0-1}, P = S;                   A = {0-1, 1-0}
    gold = [aer.parse_gold_line("0-0 1S1 2P2 3?2"), aer.parse_gold_line("0-1")]
    pred = [aer.parse_links("0-0 2-2 3-3"), aer.parse_links("0-1 1-0")]
    s = aer.score_alignments(pred, gold)
    # |A| = 5, |S| = 3, |A & S| = 2 (0-0, 0-1), |A & P| = 3 (0-0, 2-2, 0-1)
    assert (s.predicted_links, s.sure_links, s.possible_links, s.hits_sure, s.hits_possible) == (5, 3, 5, 2, 3)
    assert s.precision == pytest.approx(3 / 5) and s.recall == pytest.approx(2 / 3)
    assert s.aer == pytest.approx(1 - (2 + 3) / (5 + 3))
    perfect = aer.score_alignments([g.sure for g in gold], gold)
    assert perfect.aer == 0 and perfect.precision == 1 and perfect.recall == 1
    # possible-only links neither help recall nor hurt precision
    assert aer.score_alignments([g.possible for g in gold], gold).aer == 0
    with pytest.raises(ValueError, match="1 predicted sentences for 2 gold"):
        aer.score_alignments(pred[:1], gold)


def test_aer_command_line(tmp_path: Path) -> None:
    (tmp_path / "gold").write_text("1-1 2S2 3P3\n1-2\n")
    (tmp_path / "pred").write_text("0-0 1-1\n0-0\n")
    # the module's main() is fairseq-free; run in-process
    aer.main(["--gold", str(tmp_path / "gold"), "--pred", str(tmp_path / "pred"), "--one-based"])
    (tmp_path / "short").write_text("0-0\n")
    with pytest.raises(SystemExit, match=r"short: 1 lines but .*gold has 2"):
        aer.main(["--gold", str(tmp_path / "gold"), "--pred", str(tmp_path / "short"), "--one-based"])
    (tmp_path / "bad").write_text("0-0\n0:1\n")
    with pytest.raises(SystemExit, match=r"bad:2: bad link '0:1'"):
        aer.main(["--gold", str(tmp_path / "gold"), "--pred", str(tmp_path / "bad"), "--one-based"])


def test_pieces_are_grouped_into_words_by_the_marker() -> None:
    assert word_ids(["▁the", "▁dog", "s", "▁", "ran"]) == [0, 1, 1, 2, 2]
    assert word_ids(["s", "▁a"]) == [0, 1]  # the first piece opens a word even without the marker
    assert word_ids(["W1", "W2"], marker=None) == [0, 1]


def test_word_attention_sums_source_pieces_and_averages_target_pieces() -> None:
    # target pieces: t0 (word 0), t1 t2 (word 1); source pieces: s0 s1 (word 0), s2 (word 1)
    attn = np.array([[0.5, 0.3, 0.2],
                     [0.1, 0.1, 0.8],
                     [0.3, 0.3, 0.4]])
    w = word_attention(attn, [0, 1, 1], [0, 0, 1])
    assert w == pytest.approx(np.array([[0.8, 0.2], [0.4, 0.6]]))
    with pytest.raises(ValueError, match="for 2 target and 3 source pieces"):
        word_attention(attn, [0, 1], [0, 0, 1])


def test_link_extraction_methods() -> None:
    # rows: target words; columns: source words
    w = np.array([[0.7, 0.2, 0.1],
                  [0.6, 0.3, 0.1],
                  [0.1, 0.35, 0.55]])
    assert extract_links(w, "argmax") == {(0, 0), (0, 1), (2, 2)}
    # source 0 gives most weight to target 0, so 0-1 (target 1) is not mutual
    assert extract_links(w, "mutual") == {(0, 0), (2, 2)}
    assert extract_links(w, "threshold", threshold=0.3) == {(0, 0), (0, 1), (1, 1), (1, 2), (2, 2)}
    assert extract_links(np.zeros((0, 0)), "argmax") == frozenset()
    with pytest.raises(ValueError, match="unknown method 'best'"):
        extract_links(w, "best")
    links = sentence_links(np.array([[0.9, 0.1], [0.2, 0.8]]), ["▁A", "▁B"], ["▁a", "▁b"], methods=("argmax",))
    assert links == {"argmax": {(0, 0), (1, 1)}}


def _gold_file(corpus, path: Path) -> Path:
    """The tiny corpus's true alignment: target word j is source word target_order(n)[j]."""
    lines = [" ".join(f"{i}-{j}" for j, i in enumerate(target_order(len(words))))
             for words in corpus.sentences("test")]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_attention_is_fairseqs_alignment_attention(trained_model) -> None:
    """The captured per-head weights, averaged, are what fairseq returns as extra['attn'] for that layer."""
    import torch

    from xlpos.evaluation.align_attention import _load, force_decode_attention
    corpus = trained_model.corpus
    layer, it = force_decode_attention(str(trained_model.checkpoint), str(corpus.data_bin), "test", cpu=True)
    assert layer == 0  # one decoder layer: -1 resolves to 0
    got = {sid: (a, t, s) for sid, a, t, s in it}
    assert sorted(got) == list(range(corpus.sizes["test"]))
    sid, (a, tgt, src) = 3, got[3]
    words = corpus.sentences("test")[sid]
    assert src == words and tgt == [words[i].upper() for i in target_order(len(words))]  # EOS excluded
    assert a.shape == (len(words), len(words))
    model, task = _load(str(trained_model.checkpoint), str(corpus.data_bin), {}, True)
    task.load_dataset("test")
    sample = task.dataset("test").collater([task.dataset("test")[sid]])
    with torch.no_grad():
        _, extra = model(**sample["net_input"], alignment_layer=0)
    ref = extra["attn"][0][0, :-1, :-1].numpy()  # one sentence: no padding; drop the EOS row and column
    assert a == pytest.approx(ref, abs=1e-6)
    heads = [{s: x for s, x, _, _ in force_decode_attention(str(trained_model.checkpoint), str(corpus.data_bin),
                                                              "test", head=h, cpu=True)[1]}[sid] for h in (0, 1)]
    assert (heads[0] + heads[1]) / 2 == pytest.approx(a, abs=1e-6)
    assert not np.allclose(heads[0], heads[1])


def test_align_attention_command(trained_model, tmp_path: Path) -> None:
    corpus = trained_model.corpus
    gold = _gold_file(corpus, tmp_path / "test.gold")
    out = tmp_path / "out" / "tiny"
    cmd = [sys.executable, "-m", "xlpos.evaluation.align_attention", str(corpus.data_bin),
           "--path", str(trained_model.checkpoint), "--gen-subset", "test", "--word-marker", "none",
           "--gold", str(gold), "--out-prefix", str(out), "--json", str(tmp_path / "aer.json"), "--cpu"]
    proc = run_cli(cmd, cwd=REPO)
    assert f"force-decoded {corpus.sizes['test']} test sentences" in proc.stdout
    assert "decoder layer 0 (mean of the heads)" in proc.stdout
    record = json.loads((tmp_path / "aer.json").read_text())
    gold_links = aer.read_gold(str(gold))
    lengths = [len(s) for s in corpus.sentences("test")]
    for method in ("argmax", "mutual", "threshold"):
        lines = Path(f"{out}.{method}.align").read_text().splitlines()
        pred = [aer.parse_links(line) for line in lines]
        assert len(pred) == len(lengths)
        assert all(i < n and j < n for links, n in zip(pred, lengths) for i, j in links)
        # the JSON's scores are those of the written links against the gold file
        assert record["scores"][method] == aer.score_alignments(pred, gold_links).__dict__
    argmax = [aer.parse_links(line) for line in Path(f"{out}.argmax.align").read_text().splitlines()]
    assert [sorted(j for _, j in links) for links in argmax] == [list(range(n)) for n in lengths]
    # a gold file that does not fit the sentences stops with one line naming it (in-process: main's exit message)
    from xlpos.evaluation.align_attention import main
    bad = tmp_path / "bad.gold"
    bad.write_text("0-99\n" * corpus.sizes["test"])
    with pytest.raises(SystemExit, match=f"^{bad}:1: link 0-99 outside the sentence's"):
        main(cmd[3:10] + ["--gold", str(bad), "--cpu"])
    with pytest.raises(SystemExit, match="--layer 5: the decoder has 1 layers"):
        main(cmd[3:10] + ["--layer", "5", "--cpu"])
