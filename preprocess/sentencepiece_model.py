"""The joint sentencepiece model of a corpus: training on the tokenized words of both sides, encoding text into the
pieces fairseq binarizes, decoding hypotheses back into words.

The model keeps only <unk> among the special pieces (fairseq's dictionary adds its own <s> <pad> </s> <unk>) and
splits on whitespace with the default "▁" prefix marker, which `xlpos-prep positions` relies on to map pieces to
words. Training is seeded (`--seed`: the sample of `--input-sentence-size` lines) and writes its .model/.vocab
under temporary names renamed when complete, the .model last.

    xlpos-prep spm-train --input train.en train.de --model-prefix spm/spm --vocab-size 8000 --seed 1
    xlpos-prep spm-encode --model spm/spm.model --input test.de --output test.pieces.de
    xlpos-prep spm-decode --model spm/spm.model --input hyp.pieces --output hyp.words
"""
from __future__ import annotations

import argparse
import logging
import os
from typing import Any, Iterable, Iterator, Sequence

from .io import (SEED, WORKERS, InputError, declare_files, float_option, int_option, iter_lines,
                 remove_stale_temporaries, write_lines, writer_tag)
from .subword import unk_rate_warning

logger = logging.getLogger(__name__)


def train_model(inputs: Sequence[str], model_prefix: str, vocab_size: int, model_type: str = "unigram",
                character_coverage: float = 1.0, input_sentence_size: int = 2_000_000, threads: int = 1,
                seed: int = 1) -> None:
    """Train a sentencepiece model into MODEL_PREFIX.model/.vocab (atomically, the .model last)."""
    import sentencepiece as spm
    for path in inputs:
        if not os.path.isfile(path):
            raise InputError(path, None, "file not found")
    prefix_dir = os.path.dirname(os.path.abspath(model_prefix))
    os.makedirs(prefix_dir, exist_ok=True)
    base = os.path.basename(model_prefix)
    remove_stale_temporaries(prefix_dir, f".{base}.")  # a killed run's .model/.vocab
    tmp_prefix = os.path.join(prefix_dir, f".{base}.{writer_tag()}.spm")
    spm.set_random_generator_seed(seed)  # sampling of input_sentence_size lines
    try:
        spm.SentencePieceTrainer.train(
            input=",".join(inputs), model_prefix=tmp_prefix, vocab_size=vocab_size, model_type=model_type,
            character_coverage=character_coverage, input_sentence_size=input_sentence_size,
            shuffle_input_sentence=True, hard_vocab_limit=False, num_threads=threads, minloglevel=2,
            bos_id=-1, eos_id=-1, unk_id=0)
    except RuntimeError as e:
        raise InputError(inputs[0], None, f"sentencepiece training on {' '.join(inputs)} failed: "
                         f"{str(e).split('] ')[-1]} (vocabulary size {vocab_size}, character coverage "
                         f"{character_coverage}: set SPM_VOCAB or SPM_COVERAGE)") from None
    for ext in ("vocab", "model"):  # model last
        os.replace(f"{tmp_prefix}.{ext}", f"{model_prefix}.{ext}")


def load_model(path: str) -> Any:
    import sentencepiece as spm
    if not os.path.isfile(path):
        raise InputError(path, None, "sentencepiece model not found")
    return spm.SentencePieceProcessor(model_file=path)


def encode_file(model: str, input_path: str, output: str) -> None:
    """Text -> space-separated pieces; warns when the model does not fit the text (many <unk>)."""
    sp = load_model(model)
    unk, counts = sp.unk_id(), [0, 0]  # <unk> pieces, pieces

    def encoded() -> Iterator[str]:  # streamed: a corpus is never held
        for line in iter_lines(input_path):
            pieces = sp.encode(line, out_type=str)
            counts[0] += sum(sp.piece_to_id(p) == unk for p in pieces)
            counts[1] += len(pieces)
            yield " ".join(pieces)

    write_lines(output, encoded())
    warning = unk_rate_warning(counts[0], counts[1], model, input_path)
    if warning:
        logger.warning("%s", warning)


def decode_lines(model: str, lines: Iterable[str]) -> Iterator[str]:
    """Space-separated pieces -> words (the tokenized text sentencepiece was trained on), one line at a time."""
    sp = load_model(model)
    return (sp.decode_pieces(line.split()) for line in lines)


def run_spm_train(args: argparse.Namespace) -> int:
    train_model(args.input, args.model_prefix, args.vocab_size, args.model_type, args.character_coverage,
                args.input_sentence_size, args.threads, args.seed)
    return 0


def configure_spm_train(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", nargs="+", required=True, help="tokenized text files (both sides: a joint model)")
    p.add_argument("--model-prefix", required=True)
    p.add_argument("--vocab-size", type=int_option(2, 10_000_000), required=True)
    p.add_argument("--model-type", default="unigram", choices=["unigram", "bpe"])
    p.add_argument("--character-coverage", type=float_option(0, 1, lo_open=True), default=1.0)
    p.add_argument("--input-sentence-size", type=int_option(0, 10**12), default=2000000)
    p.add_argument("--threads", type=WORKERS, default=os.cpu_count() or 1)
    p.add_argument("--seed", type=SEED, default=1)
    p.set_defaults(run=run_spm_train)
    declare_files(p, inputs=("input",), derived_outputs=lambda a: [("--model-prefix", a.model_prefix + ext)
                                                                   for ext in (".model", ".vocab")])


def run_spm_encode(args: argparse.Namespace) -> int:
    encode_file(args.model, args.input, args.output)
    return 0


def run_spm_decode(args: argparse.Namespace) -> int:
    write_lines(args.output, decode_lines(args.model, iter_lines(args.input)))
    return 0


def _model_input_output(p: argparse.ArgumentParser, run) -> None:
    p.add_argument("--model", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.set_defaults(run=run)
    declare_files(p, inputs=("model", "input"), outputs=("output",))


def configure_spm_encode(p: argparse.ArgumentParser) -> None:
    _model_input_output(p, run_spm_encode)


def configure_spm_decode(p: argparse.ArgumentParser) -> None:
    _model_input_output(p, run_spm_decode)
