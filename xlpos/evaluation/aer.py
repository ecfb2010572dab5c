"""Word alignment quality against a gold standard: alignment error rate (Och & Ney 2003), precision and recall.

Gold files: one line per sentence, links `i-j` (source word i, target word j) in Pharaoh order, 0-based or 1-based
(`one_based`). Gold sets that distinguish sure from possible links mark them in the link: `iSj` sure, `iPj` and
`i?j` possible (the `?` convention of the De-En and Ro-En gold sets, the S/P letters of the NAACL 2003 shared
task). A plain `i-j` is sure unless `dash="possible"` says the file marks possible links with dashes. Sure links
are possible too (S is a subset of P), as AER requires.

With A the predicted links, S the sure and P the possible ones, summed over the corpus:
    precision = |A & P| / |A|,  recall = |A & S| / |S|,  AER = 1 - (|A & S| + |A & P|) / (|A| + |S|).

This module imports neither fairseq nor torch.

    python -m xlpos.evaluation.aer --gold test.gold-align --pred test.eflomal.align [--one-based] [--reverse-gold]
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

Link = tuple[int, int]  # (source word, target word), 0-based
_LINK = re.compile(r"^(\d+)([-SsPp?])(\d+)$")


@dataclass(frozen=True)
class GoldAlignment:
    """The gold links of one sentence; `possible` includes the sure links."""
    sure: frozenset[Link]
    possible: frozenset[Link]


@dataclass(frozen=True)
class AlignmentScore:
    aer: float
    precision: float
    recall: float
    sentences: int
    predicted_links: int
    sure_links: int
    possible_links: int           # sure ones included
    hits_sure: int                # |A & S|
    hits_possible: int            # |A & P|


def parse_gold_line(line: str, *, one_based: bool = False, dash: str = "sure", reverse: bool = False,
                    where: str = "") -> GoldAlignment:
    """One gold line; `where` ("file:line") prefixes the error of a malformed link."""
    if dash not in ("sure", "possible"):
        raise ValueError(f"dash must be 'sure' or 'possible', not {dash!r}")
    sure, possible = set(), set()
    for token in line.split():
        m = _LINK.match(token)
        if not m:
            raise ValueError(f"{where}: bad link {token!r} (expected i-j, iSj, iPj or i?j)")
        i, kind, j = int(m.group(1)), m.group(2), int(m.group(3))
        if one_based:
            if i == 0 or j == 0:
                raise ValueError(f"{where}: link {token!r} has index 0 in a 1-based file")
            i, j = i - 1, j - 1
        link = (j, i) if reverse else (i, j)
        possible.add(link)
        if kind in "Ss" or (kind == "-" and dash == "sure"):
            sure.add(link)
    return GoldAlignment(frozenset(sure), frozenset(possible))


def read_gold(path: str, **options) -> list[GoldAlignment]:
    """Every line of a gold file (see parse_gold_line for the options)."""
    with open(path, encoding="utf-8") as f:
        return [parse_gold_line(line, where=f"{path}:{k}", **options) for k, line in enumerate(f, 1)]


def parse_links(line: str, where: str = "") -> frozenset[Link]:
    """A predicted Pharaoh line: 0-based `i-j` links."""
    out = set()
    for token in line.split():
        i, sep, j = token.partition("-")
        if not sep or not i.isdigit() or not j.isdigit():
            raise ValueError(f"{where}: bad link {token!r} (expected i-j)")
        out.add((int(i), int(j)))
    return frozenset(out)


def read_links(path: str) -> list[frozenset[Link]]:
    """Every line of a predicted Pharaoh file (see parse_links)."""
    with open(path, encoding="utf-8") as f:
        return [parse_links(line, f"{path}:{k}") for k, line in enumerate(f, 1)]


def format_links(links: Iterable[Link]) -> str:
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


def score_alignments(predicted: Sequence[Iterable[Link]], gold: Sequence[GoldAlignment]) -> AlignmentScore:
    """Corpus-level AER, precision and recall of predicted links against gold sure/possible links."""
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted sentences for {len(gold)} gold sentences")
    n_a = n_s = n_p = a_s = a_p = 0
    for links, g in zip(predicted, gold):
        a = set(links)
        n_a, n_s, n_p = n_a + len(a), n_s + len(g.sure), n_p + len(g.possible)
        a_s += len(a & g.sure)
        a_p += len(a & g.possible)
    # an empty prediction has no precision to speak of; an empty sure set no recall: both count as 0
    precision = a_p / n_a if n_a else 0.0
    recall = a_s / n_s if n_s else 0.0
    aer = 1.0 - (a_s + a_p) / (n_a + n_s) if n_a + n_s else 0.0
    return AlignmentScore(round(aer, 6), round(precision, 6), round(recall, 6), len(gold), n_a, n_s, n_p, a_s, a_p)


def add_gold_options(p: argparse.ArgumentParser) -> None:
    """The gold-file options shared by this command and align_attention."""
    p.add_argument("--one-based", action="store_true", help="the gold file's indices start at 1")
    p.add_argument("--dash", choices=("sure", "possible"), default="sure",
                   help="what a plain i-j link is in the gold file (default sure; iSj is sure, iPj and i?j "
                        "possible)")
    p.add_argument("--reverse-gold", action="store_true",
                   help="the gold file is target-source (j-i): swap its links")


def gold_options(args: argparse.Namespace) -> dict:
    return {"one_based": args.one_based, "dash": args.dash, "reverse": args.reverse_gold}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xlpos.evaluation.aer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gold", required=True, help="gold alignment file")
    p.add_argument("--pred", required=True, help="predicted alignment, Pharaoh i-j, 0-based, source-target")
    add_gold_options(p)
    args = p.parse_args(argv)
    try:
        gold = read_gold(args.gold, **gold_options(args))
        pred = read_links(args.pred)
    except (ValueError, OSError) as e:
        raise SystemExit(str(e))
    if len(pred) != len(gold):
        raise SystemExit(f"{args.pred}: {len(pred)} lines but {args.gold} has {len(gold)}")
    s = score_alignments(pred, gold)
    print(f"{args.pred} against {args.gold} ({s.sentences} sentences, {s.sure_links} sure / {s.possible_links} "
          f"possible gold links, {s.predicted_links} predicted): AER {s.aer:.4f} precision {s.precision:.4f} "
          f"recall {s.recall:.4f}")
    print(asdict(s), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
