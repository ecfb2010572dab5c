"""Plumbing of the speed benchmarks (benchmarks/train_throughput.py, speed_xl_vs_vanilla.py, gpu_check.sh): they run
end to end on tiny inputs and report what they say they report. No timing is asserted: speeds depend on the
machine and its load, and the benchmarks print ratios against a baseline from the same run for that reason."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_cli

BENCH = REPO / "benchmarks"
sys.path.insert(0, str(BENCH))

import speed_xl_vs_vanilla  # noqa: E402
import train_throughput  # noqa: E402

ENJA = REPO.parent / "shared" / "data" / "enja"


def inner_line(updates, wps, wpb):
    record = {"epoch": 1, "update": 0.1, "loss": "9.1", "wps": str(wps), "ups": "1.0", "wpb": str(wpb),
              "num_updates": str(updates), "wall": "3"}
    return "2026-12-03 07:00:00 | INFO | train_inner | " + json.dumps(record)


def test_steady_figures_leave_out_the_first_interval():
    lines = ["noise", inner_line(10, 50.0, 100.0), inner_line(20, 1000.0, 200.0), inner_line(25, 500.0, 100.0)]
    records = train_throughput.parse_inner(lines)
    assert [int(r["num_updates"]) for r in records] == [10, 20, 25]
    tokens, seconds, updates = train_throughput.steady_figures(records)
    # interval 2: 10 updates x 200 tokens at 1000 wps = 2 s; interval 3: 5 x 100 at 500 wps = 1 s
    assert (tokens, seconds, updates) == (2500.0, 3.0, 15)


def test_modes_map_to_fairseq_arguments():
    assert train_throughput.mode_args("vanilla")[2:] == ["--task", "translation", "--arch", "transformer"]
    args = train_throughput.mode_args("input:gated")
    assert args[args.index("--xl-integration") + 1] == "input" and args[args.index("--xl-fusion") + 1] == "gated"
    assert "--xl-fusion" not in train_throughput.mode_args("rope")
    assert train_throughput.inprocess_mode("rope") == "rope:sum"


def test_summary_ratios_are_per_round_speeds_against_vanilla():
    runs = [train_throughput.RunResult("vanilla", k, 10.0, 8.0, 20, 1000.0, 1.0, "", 2.0) for k in range(2)]
    runs += [train_throughput.RunResult("rope", 0, 20.0, 16.0, 20, 500.0, 1.0, "", 2.0),
             train_throughput.RunResult("rope", 1, 10.0, 8.0, 20, 1000.0, 1.0, "", 4.0)]
    summary = train_throughput.summarize(runs, ["vanilla", "rope"])
    assert summary["rope"]["ratio_steady_wps"] == [0.5, 1.0]
    assert summary["rope"]["ratio_steady_cpu"] == [0.5, 0.5]
    assert summary["rope"]["ratio_process"] == [0.5, 1.0]
    assert summary["rope"]["ratio_cpu"] == [0.5, 1.0]


def test_paired_ratios_are_against_the_vanilla_run_of_the_same_pair():
    def run(mode: str, wps: float, pair: str):  # steady speed = wps (tokens in one second)
        return train_throughput.RunResult(mode, 0, 10.0, 8.0, 20, wps, 1.0, "", 2.0, pair)

    runs = [run("vanilla", 1000.0, "rope"), run("rope", 900.0, "rope"),
            run("vanilla", 500.0, "head"), run("head", 500.0, "head")]
    summary = train_throughput.summarize(runs, ["vanilla", "rope", "head"])
    assert summary["rope"]["ratio_steady_wps"] == [0.9] and summary["head"]["ratio_steady_wps"] == [1.0]
    assert summary["vanilla"]["steady_wps"] == [1000.0, 500.0]
    parser = train_throughput.build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--paired", "0,0"])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="--paired needs two CPU cores")
def test_pool_joins_the_rounds_of_earlier_records_into_one_geometric_mean(tmp_path, capsys):
    def record(name: str, rope: list[float]) -> Path:
        path = tmp_path / name
        path.write_text(json.dumps({"summary": {"vanilla": {"ratio_steady_wps": [1.0] * len(rope)},
                                                "rope": {"ratio_steady_wps": rope}}}))
        return path

    paths = [record("a.json", [0.5, 2.0]), record("b.json", [1.0, 1.0])]
    assert train_throughput.pooled_ratios(paths) == {"rope": [0.5, 2.0, 1.0, 1.0]}
    mean, low, high = train_throughput.geometric_mean_interval([0.5, 2.0, 1.0, 1.0])
    assert mean == pytest.approx(1.0) and low < 1.0 < high  # geometric: 0.5 and 2.0 cancel
    assert train_throughput.geometric_mean_interval([0.97] * 5) == pytest.approx((0.97, 0.97, 0.97))
    assert train_throughput.main(["--pool", *map(str, paths)]) == 0
    table = capsys.readouterr().out
    assert [line.split()[:3] for line in table.splitlines()[2:]] == [["rope", "4", "1.000"]]
    (tmp_path / "c.json").write_text("{}")
    with pytest.raises(SystemExit, match="c.json: not a train_throughput.py --json record"):
        train_throughput.pooled_ratios([tmp_path / "c.json"])


def test_train_throughput_runs_fairseq_train_for_every_mode_paired_on_two_cores(tiny_corpus, tmp_path):
    """One round of two modes through the real fairseq-train on the tiny corpus, on CPU, vanilla and the XL mode at
    the same time, each pinned to its own core."""
    out = tmp_path / "throughput.json"
    cores = ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:2])
    proc = run_cli([sys.executable, str(BENCH / "train_throughput.py"), "--data-bin", str(tiny_corpus.data_bin),
                    "--source-lang", "src", "--target-lang", "tgt", "--size", "tiny", "--device", "cpu",
                    "--modes", "input:gated", "--rounds", "1", "--max-update", "4", "--log-interval", "2",
                    "--inprocess-updates", "0", "--work", str(tmp_path), "--json", str(out), "--paired", cores],
                   timeout=300)
    assert "steady CPU" in proc.stdout
    data = json.loads(out.read_text())
    assert set(data["summary"]) == {"vanilla", "input:gated"}
    assert sorted(run["mode"] for run in data["runs"]) == ["input:gated", "vanilla"]
    assert {run["pair"] for run in data["runs"]} == {"input:gated"}
    for run in data["runs"]:
        assert run["updates"] == 4 and run["steady_seconds"] > 0 and run["steady_tokens"] > 0
        assert 0 < run["steady_cpu_seconds"] < run["cpu_seconds"]
        assert "--task" in Path(run["log"]).read_text()


@pytest.mark.skipif(not (ENJA / "train.ja").exists(), reason=f"Tanaka corpus not found in {ENJA}")
def test_inprocess_measure_returns_rounds_for_every_model():
    opts = speed_xl_vs_vanilla.build_parser().parse_args(
        ["--lines", "40", "--updates", "2", "--rounds", "2", "--modes", "none:sum,rope:sum", "--embed-dim", "16",
         "--ffn-dim", "32", "--layers", "1", "--heads", "2", "--threads", "1", "--max-tokens", "256"])
    wps = speed_xl_vs_vanilla.measure(opts)
    assert list(wps) == ["vanilla", "none:sum", "rope:sum"]
    assert all(len(rounds) == 2 and all(w > 0 and c > 0 for w, c in rounds) for rounds in wps.values())


def test_gpu_check_script_parses():
    subprocess.run(["bash", "-n", str(BENCH / "gpu_check.sh")], check=True)
