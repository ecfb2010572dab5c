"""The systems a model is trained as, once for the recipes and benchmarks/bleu.py: a system name -> fairseq task,
architecture and XL options (SYSTEM_GRAMMAR), and the fairseq-train step of one system (`xlpos-prep train`, with
the shared training options of xlpos_prep.train_options). fairseq runs as a child process; this module never
imports it (nor torch).

    xlpos-prep train --system xl-input --data-bin data-bin --save-dir checkpoints/xl-input --source-lang ja \
        --target-lang en --arch transformer_iwslt_de_en --xl-arch transformer_xlpos_iwslt_de_en --lr 5e-4 \
        --xl-args "--xl-reorderer reorder/reorderer.model --xl-spm spm/spm.model" -- --max-epoch 50 --cpu
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import sys
import zipfile
from dataclasses import dataclass, replace
from typing import Sequence

from .io import InputError, command_record, declare_files, directory_lock, log
from .train_options import add_train_options, train_options

# the recipes' names of the four main systems
RECIPE_SYSTEMS = {"baseline": "vanilla", "xl-input": "input", "xl-head": "head", "xl-rope": "rope"}


def recipe_systems_problem(names: Sequence[str]) -> str | None:
    """Why a recipe's SYSTEMS cannot be trained (the first unknown name), or None."""
    for name in names:
        if name not in RECIPE_SYSTEMS:
            return f"error: unknown system '{name}' in SYSTEMS (use {', '.join(RECIPE_SYSTEMS)})"
    return None


def plugin_dir() -> str:
    """The installed xlpos plugin's directory (fairseq's --user-dir), found without importing it (it imports
    fairseq)."""
    spec = importlib.util.find_spec("xlpos")
    if spec is None or spec.origin is None:
        raise ValueError("the xlpos plugin is not installed: pip install -e .")
    return os.path.dirname(spec.origin)


ORACLE_SUFFIX = "-oracle"
MONOTONE_SUFFIX = "-monotone"  # the XL model with XL positions = source positions: the mechanism without reordering
RANDOM_SUFFIX = "-random"      # trained (and decoded) on random permutations: XL information without any content
ENCFREE_PREFIX = "encfree-"    # no encoder layers: embeddings and position encodings straight into the decoder
# the plugin's --xl-fusion choices (xlpos.models.transformer_xlpos.XL_FUSIONS), spelled out because this module must
# not import fairseq; a test holds the two lists equal
INPUT_FUSIONS = ("sum", "gated", "context", "tanh")
SYSTEM_GRAMMAR = """\
system names (--systems):
  vanilla                 fairseq's transformer (--task translation)
  input[-FUSION]          InXL; FUSION = {fusions}: --xl-fusion (plain input: the plugin's default)
  head[-kK][-lLAYERS]     HeadXL; -kK: --xl-heads K; -lLAYERS: --xl-head-layers, one digit per layer or 'all'
                          (head-k2-l01 = 2 XL heads in layers 0 and 1)
  rope[-kK][-lLAYERS]     rotary XL, same head/layer options
  encfree-vanilla         --encoder-layers 0 (context-free source: embeddings + absolute positions only)
  encfree-input[-FUSION]  --encoder-layers 0 with InXL
  <XL system>-oracle      trained on oracle XL positions, evaluated on valid only (also: --ablation-oracle)
  <XL system>-monotone    XL positions = source positions (--xl-positions monotone), trained and decoded so: the
                          integration without reordering information; rope-monotone is the rotary baseline
                          without XL
  <XL system>-random      trained and decoded on random permutations (--xl-contrast random): the control for
                          'any extra position signal helps'
  <XL system>-noiseK      trained with --xl-position-noise K (a fresh perturbation of the training positions in
                          every epoch; e.g. rope-noise2, input-context-noise2); before -oracle/-monotone/-random
""".format(fusions="|".join(INPUT_FUSIONS))


@dataclass(frozen=True)
class SystemSpec:
    """How one named system is trained and decoded (see SYSTEM_GRAMMAR)."""
    name: str
    task_args: tuple           # task, architecture and XL options: fairseq-train and fairseq-generate
    model_args: tuple          # after the training configuration's arguments, which they override: fairseq-train only
    xl: bool                   # the encoder reads XL positions
    control: str | None        # None (reorderer positions), "oracle", "monotone" or "random"

    @property
    def oracle(self) -> bool:
        return self.control == "oracle"

    @property
    def reads_reorderer(self) -> bool:
        """An XL model fed the reorderer's positions: decoding it with other positions measures what it uses."""
        return self.xl and self.control is None


