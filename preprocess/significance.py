"""Paired significance tests of BLEU and chrF differences between MT systems, with sacreBLEU's own implementation.

Both of sacreBLEU's paired tests run on the same hypotheses (what `sacrebleu REF -i BASE SYS --paired-bs` and
`--paired-ar` do): paired bootstrap resampling (Koehn 2004; `--paired-bs-n`, default 1000 resamples) and paired
approximate randomization (Riezler & Maxwell 2005; `--paired-ar-n`, default 10000 trials). The first system is the
baseline; each p-value is that of the difference between one system and the baseline. The 95% confidence interval
of every system's score is sacreBLEU's: the mean of the bootstrap resamples +- half the width of their central
95% (on the same resamples as the bootstrap test, so both come from one seeded run).

Several training seeds: each system seed is tested against the baseline trained with the SAME seed (seeds are
independent draws of the training run, so each seed pair is a valid paired test of one sample of each system) and
the count of significant seed pairs is reported (a difference found in 2/2 seed pairs is stronger evidence than one
found in 1/2). The seed-concatenated test set (every seed pair's hypotheses appended, references repeated) is
reported too, as one summary number, but it is anti-conservative: its copies of one sentence are resampled as if
they were independent sentences, so its p-values are smaller than the data justify. It is labelled as such.

Over seed pairs (seed_pair_t_test): each seed pair's difference is one draw of the whole experiment when each
seed also remakes its data (as the benchmarks' data replicas do), so a one-sample t-test of those differences
against zero has the spread between trainings and data makings in it, which every per-seed-pair test leaves out.
It needs at least three seed pairs and assumes the differences are roughly normal; it is this project's addition.

This module imports neither fairseq nor torch (it lives in the fairseq-free package for that reason).

    xlpos-significance --ref test.tgt --baseline vanilla=van.s1.txt,van.s2.txt \
        --system input=in.s1.txt,in.s2.txt --system rope=rope.s1.txt,rope.s2.txt --tokenize none --json sig.json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Iterator, Mapping, Sequence

DEFAULT_BS_SAMPLES = 1000     # sacreBLEU's default for --paired-bs
DEFAULT_AR_TRIALS = 10000     # sacreBLEU's default for --paired-ar
DEFAULT_SEED = 12345          # sacreBLEU's default SACREBLEU_SEED
DEFAULT_ALPHA = 0.05
CONCATENATION_CAVEAT = ("seed-concatenated test set: copies of one sentence are resampled as independent "
                        "sentences, so these p-values are anti-conservative (too small)")


@dataclass(frozen=True)
class MetricTest:
    """One metric of one system against the baseline: scores, both tests' p-values, 95% confidence intervals."""
    metric: str                   # sacreBLEU's score name: BLEU, chrF2
    baseline_score: float
    system_score: float
    delta: float                  # system - baseline
    p_bootstrap: float            # paired bootstrap resampling
    p_randomization: float        # paired approximate randomization
    baseline_mean: float          # bootstrap mean and 95% CI half-width, sacreBLEU's "mu +- ci"
    baseline_ci95: float
    system_mean: float
    system_ci95: float
    signature_bootstrap: str
    signature_randomization: str

    def significant(self, alpha: float = DEFAULT_ALPHA) -> bool:
        """A non-zero difference, significant by both tests at level alpha. sacreBLEU (after MultEval) gives two
        identical outputs the smallest p-value, 1/(n+1), since "a zero difference should not be attributed to
        chance"; a zero difference is no evidence for either system, so it never counts as significant here."""
        return self.delta != 0 and self.p_bootstrap < alpha and self.p_randomization < alpha


@dataclass(frozen=True)
class Comparison:
    """One system against the baseline on one test set, BLEU then chrF."""
    baseline: str
    system: str
    sentences: int
    tests: tuple[MetricTest, ...]

    def metric(self, prefix: str) -> MetricTest:
        """The test of the metric whose name starts with prefix ("BLEU", "chrF")."""
        for t in self.tests:
            if t.metric.lower().startswith(prefix.lower()):
                return t
        raise KeyError(f"no metric {prefix!r} among {[t.metric for t in self.tests]}")


