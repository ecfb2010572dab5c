import random

import pytest
import sentencepiece as spm

from xlpos_prep.cli import main
from xlpos_prep.subword import piece_word_ids, xl_positions_for_line, xl_positions_for_pieces

SYLLABLES = ["ka", "ri", "to", "mu", "ne", "so", "la", "pe", "zu", "xi"]


def _corpus(n_lines, seed):
    rng = random.Random(seed)
    vocab = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(60)]
    return [[rng.choice(vocab) for _ in range(rng.randint(3, 9))] for _ in range(n_lines)]


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    """A tiny unigram model: short words stay whole, long ones split into several pieces."""
    d = tmp_path_factory.mktemp("spm")
    (d / "train.txt").write_text("".join(" ".join(s) + "\n" for s in _corpus(300, 0)), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(d / "train.txt"), model_prefix=str(d / "m"), vocab_size=60,
                                   minloglevel=2)
    return str(d / "m.model")


@pytest.fixture(scope="module")
def sp(spm_model):
    return spm.SentencePieceProcessor(model_file=spm_model)


# ---- piece -> word mapping --------------------------------------------------------------------------------------

def test_piece_word_ids_follow_the_boundary_marker():
    assert piece_word_ids(["▁ka", "ri", "▁to", "▁mu", "ne", "so"]) == [0, 0, 1, 2, 2, 2]
    assert piece_word_ids([]) == []


def test_lone_marker_belongs_to_the_following_word():
    # sentencepiece emits "▁" alone before a word that starts with an unknown character
    assert piece_word_ids(["▁", "(", "▁ka", "▁", ")"]) == [0, 0, 1, 2, 2]
    assert piece_word_ids(["▁ka", "▁", "Z", "q", "▁mu"]) == [0, 1, 1, 1, 2]


def test_first_piece_without_marker_starts_word_zero():
    assert piece_word_ids(["ka", "ri", "▁to"]) == [0, 0, 1]


def test_piece_spanning_words_is_rejected():
    with pytest.raises(ValueError, match="spans a word boundary"):
        piece_word_ids(["▁ka▁ri"])


# ---- positions from word ids ------------------------------------------------------------------------------------

def test_known_reordering():
    # words: w0 = 2 pieces, w1 = 1 piece, w2 = 3 pieces; order w2 w0 w1
    word_ids = [0, 0, 1, 2, 2, 2]
    assert xl_positions_for_pieces(word_ids, [2, 0, 1]) == [3, 4, 5, 0, 1, 2]
    assert xl_positions_for_pieces(word_ids, [0, 1, 2]) == [0, 1, 2, 3, 4, 5]
    assert xl_positions_for_pieces(word_ids, [2, 1, 0]) == [4, 5, 3, 0, 1, 2]


def test_position_errors():
    with pytest.raises(ValueError, match="not a permutation"):
        xl_positions_for_pieces([0, 1], [0, 0])
    with pytest.raises(ValueError, match="the pieces belong to 2 words but the order has 3"):
        xl_positions_for_pieces([0, 1], [0, 1, 2])
    with pytest.raises(ValueError, match="belong to"):
        xl_positions_for_pieces([0, 2], [0, 1, 2])  # not contiguous


def test_real_model_positions_are_a_word_contiguous_permutation(sp):
    rng = random.Random(2)
    n_multi_piece_words = 0
    for words in _corpus(200, 1):
        order = list(range(len(words)))
        rng.shuffle(order)
        pieces, positions = xl_positions_for_line(words, order, sp)
        assert sorted(positions) == list(range(len(pieces)))
        word_ids = piece_word_ids(pieces)
        n_multi_piece_words += len(word_ids) - len(set(word_ids))
        # laying pieces out by position gives the words in `order`, each word's pieces intact
        reordered = [None] * len(pieces)
        for piece, p in zip(pieces, positions):
            reordered[p] = piece
        assert "".join(reordered).replace("▁", " ").split() == [words[w] for w in order]
        # monotone order gives the identity
        assert xl_positions_for_line(words, list(range(len(words))), sp)[1] == list(range(len(pieces)))
    assert n_multi_piece_words > 50  # the test model really splits words


