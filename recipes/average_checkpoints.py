#!/usr/bin/env python
"""Average the parameters of the last N fairseq checkpoints (fairseq's scripts/average_checkpoints.py is not
installed with the fairseq wheel).

    python recipes/average_checkpoints.py --inputs checkpoints/xl-input --num-update-checkpoints 5 \
        --output checkpoints/xl-input/checkpoint.avg5.pt
    python recipes/average_checkpoints.py --inputs a.pt b.pt c.pt --output avg.pt

Checkpoints are read with fairseq's own loader after importing the xlpos plugin, so they load with
``weights_only=True`` and the plugin's allowlist. The output keeps the first checkpoint's configuration and
training history with the averaged model, without the optimizer state (it is for decoding).
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys


def last_checkpoints(directory: str, count: int, by_update: bool) -> list[str]:
    """The `count` newest checkpoint{EPOCH}.pt or checkpoint_{EPOCH}_{UPDATE}.pt files of `directory`."""
    pattern = re.compile(r"checkpoint_\d+_(\d+)\.pt$" if by_update else r"checkpoint(\d+)\.pt$")
    found = []
    for name in os.listdir(directory):
        m = pattern.fullmatch(name)
        if m:
            found.append((int(m.group(1)), os.path.join(directory, name)))
    kind = "checkpoint_EPOCH_UPDATE.pt (--save-interval-updates)" if by_update else "checkpointEPOCH.pt"
    if len(found) < count:
        raise ValueError(f"{directory}: found {len(found)} {kind} files, need {count} to average")
    return [path for _, path in sorted(found, reverse=True)[:count]]


def average_checkpoints(paths: list[str]) -> dict:
    """The state of paths[0] with its model parameters replaced by the mean over all paths."""
    import torch

    import xlpos  # noqa: F401  (installs the weights_only checkpoint loading into fairseq)
    from fairseq import checkpoint_utils

    first_state = None
    sums: collections.OrderedDict[str, torch.Tensor] = collections.OrderedDict()
    for path in paths:
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
        model = state["model"]
        if first_state is None:
            first_state = state
        elif list(model) != list(sums):
            raise ValueError(f"{path}: its parameters differ from those of {paths[0]}; "
                             f"only checkpoints of one training run can be averaged")
        for name, tensor in model.items():
            # accumulate in float64: fp16/fp32 sums of many checkpoints lose precision
            value = tensor.double() if tensor.is_floating_point() else tensor
            if name not in sums:
                sums[name] = value.clone()
            elif tensor.is_floating_point():
                sums[name] += value
    assert first_state is not None
    averaged = collections.OrderedDict()
    for name, total in sums.items():
        reference = first_state["model"][name]
        averaged[name] = (total / len(paths)).to(reference.dtype) if reference.is_floating_point() else total
    first_state["model"] = averaged
    first_state.pop("last_optimizer_state", None)
    return first_state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", nargs="+", required=True, help="checkpoint files, or one checkpoint directory")
    parser.add_argument("--output", required=True, help="averaged checkpoint to write")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--num-epoch-checkpoints", type=int, help="with a directory: the last N checkpointEPOCH.pt")
    group.add_argument("--num-update-checkpoints", type=int,
                       help="with a directory: the last N checkpoint_EPOCH_UPDATE.pt")
    args = parser.parse_args(argv)
    try:
        if len(args.inputs) == 1 and os.path.isdir(args.inputs[0]):
            count = args.num_update_checkpoints or args.num_epoch_checkpoints
            if not count:
                raise ValueError("with a directory, give --num-epoch-checkpoints or --num-update-checkpoints")
            paths = last_checkpoints(args.inputs[0], count, by_update=args.num_update_checkpoints is not None)
        else:
            paths = args.inputs
            for path in paths:
                if not os.path.isfile(path):
                    raise ValueError(f"{path}: checkpoint not found")
        print(f"averaging {len(paths)} checkpoints: {' '.join(paths)}", file=sys.stderr)
        state = average_checkpoints(paths)
        from fairseq import checkpoint_utils
        checkpoint_utils.torch_persistent_save(state, args.output)  # written to OUTPUT.tmp, then renamed
    except ValueError as e:
        print(f"average_checkpoints: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
