import itertools
import random

import pytest

from xlpos_prep.cli import main
from xlpos_prep.io import InputError
from xlpos_prep.metrics import kendall_tau_counts
from xlpos_prep.oracle import btg_closest_order, order_from_ranks, oracle_ranks, parse_alignment_line, read_oracle


def links(text):
    return parse_alignment_line(text, 100, None, "a.txt", 1)


# ---- parse_alignment_line -------------------------------------------------------------------------------------

def test_parse_sorts_deduplicates_and_accepts_possible_links():
    assert parse_alignment_line("2-1 0-0 1?2 0-0", 3, 3, "a.txt", 1) == [(0, 0), (1, 2), (2, 1)]


def test_parse_empty_line_means_no_links():
    assert parse_alignment_line("", 4, None, "a.txt", 1) == []
    assert parse_alignment_line("   ", 4, None, "a.txt", 1) == []


@pytest.mark.parametrize("bad", ["0-1-2", "a-b", "0:1", "-1-2", "0-", "01"])
def test_parse_malformed_token_names_file_and_line(bad):
    with pytest.raises(InputError, match=rf"^a\.txt:7: malformed alignment link '{bad}'"):
        parse_alignment_line(f"0-0 {bad}", 3, 3, "a.txt", 7)


def test_parse_out_of_range_source_and_target():
    with pytest.raises(InputError, match=r"^a\.txt:4: link 3-0: source index 3 out of range"):
        parse_alignment_line("0-0 3-0", 3, 5, "a.txt", 4)
    with pytest.raises(InputError, match=r"^a\.txt:4: link 1-5: target index 5 out of range"):
        parse_alignment_line("1-5", 3, 5, "a.txt", 4)
    # without a target length, target indices are not checked
    assert parse_alignment_line("1-5", 3, None, "a.txt", 4) == [(1, 5)]


# ---- oracle_ranks: one case per rule ----------------------------------------------------------------------------

def test_monotone():
    assert oracle_ranks(3, links("0-0 1-1 2-2")) == [0, 1, 2]


def test_swap():
    assert oracle_ranks(2, links("0-1 1-0")) == [1, 0]


def test_crossing_alignments():
    assert oracle_ranks(3, links("0-2 1-0 2-1")) == [2, 0, 1]
    assert order_from_ranks([2, 0, 1]) == [1, 2, 0]


def test_many_to_one_ties():
    # words 0 and 1 both align to target 0: one block, same rank
    assert oracle_ranks(3, links("0-0 1-0 2-1")) == [0, 0, 1]


def test_one_to_many_uses_min_max_span():
    # word 0 spans target 1..2, word 1 is at 0
    assert oracle_ranks(2, links("0-1 0-2 1-0")) == [1, 0]


def test_overlapping_spans_merge():
    # word 0 spans 0..2 and contains word 1's target 1: one block; word 2 after it
    assert oracle_ranks(3, links("0-0 0-2 1-1 2-3")) == [0, 0, 1]


def test_transitive_merge():
    # spans: w0 0..1, w1 3..4, w2 1..3, w3 6, w4 5. w0 and w1 do not overlap, but both overlap w2.
    assert oracle_ranks(5, links("0-0 0-1 1-3 1-4 2-1 2-3 3-6 4-5")) == [0, 0, 0, 2, 1]


def test_chain_merge():
    # 0..1 overlaps 1..2 overlaps 2..3: one block
    assert oracle_ranks(4, links("0-0 0-1 1-1 1-2 2-2 2-3 3-5")) == [0, 0, 0, 1]


def test_block_pulls_in_source_words_between_its_members():
    # w0 and w2 share target 5; w1 (target 0) lies between them in the source, so lader's block covers
    # w0..w2 and takes the span 5..6 of the block's words; w3 (target 1) stays before it.
    assert oracle_ranks(4, links("0-5 1-0 2-5 2-6 3-1")) == [1, 1, 1, 0]


def test_unaligned_word_inside_block_joins_it():
    assert oracle_ranks(4, links("0-1 0-2 2-1 3-0"), "right") == [1, 1, 1, 0]
    assert oracle_ranks(4, links("0-1 0-2 2-1 3-0"), "left") == [1, 1, 1, 0]


def test_null_attaches_right_by_default():
    # w1 is unaligned: right -> w2's span, left -> w0's span
    assert oracle_ranks(3, links("0-1 2-0")) == [1, 0, 0]
    assert oracle_ranks(3, links("0-1 2-0"), "right") == [1, 0, 0]
    assert oracle_ranks(3, links("0-1 2-0"), "left") == [1, 1, 0]


def test_run_of_unaligned_words_takes_the_nearest_aligned_span():
    assert oracle_ranks(5, links("0-2 3-0 4-1"), "right") == [2, 0, 0, 0, 1]
    assert oracle_ranks(5, links("0-2 3-0 4-1"), "left") == [2, 2, 2, 0, 1]


