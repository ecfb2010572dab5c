"""The BLEU benchmark's own logic (benchmarks/bleu.py, its bleu_*.py modules, plot_bleu.py): splits, buckets,
scoring, log parsing, summaries and the plot. The end-to-end pipeline is exercised by running the benchmark (see
its docstring)."""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from argparse import Namespace
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import bleu  # noqa: E402
import bleu_corpus  # noqa: E402
import bleu_evidence  # noqa: E402
import bleu_report  # noqa: E402
import bleu_runs  # noqa: E402
import buckets  # noqa: E402
import run_records  # noqa: E402
from bleu_corpus import PAIRS  # noqa: E402
from xlpos_prep import significance, systems  # noqa: E402
from xlpos_prep.io import read_json, write_json, write_lines  # noqa: E402


def test_tanaka_test_set_is_the_held_out_end_of_train(tmp_path: Path) -> None:
    for lang in ("en", "ja"):
        (tmp_path / f"train.{lang}").write_text("".join(f"{lang} {i}\n" for i in range(10)), encoding="utf-8")
        (tmp_path / f"dev.{lang}").write_text(f"{lang} dev\n", encoding="utf-8")
    splits = bleu_corpus.select_splits(PAIRS["ja-en"], tmp_path, "ja", train_lines=0, test_lines=3)
    assert splits["test"] == ["ja 7", "ja 8", "ja 9"]
    assert splits["train"] == [f"ja {i}" for i in range(7)]
    assert splits["valid"] == ["ja dev"]
    # --train-lines subsamples what remains, never reaching into the test lines
    splits = bleu_corpus.select_splits(PAIRS["ja-en"], tmp_path, "ja", train_lines=2, test_lines=3)
    assert splits["train"] == ["ja 0", "ja 1"] and splits["test"] == ["ja 7", "ja 8", "ja 9"]
    with pytest.raises(SystemExit, match="not more than --test-lines"):
        bleu_corpus.select_splits(PAIRS["ja-en"], tmp_path, "ja", train_lines=0, test_lines=10)


def test_multi30k_uses_its_own_test_file(tmp_path: Path) -> None:
    for stem, n in (("train", 5), ("val", 2), ("test_2016_flickr", 3)):
        (tmp_path / f"{stem}.en").write_text("".join(f"{stem} {i}\n" for i in range(n)), encoding="utf-8")
    splits = bleu_corpus.select_splits(PAIRS["en-de"], tmp_path, "en", train_lines=4, test_lines=1000)
    assert [len(splits[s]) for s in ("train", "valid", "test")] == [4, 2, 3]
    assert splits["test"][0] == "test_2016_flickr 0"


