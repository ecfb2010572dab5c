"""`xlpos-prep`: one subcommand per pipeline step; each step's module configures its own parser.

Modules are imported only for the chosen subcommand, so `xlpos-prep oracle` never pays for numba or fairseq. This
package never imports the fairseq plugin (`xlpos`): the plugin builds on it, not the other way round.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from .io import OneLineParser, run_cli

# name -> (module, one-line help). Each module defines `configure_<name with _>(parser)`, which adds the
# arguments and sets `parser.set_defaults(run=callable(args) -> int|None)`.
COMMANDS: dict[str, tuple[str, str]] = {
    "align": (__package__ + ".align", "word-align a parallel corpus with eflomal + symmetrization (Pharaoh output)"),
    "oracle": (__package__ + ".oracle", "alignments -> oracle reordering ranks (lader's definition)"),
    "train-reorderer": (__package__ + ".reorderer", "train the discriminative BTG reorderer on oracle ranks"),
    "reorder": (__package__ + ".reorderer", "reorder source sentences into target order with a trained model"),
    "positions": (__package__ + ".subword", "words + order + sentencepiece model -> piece-level XL positions"),
    "evaluate": (__package__ + ".metrics", "Kendall tau and fuzzy reordering score of an order file vs oracle ranks"),
    "preprocess": (__package__ + ".token_data_bin", "tokenized text -> fairseq-preprocess's data-bin (dictionaries, "
                                                     "tokens), without fairseq"),
    "binarize": (__package__ + ".binarize", "validate and binarize .xlpos files into a fairseq data-bin"),
    "synth": (__package__ + ".synthetic", "generate a synthetic parallel corpus with nested reordering"),
    "show": (__package__ + ".show", "draw sentences' BTG trees with each word's absolute and XL position (SVG/PNG)"),
    # the whole pipeline, and the completion rule for a recipe's own commands
    "prepare": (__package__ + ".pipeline", "tokenized splits -> reorderer, sentencepiece, pieces, XL positions, "
                                          "data-bin (resumable)"),
    "step": (__package__ + ".pipeline", "run a command unless the step making its outputs completed; mark it"),
    # text steps around the pipeline
    "tokenize": (__package__ + ".text", "word-tokenize raw text (sacremoses; fugashi for ja, jieba for zh)"),
    "detokenize": (__package__ + ".text", "words -> text (sacremoses; no spaces for ja/zh)"),
    "clean": (__package__ + ".text", "drop empty, over-long and badly length-matched training pairs"),
    "check-parallel": (__package__ + ".text", "files exist, have the same line count and no empty line"),
    "spm-train": (__package__ + ".sentencepiece_model", "train a joint sentencepiece model on tokenized text"),
    "spm-encode": (__package__ + ".sentencepiece_model", "text -> space-separated sentencepiece pieces"),
    "spm-decode": (__package__ + ".sentencepiece_model", "space-separated pieces -> words"),
    "train": (__package__ + ".systems", "fairseq-train of one named system (baseline, xl-input, head-k2-l01, ...), "
                                        "a resumable step (needs fairseq)"),
    "translate": (__package__ + ".translate", "fairseq-generate -> best hypotheses in input order -> words "
                                              "(needs fairseq)"),
    "hypotheses": (__package__ + ".scoring", "best hypotheses of fairseq-generate output, in input order"),
    "score": (__package__ + ".scoring", "sacreBLEU (and optionally RIBES) of a hypothesis file, as JSON"),
    "report": (__package__ + ".scoring", "the results table of a recipe's score files"),
}

EPILOG = """examples:
  xlpos-prep align --src train.en --tgt train.ja --out train.align
  xlpos-prep oracle --src train.en --align train.align --out train.oracle
  xlpos-prep train-reorderer --src train.en --oracle train.oracle --model en-ja.reorderer
  xlpos-prep reorder --model en-ja.reorderer --src test.en --out test.order --workers 2
  xlpos-prep positions --src test.en --order test.order --spm spm.model --out test.xlpos
  xlpos-prep evaluate --order test.order --oracle test.oracle
  xlpos-prep show --model en-ja.reorderer --src test.en --lines 1-3 --out tree.svg   # trees and XL positions
  xlpos-prep prepare --work work --src ja --tgt en --workers 2      # every step above, resumable
"""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="xlpos-prep", description="The xlpos reordering pipeline.", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == command:
            configure = getattr(importlib.import_module(module), "configure_" + name.replace("-", "_"))
            configure(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command if command in COMMANDS else None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s")
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return run_cli(f"xlpos-prep {args.command}", args, args.run, subparsers.choices[args.command])


if __name__ == "__main__":
    sys.exit(main())
