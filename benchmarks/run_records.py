"""Committed run records: what `benchmarks/bleu.py` keeps of each finished run, so that long campaigns resume across
sessions and machines, and tables, significance tests and plots are regenerated without the work directory.

A run directory under the work dir holds a checkpoint (hundreds of MB, never committed) beside small files:
config.json, train.json, scores/SET.json, attention/*.json, curve/valid.uU.json (dev scores along the training,
with --curve-every) and hyp/SET.txt (detokenized hypotheses). A record is those small files, nothing else, in a
directory of the repository:

    RECORDS/PAIR/SYSTEM.seedN/record.json        train + config + scores + attention + provenance, one JSON
    RECORDS/PAIR/SYSTEM.seedN/hyp/SET.txt.gz     hypotheses of the sets named in HYPOTHESIS_SETS (gzip, mtime 0)

(bleu.py puts what the run's data replica was, its pair information, in the record's provenance.)

`export_run` writes a record from a finished run directory; `import_run` writes the small files back into a run
directory (no checkpoint), where bleu.py finds a trained, scored run and skips it. Both write atomically and
refuse a record of another configuration: a record names the configuration tag it was made with.

Hypotheses are kept for test and valid only (sacreBLEU's paired tests need the text; contrastive sets keep their
scores): about 17 KB per set and run, compressed. gzip's header timestamp is zeroed so that re-exporting the same
hypotheses gives the same bytes and git sees no change.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECORD_FORMAT = "xlpos run record v1"
HYPOTHESIS_SETS = ("test", "valid")
CURVE_DIR = "curve"  # RUN/curve/valid.uU.json: a run's dev scores along its training (bleu.py --curve-every)
SMALL_JSON_DIRS = ("scores", "attention", CURVE_DIR)
RUN_NAME = re.compile(r"^(?P<system>[A-Za-z0-9_.@-]+)\.seed(?P<seed>\d+)$")


class RecordError(ValueError):
    """A record that cannot be used: unreadable, of another format, or of another configuration."""


@dataclass(frozen=True)
class RunKey:
    pair: str
    system: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.system}.seed{self.seed}"


def _write_bytes_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _gzip_bytes(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as f:
        f.write(data)
    return buf.getvalue()


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordError(f"{path}: not a readable JSON record ({e})") from None


def record_dir(records: Path, key: RunKey) -> Path:
    return Path(records) / key.pair / key.name


def has_record(records: Path, key: RunKey) -> bool:
    return (record_dir(records, key) / "record.json").is_file()


def export_run(run_dir: Path, records: Path, key: RunKey, config_tag: str, provenance: dict) -> Path:
    """Write the record of a finished run (train.json present) and return its record.json path."""
    run_dir = Path(run_dir)
    if not (run_dir / "train.json").is_file():
        raise RecordError(f"{run_dir}: training has not finished (no train.json); nothing to record")
    record: dict = {"format": RECORD_FORMAT, "pair": key.pair, "system": key.system, "seed": key.seed,
                    "config_tag": config_tag, "provenance": provenance,
                    "config": _read_json(run_dir / "config.json") if (run_dir / "config.json").is_file() else None,
                    "train": _read_json(run_dir / "train.json"), "files": {}, "hypotheses": {}}
    for sub in SMALL_JSON_DIRS:
        for path in sorted((run_dir / sub).glob("*.json")):
            record["files"][f"{sub}/{path.name}"] = _read_json(path)
    out = record_dir(records, key)
    for name in HYPOTHESIS_SETS:
        hyp = run_dir / "hyp" / f"{name}.txt"
        if hyp.is_file():
            data = hyp.read_bytes()
            record["hypotheses"][name] = {"file": f"hyp/{name}.txt.gz", "sha1": hashlib.sha1(data).hexdigest(),
                                          "lines": data.count(b"\n")}
            _write_bytes_atomic(out / "hyp" / f"{name}.txt.gz", _gzip_bytes(data))
    _write_bytes_atomic(out / "record.json", _json_bytes(record))  # last: a record exists only when complete
    return out / "record.json"


def read_record(records: Path, key: RunKey, config_tag: str | None = None) -> dict:
    path = record_dir(records, key) / "record.json"
    record = _read_json(path)
    if record.get("format") != RECORD_FORMAT:
        raise RecordError(f"{path}: format {record.get('format')!r}, expected {RECORD_FORMAT!r}")
    if (record.get("pair"), record.get("system"), record.get("seed")) != (key.pair, key.system, key.seed):
        raise RecordError(f"{path}: holds {record.get('pair')} {record.get('system')} seed {record.get('seed')}, "
                          f"not {key.pair} {key.name}")
    if config_tag is not None and record.get("config_tag") != config_tag:
        raise RecordError(f"{path}: made with configuration {record.get('config_tag')}, not {config_tag}; "
                          f"use the records directory of that configuration")
    return record


def read_hypotheses(records: Path, key: RunKey, name: str) -> list[str]:
    """The stored hypotheses of one set, checked against the SHA-1 the record holds."""
    record = read_record(records, key)
    entry = record["hypotheses"].get(name)
    if entry is None:
        raise RecordError(f"{record_dir(records, key) / 'record.json'}: no hypotheses of {name!r} recorded")
    path = record_dir(records, key) / entry["file"]
    try:
        data = gzip.decompress(path.read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise RecordError(f"{path}: not a readable gzip file ({e})") from None
    if hashlib.sha1(data).hexdigest() != entry["sha1"]:
        raise RecordError(f"{path}: content differs from the SHA-1 in record.json (edited or corrupt)")
    return data.decode("utf-8").splitlines()


def import_run(records: Path, key: RunKey, run_dir: Path, config_tag: str) -> dict:
    """Write a record's small files into run_dir (train.json last, since bleu.py takes it to mean 'trained')."""
    record = read_record(records, key, config_tag)
    run_dir = Path(run_dir)
    if record.get("config") is not None:
        _write_bytes_atomic(run_dir / "config.json", _json_bytes(record["config"]))
    for rel, obj in record["files"].items():
        _write_bytes_atomic(run_dir / rel, _json_bytes(obj))
    for name in record["hypotheses"]:
        lines = read_hypotheses(records, key, name)
        _write_bytes_atomic(run_dir / "hyp" / f"{name}.txt", "".join(line + "\n" for line in lines).encode("utf-8"))
    _write_bytes_atomic(run_dir / "train.json", _json_bytes(record["train"]))
    return record


