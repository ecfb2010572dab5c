import json
import random

import pytest

from xlpos_prep.cli import main
from xlpos_prep.io import InputError
from xlpos_prep.metrics import (ReorderingScores, agreed_kendall_tau_counts, evaluate_orders, fuzzy_reordering_counts,
                                kendall_tau_counts, monotone_order, parse_order_line, ranks_of_order, reversed_order)


def test_ranks_of_order_is_the_inverse_permutation():
    assert ranks_of_order([2, 0, 1]) == [1, 2, 0]
    assert ranks_of_order([]) == []
    order = [4, 1, 3, 0, 2]
    xl = ranks_of_order(order)
    assert all(xl[order[k]] == k for k in range(5))


def test_baseline_orders():
    assert monotone_order(3) == [0, 1, 2]
    assert reversed_order(3) == [2, 1, 0]
    assert monotone_order(0) == reversed_order(0) == []


def test_identity_order_is_perfect():
    ranks = [0, 1, 2, 3]
    assert kendall_tau_counts([0, 1, 2, 3], ranks) == (0, 6)
    assert fuzzy_reordering_counts([0, 1, 2, 3], ranks) == (0, 5)


def test_reversed_order_of_strictly_increasing_ranks_scores_zero():
    ranks = [0, 1, 2, 3]
    # every pair is discordant; start->3, 3->2, 2->1, 1->0 and 0->end are all breaks
    assert kendall_tau_counts([3, 2, 1, 0], ranks) == (6, 6)
    assert fuzzy_reordering_counts([3, 2, 1, 0], ranks) == (5, 5)


def test_ties_are_neither_pairs_nor_breaks():
    ranks = [0, 0, 1]
    # pairs with different ranks: (0,2), (1,2); the tied words may come in either order
    assert kendall_tau_counts([1, 0, 2], ranks) == (0, 2)
    assert fuzzy_reordering_counts([1, 0, 2], ranks) == (0, 4)
    # [2, 0, 1] -> ranks 1 0 0: both pairs discordant; start->1, 1->0, 0->end break, 0->0 does not
    assert kendall_tau_counts([2, 0, 1], ranks) == (2, 2)
    assert fuzzy_reordering_counts([2, 0, 1], ranks) == (3, 4)


def test_agreed_tau_counts_only_the_pairs_both_oracles_order_alike():
    ranks, other = [0, 1, 2, 2], [0, 2, 1, 3]
    # (0,1) (0,2) (0,3) agree; (1,2) disagree; (1,3) agree; (2,3) tied in `ranks`
    assert agreed_kendall_tau_counts([0, 1, 2, 3], ranks, other) == (0, 4)
    assert agreed_kendall_tau_counts([3, 2, 1, 0], ranks, other) == (4, 4)
    # [1, 0, 2, 3]: of the agreed pairs only (0,1) is put the wrong way
    assert agreed_kendall_tau_counts([1, 0, 2, 3], ranks, other) == (1, 4)
    # a tie in the second oracle takes the pair out too: (0,1) no longer counts against [1, 0, 2, 3]
    assert agreed_kendall_tau_counts([1, 0, 2, 3], ranks, [0, 0, 1, 1]) == (0, 4)
    # with `other` = `ranks` it is plain Kendall tau
    order = [2, 0, 3, 1]
    assert agreed_kendall_tau_counts(order, ranks, ranks) == kendall_tau_counts(order, ranks)


def test_hand_computed_mixed_case():
    ranks = [1, 0, 2, 2]
    # monotone: rank sequence 1 0 2 2 -> one discordant pair (1,0) out of 6 - 1 tied = 5
    assert kendall_tau_counts([0, 1, 2, 3], ranks) == (1, 5)
    # start->1 break, 1->0 break, 0->2 break, 2->2 fine, 2->end fine (2 is the maximum)
    assert fuzzy_reordering_counts([0, 1, 2, 3], ranks) == (3, 5)
    assert kendall_tau_counts([1, 0, 3, 2], ranks) == (0, 5)
    assert fuzzy_reordering_counts([1, 0, 3, 2], ranks) == (0, 5)


def test_boundary_markers():
    ranks = [0, 1, 2, 3]
    # start -> first is fine only for rank 0; last -> end only for the maximum rank (3)
    assert fuzzy_reordering_counts([2, 3, 0, 1], ranks) == (3, 5)  # start->2, 3->0, 1->end
    assert fuzzy_reordering_counts([1, 2, 3, 0], ranks) == (3, 5)  # start->1, 3->0, 0->end
    assert fuzzy_reordering_counts([0, 1, 3, 2], ranks) == (3, 5)  # 1->3, 3->2, 2->end
    assert fuzzy_reordering_counts([0, 2, 3, 1], [0, 1, 1, 2]) == (2, 5)  # ranks 0 1 2 1: 2->1, 1->end


