"""Pictures of XL positions (`xlpos-prep show`, preprocess/show.py): the SVG is well-formed, holds every word with
its absolute and XL position, marks the inverted nodes of a known tree, and agrees with the reorderer's own
derivation; the heatmap drawer; and the rule that the fairseq-free package never imports the plugin."""
from __future__ import annotations

import ast
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO
from xlpos_prep import btg
from xlpos_prep import cli as prep_cli
from xlpos_prep.reorderer import Reorderer, ReordererConfig
from xlpos_prep.show import BTGNode, btg_tree, heatmap_picture, parse_line_spec, sentence_trees, tree_picture

SVG = "{http://www.w3.org/2000/svg}"
S, I, F = btg.EDGE_S, btg.EDGE_I, btg.EDGE_F
# (S (F a man) (I (F saw) (S (F the) (F dog)))): "a man the dog saw"
KNOWN_WORDS = ["a", "man", "saw", "the", "dog"]
KNOWN_EDGES = np.array([[S, 0, 2, 5], [F, 0, -1, 2], [I, 2, 3, 5], [F, 2, -1, 3], [S, 3, 4, 5], [F, 3, -1, 4],
                        [F, 4, -1, 5]])


def elements(svg: str, cls: str) -> list[ET.Element]:
    """The SVG elements whose class list holds `cls` (parsing fails on a malformed document)."""
    root = ET.fromstring(svg)
    assert root.tag == SVG + "svg"
    return [e for e in root.iter() if cls in e.get("class", "").split()]


def by_index(svg: str, cls: str) -> list[str]:
    found = sorted(elements(svg, cls), key=lambda e: int(e.get("data-index")))
    return [e.text for e in found]


def test_known_tree_words_positions_and_inverted_nodes() -> None:
    tree = btg_tree(KNOWN_EDGES, len(KNOWN_WORDS))
    assert tree.order() == [0, 1, 3, 4, 2] and tree.height == 4
    svg = tree_picture(KNOWN_WORDS, tree, "known:1").svg()
    assert by_index(svg, "word") == KNOWN_WORDS
    assert by_index(svg, "abs") == ["0", "1", "2", "3", "4"]
    assert by_index(svg, "xl") == ["0", "1", "4", "2", "3"]  # xl[order[k]] = k
    inverted = {e.get("data-span") for e in elements(svg, "inverted") if e.tag == SVG + "rect"}
    straight = {e.get("data-span") for e in elements(svg, "straight") if e.tag == SVG + "rect"}
    phrases = {e.get("data-span") for e in elements(svg, "phrase") if e.tag == SVG + "rect"}
    assert inverted == {"2-5"} and straight == {"0-5", "3-5"} and phrases == {"0-2", "2-3", "3-4", "4-5"}
    assert [e.text for e in elements(svg, "reordered")] == ["target order: a man the dog saw"]


def test_text_is_escaped_and_wide_characters_widen_the_column() -> None:
    words = ["<b>&", "abcd", "x", "犬を見た", "x"]
    svg = tree_picture(words, BTGNode("F", 0, len(words))).svg()
    assert by_index(svg, "word") == words  # parsed back from well-formed XML
    x = [float(e.get("x")) for e in sorted(elements(svg, "word"), key=lambda e: int(e.get("data-index")))]
    assert x[4] - x[2] > x[2] - x[0]  # four wide characters take the room of eight narrow ones, not four


@pytest.fixture(scope="module")
def random_reorderer() -> Reorderer:
    """A model with random weights: arbitrary but deterministic derivations with straight and inverted nodes."""
    config = ReordererConfig(hash_bits=10)
    weights = np.random.default_rng(7).normal(size=(1 << config.hash_bits) * 3)
    return Reorderer(config, weights)


def test_picture_agrees_with_the_reorderers_derivation(random_reorderer) -> None:
    rng = np.random.default_rng(3)
    sentences = [[f"w{int(k)}" for k in rng.integers(0, 40, size=n)] for n in (1, 2, 5, 9, 14)]
    parses = random_reorderer.parse_batch(sentences)
    inversions = 0
    for words, parse in zip(sentences, parses):
        tree = btg_tree(parse.edges, len(words))
        assert tree.order() == parse.order.tolist()
        bracketed = btg.tree_string(parse.edges, words)
        svg = tree_picture(words, tree).svg()
        n_inverted = len([e for e in elements(svg, "inverted") if e.tag == SVG + "rect"])
        assert n_inverted == bracketed.count("(I ")
        inversions += n_inverted
        xl = [int(t) for t in by_index(svg, "xl")]
        assert [xl.index(k) for k in range(len(words))] == parse.order.tolist()
    assert inversions > 0  # the check above saw inverted nodes
    stacked = sentence_trees(random_reorderer, sentences, [f"s{k}" for k in range(len(sentences))]).svg()
    assert len(elements(stacked, "word")) == sum(map(len, sentences))


