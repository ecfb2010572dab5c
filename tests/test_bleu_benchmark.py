"""The BLEU benchmark's own logic (benchmarks/bleu.py, plot_bleu.py): splits, buckets, scoring, log parsing,
summaries and the plot. The end-to-end pipeline is exercised by running the benchmark (see its docstring)."""
from __future__ import annotations

import importlib.util
import json
import sys
from argparse import Namespace
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import bleu  # noqa: E402


def test_tanaka_test_set_is_the_held_out_end_of_train(tmp_path: Path) -> None:
    for lang in ("en", "ja"):
        (tmp_path / f"train.{lang}").write_text("".join(f"{lang} {i}\n" for i in range(10)), encoding="utf-8")
        (tmp_path / f"dev.{lang}").write_text(f"{lang} dev\n", encoding="utf-8")
    splits = bleu.select_splits(bleu.PAIRS["ja-en"], tmp_path, "ja", train_lines=0, test_lines=3)
    assert splits["test"] == ["ja 7", "ja 8", "ja 9"]
    assert splits["train"] == [f"ja {i}" for i in range(7)]
    assert splits["valid"] == ["ja dev"]
    # --train-lines subsamples what remains, never reaching into the test lines
    splits = bleu.select_splits(bleu.PAIRS["ja-en"], tmp_path, "ja", train_lines=2, test_lines=3)
    assert splits["train"] == ["ja 0", "ja 1"] and splits["test"] == ["ja 7", "ja 8", "ja 9"]
    with pytest.raises(SystemExit, match="not more than --test-lines"):
        bleu.select_splits(bleu.PAIRS["ja-en"], tmp_path, "ja", train_lines=0, test_lines=10)


def test_multi30k_uses_its_own_test_file(tmp_path: Path) -> None:
    for stem, n in (("train", 5), ("val", 2), ("test_2016_flickr", 3)):
        (tmp_path / f"{stem}.en").write_text("".join(f"{stem} {i}\n" for i in range(n)), encoding="utf-8")
    splits = bleu.select_splits(bleu.PAIRS["en-de"], tmp_path, "en", train_lines=4, test_lines=1000)
    assert [len(splits[s]) for s in ("train", "valid", "test")] == [4, 2, 3]
    assert splits["test"][0] == "test_2016_flickr 0"


def test_order_tau_measures_movement() -> None:
    assert bleu.order_tau([0, 1, 2, 3]) == 1.0
    assert bleu.order_tau([3, 2, 1, 0]) == -1.0
    assert bleu.order_tau([1, 0, 2, 3]) == pytest.approx(1 - 2 * 1 / 6)
    assert bleu.order_tau([0]) == 1.0


def test_buckets_cover_every_sentence_and_separate_unmoved_ones() -> None:
    sources = [["w"] * n for n in (3, 4, 5, 6, 7, 8, 9, 10, 11, 12)]
    orders = [list(range(len(s))) if k % 3 == 0 else list(reversed(range(len(s)))) if k % 3 == 1
              else [1, 0] + list(range(2, len(s))) for k, s in enumerate(sources)]
    spec = bleu.make_buckets(sources, orders, n_length=4, n_reorder=4)
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
    assert bleu.quantile_edges([5, 5, 5, 5], 4) == [5]
    assert bleu.quantile_edges([1, 2, 3, 4, 5, 6, 7, 8], 4) == [2, 4, 6, 8]
    assert bleu.assign_buckets([1, 2, 3, 8, 9], [2, 4, 6, 8]) == [0, 0, 1, 3, 3]


def test_scores_of_perfect_and_wrong_translations() -> None:
    refs = ["a small cat sat on the mat .", "the dog barked at the mailman today .", "it rained all day long ."]
    tokens = [r.split() for r in refs]
    spec = bleu.make_buckets(tokens, [list(range(len(t))) for t in tokens], n_length=2, n_reorder=2)
    perfect = bleu.score_translations(refs, refs, "none", (tokens, tokens), spec)
    assert perfect["bleu"] == 100.0 and perfect["chrf"] == 100.0 and perfect["ribes"] == 100.0
    assert all(b == 100.0 for b in perfect["bleu_by_length"] if b is not None)
    assert "tok:none" in perfect["bleu_signature"] and perfect["sentences"] == 3
    wrong = bleu.score_translations(["x y z"] * 3, refs, "13a", None, None)
    assert wrong["bleu"] < 1.0 and "ribes" not in wrong and "bleu_by_length" not in wrong
    with pytest.raises(ValueError, match="2 hypotheses for 3 references"):
        bleu.score_translations(refs[:2], refs, "13a", None, None)


def test_summary_mean_spread_and_delta_vs_vanilla() -> None:
    assert bleu.summarize([]) == {"n": 0}
    s = bleu.summarize([20.0, 22.0])
    assert s["mean"] == 21.0 and s["std"] == pytest.approx(1.41, abs=0.01) and s["n"] == 2
    assert bleu.summarize([20.0])["std"] is None

    def run(b: float) -> dict:
        return {"train": {"seconds": 10.0}, "eval": {"test": {"bleu": b, "chrf": 40.0}}}
    summary = bleu.pair_summary({"vanilla": {"1": run(20.0), "2": run(22.0)}, "input": {"1": run(23.0),
                                                                                     "2": run(24.0)}})
    assert summary["input"]["test"]["bleu"]["mean"] == 23.5
    assert summary["input"]["test"]["delta_vs_vanilla"] == {"bleu": 2.5, "chrf": 0.0}
    assert "delta_vs_vanilla" not in summary["vanilla"]["test"]


