"""A benchmark campaign in resumable pieces: many `benchmarks/bleu.py` runs, over several sessions and machines.

A campaign is a committed directory, e.g. docs/runs/2026-12-results/, holding campaign.json (what to run) and the
run records bleu.py writes there (benchmarks/run_records.py: scores, hypotheses, provenance; never checkpoints).
campaign.json:

    {"description": "...",
     "bleu_args": ["--max-update", "1200", ...],      # shared by every invocation (configuration, evaluation)
     "units": [{"pair": "ja-en", "seed": 1, "systems": ["vanilla", "input", ...]}, ...]}

A unit is one pair and one seed: its data replica (bleu.py --data-replica SEED: an alignment, oracle, reorderer and
XL positions of its own, so that the spread over seeds includes the unseeded eflomal's) and the systems trained on
it, run by one bleu.py invocation so that they share that replica. Units run in the order listed, so a
campaign cut short has its most important units. What is done is read from the records alone:

    python benchmarks/campaign.py status docs/runs/2026-12-results
    python benchmarks/campaign.py run docs/runs/2026-12-results --work /work/bleu --hours 2 --jobs 2
    git add docs/runs/2026-12-results                      # after each finished run: the records are the result
    python benchmarks/campaign.py gather docs/runs/2026-12-results --out docs/bleu_results.json \
        --markdown docs/bleu_results.md --plot docs/bleu_by_length.png

`run` starts no unit after --hours have passed (a unit in progress finishes; Ctrl-C stops it, and its finished runs
keep their records). `gather` is bleu.py --no-train over the records: it needs neither the work directory nor a
checkpoint.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_records  # noqa: E402

BLEU = Path(__file__).resolve().parent / "bleu.py"
CAMPAIGN_FILE = "campaign.json"


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


def cpu_hours(records: Path, key: run_records.RunKey) -> tuple[float, bool]:
    """The run's training CPU hours, and whether they are whole: a run resumed from a checkpoint counts only
    the part after the resumption."""
    train = run_records.read_record(records, key)["train"]
    seconds = train.get("cpu_seconds", train.get("seconds", 0.0))
    return float(seconds) / 3600, not train.get("resumed_from_checkpoint", False)


def status_lines(c: Campaign) -> list[str]:
    lines = [f"{'pair':8} {'seed':>4}  {'done':>5}  missing"]
    done_runs = total_runs = 0
    hours = []
    for u in c.units:
        missing = u.missing(c.directory)
        done = [s for s in u.systems if s not in missing]
        done_runs += len(done)
        total_runs += len(u.systems)
        hours += [cpu_hours(c.directory, run_records.RunKey(u.pair, s, u.seed)) for s in done]
        lines.append(f"{u.pair:8} {u.seed:>4}  {len(done):>2}/{len(u.systems):<2}  {','.join(missing) or '-'}")
    whole = [h for h, complete in hours if complete]  # the estimate per run leaves out resumed runs
    per_run = sum(whole) / len(whole) if whole else None
    left = total_runs - done_runs
    lines.append(f"{done_runs}/{total_runs} runs recorded"
                 + (f"; {sum(h for h, _ in hours):.1f} core-hours of training so far, {per_run * 60:.0f} min "
                    f"per run, about {left * per_run:.1f} core-hours of training left" if per_run else ""))
    return lines


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


def bleu_command(c: Campaign, unit: Unit, systems: list[str], work: str, jobs: int) -> list[str]:
    # the unit's own data replica (alignment, reorderer): the spread over seeds includes the unseeded alignment's
    return [sys.executable, str(BLEU), *unit_args(c.bleu_args, systems), "--pairs", unit.pair, "--seeds", str(unit.seed),
            "--data-replica", str(unit.seed), "--systems", ",".join(systems), "--records", str(c.directory),
            "--work", work, "--jobs", str(jobs),
            "--out", str(Path(work) / f"campaign-{c.directory.name}-{unit.pair}-seed{unit.seed}.json")]


def run_units(c: Campaign, work: str, hours: float, jobs: int) -> int:
    deadline = time.time() + hours * 3600
    for unit in c.units:
        missing = unit.missing(c.directory)
        if not missing:
            continue
        if time.time() >= deadline:
            print(f"--hours {hours} have passed: no further unit started", file=sys.stderr)
            break
        cmd = bleu_command(c, unit, missing, work, jobs)
        print(f"[{time.strftime('%H:%M:%S')}] {unit.pair} seed {unit.seed}: {', '.join(missing)}", file=sys.stderr)
        rc = subprocess.run(cmd).returncode
        if rc != 0:
            print(f"bleu.py failed (exit {rc}) on {unit.pair} seed {unit.seed}: {' '.join(cmd)}", file=sys.stderr)
            return rc
    print("\n".join(status_lines(c)))
    return 0


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
            s.add_argument("--hours", type=float, default=float("inf"), help="start no unit after this long")
            s.add_argument("--jobs", type=int, default=1, help="bleu.py --jobs: runs at a time")
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
            return run_units(c, args.work, args.hours, args.jobs)
        return subprocess.run(gather_command(c, rest)).returncode
    except (CampaignError, run_records.RecordError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
