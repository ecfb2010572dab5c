"""A benchmark campaign in resumable pieces: many `benchmarks/bleu.py` runs, over several sessions and machines.

A campaign is a committed directory, e.g. docs/runs/2026-12-results/, holding campaign.json (what to run) and the
run records bleu.py writes there (benchmarks/run_records.py: scores, hypotheses, provenance; never checkpoints).
campaign.json:

    {"description": "...",
     "bleu_args": ["--max-update", "1200", ...],      # shared by every invocation (configuration, evaluation)
     "units": [{"pair": "ja-en", "seed": 1, "systems": ["vanilla", "input", ...]}, ...]}

A unit is one pair and one seed: its data replica (bleu.py --data-replica SEED: an alignment, oracle, reorderer and
XL positions of its own, so that the spread over seeds includes the unseeded eflomal's) and the systems trained on
it. Each run is one bleu.py invocation on its unit's replica, after one `--prepare-only` invocation has made the
replica; `run --jobs N` keeps N runs going across units, in the order listed (after the runs an earlier `run` left
cut off), so a campaign cut short has its most important units and no core waits for the last run of a unit. Each
run holds a lock in WORK/campaign-logs while it runs, so two schedulers on one work directory never train the same
run at once. What is done is read from the records alone:

    python benchmarks/campaign.py status docs/runs/2026-12-results
    python benchmarks/campaign.py run docs/runs/2026-12-results --work /work/bleu --hours 2 --jobs 2
    python benchmarks/campaign.py run docs/runs/2026-12-results --work /work/bleu --unit ja-en:2   # one unit only
    git add docs/runs/2026-12-results                      # after each finished run: the records are the result
    python benchmarks/campaign.py gather docs/runs/2026-12-results --out docs/bleu_results.json \
        --markdown docs/bleu_results.md --plot docs/bleu_by_length.png

The alignment cannot be seeded: a replica made again (on another machine, after its work directory went) is
another making of it, with other oracles, reorderer and positions. `status` and `gather` name every replica whose
records come from more than one making, with the systems of each, since the paired tests across makings include
that difference; `run` starts no run of a unit whose records come from another making than its work directory's
replica (it names them: move them aside to remake the unit, or pass --allow-mixed-making).

`run` starts no run after --hours have passed (runs in progress finish; Ctrl-C stops them, and the finished ones
keep their records; a stopped run resumes from its last checkpoint next time). With --finish-within it starts only
runs that its estimate says end in time (a cluster job's limit, a session's end), and a shorter run of a later unit
may go first; the estimate per pair is the longest of the pair's RECENT_RUNS latest whole runs recorded on this
kind of machine (its CPU model and cores, its GPU), recent because machines of one kind still differ in speed (the
2026-12 campaign's real-pair runs took 17-27 min on one 2-core AMD EPYC machine, 24-48 on another). `gather` is
bleu.py --no-train over the records: it needs neither the work directory nor a checkpoint.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_records  # noqa: E402
from xlpos_prep.io import log  # noqa: E402

BLEU = Path(__file__).resolve().parent / "bleu.py"
CAMPAIGN_FILE = "campaign.json"
POLL_SECONDS = 1.0  # how often `run` looks for finished runs
RECENT_RUNS = 3  # the latest whole runs of a pair that estimate its next one


class CampaignError(ValueError):
    pass


@dataclass(frozen=True)
class Unit:
    pair: str
    seed: int
    systems: tuple[str, ...]

    def missing(self, records: Path) -> list[str]:
        return [s for s in self.systems
                if not run_records.has_record(records, run_records.RunKey(self.pair, s, self.seed))]


@dataclass(frozen=True)
class Campaign:
    directory: Path
    description: str
    bleu_args: tuple[str, ...]
    units: tuple[Unit, ...]

    @property
    def pairs(self) -> list[str]:
        return list(dict.fromkeys(u.pair for u in self.units))

    @property
    def systems(self) -> list[str]:
        return list(dict.fromkeys(s for u in self.units for s in u.systems))

    @property
    def seeds(self) -> list[int]:
        return sorted({u.seed for u in self.units})


def load_campaign(directory: Path) -> Campaign:
    path = Path(directory) / CAMPAIGN_FILE
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise CampaignError(f"{path}: not a readable campaign file ({e})") from None
    try:
        units = tuple(Unit(str(u["pair"]), int(u["seed"]), tuple(map(str, u["systems"]))) for u in spec["units"])
        bleu_args = tuple(map(str, spec.get("bleu_args", [])))
    except (KeyError, TypeError, ValueError) as e:
        raise CampaignError(f"{path}: every unit needs pair, seed and systems ({e!r})") from None
    if not units:
        raise CampaignError(f"{path}: no units")
    seen: set[tuple[str, int, str]] = set()
    for u in units:
        for s in u.systems:
            if (u.pair, u.seed, s) in seen:
                raise CampaignError(f"{path}: {u.pair} {s} seed {u.seed} is listed twice")
            seen.add((u.pair, u.seed, s))
    for reserved in ("--pairs", "--seeds", "--systems", "--records", "--work", "--no-train", "--out", "--data-replica"):
        if reserved in bleu_args:
            raise CampaignError(f"{path}: bleu_args may not set {reserved}; the campaign sets it per unit")
    return Campaign(Path(directory), str(spec.get("description", "")), bleu_args, units)


def recorded_runs(c: Campaign) -> dict[tuple[Unit, str], dict]:
    """The record of every run of the campaign that has one, by unit and system: read once for all the lines
    that status and gather print."""
    out = {}
    for u in c.units:
        for s in u.systems:
            key = run_records.RunKey(u.pair, s, u.seed)
            if run_records.has_record(c.directory, key):
                out[u, s] = run_records.read_record(c.directory, key)
    return out


def cpu_hours(record: dict) -> tuple[float, bool]:
    """The run's training CPU hours, and whether they are whole: a run resumed from a checkpoint counts only
    the part after the resumption."""
    train = record["train"]
    seconds = train.get("cpu_seconds", train.get("seconds", 0.0))
    return float(seconds) / 3600, not train.get("resumed_from_checkpoint", False)


def status_lines(c: Campaign) -> list[str]:
    records = recorded_runs(c)
    lines = [f"{'pair':8} {'seed':>4}  {'done':>5}  missing"]
    for u in c.units:
        missing = [s for s in u.systems if (u, s) not in records]
        done = len(u.systems) - len(missing)
        lines.append(f"{u.pair:8} {u.seed:>4}  {done:>2}/{len(u.systems):<2}  {','.join(missing) or '-'}")
    hours = [cpu_hours(r) for r in records.values()]
    whole = [h for h, complete in hours if complete]  # the estimate per run leaves out resumed runs
    per_run = sum(whole) / len(whole) if whole else None
    total_runs = sum(len(u.systems) for u in c.units)
    left = total_runs - len(records)
    lines.append(f"{len(records)}/{total_runs} runs recorded"
                 + (f"; {sum(h for h, _ in hours):.1f} core-hours of training so far, {per_run * 60:.0f} min "
                    f"per run, about {left * per_run:.1f} core-hours of training left" if per_run else ""))
    return lines + mixed_making_lines(records)


def mixed_making_lines(records: dict[tuple[Unit, str], dict]) -> list[str]:
    """A warning for every data replica (pair and seed) whose records (recorded_runs) come from more than one
    making of it (run_records.replica_making): the paired tests between those runs include the difference of two
    alignments, not only of the systems."""
    groups: dict[tuple[str, int], dict[str | None, list[str]]] = {}
    for (u, s), record in records.items():
        making = run_records.replica_making(record)
        groups.setdefault((u.pair, u.seed), {}).setdefault(making, []).append(s)
    return [f"warning: {pair} seed {seed} mixes {len(makings)} makings of its data replica (the alignment is not "
            f"seeded; paired tests across them include that difference): "
            + "; ".join(f"{making or 'unknown'}: {','.join(systems)}" for making, systems in makings.items())
            for (pair, seed), makings in groups.items() if len(makings) > 1]


@dataclass(frozen=True)
class Estimate:
    """Wall minutes of one pair's run and of making its data replica, from the pair's recorded runs."""
    run: float
    replica: float
    runs: int  # the records it comes from


def estimates(records: Path, pairs: Sequence[str], kind: tuple) -> dict[str, Estimate]:
    """Per pair with a whole run recorded on this kind of machine: the longest of its RECENT_RUNS latest ones
    (run_records.run_minutes) and the longest recorded making of its replica."""
    out = {}
    for pair in pairs:
        recent = []
        for key in run_records.list_records(records, pair):
            record = run_records.read_record(records, key)
            provenance = record.get("provenance", {})
            if (not record["train"].get("resumed_from_checkpoint", False)
                    and run_records.machine_kind(provenance.get("machine", {})) == kind):
                recent.append((str(provenance.get("date", "")), record))
        recent = [r for _, r in sorted(recent, key=lambda x: x[0])[-RECENT_RUNS:]]
        if recent:
            out[pair] = Estimate(max(map(run_records.run_minutes, recent)),
                                 max(map(run_records.replica_minutes, recent)), len(recent))
    return out


def unit_args(bleu_args: Sequence[str], systems: Sequence[str]) -> list[str]:
    """bleu_args without the --compare A:B pairs that name a system this invocation does not train: bleu.py
    refuses those, and `gather` tests them over the records of every unit."""
    out: list[str] = []
    args = iter(bleu_args)
    for arg in args:
        value = next(args, "") if arg == "--compare" else None
        if arg.startswith("--compare="):
            arg, value = "--compare", arg.split("=", 1)[1]
        if value is None:
            out.append(arg)
        elif all(name in systems for name in value.split(":")):
            out += [arg, value]
    return out


def results_path(c: Campaign, unit: Unit, work: str, name: str) -> Path:
    """bleu.py's --out of one invocation of a unit (name: "prepare", or the systems it trains joined by -)."""
    return Path(work) / f"campaign-{c.directory.name}-{unit.pair}-seed{unit.seed}-{name}.json"


