"""The fairseq-train options every system shares, once for `xlpos-prep train` (and so the recipes) and for
benchmarks/bleu.py: the optimizer and its schedule, regularization, the batch size and the update budget. A
system's task, architecture and XL options come from xlpos_prep.systems; whatever a caller adds (model size,
checkpoints, logging, device) comes after these options, so it wins.

Each field is the fairseq-train option of the same name (`lr` is --lr, `warmup_updates` is --warmup-updates), and
`xlpos-prep train` takes it under that name.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from typing import Callable, Sequence

from .io import float_option, int_option

# what each option is, for `xlpos-prep train --help`, and the type that checks its value
OPTION_HELP: dict[str, tuple[str, Callable[[str], object]]] = {
    "lr": ("peak learning rate of Adam's inverse square-root schedule", float_option(0, None, lo_open=True)),
    "warmup_updates": ("updates of linear warmup from 1e-7 to --lr", int_option(1, None)),
    "dropout": ("dropout probability", float_option(0, 1)),
    "weight_decay": ("Adam's weight decay", float_option(0, None)),
    "label_smoothing": ("label smoothing of the cross-entropy", float_option(0, 1)),
    "max_tokens": ("tokens per batch", int_option(1, None)),
    "update_freq": ("batches accumulated per update", int_option(1, None)),
    "max_update": ("updates to train for (0: until --max-epoch or fairseq's own end)", int_option(0, None)),
}


@dataclass(frozen=True)
class TrainOptions:
    """The shared training options; the defaults are the recipes'."""
    lr: float = 5e-4
    warmup_updates: int = 4000
    dropout: float = 0.3
    weight_decay: float = 0.0001
    label_smoothing: float = 0.1
    max_tokens: int = 4096
    update_freq: int = 1
    max_update: int = 0

    def fairseq_args(self, model: Sequence[str] = ()) -> list[str]:
        """The options as fairseq-train reads them; `model`: architecture options (layers, widths), placed right
        after the embedding sharing, which the pipeline's one joined dictionary allows."""
        return [
            "--share-all-embeddings", *model,
            "--dropout", str(self.dropout), "--weight-decay", str(self.weight_decay),
            "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", "0.0",
            "--lr", str(self.lr), "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(self.warmup_updates),
            "--warmup-init-lr", "1e-07",
            "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", str(self.label_smoothing),
            "--max-tokens", str(self.max_tokens),
            *(["--update-freq", str(self.update_freq)] if self.update_freq != 1 else []),
            *(["--max-update", str(self.max_update)] if self.max_update else []),
            # fairseq 0.12 drops the last batch when its size is not a multiple of this (default 8;
            # facebookresearch/fairseq#5036): in training the longest sentences, in generation sentences without a
            # translation
            "--required-batch-size-multiple", "1",
        ]


def add_train_options(p: argparse.ArgumentParser) -> None:
    """TrainOptions' fields as options named like fairseq-train's, with their defaults."""
    defaults = TrainOptions()
    group = p.add_argument_group("training options shared by every system (fairseq-train's names)")
    for f in fields(TrainOptions):
        what, kind = OPTION_HELP[f.name]
        group.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=kind, default=getattr(defaults, f.name),
                           help=f"{what} (default {getattr(defaults, f.name)})")


def train_options(args: argparse.Namespace) -> TrainOptions:
    """The TrainOptions of options added by add_train_options."""
    return TrainOptions(**{f.name: getattr(args, f.name) for f in fields(TrainOptions)})
