"""The scale benchmark (benchmarks/scale.py) reports what it says: WMT-like corpora, per-step costs cut at the
steps' completion records, growth fits and the extrapolation with the WMT recipes' caps. No timing is asserted."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import process_tree  # noqa: E402
import scale  # noqa: E402

ENJA = REPO.parent / "shared" / "data" / "enja"


def test_joined_pairs_have_wmt_like_lengths_and_stay_parallel():
    src = [f"s{i} a b c d e f g h" for i in range(1000)]        # 9 words a line, like Tanaka
    tgt = [f"t{i} x y" for i in range(1000)]
    import random
    pairs = list(scale.joined_pairs(src, tgt, 0, 1000, 3000, random.Random(1)))
    lengths = [len(s.split()) for s, _ in pairs]
    assert 20 <= sum(lengths) / len(lengths) <= 32          # mean about 25 words
    assert max(lengths) <= scale.MAX_WORDS and max(lengths) > 60   # a tail, capped
    for s, t in pairs[:200]:  # the same lines joined on both sides, in the same order
        assert [w[1:] for w in s.split() if w.startswith("s")] == [w[1:] for w in t.split() if w.startswith("t")]


def test_step_costs_cut_the_samples_at_completion_records():
    S = process_tree.Sample
    samples = [S(100.0, 0.0, 10), S(101.0, 1.0, 50), S(102.0, 2.0, 20), S(103.0, 2.5, 80), S(104.0, 4.5, 30)]
    records = [(102.0, "align (train+test)"), (103.5, "jackknife fold 1 train-reorderer"), (104.0, "train-reorderer")]
    costs = scale.step_costs(samples, records, 100.0)
    assert [c.step for c in costs] == ["align (train+test)", "train-reorderer"]  # the nested fold is left out
    assert (costs[0].wall, costs[0].cpu, costs[0].peak_rss) == (2.0, 2.0, 50)
    assert (costs[1].wall, costs[1].cpu, costs[1].peak_rss) == (2.0, 2.5, 80)


def test_a_reorderer_trained_beside_the_folds_is_part_of_their_step():
    S = process_tree.Sample
    samples = [S(100.0 + t, 2.0 * t, 10) for t in range(6)]
    beside = [(101.0, "jackknife folds"), (103.0, "train-reorderer"), (105.0, "jackknife reorderers")]
    assert [c.step for c in scale.step_costs(samples, beside, 100.0)] == ["jackknife folds", "jackknife reorderers"]
    assert scale.step_costs(samples, beside, 100.0)[1].cpu == 8.0  # the full model's CPU time is in it
    before = [(101.0, "train-reorderer"), (102.0, "jackknife folds"), (105.0, "jackknife reorderers")]
    assert [c.step for c in scale.step_costs(samples, before, 100.0)] == [step for _, step in before]


def test_completion_records_are_read_from_done_markers(tmp_path):
    (tmp_path / "a.done").write_text(json.dumps({"step": "spm-train"}))
    os.utime(tmp_path / "a.done", (50, 50))
    (tmp_path / "b.done").write_text(json.dumps({"step": "data-bin"}))
    os.utime(tmp_path / "b.done", (60, 60))
    (tmp_path / "c.done").write_text(json.dumps({"step": "data-bin"}))   # a step with two outputs: its last
    os.utime(tmp_path / "c.done", (70, 70))
    (tmp_path / "preprocess.done").write_text("")                           # not a completion record
    assert scale.completion_records(tmp_path) == [(50.0, "spm-train"), (70.0, "data-bin")]


def test_power_fit_and_extrapolation_with_the_recipes_caps():
    a, b = scale.power_fit([1e3, 1e4, 1e5], [2.0, 20.0, 200.0])
    assert b == pytest.approx(1.0) and a == pytest.approx(0.002)
    assert scale.power_fit([1e3, 1e4], [1.0, 100.0])[1] == pytest.approx(2.0)
    fits = {"align (train+test)": {"kind": "A", "cpu_a": 1e-3, "cpu_b": 1.0},
            "train-reorderer": {"kind": "R", "cpu_a": 1e-2, "cpu_b": 1.0},
            "positions train": {"kind": "N", "cpu_a": 1e-4, "cpu_b": 1.0},
            "reorder test": {"kind": "fixed", "cpu_a": 5.0, "cpu_b": 0.0}}
    # 4.5M pairs: align capped at 1M (two processes), reorderer at 100k (one), positions on all (per core)
    two = scale.extrapolate(fits, 4_500_000, 2, 3)
    assert two == pytest.approx(1e-3 * 1e6 / 2 + 1e-2 * 1e5 + 1e-4 * 4.5e6 / 2 + 5.0 / 2)
    many = scale.extrapolate(fits, 4_500_000, 32, 3)
    assert many == pytest.approx(1e-3 * 1e6 / 2 + 1e-2 * 1e5 + 1e-4 * 4.5e6 / 32 + 5.0 / 32)
    # sentencepiece trains on its sample of 1M pairs' sentences, whatever the corpus
    assert scale.lines_of(scale.step_kind("spm-train")[0], 4_500_000, 10**6, 10**5) == scale.SPM_SAMPLE_PAIRS
    # a step measured mostly as start-up (a power below 1) keeps its measured cost per line
    startup = {"kind": "N", "cpu_a": 1.0, "cpu_b": 0.5, "cpu_c": 5.0, "cpu_m": 1e-3}
    assert scale.step_cpu(startup, 4_500_000) == pytest.approx(5.0 + 4500.0)
    assert scale.step_cpu({**startup, "cpu_m": -1.0}, 10_000) == pytest.approx(100.0)  # the power law then


def test_memory_extrapolation_is_linear_where_a_step_grew_and_flat_where_it_did_not():
    assert scale.linear_fit([1e4, 2e4, 5e4], [110.0, 120.0, 150.0]) == (pytest.approx(100.0), pytest.approx(1e-3))
    mb = 2**20
    fits = {"align (train+test)": {"kind": "A", "lines": [1e4, 2e4], "peak_rss": [100 * mb, 200 * mb], "rss_c": 0.0,
                                   "rss_m": 0.01 * mb},
            "positions train": {"kind": "N", "peak_rss": [90 * mb, 80 * mb], "rss_c": 100.0 * mb, "rss_m": -1.0},
            "reorder test": {"kind": "fixed", "peak_rss": [50 * mb, 60 * mb], "rss_c": 0.0, "rss_m": 5.0}}
    peaks = scale.extrapolate_memory(fits, 4_500_000)
    # the alignment grows with its 1M capped lines; positions did not grow (as measured); test is one size
    assert peaks == {"align (train+test)": pytest.approx(1e4 * mb), "positions train": 90 * mb,
                     "reorder test": 60 * mb}
    # a streaming step's peak that moved by its noise (+10% over 25x the corpus) stays as measured
    reorder = {"kind": "N-R", "lines": [1.6e4, 4e5], "peak_rss": [911 * mb, 998 * mb], "rss_c": 907 * mb,
               "rss_m": 0.000227 * mb}
    assert not scale.memory_grows(reorder)
    assert scale.extrapolate_memory({"reorder train rest": reorder}, 20_000_000) == {"reorder train rest": 998 * mb}
    assert scale.memory_grows(fits["align (train+test)"])
    # a size measured beyond the recipes' 1M-pair alignment cap does not raise the capped step's figure
    align = {"kind": "A", "lines": [2e4, 5e5, 2e6], "peak_rss": [111 * mb, 710 * mb, 2292 * mb],
             "rss_c": 100 * mb, "rss_m": 0.0011 * mb}
    assert scale.extrapolate_memory({"align (train+test)": align}, 4_500_000)["align (train+test)"] \
        == pytest.approx(1200 * mb)
    assert scale.extrapolate_memory({"align (train+test)": align}, 300_000)["align (train+test)"] \
        == pytest.approx(430 * mb)


def test_a_size_without_a_memory_sample_does_not_make_a_step_grow():
    step = {"wall": 0.1, "cpu": 0.05, "peak_rss": 0}
    records = [{"lines": n, "aligned_lines": n, "reorder_lines": n // 5,
                "steps": [{**step, "step": "jackknife rest source", "peak_rss": rss}]}
               for n, rss in ((20_000, 0), (500_000, 32 * 2**20))]
    fit = scale.fits_of(records)["jackknife rest source"]
    assert fit["rss_m"] == 0.0
    assert scale.extrapolate_memory({"jackknife rest source": fit}, 20_000_000) == {"jackknife rest source": 32 * 2**20}


def test_tree_sampler_counts_a_child_and_its_memory():
    proc = subprocess.Popen([sys.executable, "-c", "x = bytearray(60 * 2**20)\n"
                             "import time; t = time.process_time()\nwhile time.process_time() - t < 0.6: pass"])
    sampler = process_tree.TreeSampler(os.getpid(), interval=0.05).start()
    proc.wait()
    samples = sampler.stop()
    assert max(s.rss for s in samples) > 60 * 2**20          # the child's 60 MB were in the tree
    assert samples[-1].cpu - samples[0].cpu >= 0.3


@pytest.mark.skipif(not (ENJA / "train.en").exists(), reason="needs ../shared/data/enja (the Tanaka corpus)")
def test_write_corpus_makes_every_split(tmp_path):
    scale.write_corpus(ENJA, tmp_path, 300, seed=1)
    counts = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in tmp_path.iterdir()}
    assert counts == {"train.en": 300, "train.ja": 300, "valid.en": 200, "valid.ja": 200,
                      "test.en": 1000, "test.ja": 1000}


def test_step_memory_inputs_repeat_the_work_directorys_files(tmp_path):
    import step_memory
    assert step_memory.repeated(["a", "b", "c", "d"], 2.5) == ["a", "b", "c", "d"] * 2 + ["a", "b"]
    work = tmp_path / "work"
    files = {"tok/train.en": ["a b", "c d e", "f"], "tok/train.ja": ["x", "y z", "w"],
             "reorder/train.order": ["1 0", "0 2 1", "0"], "reorder/train.src": ["a b", "c d e"],
             "reorder/train.align": ["0-0 1-0", "0-1"], "reorder/align-input.en": ["a b", "c d e", "f"],
             "reorder/align-input.ja": ["x", "y z", "w"]}
    for name, lines in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    made = step_memory.make_inputs(work, tmp_path / "in", 2, align_lines=1)
    read = lambda key: Path(made[key]).read_text(encoding="utf-8").splitlines()  # noqa: E731
    assert read("src") == files["tok/train.en"] * 2 and read("order") == files["reorder/train.order"] * 2
    assert read("oracle_src") == files["reorder/train.src"] * 2 and read("align") == files["reorder/train.align"] * 2
    assert read("align_src") == ["a b", "c d e"] and made["lines"] == "6" and made["align_lines"] == "2"
    # every step's command reads these inputs and writes under the output directory
    commands = step_memory.step_commands(work, made, tmp_path / "out")
    assert set(commands) == {"reorder", "positions", "spm-encode", "oracle", "clean", "align"}
    assert all(str(tmp_path / "out") in " ".join(c) for c in commands.values())


FAKE_PREPARE = """
import json, pathlib, sys, time
work = pathlib.Path(sys.argv[1])
for step in ("align (train+test)", "train-reorderer", "data-bin"):
    marker = work / (step.split()[0] + ".done")
    if marker.exists():
        continue  # the pipeline skips a completed step
    time.sleep(0.3)
    if (work / ("fail-at-" + step)).exists():
        sys.exit(1)
    marker.write_text(json.dumps({"step": step}))
