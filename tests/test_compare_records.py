"""benchmarks/compare_records.py: the same system of two campaigns, tested against each other on one data replica."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import compare_records  # noqa: E402
import run_records as rr  # noqa: E402

REFS = [f"the {w} sat on mat number {i} ." for i, w in enumerate(["cat", "dog", "bird", "fish", "cow", "hen"] * 5)]


def corpus(root: Path) -> Path:
    """A pretokenized enja corpus whose last len(REFS) training lines are ja-en's test set (test_lines)."""
    enja = root / "enja"
    enja.mkdir(parents=True)
    train_en = [f"line {i} ." for i in range(10)] + REFS
    (enja / "train.en").write_text("".join(x + "\n" for x in train_en))
    (enja / "train.ja").write_text("".join(f"ja {i}\n" for i in range(len(train_en))))
    (enja / "dev.en").write_text("a .\n")
    (enja / "dev.ja").write_text("b\n")
    return root


def record(records: Path, system: str, hyps: list[str], *, monotone_tau: float = 0.6776,
           reorder_args: str = "", tag: str = "u6000-abc", reorderer_tau: float = 0.837,
           reorderer_config: dict | None = None) -> None:
    run = records.parent / f"run-{records.name}-{system}"
    (run / "scores").mkdir(parents=True)
    (run / "hyp").mkdir()
    (run / "train.json").write_text(json.dumps({"seconds": 1.0}))
    (run / "hyp" / "test.txt").write_text("".join(x + "\n" for x in hyps))
    (run / "scores" / "test.json").write_text(json.dumps({"bleu": 40.0, "chrf": 60.0}))
    (run / "scores" / "valid.json").write_text(json.dumps({"bleu": 41.0, "chrf": 61.0}))
    data = {"reordering_vs_oracle": {"test": {"monotone": {"corpus_tau": monotone_tau},
                                              "reorderer": {"corpus_tau": reorderer_tau, "corpus_frs": 0.79}}},
            "reorderer": {"config": reorderer_config or {"max_span": 64}}}
    provenance = {"data": data, "bleu_py_config": {"train_lines": 0, "test_lines": len(REFS),
                                                    "reorder_args": reorder_args}}
    rr.export_run(run, records, rr.RunKey("ja-en", system, 1), tag, provenance)


def test_two_campaigns_runs_are_tested_against_each_other_with_what_differs(tmp_path, capsys):
    data = corpus(tmp_path / "data")
    worse = [r.replace("mat", "rug") for r in REFS]
    record(tmp_path / "linear", "rope", worse)
    record(tmp_path / "neural", "rope", REFS, reorder_args="--kind neural", reorderer_tau=0.835)
    out = tmp_path / "cmp.json"
    rc = compare_records.main([str(tmp_path / "linear"), str(tmp_path / "neural"), "--pairs", "ja-en", "--systems",
                               "rope,input", "--data", str(data), "--bs-samples", "100", "--ar-trials", "100",
                               "--json", str(out)])
    assert rc == 0
    [result] = json.loads(out.read_text())
    [seed_pair] = result["significance"]["seed_pairs"]
    bleu = next(t for t in seed_pair["comparison"]["tests"] if t["metric"] == "BLEU")
    assert bleu["delta"] > 10 and bleu["system_score"] == pytest.approx(100.0)
    assert result["runs"]["1"]["data_differences"] == {"bleu.py reorder_args": ["", "--kind neural"]}
    printed = capsys.readouterr()
    assert "| ja-en | rope | 1 |" in printed.out and "0.8370 / 0.7900 → 0.8350 / 0.7900" in printed.out
    assert "reorder_args: '' → '--kind neural'" in printed.out
    assert "ja-en input.seed1: no record in both directories" in printed.err


def test_runs_whose_data_differ_in_other_ways_each_show_theirs(tmp_path, capsys):
    data = corpus(tmp_path / "data")
    for system in ("rope", "input"):
        record(tmp_path / "linear", system, REFS)
    record(tmp_path / "neural", "rope", REFS, reorder_args="--kind neural")
    record(tmp_path / "neural", "input", REFS, reorder_args="--kind neural", reorderer_config={"max_span": 32})
    rc = compare_records.main([str(tmp_path / "linear"), str(tmp_path / "neural"), "--pairs", "ja-en", "--systems",
                               "rope,input", "--data", str(data), "--bs-samples", "100", "--ar-trials", "100"])
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    assert "ja-en rope seed 1: data differ in: bleu.py reorder_args: '' → '--kind neural'." in lines
    assert ("ja-en input seed 1: data differ in: bleu.py reorder_args: '' → '--kind neural'; "
            "reorderer max_span: 64 → 32.") in lines


@pytest.mark.parametrize("change, message", [
    ({"monotone_tau": 0.6811}, "not of one making of data replica 1"),
    ({"tag": "u2000-abc"}, "configurations u6000-abc and u2000-abc differ"),
])
def test_runs_of_other_makings_or_configurations_are_refused_in_one_line(tmp_path, capsys, change, message):
    data = corpus(tmp_path / "data")
    record(tmp_path / "a", "rope", REFS)
    record(tmp_path / "b", "rope", REFS, **change)
    rc = compare_records.main([str(tmp_path / "a"), str(tmp_path / "b"), "--pairs", "ja-en", "--systems", "rope",
                               "--data", str(data), "--json", str(tmp_path / "cmp.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("error: ja-en rope.seed1 in ") and message in err[-1]
    assert not (tmp_path / "cmp.json").exists()