def log_path(c: Campaign, unit: Unit, work: str, name: str) -> Path:
    """The log of one invocation of a unit (results_path's name), in WORK/campaign-logs: it exists once the
    invocation has started."""
    return Path(work) / "campaign-logs" / (results_path(c, unit, work, name).stem + ".log")


def bleu_command(c: Campaign, unit: Unit, systems: list[str], work: str, bleu: Path = BLEU,
                 prepare_only: bool = False) -> list[str]:
    # the unit's own data replica (alignment, reorderer): the spread over seeds includes the unseeded alignment's
    name = "prepare" if prepare_only else "-".join(systems)
    return [sys.executable, str(bleu), *unit_args(c.bleu_args, systems), "--pairs", unit.pair,
            "--seeds", str(unit.seed), "--data-replica", str(unit.seed), "--systems", ",".join(systems),
            "--records", str(c.directory), "--work", work, "--jobs", "1",
            *(["--prepare-only"] if prepare_only else []),
            "--out", str(results_path(c, unit, work, name))]


def making_conflict(c: Campaign, unit: Unit, prepared: Path) -> str | None:
    """Why no further run of `unit` should train in this work directory: its recorded runs were trained on another
    making of its data replica than the one just prepared here (`prepared`: the preparation's results), so every
    paired test against them would include the difference of two alignments. None when the makings agree or a side
    does not say which it is."""
    if not prepared.exists():
        return None
    data = json.loads(prepared.read_text(encoding="utf-8")).get("pairs", {}).get(unit.pair) or {}
    here = run_records.making_fingerprints(data)
    if not here:
        return None
    other = [system for (u, system), record in recorded_runs(c).items()
             if (u.pair, u.seed) == (unit.pair, unit.seed) and run_records.replica_making(record) not in here | {None}]
    if not other:
        return None
    return (f"{unit.pair} seed {unit.seed}: the records of {', '.join(other)} were trained on another making of data "
            f"replica {unit.seed} than this work directory holds (the alignment is not seeded, and this one was made "
            f"again), so no further run of the unit starts: move {', '.join(f'{s}.seed{unit.seed}' for s in other)} "
            f"out of {c.directory / unit.pair} to remake the whole unit here, or pass --allow-mixed-making")


