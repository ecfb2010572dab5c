"""``--num-batch-buckets`` for a LanguagePairDataset under numpy 2.

fairseq 0.12's bucketing cannot run on numpy >= 2: ``data_utils.get_buckets`` calls ``np.percentile(...,
interpolation=...)`` (the keyword numpy 2 removed; it is ``method`` now) and ``LanguagePairDataset.__init__`` uses
``np.compat.long`` (``np.compat`` is gone). :func:`apply_length_buckets` does what that ``__init__`` block does, for a
dataset built with ``num_buckets=0``: the same bucket boundaries, the same padded items, the same batch shapes.

Bucketed items are padded to their bucket length with pad tokens (on the configured side) inside the item; the XL
position wrapper counts real tokens with ``ne(pad)`` and places positions on non-pad cells, so it needs nothing else.
"""
from __future__ import annotations

import logging

import numpy as np
from fairseq.data import BaseWrapperDataset, BucketPadLengthDataset, LanguagePairDataset
from fairseq.data.data_utils import get_bucketed_sizes

logger = logging.getLogger(__name__)


def bucket_boundaries(sizes: np.ndarray, num_buckets: int) -> np.ndarray:
    """fairseq's ``get_buckets``: the distinct upper ends of `num_buckets` equal-count length ranges."""
    return np.unique(np.percentile(sizes, np.linspace(0, 100, num_buckets + 1), method="lower")[1:])


class LengthBucketPadDataset(BucketPadLengthDataset):
    """fairseq's ``BucketPadLengthDataset`` with numpy-2 bucket boundaries (its ``__init__`` is the broken part)."""

    def __init__(self, dataset, sizes: np.ndarray, num_buckets: int, pad_idx: int, left_pad: bool):
        BaseWrapperDataset.__init__(self, dataset)
        if num_buckets < 1:
            raise ValueError(f"--num-batch-buckets {num_buckets}: must be positive to bucket")
        self.pad_idx = pad_idx
        self.left_pad = left_pad
        self.buckets = bucket_boundaries(np.asarray(sizes), num_buckets)
        self._bucketed_sizes = get_bucketed_sizes(np.asarray(sizes), self.buckets)
        self._tensor_key = None


def apply_length_buckets(pair: LanguagePairDataset, num_buckets: int) -> LanguagePairDataset:
    """Bucket `pair` (built with ``num_buckets=0``) in place as ``LanguagePairDataset(num_buckets=...)`` would."""
    if pair.buckets is not None:
        raise ValueError("the dataset is already bucketed")
    pair.src = LengthBucketPadDataset(pair.src, pair.src_sizes, num_buckets, pair.src_dict.pad(),
                                      pair.left_pad_source)
    pair.src_sizes = pair.src.sizes
    logger.info("bucketing source lengths: %s", [int(b) for b in pair.src.buckets])
    if pair.tgt is not None:
        pair.tgt = LengthBucketPadDataset(pair.tgt, pair.tgt_sizes, num_buckets, pair.tgt_dict.pad(),
                                          pair.left_pad_target)
        pair.tgt_sizes = pair.tgt.sizes
        logger.info("bucketing target lengths: %s", [int(b) for b in pair.tgt.buckets])
    # LanguagePairDataset.num_tokens of every example (the longer bucketed side), vectorized.
    tgt_sizes = pair.tgt_sizes if pair.tgt_sizes is not None else 0
    pair.bucketed_num_tokens = np.maximum(pair.src_sizes, tgt_sizes).astype(np.int64)
    pair.buckets = [(None, int(n)) for n in np.unique(pair.bucketed_num_tokens)]
    return pair