def test_unknown_characters_and_lone_markers(sp):
    words = ["ka", "(zq", "mu", "你好"]
    pieces, positions = xl_positions_for_line(words, [3, 2, 1, 0], sp)
    assert "▁" in pieces  # the model does emit lone markers here
    word_ids = piece_word_ids(pieces)
    assert word_ids[-1] == 3
    by_word = {}
    for w, p in zip(word_ids, positions):
        by_word.setdefault(w, []).append(p)
    # reversed order: word 3 first ... word 0 last; each word's pieces consecutive and in order
    flat = [p for w in (3, 2, 1, 0) for p in by_word[w]]
    assert flat == list(range(len(pieces)))


def test_word_that_sentencepiece_drops_is_an_error(sp):
    with pytest.raises(ValueError, match=r"pieces for 2 words but the line has 3.*'\\u200b'"):
        xl_positions_for_line(["ka", "\u200b", "mu"], [0, 1, 2], sp)
    with pytest.raises(ValueError, match="the order has 2 entries but the sentence has 3 words"):
        xl_positions_for_line(["ka", "ri", "mu"], [0, 1], sp)


# ---- CLI ----------------------------------------------------------------------------------------------------

def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


@pytest.fixture()
def files(tmp_path):
    rng = random.Random(4)
    sents = _corpus(41, 3)
    orders, oracle = [], []
    for words in sents:
        order = list(range(len(words)))
        rng.shuffle(order)
        orders.append(order)
        ranks = [rng.randrange(3) for _ in words]  # ties: a stable sort keeps source order inside a rank
        dense = sorted(set(ranks))
        oracle.append([dense.index(r) for r in ranks])
    return (sents, orders, oracle, _write(tmp_path / "src.txt", [" ".join(s) for s in sents]),
            _write(tmp_path / "order.txt", [" ".join(map(str, o)) for o in orders]),
            _write(tmp_path / "oracle.txt", [" ".join(map(str, r)) for r in oracle]))


def _ints(path):
    return [[int(x) for x in line.split()] for line in open(path, encoding="utf-8").read().splitlines()]


def test_cli_positions_and_pieces(files, spm_model, sp, tmp_path):
    sents, orders, _, src, order, _ = files
    out, pieces_out = tmp_path / "x.xlpos", tmp_path / "x.pieces"
    assert main(["positions", "--src", src, "--order", order, "--spm", spm_model, "--out", str(out),
                 "--pieces-out", str(pieces_out)]) == 0
    expected = [xl_positions_for_line(s, o, sp) for s, o in zip(sents, orders)]
    assert _ints(out) == [p for _, p in expected]
    assert pieces_out.read_text(encoding="utf-8").splitlines() == [" ".join(pc) for pc, _ in expected]


def test_cli_monotone_and_oracle(files, spm_model, sp, tmp_path):
    sents, _, oracle, src, _, oracle_path = files
    out = tmp_path / "m.xlpos"
    assert main(["positions", "--src", src, "--order", "monotone", "--spm", spm_model, "--out", str(out)]) == 0
    assert all(p == list(range(len(p))) for p in _ints(out))
    assert main(["positions", "--src", src, "--oracle", oracle_path, "--spm", spm_model, "--out", str(out)]) == 0
    expected = [xl_positions_for_line(s, sorted(range(len(r)), key=r.__getitem__), sp)[1]
                for s, r in zip(sents, oracle)]
    assert _ints(out) == expected