def test_synthetic_pair_is_generated_once_with_its_gold_alignment(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(bleu_corpus.SYNTH_CORPUS, "train", 50)
    spec = PAIRS["synth"]
    args = Namespace(work=str(tmp_path), data=str(tmp_path / "no-data-needed"), train_lines=0, test_lines=1000)
    corpus = bleu_corpus.corpus_dir(spec, args)
    gold = corpus / spec.gold_alignment
    splits = bleu_corpus.select_splits(spec, corpus, spec.src, 0, 1000)
    assert [len(splits[s]) for s in bleu_corpus.SPLITS] == [50, 500, 500]  # synth's own test set, not held out of train
    assert len(gold.read_text(encoding="utf-8").splitlines()) == 500
    assert spec.align_langs == ("src", "tgt") and bleu_corpus.attention_reference(spec).startswith("gold")
    assert bleu_corpus.attention_reference(PAIRS["ja-en"]).startswith("silver")
    # the same corpus on every call (a gather on another machine regenerates the references it scores against)
    before = gold.stat().st_mtime_ns
    refs = bleu_corpus.select_splits(spec, corpus, spec.tgt, 0, 1000)["test"]
    assert bleu_corpus.test_references(spec, args) == refs and gold.stat().st_mtime_ns == before
    other = Namespace(**{**vars(args), "work": str(tmp_path / "elsewhere")})
    assert bleu_corpus.test_references(spec, other) == refs


def test_order_tau_measures_movement() -> None:
    assert buckets.order_tau([0, 1, 2, 3]) == 1.0
    assert buckets.order_tau([3, 2, 1, 0]) == -1.0
    assert buckets.order_tau([1, 0, 2, 3]) == pytest.approx(1 - 2 * 1 / 6)
    assert buckets.order_tau([0]) == 1.0


def test_buckets_cover_every_sentence_and_separate_unmoved_ones() -> None:
    sources = [["w"] * n for n in (3, 4, 5, 6, 7, 8, 9, 10, 11, 12)]
    orders = [list(range(len(s))) if k % 3 == 0 else list(reversed(range(len(s)))) if k % 3 == 1
              else [1, 0] + list(range(2, len(s))) for k, s in enumerate(sources)]
    spec = buckets.make_buckets(sources, orders, n_length=4, n_reorder=4)
    assert len(spec.length_of) == len(spec.reorder_of) == len(sources)
    assert all(0 <= b < len(spec.length_labels) for b in spec.length_of)
    # length buckets are ordered: a longer sentence never lands in an earlier bucket
    assert spec.length_of == sorted(spec.length_of)
    not_moved = spec.reorder_labels.index("not moved")
    assert [k for k, b in enumerate(spec.reorder_of) if b == not_moved] == [0, 3, 6, 9]
    # the reversed sentences (tau -1) are in the first, most-moved bucket
    assert all(spec.reorder_of[k] == 0 for k in (1, 4, 7))
    counts = spec.summary()
    assert sum(b["sentences"] for b in counts["length"]) == len(sources)
    assert sum(b["sentences"] for b in counts["reordering"]) == len(sources)


def test_quantile_edges_merge_duplicates() -> None:
    assert buckets.quantile_edges([5, 5, 5, 5], 4) == [5]
    assert buckets.quantile_edges([1, 2, 3, 4, 5, 6, 7, 8], 4) == [2, 4, 6, 8]
    assert buckets.assign_buckets([1, 2, 3, 8, 9], [2, 4, 6, 8]) == [0, 0, 1, 3, 3]


def test_scores_of_perfect_and_wrong_translations() -> None:
    refs = ["a small cat sat on the mat .", "the dog barked at the mailman today .", "it rained all day long ."]
    tokens = [r.split() for r in refs]
    spec = buckets.make_buckets(tokens, [list(range(len(t))) for t in tokens], n_length=2, n_reorder=2)
    perfect = bleu_corpus.score_translations(refs, refs, "none", (tokens, tokens), spec)
    assert perfect["bleu"] == 100.0 and perfect["chrf"] == 100.0 and perfect["ribes"] == 100.0
    assert all(b == 100.0 for b in perfect["bleu_by_length"] if b is not None)
    assert "tok:none" in perfect["bleu_signature"] and perfect["sentences"] == 3
    wrong = bleu_corpus.score_translations(["x y z"] * 3, refs, "13a", None, None)
    assert wrong["bleu"] < 1.0 and "ribes" not in wrong and "bleu_by_length" not in wrong
    with pytest.raises(ValueError, match="2 hypotheses for 3 references"):
        bleu_corpus.score_translations(refs[:2], refs, "13a", None, None)


def test_summary_mean_spread_and_delta_vs_vanilla() -> None:
    assert bleu_evidence.summarize([]) == {"n": 0}
    s = bleu_evidence.summarize([20.0, 22.0])
    assert s["mean"] == 21.0 and s["std"] == pytest.approx(1.41, abs=0.01) and s["n"] == 2
    assert bleu_evidence.summarize([20.0])["std"] is None

    def run(b: float) -> dict:
        return {"train": {"seconds": 10.0}, "eval": {"test": {"bleu": b, "chrf": 40.0}}}
    summary = bleu_evidence.pair_summary({"vanilla": {"1": run(20.0), "2": run(22.0)}, "input": {"1": run(23.0),
                                                                                     "2": run(24.0)}})
    assert summary["input"]["test"]["bleu"]["mean"] == 23.5
    assert summary["input"]["test"]["delta_vs_vanilla"] == {"bleu": 2.5, "chrf": 0.0}
    assert "delta_vs_vanilla" not in summary["vanilla"]["test"]
    # part-way through a seed: the delta pairs runs of the same seed (replica), not means over different seeds
    part = bleu_evidence.pair_summary({"vanilla": {"1": run(20.0), "2": run(22.0), "3": run(30.0)},
                              "input": {"1": run(23.0), "2": run(24.0)}})
    assert part["vanilla"]["test"]["bleu"]["mean"] == 24.0 and part["input"]["test"]["bleu"]["mean"] == 23.5
    assert part["input"]["test"]["delta_vs_vanilla"]["bleu"] == 2.5
    # no seed in common: no delta
    apart = bleu_evidence.pair_summary({"vanilla": {"1": run(20.0)}, "input": {"2": run(24.0)}})
    assert apart["input"]["test"]["delta_vs_vanilla"] == {}


def test_markdown_table_rows_per_system_with_oracle_columns() -> None:
    def run(b: float, oracle_positions: float | None = None) -> dict:
        ev = {"test": {"bleu": b, "chrf": 40.0}, "valid": {"bleu": b - 1}}
        if oracle_positions is not None:
            ev[bleu_corpus.VALID_ORACLE_POSITIONS] = {"bleu": oracle_positions}
        return {"train": {"seconds": 10.0}, "eval": ev}
    runs = {"vanilla": {"1": run(20.0), "2": run(22.0)}, "input": {"1": run(23.0, 25.0)},
            "input-oracle": {"1": {"train": {"seconds": 10.0}, "eval": {"valid": {"bleu": 30.0}}}}}
    # a record made before the significance tests and attention AER existed: those cells stay empty
    summary = bleu_evidence.pair_summary(runs)
    table = bleu_report.markdown_table({"pairs": {"ja-en": {"runs": runs, "summary": summary}}})
    rows = {line.split(" | ")[1]: line.split(" | ") for line in table.splitlines()[2:]}
    assert rows["vanilla"][2:5] == ["1,2", "21.00 ± 1.41", "–"]
    # Δ against vanilla of the same seed (20.00), not vanilla's mean over seeds 1 and 2
    assert rows["input"][2:5] == ["1", "23.00", "+3.00"] and rows["input"][-2:] == ["25.00", "– |"]
    assert rows["input"][5:7] == ["–", "–"]  # no significance record
    assert rows["input-oracle"][3] == "–" and rows["input-oracle"][-3:] == ["–", "30.00", "– |"]
    assert "Significance" not in table and "Contrastive" not in table


def test_replica_table_shows_each_data_replica_and_their_spread() -> None:
    def replica(tau: float, frs: float) -> dict:
        test = {"reorderer": {"corpus_tau": tau, "corpus_frs": frs},
                "monotone": {"corpus_tau": 0.70, "corpus_frs": 0.75}}
        return {"reordering_vs_oracle": {"test": test}}
    pairs = {"ja-en": {"runs": {}, "summary": {},
                       "data_by_seed": {"2": replica(0.84, 0.80), "1": replica(0.82, 0.78), "3": None}},
             "en-de": {"runs": {}, "summary": {}, "data_by_seed": {"1": replica(0.99, 0.95)}}}
    lines = bleu_report.replica_markdown({"pairs": pairs})
    rows = [line.split(" | ") for line in lines if line.startswith("| ja-en") or line.startswith("| en-de")]
    # replicas in seed order; a replica without figures (a record made before) is left out
    assert [(r[0], r[1], r[2]) for r in rows] == [("| ja-en", "1", "0.8200"), ("| ja-en", "2", "0.8400"),
                                                  ("| ja-en", "mean ± sd", "0.8300 ± 0.0141"),
                                                  ("| en-de", "1", "0.9900")]
    assert rows[2][4] == "0.7000 ± 0.0000"
    assert "Data replicas" in bleu_report.markdown_table({"pairs": pairs})
    assert bleu_report.replica_markdown({"pairs": {"ja-en": {"runs": {}, "summary": {}}}}) == []


def test_a_replica_made_twice_is_told_apart_and_the_reorderer_readers_making_counts() -> None:
    # eflomal cannot be seeded: a data replica made again on another machine has another alignment and reorderer.
    # Records of one making carry identical figures; the seed's figures (buckets, replica table) are those of the
    # making that the runs reading the reorderer used, even when a control's record came first.
    def data(tau: float) -> dict:
        return {"reordering_vs_oracle": {"test": {"reorderer": {"corpus_tau": tau, "corpus_frs": 0.9},
                                                  "monotone": {"corpus_tau": 0.96, "corpus_frs": 0.93}}},
                "reorderer": {"train_seconds": tau}, "test_sentences": {"reorderer_tau": [tau]}}
    one = bleu_evidence.replica_makings([("vanilla", data(0.97)), ("input", data(0.97)), ("rope", data(0.97))])
    assert [m["systems"] for m in one] == [["vanilla", "input", "rope"]]
    two = bleu_evidence.replica_makings([("vanilla", data(0.9661)), ("rope-monotone", data(0.9661)),
                                ("input", data(0.9659)), ("head", data(0.9659))])
    assert [m["systems"] for m in two] == [["input", "head"], ["vanilla", "rope-monotone"]]
    assert two[0]["data"] == data(0.9659)

    remade = {"2": [{"systems": m["systems"], "reordering_vs_oracle": m["data"]["reordering_vs_oracle"]}
                    for m in two]}
    pairs = {"en-de": {"runs": {}, "summary": {}, "data_by_seed": {"1": data(0.98), "2": two[0]["data"]},
                       "replica_makings": remade}}
    lines = bleu_report.replica_markdown({"pairs": pairs})
    rows = [line.split(" | ") for line in lines if line.startswith("| en-de")]
    assert [r[1:3] for r in rows] == [["1", "0.9800"], ["2, made for input, head", "0.9659"],
                                      ["2, made for vanilla, rope-monotone", "0.9661"],
                                      ["mean ± sd", "0.9729 ± 0.0100"]]  # of 0.98 and the first making's 0.9659
    assert "Made more than once" in lines[1] and "en-de 2" in lines[1]
    assert "Made more than once" not in bleu_report.replica_markdown(
        {"pairs": {"en-de": {"runs": {}, "summary": {}, "data_by_seed": {"1": data(0.98)}}}})[1]


FAIRSEQ_LOG = "".join(f"2026-12-02 13:35:47 | INFO | {line}\n" for line in (
    "fairseq_cli.train | num. shared model params: 4,582,400 (num. trained: 4,582,400)",
    'train_inner | {"epoch": 1, "update": 0.5, "loss": "9.5", "wpb": "2000", "num_updates": "25", "wall": "100"}',
    'train_inner | {"epoch": 2, "update": 1.5, "loss": "8.5", "wpb": "2100", "num_updates": "75", "wall": "200"}',
    'train | {"epoch": 2, "train_loss": "8.4", "train_nll_loss": "8.0", "train_num_updates": "80", "train_wall": "9"}',
))


def test_parse_train_log(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(FAIRSEQ_LOG, encoding="utf-8")
    stats = bleu_runs.parse_train_log(log)
    assert stats["params"] == 4582400 and stats["updates"] == 80 and stats["epochs"] == 2
    assert stats["final_epoch_loss"] == 8.4 and stats["last_logged_loss"] == 8.5
    assert stats["steady_updates_per_s"] == 0.5  # (75 - 25) updates in (200 - 100) s


def test_missing_hypothesis_is_an_error(tmp_path: Path) -> None:
    gen = tmp_path / "gen.txt"
    gen.write_text("S-1\tx\nH-1\t-0.5\t▁b\nH-0\t-0.1\t▁a ▁c\n", encoding="utf-8")
    from xlpos_prep.scoring import read_hypotheses  # the recipes' and the benchmark's
    assert read_hypotheses(str(gen), 2) == ["▁a ▁c", "▁b"]
    with pytest.raises(ValueError, match=r"2 hypotheses for 3 test sentences \(first missing id: 2\)"):
        read_hypotheses(str(gen), 3)


def test_extra_test_sets_name_their_pair(tmp_path: Path) -> None:
    src, ref = tmp_path / "a.en", tmp_path / "a.de"
    src.write_text("x\n"), ref.write_text("y\n")
    one = bleu.parse_extra_sets(Namespace(test_src=[str(src)], test_ref=[str(ref)]), ["en-de"])
    assert [name for name, _, _ in one["en-de"]] == ["1-a"]
    both = bleu.parse_extra_sets(Namespace(test_src=[f"en-de:{src}"], test_ref=[str(ref)]), ["ja-en", "en-de"])
    assert both["ja-en"] == [] and both["en-de"][0][1] == src.resolve()
    with pytest.raises(SystemExit, match="several pairs selected"):
        bleu.parse_extra_sets(Namespace(test_src=[str(src)], test_ref=[str(ref)]), ["ja-en", "en-de"])
    with pytest.raises(SystemExit, match="in pairs"):
        bleu.parse_extra_sets(Namespace(test_src=[str(src)], test_ref=None), ["en-de"])
    with pytest.raises(SystemExit, match="not found"):
        bleu.parse_extra_sets(Namespace(test_src=[str(tmp_path / "nope")], test_ref=[str(ref)]), ["en-de"])


def test_run_threads_keeps_every_result_and_raises_the_first_failure() -> None:
    keys = [("vanilla", 1), ("input", 1), ("input", 2)]
    assert bleu_runs.run_threads(keys, lambda system, seed: f"{system}{seed}", 2) == {k: f"{k[0]}{k[1]}" for k in keys}
    assert bleu_runs.run_threads(keys, lambda system, seed: seed, 1) == {k: k[1] for k in keys}

    def fail(system: str, seed: int) -> int:
        if system == "input":
            raise SystemExit(f"training {system} failed")
        return seed
    with pytest.raises(SystemExit, match="training input failed"):
        bleu_runs.run_threads(keys, fail, 2)


def test_training_config_is_shared_and_keyed() -> None:
    cfg = bleu_runs.TrainConfig(max_update=100)
    args = cfg.fairseq_args()
    # fairseq 0.12 would drop the last batch of generation/training otherwise (issue #5036)
    assert args[args.index("--required-batch-size-multiple") + 1] == "1"
    assert args[args.index("--warmup-updates") + 1] == "20"
    assert cfg.tag() != bleu_runs.TrainConfig(max_update=200).tag()
    assert cfg.tag() == bleu_runs.TrainConfig(max_update=100).tag()
    vanilla = systems.task_args(systems.parse_system("vanilla"))
    assert vanilla[vanilla.index("--arch") + 1] == "transformer" and not systems.parse_system("vanilla").oracle
    rope = systems.task_args(systems.parse_system("rope-oracle"))
    assert rope[rope.index("--xl-integration") + 1] == "rope" and systems.parse_system("rope-oracle").oracle


def test_a_record_names_the_code_its_process_started_with(monkeypatch) -> None:
    """A commit made while a run trains for an hour is not the code that trained it: the version is read once."""
    bleu_runs.code_version.cache_clear()
    started = bleu_runs.code_version()
    assert re.fullmatch(r"[0-9a-f]{40}(\+modified)?|unknown \(not a git checkout\)", started)

    def moved_on(*args, **kwargs):
        raise AssertionError("the checkout was read again")
    monkeypatch.setattr("subprocess.run", moved_on)
    assert bleu_runs.code_version() == started
    bleu_runs.code_version.cache_clear()


def test_every_fusion_of_the_plugin_is_a_system_name() -> None:
    """A fusion added to the plugin is reachable as input-FUSION in bleu.py and the campaigns, and only the
    plugin's fusions are (systems.py spells the list out: it must not import fairseq)."""
    from xlpos.models.transformer_xlpos import XL_FUSIONS
    assert tuple(systems.INPUT_FUSIONS) == tuple(XL_FUSIONS)
    for fusion in XL_FUSIONS:
        args = systems.task_args(systems.parse_system(f"input-{fusion}"))
        assert args[args.index("--xl-fusion") + 1] == fusion
    with pytest.raises(ValueError, match="unknown system input-bilinear"):
        systems.parse_system("input-bilinear")


def pooled_example() -> tuple[dict, dict, dict]:
    """Two seeds of 8 test sentences; seed 1's reorderer moved none of them, seed 2's moved all of them."""
    refs = [" ".join(f"w{k}{i}" for i in range(4 + k % 3)) for k in range(8)]
    wrong = [" ".join("zz" for _ in r.split()) for r in refs]
    items = {"vanilla": {"1": (refs, refs), "2": (refs, refs)}, "input": {"1": (refs, refs), "2": (wrong, refs)}}
    lengths = {seed: [len(r.split()) for r in refs] for seed in ("1", "2")}
    taus = {"1": [1.0] * 8, "2": [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]}
    return items, lengths, taus


def test_seed_pooled_buckets_follow_each_replica_and_carry_a_band() -> None:
    items, lengths, taus = pooled_example()
    pooled = buckets.pooled_bucket_bleu(items, lengths, taus, "none", samples=200)
    reordering = pooled["reordering"]
    assert reordering["labels"][-1] == "not moved"
    input_cells, vanilla_cells = reordering["systems"]["input"], reordering["systems"]["vanilla"]
    # the unmoved bucket holds seed 1's sentences only (where input is perfect), the others seed 2's (all wrong)
    assert input_cells[-1]["sentences"] == 8 and input_cells[-1]["bleu"] == 100.0
    assert all(c["bleu"] == 0.0 for c in input_cells[:-1]) and sum(c["sentences"] for c in input_cells) == 16
    assert all(c["bleu"] == c["low"] == c["high"] == 100.0 for c in vanilla_cells)
    # length buckets mix both seeds: input's BLEU lies inside its band, which is wide (half its sentences wrong)
    for cell in pooled["length"]["systems"]["input"]:
        assert cell["low"] <= cell["bleu"] <= cell["high"] and cell["seeds"] == 2
    assert any(c["high"] - c["low"] > 10 for c in pooled["length"]["systems"]["input"])
    assert buckets.pooled_bucket_bleu(items, lengths, taus, "none", samples=200) == pooled  # seeded
    with pytest.raises(ValueError, match="seed 2"):
        buckets.pooled_bucket_bleu(items, lengths, {"1": taus["1"]}, "none", samples=10)


def test_bucket_differences_are_paired_and_pool_only_shared_seeds() -> None:
    items, lengths, taus = pooled_example()
    plain = buckets.pooled_bucket_bleu(items, lengths, taus, "none", samples=200)
    pooled = buckets.pooled_bucket_bleu(items, lengths, taus, "none", samples=200, compare=[("input", "vanilla")])
    for kind in ("length", "reordering"):
        assert pooled[kind]["systems"] == plain[kind]["systems"]  # a difference leaves the systems' bands alone
    [delta] = pooled["reordering"]["deltas"]
    assert (delta["system"], delta["baseline"], delta["seeds"]) == ("input", "vanilla", ["1", "2"])
    # seed 2's moved sentences: input all wrong, vanilla perfect, so every resample differs by exactly -100;
    # seed 1's unmoved ones: both perfect. Two bands side by side would not be a point.
    assert all(c["delta"] == c["low"] == c["high"] == -100.0 for c in delta["cells"][:-1])
    assert delta["cells"][-1] == {"delta": 0.0, "low": 0.0, "high": 0.0, "sentences": 8}
    # a system that translates as its baseline does differs by 0 on every paired resample, however wide their bands
    mixed = {seed: ([h if k % 2 else r for k, (h, r) in enumerate(zip(items["input"]["2"][0], refs))], refs)
             for seed, (_, refs) in items["vanilla"].items()}
    same = buckets.pooled_bucket_bleu({"a": mixed, "b": dict(mixed)}, lengths, taus, "none", samples=200,
                                      compare=[("a", "b")])["length"]
    assert any(c["high"] - c["low"] > 10 for c in same["systems"]["a"])
    assert all(c["low"] == c["high"] == 0.0 for c in same["deltas"][0]["cells"])
    # a seed only one of the two systems has is left out of their difference
    items["input"]["3"] = items["input"]["1"]
    lengths["3"], taus["3"] = lengths["1"], [0.1] * 8
    [delta] = buckets.pooled_bucket_bleu(items, lengths, taus, "none", samples=50,
                                         compare=[("input", "vanilla")])["reordering"]["deltas"]
    assert delta["seeds"] == ["1", "2"] and sum(c["sentences"] for c in delta["cells"] if c) == 16


def test_reordering_differences_in_the_markdown() -> None:
    items, lengths, taus = pooled_example()
    runs = {system: {seed: {} for seed in by_seed} for system, by_seed in items.items()}
    figures = {seed: {"source_words": lengths[seed], "reorderer_tau": taus[seed]} for seed in ("1", "2")}
    pooled = bleu_evidence.seed_pooled_buckets(PAIRS["ja-en"], runs, items["vanilla"]["1"][1],
                                               lambda system, seed: items[system][seed][0], figures)
    # the pairs significance_tests tests: input against vanilla
    assert [(d["system"], d["baseline"]) for d in pooled["reordering"]["deltas"]] == [("input", "vanilla")]
    lines = bleu_report.reordering_delta_markdown({"pairs": {"ja-en": {"pooled_buckets": pooled}}})
    row = next(line for line in lines if line.startswith("| input | vanilla |"))
    assert row.endswith("| +0.00 (+0.00..+0.00) |") and row.count("-100.00 (-100.00..-100.00)") == 3
    assert "not moved (8)" in next(line for line in lines if line.startswith("| ja-en: system"))
    assert bleu_report.reordering_delta_markdown({"pairs": {"ja-en": {"pooled_buckets": None}}}) == []


def test_seed_pooled_buckets_need_each_replicas_figures() -> None:
    items, lengths, taus = pooled_example()
    runs = {system: {seed: {} for seed in by_seed} for system, by_seed in items.items()}
    hyps = lambda system, seed: items[system][seed][0]  # noqa: E731
    refs = items["vanilla"]["1"][1]
    figures = {seed: {"source_words": lengths[seed], "reorderer_tau": taus[seed]} for seed in ("1", "2")}
    pooled = bleu_evidence.seed_pooled_buckets(PAIRS["ja-en"], runs, refs, hyps, figures)
    assert pooled["reordering"]["systems"]["input"][-1]["bleu"] == 100.0
    # a replica recorded without the figures (records made before) is left out, not guessed
    partial = bleu_evidence.seed_pooled_buckets(PAIRS["ja-en"], runs, refs, hyps, {"1": figures["1"], "2": None})
    assert {c["seeds"] for c in partial["length"]["systems"]["input"] if c} == {1}
    assert bleu_evidence.seed_pooled_buckets(PAIRS["ja-en"], runs, refs, hyps, {"1": None, "2": None}) is None


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib (extra 'bench') missing")
def test_plot_from_results(tmp_path: Path) -> None:
    import plot_bleu

    items, lengths, taus = pooled_example()
    items["rope-monotone"] = items["vanilla"]
    items["head"] = items["vanilla"]
    summary = {system: {"test": {"bleu": bleu_evidence.summarize([b, b])}} for system, b in
               (("vanilla", 20), ("input", 21), ("head", 22), ("head-oracle", 30), ("rope-monotone", 20.5))}
    results = {"config": {"seeds": [1, 2], "train": {"max_update": 5}},
               "pairs": {"ja-en": {"summary": summary,
                                   "pooled_buckets": buckets.pooled_bucket_bleu(items, lengths, taus, "none", 50)}}}
    assert plot_bleu.best_xl_system(summary) == "head"
    assert plot_bleu.plotted_systems(results["pairs"]["ja-en"]) == ["vanilla", "rope-monotone", "head"]
    out = tmp_path / "plot.png"
    plot_bleu.plot_results(json.loads(json.dumps(results)), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    del results["pairs"]["ja-en"]["pooled_buckets"]
    with pytest.raises(ValueError, match="seed-pooled"):
        plot_bleu.plot_results(results, out)


# ------------------------------------------------------------------------------------------------ issue 12
def test_system_grammar() -> None:
    def args(name: str) -> list[str]:
        return list(systems.parse_system(name).task_args)

    def value(name: str, option: str) -> str | None:
        a = args(name)
        return a[a.index(option) + 1] if option in a else None
    head = systems.parse_system("head-k2-l01")
    assert value("head-k2-l01", "--xl-integration") == "head" and value("head-k2-l01", "--xl-heads") == "2"
    assert value("head-k2-l01", "--xl-head-layers") == "0,1" and head.reads_reorderer and not head.model_args
    assert value("rope-k1-lall", "--xl-head-layers") == "all" and value("rope", "--xl-heads") is None
    assert value("input-sum", "--xl-fusion") == "sum" and value("input", "--xl-fusion") is None
    encfree = systems.parse_system("encfree-vanilla")
    # the training arguments come after the shared configuration's, so --encoder-layers 0 wins
    assert encfree.model_args == ("--encoder-layers", "0") and not encfree.xl
    assert value("encfree-vanilla", "--xl-integration") == "none"
    assert systems.parse_system("encfree-input-gated").model_args == ("--encoder-layers", "0")
    assert value("vanilla", "--arch") == "transformer" and systems.parse_system("vanilla").model_args == ()
    random = systems.parse_system("input-random")
    assert value("input-random", "--xl-contrast") == "random" and random.control == "random"
    assert not random.reads_reorderer and not random.oracle
    assert value("rope-monotone", "--xl-positions") == "monotone"
    assert systems.parse_system("head-k2-oracle").oracle
    for bad, message in (("encfree-head", "an encoder-free model has none"), ("vanilla-random", "need an XL system"),
                         ("input-cat", "unknown system input-cat"), ("head-2", "unknown system")):
        with pytest.raises(ValueError, match=message):
            systems.parse_system(bad)
    with pytest.raises(SystemExit, match="unknown system input-cat"):
        bleu.main(["--systems", "vanilla,input-cat", "--no-train"])


def test_contrast_options_and_set_names() -> None:
    assert bleu.parse_contrast("none") == [] and bleu.parse_contrast("all") == list(bleu_corpus.CONTRASTS)
    assert bleu.parse_contrast("reversed,local-shuffle") == ["reversed", "local-shuffle"]
    with pytest.raises(SystemExit, match="--contrast shuffled: choose from"):
        bleu.parse_contrast("shuffled")
    a = Namespace(contrast_window=3, contrast_seed=1)
    assert [bleu_corpus.contrast_set_name(k, a) for k in bleu_corpus.CONTRASTS] == [
        "test@monotone", "test@reversed", "test@random", "test@local-shuffle-k3"]
    assert bleu_corpus.contrast_set_name("random", Namespace(contrast_window=3, contrast_seed=2)) == "test@random-s2"


def test_contrast_and_oracle_sets_go_to_models_reading_reorderer_positions(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(bleu_runs, "train_system", lambda *a: {"seconds": 1.0})
    monkeypatch.setattr(bleu_runs, "evaluate_system", lambda pair, system, seed, cfg, eval_set, args: {"bleu": 1.0})
    pair = bleu_corpus.PreparedPair(PAIRS["ja-en"], tmp_path, tmp_path / "bin", tmp_path / "oracle-bin",
                             tmp_path / "oracle" / "test.align")
    for name, xl_only in (("valid", False), ("test", False), (bleu_corpus.VALID_ORACLE_POSITIONS, True),
                          ("test@reversed", True)):
        pair.eval_sets[name] = bleu_corpus.EvalSet(name, tmp_path, "test", [], [], None, (), xl_only)
    args = Namespace(no_train=False, attention_aer=False, records=None, curve_every=0)
    cfg = bleu_runs.TrainConfig()

    def sets(system: str) -> list[str]:
        return sorted(bleu_runs.train_and_evaluate(pair, system, 1, cfg, args)["eval"])
    assert sets("input") == sorted(["valid", "test", bleu_corpus.VALID_ORACLE_POSITIONS, "test@reversed"])
    for control in ("vanilla", "encfree-vanilla", "input-random", "rope-monotone"):
        assert sets(control) == ["test", "valid"]
    assert sets("input-oracle") == ["valid"]


def test_contrast_drops_in_the_summary_and_table() -> None:
    def run(test: float, reversed_: float | None) -> dict:
        ev = {"test": {"bleu": test, "chrf": 40.0}}
        if reversed_ is not None:
            ev["test@reversed"] = {"bleu": reversed_, "chrf": 30.0}
        return {"train": {"seconds": 1.0}, "eval": ev}
    runs = {"vanilla": {"1": run(20.0, None)}, "input": {"1": run(24.0, 19.0), "2": run(26.0, 20.0)}}
    summary = bleu_evidence.pair_summary(runs)
    assert summary["input"]["contrast_drop_bleu"] == {"test@reversed": -5.5}
    assert "contrast_drop_bleu" not in summary["vanilla"]
    table = bleu_report.markdown_table({"pairs": {"ja-en": {"runs": runs, "summary": summary}}})
    assert "| ja-en | input | 25.00 | 19.50 (-5.50) |" in table


def _pair_with_runs(tmp_path: Path, cfg, hyps: dict[str, dict[int, list[str]]], refs: list[str]):
    pair = bleu_corpus.PreparedPair(PAIRS["ja-en"], tmp_path, tmp_path / "bin", tmp_path / "oracle-bin",
                             tmp_path / "oracle" / "test.align")
    pair.eval_sets["test"] = bleu_corpus.EvalSet("test", tmp_path, "test", refs, [r.split() for r in refs], None)
    runs = {}
    for system, by_seed in hyps.items():
        for seed, lines in by_seed.items():
            write_lines(tmp_path / "runs" / cfg.tag() / f"{system}.seed{seed}" / "hyp" / "test.txt", lines)
            runs.setdefault(system, {})[str(seed)] = {"train": {"seconds": 1.0}, "eval": {"test": {"bleu": 1.0}}}
    return pair, runs


def test_significance_from_stored_hypotheses(tmp_path: Path) -> None:
    import random
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(40)]
    refs = [" ".join(rng.choices(vocab, k=rng.randint(6, 14))) for _ in range(60)]

    def noisy(rate: float) -> list[str]:
        return [" ".join(w if rng.random() > rate else rng.choice(vocab) for w in r.split()) for r in refs]
    cfg = bleu_runs.TrainConfig(max_update=5)
    hyps = {"vanilla": {1: noisy(0.5), 2: noisy(0.5)}, "input": {1: noisy(0.1), 2: noisy(0.1)},
            "input-monotone": {1: noisy(0.5)}, "input-oracle": {1: noisy(0.1)}}
    pair, runs = _pair_with_runs(tmp_path, cfg, hyps, refs)
    assert bleu_evidence.significance_pairs(list(runs), [("input-monotone", "vanilla")]) == [
        ("input", "vanilla"), ("input-monotone", "vanilla"), ("input", "input-monotone")]
    args = Namespace(bs_samples=100, ar_trials=100)
    records = bleu_evidence.pair_significance(pair, runs, cfg, [], args)
    by = {(r["system"], r["baseline"]): r for r in records}
    assert set(by) == {("input", "vanilla"), ("input-monotone", "vanilla"), ("input", "input-monotone")}
    main = by[("input", "vanilla")]
    assert main["seed_pair_count"] == 2 and main["significant_seed_pairs"] == {"BLEU": 2, "chrF2": 2}
    assert main["concatenated"] is not None and main["set"] == "test"
    # seed 1 of input against the only seed of input-monotone
    assert [p["system_seed"] for p in by[("input", "input-monotone")]["seed_pairs"]] == ["1"]
    # cached: the same hypotheses and settings give the stored record; other settings recompute it
    cache = tmp_path / "runs" / cfg.tag() / "significance" / "test.input.vs.vanilla.json"
    record = json.loads(cache.read_text())
    record["seed_pair_count"] = 99
    cache.write_text(json.dumps(record))
    assert bleu_evidence.pair_significance(pair, runs, cfg, [], args)[0]["seed_pair_count"] == 99
    assert bleu_evidence.pair_significance(pair, runs, cfg, [], Namespace(bs_samples=101, ar_trials=100))[0][
        "seed_pair_count"] == 2
    # missing hypotheses (a run scored before hypotheses were kept): that comparison is left out
    (tmp_path / "runs" / cfg.tag() / "input-monotone.seed1" / "hyp" / "test.txt").unlink()
    assert [(r["system"], r["baseline"]) for r in bleu_evidence.pair_significance(pair, runs, cfg, [], args)] == [
        ("input", "vanilla")]
    summary = bleu_evidence.pair_summary(runs)
    table = bleu_report.markdown_table({"pairs": {"ja-en": {"runs": runs, "summary": summary,
                                                            "significance": records}}})
    rows = {line.split(" | ")[1]: line.split(" | ") for line in table.splitlines()[2:6]}
    assert rows["input"][5] == "≤0.010 / ≤0.010 (2/2)" and rows["input"][6].startswith("±")
    # one seed pair: the two p-values as they are, no count; two systems of the same quality: no star
    assert " / " in rows["input-monotone"][5] and not rows["input-monotone"][5].endswith("*")
    assert "(" not in rows["input-monotone"][5]
    assert "| ja-en | input | input-monotone | 1 | " in table and "Significance on test" in table
    # several seed pairs: the mean difference, then each seed pair's, so that a disagreeing seed shows
    per_seed = [next(t["delta"] for t in p["comparison"]["tests"] if t["metric"] == "BLEU") for p in main["seed_pairs"]]
    mean = sum(per_seed) / 2
    assert f"| ja-en | input | vanilla | 1,2 | {mean:+.2f} ({per_seed[0]:+.2f}, {per_seed[1]:+.2f}) |" in table
    printed = significance.format_table(records)
    assert "concat*" in printed and "input-monotone" in printed


def _comparison(*seed_pairs: tuple[float, float, float]) -> dict:
    """A significance record of seed pairs (BLEU delta, p bootstrap, p randomization)."""
    def test(delta: float, bs: float, ar: float) -> dict:
        return {"metric": "BLEU", "delta": delta, "p_bootstrap": bs, "p_randomization": ar, "system_ci95": 1.5}
    return {"alpha": 0.05, "seed_pairs": [{"comparison": {"tests": [test(*t)]}} for t in seed_pairs]}


@pytest.mark.parametrize("seed_pairs, cell", [
    ([(+1.2, 0.01, 0.02), (-1.1, 0.01, 0.03), (+0.3, 0.30, 0.60)], "≤0.300 / ≤0.600 (1/3, 1 below)"),
    ([(-1.2, 0.01, 0.02), (-1.1, 0.02, 0.03)], "≤0.020 / ≤0.030 (0/2, 2 below)"),
    ([(+0.9, 0.01, 0.04), (+0.1, 0.01, 0.20)], "≤0.010 / ≤0.200 (1/2)"),
    ([(-2.0, 0.001, 0.0001)], "0.001 / 0.0001 (below)"),
    ([(+2.0, 0.001, 0.0001)], "0.001 / 0.0001*"),
    ([(0.0, 0.0001, 0.0001)], "0.0001 / 0.0001"),
])
def test_a_significance_cell_counts_seed_pairs_above_the_baseline_and_names_those_below(seed_pairs, cell):
    assert bleu_report.significance_cells(_comparison(*seed_pairs), "BLEU") == (cell, "±1.50")


def test_a_difference_cell_shows_every_seed_pair_when_there_are_several() -> None:
    assert bleu_report.delta_cell([-0.75, -0.91]) == "-0.83 (-0.75, -0.91)"
    assert bleu_report.delta_cell([0.5]) == "+0.50"
    assert bleu_report.delta_cell([]) == "–"


def _seeded_record(system: str, baseline: str, deltas: list[float]) -> dict:
    """A significance record with one seed pair per difference (BLEU and chrF alike), none significant."""
    def tests(delta: float) -> list[dict]:
        return [{"metric": m, "delta": delta, "p_bootstrap": 0.3, "p_randomization": 0.6, "system_ci95": 1.5}
                for m in ("BLEU", "chrF2")]
    return {"system": system, "baseline": baseline, "alpha": 0.05,
            "seed_pairs": [{"system_seed": str(k), "baseline_seed": str(k), "comparison": {"tests": tests(d)}}
                           for k, d in enumerate(deltas, 1)]}


def test_the_significance_table_tests_the_seed_pairs_differences_per_pair_and_over_pairs() -> None:
    results = {"pairs": {"ja-en": {"significance": [_seeded_record("rope", "rope-monotone", [-0.3, -0.2])]},
                         "en-ja": {"significance": [_seeded_record("rope", "rope-monotone", [-0.7, -0.9, -0.5]),
                                                    _seeded_record("rope", "vanilla", [0.5, -0.3, 0.4])]}}}
    lines = bleu_report.significance_markdown(results)
    rows = {tuple(line.split(" | ")[:3]): line.split(" | ") for line in lines if line.startswith("| ")}
    # two seed pairs: no t-test; three: its interval and p, as significance.seed_pair_t_test gives them
    assert rows[("| ja-en", "rope", "rope-monotone")][7] == "–"
    test = significance.seed_pair_t_test([-0.7, -0.9, -0.5])
    assert rows[("| en-ja", "rope", "rope-monotone")][7] == f"{test.low:+.2f}..{test.high:+.2f} ({test.p:.3f})"
    # over pairs: the one comparison made on both pairs, its five seed pairs together; the other is not there
    over = [line for line in lines[lines.index("Over the seed pairs of every language pair together (one effect "
                                               "assumed in every direction):"):] if line.startswith("| rope")]
    both = significance.seed_pair_t_test([-0.3, -0.2, -0.7, -0.9, -0.5])
    assert over == [f"| rope | rope-monotone | ja-en 2, en-ja 3 | -0.52 (-0.30, -0.20, -0.70, -0.90, -0.50) | "
                    f"{both.low:+.2f}..{both.high:+.2f} ({both.p:.3f}) | -0.52 (-0.30, -0.20, -0.70, -0.90, -0.50) | "
                    f"{both.low:+.2f}..{both.high:+.2f} ({both.p:.3f}) |"]
    assert both.high < 0  # five agreeing seed pairs: the interval excludes zero


def test_compare_option() -> None:
    assert bleu.parse_compare("rope:input", ["input", "rope"]) == ("rope", "input")
    with pytest.raises(ValueError, match="rope-monotone not among --systems"):
        bleu.parse_compare("rope:rope-monotone", ["rope"])
    with pytest.raises(ValueError, match="expected SYSTEM:BASELINE"):
        bleu.parse_compare("rope", ["rope"])
    # a gather over records, some runs not there yet: the pair is left out, not a crash
    assert bleu_evidence.significance_pairs(["vanilla", "rope"], [("input", "input-sum"), ("rope", "vanilla")]) == [
        ("rope", "vanilla")]
    assert ("input", "input-sum") in bleu_evidence.significance_pairs(["input", "input-sum"], [("input", "input-sum")])


def test_records_carry_a_run_to_another_work_directory_and_gather_without_one(monkeypatch, tmp_path: Path) -> None:
    # A run trained and scored under one work directory is recorded; under another (a new machine) it is taken
    # from the record, not trained again; --no-train --records gathers the same figures and significance from the
    # records alone.
    import random
    rng = random.Random(1)
    vocab = [f"w{i}" for i in range(30)]
    refs = [" ".join(rng.choices(vocab, k=8)) for _ in range(40)]
    hyps = {"vanilla": [" ".join(w if rng.random() > 0.5 else "x" for w in r.split()) for r in refs],
            "input": [" ".join(w if rng.random() > 0.1 else "x" for w in r.split()) for r in refs]}
    cfg = bleu_runs.TrainConfig(max_update=5)
    records = tmp_path / "records"
    args = Namespace(no_train=False, attention_aer=False, attention_layer=-1, records=records, train_lines=0,
                     test_lines=40, spm_vocab=8000, reorder_iterations=0, reorder_lines=0, reorder_args="", jackknife=3,
                     contrast=[], contrast_window=3, contrast_seed=1, bs_samples=100, ar_trials=100, curve_every=0)

    def make_pair(root: Path):
        pair = bleu_corpus.PreparedPair(PAIRS["ja-en"], root, root / "bin", root / "oracle-bin",
                                 root / "oracle" / "test.align")
        pair.eval_sets["test"] = bleu_corpus.EvalSet("test", root, "test", refs, [r.split() for r in refs], None)
        pair.info = {"data_replica": 1, "buckets": {},
                     "test_sentences": {"source_words": [8] * 40, "reorderer_tau": [1.0, 0.5] * 20}}
        return pair

    def fake_train(pair, system, seed, cfg, args):
        run_dir = pair.root / "runs" / cfg.tag() / f"{system}.seed{seed}"
        write_json(run_dir / "train.json", {"seconds": 3.0, "cpu_seconds": 2.5})
        (run_dir / "checkpoint_last.pt").write_bytes(b"weights")
        return read_json(run_dir / "train.json")

    def fake_generate(pair, system, seed, cfg, eval_set, args):
        run_dir = pair.root / "runs" / cfg.tag() / f"{system}.seed{seed}"
        write_lines(run_dir / "hyp" / "test.txt", hyps[system])
        scores = bleu_corpus.score_translations(hyps[system], refs, "none", None, None)
        write_json(run_dir / "scores" / "test.json", scores)
        return scores

    real_evaluate = bleu_runs.evaluate_system
    monkeypatch.setattr(bleu_runs, "machine_info", lambda: {"cpu_model": "test"})
    monkeypatch.setattr(bleu_runs, "train_system", fake_train)
    monkeypatch.setattr(bleu_runs, "evaluate_system", fake_generate)
    first = {s: bleu_runs.train_and_evaluate(make_pair(tmp_path / "a"), s, 1, cfg, args) for s in hyps}
    assert sorted(p.parent.name for p in records.rglob("record.json")) == ["input.seed1", "vanilla.seed1"]
    assert not list(records.rglob("*.pt"))

    def no_training(*a):
        raise AssertionError("a recorded run was trained or decoded again")
    monkeypatch.setattr(bleu_runs, "train_system", lambda pair, system, seed, cfg, args: read_json(
        pair.root / "runs" / cfg.tag() / f"{system}.seed{seed}" / "train.json"))
    monkeypatch.setattr(bleu_runs, "evaluate_system", real_evaluate)  # reads the recorded scores
    monkeypatch.setattr(bleu_runs, "generate", no_training)
    second = {s: bleu_runs.train_and_evaluate(make_pair(tmp_path / "b"), s, 1, cfg, args) for s in hyps}
    assert second == first
    assert (tmp_path / "b" / "runs" / cfg.tag() / "input.seed1" / "hyp" / "test.txt").read_text().splitlines() \
        == hyps["input"]

    monkeypatch.setattr(bleu_evidence, "test_references", lambda spec, args: refs)
    gathered = bleu_evidence.gather_from_records(PAIRS["ja-en"], ["vanilla", "input", "head"], [1], cfg, [], args)
    assert gathered["runs"] == {s: {"1": first[s]} for s in hyps}
    assert gathered["summary"] == bleu_evidence.pair_summary({s: {"1": first[s]} for s in hyps})
    [test] = gathered["significance"]
    assert (test["system"], test["baseline"]) == ("input", "vanilla")
    assert test["significant_seed_pairs"]["BLEU"] == 1
    # the seed-pooled buckets from the records alone: the replica's per-sentence figures travel in the record
    assert [c["sentences"] for c in gathered["pooled_buckets"]["reordering"]["systems"]["input"]] == [20, 20]
    record = run_records.read_record(records, run_records.RunKey("ja-en", "input", 1))
    assert re.fullmatch(r"[0-9a-f]{40}(\+modified)?|unknown.*", record["provenance"]["code"])
    assert bleu_evidence.gather_from_records(PAIRS["en-ja"], ["vanilla"], [1], cfg, [], args) is None  # none yet
    # another configuration's records are not silently mixed in
    with pytest.raises(Exception, match="made with configuration"):
        bleu_evidence.gather_from_records(PAIRS["ja-en"], ["vanilla"], [1], bleu_runs.TrainConfig(max_update=6), [],
                                          args)


def test_dev_curve_scores_every_kept_checkpoint_once_and_travels_in_the_record(monkeypatch, tmp_path: Path) -> None:
    # --curve-every 4: fairseq-train keeps a checkpoint every 4 updates; dev is scored with each (those of other
    # intervals left out), the last point is the run's own dev score, a rerun decodes nothing again, and the curve
    # is recorded and gathered from the record alone
    cfg = bleu_runs.TrainConfig(max_update=10)
    records = tmp_path / "records"
    args = Namespace(no_train=False, attention_aer=False, attention_layer=-1, records=records, train_lines=0,
                     test_lines=40, spm_vocab=8000, reorder_iterations=0, reorder_lines=0, reorder_args="", jackknife=3,
                     contrast=[], contrast_window=3, contrast_seed=1, bs_samples=100, ar_trials=100, curve_every=4,
                     log_interval=25)
    pair = bleu_corpus.PreparedPair(PAIRS["ja-en"], tmp_path, tmp_path / "bin", tmp_path / "oracle-bin",
                                    tmp_path / "oracle" / "test.align")
    pair.eval_sets["valid"] = bleu_corpus.EvalSet("valid", tmp_path, "valid", [], [], None)
    pair.info = {"data_replica": 1}
    commands = []

    def fake_fairseq_train(cmd, log_path, cpu_seconds=None):
        commands.append([str(c) for c in cmd])
        run_dir = Path(log_path).parent
        for name in ("checkpoint_1_2.pt", "checkpoint_1_4.pt", "checkpoint_2_6.pt", "checkpoint_2_8.pt",
                     "checkpoint_last.pt"):
            (run_dir / name).write_bytes(b"weights")
        Path(log_path).write_text('x | train | {"epoch": 2, "train_loss": "3.0", "train_nll_loss": "2.0", '
                                  '"train_num_updates": "10"}\n')
        if cpu_seconds is not None:
            cpu_seconds.append(1.0)
    decoded = []

    def fake_decode(pair, system, seed, cfg, eval_set, args, checkpoint, gen):
        decoded.append(checkpoint.name)
        bleu = {"checkpoint_1_4.pt": 20.0, "checkpoint_2_8.pt": 24.0, "checkpoint_last.pt": 25.0}[checkpoint.name]
        return ["hyp"], {"bleu": bleu, "chrf": bleu + 10}
    monkeypatch.setattr(bleu_runs, "run_logged", fake_fairseq_train)
    monkeypatch.setattr(bleu_runs, "decode_and_score", fake_decode)
    monkeypatch.setattr(bleu_runs, "machine_info", lambda: {"cpu_model": "test"})
    out = bleu_runs.train_and_evaluate(pair, "vanilla", 1, cfg, args)
    [train_cmd] = commands
    assert train_cmd[train_cmd.index("--save-interval-updates") + 1] == "4"
    expected = [{"updates": 4, "bleu": 20.0, "chrf": 30.0}, {"updates": 8, "bleu": 24.0, "chrf": 34.0},
                {"updates": 10, "bleu": 25.0, "chrf": 35.0}]
    assert out["curve"] == expected
    assert sorted(decoded) == ["checkpoint_1_4.pt", "checkpoint_2_8.pt", "checkpoint_last.pt"]
    decoded.clear()
    assert bleu_runs.train_and_evaluate(pair, "vanilla", 1, cfg, args)["curve"] == expected and not decoded

    record = run_records.read_record(records, run_records.RunKey("ja-en", "vanilla", 1))
    assert record["files"]["curve/valid.u8.json"] == expected[1]
    monkeypatch.setattr(bleu_evidence, "test_references", lambda spec, args: ["ref"])
    gathered = bleu_evidence.gather_from_records(PAIRS["ja-en"], ["vanilla"], [1], cfg, [], args)
    assert gathered["runs"]["vanilla"]["1"]["curve"] == expected
    table = bleu_report.curve_markdown({"pairs": {"ja-en": gathered}})
    assert table[-2:] == ["|---|---|---|---|---|---|", "| ja-en | vanilla | 1 | 20.00 | 24.00 | 25.00 |"]
    assert "| pair | system | seed | 4 | 8 | 10 |" in table
    # without --curve-every nothing is kept along the way
    commands.clear()
    args.curve_every = 0
    bleu_runs.train_system(pair, "vanilla", 2, cfg, args)
    assert "--save-interval-updates" not in commands[0]


def test_the_curve_report_shows_each_tested_difference_and_the_oracle_ceiling_along_the_training() -> None:
    # the budget curve's question: how much an XL system, and a model on oracle positions, leads its baselines at
    # each budget; a point one of the two runs lacks is "–", a system with no curve gives no row
    def run(*bleu):
        return {"curve": [{"updates": u, "bleu": b, "chrf": 0.0} for u, b in zip((1000, 2000, 3000), bleu)
                          if b is not None]}
    pair = {"runs": {"vanilla": {"3": run(20.0, 25.0, 27.0)}, "rope-monotone": {"3": run(21.0, 26.0, 27.5)},
                     "rope": {"3": run(21.5, 26.0, None)}, "rope-oracle": {"3": run(24.0, 27.0, 28.0)},
                     "input-tanh": {"3": {}}},
            "significance": [{"system": s, "baseline": b, "seed_pairs": []} for s, b in
                             (("input-tanh", "vanilla"), ("rope", "vanilla"), ("rope-monotone", "vanilla"),
                              ("rope", "rope-monotone"))]}
    assert bleu_report.curve_pairs(pair) == [
        ("input-tanh", "vanilla"), ("rope", "vanilla"), ("rope-monotone", "vanilla"), ("rope", "rope-monotone"),
        ("rope-oracle", "rope"), ("rope-oracle", "vanilla"), ("rope-oracle", "rope-monotone")]
    table = bleu_report.curve_markdown({"pairs": {"ja-en": pair}})
    deltas = table[table.index("| pair | system | baseline | seed | 1,000 | 2,000 | 3,000 |") + 2:]
    assert deltas == ["| ja-en | rope | vanilla | 3 | +1.50 | +1.00 | – |",
                      "| ja-en | rope-monotone | vanilla | 3 | +1.00 | +1.00 | +0.50 |",
                      "| ja-en | rope | rope-monotone | 3 | +0.50 | +0.00 | – |",
                      "| ja-en | rope-oracle | rope | 3 | +2.50 | +1.00 | – |",
                      "| ja-en | rope-oracle | vanilla | 3 | +4.00 | +2.00 | +1.00 |",
                      "| ja-en | rope-oracle | rope-monotone | 3 | +3.00 | +1.00 | +0.50 |"]


def test_pair_info_names_the_reorderer_settings_of_its_model(tmp_path: Path) -> None:
    # train-reorderer's defaults change between commits; a record must say which features and abstention its
    # data replica's reorderer used, read from the model file itself
    from xlpos_prep.reorderer import Reorderer, ReordererConfig, TrainOptions, train
    sentences = [["a", "b", "c"], ["b", "c", "a"]] * 5
    model = train(sentences, [[2, 1, 0], [0, 2, 1]] * 5, ReordererConfig(hash_bits=12, invert_margin=0.5),
                  TrainOptions(iterations=2, chunk_weight=3.0), progress=False)
    model.save(str(tmp_path / "r.npz"))
    settings = bleu_corpus.reorderer_settings(tmp_path / "r.npz")
    assert settings["hash_bits"] == 12 and settings["invert_margin"] == 0.5
    assert settings["features"] == list(ReordererConfig().features)
    assert settings["training"]["iterations"] == 2 and settings["training"]["chunk_weight"] == 3.0
    assert json.loads(json.dumps(settings)) == settings
    assert Reorderer.load(str(tmp_path / "r.npz")).config.hash_bits == 12


def test_p_values_below_a_thousandth_are_not_printed_as_zero() -> None:
    assert bleu_report.p_value(0.0213) == "0.021" and bleu_report.p_value(0.001) == "0.001"
    assert bleu_report.p_value(1 / 10001) == "0.0001" and bleu_report.p_value(0.00031) == "0.00031"


def test_reorderer_arguments_make_their_own_data_replica() -> None:
    # a campaign pins its reorderer settings with --reorder-args: the replica made with them must not be confused
    # with one made with train-reorderer's defaults (which may change), nor with other settings
    args = bleu.build_parser().parse_args(["--pairs", "ja-en", "--data-replica", "1", "--jackknife", "1"])
    spec = PAIRS["ja-en"]
    # older replicas keep their name
    assert bleu_corpus.data_tag(spec, args) == "trainall-holdout1000-replica1.spm8000.rodef"
    # jackknifed training positions (the default) are other data: a folder of their own per K
    jackknifed = bleu.build_parser().parse_args(["--pairs", "ja-en", "--data-replica", "1"])
    assert bleu_corpus.data_tag(spec, jackknifed) == \
        f"trainall-holdout1000-replica1.spm8000.rodef.jk{bleu.JACKKNIFE_FOLDS}"
    pinned = Namespace(**{**vars(args), "reorder_args": "--features span,wide  --fallback-margin 0"})
    same = Namespace(**{**vars(args), "reorder_args": "--features span,wide --fallback-margin 0"})
    other = Namespace(**{**vars(args), "reorder_args": "--features span,wide"})
    tags = {bleu_corpus.data_tag(spec, a) for a in (args, pinned, other)}
    assert len(tags) == 3 and bleu_corpus.data_tag(spec, pinned) == bleu_corpus.data_tag(spec, same)