def test_sentence_final_unaligned():
    # right: no aligned word to the right -> falls back to the last aligned word
    assert oracle_ranks(4, links("0-1 1-0"), "right") == [1, 0, 0, 0]
    # left (lader): sentence-final unaligned words form their own last rank ("mainly for periods")
    assert oracle_ranks(4, links("0-1 1-0"), "left") == [1, 0, 2, 2]


def test_sentence_initial_unaligned():
    assert oracle_ranks(4, links("2-1 3-0"), "right") == [1, 1, 1, 0]
    # left: no aligned word to the left -> falls back to the first aligned word
    assert oracle_ranks(4, links("2-1 3-0"), "left") == [1, 1, 1, 0]


def test_fully_unaligned_sentence():
    assert oracle_ranks(3, [], "right") == [0, 0, 0]
    assert oracle_ranks(3, [], "left") == [0, 0, 0]
    assert oracle_ranks(0, []) == []


def test_bad_arguments():
    with pytest.raises(ValueError, match="attach_null"):
        oracle_ranks(2, [(0, 0)], "middle")
    with pytest.raises(ValueError, match="source index 2"):
        oracle_ranks(2, [(2, 0)])


def test_random_alignments_satisfy_the_definition():
    rng = random.Random(3)
    for _ in range(500):
        n_src, n_tgt = rng.randint(1, 9), rng.randint(1, 9)
        al = sorted({(rng.randrange(n_src), rng.randrange(n_tgt)) for _ in range(rng.randint(0, 10))})
        for attach in ("right", "left"):
            ranks = oracle_ranks(n_src, al, attach)
            assert len(ranks) == n_src
            assert sorted(set(ranks)) == list(range(max(ranks) + 1))  # dense
            # every rank class is one contiguous source range (a block plus the unaligned words attached to it)
            for r in set(ranks):
                members = [i for i, x in enumerate(ranks) if x == r]
                assert members == list(range(members[0], members[-1] + 1))
            # words whose own target spans overlap always share a rank
            spans = {}
            for i, j in al:
                lo, hi = spans.get(i, (j, j))
                spans[i] = (min(lo, j), max(hi, j))
            for a, (a1, a2) in spans.items():
                for b, (b1, b2) in spans.items():
                    if a1 <= b2 and b1 <= a2:
                        assert ranks[a] == ranks[b]
            # a word aligned strictly before every target word of another block ranks lower, when neither was
            # pulled into a block by source contiguity (both keep their own span as their block's span)
            if len(set(ranks)) == len(spans) == n_src:
                for a in range(n_src):
                    for b in range(n_src):
                        if spans[a][1] < spans[b][0]:
                            assert ranks[a] < ranks[b]


def test_final_spans_are_identical_or_disjoint_so_laders_span_order_is_total():
    """lader ranks spans with "l < r when one end is smaller and the other not larger"; that is only a consistent
    total order because combined spans never partially overlap. Check that, and that our ranks equal it."""
    from xlpos_prep.oracle import _attach_unaligned, _combine_blocks, _word_spans

    def lesser(l, r):
        return (l[0] < r[0] and l[1] <= r[1]) or (l[1] < r[1] and l[0] <= r[0])

    rng = random.Random(11)
    for _ in range(500):
        n_src, n_tgt = rng.randint(1, 9), rng.randint(1, 9)
        al = sorted({(rng.randrange(n_src), rng.randrange(n_tgt)) for _ in range(rng.randint(1, 10))})
        for attach in ("right", "left"):
            spans = _attach_unaligned(_combine_blocks(_word_spans(n_src, al)), attach)
            distinct = set(spans)
            for a in distinct:
                for b in distinct:
                    assert a == b or a[1] < b[0] or b[1] < a[0]
            ranks = oracle_ranks(n_src, al, attach)
            assert ranks == [sum(lesser(other, span) for other in distinct) for span in spans]


# ---- read_oracle --------------------------------------------------------------------------------------------

def test_read_oracle_validates(tmp_path):
    p = tmp_path / "o.txt"
    p.write_text("0 1 1 2\n0\n")
    assert read_oracle(str(p), [4, 1]) == [[0, 1, 1, 2], [0]]
    with pytest.raises(InputError, match=r"o\.txt:2: 1 ranks for a source sentence of 2 words"):
        read_oracle(str(p), [4, 2])
    p.write_text("0 2\n")
    with pytest.raises(InputError, match=r"o\.txt:1: ranks must be dense"):
        read_oracle(str(p))
    p.write_text("0 x\n")
    with pytest.raises(InputError, match=r"o\.txt:1: ranks must be space-separated integers"):
        read_oracle(str(p))


# ---- CLI ----------------------------------------------------------------------------------------------------

def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


@pytest.fixture()
def corpus(tmp_path):
    rng = random.Random(0)
    src, tgt, al = [], [], []
    for k in range(57):
        n, m = rng.randint(1, 8), rng.randint(1, 8)
        src.append(" ".join(f"s{k}_{i}" for i in range(n)))
        tgt.append(" ".join(f"t{k}_{j}" for j in range(m)))
        al.append(" ".join(f"{i}-{j}" for i, j in sorted({(rng.randrange(n), rng.randrange(m))
                                                           for _ in range(rng.randint(0, 6))})))
    return (_write(tmp_path / "src.txt", src), _write(tmp_path / "tgt.txt", tgt),
            _write(tmp_path / "al.txt", al), src, al)


