import random

import pytest

from xlpos_prep.align import HEURISTICS, run_eflomal, symmetrize
from xlpos_prep.cli import main

# ---- symmetrize: answers derived by hand from Koehn's pseudo-code ------------------------------------------------

# 4x4 pair: the intersection is {0-0, 1-1}; grow-diag reaches 2-0 (diagonal neighbour of 1-1, source 2 unaligned);
# 3-3 (forward only) and 3-2 (reverse only) touch no aligned point, so only the final steps can add them.
FWD = {(0, 0), (1, 1), (2, 0), (3, 3)}
REV = {(0, 0), (1, 1), (3, 2)}


def test_intersection_and_union():
    assert symmetrize(FWD, REV, 4, 4, "intersection") == [(0, 0), (1, 1)]
    assert symmetrize(FWD, REV, 4, 4, "union") == [(0, 0), (1, 1), (2, 0), (3, 2), (3, 3)]


def test_grow_diag_adds_union_neighbours_only():
    assert symmetrize(FWD, REV, 4, 4, "grow-diag") == [(0, 0), (1, 1), (2, 0)]


def test_grow_diag_final_adds_points_with_one_unaligned_word():
    # FINAL(fwd) adds 3-3 (source 3 unaligned); FINAL(rev) then adds 3-2 (target 2 still unaligned)
    assert symmetrize(FWD, REV, 4, 4, "grow-diag-final") == [(0, 0), (1, 1), (2, 0), (3, 2), (3, 3)]


def test_grow_diag_final_and_needs_both_words_unaligned():
    # FINAL-AND(fwd) adds 3-3 (both unaligned); then 3-2 is refused because source 3 is aligned
    assert symmetrize(FWD, REV, 4, 4, "grow-diag-final-and") == [(0, 0), (1, 1), (2, 0), (3, 3)]


def test_growth_skips_points_whose_words_are_both_aligned():
    fwd, rev = {(0, 0), (1, 1), (1, 0)}, {(0, 0), (1, 1)}
    # 1-0 is a union neighbour of 0-0, but source 1 and target 0 are both aligned already
    for heuristic in ("grow-diag", "grow-diag-final", "grow-diag-final-and"):
        assert symmetrize(fwd, rev, 2, 2, heuristic) == [(0, 0), (1, 1)]
    assert symmetrize(fwd, rev, 2, 2, "union") == [(0, 0), (1, 0), (1, 1)]


def test_growth_chains_through_points_added_in_the_same_pass():
    fwd, rev = {(0, 0), (1, 1), (2, 2), (3, 3)}, {(0, 0)}
    assert symmetrize(fwd, rev, 4, 4, "grow-diag") == [(0, 0), (1, 1), (2, 2), (3, 3)]


def test_growth_uses_horizontal_neighbours():
    # one-to-many in the forward direction: 0-1 is next to 0-0 and target 1 is unaligned
    fwd, rev = {(0, 0), (0, 1), (1, 2)}, {(0, 0), (1, 2)}
    assert symmetrize(fwd, rev, 2, 3, "grow-diag") == [(0, 0), (0, 1), (1, 2)]
    assert symmetrize(fwd, rev, 2, 3, "grow-diag-final-and") == [(0, 0), (0, 1), (1, 2)]


def test_empty_and_bad_inputs():
    for heuristic in HEURISTICS:
        assert symmetrize(set(), set(), 3, 2, heuristic) == []
    with pytest.raises(ValueError, match="unknown symmetrization heuristic"):
        symmetrize(set(), set(), 1, 1, "grow")
    with pytest.raises(ValueError, match="out of range"):
        symmetrize({(2, 0)}, set(), 2, 2, "union")


def test_symmetrized_links_lie_between_intersection_and_union():
    rng = random.Random(5)
    for _ in range(300):
        n, m = rng.randint(1, 7), rng.randint(1, 7)
        fwd = {(rng.randrange(n), rng.randrange(m)) for _ in range(rng.randint(0, 8))}
        rev = {(rng.randrange(n), rng.randrange(m)) for _ in range(rng.randint(0, 8))}
        results = {h: set(symmetrize(fwd, rev, n, m, h)) for h in HEURISTICS}
        assert fwd & rev == results["intersection"] <= results["grow-diag"] <= results["grow-diag-final-and"]
        assert results["grow-diag"] <= results["grow-diag-final"] <= results["union"] == fwd | rev
        # (final-and is not always a subset of final: a point final adds early can block a later one)


# ---- eflomal on a synthetic corpus -------------------------------------------------------------------------------

