"""The BLEU benchmark's evidence (benchmarks/bleu.py): per system and evaluation set, the spread over seeds and the
paired differences against vanilla; significance tests of every system against its baselines (xlpos_prep.
significance); BLEU by bucket with the seeds' sentences pooled; and a pair's results gathered from committed run
records alone.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import statistics
from pathlib import Path
from typing import Callable, Sequence

from xlpos_prep import significance
from xlpos_prep.io import log, read_json, read_lines, write_json
from xlpos_prep.systems import ENCFREE_PREFIX, MONOTONE_SUFFIX, ORACLE_SUFFIX, RANDOM_SUFFIX, parse_system

import run_records
from bleu_corpus import PairSpec, PreparedPair, test_references
from bleu_runs import TrainConfig, attention_entry, curve_points
from buckets import pooled_bucket_bleu


METRICS = ("bleu", "chrf", "ribes")


def summarize(values: Sequence[float]) -> dict:
    """Mean and spread over seeds (sample standard deviation, min, max)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"n": 0}
    return {"mean": round(statistics.fmean(vals), 2),
            "std": round(statistics.stdev(vals), 2) if len(vals) > 1 else None,
            "min": min(vals), "max": max(vals), "n": len(vals), "values": list(vals)}


def pair_summary(runs: dict) -> dict:
    """Per system and evaluation set: mean/spread over seeds of each metric and of the bucket BLEUs; deltas of
    every system's mean against vanilla's."""
    out: dict = {}
    for system, by_seed in runs.items():
        sets = sorted({name for r in by_seed.values() for name in r["eval"]})
        out[system] = {}
        for name in sets:
            per = [r["eval"][name] for r in by_seed.values() if name in r["eval"]]
            entry = {m: summarize([p.get(m) for p in per]) for m in METRICS if any(m in p for p in per)}
            for bucket_key in ("bleu_by_length", "bleu_by_reordering"):
                if all(bucket_key in p for p in per):
                    entry[bucket_key] = [summarize(list(vals)) for vals in zip(*(p[bucket_key] for p in per))]
            out[system][name] = entry
        out[system]["train_seconds"] = summarize([r["train"]["seconds"] for r in by_seed.values()])
    if "vanilla" in out:
        for system, entry in out.items():
            for name, metrics in entry.items():
                if system != "vanilla" and isinstance(metrics, dict) and name in out["vanilla"]:
                    metrics["delta_vs_vanilla"] = paired_deltas(runs[system], runs["vanilla"], name)
    for system, by_seed in runs.items():  # after the deltas, which are for evaluation sets only
        aers = [r["attention"]["scores"]["argmax"]["aer"] for r in by_seed.values() if "attention" in r]
        if aers:
            out[system]["attention_aer"] = summarize(aers)
        drops = contrast_drops(out[system])
        if drops:
            out[system]["contrast_drop_bleu"] = drops
    return out


def paired_deltas(system: dict, baseline: dict, eval_set: str) -> dict:
    """Per metric, the mean over the seeds that both runs' sets have of system minus baseline (the same seed is the
    same data replica): a difference of means over different seeds would mix the spread between replicas into the
    difference while a campaign is part-way through a seed."""
    out = {}
    for m in METRICS:
        diffs = [system[seed]["eval"][eval_set][m] - baseline[seed]["eval"][eval_set][m]
                 for seed in system if seed in baseline
                 and m in system[seed]["eval"].get(eval_set, {}) and m in baseline[seed]["eval"].get(eval_set, {})]
        if diffs:
            out[m] = round(statistics.fmean(diffs), 2)
    return out


def contrast_drops(entry: dict) -> dict:
    """test@KIND BLEU minus test BLEU (means over seeds) of one system's summary."""
    test = (entry.get("test") or {}).get("bleu") or {}
    return {name: round(e["bleu"]["mean"] - test["mean"], 2) for name, e in entry.items()
            if name.startswith("test@") and isinstance(e, dict) and (e.get("bleu") or {}).get("n") and test.get("n")}