@dataclass(frozen=True)
class SeedPair:
    baseline_seed: str
    system_seed: str
    comparison: Comparison


@dataclass(frozen=True)
class SeededComparison:
    """One system against the baseline over several seeds: one test per seed pair, plus the seed concatenation."""
    baseline: str
    system: str
    alpha: float
    seed_pairs: tuple[SeedPair, ...]
    concatenated: Comparison | None   # None with a single seed pair

    def significant_pairs(self, metric: str) -> int:
        """How many seed pairs show a significant difference in this metric (both tests, p < alpha)."""
        return sum(p.comparison.metric(metric).significant(self.alpha) for p in self.seed_pairs)

    def to_dict(self) -> dict:
        out = asdict(self)
        metrics = [t.metric for t in self.seed_pairs[0].comparison.tests] if self.seed_pairs else []
        out["significant_seed_pairs"] = {m: self.significant_pairs(m) for m in metrics}
        out["seed_pair_count"] = len(self.seed_pairs)
        if self.concatenated is not None:
            out["concatenated_caveat"] = CONCATENATION_CAVEAT
        return out


@contextmanager
def _sacrebleu_seed(seed: int) -> Iterator[None]:
    # sacreBLEU's PairedTest reads its RNG seed from this variable (its documented interface) when constructed.
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if old is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = old


def _metrics(tokenize: str) -> dict:
    from sacrebleu.metrics import BLEU, CHRF
    # force: tokenize=none is used on purpose for pre-tokenized text; no "looks tokenized" warning
    return {"BLEU": BLEU(tokenize=tokenize, force=tokenize == "none"), "chrF": CHRF()}


def paired_tests(baseline: Sequence[str], systems: Mapping[str, Sequence[str]], references: Sequence[str], *,
                 baseline_name: str = "baseline", tokenize: str = "13a", bs_samples: int = DEFAULT_BS_SAMPLES,
                 ar_trials: int = DEFAULT_AR_TRIALS, seed: int = DEFAULT_SEED) -> list[Comparison]:
    """Every system against the baseline: sacreBLEU's paired bootstrap and approximate randomization on BLEU and
    chrF. All hypothesis lists must be as long as the references."""
    from sacrebleu.significance import PairedTest
    for name, hyps in [(baseline_name, baseline), *systems.items()]:
        if len(hyps) != len(references):
            raise ValueError(f"{name}: {len(hyps)} hypotheses for {len(references)} references")
    if not systems:
        return []
    named = [(baseline_name, list(baseline)), *((n, list(h)) for n, h in systems.items())]
    refs = [list(references)]
    with _sacrebleu_seed(seed):
        bs_sigs, bs = PairedTest(named, _metrics(tokenize), refs, test_type="bs", n_samples=bs_samples)()
        ar_sigs, ar = PairedTest(named, _metrics(tokenize), refs, test_type="ar", n_samples=ar_trials,
                                 n_ar_confidence=-1)()
    out = []
    metric_names = [k for k in bs if k != "System"]
    for k, name in enumerate(bs["System"][1:], start=1):
        tests = []
        for m in metric_names:
            base, sys_bs, sys_ar = bs[m][0], bs[m][k], ar[m][k]
            tests.append(MetricTest(
                metric=m, baseline_score=round(float(base.score), 4), system_score=round(float(sys_bs.score), 4),
                delta=round(float(sys_bs.score - base.score), 4), p_bootstrap=round(float(sys_bs.p_value), 6),
                p_randomization=round(float(sys_ar.p_value), 6), baseline_mean=round(float(base.mean), 4),
                baseline_ci95=round(float(base.ci), 4), system_mean=round(float(sys_bs.mean), 4),
                system_ci95=round(float(sys_bs.ci), 4), signature_bootstrap=str(bs_sigs[m]),
                signature_randomization=str(ar_sigs[m])))
        out.append(Comparison(baseline_name, name, len(references), tuple(tests)))
    return out


def pair_seeds(baseline_seeds: Sequence[str], system_seeds: Sequence[str]) -> list[tuple[str, str]]:
    """Seed pairs: the seeds both have (same seed, same data order); without a common seed, by position."""
    common = [s for s in baseline_seeds if s in set(system_seeds)]
    if common:
        return [(s, s) for s in common]
    return list(zip(baseline_seeds, system_seeds))


