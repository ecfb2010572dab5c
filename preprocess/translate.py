"""Decoding a binarized set with a trained model, once for the recipes (`xlpos-prep translate`) and
benchmarks/bleu.py: fairseq-generate -> the best hypothesis of every sentence in input order -> sentencepiece
decoding into words. fairseq runs as a child process; this module never imports it (nor torch).

    xlpos-prep translate --data-bin data-bin --path checkpoints/xl-input/checkpoint_best.pt --source-lang ja \
        --target-lang en --spm spm/spm.model --expected 500 --out-dir out/xl-input --system xl-input -- \
        --beam 4 --lenpen 1.0 --cpu

writes OUT_DIR/generate.txt (fairseq-generate's output; its log beside it), OUT_DIR/SUBSET.pieces and
OUT_DIR/SUBSET.words, each a step skipped when it completed.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from .io import command_record, declare_files, directory_lock, int_option
from .pipeline import Steps, run_logged, write_lines
from .scoring import read_hypotheses
from .sentencepiece_model import decode_lines


def generate_command(data_bin: str | os.PathLike, checkpoint: str | os.PathLike, source_lang: str, target_lang: str,
                     subset: str, fairseq_args: Sequence[str]) -> list[str]:
    """fairseq-generate of one subset; --required-batch-size-multiple 1 because fairseq 0.12 otherwise drops the
    last batch when its size is not a multiple of 8, i.e. up to 7 sentences (facebookresearch/fairseq#5036)."""
    return [sys.executable, "-m", "fairseq_cli.generate", os.fspath(data_bin), "--source-lang", source_lang,
            "--target-lang", target_lang, "--gen-subset", subset, "--path", os.fspath(checkpoint),
            *fairseq_args, "--required-batch-size-multiple", "1"]


def generate(output: str | os.PathLike, log_path: str | os.PathLike, data_bin: str | os.PathLike,
             checkpoint: str | os.PathLike, source_lang: str, target_lang: str, subset: str,
             fairseq_args: Sequence[str]) -> None:
    """fairseq-generate's output into `output` (atomically), its log into `log_path`."""
    run_logged(generate_command(data_bin, checkpoint, source_lang, target_lang, subset, fairseq_args), log_path,
               stdout_path=output)


def hypothesis_words(generate_output: str | os.PathLike, expected: int, spm_model: str) -> tuple[list[str], list[str]]:
    """(pieces, words) of the best hypothesis of every input id, in input order."""
    pieces = read_hypotheses(os.fspath(generate_output), expected)
    return pieces, list(decode_lines(spm_model, pieces))


def run_translate(args: argparse.Namespace) -> int:
    out = Path(args.out_dir)
    fairseq_args = args.fairseq_args[1:] if args.fairseq_args[:1] == ["--"] else args.fairseq_args
    if args.system:  # its task and XL options, as it was trained (xlpos-prep train)
        from .systems import parse_system, task_args
        fairseq_args = [*task_args(parse_system(args.system)), *fairseq_args]
    generated = out / "generate.txt"
    command = generate_command(args.data_bin, args.path, args.source_lang, args.target_lang, args.subset,
                               fairseq_args)
    # the checkpoint (by its identity: another --path, or the same file retrained, redoes the step), the data and
    # every option are what the translations are made from; the interpreter and the plugin's directory are not
    words = list(command[3:])
    while "--user-dir" in words:
        del words[words.index("--user-dir"):words.index("--user-dir") + 2]
    recorded, inputs = command_record(["fairseq-generate", *words], [generated])
    pieces, words_out = out / f"{args.subset}.pieces", out / f"{args.subset}.words"

    def decode() -> None:
        piece_lines, text = hypothesis_words(generated, args.expected, args.spm)
        write_lines(pieces, piece_lines)
        write_lines(words_out, text)

    with directory_lock(out):
        steps = Steps()
        # fairseq-generate may end with status 0 having translated fewer sentences than asked (inputs over
        # --max-source-positions skipped): such an output is not a completed step
        steps.step("generate", [generated], lambda: generate(generated, out / "generate.log", args.data_bin,
                                                             args.path, args.source_lang, args.target_lang,
                                                             args.subset, fairseq_args),
                   inputs=inputs, settings={"fairseq-generate": recorded},
                   verify=lambda: read_hypotheses(os.fspath(generated), args.expected))
        steps.step("hypotheses", [pieces, words_out], decode, inputs=[generated, args.spm],
                   settings={"expected": args.expected})
    return 0


def configure_translate(p: argparse.ArgumentParser) -> None:
    p.usage = ("xlpos-prep translate --data-bin DIR --path CHECKPOINT --source-lang S --target-lang T --spm MODEL "
               "--expected N --out-dir DIR [--subset test] [--system NAME] [-- FAIRSEQ-GENERATE OPTIONS]")
    p.add_argument("--data-bin", required=True)
    p.add_argument("--path", required=True, help="the checkpoint")
    p.add_argument("--source-lang", required=True)
    p.add_argument("--target-lang", required=True)
    p.add_argument("--subset", default="test")
    p.add_argument("--system", help="the system's name (xlpos-prep train): its task and XL options come first")
    p.add_argument("--spm", required=True, help="the sentencepiece model of the pieces")
    p.add_argument("--expected", type=int_option(0, 10**12), required=True, help="sentences in the subset")
    p.add_argument("--out-dir", required=True)
    p.add_argument("fairseq_args", nargs=argparse.REMAINDER,
                   help="after --: further fairseq-generate options (task, beam, device, ...)")
    p.set_defaults(run=run_translate)
    declare_files(p, inputs=("path", "spm"), input_dirs=("data_bin",))