@dataclass(frozen=True)
class Job:
    """One bleu.py invocation: one run of a unit, or (system None) the preparation of the unit's data replica."""
    unit: Unit
    system: str | None

    def describe(self) -> str:
        return f"{self.unit.pair} seed {self.unit.seed} {self.system or 'data replica'}"


def next_job(pending: list[Job], prepared: set[Unit], running: Sequence[Job],
             fits: Callable[[Job], bool] = lambda job: True) -> Job | None:
    """The first pending run that fits whose unit's data replica is ready; else that unit's preparation, unless
    one is in progress (preparations run one at a time: the replicas of ja-en and en-ja share one alignment, and
    two eflomal runs writing it at once would give the two directions different alignments); else None. A
    preparation fits when it and its unit's run would both finish in time."""
    preparing = next((j.unit for j in running if j.system is None), None)
    for job in pending:
        if job.unit in prepared:
            if fits(job):
                return job
        elif preparing is None and fits(Job(job.unit, None)):
            return Job(job.unit, None)
    return None


def cut_first(pending: list[Job], started: Callable[[Job], bool]) -> list[Job]:
    """The runs started in this work directory before and not recorded (cut off, they resume from their last
    checkpoint; or failed, and are tried again first) ahead of the others, each kind in campaign order: a unit that a
    cut left half-trained is finished before another is begun, since a replica cannot be made again the same way
    once its work directory is gone."""
    return sorted(pending, key=lambda job: not started(job))


