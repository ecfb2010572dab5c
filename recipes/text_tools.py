#!/usr/bin/env python
"""Text processing steps of the recipes: tokenization, cleaning, sentencepiece, hypotheses, scoring, report.

Every subcommand reads and writes files (never stdin/stdout for corpora) and writes its output atomically, so a
recipe step either produced its complete output or nothing, and a rerun skips it only when it finished.

    python recipes/text_tools.py tokenize --lang de --normalize --input raw.de --output tok.de --workers 4
    python recipes/text_tools.py spm-train --input train.en train.de --model-prefix spm --vocab-size 32000
    python recipes/text_tools.py score --hyp hyp.de --ref test.de --system xl-input --out xl-input.json

Tokenizers are maintained libraries: sacremoses (Moses rules) for European languages, fugashi with unidic-lite for
Japanese, jieba for Chinese; the last two come with `pip install -e '.[recipes]'`.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from functools import partial
from multiprocessing import Pool
from typing import Callable, Iterable, Iterator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from xlpos_prep.io import (SEED, WORKERS, InputError, OneLineParser, atomic_output, check_same_length,  # noqa: E402
                           declare_files, float_option, int_option, pool_worker_setup, read_lines,
                           remove_stale_temporaries, run_command, writer_tag)

CHUNK = 2000  # lines per task when tokenizing with several workers


def fail(message: str) -> None:
    print(f"text_tools: error: {message}", file=sys.stderr)
    sys.exit(1)


def write_lines(path: str, lines: Iterable[str]) -> int:
    n = 0
    with atomic_output(path) as f:
        for line in lines:
            f.write(line + "\n")
            n += 1
    return n


# ---------------------------------------------------------------------------------------------------- tokenizers
_TOKENIZER: Callable[[str], list[str]] | None = None


def _make_tokenizer(lang: str, normalize: bool, lowercase: bool) -> Callable[[str], list[str]]:
    if lang == "ja":
        try:
            import fugashi
        except ImportError:
            fail("Japanese needs fugashi with a dictionary: pip install -e '.[recipes]' (fugashi[unidic-lite])")
        tagger = fugashi.Tagger()

        def segment(text: str) -> list[str]:
            return [w.surface for w in tagger(text) if w.surface.strip()]
    elif lang == "zh":
        try:
            import jieba
        except ImportError:
            fail("Chinese needs jieba: pip install -e '.[recipes]'")
        import logging
        jieba.setLogLevel(logging.WARNING)

        def segment(text: str) -> list[str]:
            return [w for w in jieba.cut(text) if w.strip()]
    else:
        from sacremoses import MosesTokenizer
        moses = MosesTokenizer(lang=lang)

        def segment(text: str) -> list[str]:
            # aggressive dash splitting and no XML escaping, as in fairseq's WMT preparation scripts
            return moses.tokenize(text, escape=False, aggressive_dash_splits=True)
    normalizer: Callable[[str], str] | None = None
    if normalize and lang in ("ja", "zh"):
        import unicodedata
        # NFKC: full-width Latin letters and digits to ASCII, half-width katakana to full-width; keeps 。、
        normalizer = partial(unicodedata.normalize, "NFKC")
    elif normalize:
        from sacremoses import MosesPunctNormalizer
        normalizer = MosesPunctNormalizer(lang=lang, pre_replace_unicode_punct=True,
                                          post_remove_control_chars=True).normalize

    def tokenize(line: str) -> list[str]:
        if normalizer is not None:
            line = normalizer(line)
        line = " ".join(line.split())  # collapse whitespace; tokens never contain spaces
        tokens = [t for tok in segment(line) for t in tok.split()]
        return [t.lower() for t in tokens] if lowercase else tokens
    return tokenize


def _init_worker(lang: str, normalize: bool, lowercase: bool) -> None:
    global _TOKENIZER
    _TOKENIZER = _make_tokenizer(lang, normalize, lowercase)


def _tokenize_chunk(lines: list[str]) -> list[str]:
    assert _TOKENIZER is not None
    return [" ".join(_TOKENIZER(line)) for line in lines]


def _line_chunks(path: str) -> Iterator[list[str]]:
    """CHUNK lines at a time, so that a multi-million-line corpus is never held in memory at once."""
    chunk: list[str] = []
    with open(path, "rb") as f:
        for k, raw in enumerate(f, 1):
            try:
                chunk.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as e:
                raise InputError(path, k, f"not valid UTF-8 ({e.reason})") from None
            if len(chunk) == CHUNK:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def _init_pool_worker(*init) -> None:
    pool_worker_setup()
    _init_worker(*init)


def cmd_tokenize(args: argparse.Namespace) -> None:
    from tqdm import tqdm
    init = (args.lang, args.normalize, args.lowercase)
    bar = tqdm(desc=f"tokenize {os.path.basename(args.input)}", unit=" lines", file=sys.stderr, leave=False)
    n = 0
    with atomic_output(args.output) as out:
        if args.workers > 1:
            with Pool(args.workers, initializer=_init_pool_worker, initargs=init) as pool:
                for done in pool.imap(_tokenize_chunk, _line_chunks(args.input)):
                    out.writelines(line + "\n" for line in done)
                    n += len(done)
                    bar.update(len(done))
        else:
            _init_worker(*init)
            for chunk in _line_chunks(args.input):
                out.writelines(line + "\n" for line in _tokenize_chunk(chunk))
                n += len(chunk)
                bar.update(len(chunk))
    bar.close()
    print(f"tokenized {n} lines ({args.lang}) -> {args.output}", file=sys.stderr)


def cmd_detokenize(args: argparse.Namespace) -> None:
    lines = read_lines(args.input)
    if args.lang in ("ja", "zh"):
        # No spaces between words in these scripts; keep spaces only between two Latin/digit characters.
        joiner = re.compile(r"(?<![A-Za-z0-9]) | (?![A-Za-z0-9])")
        out = [joiner.sub("", line) for line in lines]
    else:
        from sacremoses import MosesDetokenizer
        detok = MosesDetokenizer(lang=args.lang)
        out = [detok.detokenize(line.split()) for line in lines]
    write_lines(args.output, out)


def cmd_clean(args: argparse.Namespace) -> None:
    """Drop training pairs with an empty side, more than --max-len tokens, or a length ratio above --ratio."""
    src, tgt = read_lines(args.src), read_lines(args.tgt)
    check_same_length(args.src, len(src), args.tgt, len(tgt))
    kept = []
    for s, t in zip(src, tgt):
        ns, nt = len(s.split()), len(t.split())
        if 1 <= ns <= args.max_len and 1 <= nt <= args.max_len and max(ns, nt) <= args.ratio * min(ns, nt):
            kept.append((s, t))
    if not kept:
        fail(f"cleaning {args.src} / {args.tgt} left no sentence pair")
    write_lines(args.src_out, (s for s, _ in kept))
    write_lines(args.tgt_out, (t for _, t in kept))
    print(f"clean: kept {len(kept)} of {len(src)} pairs (1-{args.max_len} tokens, ratio <= {args.ratio})",
          file=sys.stderr)


def cmd_check_parallel(args: argparse.Namespace) -> None:
    """Line counts must match, and no line may be empty (the aligner and reorderer need words)."""
    lengths = []
    for path in args.files:
        if not os.path.isfile(path):
            fail(f"{path}: file not found")
        lines = read_lines(path)
        for k, line in enumerate(lines, 1):
            if not args.allow_empty and not line.strip():
                raise InputError(path, k, "empty line; remove the pair from both files (or run the recipe's "
                                          "cleaning step)")
        lengths.append((path, len(lines)))
    for path, n in lengths[1:]:
        check_same_length(lengths[0][0], lengths[0][1], path, n)


# ---------------------------------------------------------------------------------------------------- sentencepiece
def cmd_spm_train(args: argparse.Namespace) -> None:
    import sentencepiece as spm
    for path in args.input:
        if not os.path.isfile(path):
            fail(f"{path}: file not found")
    prefix_dir = os.path.dirname(os.path.abspath(args.model_prefix))
    os.makedirs(prefix_dir, exist_ok=True)
    base = os.path.basename(args.model_prefix)
    remove_stale_temporaries(prefix_dir, f".{base}.")  # a killed run's .model/.vocab
    tmp_prefix = os.path.join(prefix_dir, f".{base}.{writer_tag()}.spm")
    spm.set_random_generator_seed(args.seed)  # sampling of --input-sentence-size lines
    try:
        spm.SentencePieceTrainer.train(
            input=",".join(args.input), model_prefix=tmp_prefix, vocab_size=args.vocab_size,
            model_type=args.model_type, character_coverage=args.character_coverage,
            input_sentence_size=args.input_sentence_size, shuffle_input_sentence=True,
            hard_vocab_limit=False, num_threads=args.threads, minloglevel=2,
            # fairseq's dictionary adds its own <s> <pad> </s> <unk>; sentencepiece keeps only <unk>
            bos_id=-1, eos_id=-1, unk_id=0)
    except RuntimeError as e:
        fail(f"sentencepiece training on {' '.join(args.input)} failed: {str(e).split('] ')[-1]} "
             f"(vocabulary size {args.vocab_size}, character coverage {args.character_coverage}: set SPM_VOCAB "
             f"or SPM_COVERAGE)")
    for ext in ("vocab", "model"):  # model last
        os.replace(f"{tmp_prefix}.{ext}", f"{args.model_prefix}.{ext}")


def _load_spm(path: str):
    import sentencepiece as spm
    if not os.path.isfile(path):
        fail(f"{path}: sentencepiece model not found")
    return spm.SentencePieceProcessor(model_file=path)


def cmd_spm_encode(args: argparse.Namespace) -> None:
    from xlpos_prep.subword import unk_rate_warning
    sp = _load_spm(args.model)
    lines = read_lines(args.input)
    encoded = [sp.encode(line, out_type=str) for line in lines]
    write_lines(args.output, (" ".join(pieces) for pieces in encoded))
    unk = sp.unk_id()
    warning = unk_rate_warning(sum(sp.piece_to_id(p) == unk for pieces in encoded for p in pieces),
                               sum(map(len, encoded)), args.model, args.input)
    if warning:
        print(f"text_tools spm-encode: warning: {warning}", file=sys.stderr)


def cmd_spm_decode(args: argparse.Namespace) -> None:
    sp = _load_spm(args.model)
    write_lines(args.output, (sp.decode_pieces(line.split()) for line in read_lines(args.input)))


# ---------------------------------------------------------------------------------------------------- fairseq output
def cmd_hypotheses(args: argparse.Namespace) -> None:
    """The best hypothesis (H-<id> lines) of fairseq-generate output, in input order; every id must be there."""
    hyps: dict[int, str] = {}
    for line in read_lines(args.generate_output):
        if line.startswith("H-"):
            head, _score, *text = line.split("\t")
            hyps[int(head[2:])] = text[0] if text else ""
    missing = [i for i in range(args.expected) if i not in hyps]
    if missing or len(hyps) != args.expected:
        fail(f"{args.generate_output}: {len(hyps)} hypotheses for {args.expected} test sentences "
             f"(first missing id: {missing[0] if missing else '-'}); did fairseq-generate skip inputs?")
    write_lines(args.output, (hyps[i] for i in range(args.expected)))


# ---------------------------------------------------------------------------------------------------- scoring
def split_compounds(line: str) -> str:
    # The compound splitting of Vaswani et al. (2017) / tensor2tensor's get_ende_bleu.sh, for comparable numbers.
    return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", line)


def cmd_score(args: argparse.Namespace) -> None:
    """One BLEU variant (and optionally RIBES) of one system, as JSON for `report`."""
    import sacrebleu
    hyp, ref = read_lines(args.hyp), read_lines(args.ref)
    check_same_length(args.ref, len(ref), args.hyp, len(hyp))
    if args.compound_split:
        from sacremoses import MosesTokenizer
        moses = MosesTokenizer(lang=args.lang)
        hyp = [split_compounds(moses.tokenize(h, return_str=True, escape=False)) for h in hyp]
        ref = [split_compounds(moses.tokenize(r, return_str=True, escape=False)) for r in ref]
    bleu = sacrebleu.metrics.BLEU(tokenize=args.tokenize)
    score = bleu.corpus_score(hyp, [ref])
    signature = str(bleu.get_signature())
    metrics = [{"name": args.name, "label": args.label, "value": round(score.score, 2), "detail": str(score),
                "signature": signature}]
    print(f"{args.system}: {args.label}: {score}", file=sys.stderr)
    print(f"{args.system}: sacreBLEU signature: {signature}", file=sys.stderr)
    if args.ribes:
        from nltk.translate.ribes_score import corpus_ribes
        # the mean of sentence RIBES; nltk scores empty and one-word hypotheses 0
        value = corpus_ribes([[r.split()] for r in ref], [h.split() for h in hyp])
        metrics.append({"name": "RIBES", "label": f"RIBES (nltk) on the same tokens as {args.name}",
                        "value": round(100 * value, 2)})
        print(f"{args.system}: RIBES (nltk) = {100 * value:.2f}", file=sys.stderr)
    with atomic_output(args.out) as f:
        json.dump({"system": args.system, "metrics": metrics}, f, indent=2, ensure_ascii=False)
        f.write("\n")


def cmd_report(args: argparse.Namespace) -> None:
    """One table: system, its scores, and which source order its positions used, with that order's tau."""
    systems: dict[str, dict[str, float]] = {}
    legend: dict[str, dict] = {}
    for path in args.scores:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
        for m in record["metrics"]:
            systems.setdefault(record["system"], {})[m["name"]] = m["value"]
            legend.setdefault(m["name"], m)
    reorderer_tau = monotone_tau = None
    if args.tau:
        with open(args.tau, encoding="utf-8") as f:
            taus = json.load(f)
        reorderer_tau = next(v["corpus_tau"] for k, v in taus.items() if k not in ("monotone", "reversed"))
        monotone_tau = taus["monotone"]["corpus_tau"]
    names = list(legend)
    width = max(9, *(len(n) for n in names))
    header = f"{'system':<10}" + "".join(f" {n:>{width}}" for n in names)
    if args.tau:
        header += "  XL positions from (Kendall tau of that order vs the test-set oracle)"
    lines = [args.title, "", header, "-" * len(header)]
    for system, values in systems.items():
        line = f"{system:<10}" + "".join(
            f" {values[n]:>{width}.2f}" if n in values else f" {'-':>{width}}" for n in names)
        if args.tau:
            line += (f"  none (monotone source order: tau {monotone_tau:.4f})" if system == "baseline"
                     else f"  reorderer (tau {reorderer_tau:.4f})")
        lines.append(line)
    lines.append("-" * len(header))
    for name, m in legend.items():
        lines.append(f"{name}: {m['label']}")
        if m.get("signature"):
            lines.append(f"{' ' * len(name)}  sacreBLEU signature: {m['signature']}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with atomic_output(args.out) as f:
            f.write(text + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("tokenize", help="word-tokenize a raw text file")
    p.add_argument("--lang", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--normalize", action="store_true", help="Moses punctuation normalization first")
    p.add_argument("--lowercase", action="store_true")
    p.add_argument("--workers", type=WORKERS, default=1)
    p.set_defaults(run=cmd_tokenize)
    declare_files(p, inputs=("input",), outputs=("output",))

    p = sub.add_parser("detokenize", help="undo word tokenization (Moses rules; no spaces for ja/zh)")
    p.add_argument("--lang", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.set_defaults(run=cmd_detokenize)
    declare_files(p, inputs=("input",), outputs=("output",))

    p = sub.add_parser("clean", help="drop empty, over-long and badly length-matched training pairs")
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--src-out", required=True)
    p.add_argument("--tgt-out", required=True)
    p.add_argument("--max-len", type=int_option(1, 1_000_000), default=250)
    p.add_argument("--ratio", type=float_option(1, 1e6), default=1.5 * 1.5 * 2, help="max length ratio (default 4.5)")
    p.set_defaults(run=cmd_clean)
    declare_files(p, inputs=("src", "tgt"), outputs=("src_out", "tgt_out"))

    p = sub.add_parser("check-parallel", help="files exist, have the same line count and no empty line")
    p.add_argument("files", nargs="+")
    p.add_argument("--allow-empty", action="store_true", help="only compare line counts")
    p.set_defaults(run=cmd_check_parallel)
    declare_files(p, inputs=("files",))

    p = sub.add_parser("spm-train", help="train a sentencepiece model on tokenized text")
    p.add_argument("--input", nargs="+", required=True)
    p.add_argument("--model-prefix", required=True)
    p.add_argument("--vocab-size", type=int_option(2, 10_000_000), required=True)
    p.add_argument("--model-type", default="unigram", choices=["unigram", "bpe"])
    p.add_argument("--character-coverage", type=float_option(0, 1, lo_open=True), default=1.0)
    p.add_argument("--input-sentence-size", type=int_option(0, 10**12), default=2000000)
    p.add_argument("--threads", type=WORKERS, default=os.cpu_count() or 1)
    p.add_argument("--seed", type=SEED, default=1)
    p.set_defaults(run=cmd_spm_train)
    declare_files(p, inputs=("input",), derived_outputs=lambda a: [("--model-prefix", a.model_prefix + ext)
                                                                   for ext in (".model", ".vocab")])

    p = sub.add_parser("spm-encode", help="text -> space-separated sentencepiece pieces")
    p.add_argument("--model", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.set_defaults(run=cmd_spm_encode)
    declare_files(p, inputs=("model", "input"), outputs=("output",))

    p = sub.add_parser("spm-decode", help="space-separated pieces -> text")
    p.add_argument("--model", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.set_defaults(run=cmd_spm_decode)
    declare_files(p, inputs=("model", "input"), outputs=("output",))

    p = sub.add_parser("hypotheses", help="best hypotheses of fairseq-generate output, in input order")
    p.add_argument("--generate-output", required=True)
    p.add_argument("--expected", type=int_option(0, 10**12), required=True, help="number of test sentences")
    p.add_argument("--output", required=True)
    p.set_defaults(run=cmd_hypotheses)
    declare_files(p, inputs=("generate_output",), outputs=("output",))

    p = sub.add_parser("score", help="BLEU (sacreBLEU) and optionally RIBES of a hypothesis file")
    p.add_argument("--system", required=True)
    p.add_argument("--hyp", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--out", required=True, help="JSON with the scores and the signature")
    p.add_argument("--name", default="BLEU", help="column name in the table")
    p.add_argument("--label", default="detokenized sacreBLEU", help="what kind of BLEU this is, for the table")
    p.add_argument("--tokenize", default="13a", help="sacreBLEU tokenizer (13a, none, char, zh, intl)")
    p.add_argument("--compound-split", action="store_true",
                   help="Moses-tokenize and split hyphenated compounds first (WMT14 En-De convention)")
    p.add_argument("--lang", default="de", help="tokenizer language for --compound-split")
    p.add_argument("--ribes", action="store_true", help="also RIBES (nltk) on the given tokenization")
    p.set_defaults(run=cmd_score)
    declare_files(p, inputs=("hyp", "ref"), outputs=("out",))

    p = sub.add_parser("report", help="print the results table")
    p.add_argument("--title", required=True)
    p.add_argument("--scores", nargs="+", required=True)
    p.add_argument("--tau", help="JSON of `xlpos-prep evaluate` for the test set")
    p.add_argument("--out")
    p.set_defaults(run=cmd_report)
    declare_files(p, inputs=("scores", "tau"), outputs=("out",))

    args = parser.parse_args(argv)
    return run_command(f"text_tools {args.command}", args, args.run, sub.choices[args.command])


if __name__ == "__main__":
    sys.exit(main())