"""


def test_a_cut_measurement_resumes_and_keeps_the_steps_measured_before(tmp_path, monkeypatch):
    import argparse

    def corpus(data, tok, lines, seed):
        tok.mkdir(parents=True)
        (tok / "train.en").write_text("a b c\nd e\n", encoding="utf-8")
        (tok.parent / "fail-at-data-bin").write_text("")  # the machine goes away during data-bin

    monkeypatch.setattr(scale, "write_corpus", corpus)
    monkeypatch.setattr(scale, "prepare_command",
                        lambda work, *a: [sys.executable, "-c", FAKE_PREPARE, str(work), *map(str, a)])
    monkeypatch.setattr(scale, "epoch_command", lambda *a: [sys.executable, "-c", "print('{\"cpu\": 1.0}')"])
    monkeypatch.setattr(scale, "PROGRESS_SECONDS", 0.0)
    opts = argparse.Namespace(jackknife=3, reorder_fraction=0.5, workers=1, seed=1, max_tokens=100, load_before=0.0)
    work = tmp_path / "10"
    work.mkdir()  # a directory without a measurement: cut while its corpus was written, so made again
    with pytest.raises(SystemExit):
        scale.measure_size(tmp_path, ENJA, 10, opts)
    partial = json.loads((work / "partial.json").read_text())
    assert [s["step"] for s in partial["steps"]] == ["align (train+test)", "train-reorderer"]
    assert not (work / "scale.json").exists()

    (work / "fail-at-data-bin").unlink()
    record = scale.measure_size(tmp_path, ENJA, 10, opts)
    assert [s["step"] for s in record["steps"]] == ["align (train+test)", "train-reorderer", "data-bin"]
    assert [s["wall"] for s in record["steps"]] == [s["wall"] for s in partial["steps"]] + [record["steps"][2]["wall"]]
    assert record["source_words"] == 5 and record["intervals"] == 2 and record["resumed_steps"] == ["data-bin"]
    assert record["prepare"]["wall"] >= sum(s["wall"] for s in record["steps"]) - 0.05
    assert json.loads((work / "scale.json").read_text()) == record

    opts.workers = 2  # other settings: the cut measurement is not theirs
    (work / "scale.json").unlink()
    with pytest.raises(SystemExit, match="delete the directory"):
        scale.measure_size(tmp_path, ENJA, 10, opts)


def test_earlier_records_join_the_fit_unless_measured_again_or_of_another_jackknife(tmp_path):
    rec = lambda lines, folds=3: {"lines": lines, "jackknife": folds}  # noqa: E731
    (tmp_path / "a.json").write_text(json.dumps({"records": [rec(20000), rec(500000)]}))
    (tmp_path / "b.json").write_text(json.dumps({"records": [rec(500000), rec(2000000)]}))
    got = scale.earlier_records([tmp_path / "a.json", tmp_path / "b.json"], {2000000}, 3)
    assert sorted(r["lines"] for r in got) == [20000, 500000]
    (tmp_path / "c.json").write_text(json.dumps({"records": [rec(50000, folds=1)]}))
    with pytest.raises(SystemExit, match="--jackknife 1, not 3"):
        scale.earlier_records([tmp_path / "c.json"], set(), 3)
    (tmp_path / "d.json").write_text("{}")
    with pytest.raises(SystemExit, match="not a scale benchmark record"):
        scale.earlier_records([tmp_path / "d.json"], set(), 3)


def test_sizes_measured_on_different_machines_are_named():
    rec = lambda lines, machine: {"lines": lines, "machine": machine}  # noqa: E731
    assert scale.mixed_machines([rec(20000, "A, 2 cores"), rec(500000, "A, 2 cores")]) is None
    warning = scale.mixed_machines([rec(2000000, "B, 2 cores"), rec(20000, "A, 2 cores"), rec(500000, "A, 2 cores")])
    assert "A, 2 cores: 20000, 500000 pairs" in warning and "B, 2 cores: 2000000 pairs" in warning
    assert scale.machine().endswith(f"{len(os.sched_getaffinity(0))} cores")


def synthetic_record(sizes=(20_000, 500_000)) -> list[dict]:
    """Records of a pipeline whose alignment and positions are linear and whose valid split is fixed."""
    mb = 2**20

    def step(name, cpu, rss):
        return {"step": name, "wall": cpu, "cpu": cpu, "peak_rss": rss}
    return [{"lines": n, "aligned_lines": n, "reorder_lines": n // 5, "jackknife": 3, "machine": "M, 2 cores",
             "prepare": {"wall": 1.0, "cpu": 1.0, "peak_rss": mb}, "epoch": {"cpu": 1.0, "peak_rss": mb},
             "steps": [step("align (train+test)", n * 1e-3, int(n * 1e3)), step("positions train", n * 1e-4, 100 * mb),
                       step("reorder valid", 2.0, 900 * mb), step("spm-encode train", n * 1e-5, 70 * mb)]}
            for n in sizes]


def test_the_plot_draws_the_steps_that_cost_and_their_fits_to_wmt(tmp_path, capsys):
    import plot_scale

    records = synthetic_record()
    record = {"records": records, "fits": scale.fits_of(records)}
    # the fixed split and a step of under 10 CPU seconds at the largest size are left out; costliest first
    assert plot_scale.plotted_steps(record) == ["align (train+test)", "positions train"]
    assert scale.wmt_lines("align (train+test)", 4_500_000) == scale.WMT_ALIGN_LINES
    assert scale.wmt_lines("positions train", 4_500_000) == 4_500_000
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib (extra 'bench') missing: the drawing itself is not tested")
    saved = tmp_path / "scale.json"
    saved.write_text(json.dumps({"records": records}))
    out = tmp_path / "plot.png"
    assert scale.main(["--sizes", "", "--with-records", str(saved), "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_scale.main(["--record", str(saved), "--out", str(out)]) == 2  # no fits: not a whole record
    assert f"{saved}: not a plottable scale record" in capsys.readouterr().err