def significance_pairs(systems: Sequence[str], compare: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """(system, baseline) pairs to test on test: every system against vanilla, every XL system against its controls
    without XL information (X-monotone, X-random), encfree-X against encfree-vanilla, and the --compare pairs.
    Oracle systems are left out: they are evaluated on valid only."""
    run = [s for s in systems if not parse_system(s).oracle]
    out = [(s, "vanilla") for s in run if "vanilla" in run and s != "vanilla"]
    for s in run:
        spec = parse_system(s)
        if spec.reads_reorderer:
            out += [(s, s + suffix) for suffix in (MONOTONE_SUFFIX, RANDOM_SUFFIX) if s + suffix in run]
        if s.startswith(ENCFREE_PREFIX) and s != ENCFREE_PREFIX + "vanilla" and ENCFREE_PREFIX + "vanilla" in run:
            out.append((s, ENCFREE_PREFIX + "vanilla"))
    out += [c for c in compare if c not in out and c[0] in run and c[1] in run]  # (runs missing: left out)
    return out


def pair_significance(pair: PreparedPair, runs: dict, cfg: TrainConfig, compare: Sequence[tuple[str, str]],
                      args: argparse.Namespace) -> list[dict]:
    """significance_tests of a prepared pair, from the hypotheses its runs stored; cached beside the runs."""
    return significance_tests(pair.spec, runs, pair.eval_sets["test"].refs, compare, args,
                              stored_hypotheses(pair, cfg), pair.root / "runs" / cfg.tag() / "significance")


def stored_hypotheses(pair: PreparedPair, cfg: TrainConfig) -> Callable[[str, str], list[str] | None]:
    """(system, seed) -> the test hypotheses a run of this work directory stored (None: none)."""
    def hypotheses(name: str, seed: str) -> list[str] | None:
        path = pair.root / "runs" / cfg.tag() / f"{name}.seed{seed}" / "hyp" / "test.txt"
        return read_lines(str(path)) if path.exists() else None
    return hypotheses


def seed_pooled_buckets(spec: PairSpec, runs: dict, refs: list[str], hypotheses: Callable[[str, str], list[str] | None],
                        figures: dict[str, dict | None], compare: Sequence[tuple[str, str]] = ()) -> dict | None:
    """Test BLEU by length and reordering bucket with every seed's sentences pooled, and a bootstrap band
    (buckets.pooled_bucket_bleu); per bucket also the difference of every pair that significance_tests tests.
    figures: seed -> its data replica's "test_sentences" (pair info). None when a replica lacks them (records made
    before) or no run stored its hypotheses."""
    items: dict = {}
    for system, by_seed in runs.items():
        if system.endswith(ORACLE_SUFFIX):  # evaluated on valid only
            continue
        for seed in by_seed:
            hyps = hypotheses(system, seed)
            if hyps is not None and (figures.get(seed) or {}).get("reorderer_tau"):
                items.setdefault(system, {})[seed] = (hyps, refs)
    if not items:
        return None
    used = {seed for by_seed in items.values() for seed in by_seed}
    return pooled_bucket_bleu(items, {x: figures[x]["source_words"] for x in used},
                              {x: figures[x]["reorderer_tau"] for x in used}, spec.bleu_tokenize,
                              compare=significance_pairs(list(items), compare))


def significance_tests(spec: PairSpec, runs: dict, refs: list[str], compare: Sequence[tuple[str, str]],
                       args: argparse.Namespace, hypotheses: Callable[[str, str], list[str] | None],
                       cache: Path | None) -> list[dict]:
    """sacreBLEU's paired bootstrap and approximate randomization (xlpos_prep.significance) of every pair
    of significance_pairs on test; one test per seed pair (the same seed) and one on the seed-concatenated test
    set. Cached in `cache` (when given), keyed by the hypotheses and the settings."""
    sig = significance
    out = []
    for system, baseline in significance_pairs(list(runs), compare):
        hyps = {name: {seed: hypotheses(name, seed) for seed in runs[name]} for name in (system, baseline)}
        missing = [f"{name} seed {seed}" for name, by_seed in hyps.items() for seed, h in by_seed.items() if h is None]
        if missing:
            log(f"significance {system} vs {baseline}: no stored hypotheses of {missing[0]}; left out")
            continue
        digest = hashlib.sha1()  # over what the hypothesis files hold (the key of caches made before)
        for name in (system, baseline):
            for seed, lines in sorted(hyps[name].items()):
                digest.update(f"{name}.{seed}\n".encode() + "".join(x + "\n" for x in lines).encode())
        key = {"hypotheses_sha1": digest.hexdigest(), "bs_samples": args.bs_samples, "ar_trials": args.ar_trials,
               "tokenize": spec.bleu_tokenize}
        path = cache / f"test.{system}.vs.{baseline}.json" if cache else None
        if path and path.exists() and read_json(path).get("key") == key:
            out.append(read_json(path))
            continue
        log(f"{spec.name}: significance of {system} against {baseline} on test")
        [comparison] = sig.compare_over_seeds(baseline, hyps[baseline], {system: hyps[system]}, refs,
                                              tokenize=spec.bleu_tokenize, bs_samples=args.bs_samples,
                                              ar_trials=args.ar_trials)
        record = {"set": "test", **comparison.to_dict(), "key": key}
        if path:
            write_json(path, record)
        out.append(record)
    return out


def gather_from_records(spec: PairSpec, systems: Sequence[str], seeds: Sequence[int], cfg: TrainConfig,
                        compare: Sequence[tuple[str, str]], args: argparse.Namespace) -> dict | None:
    """One pair's results from the committed records alone (--no-train --records): no data, work directory or
    checkpoint. Significance is recomputed from the recorded hypotheses and the corpus's references. None when
    the pair has no record yet."""
    runs: dict = {}
    data: dict = {}
    for system in systems:
        for seed in seeds:
            key = run_records.RunKey(spec.name, system, seed)
            if not run_records.has_record(args.records, key):
                log(f"--no-train: {spec.name} {system} seed {seed} has no record in {args.records}; left out")
                continue
            record = run_records.read_record(args.records, key, cfg.tag())
            evals, attention, curve = {}, None, []
            for rel, obj in record["files"].items():
                folder, name = rel.split("/", 1)
                if folder == "scores":
                    stem = name[:-len(".json")]
                    evals["extra:" + stem[len("extra_"):] if stem.startswith("extra_") else stem] = obj
                elif rel == f"attention/test.layer{args.attention_layer}.json":
                    attention = attention_entry(spec, obj)
                elif folder == run_records.CURVE_DIR:
                    curve.append(obj)
            runs.setdefault(system, {})[str(seed)] = {"train": record["train"], "eval": evals,
                                                      **({"attention": attention} if attention else {}),
                                                      **({"curve": curve_points(curve)} if curve else {})}
            data.setdefault(str(seed), []).append((system, record["provenance"].get("data")))

    def hypotheses(name: str, seed: str) -> list[str] | None:
        try:
            return run_records.read_hypotheses(args.records, run_records.RunKey(spec.name, name, int(seed)), "test")
        except run_records.RecordError:
            return None

    if not runs:
        return None
    makings = {seed: replica_makings(records) for seed, records in data.items()}
    remade = {seed: [{"systems": m["systems"], **{k: (m["data"] or {}).get(k) for k in MAKING_FIGURES}}
                     for m in found] for seed, found in makings.items() if len(found) > 1}
    for seed, found in remade.items():
        log(f"--no-train: {spec.name} seed {seed}: its records come from {len(found)} makings of data replica {seed} "
            f"(" + "; ".join(", ".join(m["systems"]) for m in found) + "); the seed's figures are those of the "
            f"making {', '.join(found[0]['systems'])} used")
    by_seed = {seed: found[0]["data"] for seed, found in makings.items()}
    # the pair's figures of the first seed's data replica (what one run of bleu.py reports), every replica's beside
    first = next((d for d in by_seed.values() if d), {})
    refs = test_references(spec, args)
    return {**first, "records": str(args.records), "data_by_seed": by_seed, "runs": runs,
            **({"replica_makings": remade} if remade else {}),
            "summary": pair_summary(runs),
            "significance": significance_tests(spec, runs, refs, compare, args, hypotheses, None),
            "pooled_buckets": seed_pooled_buckets(
                spec, runs, refs, hypotheses, {seed: (d or {}).get("test_sentences") for seed, d in by_seed.items()},
                compare)}


MAKING_FIGURES = ("reorderer", "reordering_vs_oracle")  # what tells two makings of a replica apart, in the results


def replica_makings(records: Sequence[tuple[str, dict | None]]) -> list[dict]:
    """The makings of one seed's data replica that its records ((system, provenance data) each) come from: a replica
    made again (another machine, a lost work directory) has another eflomal alignment, since eflomal cannot be
    seeded, so another reorderer and other XL positions. Records of one making carry identical figures. Returns
    [{"systems", "data"}], the making read by the most systems that read the reorderer first (its figures are the
    seed's: the reordering buckets and the replica table), then in the order of the records."""
    found: dict[str, dict] = {}
    for system, data in records:
        key = json.dumps(data, sort_keys=True)
        found.setdefault(key, {"systems": [], "data": data})["systems"].append(system)
    return sorted(found.values(), key=lambda m: -sum(parse_system(s).reads_reorderer for s in m["systems"]))