def parse_system(name: str) -> SystemSpec:
    """The SystemSpec of a name of SYSTEM_GRAMMAR (or of the recipes' RECIPE_SYSTEMS); ValueError naming what is
    wrong."""
    if name in RECIPE_SYSTEMS:
        return replace(parse_system(RECIPE_SYSTEMS[name]), name=name)
    control, base = None, name
    for suffix in (ORACLE_SUFFIX, MONOTONE_SUFFIX, RANDOM_SUFFIX):
        if name.endswith(suffix):
            control, base = suffix[1:], name[:-len(suffix)]
            break
    encfree = base.startswith(ENCFREE_PREFIX)
    core = base[len(ENCFREE_PREFIX):] if encfree else base
    model_args: list[str] = ["--encoder-layers", "0"] if encfree else []
    # --user-dir for the vanilla system too: the plugin's checkpoint loading (weights_only with an allowlist) is
    # what lets torch >= 2.6 load fairseq checkpoints
    user_dir = ["--user-dir", plugin_dir()]
    xl_task = ["--task", "translation_xlpos", "--arch", "transformer_xlpos"]
    if core == "vanilla":
        if control:
            raise ValueError(f"system {name}: {control} positions need an XL system, not vanilla")
        # the encoder-free baseline uses the plugin's model with --xl-integration none (exactly fairseq's
        # transformer), whose encoder accepts --encoder-layers 0
        task = xl_task + ["--xl-integration", "none"] if encfree else ["--task", "translation", "--arch",
                                                                         "transformer"]
        return SystemSpec(name, tuple(user_dir + task), tuple(model_args), False, None)
    noise = re.fullmatch(r"(.+)-noise(\d+(?:\.\d+)?)", core)
    if noise:
        core = noise.group(1)
        model_args += ["--xl-position-noise", noise.group(2)]
    m = (re.fullmatch(rf"input(?:-({'|'.join(INPUT_FUSIONS)}))?", core)
         or re.fullmatch(r"(head|rope)(?:-k(\d+))?(?:-l(all|\d+))?", core))
    if not m:
        raise ValueError(f"unknown system {name}; see --help for the names")
    if core.startswith("input"):
        xl = ["--xl-integration", "input"] + (["--xl-fusion", m.group(1)] if m.group(1) else [])
    else:
        if encfree:
            raise ValueError(f"system {name}: {m.group(1)} puts XL positions in encoder attention; an encoder-free "
                             f"model has none")
        xl = ["--xl-integration", m.group(1)]
        if m.group(2):
            xl += ["--xl-heads", m.group(2)]
        if m.group(3):
            xl += ["--xl-head-layers", "all" if m.group(3) == "all" else ",".join(m.group(3))]
    if control == "monotone":
        xl += ["--xl-positions", "monotone"]
    elif control == "random":
        xl += ["--xl-contrast", "random"]
    return SystemSpec(name, tuple(user_dir + xl_task + xl), tuple(model_args), True, control)


def task_args(spec: SystemSpec, arch: str | None = None) -> list[str]:
    """fairseq task/model options of a system, with its architecture replaced by `arch` when given (a recipe's
    size, e.g. transformer_xlpos_wmt_en_de)."""
    args = list(spec.task_args)
    if arch:
        args[args.index("--arch") + 1] = arch
    return args


def train_command(data_bin: str | os.PathLike, spec: SystemSpec, source_lang: str, target_lang: str,
                  save_dir: str | os.PathLike, fairseq_args: Sequence[str], arch: str | None = None) -> list[str]:
    """fairseq-train of one system: its task options, then the shared training options, then its own model
    options (which win), then the save directory. A killed run resumes from SAVE_DIR/checkpoint_last.pt."""
    return [sys.executable, "-m", "fairseq_cli.train", os.fspath(data_bin), *task_args(spec, arch),
            "--source-lang", source_lang, "--target-lang", target_lang, *fairseq_args, *spec.model_args,
            "--save-dir", os.fspath(save_dir)]


# fairseq's checkpoint names (checkpoint_last.pt, checkpoint_best.pt, checkpoint3.pt, checkpoint_3_2000.pt,
# checkpoint.best_bleu_35.1230.pt), not averaged ones (checkpoint.avg5.pt), which are another step's output
FAIRSEQ_CHECKPOINT = re.compile(r"checkpoint(?:_last|_best|\d+|_\d+_\d+|\.best_.+)(?:-shard\d+)?\.pt")


def checkpoint_problem(path: str) -> str | None:
    """Why `path` is not a complete checkpoint, read without torch (its zip archive's directory, at its end, is
    what a truncated or empty file lacks); None when it looks complete."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
        if head != b"PK\x03\x04":
            return "empty or truncated, or not written by torch.save" if head else "empty"
        with zipfile.ZipFile(path) as archive:
            archive.infolist()
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as e:
        return f"truncated or corrupt ({e})"
    return None


def saved_checkpoints(save_dir: str) -> list[str]:
    """fairseq's checkpoints in `save_dir`."""
    return sorted(os.path.join(save_dir, n) for n in os.listdir(save_dir) if FAIRSEQ_CHECKPOINT.fullmatch(n))