def start_locked(cmd: list[str], log_path: Path) -> subprocess.Popen | None:
    """Start cmd with its output appended to log_path, holding its .lock for as long as it runs (the child inherits
    the locked file), so that a second scheduler on the same work directory never trains the same run into the same
    checkpoint directory at once; None when another process holds the lock."""
    lock = open(log_path.with_suffix(".lock"), "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    with lock, open(log_path, "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, pass_fds=[lock.fileno()])


def reap(running: dict[subprocess.Popen, tuple[Job, Path, float]], prepared: set[Unit]) -> int:
    """Take the finished invocations out of running (a finished preparation makes its unit prepared); the first
    failure's exit status (a negative one, from a signal, as 1), or 0."""
    failed = 0
    for proc in [p for p in running if p.poll() is not None]:
        job, log_path, started = running.pop(proc)
        if proc.returncode == 0:
            if job.system is None:
                prepared.add(job.unit)
            log(f"done {job.describe()} ({(time.time() - started) / 60:.1f} min)")
            continue
        failed = failed or (proc.returncode if proc.returncode > 0 else 1)
        tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-5:]
        print(f"bleu.py failed (exit {proc.returncode}) on {job.describe()}; no further run started. "
              f"Log: {log_path}\n" + "\n".join("  " + x for x in tail), file=sys.stderr)
    return failed


def parse_units(c: Campaign, specs: Sequence[str]) -> set[tuple[str, int]]:
    """The (pair, seed) of each PAIR:SEED given to --unit, each checked against the campaign's units."""
    listed = {(u.pair, u.seed) for u in c.units}
    chosen: set[tuple[str, int]] = set()
    for spec in specs:
        pair, _, seed = spec.rpartition(":")
        if not pair or not seed.isdigit() or (pair, int(seed)) not in listed:
            raise CampaignError(f"--unit {spec}: not PAIR:SEED of a unit of {c.directory / CAMPAIGN_FILE} ("
                                + ", ".join(f"{p}:{s}" for p, s in sorted(listed)) + ")")
        chosen.add((pair, int(seed)))
    return chosen


def run_campaign(c: Campaign, work: str, hours: float, jobs: int, bleu: Path = BLEU,
                 finish_within: float = float("inf"), only: set[tuple[str, int]] | None = None,
                 allow_mixed_making: bool = False) -> int:
    """Every missing run, `jobs` at a time across units, in unit order after the cut-off ones (cut_first): a core freed
    at the end of a unit starts the next unit's first run instead of idling. Each run's output goes to its own log in
    WORK/campaign-logs. No run starts after `hours`, nor one that the estimates say would end after `finish_within`
    hours; with `only`, no run of a (pair, seed) outside it; unless `allow_mixed_making`, none of a unit whose records
    come from another making of its data replica than the work directory's (making_conflict)."""
    deadline = time.time() + hours * 3600
    finish_by = time.time() + finish_within * 3600
    kind = run_records.machine_kind(run_records.machine_info()) if finish_within != float("inf") else None

    known: dict[int, dict[str, Estimate]] = {}  # by the number of records: a finished run adds one

    def fits(job: Job) -> bool:
        if kind is None:
            return True
        count = len(list(c.directory.glob("*/*/record.json")))
        if count not in known:
            known.clear()
            known[count] = estimates(c.directory, c.pairs, kind)
        estimate = known[count].get(job.unit.pair)
        if estimate is None:  # nothing recorded on this kind of machine yet: the run's length is unknown
            return True
        minutes = estimate.run + (estimate.replica if job.system is None else 0.0)
        return time.time() + minutes * 60 <= finish_by
    pending = cut_first([Job(u, s) for u in c.units if only is None or (u.pair, u.seed) in only
                         for s in u.missing(c.directory)],
                        lambda job: log_path(c, job.unit, work, job.system).exists())
    prepared: set[Unit] = set()
    running: dict[subprocess.Popen, tuple[Job, Path, float]] = {}
    (Path(work) / "campaign-logs").mkdir(parents=True, exist_ok=True)
    failed = refused = 0
    try:
        while running or (pending and not failed):
            waiting = False  # for a replica that another scheduler prepares
            while len(running) < jobs and pending and not failed and not waiting:
                if time.time() >= deadline:
                    print(f"--hours {hours} have passed: no further run started", file=sys.stderr)
                    pending.clear()
                    break
                # a run that another scheduler recorded meanwhile (one campaign, several cluster jobs) is done
                pending = [j for j in pending if j.system in j.unit.missing(c.directory)]
                job = next_job(pending, prepared, [j for j, _, _ in running.values()], fits)
                if job is None:
                    break
                systems = [job.system] if job.system else [j.system for j in pending if j.unit == job.unit]
                cmd = bleu_command(c, job.unit, systems, work, bleu, prepare_only=job.system is None)
                log_file = log_path(c, job.unit, work, "prepare" if job.system is None else job.system)
                proc = start_locked(cmd, log_file)
                waiting = proc is None and job.system is None  # look again after a pause
                if job.system is not None:
                    pending.remove(job)
                if proc is not None:
                    running[proc] = (job, log_file, time.time())
                    log(f"start {job.describe()} (log: {log_file})")
                elif job.system is not None:
                    log(f"skip {job.describe()}: another process runs it ({log_file.with_suffix('.lock')} is held)")
            if not running and not waiting:
                break
            time.sleep(POLL_SECONDS)
            before = set(prepared)
            failed = failed or reap(running, prepared)
            for unit in prepared - before:
                reason = None if allow_mixed_making else making_conflict(
                    c, unit, results_path(c, unit, work, "prepare"))
                if reason:
                    print(f"error: {reason}", file=sys.stderr)
                    pending = [j for j in pending if j.unit != unit]
                    refused = 2
    except KeyboardInterrupt:  # the runs got the same Ctrl-C; what finished keeps its record
        for proc in running:
            proc.wait()
        return 130
    if failed:
        return failed
    if pending and kind is not None:
        left = estimates(c.directory, sorted({j.unit.pair for j in pending}), kind)
        print(f"{len(pending)} runs not started: none would end within --finish-within {finish_within} h "
              f"(estimates from the latest runs recorded on this kind of machine: "
              + ", ".join(f"{pair} {e.run:.0f} min" for pair, e in left.items()) + ")", file=sys.stderr)
    print("\n".join(status_lines(c)))
    return refused