def test_show_command(random_reorderer, tmp_path: Path, capsys) -> None:
    model, src = tmp_path / "r.model", tmp_path / "test.src"
    random_reorderer.save(str(model))
    lines = ["w1 w2 w3 w4", "w5 w6", "", "w7 w8 w9"]
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "tree.svg"
    assert prep_cli.main(["show", "--model", str(model), "--src", str(src), "--lines", "1-2,4", "--out", str(out)]) == 0
    svg = out.read_text(encoding="utf-8")
    assert by_index(svg, "word") != []
    titles = [e.text for e in ET.fromstring(svg).iter(SVG + "text") if e.text and e.text.startswith("test.src:")]
    assert titles == ["test.src:1", "test.src:2", "test.src:4"]
    assert [e.text for e in elements(svg, "word")] == "w1 w2 w3 w4 w5 w6 w7 w8 w9".split()
    capsys.readouterr()

    def error(args: list[str]) -> tuple[int, str]:
        try:
            code = prep_cli.main(args)
        except SystemExit as e:
            code = e.code
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "Traceback" not in err[0], err
        return code, err[0]

    base = ["show", "--model", str(model), "--src", str(src)]
    assert error(base + ["--lines", "3", "--out", str(tmp_path / "e.svg")]) == (
        1, f"xlpos-prep show: error: {src}:3: empty sentence: nothing to draw")
    assert error(base + ["--lines", "9", "--out", str(tmp_path / "e.svg")]) == (
        1, f"xlpos-prep show: error: --lines: line 9 asked for, but {src} has 4 lines")
    code, line = error(base + ["--lines", "2-1", "--out", str(tmp_path / "e.svg")])
    assert code == 2 and "--lines" in line
    code, line = error(base + ["--out", str(src)])
    assert code == 1 and "refusing to overwrite an input" in line
    assert not (tmp_path / "e.svg").exists()
    png = tmp_path / "tree.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert error(base + ["--lines", "1", "--out", str(png)]) == (
            1, f"xlpos-prep show: error: {png}: a PNG needs matplotlib (pip install matplotlib); name an .svg file "
               f"to write SVG")
        assert not png.exists()
    else:
        assert prep_cli.main(base + ["--lines", "1", "--out", str(png)]) == 0
        assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_line_spec() -> None:
    assert parse_line_spec("3") == [(3, 3)]
    assert parse_line_spec("1-4, 9") == [(1, 4), (9, 9)]
    for bad in ("0", "4-2", "a", "1,,2", ""):
        with pytest.raises(Exception, match="expected line numbers"):
            parse_line_spec(bad)


def test_heatmap() -> None:
    weights = np.array([[0.9, 0.1, 0.0], [0.2, 0.3, 0.5]])
    svg = heatmap_picture(weights, ["T1", "T2"], ["s1", "s2", "s3"], title="t", col_notes=["2", "0", "1"]).svg()
    cells = {(int(e.get("data-row")), int(e.get("data-column"))): float(e.get("data-weight"))
             for e in elements(svg, "cell")}
    assert cells == {(i, j): weights[i, j] for i in range(2) for j in range(3)}
    fills = {(int(e.get("data-row")), int(e.get("data-column"))): e.get("fill") for e in elements(svg, "cell")}
    assert fills[(0, 2)] == "#f7fbff" and fills[(0, 0)] != fills[(1, 0)]  # 0 is white, weights differ in colour
    assert by_index(svg, "row") == ["T1", "T2"] and by_index(svg, "column") == ["s1", "s2", "s3"]
    assert by_index(svg, "column-note") == ["2", "0", "1"]
    with pytest.raises(ValueError, match="2 rows and 2 columns"):
        heatmap_picture(weights, ["T1", "T2"], ["s1", "s2"])


def test_the_pipeline_package_never_imports_the_plugin() -> None:
    """xlpos_prep (preprocess/) is the floor the plugin stands on: no import of `xlpos`, at module level or inside
    a function, so the pipeline runs without fairseq and the two packages have no import loop."""
    offenders = []
    for path in sorted((REPO / "preprocess").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            offenders += [f"{path.name}:{node.lineno} {n}" for n in names if n == "xlpos" or n.startswith("xlpos.")]
    assert offenders == []