def test_all_tied_sentence_counts_nothing():
    assert kendall_tau_counts([2, 0, 1], [0, 0, 0]) == (0, 0)
    assert fuzzy_reordering_counts([2, 0, 1], [0, 0, 0]) == (0, 0)
    assert kendall_tau_counts([0], [0]) == (0, 0)
    assert fuzzy_reordering_counts([0], [0]) == (0, 0)


def test_kendall_counts_match_a_direct_pair_count():
    rng = random.Random(1)
    for _ in range(300):
        n = rng.randint(1, 30)
        k = rng.randint(1, n)
        ranks = [rng.randrange(k) for _ in range(n)]
        ranks = [sorted(set(ranks)).index(r) for r in ranks]
        order = list(range(n))
        rng.shuffle(order)
        pos = ranks_of_order(order)
        discordant = sum(1 for i in range(n) for j in range(n) if ranks[i] < ranks[j] and pos[i] > pos[j])
        pairs = sum(1 for i in range(n) for j in range(i + 1, n) if ranks[i] != ranks[j])
        assert kendall_tau_counts(order, ranks) == (discordant, pairs)


def test_evaluate_orders_corpus_vs_sentence_average():
    ranks = [[0, 1, 2, 3], [0, 1], [0, 0]]
    orders = [[3, 2, 1, 0], [0, 1], [1, 0]]
    scores = evaluate_orders(orders, ranks)
    assert isinstance(scores, ReorderingScores)
    assert scores.n_sentences == 3
    # tau: 6/6 discordant, 0/1, 0/0 -> corpus 1 - 6/7; sentences 0, 1, 1
    assert scores.corpus_tau == pytest.approx(1 / 7)
    assert scores.sentence_tau == pytest.approx(2 / 3)
    # FRS: 5/5 breaks, 0/3, 0/0 -> corpus 1 - 5/8; sentences 0, 1, 1
    assert scores.corpus_frs == pytest.approx(3 / 8)
    assert scores.sentence_frs == pytest.approx(2 / 3)


def test_evaluate_orders_length_mismatch():
    with pytest.raises(ValueError):
        evaluate_orders([[0]], [[0], [0]])


def test_parse_order_line_requires_a_permutation():
    assert parse_order_line("2 0 1", 3, "o.txt", 1) == [2, 0, 1]
    assert parse_order_line("1 0\tscore=3", 2, "o.txt", 1) == [1, 0]  # lader's extra tab-separated fields
    for bad in ("0 1", "0 1 1", "0 1 3", "0 1 2 3"):
        with pytest.raises(InputError, match=r"^o\.txt:5: not a permutation of 0\.\.2"):
            parse_order_line(bad, 3, "o.txt", 5)
    with pytest.raises(InputError, match=r"^o\.txt:5: an order must be space-separated integers"):
        parse_order_line("0 x 1", 3, "o.txt", 5)


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_cli_prints_table_and_json(tmp_path, capsys):
    oracle = _write(tmp_path / "oracle.txt", ["0 1 2 3", "0 1", "0 0"])
    order = _write(tmp_path / "order.txt", ["3 2 1 0", "0 1", "1 0"])
    out_json = tmp_path / "scores.json"
    assert main(["evaluate", "--order", order, "--oracle", oracle, "--json", str(out_json)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["order", "tau", "tau/sent", "FRS", "FRS/sent", "sentences"]
    rows = {line.split()[0]: [float(x) for x in line.split()[1:]] for line in table[1:]}
    assert rows[order] == pytest.approx([1 / 7, 2 / 3, 3 / 8, 2 / 3, 3], abs=1e-4)
    assert rows["monotone"] == pytest.approx([1, 1, 1, 1, 3])
    # reversed: sentence 2 becomes 1 0 (1/1 discordant, 3/3 breaks); the all-tied sentence 3 still counts 1
    assert rows["reversed"] == pytest.approx([0, 1 / 3, 0, 1 / 3, 3], abs=1e-4)
    saved = json.loads(out_json.read_text())
    assert saved["monotone"]["corpus_tau"] == 1.0 and saved[order]["n_sentences"] == 3


def test_cli_rejects_an_order_that_is_not_a_permutation(tmp_path, capsys):
    oracle = _write(tmp_path / "oracle.txt", ["0 1 2", "0 1"])
    order = _write(tmp_path / "order.txt", ["2 1 0", "0 0"])
    assert main(["evaluate", "--order", order, "--oracle", oracle]) == 1
    assert f"xlpos-prep evaluate: error: {order}:2: not a permutation of 0..1" in capsys.readouterr().err


def test_cli_rejects_line_count_mismatch(tmp_path, capsys):
    oracle = _write(tmp_path / "oracle.txt", ["0 1 2", "0 1"])
    order = _write(tmp_path / "order.txt", ["2 1 0"])
    assert main(["evaluate", "--order", order, "--oracle", oracle]) == 1
    assert f"{order}:2: has 1 lines but {oracle} has 2" in capsys.readouterr().err