def gather_command(c: Campaign, rest: list[str]) -> list[str]:
    return [sys.executable, str(BLEU), *c.bleu_args, "--no-train", "--records", str(c.directory),
            "--pairs", ",".join(c.pairs), "--systems", ",".join(c.systems),
            "--seeds", ",".join(map(str, c.seeds)), *rest]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("status", "run", "gather"):
        s = sub.add_parser(name)
        s.add_argument("campaign", type=Path, help="the campaign directory (holds campaign.json and the records)")
        if name == "run":
            s.add_argument("--work", required=True, help="bleu.py's work directory (data, checkpoints)")
            s.add_argument("--hours", type=float, default=float("inf"), help="start no run after this long")
            s.add_argument("--finish-within", type=float, default=float("inf"), metavar="HOURS",
                           help="start only runs estimated (from the latest recorded runs of their pair on this "
                                "kind of machine) to end within this long: a cluster job's time limit")
            s.add_argument("--jobs", type=int, default=1, help="runs at a time, across units (one core each)")
            s.add_argument("--unit", action="append", default=[], metavar="PAIR:SEED",
                           help="run only the units of this pair and seed (repeatable): one making of a replica "
                                "per machine, e.g. one unit per cluster job")
            s.add_argument("--allow-mixed-making", action="store_true",
                           help="train the missing runs of a unit even when its recorded runs were trained on "
                                "another making of its data replica (another machine's alignment)")
            s.add_argument("--bleu", type=Path, default=BLEU,
                           help="the bleu.py to run (default: the one beside this file); a campaign pinned to a "
                                "commit runs the bleu.py of that commit's worktree")
    args, rest = p.parse_known_args(argv)
    if rest and args.command != "gather":
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        c = load_campaign(args.campaign)
        if args.command == "status":
            print("\n".join(status_lines(c)))
            return 0
        if args.command == "run":
            if args.jobs < 1:
                raise CampaignError("--jobs must be at least 1")
            if not args.bleu.is_file():
                raise CampaignError(f"--bleu {args.bleu}: no such file")
            only = parse_units(c, args.unit) if args.unit else None
            return run_campaign(c, args.work, args.hours, args.jobs, args.bleu, args.finish_within, only,
                                args.allow_mixed_making)
        for line in mixed_making_lines(recorded_runs(c)):
            print(line, file=sys.stderr)
        return subprocess.run(gather_command(c, rest)).returncode
    except (CampaignError, run_records.RecordError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
