"""Committed run records (benchmarks/run_records.py): a finished run survives the loss of its work directory."""
import gzip
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import run_records as rr  # noqa: E402

KEY = rr.RunKey("ja-en", "input-gated", 2)


def make_run(run_dir: Path, hyps: dict[str, list[str]]) -> None:
    (run_dir / "scores").mkdir(parents=True)
    (run_dir / "attention").mkdir()
    (run_dir / "hyp").mkdir()
    (run_dir / "config.json").write_text(json.dumps({"embed_dim": 128, "max_update": 1000}))
    (run_dir / "train.json").write_text(json.dumps({"seconds": 812.5, "updates": 1000}))
    for name, lines in hyps.items():
        (run_dir / "hyp" / f"{name}.txt").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
        (run_dir / "scores" / f"{name}.json").write_text(json.dumps({"bleu": 12.3, "chrf": 40.1}))
    (run_dir / "scores" / "test@reversed.json").write_text(json.dumps({"bleu": 3.2}))
    (run_dir / "attention" / "test.layer2.json").write_text(json.dumps({"layer": 2, "scores": {"aer": 0.4}}))
    (run_dir / "checkpoint_last.pt").write_bytes(b"\0" * 4096)


HYPS = {"test": ["a cat sits .", "ü ß 日本語", ""], "valid": ["one", "two"]}


def test_a_record_restores_every_small_file_and_never_the_checkpoint(tmp_path: Path):
    run = tmp_path / "work" / "run"
    make_run(run, HYPS)
    records = tmp_path / "records"
    rr.export_run(run, records, KEY, "u1000-abc", {"machine": "test"})
    files = {p.relative_to(records).as_posix() for p in records.rglob("*") if p.is_file()}
    assert files == {"ja-en/input-gated.seed2/record.json", "ja-en/input-gated.seed2/hyp/test.txt.gz",
                     "ja-en/input-gated.seed2/hyp/valid.txt.gz"}
    restored = tmp_path / "elsewhere" / "run"
    record = rr.import_run(records, KEY, restored, "u1000-abc")
    assert record["provenance"] == {"machine": "test"}
    for rel in ("train.json", "config.json", "scores/test.json", "scores/valid.json", "scores/test@reversed.json",
                "attention/test.layer2.json"):
        assert json.loads((restored / rel).read_text()) == json.loads((run / rel).read_text()), rel
    for name in HYPS:
        assert (restored / "hyp" / f"{name}.txt").read_bytes() == (run / "hyp" / f"{name}.txt").read_bytes()
    assert not (restored / "checkpoint_last.pt").exists()
    assert rr.read_hypotheses(records, KEY, "test") == HYPS["test"]
    assert rr.list_records(records, "ja-en") == [KEY]


def test_exporting_the_same_run_again_gives_the_same_bytes(tmp_path: Path):
    run = tmp_path / "run"
    make_run(run, HYPS)
    a, b = tmp_path / "a", tmp_path / "b"
    rr.export_run(run, a, KEY, "t", {})
    rr.export_run(run, b, KEY, "t", {})
    for p in a.rglob("*"):
        if p.is_file():
            assert p.read_bytes() == (b / p.relative_to(a)).read_bytes(), p


def test_an_unfinished_run_is_not_recorded(tmp_path: Path):
    run = tmp_path / "run"
    make_run(run, HYPS)
    (run / "train.json").unlink()
    with pytest.raises(rr.RecordError, match="training has not finished"):
        rr.export_run(run, tmp_path / "records", KEY, "t", {})
    assert not (tmp_path / "records").exists() or not any((tmp_path / "records").rglob("record.json"))


def test_a_record_of_another_configuration_is_refused(tmp_path: Path):
    run = tmp_path / "run"
    make_run(run, HYPS)
    rr.export_run(run, tmp_path / "records", KEY, "u1000-abc", {})
    with pytest.raises(rr.RecordError, match="made with configuration u1000-abc, not u300-def"):
        rr.import_run(tmp_path / "records", KEY, tmp_path / "restored", "u300-def")
    assert not (tmp_path / "restored" / "train.json").exists()


def test_edited_hypotheses_are_detected(tmp_path: Path):
    run = tmp_path / "run"
    make_run(run, HYPS)
    records = tmp_path / "records"
    rr.export_run(run, records, KEY, "t", {})
    gz = rr.record_dir(records, KEY) / "hyp" / "test.txt.gz"
    gz.write_bytes(gzip.compress("a dog sits .\nü ß 日本語\n\n".encode()))
    with pytest.raises(rr.RecordError, match="differs from the SHA-1"):
        rr.read_hypotheses(records, KEY, "test")
    with pytest.raises(rr.RecordError, match="differs from the SHA-1"):
        rr.import_run(records, KEY, tmp_path / "restored", "t")
    assert not (tmp_path / "restored" / "train.json").exists()


def test_a_record_filed_under_the_wrong_name_is_refused(tmp_path: Path):
    run = tmp_path / "run"
    make_run(run, HYPS)
    records = tmp_path / "records"
    rr.export_run(run, records, KEY, "t", {})
    other = rr.RunKey("ja-en", "vanilla", 2)
    rr.record_dir(records, KEY).rename(rr.record_dir(records, other))
    with pytest.raises(rr.RecordError, match="holds ja-en input-gated seed 2, not ja-en vanilla.seed2"):
        rr.read_record(records, other)


def test_the_cpu_is_named_by_generation_not_only_by_product_line(tmp_path):
    block = "processor\t: {}\nmodel name\t: AMD EPYC\ncpu family\t: {}\nmodel\t\t: {}\nflags\t\t: fpu sse2 {}\n\n"
    (tmp_path / "zen4").write_text(block.format(0, 25, 17, "avx2 avx512f") + block.format(1, 25, 17, "avx2 avx512f"))
    (tmp_path / "zen2").write_text(block.format(0, 23, 49, "avx2") + block.format(1, 23, 49, "avx2"))
    assert rr.cpu_model(str(tmp_path / "zen4")) == "AMD EPYC (family 25 model 17, AVX-512)"
    assert rr.cpu_model(str(tmp_path / "zen2")) == "AMD EPYC (family 23 model 49)"
    assert rr.cpu_model(str(tmp_path / "absent")) == "unknown"