def test_markdown_table_rows_per_system_with_oracle_columns() -> None:
    def run(b: float, oracle_positions: float | None = None) -> dict:
        ev = {"test": {"bleu": b, "chrf": 40.0}, "valid": {"bleu": b - 1}}
        if oracle_positions is not None:
            ev[bleu.VALID_ORACLE_POSITIONS] = {"bleu": oracle_positions}
        return {"train": {"seconds": 10.0}, "eval": ev}
    runs = {"vanilla": {"1": run(20.0), "2": run(22.0)}, "input": {"1": run(23.0, 25.0)},
            "input-oracle": {"1": {"train": {"seconds": 10.0}, "eval": {"valid": {"bleu": 30.0}}}}}
    table = bleu.markdown_table({"pairs": {"ja-en": {"runs": runs, "summary": bleu.pair_summary(runs)}}})
    rows = {line.split(" | ")[1]: line.split(" | ") for line in table.splitlines()[2:]}
    assert rows["vanilla"][2:5] == ["1,2", "21.00 ± 1.41", "–"]
    assert rows["input"][2:5] == ["1", "23.00", "+2.00"] and rows["input"][-1] == "25.00 |"
    assert rows["input-oracle"][3] == "–" and rows["input-oracle"][-2:] == ["–", "30.00 |"]


FAIRSEQ_LOG = "".join(f"2026-12-02 13:35:47 | INFO | {line}\n" for line in (
    "fairseq_cli.train | num. shared model params: 4,582,400 (num. trained: 4,582,400)",
    'train_inner | {"epoch": 1, "update": 0.5, "loss": "9.5", "wpb": "2000", "num_updates": "25", "wall": "100"}',
    'train_inner | {"epoch": 2, "update": 1.5, "loss": "8.5", "wpb": "2100", "num_updates": "75", "wall": "200"}',
    'train | {"epoch": 2, "train_loss": "8.4", "train_nll_loss": "8.0", "train_num_updates": "80", "train_wall": "9"}',
))


def test_parse_train_log(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(FAIRSEQ_LOG, encoding="utf-8")
    stats = bleu.parse_train_log(log)
    assert stats["params"] == 4582400 and stats["updates"] == 80 and stats["epochs"] == 2
    assert stats["final_epoch_loss"] == 8.4 and stats["last_logged_loss"] == 8.5
    assert stats["steady_updates_per_s"] == 0.5  # (75 - 25) updates in (200 - 100) s


def test_missing_hypothesis_is_an_error(tmp_path: Path) -> None:
    gen = tmp_path / "gen.txt"
    gen.write_text("S-1\tx\nH-1\t-0.5\t▁b\nH-0\t-0.1\t▁a ▁c\n", encoding="utf-8")
    assert bleu.read_hypotheses(gen, 2) == ["▁a ▁c", "▁b"]
    with pytest.raises(SystemExit, match="no hypothesis for 1 of 3 sentences"):
        bleu.read_hypotheses(gen, 3)


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


def test_run_jobs_keeps_every_result_and_raises_the_first_failure() -> None:
    keys = [("vanilla", 1), ("input", 1), ("input", 2)]
    assert bleu.run_jobs(keys, lambda system, seed: f"{system}{seed}", 2) == {k: f"{k[0]}{k[1]}" for k in keys}
    assert bleu.run_jobs(keys, lambda system, seed: seed, 1) == {k: k[1] for k in keys}

    def fail(system: str, seed: int) -> int:
        if system == "input":
            raise SystemExit(f"training {system} failed")
        return seed
    with pytest.raises(SystemExit, match="training input failed"):
        bleu.run_jobs(keys, fail, 2)


def test_training_config_is_shared_and_keyed() -> None:
    cfg = bleu.TrainConfig(max_update=100)
    args = cfg.fairseq_args()
    # fairseq 0.12 would drop the last batch of generation/training otherwise (issue #5036)
    assert args[args.index("--required-batch-size-multiple") + 1] == "1"
    assert args[args.index("--warmup-updates") + 1] == "20"
    assert cfg.tag() != bleu.TrainConfig(max_update=200).tag()
    assert cfg.tag() == bleu.TrainConfig(max_update=100).tag()
    vanilla, oracle = bleu.system_args("vanilla")
    assert vanilla[vanilla.index("--arch") + 1] == "transformer" and not oracle
    rope, oracle = bleu.system_args("rope-oracle")
    assert rope[rope.index("--xl-integration") + 1] == "rope" and oracle


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib (extra 'bench') missing")
def test_plot_from_results(tmp_path: Path) -> None:
    import plot_bleu

    def entry(b: float, buckets: list[float]) -> dict:
        return {"test": {"bleu": bleu.summarize([b]),
                         "bleu_by_length": [bleu.summarize([x]) for x in buckets],
                         "bleu_by_reordering": [bleu.summarize([x]) for x in buckets]}}
    labels = [{"label": f"b{k}", "sentences": 10} for k in range(3)]
    results = {"config": {"seeds": [1], "train": {"max_update": 5}},
               "pairs": {"ja-en": {"buckets": {"test": {"length": labels, "reordering": labels}},
                                   "summary": {"vanilla": entry(20, [18, 20, 22]), "input": entry(21, [19, 21, 23]),
                                               "head": entry(22, [20, 22, 24]),
                                               "head-oracle": entry(30, [30, 30, 30])}}}}
    assert plot_bleu.best_xl_system(results["pairs"]["ja-en"]["summary"]) == "head"
    out = tmp_path / "plot.png"
    plot_bleu.plot_results(json.loads(json.dumps(results)), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
