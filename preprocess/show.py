"""Pictures of what the XL positions are: a sentence's BTG tree with each word's absolute and XL position
(`xlpos-prep show`), and a heatmap drawer that `xlpos.evaluation.attention_map` uses for a model's attention.

The tree is the reorderer's best derivation (the one `xlpos-prep reorder --trees` writes): S nodes keep their two
children in source order, I nodes swap them, F nodes are monotone phrases. Under each word: its absolute position
(source order) and its XL position (its index in the reordered sentence, `xl[order[k]] = k`). These are word
positions; the model's piece-level positions keep a word's pieces together in that same order.

Pictures are drawn once, as a list of shapes, and written as SVG by hand (no dependency) or, when matplotlib is
installed, as PNG from the same shapes. The SVG marks what a test or a script may look for: every word, position
and node carries a class (`word`, `abs`, `xl`, `node straight|inverted|phrase`) and its span or index.
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Sequence
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from .io import InputError, atomic_output, declare_files, read_tokens

logger = logging.getLogger(__name__)

FONT = "DejaVu Sans Mono, Menlo, Consolas, monospace"
FONT_SIZE = 13.0
CHAR_WIDTH = 0.6 * FONT_SIZE  # a monospace glyph; East Asian wide characters take two
STRAIGHT_COLOUR, INVERTED_COLOUR, PHRASE_COLOUR = "#4c566a", "#c0392b", "#7b8794"
MOVED_COLOUR = "#1f5fa8"  # an XL position that differs from the absolute one


# ------------------------------------------------------------------------------------------------ shapes
@dataclass(frozen=True)
class Shape:
    """One thing drawn: kind "line" (x, y to x2, y2), "rect" (x, y, width x2, height y2) or "text" (at x, y, the
    baseline). `attrs` are extra SVG attributes (class, data-*), ignored by the PNG writer."""
    kind: str
    x: float
    y: float
    x2: float = 0.0
    y2: float = 0.0
    text: str = ""
    colour: str = "#000000"
    size: float = FONT_SIZE
    anchor: str = "middle"   # start | middle | end
    weight: str = "normal"
    rotate: float = 0.0      # degrees, counter-clockwise on screen
    stroke: float = 1.0
    attrs: tuple = ()


@dataclass
class Picture:
    """Shapes on a canvas of width x height pixels (y grows downwards, as in SVG)."""
    width: float
    height: float
    shapes: list[Shape] = field(default_factory=list)

    def add(self, kind: str, x: float, y: float, **kw) -> None:
        attrs = kw.pop("attrs", {})
        self.shapes.append(Shape(kind, x, y, attrs=tuple(attrs.items()), **kw))

    def below(self, other: "Picture", gap: float = 0.0) -> "Picture":
        """This picture with `other` stacked under it."""
        dy = self.height + gap
        moved = [Shape(**{**s.__dict__, "y": s.y + dy, "y2": s.y2 + dy if s.kind == "line" else s.y2})
                 for s in other.shapes]
        return Picture(max(self.width, other.width), dy + other.height, self.shapes + moved)

    def svg(self) -> str:
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width:.0f}" height="{self.height:.0f}" '
               f'viewBox="0 0 {self.width:.0f} {self.height:.0f}" font-family={quoteattr(FONT)} '
               f'font-size="{FONT_SIZE:g}">',
               f'<rect x="0" y="0" width="{self.width:.0f}" height="{self.height:.0f}" fill="#ffffff"/>']
        for s in self.shapes:
            extra = "".join(f" {k}={quoteattr(str(v))}" for k, v in s.attrs)
            if s.kind == "line":
                out.append(f'<line x1="{s.x:.1f}" y1="{s.y:.1f}" x2="{s.x2:.1f}" y2="{s.y2:.1f}" '
                           f'stroke="{s.colour}" stroke-width="{s.stroke:g}"{extra}/>')
            elif s.kind == "rect":
                out.append(f'<rect x="{s.x:.1f}" y="{s.y:.1f}" width="{s.x2:.1f}" height="{s.y2:.1f}" '
                           f'fill="{s.colour}" rx="{s.stroke:g}"{extra}/>')
            else:
                rotate = f' transform="rotate({-s.rotate:g} {s.x:.1f} {s.y:.1f})"' if s.rotate else ""
                out.append(f'<text x="{s.x:.1f}" y="{s.y:.1f}" text-anchor="{s.anchor}" fill="{s.colour}" '
                           f'font-size="{s.size:g}" font-weight="{s.weight}"{rotate}{extra}>{escape(s.text)}</text>')
        out.append("</svg>")
        return "\n".join(out) + "\n"

    def save(self, path: str) -> None:
        """Write `path`: SVG, or PNG (needs matplotlib) when the name ends in .png; atomically either way."""
        if path.lower().endswith(".png"):
            self._save_png(path)
        else:
            with atomic_output(path) as f:
                f.write(self.svg())

    def _save_png(self, path: str) -> None:
        try:
            import matplotlib
        except ImportError:
            raise ValueError(f"{path}: a PNG needs matplotlib (pip install matplotlib); "
                             "name an .svg file to write SVG") from None
        import warnings

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
        from matplotlib.patches import FancyBboxPatch

        dpi = 100.0
        points = 72.0 / dpi  # font sizes are in points, the shapes in pixels
        fig = plt.figure(figsize=(self.width / dpi, self.height / dpi), dpi=dpi)
        ax = fig.add_axes((0, 0, 1, 1))
        ax.set_xlim(0, self.width)
        ax.set_ylim(self.height, 0)
        ax.axis("off")
        for s in self.shapes:
            if s.kind == "line":
                ax.plot([s.x, s.x2], [s.y, s.y2], color=s.colour, linewidth=s.stroke * points * 1.3)
            elif s.kind == "rect":
                ax.add_patch(FancyBboxPatch((s.x, s.y), s.x2, s.y2, boxstyle=f"round,pad=0,rounding_size={s.stroke}",
                                            facecolor=s.colour, edgecolor="none"))
            else:
                ax.text(s.x, s.y, s.text, fontsize=s.size * points, ha={"start": "left", "end": "right"}.get(
                    s.anchor, "center"), va="baseline", color=s.colour, weight=s.weight, rotation=s.rotate,
                    rotation_mode="anchor", family="monospace")
        with warnings.catch_warnings():  # a glyph the monospace font lacks is drawn as a box, not an error
            warnings.simplefilter("ignore")
            with atomic_output(path, "wb") as f:
                fig.savefig(f, format="png", dpi=dpi * 2)
        plt.close(fig)


def text_width(text: str, size: float = FONT_SIZE) -> float:
    """Width of `text` in the monospace font: wide (CJK) characters count twice."""
    cells = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
    return cells * 0.6 * size


# ------------------------------------------------------------------------------------------------ BTG trees
@dataclass(frozen=True)
class BTGNode:
    """A node of a BTG derivation over words [start, end): kind S (straight), I (inverted) or F (phrase)."""
    kind: str
    start: int
    end: int
    children: tuple["BTGNode", ...] = ()
    height: int = 1  # levels from this node down to its words (an F node: 1)

    def order(self) -> list[int]:
        """The word indices in the order this derivation outputs them."""
        out: list[int] = []
        stack: list[BTGNode] = [self]  # iterative: a derivation can be as deep as the sentence is long
        while stack:
            node = stack.pop()
            if node.kind == "F":
                out.extend(range(node.start, node.end))
            else:
                left, right = node.children
                stack.extend([left, right] if node.kind == "I" else [right, left])
        return out


EDGE_KINDS = ("S", "I", "F", "S")  # btg.EDGE_S, EDGE_I, EDGE_F, EDGE_GLUE (a straight join of segments)


def btg_tree(edges: np.ndarray, n: int) -> BTGNode | None:
    """The tree of a derivation's edges (`btg.ParseResult.edges`: rows type, l, k, r, parents before their
    children); None for no words."""
    if n == 0:
        return None
    built: dict[tuple[int, int], BTGNode] = {}
    for t, l, k, r in reversed(np.asarray(edges).reshape(-1, 4).tolist()):  # children before their parents
        kind = EDGE_KINDS[t]
        if kind == "F":
            built[(l, r)] = BTGNode("F", l, r)
            continue
        try:
            children = (built[(l, k)], built[(k, r)])
        except KeyError:
            raise ValueError(f"the derivation has no node for the children of words {l}-{r}") from None
        built[(l, r)] = BTGNode(kind, l, r, children, 1 + max(c.height for c in children))
    if (0, n) not in built:
        raise ValueError(f"the derivation does not cover the {n} words")
    return built[(0, n)]


def xl_of_order(order: Sequence[int]) -> list[int]:
    """Word XL positions from an order (source indices in target order): xl[order[k]] = k."""
    xl = [0] * len(order)
    for k, i in enumerate(order):
        xl[i] = k
    return xl


def tree_picture(words: Sequence[str], tree: BTGNode | None, title: str = "") -> Picture:
    """A sentence's BTG tree over its words, with each word's absolute and XL position under it."""
    n = len(words)
    label_width = text_width("absolute") + 16
    margin, level_gap, node_h = 14.0, 40.0, 18.0
    order = tree.order() if tree is not None else []
    xl = xl_of_order(order)
    widths = [max(text_width(w), text_width(str(n)) * 2) + 14 for w in words]
    centres, x = [], margin + label_width
    for w in widths:
        centres.append(x + w / 2)
        x += w
    reordered = "target order: " + " ".join(words[i] for i in order)
    width = max(x + margin, margin * 2 + text_width(title) + 10, margin * 2 + text_width(reordered, 12), 420.0)
    top = margin + (22 if title else 0)
    levels = tree.height if tree is not None else 0
    words_y = top + levels * level_gap + 14
    pic = Picture(width, words_y + 78 + margin)
    if title:
        pic.add("text", margin, margin + 12, text=title, anchor="start", weight="bold")

    def span_centre(node: BTGNode) -> float:
        return (centres[node.start] + centres[node.end - 1]) / 2

    def node_y(node: BTGNode) -> float:
        return top + (levels - node.height) * level_gap + node_h / 2

    stack = [tree] if tree is not None else []
    while stack:
        node = stack.pop()
        cx, cy = span_centre(node), node_y(node)
        kind_name = {"S": "straight", "I": "inverted", "F": "phrase"}[node.kind]
        colour = {"S": STRAIGHT_COLOUR, "I": INVERTED_COLOUR, "F": PHRASE_COLOUR}[node.kind]
        targets = [(span_centre(c), node_y(c) - node_h / 2) for c in node.children] or \
                  [(centres[i], words_y - FONT_SIZE) for i in range(node.start, node.end)]
        for tx, ty in targets:
            pic.add("line", cx, cy + node_h / 2, x2=tx, y2=ty, colour=colour, stroke=1.6 if node.kind == "I" else 1)
        box = 22.0
        pic.add("rect", cx - box / 2, cy - node_h / 2, x2=box, y2=node_h, colour=colour, stroke=4,
                attrs={"class": f"node {kind_name}", "data-span": f"{node.start}-{node.end}"})
        pic.add("text", cx, cy + 4.5, text=node.kind, colour="#ffffff", weight="bold",
                attrs={"class": f"node-label {kind_name}", "data-span": f"{node.start}-{node.end}"})
        stack.extend(node.children)

    rows = (("absolute", words_y + 24), ("XL", words_y + 44))
    for name, y in rows:
        pic.add("text", margin + label_width - 10, y, text=name, anchor="end", colour="#555555", size=11)
    for i, word in enumerate(words):
        pic.add("text", centres[i], words_y, text=word, attrs={"class": "word", "data-index": i})
        pic.add("text", centres[i], rows[0][1], text=str(i), colour="#555555", size=12,
                attrs={"class": "abs", "data-index": i})
        moved = xl[i] != i
        pic.add("text", centres[i], rows[1][1], text=str(xl[i]), size=12, colour=MOVED_COLOUR if moved else "#555555",
                weight="bold" if moved else "normal", attrs={"class": "xl", "data-index": i})
    pic.add("text", margin, words_y + 70, text=reordered, anchor="start", size=12,
            attrs={"class": "reordered"})
    return pic


def legend_picture() -> Picture:
    """What the node labels and colours mean, one per line."""
    pic = Picture(0, 4 * 22 + 10)
    rows = (("S", STRAIGHT_COLOUR, "straight: its children in source order"),
            ("I", INVERTED_COLOUR, "inverted: its children swapped"),
            ("F", PHRASE_COLOUR, "phrase: words kept in source order"))
    for k, (kind, colour, what) in enumerate(rows):
        y = 8 + 22 * k
        pic.add("rect", 14, y, x2=22, y2=18, colour=colour, stroke=4)
        pic.add("text", 25, y + 13.5, text=kind, colour="#ffffff", weight="bold")
        pic.add("text", 44, y + 13.5, text=what, anchor="start", size=12)
    note = "XL position in blue: it differs from the absolute one"
    pic.add("text", 14, 8 + 22 * 3 + 13.5, text=note, anchor="start", size=12, colour=MOVED_COLOUR)
    pic.width = 28 + text_width(note, 12)
    return pic


def sentence_trees(reorderer, sentences: Sequence[Sequence[str]], titles: Sequence[str] | None = None) -> Picture:
    """One picture of the trees of `sentences` (each a list of words) under a reorderer of either kind (anything
    with `parse_batch`), stacked, with a legend."""
    parses = reorderer.parse_batch([list(s) for s in sentences])
    pictures = [tree_picture(list(words), btg_tree(parse.edges, len(words)), titles[k] if titles else "")
                for k, (words, parse) in enumerate(zip(sentences, parses))]
    out = legend_picture()
    for pic in pictures:
        out = out.below(pic)
    return out


# ------------------------------------------------------------------------------------------------ heatmaps
def heat_colour(value: float) -> str:
    """White (0) to dark blue (1)."""
    v = min(max(float(value), 0.0), 1.0)
    lo, hi = (247, 251, 255), (8, 48, 107)
    return "#" + "".join(f"{round(a + (b - a) * v):02x}" for a, b in zip(lo, hi))


def heatmap_picture(weights: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str], title: str = "",
                    col_notes: Sequence[str] | None = None, row_axis: str = "", col_axis: str = "") -> Picture:
    """A rows x columns matrix of values in [0, 1] as coloured cells with the labels beside and above them;
    `col_notes` (e.g. XL positions) go under the column labels."""
    weights = np.asarray(weights, dtype=float)
    if weights.shape != (len(row_labels), len(col_labels)):
        raise ValueError(f"weights of shape {weights.shape} for {len(row_labels)} rows and {len(col_labels)} columns")
    cell, margin = 26.0, 14.0
    left = margin + max([text_width(t) for t in row_labels] + [0.0]) + 10
    col_height = max([text_width(t) for t in col_labels] + [0.0]) * 0.87 + 12  # labels at 60 degrees
    top = margin + (22 if title else 0) + (16 if col_axis else 0) + col_height + (18 if col_notes else 0)
    width = max(left + cell * len(col_labels) + 90 + margin, margin * 2 + text_width(title) * 1.1)  # bold: wider
    height = top + cell * len(row_labels) + margin + (18 if row_axis else 0)
    pic = Picture(width, height)
    if title:
        pic.add("text", margin, margin + 12, text=title, anchor="start", weight="bold")
    if col_axis:
        pic.add("text", left, margin + (22 if title else 0) + 12, text=col_axis, anchor="start", size=11,
                colour="#555555")
    for j, label in enumerate(col_labels):
        x = left + cell * j + cell / 2
        pic.add("text", x - 4, top - (18 if col_notes else 0) - 6, text=label, anchor="start", rotate=60,
                attrs={"class": "column", "data-index": j})
        if col_notes:
            pic.add("text", x, top - 6, text=col_notes[j], size=11, colour=MOVED_COLOUR,
                    attrs={"class": "column-note", "data-index": j})
    for i, label in enumerate(row_labels):
        y = top + cell * i
        pic.add("text", left - 8, y + cell / 2 + 4.5, text=label, anchor="end", attrs={"class": "row", "data-index": i})
        for j in range(len(col_labels)):
            pic.add("rect", left + cell * j, y, x2=cell - 1, y2=cell - 1, colour=heat_colour(weights[i, j]), stroke=0,
                    attrs={"class": "cell", "data-row": i, "data-column": j, "data-weight": f"{weights[i, j]:.4f}"})
    if row_axis:
        pic.add("text", margin, height - margin + 4, text=row_axis, anchor="start", size=11, colour="#555555")
    bar_x = left + cell * len(col_labels) + 24
    steps = 10
    for s in range(steps):
        pic.add("rect", bar_x, top + s * cell * 0.6, x2=14, y2=cell * 0.6, colour=heat_colour(1 - s / (steps - 1)),
                stroke=0)
    pic.add("text", bar_x + 20, top + 9, text="1", anchor="start", size=11)
    pic.add("text", bar_x + 20, top + steps * cell * 0.6, text="0", anchor="start", size=11)
    return pic


# ------------------------------------------------------------------------------------------------ the command
def parse_line_spec(text: str) -> list[tuple[int, int]]:
    """--lines: "3", "1-4", "1-4,9" (1-based, inclusive) -> [(first, last), ...]."""
    ranges = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m or int(m.group(1)) < 1 or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise argparse.ArgumentTypeError(f"{text!r}: expected line numbers from 1, e.g. 3 or 1-4,9")
        ranges.append((int(m.group(1)), int(m.group(2) or m.group(1))))
    return ranges


def select_lines(ranges: list[tuple[int, int]] | None, count: int, path: str) -> list[int]:
    """0-based indices of the selected lines (all when `ranges` is None)."""
    if ranges is None:
        return list(range(count))
    last = max(b for _, b in ranges)
    if last > count:
        raise ValueError(f"--lines: line {last} asked for, but {path} has {count} lines")
    return sorted({i - 1 for a, b in ranges for i in range(a, b + 1)})


def run_show(args: argparse.Namespace) -> int:
    from .reorderer import load_reorderer

    model = load_reorderer(args.model)  # either kind; fails early, naming the model file, before reading the corpus
    sentences = read_tokens(args.src, allow_empty=True)
    chosen = select_lines(args.lines, len(sentences), args.src)
    empty = [i + 1 for i in chosen if not sentences[i]]
    if empty:
        raise InputError(args.src, empty[0], "empty sentence: nothing to draw")
    picture = sentence_trees(model, [sentences[i] for i in chosen],
                             [f"{os.path.basename(args.src)}:{i + 1}" for i in chosen])
    picture.save(args.out)
    logger.info("drew %d sentence%s; wrote %s", len(chosen), "" if len(chosen) == 1 else "s", args.out)
    return 0


def configure_show(parser: argparse.ArgumentParser) -> None:
    parser.epilog = """examples:
  xlpos-prep show --model en-ja.reorderer --src test.en --lines 1-3 --out tree.svg
  xlpos-prep show --model en-ja.reorderer --src test.en --lines 7 --out tree.png      # PNG: needs matplotlib

Each sentence's BTG tree as the reorderer derives it: S nodes keep their children in source order, I nodes swap
them (drawn in red), F nodes are phrases kept in order. Under each word: its absolute position and its XL position
(its index in the reordered sentence; blue where the two differ). The trained model's attention as a heatmap:
python -m xlpos.evaluation.attention_map (or the hub's attention_map())."""
    parser.add_argument("--model", required=True, help="model from `xlpos-prep train-reorderer`")
    parser.add_argument("--src", required=True, help="tokenized source sentences")
    parser.add_argument("--out", required=True, help="the picture: .svg, or .png when matplotlib is installed")
    parser.add_argument("--lines", type=parse_line_spec, metavar="SPEC",
                        help="which lines of --src to draw, 1-based: 3, 1-4 or 1-4,9 (default: every line)")
    parser.set_defaults(run=run_show)
    declare_files(parser, inputs=("model", "src"), outputs=("out",))
