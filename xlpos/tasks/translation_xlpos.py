"""Task ``translation_xlpos``: fairseq's translation task whose batches carry cross-lingual source positions.

Every batch gets ``net_input["src_xl_positions"]`` (see :mod:`xlpos.data.xl_positions_dataset` for the layout):

* training / fairseq-generate: from ``{split}.{S}-{T}.xlpos.{bin,idx}`` in the data-bin (``--xl-positions file``,
  the default; make them with ``xlpos-prep binarize``) or the identity (``--xl-positions monotone``);
* fairseq-interactive and hub ``translate()``: from :meth:`TranslationXLPosTask.xl_positions_for_inference`,
  which sees the binarized source sentences (monotone for now; on-the-fly reordering plugs in there).
"""
# No `from __future__ import annotations` here: fairseq reads the config dataclass's field types at runtime.
import itertools
import logging
from dataclasses import dataclass, field
from typing import Sequence

import torch
from fairseq import utils
from fairseq.data import LanguagePairDataset
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from xlpos.data.xl_positions_dataset import (
    XL_POSITIONS_KEY,
    LanguagePairWithXLPositionsDataset,
    check_xl_positions_match_source,
    concat_like_source,
    load_source_sizes,
    load_xl_positions,
    model_positions,
    place_like_tokens,
    source_tokens_prefix,
    xl_positions_prefix,
)

logger = logging.getLogger(__name__)

XL_POSITION_SOURCES = ChoiceEnum(["file", "monotone"])


@dataclass
class TranslationXLPosConfig(TranslationConfig):
    xl_positions: XL_POSITION_SOURCES = field(
        default="file",
        metadata={"help": "where source XL positions come from: 'file' reads {split}.{src}-{tgt}.xlpos.{bin,idx} "
                          "from the data directory (made by `xlpos-prep binarize`); 'monotone' uses the absolute "
                          "positions (no reordering; for baselines and ablations)"},
    )


@register_task("translation_xlpos", dataclass=TranslationXLPosConfig)
class TranslationXLPosTask(TranslationTask):
    """Translation with cross-lingual position representations (Ding et al., 2020).

    Compatible with fairseq-train, fairseq-generate, fairseq-interactive and the hub interface; use it with an
    encoder that reads ``net_input["src_xl_positions"]`` (``--arch transformer_xlpos``).
    """

    cfg: TranslationXLPosConfig

    def __init__(self, cfg: TranslationXLPosConfig, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self._warned_monotone_inference = False

    # ---- datasets from the data-bin -------------------------------------------------------------------------
    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs) -> None:
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        pair = self.datasets[split]
        if not isinstance(pair, LanguagePairDataset):
            raise TypeError(f"translation_xlpos expects a LanguagePairDataset for split {split}, got "
                            f"{type(pair).__name__}")
        if self.cfg.xl_positions == "monotone":
            xl, name = None, "monotone XL positions"
        else:
            xl, name = self._load_split_xl_positions(split, epoch, combine)
        self.datasets[split] = LanguagePairWithXLPositionsDataset(
            pair, xl, name=name, truncate_source=self.cfg.truncate_source)

    def _split_data_path(self, split: str, epoch: int) -> str:
        # The same choice TranslationTask.load_dataset makes: round-robin over paths for train, first path else.
        paths = utils.split_paths(self.cfg.data)
        if split != self.cfg.train_subset:
            paths = paths[:1]
        return paths[(epoch - 1) % len(paths)]

    def _load_split_xl_positions(self, split: str, epoch: int, combine: bool):
        """XL positions of every shard (split, split1, split2, ...) that load_langpair_dataset reads, combined the
        same way, each checked against its source shard's sentence lengths."""
        data_path = self._split_data_path(split, epoch)
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        parts = []
        for k in itertools.count():
            split_k = split + (str(k) if k > 0 else "")
            source_prefix = source_tokens_prefix(data_path, split_k, src, tgt)
            if source_prefix is None:
                if k == 0:  # super().load_dataset found it with the configured --dataset-impl; we cannot
                    raise FileNotFoundError(f"binarized source of split '{split}' not found in {data_path}")
                break
            xl = load_xl_positions(data_path, split_k, src, tgt)
            check_xl_positions_match_source(
                xl.sizes, load_source_sizes(source_prefix, self.src_dict, self.cfg.dataset_impl),
                xl_positions_prefix(data_path, split_k, src, tgt) + ".bin", source_prefix + ".bin")
            parts.append(xl)
            if not combine:
                break
        return concat_like_source(parts, self.cfg.upsample_primary), xl_positions_prefix(data_path, split, src, tgt)

    # ---- inference: fairseq-interactive and hub ---------------------------------------------------------------
    def xl_positions_for_inference(self, src_tokens: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Raw 0-based XL positions (EOS excluded) for binarized source sentences that have no .xlpos file.

        Extension point: on-the-fly reordering (pieces -> words -> reorderer -> piece XL positions) overrides or
        extends this. Each input is one sentence's token ids ending with EOS (pads, if any, are ignored); each
        output must hold one position per non-EOS token. Currently: the identity (XL = absolute positions).
        """
        if self.cfg.xl_positions == "file" and not self._warned_monotone_inference:
            logger.warning("translation_xlpos: sentences given at inference time have no .xlpos file; using "
                           "monotone XL positions (XL = absolute)")
            self._warned_monotone_inference = True
        pad = self.source_dictionary.pad()
        return [torch.arange(int(tokens.ne(pad).sum()) - 1, dtype=torch.long) for tokens in src_tokens]

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        pair = super().build_dataset_for_inference(src_tokens, src_lengths, constraints=constraints)
        return LanguagePairWithXLPositionsDataset(pair, self.xl_positions_for_inference(src_tokens),
                                                  name="inference input XL positions")

    def xl_positions_for_batch(self, src_tokens: torch.Tensor) -> torch.Tensor:
        """``src_xl_positions`` for a collated source batch (any padding side), via xl_positions_for_inference."""
        pad = self.source_dictionary.pad()
        sentences = [row[row.ne(pad)].cpu() for row in src_tokens]
        rows = [model_positions(raw, pad) for raw in self.xl_positions_for_inference(sentences)]
        return place_like_tokens(src_tokens, rows, pad)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        # fairseq-interactive rebuilds net_input from src_tokens and src_lengths only, dropping our key; put it
        # back from the same source of positions its dataset used.
        net_input = sample["net_input"]
        if XL_POSITIONS_KEY not in net_input:
            net_input = dict(net_input)
            net_input[XL_POSITIONS_KEY] = self.xl_positions_for_batch(net_input["src_tokens"])
            sample = dict(sample, net_input=net_input)
        return super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                      constraints=constraints)
