"""The same systems of two campaigns, tested against each other run by run: what the second campaign changed (the
reorderer, a data setting) against the first, on the same data replica.

Within one campaign every system is tested against its baselines (benchmarks/bleu.py). Two campaigns that differ
in their data (e.g. `--reorder-args "--kind neural"`: the neural reorderer's positions) keep their records apart;
this pairs the records of one pair, system and seed across the two directories and runs sacreBLEU's paired
bootstrap and approximate randomization on their test hypotheses (xlpos_prep.significance, as bleu.py does), with
the references read from the corpus as bleu.py reads them. A pair of runs is compared only when both are of one
configuration tag (same model and training arguments) and of one making of the data replica's alignment: their
oracle orders of test agree (the monotone order's corpus tau against them, a fingerprint of the alignment; eflomal
cannot be seeded, so a replica made again differs). What else differs between the runs' data is printed.

    python benchmarks/compare_records.py docs/runs/2026-12-positions-decisive \\
        docs/runs/2026-12-reorderer-neural-bleu --systems rope,input-tanh --seeds 1 \\
        --json docs/reorderer_neural_bleu.json --markdown docs/reorderer_neural_bleu.md
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_records  # noqa: E402
from bleu_corpus import DATA, PAIRS, test_references  # noqa: E402
from xlpos_prep import significance  # noqa: E402
from xlpos_prep.io import atomic_output, log  # noqa: E402


class CompareError(ValueError):
    """Two records that cannot be compared: a one-line reason naming them."""


@dataclass(frozen=True)
class RunFigures:
    """What the table shows of one run: its scores and its data replica's reordering of test."""
    test_bleu: float
    test_chrf: float
    valid_bleu: float
    reorderer_tau: float | None
    reorderer_frs: float | None

    @classmethod
    def of(cls, record: dict) -> RunFigures:
        scores = record["files"]
        test = (record["provenance"].get("data") or {}).get("reordering_vs_oracle", {}).get("test", {})
        reorderer = test.get("reorderer") or {}
        return cls(scores["scores/test.json"]["bleu"], scores["scores/test.json"]["chrf"],
                   scores["scores/valid.json"]["bleu"], reorderer.get("corpus_tau"), reorderer.get("corpus_frs"))


def alignment_fingerprint(record: dict) -> float | None:
    """The monotone order's corpus tau against the replica's test oracles: equal for one alignment's oracles."""
    data = record["provenance"].get("data") or {}
    return data.get("reordering_vs_oracle", {}).get("test", {}).get("monotone", {}).get("corpus_tau")


def data_differences(a: dict, b: dict) -> dict:
    """The bleu.py data settings and reorderer settings in which two runs' records differ: {name: [a, b]}."""
    def settings(record: dict) -> dict:
        data = record["provenance"].get("data") or {}
        reorderer = data.get("reorderer") or {}
        return {**{f"bleu.py {k}": v for k, v in record["provenance"].get("bleu_py_config", {}).items()},
                **{f"reorderer {k}": v for k, v in (reorderer.get("config") or {}).items()}}
    sa, sb = settings(a), settings(b)
    return {k: [sa.get(k), sb.get(k)] for k in sorted(set(sa) | set(sb)) if sa.get(k) != sb.get(k)}


def check_comparable(base_dir: Path, other_dir: Path, key: run_records.RunKey, base: dict, other: dict) -> None:
    where = f"{key.pair} {key.name} in {base_dir} and {other_dir}"
    if base["config_tag"] != other["config_tag"]:
        raise CompareError(f"{where}: configurations {base['config_tag']} and {other['config_tag']} differ "
                           f"(other model or training arguments)")
    fa, fb = alignment_fingerprint(base), alignment_fingerprint(other)
    if fa is None or fb is None or abs(fa - fb) > 1e-12:
        raise CompareError(f"{where}: not of one making of data replica {key.seed} (monotone tau against the test "
                           f"oracles {fa} and {fb}): the alignments differ")


def compare(base_dir: Path, other_dir: Path, pairs: list[str], systems: list[str], seeds: list[int], data: Path,
            bs_samples: int, ar_trials: int) -> list[dict]:
    """One entry per pair and system with records in both directories (for the seeds both have)."""
    out = []
    for pair in pairs:
        spec = PAIRS[pair]
        refs: list[str] | None = None
        for system in systems:
            keys = [run_records.RunKey(pair, system, s) for s in seeds]
            found = [k for k in keys if run_records.has_record(base_dir, k) and run_records.has_record(other_dir, k)]
            for k in keys:
                if k not in found:
                    log(f"{pair} {k.name}: no record in both directories; left out")
            if not found:
                continue
            records = {k.seed: (run_records.read_record(base_dir, k), run_records.read_record(other_dir, k))
                       for k in found}
            for k in found:
                check_comparable(base_dir, other_dir, k, *records[k.seed])
            if refs is None:
                config = records[found[0].seed][0]["provenance"]["bleu_py_config"]
                refs = test_references(spec, argparse.Namespace(data=str(data), train_lines=config["train_lines"],
                                                                test_lines=config["test_lines"]))
            hyps = [{str(k.seed): run_records.read_hypotheses(d, k, "test") for k in found}
                    for d in (base_dir, other_dir)]
            log(f"{pair} {system}: {other_dir.name} against {base_dir.name}, seeds "
                f"{','.join(str(k.seed) for k in found)}")
            [result] = significance.compare_over_seeds(base_dir.name, hyps[0], {other_dir.name: hyps[1]}, refs,
                                                       tokenize=spec.bleu_tokenize, bs_samples=bs_samples,
                                                       ar_trials=ar_trials)
            out.append({"pair": pair, "system": system, "baseline": str(base_dir), "other": str(other_dir),
                        "runs": {str(s): {"baseline": RunFigures.of(a).__dict__, "other": RunFigures.of(b).__dict__,
                                          "data_differences": data_differences(a, b)}
                                 for s, (a, b) in records.items()},
                        "significance": result.to_dict()})
    return out


