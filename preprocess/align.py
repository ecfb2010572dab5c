"""Word alignment: eflomal in both directions, then symmetrization (Koehn's heuristics) implemented here.

`xlpos-prep align --src S --tgt T --out ALIGN` writes Pharaoh "i-j" links (0-based, source-target), sorted, one
line per sentence pair.

Reproducibility: eflomal 2.0 seeds its samplers from /dev/urandom and has no seed option, so two runs on the same
corpus give slightly different alignments. Keep the alignment file (recipes skip a step whose output exists);
everything downstream of it is deterministic.

Symmetrization follows the pseudo-code of Koehn (statmt.org "grow-diag-final", Koehn et al. 2003), with the
source word as the outer loop ("e") and the target word as the inner one ("f"):
  intersection, union;
  grow-diag: start from the intersection; repeat passes until nothing is added: for every aligned point, in
    row-major order and seeing points added earlier in the same pass, add each of its 8 neighbours (in the order
    left/up/right/down, then the diagonals) that is in the union and whose source word or target word is still
    unaligned;
  grow-diag-final: grow-diag, then FINAL(forward) and FINAL(reverse): add each (row-major) directional point
    whose source word or target word is still unaligned;
  grow-diag-final-and: as grow-diag-final, but FINAL-AND adds a point only when both words are unaligned.
The forward direction (eflomal's source-to-target model) is finalized before the reverse one.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import tempfile
import time
from typing import Any, Iterable, Iterator, Sequence

from .io import (SEED, ExternalToolError, InputError, atomic_output, check_same_length, count_lines, count_sentences,
                 declare_files, float_option, int_option, iter_lines, iter_tokens, private_temp_dir, run_child,
                 write_lines)

logger = logging.getLogger(__name__)

HEURISTICS = ("intersection", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and")
# Measured with eflomal 2.0: a sentence of 1024 or more tokens comes back with no links at all, silently.
EFLOMAL_MAX_TOKENS = 1023
_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))

Link = tuple[int, int]


def symmetrize(fwd: set[Link], rev: set[Link], n_src: int, n_tgt: int, heuristic: str) -> list[Link]:
    """Combine two directional alignments of one sentence pair (both as (source, target) links); sorted links."""
    if heuristic not in HEURISTICS:
        raise ValueError(f"unknown symmetrization heuristic {heuristic!r}; choose from {', '.join(HEURISTICS)}")
    for i, j in fwd | rev:
        if not (0 <= i < n_src and 0 <= j < n_tgt):
            raise ValueError(f"link {i}-{j} out of range for a {n_src}x{n_tgt} sentence pair")
    if heuristic == "intersection":
        return sorted(fwd & rev)
    union = fwd | rev
    if heuristic == "union":
        return sorted(union)

    alignment = set(fwd & rev)
    src_aligned = [False] * n_src
    tgt_aligned = [False] * n_tgt
    for i, j in alignment:
        src_aligned[i] = tgt_aligned[j] = True

    def add(i: int, j: int) -> None:
        alignment.add((i, j))
        src_aligned[i] = tgt_aligned[j] = True

    added = True
    while added:
        added = False
        for i in range(n_src):
            if not src_aligned[i]:
                continue
            for j in range(n_tgt):
                if (i, j) not in alignment:
                    continue
                for di, dj in _NEIGHBOURS:
                    point = (i + di, j + dj)
                    # union membership implies the point is inside the sentence pair
                    if point in union and point not in alignment and (
                            not src_aligned[point[0]] or not tgt_aligned[point[1]]):
                        add(*point)
                        added = True
    if heuristic == "grow-diag":
        return sorted(alignment)

    both_unaligned = heuristic == "grow-diag-final-and"
    for directional in (fwd, rev):
        for i, j in sorted(directional):
            if (i, j) in alignment:
                continue
            if both_unaligned:
                ok = not src_aligned[i] and not tgt_aligned[j]
            else:
                ok = not src_aligned[i] or not tgt_aligned[j]
            if ok:
                add(i, j)
    return sorted(alignment)


def format_links(links: list[Link]) -> str:
    return " ".join(f"{i}-{j}" for i, j in links)


def _iter_eflomal_links(path: str, n_expected: int) -> Iterator[set[Link]]:
    """The links of each sentence pair in an eflomal links file, one line at a time."""
    n = count_lines(path)
    if n != n_expected:
        raise ExternalToolError(f"eflomal wrote {n} alignment lines for {n_expected} sentence pairs")
    for line in iter_lines(path):
        yield {(int(i), int(j)) for i, j in (tok.split("-") for tok in line.split())}


class _EflomalProcess:
    """Stands in for the `subprocess` module inside eflomal's Cython wrapper, which starts the eflomal binary
    with subprocess.run (eflomal 2.0; .call in older releases): the binary then dies with this process and is
    killed when this process is interrupted, instead of running on as an orphan."""

    @staticmethod
    def run(args: Sequence[str], check: bool = False, **kwargs: Any) -> Any:
        status = run_child(args, **kwargs)
        if check and status != 0:
            raise ExternalToolError(f"eflomal exited with status {status}")
        return _Completed(status)

    @staticmethod
    def call(args: Sequence[str], **kwargs: Any) -> int:
        return run_child(args, **kwargs)


class _Completed:
    def __init__(self, returncode: int):
        self.returncode = returncode


@contextlib.contextmanager
def _eflomal_confined(directory: str) -> Iterator[None]:
    """eflomal's temporaries (NamedTemporaryFile in the default temp dir) go to `directory`, and its binary
    runs as a child that dies with us, for the duration of the block."""
    import eflomal.cython as eflomal_cython

    saved_tempdir, saved_subprocess = tempfile.tempdir, getattr(eflomal_cython, "subprocess", None)
    tempfile.tempdir = directory
    eflomal_cython.subprocess = _EflomalProcess
    try:
        yield
    finally:
        tempfile.tempdir = saved_tempdir
        eflomal_cython.subprocess = saved_subprocess


@contextlib.contextmanager
def eflomal_link_files(sources: Iterable[str], targets: Iterable[str], directions: tuple[str, ...], *,
                       model: int = 3, n_samplers: int = 3, rel_iterations: float = 1.0, null_prior: float = 0.2,
                       quiet: bool = True) -> Iterator[dict[str, str]]:
    """eflomal's link files, {direction: path} for each of `directions` ("forward", "reverse"; links as (source,
    target)), for the block. `sources` and `targets` are the sentences' lines, read once (eflomal keeps its own
    compact copy of the corpus, which its sampler needs; this side holds nothing)."""
    import eflomal  # imported here so `xlpos-prep --help` and the other steps never need it

    aligner = eflomal.Aligner(model=model, n_samplers=n_samplers, rel_iterations=rel_iterations,
                              null_prior=null_prior)
    # One private directory holds our link files and eflomal's own temporaries; a SIGKILLed run's directory is
    # removed by the next run (private_temp_dir), and the binary dies with us (_EflomalProcess).
    with private_temp_dir("align") as tmp, _eflomal_confined(tmp):
        paths = {d: os.path.join(tmp, d) for d in directions}
        aligner.align(sources, targets, links_filename_fwd=paths.get("forward"),
                      links_filename_rev=paths.get("reverse"), quiet=quiet)
        yield paths


def run_eflomal(sources: list[list[str]], targets: list[list[str]], directions: tuple[str, ...],
                **options: Any) -> dict[str, list[set[Link]]]:
    """eflomal links per sentence pair for each of `directions`, held (eflomal_link_files' options)."""
    with eflomal_link_files([" ".join(s) for s in sources], [" ".join(t) for t in targets], directions,
                            **options) as paths:
        return {d: list(_iter_eflomal_links(p, len(sources))) for d, p in paths.items()}


def run_align(args: argparse.Namespace) -> int:
    # Streamed: eflomal reads the sentences once into its own compact copy, the links are read back a sentence
    # pair at a time, so this process holds no corpus (WMT recipes align a million pairs).
    n = count_sentences(args.src)
    check_same_length(args.src, n, args.tgt, count_sentences(args.tgt))
    if args.seed is not None:
        logger.warning("--seed %d: eflomal 2.0 seeds itself from /dev/urandom and takes no seed, so this run's "
                       "alignments may differ slightly from another's; keep %s to reproduce", args.seed, args.out)
    directions = ("forward", "reverse") if args.direction == "both" else (args.direction,)
    if args.fwd_out and "forward" not in directions or args.rev_out and "reverse" not in directions:
        raise ValueError("--fwd-out/--rev-out need the corresponding direction (--direction both)")
    logger.info("aligning %d sentence pairs (%s; eflomal model %d, %d samplers)", n, "+".join(directions),
                args.model, args.samplers)

    def sentences(path: str) -> Iterator[str]:  # checked as eflomal reads them: empty and over-long lines
        return (" ".join(words) for words in iter_tokens(path, max_len=args.max_len))

    started = time.perf_counter()
    with eflomal_link_files(sentences(args.src), sentences(args.tgt), directions, model=args.model,
                            n_samplers=args.samplers, rel_iterations=args.rel_iterations,
                            null_prior=args.null_prior, quiet=not args.verbose) as paths:
        logger.info("eflomal took %.1f s", time.perf_counter() - started)
        for direction, out_path in (("forward", args.fwd_out), ("reverse", args.rev_out)):
            if out_path:
                write_lines(out_path, (format_links(sorted(links))
                                       for links in _iter_eflomal_links(paths[direction], n)))
        started = time.perf_counter()
        n_links = n_src_words = n_src_aligned = n_tgt_words = n_tgt_aligned = 0
        link_lines = zip(*(_iter_eflomal_links(paths[d], n) for d in directions))
        with atomic_output(args.out) as out:
            for k, (src, tgt, links) in enumerate(zip(iter_tokens(args.src), iter_tokens(args.tgt), link_lines), 1):
                if len(directions) == 2:
                    try:
                        final = symmetrize(links[0], links[1], len(src), len(tgt), args.sym)
                    except ValueError as e:  # eflomal output inconsistent with the input: name the pair
                        raise InputError(args.src, k, f"eflomal: {e}") from None
                else:
                    final = sorted(links[0])
                out.write(format_links(final) + "\n")
                n_links += len(final)
                n_src_words += len(src)
                n_tgt_words += len(tgt)
                n_src_aligned += len({i for i, _ in final})
                n_tgt_aligned += len({j for _, j in final})
    logger.info("%s: %d links; %.1f%% of source and %.1f%% of target words aligned (symmetrization %.1f s); "
                "wrote %s", args.sym if len(directions) == 2 else directions[0], n_links,
                100.0 * n_src_aligned / n_src_words, 100.0 * n_tgt_aligned / n_tgt_words,
                time.perf_counter() - started, args.out)
    return 0


def configure_align(parser: argparse.ArgumentParser) -> None:
    parser.epilog = """examples:
  xlpos-prep align --src train.en --tgt train.ja --out train.align
  xlpos-prep align --src train.en --tgt train.ja --out train.align --sym intersection \\
      --fwd-out train.fwd.align --rev-out train.rev.align
  xlpos-prep align --src train.en --tgt train.ja --out train.fwd.align --direction forward

Align train+dev(+test) sources together: eflomal is unsupervised, and more text gives better alignments.
eflomal seeds itself from /dev/urandom (no seed option), so reruns differ slightly: keep the output file."""
    parser.add_argument("--src", required=True, help="tokenized source sentences")
    parser.add_argument("--tgt", required=True, help="tokenized target sentences, parallel to --src")
    parser.add_argument("--out", required=True, help="output Pharaoh alignment (written atomically)")
    parser.add_argument("--sym", choices=HEURISTICS, default="grow-diag-final-and",
                        help="symmetrization heuristic (default grow-diag-final-and)")
    parser.add_argument("--direction", choices=("both", "forward", "reverse"), default="both",
                        help="'forward'/'reverse' write that single eflomal direction without symmetrization")
    parser.add_argument("--fwd-out", help="also write the forward (source-to-target) links here")
    parser.add_argument("--rev-out", help="also write the reverse (target-to-source) links here, as source-target")
    parser.add_argument("--model", type=int, choices=(1, 2, 3), default=3,
                        help="eflomal model: 1 IBM1, 2 +HMM, 3 +HMM+fertility (default 3)")
    parser.add_argument("--samplers", type=int_option(1, 64), default=3,
                        help="independent eflomal samplers (default 3)")
    parser.add_argument("--rel-iterations", type=float_option(0, 100, lo_open=True), default=1.0,
                        help="eflomal iterations relative to its default schedule (default 1.0)")
    parser.add_argument("--null-prior", type=float_option(0, 1, lo_open=True), default=0.2,
                        help="eflomal NULL prior (default 0.2)")
    parser.add_argument("--seed", type=SEED, default=None,
                        help="accepted for the pipeline's common interface, but eflomal 2.0 cannot be seeded "
                             "(it reads /dev/urandom): a warning says so; keep the alignment file to reproduce")
    parser.add_argument("--max-len", type=int_option(1, EFLOMAL_MAX_TOKENS), default=EFLOMAL_MAX_TOKENS,
                        help=f"reject sentences longer than this many tokens (default and maximum "
                             f"{EFLOMAL_MAX_TOKENS}: eflomal silently leaves longer sentences unaligned)")
    parser.set_defaults(run=run_align)
    declare_files(parser, inputs=("src", "tgt"), outputs=("out", "fwd_out", "rev_out"))
