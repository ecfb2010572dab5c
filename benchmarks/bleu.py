"""BLEU of the XL systems (InXL, HeadXL, rotary XL) against fairseq's vanilla Transformer on real corpora.

Pairs (corpora in ../shared/data):
  ja-en, en-ja  Tanaka corpus subset (enja/: 50k train, 500 dev; tokenized, English lowercased, Japanese KyTea).
                There is no test split: the LAST --test-lines (1000) training lines are held out as the test set
                and never trained on; --train-lines N then takes the first N of the remaining lines. dev = valid.
  en-de         Multi30k task 1 (ende/: raw cased text): train (29k), val (valid), test_2016_flickr (test).
                Tokenized with sacremoses (xlpos-prep tokenize) for alignment, reordering and sentencepiece;
                outputs are detokenized (sacremoses) before scoring against the raw references.
  synth         the quickstart's synthetic corpus (xlpos-prep synth: English-like -> head-final, made-up words;
                10k train, 500 valid, 500 test, seed 1), generated into --work; the one pair with a gold word
                alignment (test.gold-align), so --attention-aer scores attention against the truth there. Not in
                the default --pairs.

Pipeline per pair: the corpus's splits are selected and tokenized by the benchmark (bleu_corpus.py); everything
from the word alignment to the data-bin is the package's pipeline (xlpos_prep.pipeline.prepare, the one the recipes
run as `xlpos-prep prepare`; docs/pipeline.md), in this benchmark's cache layout: align train+valid+test together
(one alignment, made en-ja / en-de, serves both directions of a corpus) -> oracle ranks per split -> BTG reorderer
-> orders of every split -> Kendall tau / FRS of the valid and test orders -> joint sentencepiece -> piece-level XL
positions -> data-bin, and the oracle-positions data-bin of train and valid. Every step is skipped when it
completed, so a rerun resumes. Then, what is specific to this experiment: per system and seed fairseq-train with
ONE fixed small configuration (bleu_runs.py; the training options are the recipes', xlpos_prep.train_options) and
the same update budget, decoding valid and test (xlpos_prep.translate, as the recipes decode), scores,
significance (bleu_evidence.py), the tables (bleu_report.py).

Systems: vanilla (fairseq `--task translation --arch transformer`, same data-bin), input, head, rope
(`--task translation_xlpos --arch transformer_xlpos --xl-integration X`, the plugin's other defaults).
--ablation-oracle adds "<system>-oracle" for every selected XL system (or name them: --systems input-oracle):
trained and evaluated on valid with XL positions from the alignment oracle (ranks stably sorted) instead of the
reorderer. "<system>-monotone" (e.g. --systems rope-monotone) is the XL model given the source positions as XL
positions (--xl-positions monotone): the integration's own effect, with no reordering information. Every XL
system trained on reorderer positions is also decoded on valid with the oracle positions ("valid@oracle-positions"):
what the reorderer's test-time errors cost, without retraining. More systems by name (grammar in --help): HeadXL
variants (head-k2-l01: 2 XL heads in layers 0 and 1), InXL fusions (input-sum, input-gated), encoder-free models
(encfree-vanilla, encfree-input: --encoder-layers 0), and the controls X-monotone (rope-monotone is the rotary
baseline without XL) and X-random (trained on random permutations, --xl-contrast random).

Evidence: every system is tested against vanilla on test, and every XL system against its controls
(X-monotone, X-random; encfree-input against encfree-vanilla; --compare A:B for any other pair), with sacreBLEU's
paired bootstrap and approximate randomization on BLEU and chrF (xlpos_prep.significance): p-values and
95% confidence intervals per seed pair (system and baseline trained with the same seed; the count of significant
pairs is reported) and on the seed-concatenated test set, labelled anti-conservative. --contrast all decodes test
again with every XL model fed monotone, reversed, random and locally shuffled XL positions (test@KIND; the BLEU
change is printed). --attention-aer scores the word alignments in every model's encoder-decoder attention
(xlpos/evaluation/align_attention.py) against the eflomal alignment of test (silver: the real corpora have no gold)
or, on synth, against the true alignment (gold; eflomal's own AER against it is reported too).
--no-train gathers what is there: every (system, seed) whose training has finished is scored (missing scores are
computed) and reported, the others are left out, so runs made by several invocations end up in one JSON.

Scores (sacreBLEU; signatures in the JSON): BLEU and chrF on test and valid; for ja-en/en-ja on the corpus's own
tokenization (BLEU tokenize=none: KyTea words for Japanese, lowercased Moses-style words for English), plus RIBES
(nltk) on the same tokens; for en-de detokenized BLEU (13a) and chrF against the raw references. Test BLEU is also
computed per bucket of source length and of how much the reorderer moves the sentence (Kendall tau of the
predicted order against the source order), for the plot (benchmarks/plot_bleu.py).

    python benchmarks/bleu.py --pairs ja-en --systems vanilla,input --seeds 1 --max-update 30 --train-lines 2000 \
        --work /tmp/bleu-smoke --out /tmp/bleu-smoke/results.json --plot /tmp/bleu-smoke/bleu.png
    python benchmarks/bleu.py --seeds 1,2 --ablation-oracle --out results.json --plot docs/bleu_by_length.png
    python benchmarks/bleu.py --pairs en-de --test-src my.en --test-ref my.de      # a further held-out set
    python benchmarks/bleu.py --no-train --seeds 1,2 --systems vanilla,input,head,rope,input-oracle --out r.json
    python benchmarks/bleu.py --pairs ja-en --systems vanilla,input,input-random,rope,rope-monotone --contrast all \
        --attention-aer --compare rope:input
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling modules, whatever the working directory

from xlpos_prep.io import InputError, atomic_output, log, write_json  # noqa: E402
from xlpos_prep.pipeline import JACKKNIFE_FOLDS, StepFailed  # noqa: E402
from xlpos_prep.pipeline import Steps  # noqa: E402,F401  (tests/test_kill_resume.py checks bleu's steps through it)
from xlpos_prep.systems import ORACLE_SUFFIX, SYSTEM_GRAMMAR, parse_system  # noqa: E402

from bleu_corpus import CONTRASTS, DATA, PAIRS, attention_reference, prepare_pair  # noqa: E402
from bleu_evidence import gather_from_records, pair_significance, pair_summary, seed_pooled_buckets  # noqa: E402
from bleu_evidence import stored_hypotheses  # noqa: E402
from bleu_report import markdown_table, print_table  # noqa: E402
from bleu_runs import GLIBC_MALLOC_ENV, TrainConfig, code_version, run_threads, train_and_evaluate  # noqa: E402
from run_records import machine_info  # noqa: E402


SYSTEMS = ("vanilla", "input", "head", "rope")


def parse_compare(text: str, systems: Sequence[str]) -> tuple[str, str]:
    """--compare SYSTEM:BASELINE, both among --systems."""
    system, sep, baseline = text.partition(":")
    if not sep or not system or not baseline or system == baseline:
        raise ValueError(f"--compare {text}: expected SYSTEM:BASELINE, two different systems")
    missing = [s for s in (system, baseline) if s not in systems]
    if missing:
        raise ValueError(f"--compare {text}: {', '.join(missing)} not among --systems")
    return system, baseline


def parse_contrast(text: str) -> list[str]:
    """--contrast: 'none', 'all' or comma-separated kinds of CONTRASTS."""
    kinds = split_list(text)
    if kinds == ["none"]:
        return []
    if kinds == ["all"]:
        return list(CONTRASTS)
    bad = [k for k in kinds if k not in CONTRASTS]
    if bad or not kinds:
        raise SystemExit(f"--contrast {text}: choose from {', '.join(CONTRASTS)}, all or none")
    return kinds


def split_list(text: str) -> list[str]:
    return [x for x in re.split(r"[,\s]+", text) if x]


def parse_extra_sets(args: argparse.Namespace, pairs: list[str]) -> dict[str, list[tuple[str, Path, Path]]]:
    """--test-src/--test-ref, paired in order; `PAIR:PATH` names the pair, needed when several are selected."""
    srcs, refs = args.test_src or [], args.test_ref or []
    if len(srcs) != len(refs):
        raise SystemExit(f"{len(srcs)} --test-src but {len(refs)} --test-ref: give them in pairs")
    out: dict[str, list] = {p: [] for p in pairs}
    for k, (src, ref) in enumerate(zip(srcs, refs), 1):
        targets = []
        for which in (src, ref):
            head, sep, rest = which.partition(":")
            targets.append((head, rest) if sep and head in PAIRS else (None, which))
        (p_src, src_path), (p_ref, ref_path) = targets
        pair = p_src or p_ref
        if p_src and p_ref and p_src != p_ref:
            raise SystemExit(f"--test-src {src} and --test-ref {ref} name different pairs")
        if pair is None:
            if len(pairs) != 1:
                raise SystemExit(f"--test-src {src}: several pairs selected; prefix the files with the pair, "
                                 f"e.g. --test-src {pairs[0]}:{src}")
            pair = pairs[0]
        if pair not in out:
            raise SystemExit(f"--test-src {src}: pair {pair} is not selected (--pairs)")
        for path in (src_path, ref_path):
            if not Path(path).is_file():
                raise SystemExit(f"{path}: file not found")
        name = f"{k}-" + re.sub(r"[^A-Za-z0-9_.-]", "_", Path(src_path).stem)
        out[pair].append((name, Path(src_path).resolve(), Path(ref_path).resolve()))
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=SYSTEM_GRAMMAR)
    p.add_argument("--pairs", default="ja-en,en-ja,en-de", help="comma-separated: " + ", ".join(PAIRS))
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help=f"comma-separated system names (default {','.join(SYSTEMS)}; grammar below)")
    p.add_argument("--seeds", default="1,2", help="comma- or space-separated training seeds (default 1,2)")
    p.add_argument("--ablation-oracle", action="store_true",
                   help="also train every selected XL system on oracle XL positions (evaluated on valid)")
    p.add_argument("--contrast", default="none",
                   help="also decode test with contrastive XL positions, every XL model trained on reorderer "
                        f"positions: comma-separated {', '.join(CONTRASTS)}, 'all' or 'none' (default)")
    p.add_argument("--contrast-window", type=int, default=3, help="window K of local-shuffle (default 3)")
    p.add_argument("--contrast-seed", type=int, default=1, help="seed of random and local-shuffle (default 1)")
    p.add_argument("--compare", action="append", default=[],
                   help="SYSTEM:BASELINE, a further pair for the significance tests (repeatable); every system is "
                        "tested against vanilla, and X against X-monotone and X-random when both were run")
    p.add_argument("--bs-samples", type=int, default=1000, help="paired bootstrap resamples (sacreBLEU default 1000)")
    p.add_argument("--ar-trials", type=int, default=10000,
                   help="paired approximate randomization trials (sacreBLEU default 10000)")
    p.add_argument("--attention-aer", action="store_true",
                   help="also score the word alignments of every model's encoder-decoder attention on test against "
                        "the eflomal alignment of test (silver: the real corpora have no gold alignment) or, for "
                        "synth, against its true alignment")
    p.add_argument("--attention-layer", type=int, default=-1,
                   help="decoder layer of --attention-aer (default -1, the last)")
    p.add_argument("--work", default="/tmp/xlpos-bleu", help="cache directory; every step is skipped when done")
    p.add_argument("--data", default=str(DATA), help="directory holding enja/ and ende/")
    p.add_argument("--out", default="results.json", help="JSON with every figure")
    p.add_argument("--records", type=Path,
                   help="directory of committed run records (benchmarks/run_records.py): every finished run is "
                        "recorded there, and a recorded run is not trained again; with --no-train, the results "
                        "are gathered from the records alone (no work directory, data or checkpoint needed)")
    p.add_argument("--data-replica", type=int, default=0,
                   help="N > 0: a data replica of its own (alignment, oracle, reorderer seeded N, XL positions), "
                        "so that runs of several replicas show the spread the unseeded alignment adds (0: the "
                        "shared cache, default)")
    p.add_argument("--no-train", action="store_true",
                   help="train nothing: report (and score, where scores are missing) the runs already trained")
    p.add_argument("--prepare-only", action="store_true",
                   help="only the data steps (alignment, reorderer, XL positions, data-bin) and reordering scores")
    p.add_argument("--markdown", help="also write the results as a Markdown table (the README's) to this file")
    p.add_argument("--plot", help="also draw BLEU by length / reordering bucket to this PNG (needs matplotlib)")
    p.add_argument("--train-lines", type=int, default=0, help="train on the first N training lines (0: all)")
    p.add_argument("--test-lines", type=int, default=1000,
                   help="Tanaka: hold out the last N training lines as the test set (default 1000)")
    p.add_argument("--test-src", action="append", help="a further held-out source file ([PAIR:]PATH, the pair's "
                   "format: tokenized for ja-en/en-ja, raw for en-de); repeatable")
    p.add_argument("--test-ref", action="append", help="its reference ([PAIR:]PATH); repeatable")
    p.add_argument("--spm-vocab", type=int, default=8000, help="joint sentencepiece vocabulary (default 8000)")
    p.add_argument("--reorder-iterations", type=int, default=0,
                   help="reorderer training passes (0: xlpos-prep train-reorderer's default)")
    p.add_argument("--reorder-lines", type=int, default=0,
                   help="train the reorderer on the first N training lines (0: all)")
    p.add_argument("--jackknife", type=int, default=JACKKNIFE_FOLDS, metavar="K",
                   help=f"the pipeline's --jackknife: K reorderers label the reorderer's own training lines "
                        f"(default {JACKKNIFE_FOLDS}; 1: the model trained on them, as data made before K existed)")
    p.add_argument("--reorder-args", default="",
                   help="further train-reorderer arguments, e.g. '--features span,wide --fallback-margin 0'. A "
                        "campaign names its reorderer settings here, so that its data replicas do not change when "
                        "train-reorderer's defaults do (each record also lists the settings its model used)")
    defaults = TrainConfig()
    p.add_argument("--max-update", type=int, default=defaults.max_update,
                   help=f"updates per system (default {defaults.max_update}, ~10-15 min on 2 CPU cores)")
    p.add_argument("--curve-every", type=int, default=0, metavar="N",
                   help="keep a checkpoint every N updates and score dev with each: where the dev curve flattens "
                        "(0: none, default; the training itself is the same, so it is not part of the runs' "
                        "configuration tag, and a run trained without it has its final dev score only)")
    p.add_argument("--max-tokens", type=int, default=defaults.max_tokens)
    p.add_argument("--lr", type=float, default=defaults.lr)
    p.add_argument("--warmup-updates", type=int, default=0, help="0: max-update / 5, at most 4000")
    p.add_argument("--dropout", type=float, default=defaults.dropout)
    p.add_argument("--layers", type=int, default=defaults.encoder_layers, help="encoder and decoder layers")
    p.add_argument("--embed-dim", type=int, default=defaults.embed_dim)
    p.add_argument("--ffn-dim", type=int, default=defaults.ffn_dim)
    p.add_argument("--heads", type=int, default=defaults.heads)
    p.add_argument("--beam", type=int, default=defaults.beam)
    p.add_argument("--gen-max-tokens", type=int, default=6000, help="fairseq-generate --max-tokens")
    p.add_argument("--log-interval", type=int, default=25, help="fairseq-train --log-interval")
    p.add_argument("--threads", type=int, default=1,
                   help="torch/OpenMP threads of each fairseq-train/generate (default 1; 0: torch's default, one per "
                        "core). Measured on a shared 2-core machine: 2 threads ran 3.5x slower than 1 (OpenMP threads "
                        "spin while other processes hold the cores); use --jobs to occupy more cores")
    p.add_argument("--jobs", type=int, default=1,
                   help="systems/seeds trained and decoded at once (default 1; 2 on an otherwise idle 2-core machine)")
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                   help="processes for the per-sentence steps (default: all cores)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.time()
    code_version()  # the code this process runs, before an hour of training lets the checkout move on
    pairs = split_list(args.pairs)
    systems = split_list(args.systems)
    seeds = [int(x) for x in split_list(args.seeds)]
    bad = [x for x in pairs if x not in PAIRS]
    if bad or not pairs:
        raise SystemExit(f"unknown pair(s) {', '.join(bad) or '(none)'}; choose from {', '.join(PAIRS)}")
    if not systems:
        raise SystemExit("--systems: give at least one system")
    try:
        specs = {s: parse_system(s) for s in systems}
        compare = [parse_compare(c, systems) for c in args.compare]
    except ValueError as e:
        raise SystemExit(str(e))
    args.contrast = parse_contrast(args.contrast)
    if not seeds:
        raise SystemExit("--seeds: give at least one seed")
    extra = parse_extra_sets(args, pairs)
    if args.jobs < 1:
        raise SystemExit("--jobs must be at least 1")
    if args.curve_every < 0:
        raise SystemExit("--curve-every must be 0 (no curve) or a positive number of updates")
    if args.threads:
        # inherited by every fairseq child process
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    for name, value in GLIBC_MALLOC_ENV.items():  # a value set by the user wins
        os.environ.setdefault(name, value)
    cfg = TrainConfig(encoder_layers=args.layers, decoder_layers=args.layers, embed_dim=args.embed_dim,
                      ffn_dim=args.ffn_dim, heads=args.heads, dropout=args.dropout, lr=args.lr,
                      warmup_updates=args.warmup_updates, max_tokens=args.max_tokens, max_update=args.max_update,
                      beam=args.beam)
    all_systems = systems + [s + ORACLE_SUFFIX for s in systems
                             if args.ablation_oracle and specs[s].reads_reorderer and s + ORACLE_SUFFIX not in systems]
    results: dict = {
        "benchmark": "BLEU of XL systems vs the vanilla Transformer (benchmarks/bleu.py)",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "command": shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv),
        "machine": {},
        "config": {"train": {**asdict(cfg), "warmup": cfg.warmup, "fairseq_args": cfg.fairseq_args(),
                             "checkpoint": "checkpoint_last.pt (no validation during training)",
                             "dev_curve_every": args.curve_every or None,
                             "decoding": f"beam {cfg.beam}, lenpen {cfg.lenpen}, max len 2*src+10"},
                   "pairs": pairs, "systems": all_systems, "seeds": seeds, "train_lines": args.train_lines,
                   "test_lines": args.test_lines, "spm_vocab": args.spm_vocab,
                   "reorder_iterations": args.reorder_iterations or "default",
                   "reorder_lines": args.reorder_lines or "all", "reorder_args": args.reorder_args,
                   "jackknife": args.jackknife, "work": str(Path(args.work).resolve()),
                   "threads": args.threads or "torch default", "jobs": args.jobs,
                   "malloc_env": {name: os.environ[name] for name in GLIBC_MALLOC_ENV},
                   "xl_positions": "predicted by the BTG reorderer on every split (training included); "
                                   "'-oracle' systems: oracle ranks from the alignment, evaluated on valid only; "
                                   "valid@oracle-positions: the reorderer-trained systems decoding valid with "
                                   "oracle positions",
                   "contrast": {"kinds": args.contrast, "window": args.contrast_window, "seed": args.contrast_seed,
                                "what": "test@KIND: the trained XL models decoding test with --xl-contrast KIND"},
                   "significance": {"tests": "sacreBLEU paired bootstrap resampling and paired approximate "
                                             "randomization (sacrebleu.significance.PairedTest), BLEU and chrF, test",
                                    "bs_samples": args.bs_samples, "ar_trials": args.ar_trials,
                                    "seeds": "one test per seed pair (system and baseline trained with the same "
                                             "seed), the count of significant seed pairs (both tests p < 0.05, "
                                             "delta != 0), and the seed-concatenated test set (anti-conservative)",
                                    "pairs": "every system vs vanilla; X vs X-monotone and X-random; encfree-X vs "
                                             "encfree-vanilla; --compare"},
                   "attention_aer": ({"layer": args.attention_layer, "method": "argmax per target word, pieces "
                                      "grouped into words; force-decoded references",
                                      "gold": {p: attention_reference(PAIRS[p]) for p in pairs}}
                                     if args.attention_aer else None),
                   "scoring": {p: {"bleu_tokenize": PAIRS[p].bleu_tokenize,
                                   "references": "corpus tokenization" if PAIRS[p].pretokenized else
                                   "raw text; hypotheses detokenized with sacremoses",
                                   "ribes": PAIRS[p].ribes} for p in pairs}},
        "pairs": {},
    }
    for pair_name in pairs:
        spec = PAIRS[pair_name]
        if args.no_train and args.records:
            gathered = gather_from_records(spec, all_systems, seeds, cfg, compare, args)
            if gathered is None:
                log(f"--no-train: {pair_name} has no record in {args.records} yet; left out")
                continue
            results["pairs"][pair_name] = gathered
            results["machine"] = machine_info()
            write_json(Path(args.out), results)
            continue
        t0 = time.perf_counter()
        pair = prepare_pair(spec, args, extra[pair_name])
        prep_seconds = time.perf_counter() - t0
        jobs = [] if args.prepare_only else [(system, seed) for system in all_systems for seed in seeds]
        done = run_threads(jobs, lambda system, seed: train_and_evaluate(pair, system, seed, cfg, args), args.jobs)
        runs: dict = {}
        for (system, seed) in jobs:  # the order of the flags, whatever order the jobs finished in
            if done[(system, seed)] is not None:
                runs.setdefault(system, {})[str(seed)] = done[(system, seed)]
        results["pairs"][pair_name] = {
            **pair.info, "prep_seconds_this_run": round(prep_seconds, 1), "runs": runs, "summary": pair_summary(runs),
            "significance": pair_significance(pair, runs, cfg, compare, args),
            "pooled_buckets": seed_pooled_buckets(spec, runs, pair.eval_sets["test"].refs,
                                                  stored_hypotheses(pair, cfg),
                                                  {seed: pair.info["test_sentences"] for seed in map(str, seeds)},
                                                  compare)}
        results["machine"] = machine_info()
        results["wall_seconds_this_run"] = round(time.time() - started, 1)
        write_json(Path(args.out), results)  # after every pair, so a long run shows progress
    print_table(results)
    log(f"results: {args.out}")
    if args.markdown:
        with atomic_output(args.markdown) as f:
            f.write(markdown_table(results))
        log(f"markdown table: {args.markdown}")
    if args.plot and not args.prepare_only:
        from plot_bleu import plot_results
        plot_results(results, Path(args.plot))
        log(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (StepFailed, InputError) as e:  # (a failed step: the end of its log is above)
        sys.exit(f"bleu.py: error: {e}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (StepFailed, InputError) as e:  # (a failed step: the end of its log is above)
        sys.exit(f"bleu.py: error: {e}")