@dataclass(frozen=True)
class SeedPairTTest:
    """One-sample t-test of the seed pairs' differences against zero: their mean, a t-interval, two-sided p."""
    n: int
    mean: float
    low: float
    high: float
    p: float


def seed_pair_t_test(differences: Sequence[float], level: float = 0.95) -> SeedPairTTest | None:
    """The t-test of the differences (system minus baseline, one per seed pair), its interval at `level`; None with
    fewer than three (one degree of freedom gives an interval too wide to say anything)."""
    from scipy import stats  # installed with fairseq (scikit-learn needs it)

    n = len(differences)
    if n < 3:
        return None
    mean = statistics.fmean(differences)
    se = statistics.stdev(differences) / math.sqrt(n)
    if se == 0.0:  # every seed pair alike: the interval is the point
        return SeedPairTTest(n, mean, mean, mean, 1.0 if mean == 0.0 else 0.0)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    p = float(2 * stats.t.sf(abs(mean) / se, n - 1))
    return SeedPairTTest(n, mean, mean - half, mean + half, p)


def compare_over_seeds(baseline_name: str, baseline_runs: Mapping[str, Sequence[str]],
                       systems: Mapping[str, Mapping[str, Sequence[str]]], references: Sequence[str], *,
                       alpha: float = DEFAULT_ALPHA, **test_options) -> list[SeededComparison]:
    """Every system (name -> seed -> hypotheses) against the baseline (seed -> hypotheses): one paired test per
    seed pair (see pair_seeds) and one on the seed-concatenated test set when there are several seed pairs."""
    pairs = {name: pair_seeds(list(baseline_runs), list(runs)) for name, runs in systems.items()}
    per_pair: dict[str, list[SeedPair]] = {name: [] for name in systems}
    # one PairedTest per baseline seed, so the baseline's statistics are computed once for all systems
    for b_seed in baseline_runs:
        wanted = {name: runs[s_seed] for name, runs in systems.items() for b, s_seed in pairs[name] if b == b_seed}
        for comp in paired_tests(baseline_runs[b_seed], wanted, references, baseline_name=baseline_name,
                                 **test_options):
            s_seed = next(s for b, s in pairs[comp.system] if b == b_seed)
            per_pair[comp.system].append(SeedPair(b_seed, s_seed, comp))
    out = []
    for name, runs in systems.items():
        concatenated = None
        if len(pairs[name]) > 1:
            base = [h for b, _ in pairs[name] for h in baseline_runs[b]]
            hyps = [h for _, s in pairs[name] for h in runs[s]]
            refs = [r for _ in pairs[name] for r in references]
            concatenated = paired_tests(base, {name: hyps}, refs, baseline_name=baseline_name, **test_options)[0]
        out.append(SeededComparison(baseline_name, name, alpha, tuple(per_pair[name]), concatenated))
    return out


def format_table(records: Sequence[dict]) -> str:
    """Plain-text table of SeededComparison.to_dict() records (what the JSON holds, so a report can be printed
    again from stored results): per system, seed pair and metric, the delta, both p-values and the 95% CIs."""
    header = (f"{'system':<16} {'baseline':<12} {'seeds':<9} {'metric':<6} {'baseline':>15} {'system':>15} "
              f"{'delta':>7} {'p (bootstrap)':>13} {'p (AR)':>8}")
    lines = [header, "-" * len(header)]
    for c in records:
        rows = [(f"{p['baseline_seed']}/{p['system_seed']}", p["comparison"]) for p in c["seed_pairs"]]
        if c.get("concatenated"):
            rows.append(("concat*", c["concatenated"]))
        for label, comp in rows:
            for t in comp["tests"]:
                lines.append(f"{c['system']:<16} {c['baseline']:<12} {label:<9} {t['metric']:<6} "
                             f"{t['baseline_score']:>6.2f} ±{t['baseline_ci95']:<6.2f} {t['system_score']:>6.2f} "
                             f"±{t['system_ci95']:<6.2f} {t['delta']:>+7.2f} {t['p_bootstrap']:>13.4f} "
                             f"{t['p_randomization']:>8.4f}")
        counts = ", ".join(f"{m} {k}/{c['seed_pair_count']}" for m, k in c["significant_seed_pairs"].items())
        lines.append(f"{'':<16} significant seed pairs (both tests p < {c['alpha']}, delta != 0): {counts}")
    lines.append("score ±x: sacreBLEU score and the half-width of its bootstrap 95% confidence interval")
    if any(c.get("concatenated") for c in records):
        lines.append("* " + CONCATENATION_CAVEAT)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ command line
