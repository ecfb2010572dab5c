"""benchmarks/campaign.py: a campaign resumes from its committed records and runs only what is missing."""
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import campaign  # noqa: E402
import run_records  # noqa: E402

# Stands in for bleu.py: records every (pair, system, seed) it is asked for, and logs its arguments.
FAKE_BLEU = r'''
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import run_records
args = sys.argv[2:]
opt = lambda name: args[args.index(name) + 1]
records, work = Path(opt("--records")), Path(opt("--work"))
with open(work / "calls.jsonl", "a") as f:
    f.write(json.dumps(args) + "\n")
for system in opt("--systems").split(","):
    key = run_records.RunKey(opt("--pairs"), system, int(opt("--seeds")))
    run = work / key.pair / key.name
    (run / "hyp").mkdir(parents=True, exist_ok=True)
    (run / "hyp" / "test.txt").write_text("a\n")
    (run / "train.json").write_text(json.dumps({"seconds": 1200, "cpu_seconds": 1800}))
    run_records.export_run(run, records, key, "tag", {})
'''


def write_campaign(d: Path, units: list[dict], bleu_args=("--max-update", "1200")) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "campaign.json").write_text(json.dumps({"description": "t", "bleu_args": list(bleu_args), "units": units}))
    return d


@pytest.fixture
def fake_bleu(tmp_path, monkeypatch):
    script = tmp_path / "fake_bleu.py"
    script.write_text(FAKE_BLEU)
    monkeypatch.setattr(campaign, "BLEU", script)
    real_cmd = campaign.bleu_command
    monkeypatch.setattr(campaign, "bleu_command",
                        lambda *a, **k: [real_cmd(*a, **k)[0], str(script), str(BENCH), *real_cmd(*a, **k)[2:]])
    return tmp_path


def calls(work: Path) -> list[list[str]]:
    path = work / "calls.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_run_does_the_missing_runs_in_unit_order_and_a_second_run_nothing(fake_bleu, capsys):
    c = write_campaign(fake_bleu / "camp", [{"pair": "ja-en", "seed": 1, "systems": ["vanilla", "input"]},
                                            {"pair": "en-de", "seed": 1, "systems": ["vanilla"]}])
    work = fake_bleu / "work"
    work.mkdir()
    key = run_records.RunKey("ja-en", "vanilla", 1)  # recorded in an earlier session
    (work / "old" / "hyp").mkdir(parents=True)
    (work / "old" / "train.json").write_text("{}")
    run_records.export_run(work / "old", c, key, "tag", {})
    assert campaign.main(["run", str(c), "--work", str(work)]) == 0
    got = calls(work)
    assert [(a[a.index("--pairs") + 1], a[a.index("--systems") + 1]) for a in got] == [("ja-en", "input"),
                                                                                      ("en-de", "vanilla")]
    assert got[0][:2] == ["--max-update", "1200"]  # the campaign's shared arguments come first
    assert got[0][got[0].index("--data-replica") + 1] == "1"  # the unit's seed is its data replica
    assert "3/3 runs recorded" in capsys.readouterr().out
    assert campaign.main(["run", str(c), "--work", str(work)]) == 0
    assert len(calls(work)) == 2


def test_no_unit_starts_after_the_hours(fake_bleu):
    c = write_campaign(fake_bleu / "camp", [{"pair": "ja-en", "seed": 1, "systems": ["vanilla"]}])
    (fake_bleu / "work").mkdir()
    assert campaign.main(["run", str(c), "--work", str(fake_bleu / "work"), "--hours", "0"]) == 0
    assert calls(fake_bleu / "work") == []


def test_status_counts_records_and_core_hours(fake_bleu, capsys):
    c = write_campaign(fake_bleu / "camp", [{"pair": "ja-en", "seed": 2, "systems": ["vanilla", "rope", "input"]}])
    (fake_bleu / "work").mkdir()
    for system, train in (("rope", {"seconds": 1000, "cpu_seconds": 1800}),
                          # resumed: its CPU seconds cover only the part after the resumption
                          ("input", {"seconds": 100, "cpu_seconds": 180, "resumed_from_checkpoint": True})):
        run = fake_bleu / system
        (run / "hyp").mkdir(parents=True)
        (run / "train.json").write_text(json.dumps(train))
        run_records.export_run(run, c, run_records.RunKey("ja-en", system, 2), "tag", {})
    assert campaign.main(["status", str(c)]) == 0
    out = capsys.readouterr().out
    assert "ja-en       2   2/3   vanilla" in out
    # the estimate per run comes from whole runs only
    assert "2/3 runs recorded; 0.6 core-hours of training so far, 30 min per run, about 0.5 core-hours" in out


@pytest.mark.parametrize("units, bleu_args, message", [
    ([], (), "no units"),
    ([{"pair": "ja-en", "systems": ["vanilla"]}], (), "every unit needs pair, seed and systems"),
    ([{"pair": "ja-en", "seed": 1, "systems": ["vanilla", "vanilla"]}], (), "ja-en vanilla seed 1 is listed twice"),
    ([{"pair": "ja-en", "seed": 1, "systems": ["vanilla"]}], ("--seeds", "2"), "bleu_args may not set --seeds"),
])
def test_a_bad_campaign_file_is_one_line_naming_it(tmp_path, capsys, units, bleu_args, message):
    c = write_campaign(tmp_path / "camp", units, bleu_args)
    assert campaign.main(["status", str(c)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(c / "campaign.json") in err and message in err


def test_gather_is_bleu_no_train_over_the_records(tmp_path):
    c = campaign.load_campaign(write_campaign(tmp_path / "camp", [
        {"pair": "ja-en", "seed": 1, "systems": ["vanilla", "input"]},
        {"pair": "en-de", "seed": 2, "systems": ["vanilla", "rope"]}]))
    cmd = campaign.gather_command(c, ["--out", "x.json"])
    assert cmd[1] == str(campaign.BLEU)
    i = cmd.index("--no-train")
    assert cmd[2:i] == ["--max-update", "1200"]
    assert cmd[i:] == ["--no-train", "--records", str(c.directory), "--pairs", "ja-en,en-de", "--systems",
                       "vanilla,input,rope", "--seeds", "1,2", "--out", "x.json"]


def test_a_compare_pair_goes_only_to_units_that_train_both_systems():
    args = ["--max-update", "9", "--compare", "input:input-sum", "--compare=rope:input", "--contrast", "all"]
    assert campaign.unit_args(args, ["vanilla", "input", "rope"]) == [
        "--max-update", "9", "--compare", "rope:input", "--contrast", "all"]
    assert campaign.unit_args(args, ["input", "input-sum"]) == [
        "--max-update", "9", "--compare", "input:input-sum", "--contrast", "all"]
