"""`xlpos-prep train` builds fairseq-train's command from the one home of the training options
(xlpos_prep.train_options), which benchmarks/bleu.py trains with too; XL-only options and architectures reach XL
systems only; the recipes' system names and raw-text options are the package's."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from xlpos_prep import cli
from xlpos_prep.systems import recipe_systems_problem
from xlpos_prep.text import raw_text_options
from xlpos_prep.train_options import TrainOptions

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bleu_runs  # noqa: E402


def train_command(tmp_path: Path, monkeypatch, system: str, *options: str) -> list[str]:
    """The fairseq-train command `xlpos-prep train` runs for these options (fairseq replaced by a stand-in that
    saves a checkpoint)."""
    seen: list[list[str]] = []

    def fake_run(cmd, log_path, verbose=False, **kwargs):
        seen.append(list(map(str, cmd)))
        save = Path(cmd[cmd.index("--save-dir") + 1])
        with zipfile.ZipFile(save / "checkpoint_last.pt", "w") as z:
            z.writestr("x", "x")

    monkeypatch.setattr("xlpos_prep.pipeline.run_logged", fake_run)
    data_bin = tmp_path / "data-bin"
    data_bin.mkdir(exist_ok=True)
    status = cli.main(["train", "--system", system, "--data-bin", str(data_bin), "--save-dir",
                       str(tmp_path / "save" / system), "--source-lang", "ja", "--target-lang", "en", *options])
    assert status == 0 and len(seen) == 1
    return seen[0]


def value(cmd: list[str], option: str) -> str:
    return cmd[len(cmd) - 1 - cmd[::-1].index(option) + 1]  # the last one, which fairseq takes


def test_train_options_have_one_home(tmp_path, monkeypatch) -> None:
    cmd = train_command(tmp_path, monkeypatch, "xl-input", "--lr", "7e-4", "--max-update", "30", "--arch",
                        "transformer_iwslt_de_en", "--xl-arch", "transformer_xlpos_iwslt_de_en", "--xl-args",
                        "--xl-fusion sum", "--", "--dropout", "0.2", "--cpu")
    shared = TrainOptions(lr=7e-4, max_update=30).fairseq_args()
    assert cmd[cmd.index("--share-all-embeddings"):][:len(shared)] == shared
    assert value(cmd, "--required-batch-size-multiple") == "1" and value(cmd, "--lr") == "0.0007"
    assert value(cmd, "--dropout") == "0.2"  # the caller's options win
    assert value(cmd, "--arch") == "transformer_xlpos_iwslt_de_en" and value(cmd, "--xl-fusion") == "sum"
    baseline = train_command(tmp_path, monkeypatch, "baseline", "--arch", "transformer_iwslt_de_en", "--xl-arch",
                             "transformer_xlpos_iwslt_de_en", "--xl-args", "--xl-fusion sum", "--", "--cpu")
    assert value(baseline, "--arch") == "transformer_iwslt_de_en" and "--xl-fusion" not in baseline
    assert "--max-update" not in baseline and "--update-freq" not in baseline  # fairseq's own defaults


def test_the_benchmark_trains_with_the_same_options() -> None:
    cfg = bleu_runs.TrainConfig(max_update=100)
    args = cfg.fairseq_args()
    assert args == cfg.options().fairseq_args(model=args[1:args.index("--dropout")])
    assert cfg.options() == TrainOptions(lr=cfg.lr, warmup_updates=20, dropout=cfg.dropout, max_update=100)


def test_bad_training_option_is_named(tmp_path, capsys) -> None:
    status = cli.main(["train", "--system", "vanilla", "--data-bin", str(tmp_path), "--save-dir",
                       str(tmp_path / "save"), "--source-lang", "ja", "--target-lang", "en", "--lr", "0"])
    assert status != 0 and "--lr" in capsys.readouterr().err


@pytest.mark.parametrize("src, tgt, normalize, expected", [
    ("ja", "en", True, "--xl-word-tokenizer ja --xl-detokenizer moses --xl-normalize"),
    ("en", "zh", False, "--xl-word-tokenizer moses --xl-detokenizer zh"),
    ("de", "en", False, "--xl-word-tokenizer moses --xl-detokenizer moses")])
def test_raw_text_options_follow_the_languages(src, tgt, normalize, expected) -> None:
    assert " ".join(raw_text_options(src, tgt, normalize)) == expected


def test_recipe_system_names() -> None:
    assert recipe_systems_problem(["baseline", "xl-input", "xl-head", "xl-rope"]) is None
    assert "unknown system 'input'" in recipe_systems_problem(["baseline", "input"])


def test_device_of_a_cpu_build_is_decided_without_importing_torch():
    """The recipes' device decision (xl_device): a CPU build of torch, told by its version.py, gives --cpu without
    the import; any GPU toolkit in the build, or a file that cannot be read, leaves the decision to torch."""
    from xlpos_prep.device import gpu_build

    cpu = "from typing import Optional\n__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\nhip = None\n"
    assert not gpu_build(cpu)
    assert gpu_build(cpu.replace("cuda: Optional[str] = None", "cuda: Optional[str] = '12.4'"))
    assert gpu_build(cpu.replace("hip = None", "hip = '6.2.4'"))  # ROCm: torch.cuda is the AMD GPU
    assert gpu_build("__version__ = '9.0'\n") and gpu_build("cuda = (\n")
    code = ("import sys\nfrom xlpos_prep.device import fairseq_device_args, torch_gpu_build\n"
            "gpu = torch_gpu_build()\nargs = fairseq_device_args(fp16=True)\n"
            "print(gpu, 'torch' in sys.modules, args)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    gpu, imported, args = proc.stdout.split(" ", 2)
    import torch

    if torch.version.cuda is None and torch.version.hip is None:  # this machine's torch is a CPU build
        assert (gpu, imported, args.strip()) == ("False", "False", "['--cpu']")
    else:
        assert args.strip() == ("['--fp16']" if torch.cuda.is_available() else "['--cpu']")