def synthetic_corpus(n_sentences=200, seed=0):
    """Word-for-word translation (s7 -> t7) with the sentence reversed and a target-only particle at the end."""
    rng = random.Random(seed)
    src, tgt, gold = [], [], []
    for _ in range(n_sentences):
        words = rng.sample(range(40), rng.randint(3, 8))
        n = len(words)
        src.append(" ".join(f"s{w}" for w in words))
        tgt.append(" ".join(f"t{w}" for w in reversed(words)) + " ga")
        gold.append({(i, n - 1 - i) for i in range(n)})
    return src, tgt, gold


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def _read_links(path):
    return [{tuple(map(int, tok.split("-"))) for tok in line.split()} for line in open(path).read().splitlines()]


def _recall_precision(gold, predicted):
    hits = sum(len(g & p) for g, p in zip(gold, predicted))
    return hits / sum(map(len, gold)), hits / max(1, sum(map(len, predicted)))


def test_eflomal_directions_are_source_target():
    src, tgt, gold = synthetic_corpus()
    links = run_eflomal([s.split() for s in src], [t.split() for t in tgt], ("forward", "reverse"))
    for direction in ("forward", "reverse"):
        recall, precision = _recall_precision(gold, links[direction])
        assert recall > 0.9 and precision > 0.9, (direction, recall, precision)


def test_cli_aligns_synthetic_corpus(tmp_path):
    src, tgt, gold = synthetic_corpus()
    s, t = _write(tmp_path / "s.txt", src), _write(tmp_path / "t.txt", tgt)
    out, fwd_out, rev_out = tmp_path / "a.txt", tmp_path / "f.txt", tmp_path / "r.txt"
    assert main(["align", "--src", s, "--tgt", t, "--out", str(out), "--fwd-out", str(fwd_out),
                 "--rev-out", str(rev_out)]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == len(src)
    for line in lines:  # Pharaoh, sorted by (source, target)
        pairs = [tuple(map(int, tok.split("-"))) for tok in line.split()]
        assert pairs == sorted(set(pairs))
    links = _read_links(out)
    recall, precision = _recall_precision(gold, links)
    assert recall > 0.9 and precision > 0.9, (recall, precision)
    # the final alignment is the grow-diag-final-and of the two directional files it wrote
    fwd, rev = _read_links(fwd_out), _read_links(rev_out)
    for k in range(len(src)):
        n, m = len(src[k].split()), len(tgt[k].split())
        assert links[k] == set(symmetrize(fwd[k], rev[k], n, m, "grow-diag-final-and"))


def test_cli_single_direction(tmp_path):
    src, tgt, gold = synthetic_corpus(seed=1)
    s, t = _write(tmp_path / "s.txt", src), _write(tmp_path / "t.txt", tgt)
    out = tmp_path / "a.txt"
    assert main(["align", "--src", s, "--tgt", t, "--out", str(out), "--direction", "reverse", "--model", "2"]) == 0
    recall, precision = _recall_precision(gold, _read_links(out))
    assert recall > 0.9 and precision > 0.9, (recall, precision)


def test_cli_rejects_empty_line(tmp_path, capsys):
    src, tgt, _ = synthetic_corpus(20)
    tgt[6] = ""
    s, t = _write(tmp_path / "s.txt", src), _write(tmp_path / "t.txt", tgt)
    assert main(["align", "--src", s, "--tgt", t, "--out", str(tmp_path / "a.txt")]) == 1
    assert f"xlpos-prep align: error: {t}:7: empty sentence" in capsys.readouterr().err
    assert not (tmp_path / "a.txt").exists()


def test_cli_rejects_line_count_mismatch(tmp_path, capsys):
    src, tgt, _ = synthetic_corpus(20)
    s, t = _write(tmp_path / "s.txt", src), _write(tmp_path / "t.txt", tgt[:15])
    assert main(["align", "--src", s, "--tgt", t, "--out", str(tmp_path / "a.txt")]) == 1
    assert f"{t}:16: has 15 lines but {s} has 20" in capsys.readouterr().err


def test_cli_rejects_sentences_eflomal_would_drop(tmp_path, capsys):
    src, tgt, _ = synthetic_corpus(20)
    src[2] = " ".join(["s1"] * 1024)
    s, t = _write(tmp_path / "s.txt", src), _write(tmp_path / "t.txt", tgt)
    assert main(["align", "--src", s, "--tgt", t, "--out", str(tmp_path / "a.txt")]) == 1
    assert f"{s}:3: sentence of 1024 tokens is longer than the limit 1023" in capsys.readouterr().err