def _read(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f]
    except OSError as e:
        raise SystemExit(f"{path}: {e.strerror}")


def _named_files(option: str, value: str) -> tuple[str, list[str]]:
    name, sep, files = value.partition("=")
    if not sep or not name or not files:
        raise SystemExit(f"{option} {value}: expected NAME=FILE[,FILE...] (one file per seed)")
    return name, [f for f in files.split(",") if f]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="xlpos-significance", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", required=True, help="reference file, one sentence per line")
    p.add_argument("--baseline", required=True, help="NAME=FILE[,FILE...]: the baseline's hypotheses, one file per "
                   "seed")
    p.add_argument("--system", action="append", required=True,
                   help="NAME=FILE[,FILE...]: a system's hypotheses, one file per seed, in the baseline's seed "
                        "order (repeatable)")
    p.add_argument("--seed-labels", help="comma-separated names of the seeds, in file order (default 1,2,...)")
    p.add_argument("--tokenize", default="13a", help="sacreBLEU BLEU tokenizer (default 13a; none for pre-tokenized "
                                                     "text)")
    p.add_argument("--bs-samples", type=int, default=DEFAULT_BS_SAMPLES, help="bootstrap resamples (default 1000)")
    p.add_argument("--ar-trials", type=int, default=DEFAULT_AR_TRIALS,
                   help="approximate randomization trials (default 10000)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="sacreBLEU's resampling seed (default 12345)")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="significance level (default 0.05)")
    p.add_argument("--json", help="write every figure to this JSON file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    refs = _read(args.ref)
    base_name, base_files = _named_files("--baseline", args.baseline)
    labels = args.seed_labels.split(",") if args.seed_labels else [str(k) for k in range(1, len(base_files) + 1)]
    if len(labels) != len(base_files):
        raise SystemExit(f"--seed-labels {args.seed_labels}: {len(labels)} labels for {len(base_files)} baseline "
                         f"files")

    def load(files: list[str], option: str) -> dict[str, list[str]]:
        if len(files) > len(labels):
            raise SystemExit(f"{option}: {len(files)} files but the baseline has {len(labels)} seeds")
        runs = {}
        for label, path in zip(labels, files):
            runs[label] = _read(path)
            if len(runs[label]) != len(refs):
                raise SystemExit(f"{path}: {len(runs[label])} lines but {args.ref} has {len(refs)}")
        return runs

    baseline = load(base_files, "--baseline")
    systems = {}
    for value in args.system:
        name, files = _named_files("--system", value)
        if name in systems or name == base_name:
            raise SystemExit(f"--system {value}: the name {name} is used twice")
        systems[name] = load(files, "--system")
    comparisons = compare_over_seeds(base_name, baseline, systems, refs, alpha=args.alpha, tokenize=args.tokenize,
                                     bs_samples=args.bs_samples, ar_trials=args.ar_trials, seed=args.seed)
    print(f"{len(systems)} system(s) against {base_name} on {args.ref} ({len(refs)} sentences, {len(labels)} "
          f"seed(s)): paired bootstrap ({args.bs_samples} resamples) and approximate randomization "
          f"({args.ar_trials} trials), sacreBLEU seed {args.seed}")
    print(format_table([c.to_dict() for c in comparisons]))
    if args.json:
        from xlpos_prep.io import atomic_output
        with atomic_output(args.json) as f:
            json.dump({"reference": args.ref, "baseline": base_name, "seeds": labels, "tokenize": args.tokenize,
                       "comparisons": [c.to_dict() for c in comparisons]}, f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
