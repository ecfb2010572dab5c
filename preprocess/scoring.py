"""From fairseq-generate's output to a results table: the best hypotheses in input order, their scores (sacreBLEU
BLEU and chrF with signatures, RIBES with nltk) and the table of a recipe's systems.

    xlpos-prep hypotheses --generate-output generate.txt --expected 3003 --output test.pieces
    xlpos-prep score --system xl-input --hyp test.detok --ref test.de --out scores/xl-input.bleu.json
    xlpos-prep report --title "WMT14 en => de" --scores scores/*.json --tau reorder/test.tau.json --out results.txt

sacrebleu, sacremoses and nltk are imported when a score needs them; fairseq and torch never are.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Sequence

from .io import InputError, atomic_output, check_same_length, declare_files, int_option, read_lines, write_lines


def read_hypotheses(generate_output: str, expected: int) -> list[str]:
    """The best hypothesis (H-<id> lines, pieces) per input id of fairseq-generate's output, in input order.
    Every id 0..expected-1 must be there: fairseq drops inputs silently in some settings
    (facebookresearch/fairseq#5036)."""
    hyps: dict[int, str] = {}
    for line in read_lines(generate_output):
        if line.startswith("H-"):
            head, _score, *text = line.split("\t")
            hyps[int(head[2:])] = text[0] if text else ""
    missing = [i for i in range(expected) if i not in hyps]
    if missing or len(hyps) != expected:
        raise InputError(generate_output, None, f"{len(hyps)} hypotheses for {expected} test sentences (first "
                         f"missing id: {missing[0] if missing else '-'}); did fairseq-generate skip inputs?")
    return [hyps[i] for i in range(expected)]


def split_compounds(line: str) -> str:
    # The compound splitting of Vaswani et al. (2017) / tensor2tensor's get_ende_bleu.sh, for comparable numbers.
    return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", line)


def corpus_scores(hyps: Sequence[str], refs: Sequence[str], tokenize: str = "13a", chrf: bool = True,
                  ribes_tokens: tuple | None = None) -> dict:
    """Corpus BLEU (+ chrF) with sacreBLEU's signatures, and RIBES (nltk) on given (hypothesis, reference) token
    lists: {"bleu", "bleu_detail", "bleu_signature", ["chrf", "chrf_signature"], "sentences", ["ribes"]}."""
    import sacrebleu
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses for {len(refs)} references")
    # force: with tokenize=none the text is tokenized on purpose; no "detokenize first" warning
    bleu = sacrebleu.metrics.BLEU(tokenize=tokenize, force=tokenize == "none")
    b = bleu.corpus_score(list(hyps), [list(refs)])
    out = {"bleu": round(b.score, 2), "bleu_detail": str(b), "bleu_signature": str(bleu.get_signature())}
    if chrf:
        c_metric = sacrebleu.metrics.CHRF()
        c = c_metric.corpus_score(list(hyps), [list(refs)])
        out.update({"chrf": round(c.score, 2), "chrf_signature": str(c_metric.get_signature())})
    out["sentences"] = len(hyps)
    if ribes_tokens is not None:
        from nltk.translate.ribes_score import corpus_ribes
        hyp_tokens, ref_tokens = ribes_tokens
        # nltk: the mean of sentence RIBES; a hypothesis of fewer than 2 words scores 0
        out["ribes"] = round(100 * corpus_ribes([[r] for r in ref_tokens], list(hyp_tokens)), 2)
    return out


def run_hypotheses(args: argparse.Namespace) -> int:
    write_lines(args.output, read_hypotheses(args.generate_output, args.expected))
    return 0


def configure_hypotheses(p: argparse.ArgumentParser) -> None:
    p.add_argument("--generate-output", required=True)
    p.add_argument("--expected", type=int_option(0, 10**12), required=True, help="number of test sentences")
    p.add_argument("--output", required=True)
    p.set_defaults(run=run_hypotheses)
    declare_files(p, inputs=("generate_output",), outputs=("output",))


def run_score(args: argparse.Namespace) -> int:
    hyp, ref = read_lines(args.hyp), read_lines(args.ref)
    check_same_length(args.ref, len(ref), args.hyp, len(hyp))
    if args.compound_split:
        from sacremoses import MosesTokenizer
        moses = MosesTokenizer(lang=args.lang)
        hyp = [split_compounds(moses.tokenize(h, return_str=True, escape=False)) for h in hyp]
        ref = [split_compounds(moses.tokenize(r, return_str=True, escape=False)) for r in ref]
    ribes = ([h.split() for h in hyp], [r.split() for r in ref]) if args.ribes else None
    s = corpus_scores(hyp, ref, args.tokenize, chrf=False, ribes_tokens=ribes)
    metrics = [{"name": args.name, "label": args.label, "value": s["bleu"], "detail": s["bleu_detail"],
                "signature": s["bleu_signature"]}]
    print(f"{args.system}: {args.label}: {s['bleu_detail']}", file=sys.stderr)
    print(f"{args.system}: sacreBLEU signature: {s['bleu_signature']}", file=sys.stderr)
    if args.ribes:
        metrics.append({"name": "RIBES", "label": f"RIBES (nltk) on the same tokens as {args.name}",
                        "value": s["ribes"]})
        print(f"{args.system}: RIBES (nltk) = {s['ribes']:.2f}", file=sys.stderr)
    with atomic_output(args.out) as f:
        json.dump({"system": args.system, "metrics": metrics}, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return 0


def configure_score(p: argparse.ArgumentParser) -> None:
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
    p.set_defaults(run=run_score)
    declare_files(p, inputs=("hyp", "ref"), outputs=("out",))


def report_table(title: str, score_files: Sequence[str], tau_file: str | None) -> str:
    """One table: system, its scores, and which source order its positions used, with that order's tau."""
    systems: dict[str, dict[str, float]] = {}
    legend: dict[str, dict] = {}
    for path in score_files:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
        for m in record["metrics"]:
            systems.setdefault(record["system"], {})[m["name"]] = m["value"]
            legend.setdefault(m["name"], m)
    reorderer_tau = monotone_tau = None
    if tau_file:
        with open(tau_file, encoding="utf-8") as f:
            taus = json.load(f)
        reorderer_tau = next(v["corpus_tau"] for k, v in taus.items() if k not in ("monotone", "reversed"))
        monotone_tau = taus["monotone"]["corpus_tau"]
    names = list(legend)
    width = max(9, *(len(n) for n in names))
    header = f"{'system':<10}" + "".join(f" {n:>{width}}" for n in names)
    if tau_file:
        header += "  XL positions from (Kendall tau of that order vs the test-set oracle)"
    lines = [title, "", header, "-" * len(header)]
    for system, values in systems.items():
        line = f"{system:<10}" + "".join(
            f" {values[n]:>{width}.2f}" if n in values else f" {'-':>{width}}" for n in names)
        if tau_file:
            line += (f"  none (monotone source order: tau {monotone_tau:.4f})" if system == "baseline"
                     else f"  reorderer (tau {reorderer_tau:.4f})")
        lines.append(line)
    lines.append("-" * len(header))
    for name, m in legend.items():
        lines.append(f"{name}: {m['label']}")
        if m.get("signature"):
            lines.append(f"{' ' * len(name)}  sacreBLEU signature: {m['signature']}")
    return "\n".join(lines)


def run_report(args: argparse.Namespace) -> int:
    text = report_table(args.title, args.scores, args.tau)
    print(text)
    if args.out:
        with atomic_output(args.out) as f:
            f.write(text + "\n")
    return 0


def configure_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("--title", required=True)
    p.add_argument("--scores", nargs="+", required=True)
    p.add_argument("--tau", help="JSON of `xlpos-prep evaluate` for the test set")
    p.add_argument("--out")
    p.set_defaults(run=run_report)
    declare_files(p, inputs=("scores", "tau"), outputs=("out",))