def markdown(results: list[dict]) -> str:
    def tau(x: float | None) -> str:
        return "–" if x is None else f"{x:.4f}"
    rows = ["| pair | system | seed | test BLEU, baseline → other | Δ BLEU | p BLEU (BS / AR) | Δ chrF | "
            "p chrF (BS / AR) | dev BLEU, baseline → other | reorderer tau / FRS on test, baseline → other |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for pair in r["significance"]["seed_pairs"]:
            seed = pair["system_seed"]
            a, b = r["runs"][seed]["baseline"], r["runs"][seed]["other"]
            tests = pair["comparison"]["tests"]
            bleu = next(m for m in tests if m["metric"].startswith("BLEU"))
            chrf = next(m for m in tests if m["metric"].startswith("chrF"))
            rows.append(f"| {r['pair']} | {r['system']} | {seed} | {a['test_bleu']:.2f} → {b['test_bleu']:.2f} | "
                        f"{bleu['delta']:+.2f} | {bleu['p_bootstrap']:.3f} / {bleu['p_randomization']:.3f} | "
                        f"{chrf['delta']:+.2f} | {chrf['p_bootstrap']:.3f} / {chrf['p_randomization']:.3f} | "
                        f"{a['valid_bleu']:.2f} → {b['valid_bleu']:.2f} | {tau(a['reorderer_tau'])} / "
                        f"{tau(a['reorderer_frs'])} → {tau(b['reorderer_tau'])} / {tau(b['reorderer_frs'])} |")
    if results:
        first = results[0]
        rows.append("")
        rows.append(f"Baseline: `{first['baseline']}`; other: `{first['other']}`. Sacrebleu paired bootstrap / "
                    f"approximate randomization on test, one test per seed.")
        # runs whose data differ in the same way share one line (both systems of a pair and seed usually do)
        differences: dict[str, list[str]] = {}
        for r in results:
            for seed, run in r["runs"].items():
                text = "; ".join(f"{k}: {v[0]!r} → {v[1]!r}" for k, v in run["data_differences"].items())
                differences.setdefault(text or "nothing recorded", []).append(f"{r['pair']} {r['system']} seed {seed}")
        for text, runs in differences.items():
            which = "The runs'" if len(differences) == 1 else ", ".join(runs) + ":"
            rows.append("")
            rows.append(f"{which} data differ in: {text}.")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("baseline", type=Path, help="the first campaign's (or records) directory")
    p.add_argument("other", type=Path, help="the second campaign's (or records) directory")
    p.add_argument("--pairs", default="ja-en,en-ja", help="comma-separated pairs (default ja-en,en-ja)")
    p.add_argument("--systems", required=True, help="comma-separated systems present in both")
    p.add_argument("--seeds", default="1", help="comma-separated seeds (default 1)")
    p.add_argument("--data", type=Path, default=DATA, help="directory holding enja/ and ende/ (the references)")
    p.add_argument("--bs-samples", type=int, default=significance.DEFAULT_BS_SAMPLES)
    p.add_argument("--ar-trials", type=int, default=significance.DEFAULT_AR_TRIALS)
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--markdown", type=Path, help="write the table here")
    args = p.parse_args(argv)
    pairs = [x for x in args.pairs.split(",") if x]
    unknown = [x for x in pairs if x not in PAIRS]
    if unknown:
        p.error(f"--pairs: unknown pair(s) {', '.join(unknown)}; choose from {', '.join(PAIRS)}")
    generated = [x for x in pairs if PAIRS[x].synthetic]
    if generated:
        p.error(f"--pairs: {', '.join(generated)}: a generated corpus (its references live in bleu.py's --work)")
    try:
        seeds = [int(x) for x in args.seeds.split(",") if x]
    except ValueError:
        p.error(f"--seeds {args.seeds}: expected comma-separated integers")
    for d in (args.baseline, args.other):
        if not d.is_dir():
            p.error(f"{d}: no such directory")
    try:
        results = compare(args.baseline, args.other, pairs, [x for x in args.systems.split(",") if x], seeds,
                          args.data, args.bs_samples, args.ar_trials)
    except (CompareError, run_records.RecordError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    table = markdown(results)
    print(table, end="")
    if args.json:
        with atomic_output(str(args.json)) as f:
            json.dump(results, f, indent=1)
            f.write("\n")
        log(f"wrote {args.json}")
    if args.markdown:
        with atomic_output(str(args.markdown)) as f:
            f.write(table)
        log(f"wrote {args.markdown}")
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
