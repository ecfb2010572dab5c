"""Which device fairseq trains and decodes on, for the recipes: `--cpu` without a usable CUDA (or ROCm) device,
else the GPU, with `--fp16` when asked.

Asking torch costs its import, 1.5-3 seconds on a small machine, in every recipe run before its first training
step. A CPU build of torch can never see a GPU, and torch says which build it is in torch/version.py, a file of
plain assignments: read there, the answer for a CPU build costs no import. Only a GPU build asks torch.

    python -c 'from xlpos_prep.device import fairseq_device_args as d; print(*d(fp16=True))'
"""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

# torch/version.py's names of the GPU toolkits a build was made with (None in a CPU build)
GPU_TOOLKITS = ("cuda", "hip", "rocm")


def gpu_build(version_source: str) -> bool:
    """torch/version.py's text says the build has a GPU toolkit; True when it cannot be read (then torch decides)."""
    try:
        tree = ast.parse(version_source)
    except SyntaxError:
        return True
    found = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        for target in targets:
            if isinstance(target, ast.Name) and target.id in GPU_TOOLKITS and node.value is not None:
                found[target.id] = node.value
    if "cuda" not in found:
        return True
    return any(not (isinstance(value, ast.Constant) and value.value is None) for value in found.values())


def torch_gpu_build() -> bool:
    """The installed torch may use a GPU (False only when its version.py says it is a CPU build)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return True
    try:
        text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text(encoding="utf-8")
    except OSError:
        return True
    return gpu_build(text)


def fairseq_device_args(fp16: bool) -> list[str]:
    """fairseq-train/generate's device options on this machine."""
    if torch_gpu_build():
        import torch

        if torch.cuda.is_available():
            return ["--fp16"] if fp16 else []
    return ["--cpu"]
