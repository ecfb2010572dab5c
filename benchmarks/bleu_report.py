"""The BLEU benchmark's report (benchmarks/bleu.py): its results as the README's Markdown tables (systems,
significance, differences by reordering bucket, contrastive positions, dev curves, data replicas) and as the table
printed at the end of a run.
"""
from __future__ import annotations

import statistics
from typing import Sequence

from xlpos_prep import significance
from xlpos_prep.systems import ORACLE_SUFFIX

from bleu_corpus import PAIRS, VALID_ORACLE_POSITIONS, attention_reference


def markdown_table(results: dict) -> str:
    """The results as one Markdown table (the README's): per pair and system, mean ± sample std over seeds."""
    def cell(entry: dict | None, metric: str, signed: bool = False) -> str:
        m = (entry or {}).get(metric) or {}
        if not m.get("n"):
            return "–"
        text = f"{m['mean']:+.2f}" if signed else f"{m['mean']:.2f}"
        return text + (f" ± {m['std']:.2f}" if m.get("std") is not None else "")

    reference = ("gold on synth, else silver" if any(PAIRS[p].gold_alignment for p in results["pairs"] if p in PAIRS)
                 else "silver")
    lines = ["| pair | system | seeds | test BLEU | Δ BLEU vs vanilla, same seeds | p vs vanilla (BS / AR) | "
             "± 95% CI of test BLEU | "
             f"test chrF | test RIBES | dev BLEU | dev BLEU, oracle positions | attention AER ({reference}) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for pair_name, pair in results["pairs"].items():
        # records made before the significance tests existed have none: their cells stay empty
        vs_vanilla = {r["system"]: r for r in pair.get("significance", []) if r["baseline"] == "vanilla"}
        for system, entry in pair["summary"].items():
            test, valid = entry.get("test"), entry.get("valid")
            delta = (test or {}).get("delta_vs_vanilla", {}).get("bleu")
            seeds = ",".join(pair["runs"].get(system, {}))
            oracle = (cell(valid, "bleu") if system.endswith(ORACLE_SUFFIX)
                      else cell(entry.get(VALID_ORACLE_POSITIONS), "bleu"))
            dev = "–" if system.endswith(ORACLE_SUFFIX) else cell(valid, "bleu")
            p_cell, ci_cell = significance_cells(vs_vanilla.get(system), "BLEU")
            lines.append(f"| {pair_name} | {system} | {seeds} | {cell(test, 'bleu')} | "
                         f"{'–' if delta is None else f'{delta:+.2f}'} | {p_cell} | {ci_cell} | {cell(test, 'chrf')} | "
                         f"{cell(test, 'ribes')} | {dev} | {oracle} | {cell(entry, 'attention_aer')} |")
    lines += (significance_markdown(results) + reordering_delta_markdown(results) + contrast_markdown(results)
              + curve_markdown(results) + replica_markdown(results))
    for pair_name, pair in results["pairs"].items():
        if pair.get("eflomal_vs_gold"):
            lines += ["", f"{pair_name}: eflomal's alignment of test (grow-diag-final-and; the silver standard of the "
                      f"other pairs) scores AER {pair['eflomal_vs_gold']['aer']:.3f} against the gold."]
    return "\n".join(lines) + "\n"


def significance_cells(record: dict | None, metric: str) -> tuple[str, str]:
    """('p bootstrap / p AR', '±CI') of one comparison record: one seed pair as it is, marked * when significant
    in the system's favour and "(below)" when significant the other way; several as the largest p-values and the
    count of seed pairs significantly above the baseline, with those significantly below named apart (a p-value
    alone does not say which way); the CI is the widest of the system's bootstrap 95% intervals (half-width)."""
    if not record or not record["seed_pairs"]:
        return "–", "–"
    tests = [next(t for t in p["comparison"]["tests"] if t["metric"].startswith(metric)) for p in record["seed_pairs"]]
    bs, ar = max(t["p_bootstrap"] for t in tests), max(t["p_randomization"] for t in tests)
    ci = f"±{max(t['system_ci95'] for t in tests):.2f}"
    alpha = record.get("alpha", 0.05)
    significant = [t["delta"] for t in tests if t["delta"] != 0 and max(t["p_bootstrap"], t["p_randomization"]) < alpha]
    above, below = sum(d > 0 for d in significant), sum(d < 0 for d in significant)
    if len(tests) == 1:
        return f"{p_value(bs)} / {p_value(ar)}{'*' if above else ' (below)' if below else ''}", ci
    return f"≤{p_value(bs)} / ≤{p_value(ar)} ({above}/{len(tests)}{f', {below} below' if below else ''})", ci


def delta_cell(values: Sequence[float]) -> str:
    """The mean of the seed pairs' differences, and each of them when there are several: a mean of three alone
    hides whether every seed agrees."""
    if not values:
        return "–"
    mean = f"{statistics.fmean(values):+.2f}"
    return mean if len(values) == 1 else f"{mean} ({', '.join(f'{v:+.2f}' for v in values)})"


def p_value(p: float) -> str:
    """Three decimals, or two significant digits below 0.001: approximate randomization's floor with 10,000
    trials is 1/10001, which three decimals would print as 0.000."""
    return f"{p:.3f}" if p >= 0.001 else f"{p:.2g}"


def significance_markdown(results: dict) -> list[str]:
    """Every significance comparison (vanilla and the named pairs), BLEU and chrF."""
    rows = [(pair_name, r) for pair_name, pair in results["pairs"].items() for r in pair.get("significance", [])]
    if not rows:
        return []
    lines = ["", "Significance on test (sacreBLEU paired bootstrap, 1000 resamples / approximate randomization, "
             "10000 trials, unless the JSON says otherwise): p-values, the largest over seed pairs; (k/n): seed "
             "pairs significantly above the baseline by both tests at p < 0.05 ('j below': significant the other "
             "way); * one seed pair, significantly above; (below): significantly below. Δ: the mean over seed "
             "pairs, each seed pair's Δ in brackets (each seed is its own data replica: their spread is the "
             "replicas' and the training's). Over seed pairs: a t-test of those Δ against 0 (three seed pairs or "
             "more), its 95% interval and p.", "",
             "| pair | system | baseline | seed pairs | Δ BLEU | p BLEU (BS / AR) | ± 95% CI of the system's BLEU | "
             "Δ BLEU over seed pairs (p) | Δ chrF | p chrF (BS / AR) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for pair_name, r in rows:
        seeds = ",".join(f"{p['system_seed']}" if p["system_seed"] == p["baseline_seed"] else
                         f"{p['system_seed']}/{p['baseline_seed']}" for p in r["seed_pairs"])
        p_bleu, ci_bleu = significance_cells(r, "BLEU")
        p_chrf, _ = significance_cells(r, "chrF")
        bleu, chrf = seed_pair_deltas(r, "BLEU"), seed_pair_deltas(r, "chrF")
        lines.append(f"| {pair_name} | {r['system']} | {r['baseline']} | {seeds} | {delta_cell(bleu)} | {p_bleu} | "
                     f"{ci_bleu} | {t_test_cell(bleu)} | {delta_cell(chrf)} | {p_chrf} |")
    return lines + over_pairs_markdown(rows)


def seed_pair_deltas(record: dict, metric: str) -> list[float]:
    """Each seed pair's difference (system minus baseline) of one significance record."""
    return [next(t["delta"] for t in p["comparison"]["tests"] if t["metric"].startswith(metric))
            for p in record["seed_pairs"]]


def t_test_cell(differences: Sequence[float]) -> str:
    """'low..high (p)' of the t-test over seed pairs (significance.seed_pair_t_test), or – below three."""
    test = significance.seed_pair_t_test(differences)
    return "–" if test is None else f"{test.low:+.2f}..{test.high:+.2f} ({p_value(test.p)})"


def over_pairs_markdown(rows: Sequence[tuple[str, dict]]) -> list[str]:
    """The t-test over the seed pairs of every language pair together, for each comparison made on several pairs:
    it assumes one effect in every direction, which the per-pair rows above let a reader check."""
    by_comparison: dict[tuple[str, str], list[tuple[str, dict]]] = {}
    for pair_name, r in rows:
        by_comparison.setdefault((r["system"], r["baseline"]), []).append((pair_name, r))
    shared = {k: v for k, v in by_comparison.items() if len(v) > 1}
    if not shared:
        return []
    lines = ["", "Over the seed pairs of every language pair together (one effect assumed in every direction):", "",
             "| system | baseline | seed pairs | Δ BLEU | Δ BLEU over seed pairs (p) | Δ chrF | "
             "Δ chrF over seed pairs (p) |", "|---|---|---|---|---|---|---|"]
    for (system, baseline), found in shared.items():
        bleu = [d for _, r in found for d in seed_pair_deltas(r, "BLEU")]
        chrf = [d for _, r in found for d in seed_pair_deltas(r, "chrF")]
        pairs = ", ".join(f"{name} {len(r['seed_pairs'])}" for name, r in found)
        lines.append(f"| {system} | {baseline} | {pairs} | {delta_cell(bleu)} | {t_test_cell(bleu)} | "
                     f"{delta_cell(chrf)} | {t_test_cell(chrf)} |")
    return lines


def reordering_delta_markdown(results: dict) -> list[str]:
    """Per pair, each tested difference by how much the reorderer moves a sentence (buckets.pooled_bucket_bleu)."""
    lines = []
    for pair_name, pair in results["pairs"].items():
        pooled = (pair.get("pooled_buckets") or {}).get("reordering") or {}
        deltas = pooled.get("deltas") or []
        if not deltas:
            continue
        widest = max(deltas, key=lambda d: len(d["seeds"]))
        labels = [f"{label} ({cell['sentences'] if cell else 0})" for label, cell in zip(pooled["labels"],
                                                                                        widest["cells"])]
        if not lines:
            lines += ["", "Δ test BLEU by how much the reorderer moves a sentence (Kendall tau of its order against "
                      "the source order; every seed's test sentences pooled, each in the bucket of its own data "
                      "replica's reorderer; sentences per bucket in brackets; a 95% paired bootstrap band of the "
                      "difference after each Δ):"]
        lines += ["", f"| {pair_name}: system | baseline | seeds | " + " | ".join(labels) + " |",
                  "|---|---|---|" + "---|" * len(labels)]
        for d in deltas:
            cells = [f"{c['delta']:+.2f} ({c['low']:+.2f}..{c['high']:+.2f})" if c else "–" for c in d["cells"]]
            lines.append(f"| {d['system']} | {d['baseline']} | {','.join(d['seeds'])} | " + " | ".join(cells) + " |")
    return lines


def contrast_markdown(results: dict) -> list[str]:
    """Test BLEU of every XL model decoded with contrastive XL positions, and its drop from test BLEU."""
    rows = [(pair_name, system, entry) for pair_name, pair in results["pairs"].items()
            for system, entry in pair["summary"].items() if entry.get("contrast_drop_bleu")]
    if not rows:
        return []
    names = sorted({n for _, _, e in rows for n in e["contrast_drop_bleu"]})
    lines = ["", "Contrastive XL positions at test time (the same trained model; BLEU and its change from test "
             "BLEU with reorderer positions):", "",
             "| pair | system | test BLEU | " + " | ".join(n.replace("test@", "") for n in names) + " |",
             "|---|---|---|" + "---|" * len(names)]
    for pair_name, system, entry in rows:
        cells = [f"{entry[n]['bleu']['mean']:.2f} ({entry['contrast_drop_bleu'][n]:+.2f})"
                 if n in entry["contrast_drop_bleu"] else "–" for n in names]
        lines.append(f"| {pair_name} | {system} | {entry['test']['bleu']['mean']:.2f} | " + " | ".join(cells) + " |")
    return lines


def curve_markdown(results: dict) -> list[str]:
    """Dev BLEU of every run that kept a dev curve (--curve-every), one row per system and seed: where it
    flattens; then, per seed, the differences of curve_pairs at each point: whether a lead grows or fades."""
    rows = [(pair_name, system, seed, {p["updates"]: p["bleu"] for p in run["curve"]})
            for pair_name, pair in results["pairs"].items() for system, by_seed in pair["runs"].items()
            for seed, run in by_seed.items() if run.get("curve")]
    if not rows:
        return []
    updates = sorted({u for *_, points in rows for u in points})
    lines = ["", "Dev BLEU along the training (the checkpoints saved every --curve-every updates; the last column is "
             "the final checkpoint, the dev BLEU above):", "",
             "| pair | system | seed | " + " | ".join(f"{u:,}" for u in updates) + " |",
             "|---|---|---|" + "---|" * len(updates)]
    for pair_name, system, seed, points in rows:
        lines.append(f"| {pair_name} | {system} | {seed} | "
                     + " | ".join(f"{points[u]:.2f}" if u in points else "–" for u in updates) + " |")
    curves = {(pair_name, system, seed): points for pair_name, system, seed, points in rows}
    deltas = [(pair_name, system, baseline, seed, curves[pair_name, system, seed], curves[pair_name, baseline, seed])
              for pair_name, pair in results["pairs"].items() for system, baseline in curve_pairs(pair)
              for seed in pair["runs"].get(system, {})
              if (pair_name, system, seed) in curves and (pair_name, baseline, seed) in curves]
    if deltas:
        lines += ["", "Δ dev BLEU along the training (system − baseline, the same seed; oracle systems against their "
                  "namesake on the reorderer's positions and that system's baselines):", "",
                  "| pair | system | baseline | seed | " + " | ".join(f"{u:,}" for u in updates) + " |",
                  "|---|---|---|---|" + "---|" * len(updates)]
        for pair_name, system, baseline, seed, points, base in deltas:
            lines.append(f"| {pair_name} | {system} | {baseline} | {seed} | " + " | ".join(
                f"{points[u] - base[u]:+.2f}" if u in points and u in base else "–" for u in updates) + " |")
    return lines


def curve_pairs(pair: dict) -> list[tuple[str, str]]:
    """The (system, baseline) differences a pair's dev curves show: every pair its significance tests compare on
    test, and each oracle system (scored on dev only, so in no test) against the same system on the reorderer's
    positions, what the reorderer misses, and against that system's baselines, what reordering information is worth
    at each budget."""
    tested = [(entry["system"], entry["baseline"]) for entry in pair.get("significance") or []]
    out = list(dict.fromkeys(tested))
    for system in pair["runs"]:
        if system.endswith(ORACLE_SUFFIX):
            namesake = system[:-len(ORACLE_SUFFIX)]
            out += [(system, b) for b in [namesake] + [b for s, b in tested if s == namesake]
                    if b in pair["runs"] and (system, b) not in out]
    return out


def replica_markdown(results: dict) -> list[str]:
    """Per pair, what each seed's data replica (its own eflomal alignment, oracle and reorderer) gives on test:
    the reorderer's order against that replica's oracle, monotone's beside it, and their spread over replicas; the
    spread of the BLEU means above includes this."""
    columns = [(kind, metric) for kind in ("reorderer", "monotone") for metric in ("corpus_tau", "corpus_frs")]
    rows = []
    for pair_name, pair in results["pairs"].items():
        replicas = {seed: d["reordering_vs_oracle"]["test"] for seed, d in (pair.get("data_by_seed") or {}).items()
                    if d and d.get("reordering_vs_oracle")}
        makings = pair.get("replica_makings") or {}
        for seed, r in sorted(replicas.items(), key=lambda kv: int(kv[0])):
            # a replica made more than once: a row per making, the seed's (r) first
            labelled = ([(f"{seed}, made for {', '.join(m['systems'])}",
                          (m.get("reordering_vs_oracle") or {}).get("test")) for m in makings[seed]]
                        if seed in makings else [(seed, r)])
            for label, figures in labelled:
                cells = [f"{figures[k][m]:.4f}" for k, m in columns] if figures else ["–"] * len(columns)
                rows.append(f"| {pair_name} | {label} | " + " | ".join(cells) + " |")
        if len(replicas) > 1:
            values = [[r[k][m] for r in replicas.values()] for k, m in columns]
            rows.append(f"| {pair_name} | mean ± sd | " + " | ".join(
                f"{statistics.fmean(v):.4f} ± {statistics.stdev(v):.4f}" for v in values) + " |")
    if not rows:
        return []
    remade = [f"{pair_name} {seed}" for pair_name, pair in results["pairs"].items()
              for seed in sorted(pair.get("replica_makings") or {}, key=int)]
    return ["", "Data replicas (seed N's runs use replica N: its own alignment, oracle and reorderer): test order "
            "against that replica's oracle, corpus Kendall tau / fuzzy reordering score."
            + (" Made more than once (eflomal cannot be seeded, so each making has its own alignment and reorderer;"
               f" the runs of each making are named, and the mean uses the first): {', '.join(remade)}."
               if remade else ""), "",
            "| pair | replica | reorderer tau | reorderer FRS | monotone tau | monotone FRS |",
            "|---|---|---|---|---|---|", *rows]


def print_table(results: dict) -> None:
    for pair_name, pair in results["pairs"].items():
        r = pair["reordering_vs_oracle"]["test"]
        print(f"\n{pair_name}: test {pair['sentences']['test']} sentences ({pair['test_set']}); reorderer vs test "
              f"oracle: tau {r['reorderer']['corpus_tau']:.4f} FRS {r['reorderer']['corpus_frs']:.4f} "
              f"(monotone tau {r['monotone']['corpus_tau']:.4f} FRS {r['monotone']['corpus_frs']:.4f})")
        steps = pair["prep_step_seconds"]
        print(f"data: {pair['sentences']['train']} training pairs; alignment {pair['align_seconds'] or 0:.0f} s, "
              f"reorderer training {steps.get('train-reorderer') or 0:.0f} s, reordering train "
              f"{steps.get('reorder train') or 0:.0f} s (times of the run that made them)")
        header = (f"{'system':<14} {'test BLEU':>14} {'chrF':>14} {'RIBES':>14} {'dev BLEU':>14} "
                  f"{'dev@oracle':>14} {'train s':>9}")
        print(header)
        print("-" * len(header))

        def cell(entry: dict | None, metric: str) -> str:
            if not entry or metric not in entry or not entry[metric].get("n"):
                return f"{'-':>14}"
            m = entry[metric]
            spread = f"±{m['std']:.2f}" if m.get("std") is not None else ""
            return f"{m['mean']:>8.2f}{spread:<6}"

        for system, entry in pair["summary"].items():
            test = entry.get("test")
            print(f"{system:<14} {cell(test, 'bleu')} {cell(test, 'chrf')} {cell(test, 'ribes')} "
                  f"{cell(entry.get('valid'), 'bleu')} {cell(entry.get(VALID_ORACLE_POSITIONS), 'bleu')} "
                  f"{entry['train_seconds'].get('mean', 0):>9.0f}")
        for system, entry in pair["summary"].items():
            for name in entry:
                if name.startswith("extra:"):
                    print(f"{system:<14} {name}: BLEU {cell(entry[name], 'bleu').strip()}")
            if entry.get("contrast_drop_bleu"):
                print(f"{system:<14} test BLEU with contrastive XL positions (change from reorderer positions): "
                      + ", ".join(f"{n[len('test@'):]} {entry[n]['bleu']['mean']:.2f} ({d:+.2f})"
                                  for n, d in entry["contrast_drop_bleu"].items()))
            if entry.get("attention_aer", {}).get("n"):
                print(f"{system:<14} attention AER on test, {attention_reference(PAIRS[pair_name])}: "
                      f"{cell(entry, 'attention_aer').strip()}")
        if pair.get("eflomal_vs_gold"):
            print(f"eflomal alignment of test (the silver standard) against the gold: AER "
                  f"{pair['eflomal_vs_gold']['aer']:.3f}")
        if pair.get("significance"):
            print(f"\nsignificance on test ({pair_name}):")
            print(significance.format_table(pair["significance"]))
        sig = next((run["eval"]["test"]["bleu_signature"] for runs in pair["runs"].values() for run in runs.values()
                    if "test" in run["eval"]), None)
        if sig:
            print(f"sacreBLEU: {sig}")