def test_cli_shards_and_workers_concatenate_to_the_full_output(files, spm_model, tmp_path):
    _, _, _, src, order, _ = files
    full = tmp_path / "full.xlpos"
    assert main(["positions", "--src", src, "--order", order, "--spm", spm_model, "--out", str(full)]) == 0
    parts = []
    for i in range(4):
        part, pieces = tmp_path / f"p{i}.xlpos", tmp_path / f"p{i}.pieces"
        assert main(["positions", "--src", src, "--order", order, "--spm", spm_model, "--out", str(part),
                     "--pieces-out", str(pieces), "--shard", f"{i}/4", "--workers", "2"]) == 0
        parts.append(part.read_text())
    assert "".join(parts) == full.read_text()


def test_cli_order_of_wrong_length_names_order_file_and_line(files, spm_model, tmp_path, capsys):
    _, orders, _, src, _, _ = files
    bad = [" ".join(map(str, o)) for o in orders]
    bad[12] = " ".join(map(str, orders[12][:-1]))
    bad_path = _write(tmp_path / "bad.order", bad)
    out = tmp_path / "x.xlpos"
    assert main(["positions", "--src", src, "--order", bad_path, "--spm", spm_model, "--out", str(out)]) == 1
    assert f"xlpos-prep positions: error: {bad_path}:13: not a permutation" in capsys.readouterr().err
    assert not out.exists()


def test_cli_bad_order_or_oracle_line_in_a_later_shard_names_its_line_in_the_file(files, spm_model, tmp_path,
                                                                                   capsys):
    """The steps stream their files (a shard reads only its lines): a bad line is still named by its line in the
    whole file, with workers too, and leaves no output."""
    _, orders, oracle, src, _, _ = files
    bad_order = [" ".join(map(str, o)) for o in orders]
    bad_order[30] = "0 0"
    bad_oracle = [" ".join(map(str, r)) for r in oracle]
    bad_oracle[30] = " ".join(["0"] * (len(oracle[30]) + 1))
    out = tmp_path / "x.xlpos"
    for option, lines, message in (("--order", bad_order, "not a permutation"),
                                   ("--oracle", bad_oracle, f"{len(oracle[30]) + 1} ranks for a source sentence")):
        path = _write(tmp_path / "bad.txt", lines)
        for workers in ("1", "2"):
            assert main(["positions", "--src", src, option, path, "--spm", spm_model, "--out", str(out),
                         "--shard", "2/3", "--workers", workers]) == 1
            assert f"xlpos-prep positions: error: {path}:31: {message}" in capsys.readouterr().err
            assert not out.exists()
        # the first shard does not read line 31
        assert main(["positions", "--src", src, option, path, "--spm", spm_model, "--out", str(out),
                     "--shard", "0/3"]) == 0
        out.unlink()


def test_cli_piece_word_mismatch_names_source_file_and_line(files, spm_model, tmp_path, capsys):
    sents, orders, _, _, order, _ = files
    lines = [" ".join(s) for s in sents]
    words = sents[20]
    words[1] = "\u200b"  # normalized away by sentencepiece
    lines[20] = " ".join(words)
    src = _write(tmp_path / "bad_src.txt", lines)
    out = tmp_path / "x.xlpos"
    for workers in ("1", "2"):
        assert main(["positions", "--src", src, "--order", order, "--spm", spm_model, "--out", str(out),
                     "--workers", workers]) == 1
        err = capsys.readouterr().err
        assert f"xlpos-prep positions: error: {src}:21: sentencepiece produced pieces for" in err
        assert not out.exists()


@pytest.mark.timeout(60)
def test_cli_missing_model_fails_cleanly_with_workers(files, tmp_path, capsys):
    _, _, _, src, order, _ = files
    missing = str(tmp_path / "nope.model")
    out = tmp_path / "x.xlpos"
    assert main(["positions", "--src", src, "--order", order, "--spm", missing, "--out", str(out),
                 "--workers", "2"]) == 1
    assert f"xlpos-prep positions: error: {missing}: cannot load the sentencepiece model" in capsys.readouterr().err
    assert not out.exists()