def test_cli_writes_ranks_per_line(corpus, tmp_path):
    src_path, tgt_path, al_path, src, al = corpus
    out = tmp_path / "oracle.txt"
    assert main(["oracle", "--src", src_path, "--tgt", tgt_path, "--align", al_path, "--out", str(out)]) == 0
    got = [[int(x) for x in line.split()] for line in out.read_text().splitlines()]
    expected = [oracle_ranks(len(s.split()), links(a)) for s, a in zip(src, al)]
    assert got == expected
    out_left = tmp_path / "oracle_left.txt"
    assert main(["oracle", "--src", src_path, "--align", al_path, "--out", str(out_left),
                 "--attach-null", "left"]) == 0
    got_left = [[int(x) for x in line.split()] for line in out_left.read_text().splitlines()]
    assert got_left == [oracle_ranks(len(s.split()), links(a), "left") for s, a in zip(src, al)]
    assert got_left != got  # the corpus has unaligned words, so the two attachments must differ somewhere


def test_cli_shards_and_workers_concatenate_to_the_full_output(corpus, tmp_path):
    src_path, _, al_path, _, _ = corpus
    full = tmp_path / "full.txt"
    assert main(["oracle", "--src", src_path, "--align", al_path, "--out", str(full)]) == 0
    parts = []
    for i in range(3):
        part = tmp_path / f"part{i}.txt"
        assert main(["oracle", "--src", src_path, "--align", al_path, "--out", str(part), "--shard", f"{i}/3",
                     "--workers", "2"]) == 0
        parts.append(part.read_text())
    assert "".join(parts) == full.read_text()
    assert all(parts)


def test_cli_out_of_range_error_names_file_and_line(corpus, tmp_path, capsys):
    src_path, tgt_path, al_path, src, al = corpus
    bad = list(al)
    bad[9] = f"{len(src[9].split())}-0"
    bad_path = _write(tmp_path / "bad.txt", bad)
    out = tmp_path / "o.txt"
    for workers in ("1", "2"):
        assert main(["oracle", "--src", src_path, "--align", bad_path, "--out", str(out),
                     "--workers", workers]) == 1
        err = capsys.readouterr().err
        assert f"xlpos-prep oracle: error: {bad_path}:10: link" in err and "out of range" in err
        assert not out.exists()


def test_cli_target_range_checked_with_tgt(corpus, tmp_path, capsys):
    src_path, tgt_path, al_path, src, al = corpus
    tgt_lines = open(tgt_path).read().splitlines()
    bad = list(al)
    bad[3] = f"0-{len(tgt_lines[3].split())}"
    bad_path = _write(tmp_path / "bad.txt", bad)
    assert main(["oracle", "--src", src_path, "--tgt", tgt_path, "--align", bad_path,
                 "--out", str(tmp_path / "o.txt")]) == 1
    assert f"{bad_path}:4: link 0-" in capsys.readouterr().err


def test_cli_line_count_mismatch(corpus, tmp_path, capsys):
    src_path, _, _, _, al = corpus
    short = _write(tmp_path / "short.txt", al[:-2])
    assert main(["oracle", "--src", src_path, "--align", short, "--out", str(tmp_path / "o.txt")]) == 1
    err = capsys.readouterr().err
    assert f"{short}:56: has 55 lines but {src_path} has 57" in err


# ---- btg_closest_order: the ceiling of any BTG reorderer ----------------------------------------------------------

def separable(order: list[int]) -> bool:
    """A permutation is a BTG (separable) permutation iff it contains neither 2413 nor 3142."""
    for idx in itertools.combinations(range(len(order)), 4):
        values = [order[i] for i in idx]
        pattern = tuple(sorted(values).index(v) for v in values)
        if pattern in ((1, 3, 0, 2), (2, 0, 3, 1)):
            return False
    return True


def test_btg_closest_order_is_the_best_btg_permutation_found_by_brute_force():
    rng = random.Random(7)
    for _ in range(150):
        n = rng.randint(1, 6)
        ranks = [rng.randint(0, n - 1) for _ in range(n)]
        ranks = [sorted(set(ranks)).index(r) for r in ranks]  # dense, as oracle files hold them
        order = btg_closest_order(ranks)
        assert sorted(order) == list(range(n)) and separable(order)
        best = min(kendall_tau_counts(list(p), ranks)[0] for p in itertools.permutations(range(n)) if separable(p))
        assert kendall_tau_counts(order, ranks)[0] == best


def test_btg_closest_order_reaches_a_btg_oracle_and_misses_2413_by_one_pair():
    assert btg_closest_order([2, 3, 0, 1, 4]) == order_from_ranks([2, 3, 0, 1, 4])  # nested swaps: reachable
    assert kendall_tau_counts(btg_closest_order([1, 3, 0, 2]), [1, 3, 0, 2])[0] == 1  # the oracle order 2,0,3,1
    assert btg_closest_order([0, 0, 0]) == [0, 1, 2]  # ties: straight