def verify_checkpoints(save_dir: str) -> None:
    """A trained model is done only with at least one checkpoint, every one of them readable."""
    found = saved_checkpoints(save_dir) if os.path.isdir(save_dir) else []
    if not found:
        raise InputError(save_dir, None, "fairseq-train ended without saving a checkpoint here")
    for path in found:
        problem = checkpoint_problem(path)
        if problem:
            raise InputError(path, None, f"not a readable checkpoint: {problem}")


# fairseq-train options naming what it writes besides the save directory: not inputs
TRAIN_OUTPUT_OPTIONS = ("--tensorboard-logdir", "--log-file")


def recorded_train_command(command: Sequence[str], save_dir: str) -> tuple[list[str], list[str]]:
    """(fairseq-train's options as the training step records them, its input files): without the interpreter and
    the plugin's --user-dir (neither decides the model), paths relative to the save directory's parent."""
    words = list(command[3:])  # after python -m fairseq_cli.train
    while "--user-dir" in words:
        k = words.index("--user-dir")
        del words[k:k + 2]
    written = [words[k + 1] for k, w in enumerate(words[:-1]) if w in TRAIN_OUTPUT_OPTIONS]
    return command_record(["fairseq-train", *words], [save_dir, *written])


def run_train(args: argparse.Namespace) -> int:
    from .pipeline import Steps, run_logged
    spec = parse_system(args.system)
    given = args.fairseq_args[1:] if args.fairseq_args[:1] == ["--"] else args.fairseq_args
    # the shared options first, so that an XL system's own and the caller's options win
    fairseq_args = [*train_options(args).fairseq_args(), *(shlex.split(args.xl_args) if spec.xl else []), *given]
    train_log = os.path.join(args.save_dir, "train.log")
    arch = (args.xl_arch or args.arch) if spec.xl else args.arch
    command = train_command(args.data_bin, spec, args.source_lang, args.target_lang, args.save_dir, fairseq_args, arch)
    recorded, inputs = recorded_train_command(command, args.save_dir)

    def train() -> None:
        log(f"train {args.system} ({arch or task_args(spec)[task_args(spec).index('--arch') + 1]}; log: {train_log})")
        run_logged(command, train_log, verbose=args.show)

    # The model is expensive: trained with other settings or data, or changed since, it is kept and named, not
    # retrained over. A save directory without checkpoints (deleted to retrain) is simply trained again.
    keep = (f"delete or move {args.save_dir} to retrain, or delete {args.save_dir}.done to train on from its "
            f"checkpoints as now given")
    with directory_lock(args.save_dir):
        seconds = Steps().step(f"{args.system} model", [args.save_dir], train, inputs=inputs,
                               settings={"fairseq-train": recorded}, expensive=keep, ignore=("train.log",),
                               verify=lambda: verify_checkpoints(args.save_dir))
    if seconds is not None:
        log(f"trained {args.system} in {seconds:.0f} s")
    return 0


def configure_train(p: argparse.ArgumentParser) -> None:
    p.usage = ("xlpos-prep train --system NAME --data-bin DIR --save-dir DIR --source-lang S --target-lang T "
               "[--arch ARCH] [--xl-arch ARCH] [--xl-args OPTIONS] [--lr LR ...] [--show] [-- FAIRSEQ-TRAIN OPTIONS]")
    p.epilog = SYSTEM_GRAMMAR + "  the recipes' names: " + ", ".join(f"{k} = {v}" for k, v in RECIPE_SYSTEMS.items())
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--system", required=True, help="system name (below)")
    p.add_argument("--data-bin", required=True)
    p.add_argument("--save-dir", required=True, help="checkpoints and train.log; the step's output")
    p.add_argument("--source-lang", required=True)
    p.add_argument("--target-lang", required=True)
    p.add_argument("--arch", help="architecture instead of the system's (transformer / transformer_xlpos)")
    p.add_argument("--xl-arch", help="architecture of an XL system instead of --arch (e.g. transformer_xlpos_wmt_en_de "
                                     "beside --arch transformer_wmt_en_de)")
    p.add_argument("--xl-args", default="", help="further fairseq-train options for XL systems only, one string "
                                                "(e.g. the --xl-reorderer and --xl-spm their checkpoints carry)")
    add_train_options(p)
    p.add_argument("--show", action="store_true", help="show fairseq's log as well as writing it")
    p.add_argument("fairseq_args", nargs=argparse.REMAINDER,
                   help="after --: further fairseq-train options (model size, checkpoints, device), which win")
    p.set_defaults(run=run_train)
    declare_files(p, input_dirs=("data_bin",))