def list_records(records: Path, pair: str) -> list[RunKey]:
    """Every run recorded for one pair, sorted by system then seed."""
    keys = []
    for path in sorted((Path(records) / pair).glob("*/record.json")):
        m = RUN_NAME.match(path.parent.name)
        if m:
            keys.append(RunKey(pair, m["system"], int(m["seed"])))
    return sorted(keys, key=lambda k: (k.system, k.seed))


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's name, family, model and AVX-512. Virtual machines often name only the product line ("AMD EPYC"),
    which spans generations 2-5x apart in this project's training and pipeline speed."""
    info: dict[str, str] = {}
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if not sep:
                    break  # the first processor's block ends at a blank line
                info.setdefault(key.strip(), value.strip())
    except OSError:
        return "unknown"
    detail = [f"family {info['cpu family']} model {info['model']}"] if "cpu family" in info and "model" in info else []
    if "avx512f" in info.get("flags", "").split():
        detail.append("AVX-512")
    return info.get("model name", "unknown") + (f" ({', '.join(detail)})" if detail else "")


def machine_info() -> dict:
    """The machine a run was made on, for its record's provenance."""
    import torch
    info = {"nproc": len(os.sched_getaffinity(0)), "cpu_model": cpu_model(), "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    from importlib import metadata
    for dist in ("ve-fairseq", "fairseq"):  # importing fairseq here would reconfigure the root logger
        try:
            info["fairseq"] = f"{dist} {metadata.version(dist)}"
            break
        except metadata.PackageNotFoundError:
            continue
    try:
        info["load_average_at_end"] = os.getloadavg()
    except OSError:
        pass
    return info


def machine_kind(info: dict) -> tuple:
    """What sets how long a run takes on a machine: its CPU model and cores, and its GPU if it has one."""
    return info.get("cpu_model"), info.get("nproc"), info.get("gpu") if info.get("cuda") else None


def run_minutes(record: dict) -> float:
    """A run's wall minutes as its record tells them: training plus the translations and attention extractions
    that scored it (on the 2-core machine of the 2026-12 campaign within half a minute of the scheduler's own
    timing); the preparation of its data replica is not included."""
    evaluation = sum(float(f.get("generate_seconds") or f.get("seconds") or 0.0)
                     for f in record["files"].values() if isinstance(f, dict))
    return (float(record["train"].get("seconds") or 0.0) + evaluation) / 60


def replica_minutes(record: dict) -> float:
    """The wall minutes that making the run's data replica took (alignment and every preparation step), as
    recorded in its provenance; 0 when the record does not say."""
    data = record.get("provenance", {}).get("data", {})
    return (float(data.get("align_seconds", 0.0)) + sum(map(float, data.get("prep_step_seconds", {}).values()))) / 60


def replica_making(record: dict) -> str | None:
    """Which making of its data replica a run was trained on, as a short fingerprint; None when the record does not
    say. The alignment cannot be seeded, so a replica made again (another machine, a deleted work directory) has
    other oracles, reorderer and positions under the same replica number. The reorderer's Kendall tau on each test
    sentence, which bleu.py records for every system (vanilla included: the preparation is shared), differs between
    makings; a record from before it was kept falls back on the corpus tau."""
    per_sentence, corpus = _making_fingerprints(record.get("provenance", {}).get("data", {}))
    return per_sentence or corpus


def making_fingerprints(data: dict) -> set[str]:
    """Every fingerprint that a record trained on this making (its preparation's `data`) can carry: the
    per-sentence one, and the corpus tau's of a record from before per-sentence taus were kept."""
    return set(_making_fingerprints(data)) - {None}


def _making_fingerprints(data: dict) -> tuple[str | None, str | None]:
    per_sentence = data.get("test_sentences", {}).get("reorderer_tau")
    corpus = data.get("reordering_vs_oracle", {}).get("test", {}).get("reorderer", {}).get("corpus_tau")
    return (hashlib.sha1(json.dumps(per_sentence).encode()).hexdigest()[:10] if per_sentence else None,
            None if corpus is None else f"tau{float(corpus):.6f}")
