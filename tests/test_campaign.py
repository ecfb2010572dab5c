"""benchmarks/campaign.py: a campaign resumes from its committed records and runs only what is missing."""
import fcntl
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import campaign  # noqa: E402
import run_records  # noqa: E402

# Stands in for bleu.py: records every (pair, system, seed) it is asked to train, logs its arguments, and fails on
# a system named "broken".
FAKE_BLEU = r'''
import fcntl, json, sys, time
from pathlib import Path
sys.path.insert(0, BENCH)
import run_records
args = sys.argv[1:]
opt = lambda name: args[args.index(name) + 1]
records, work = Path(opt("--records")), Path(opt("--work"))
with open(work / "calls.jsonl", "a") as f:
    f.write(json.dumps(args) + "\n")
with open(work / "campaign-logs" / (Path(opt("--out")).stem + ".lock"), "a") as lock:
    try:  # held by this process's inherited copy, so a fresh one must fail
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held = False
    except BlockingIOError:
        held = True
with open(work / "held.txt", "a") as f:
    f.write(f"{held}\n")
if "--prepare-only" in args:
    making = work / "making.json"  # what the preparation says of the replica it made (bleu.py's results)
    if making.exists():
        Path(opt("--out")).write_text(json.dumps({"pairs": {opt("--pairs"): json.loads(making.read_text())}}))
    sys.exit(0)
time.sleep(1.0)  # long beside the scheduler's polling, so that the order of events is fixed
for system in opt("--systems").split(","):
    if system == "broken":
        sys.exit("bleu.py: error: training failed")
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
    """(campaign directory's parent, the `--bleu FAKE` arguments of campaign run)."""
    monkeypatch.setattr(campaign, "POLL_SECONDS", 0.05)
    script = tmp_path / "fake_bleu.py"
    script.write_text(f"BENCH = {str(BENCH)!r}\n" + FAKE_BLEU)
    (tmp_path / "work").mkdir()
    return tmp_path, ["--bleu", str(script)]


def calls(work: Path) -> list[list[str]]:
    path = work / "calls.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def what(call: list[str]) -> tuple[str, str, str]:
    """(pair, systems, 'prepare' or 'train') of one bleu.py call."""
    opt = lambda name: call[call.index(name) + 1]
    return opt("--pairs"), opt("--systems"), "prepare" if "--prepare-only" in call else "train"


def test_run_does_the_missing_runs_in_unit_order_and_a_second_run_nothing(fake_bleu, capsys):
    root, bleu = fake_bleu
    c = write_campaign(root / "camp", [{"pair": "ja-en", "seed": 1, "systems": ["vanilla", "input", "rope"]},
                                       {"pair": "en-de", "seed": 1, "systems": ["vanilla"]}])
    work = root / "work"
    key = run_records.RunKey("ja-en", "vanilla", 1)  # recorded in an earlier session
    (work / "old" / "hyp").mkdir(parents=True)
    (work / "old" / "train.json").write_text("{}")
    run_records.export_run(work / "old", c, key, "tag", {})
    assert campaign.main(["run", str(c), "--work", str(work), *bleu]) == 0
    got = calls(work)
    # the unit's data replica is made first (for the runs still missing), then each run alone
    assert [what(a) for a in got] == [("ja-en", "input,rope", "prepare"), ("ja-en", "input", "train"),
                                      ("ja-en", "rope", "train"), ("en-de", "vanilla", "prepare"),
                                      ("en-de", "vanilla", "train")]
    assert got[1][:2] == ["--max-update", "1200"]  # the campaign's shared arguments come first
    assert got[1][got[1].index("--data-replica") + 1] == "1"  # the unit's seed is its data replica
    assert len({a[a.index("--out") + 1] for a in got}) == len(got)  # no two invocations write one results file
    assert "4/4 runs recorded" in capsys.readouterr().out
    assert campaign.main(["run", str(c), "--work", str(work), *bleu]) == 0
    assert len(calls(work)) == 5


def test_jobs_fill_the_cores_across_units_and_no_run_precedes_its_replica(fake_bleu, capsys):
    root, bleu = fake_bleu
    c = write_campaign(root / "camp", [{"pair": "ja-en", "seed": 2, "systems": ["vanilla", "input", "rope"]},
                                       {"pair": "en-ja", "seed": 2, "systems": ["vanilla", "input"]}])
    assert campaign.main(["run", str(c), "--work", str(root / "work"), "--jobs", "2", *bleu]) == 0
    out = capsys.readouterr()
    events = [x.split("] ", 1)[1].split(" (")[0] for x in out.err.splitlines() if x.startswith("[")]
    # while ja-en's third run trains, the second core prepares en-ja's replica and starts its first run
    assert events.index("start en-ja seed 2 data replica") < events.index("done ja-en seed 2 rope")
    assert events.index("start en-ja seed 2 vanilla") < events.index("done ja-en seed 2 rope")
    running, most = 0, 0
    for e in events:
        running += 1 if e.startswith("start") else -1
        most = max(most, running)
    assert most == 2
    for pair in ("ja-en", "en-ja"):
        ready = events.index(f"done {pair} seed 2 data replica")
        assert all(events.index(f"start {pair} seed 2 {s}") > ready for s in ("vanilla", "input"))
    assert "5/5 runs recorded" in out.out
    # every invocation held its lock while it ran (the scheduler's copy closed, the child's kept)
    assert (root / "work" / "held.txt").read_text().split() == ["True"] * 7


@pytest.mark.parametrize("running, prepared, expected", [
    ([], set(), ("ja-en", None)),                              # nothing ready: prepare the first unit
    ([("ja-en", None)], set(), None),                          # one preparation at a time (shared alignment)
    ([("ja-en", None)], {"en-de"}, ("en-de", "vanilla")),      # meanwhile a ready unit's run
    ([], {"ja-en"}, ("ja-en", "vanilla")),
])
def test_next_job_prepares_one_replica_at_a_time(running, prepared, expected):
    units = {p: campaign.Unit(p, 1, ("vanilla",)) for p in ("ja-en", "en-ja", "en-de")}
    pending = [campaign.Job(u, "vanilla") for u in units.values()]
    job = campaign.next_job(pending, {units[p] for p in prepared}, [campaign.Job(units[p], s) for p, s in running])
    assert (job and (job.unit.pair, job.system)) == expected


def test_a_failed_run_stops_the_campaign_with_its_log(fake_bleu, capsys):
    root, bleu = fake_bleu
    c = write_campaign(root / "camp", [{"pair": "ja-en", "seed": 1, "systems": ["broken", "vanilla"]},
                                       {"pair": "en-de", "seed": 1, "systems": ["vanilla"]}])
    assert campaign.main(["run", str(c), "--work", str(root / "work"), *bleu]) == 1
    err = capsys.readouterr().err
    assert "bleu.py failed (exit 1) on ja-en seed 1 broken" in err and "training failed" in err
    assert [what(a) for a in calls(root / "work")] == [("ja-en", "broken,vanilla", "prepare"),
                                                       ("ja-en", "broken", "train")]


def test_a_run_that_another_scheduler_holds_is_left_to_it(fake_bleu, capsys):
    root, bleu = fake_bleu
    c = write_campaign(root / "camp", [{"pair": "ja-en", "seed": 1, "systems": ["vanilla", "input"]}])
    logs = root / "work" / "campaign-logs"
    logs.mkdir()
    with open(logs / "campaign-camp-ja-en-seed1-vanilla.lock", "a") as held:  # a second scheduler's run
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert campaign.main(["run", str(c), "--work", str(root / "work"), *bleu]) == 0
    assert [what(a) for a in calls(root / "work")] == [("ja-en", "vanilla,input", "prepare"),
                                                       ("ja-en", "input", "train")]
    assert "skip ja-en seed 1 vanilla: another process runs it" in capsys.readouterr().err
    # the lock lasts as long as the run, not the scheduler: a finished run's lock is free
    with open(logs / "campaign-camp-ja-en-seed1-input.lock", "a") as after:
        fcntl.flock(after, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_runs_cut_off_earlier_resume_before_any_run_starts_afresh(fake_bleu):
    root, bleu = fake_bleu
    c = write_campaign(root / "camp", [{"pair": "ja-en", "seed": 1, "systems": ["vanilla", "input"]},
                                       {"pair": "en-ja", "seed": 1, "systems": ["vanilla", "rope"]}])
    logs = root / "work" / "campaign-logs"
    logs.mkdir()
    (logs / "campaign-camp-en-ja-seed1-rope.log").write_text("[17:32:38] train en-ja rope seed 1\n")  # then cut
    assert campaign.main(["run", str(c), "--work", str(root / "work"), *bleu]) == 0
    assert [what(a) for a in calls(root / "work")] == [
        ("en-ja", "rope,vanilla", "prepare"), ("en-ja", "rope", "train"),  # the cut run first, then campaign order
        ("ja-en", "vanilla,input", "prepare"), ("ja-en", "vanilla", "train"), ("ja-en", "input", "train"),
        ("en-ja", "vanilla", "train")]


def test_no_run_starts_after_the_hours(fake_bleu):
    root, bleu = fake_bleu
    c = write_campaign(root / "camp", [{"pair": "ja-en", "seed": 1, "systems": ["vanilla"]}])
    assert campaign.main(["run", str(c), "--work", str(root / "work"), "--hours", "0", *bleu]) == 0
    assert calls(root / "work") == []


def test_unit_runs_only_the_units_of_that_pair_and_seed(fake_bleu, capsys):
    root, bleu = fake_bleu
    c = write_campaign(root / "camp", [{"pair": "ja-en", "seed": 1, "systems": ["vanilla"]},
                                       {"pair": "ja-en", "seed": 2, "systems": ["vanilla"]},
                                       {"pair": "ja-en", "seed": 1, "systems": ["rope-oracle"]}])
    assert campaign.main(["run", str(c), "--work", str(root / "work"), "--unit", "ja-en:1", *bleu]) == 0
    got = [(a[a.index("--seeds") + 1], what(a)[1]) for a in calls(root / "work") if what(a)[2] == "train"]
    assert sorted(got) == [("1", "rope-oracle"), ("1", "vanilla")]
    for bad in ("ja-en:3", "en-ja:1", "ja-en"):
        assert campaign.main(["run", str(c), "--work", str(root / "work"), "--unit", bad, *bleu]) == 2
        err = capsys.readouterr().err
        assert f"--unit {bad}: not PAIR:SEED" in err and "ja-en:1, ja-en:2" in err
    assert len(calls(root / "work")) == 4  # a bad --unit starts nothing


def test_status_counts_records_and_core_hours(tmp_path, capsys):
    c = write_campaign(tmp_path / "camp", [{"pair": "ja-en", "seed": 2, "systems": ["vanilla", "rope", "input"]}])
    for system, train in (("rope", {"seconds": 1000, "cpu_seconds": 1800}),
                          # resumed: its CPU seconds cover only the part after the resumption
                          ("input", {"seconds": 100, "cpu_seconds": 180, "resumed_from_checkpoint": True})):
        run = tmp_path / system
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


HERE = {"cpu_model": "EPYC test", "nproc": 2, "cuda": False}  # the machine the scheduler runs on, in these tests


def record_run(records: Path, pair: str, system: str, seed: int, train: dict, machine: dict, date: str,
               files: dict | None = None, data: dict | None = None) -> None:
    run = records.parent / "runs" / pair / f"{system}.seed{seed}"
    (run / "hyp").mkdir(parents=True, exist_ok=True)
    (run / "train.json").write_text(json.dumps(train))
    for name, content in (files or {}).items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(json.dumps(content))
    run_records.export_run(run, records, run_records.RunKey(pair, system, seed), "tag",
                           {"machine": machine, "date": date, "data": data or {}})


def test_a_run_lasts_its_training_and_evaluations_and_a_replica_its_preparation(tmp_path):
    record_run(tmp_path / "camp", "ja-en", "rope", 1, {"seconds": 1200.0}, HERE, "2026-12-04 06:00:00 +0000",
               files={"scores/test.json": {"generate_seconds": 30.0}, "scores/valid.json": {"generate_seconds": None},
                      "attention/test.layer-1.json": {"seconds": 30.0}},
               data={"align_seconds": 30.0, "prep_step_seconds": {"train-reorderer": 60.0, "data-bin": 30.0}})
    record = run_records.read_record(tmp_path / "camp", run_records.RunKey("ja-en", "rope", 1))
    assert run_records.run_minutes(record) == pytest.approx(21.0)
    assert run_records.replica_minutes(record) == pytest.approx(2.0)


def test_the_estimate_is_the_longest_of_the_latest_whole_runs_on_this_kind_of_machine(tmp_path):
    records = tmp_path / "camp"
    minutes = {"vanilla": 48, "input": 20, "head": 18, "rope": 22, "rope-monotone": 19}
    for day, system in enumerate(minutes):  # vanilla oldest (a slower machine of the same kind), then the rest
        record_run(records, "ja-en", system, 1, {"seconds": minutes[system] * 60}, HERE,
                   f"2026-12-0{day + 1} 10:00:00 +0000")
    record_run(records, "ja-en", "input-sum", 1, {"seconds": 300, "resumed_from_checkpoint": True}, HERE,
               "2026-12-09 10:00:00 +0000")  # resumed: its seconds are only the part after the resumption
    record_run(records, "ja-en", "input-random", 1, {"seconds": 120}, {**HERE, "cuda": True, "gpu": "H200"},
               "2026-12-09 10:00:00 +0000")  # another kind of machine
    got = campaign.estimates(records, ["ja-en", "en-de"], run_records.machine_kind(HERE))
    assert got["ja-en"].run == pytest.approx(22.0) and got["ja-en"].runs == campaign.RECENT_RUNS
    assert "en-de" not in got  # nothing recorded: no estimate
    gpu = campaign.estimates(records, ["ja-en"], run_records.machine_kind({**HERE, "cuda": True, "gpu": "H200"}))
    assert gpu["ja-en"].run == pytest.approx(2.0)


def test_finish_within_starts_only_the_runs_that_end_in_time(fake_bleu, monkeypatch, capsys):
    root, bleu = fake_bleu
    monkeypatch.setattr(run_records, "machine_info", lambda: dict(HERE))
    c = write_campaign(root / "camp", [{"pair": "ja-en", "seed": 1, "systems": ["vanilla", "input"]},
                                       {"pair": "synth", "seed": 1, "systems": ["vanilla", "input"]},
                                       {"pair": "en-de", "seed": 1, "systems": ["vanilla"]}])
    record_run(c, "ja-en", "vanilla", 1, {"seconds": 30 * 60}, HERE, "2026-12-04 06:00:00 +0000")
    record_run(c, "synth", "vanilla", 1, {"seconds": 10 * 60}, HERE, "2026-12-04 06:00:00 +0000",
               data={"align_seconds": 60.0})
    record_run(c, "en-de", "rope", 1, {"seconds": 60}, {**HERE, "cpu_model": "other"}, "2026-12-04 06:00:00 +0000")
    args = ["run", str(c), "--work", str(root / "work"), *bleu]
    assert campaign.main(args + ["--finish-within", "0.25"]) == 0
    # ja-en's 30 min do not fit in 15; synth's 10 (and 1 to make its replica) do, though its unit comes later;
    # en-de has no run recorded on this kind of machine, so its length is unknown and it runs
    assert [what(a) for a in calls(root / "work")] == [("synth", "input", "prepare"), ("synth", "input", "train"),
                                                       ("en-de", "vanilla", "prepare"), ("en-de", "vanilla", "train")]
    err = capsys.readouterr().err
    assert "1 runs not started: none would end within --finish-within 0.25 h" in err and "ja-en 30 min" in err
    assert campaign.main(args + ["--finish-within", "0.6"]) == 0
    assert what(calls(root / "work")[-1]) == ("ja-en", "input", "train")


def test_a_run_that_another_scheduler_recorded_meanwhile_is_not_started(fake_bleu, monkeypatch):
    root, bleu = fake_bleu
    c = write_campaign(root / "camp", [{"pair": "ja-en", "seed": 1, "systems": ["vanilla", "input"]}])
    start = campaign.start_locked

    def start_while_another_records_input(cmd, log):
        if not run_records.has_record(c, run_records.RunKey("ja-en", "input", 1)):
            record_run(c, "ja-en", "input", 1, {"seconds": 60}, HERE, "2026-12-04 06:00:00 +0000")
        return start(cmd, log)

    monkeypatch.setattr(campaign, "start_locked", start_while_another_records_input)
    assert campaign.main(["run", str(c), "--work", str(root / "work"), *bleu]) == 0
    assert [what(a) for a in calls(root / "work")] == [("ja-en", "vanilla,input", "prepare"),
                                                       ("ja-en", "vanilla", "train")]


def test_a_replica_whose_runs_come_from_two_makings_is_named_with_its_systems(tmp_path, capsys, monkeypatch):
    c = write_campaign(tmp_path / "camp", [{"pair": "ja-en", "seed": 1, "systems": ["vanilla", "input", "rope"]},
                                           {"pair": "ja-en", "seed": 2, "systems": ["vanilla", "rope"]}])
    first, second = ({"test_sentences": {"reorderer_tau": taus}} for taus in ([0.5, 1.0], [0.5, 0.9]))
    for system, seed, data in (("vanilla", 1, first), ("input", 1, first), ("rope", 1, second),
                               ("vanilla", 2, second), ("rope", 2, second)):
        record_run(c, "ja-en", system, seed, {"seconds": 60.0}, HERE, "2026-12-06 13:00:00 +0000", data=data)
    making = {name: run_records.replica_making({"provenance": {"data": d}}) for name, d in (("a", first),
                                                                                              ("b", second))}
    assert making["a"] != making["b"]
    assert campaign.main(["status", str(c)]) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning")]
    # seed 2's runs share one making: only seed 1 is named, with the systems of each making
    assert warnings == [f"warning: ja-en seed 1 mixes 2 makings of its data replica (the alignment is not seeded; "
                        f"paired tests across them include that difference): {making['a']}: vanilla,input; "
                        f"{making['b']}: rope"]
    monkeypatch.setattr(campaign.subprocess, "run", lambda cmd: type("Done", (), {"returncode": 0})())
    assert campaign.main(["gather", str(c)]) == 0
    assert capsys.readouterr().err.strip() == warnings[0]


def test_no_run_joins_records_of_another_making_of_the_replica_unless_asked(fake_bleu, capsys):
    root, bleu = fake_bleu
    c = write_campaign(root / "camp", [{"pair": "ja-en", "seed": 1, "systems": ["vanilla", "rope"]},
                                       {"pair": "ja-en", "seed": 2, "systems": ["vanilla"]}])
    work = root / "work"
    made_there = {"test_sentences": {"reorderer_tau": [0.5, 1.0]}}
    record_run(c, "ja-en", "vanilla", 1, {"seconds": 60.0}, HERE, "2026-12-06 13:00:00 +0000", data=made_there)
    # this work directory's replica 1 was made again (another machine): its test sentences moved otherwise
    (work / "making.json").write_text(json.dumps({"test_sentences": {"reorderer_tau": [0.5, 0.9]}}))
    assert campaign.main(["run", str(c), "--work", str(work), *bleu]) == 2
    err = capsys.readouterr().err
    assert "error: ja-en seed 1: the records of vanilla were trained on another making of data replica 1" in err
    assert f"move vanilla.seed1 out of {c / 'ja-en'}" in err and "--allow-mixed-making" in err
    # seed 1 trains nothing; the other unit goes on
    assert [what(a) for a in calls(work)] == [("ja-en", "rope", "prepare"), ("ja-en", "vanilla", "prepare"),
                                              ("ja-en", "vanilla", "train")]
    assert not run_records.has_record(c, run_records.RunKey("ja-en", "rope", 1))
    assert campaign.main(["run", str(c), "--work", str(work), "--allow-mixed-making", *bleu]) == 0
    assert run_records.has_record(c, run_records.RunKey("ja-en", "rope", 1))


@pytest.mark.parametrize("recorded", [
    {"test_sentences": {"reorderer_tau": [0.5, 1.0]}},  # the same making
    {"reordering_vs_oracle": {"test": {"reorderer": {"corpus_tau": 0.84}}}},  # an older record of it: corpus tau
    {},  # a record that does not say
])
def test_records_of_the_same_making_or_that_do_not_say_let_the_unit_go_on(fake_bleu, recorded):
    root, bleu = fake_bleu
    c = write_campaign(root / "camp", [{"pair": "ja-en", "seed": 1, "systems": ["vanilla", "rope"]}])
    record_run(c, "ja-en", "vanilla", 1, {"seconds": 60.0}, HERE, "2026-12-06 13:00:00 +0000", data=recorded)
    (root / "work" / "making.json").write_text(json.dumps({
        "test_sentences": {"reorderer_tau": [0.5, 1.0]},
        "reordering_vs_oracle": {"test": {"reorderer": {"corpus_tau": 0.84}}}}))
    assert campaign.main(["run", str(c), "--work", str(root / "work"), *bleu]) == 0
    assert run_records.has_record(c, run_records.RunKey("ja-en", "rope", 1))


def test_the_making_of_an_older_record_is_its_corpus_tau_or_unknown():
    older = {"provenance": {"data": {"reordering_vs_oracle": {"test": {"reorderer": {"corpus_tau": 0.8408}}}}}}
    assert run_records.replica_making(older) == "tau0.840800"
    assert run_records.replica_making({"provenance": {}}) is None
