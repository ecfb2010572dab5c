"""Cross-lingual (XL) source positions next to fairseq's LanguagePairDataset.

Storage: one fairseq mmap indexed dataset per split, ``{data_bin}/{split}.{src}-{tgt}.xlpos.{bin,idx}``
(:func:`xl_positions_prefix`), written by ``xlpos-prep binarize``.  Item i holds the raw 0-based XL position of
each source piece of sentence i, EOS not included: a permutation of 0..N-1 where N = source tokens - 1.  The name
always uses the task's source-target order (the XL positions belong to the source side), whichever order
fairseq-preprocess used for the token files.

Model convention (fairseq's, as in ``utils.make_positions``): a real token with XL position x carries
x + padding_idx + 1, EOS carries N + padding_idx + 1 and pads carry padding_idx.  The collated tensor
``net_input["src_xl_positions"]`` has the shape and padding side of ``src_tokens``; with identity positions it is
exactly what fairseq computes as absolute positions.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, LanguagePairDataset, data_utils, indexed_dataset

from xlpos.data.contrastive_positions import SPLIT_SENTENCE, PositionNoise, XLContrast
from xlpos_prep.binarize import source_tokens_prefix, xl_positions_prefix  # noqa: F401  (the files' names)

XL_POSITIONS_KEY = "src_xl_positions"  # the net_input key the encoder reads
_ITEM_KEY = "xl_positions"  # per-sample key: the raw 0-based positions of the pieces (no EOS)


def binarize_command(data_bin: str, split: str, source_lang: str, target_lang: str) -> str:
    return (f"xlpos-prep binarize --xlpos {split}.xlpos --data-bin {data_bin} --split {split} "
            f"--source-lang {source_lang} --target-lang {target_lang}")


def load_xl_positions(data_bin: str, split: str, source_lang: str, target_lang: str):
    """The mmap dataset of a split's raw XL positions; a missing file is an error that says how to make it."""
    prefix = xl_positions_prefix(data_bin, split, source_lang, target_lang)
    if not indexed_dataset.MMapIndexedDataset.exists(prefix):
        missing = [p for p in (prefix + ".bin", prefix + ".idx") if not os.path.exists(p)]
        raise FileNotFoundError(
            f"XL positions not found: {', '.join(missing)}. Binarize them with `"
            f"{binarize_command(data_bin, split, source_lang, target_lang)}` (the .xlpos file comes from "
            f"`xlpos-prep positions`), or use --xl-positions monotone to train/evaluate with XL = absolute positions")
    return indexed_dataset.MMapIndexedDataset(prefix)


def check_xl_positions_match_source(xl_sizes: np.ndarray, source_sizes: np.ndarray, xl_name: str,
                                    source_name: str) -> None:
    """Every sentence needs one XL position per source token except EOS; the first mismatch is an error."""
    if len(xl_sizes) != len(source_sizes):
        raise ValueError(f"{xl_name}: {len(xl_sizes)} sentences but {source_name} has {len(source_sizes)}; "
                         "re-run xlpos-prep binarize on the current data-bin")
    bad = np.nonzero(np.asarray(xl_sizes, dtype=np.int64) + 1 != np.asarray(source_sizes, dtype=np.int64))[0]
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"{xl_name}: line {i + 1} has {int(xl_sizes[i])} XL positions but {source_name} has "
                         f"{int(source_sizes[i]) - 1} source tokens (+ EOS); re-run xlpos-prep binarize on the "
                         "current data-bin")


def model_positions(raw: torch.Tensor, padding_idx: int) -> torch.Tensor:
    """Raw 0-based XL positions of N pieces -> fairseq convention with EOS appended (length N + 1).

    Built in numpy: it runs once per training example in the data loader, where a few small torch operations
    cost several times fairseq's own read of the example (benchmarks/xl_data_path.py)."""
    values = raw.numpy() if raw.device.type == "cpu" else raw.cpu().numpy()
    n = values.shape[0]
    out = np.empty(n + 1, dtype=np.int64)
    out[:n] = values
    out[n] = n
    out += padding_idx + 1
    return torch.from_numpy(out)


def rerank(raw: torch.Tensor) -> torch.Tensor:
    """Dense 0-based ranks of distinct values: the XL order of the kept pieces of a truncated sentence."""
    return torch.argsort(torch.argsort(raw))


def place_like_tokens(src_tokens: torch.Tensor, rows: Sequence[torch.Tensor], padding_idx: int,
                      ids: Optional[Sequence[int]] = None) -> torch.Tensor:
    """Put row i's positions on the non-pad cells of src_tokens[i], in order; pads get padding_idx.

    Filling the non-pad cells (rather than re-padding) keeps whatever layout fairseq chose: left or right
    padding, --required-seq-len-multiple, bucketed lengths.
    """
    mask = src_tokens.ne(padding_idx)
    counts = mask.sum(dim=1).tolist()
    for i, (row, count) in enumerate(zip(rows, counts)):
        if row.numel() != count:
            which = f"example {ids[i]}" if ids is not None else f"batch row {i}"
            raise ValueError(f"{which}: {row.numel()} XL positions (with EOS) for {count} source tokens")
    out = torch.full_like(src_tokens, padding_idx)
    if rows:
        out[mask] = torch.cat(list(rows)).to(out.device)  # one transfer for the batch when out is on a GPU
    return out


def place_raw_like_tokens(src_tokens: torch.Tensor, rows: Sequence[torch.Tensor], padding_idx: int,
                          ids: Sequence[int]) -> torch.Tensor:
    """place_like_tokens of raw positions (N per row, no EOS): the whole batch put into fairseq's convention at
    once, with EOS at position N, in a few numpy operations instead of several per example (what the data loader
    spends on XL positions: benchmarks/xl_data_path.py)."""
    mask = src_tokens.ne(padding_idx)
    counts = mask.sum(dim=1).numpy() if src_tokens.device.type == "cpu" else mask.sum(dim=1).cpu().numpy()
    lengths = np.fromiter((row.shape[0] for row in rows), dtype=np.int64, count=len(rows))
    wrong = np.nonzero(lengths + 1 != counts)[0]
    if len(wrong):
        i = int(wrong[0])
        raise ValueError(f"example {ids[i]}: {lengths[i] + 1} XL positions (with EOS) for {counts[i]} source tokens")
    out = torch.full_like(src_tokens, padding_idx)
    if len(rows):
        flat = np.empty(int(counts.sum()), dtype=np.int64)
        eos = np.cumsum(counts) - 1
        is_eos = np.zeros(len(flat), dtype=bool)
        is_eos[eos] = True
        flat[~is_eos] = np.concatenate([row.numpy() for row in rows])
        flat[eos] = lengths
        flat += padding_idx + 1
        out[mask] = torch.from_numpy(flat).to(out.device)
    return out


class LanguagePairWithXLPositionsDataset(BaseWrapperDataset):
    """A LanguagePairDataset whose batches also carry ``net_input["src_xl_positions"]``.

    Args:
        dataset: the language-pair dataset (its sampling, filtering, batching and collation are kept).
        xl_positions: indexable of raw 0-based XL positions per example, aligned with ``dataset`` (a fairseq
            indexed dataset or a list of tensors); None for monotone positions (XL = absolute).
        name: what to call the positions in error messages (e.g. their file prefix).
        truncate_source: the source was truncated (--truncate-source); positions of a truncated sentence are
            re-ranked over the kept pieces, so they stay a permutation. Without it a length mismatch is an error.
        contrast: ``--xl-contrast`` applied to every example (keyed by its index), after truncation, so the
            permutation is made over the pieces the model actually sees.
        noise: ``--xl-position-noise`` (training splits), applied last, anew in every epoch (set_epoch).
    """

    def __init__(self, dataset: LanguagePairDataset, xl_positions: Optional[Sequence[torch.Tensor]],
                 name: str = "XL positions", truncate_source: bool = False, contrast: Optional[XLContrast] = None,
                 noise: Optional[PositionNoise] = None):
        super().__init__(dataset)
        self.noise = noise if noise is not None and noise.strength > 0 else None
        self.epoch = 1
        if xl_positions is not None and len(xl_positions) != len(dataset):
            raise ValueError(f"{name}: {len(xl_positions)} sentences for a dataset of {len(dataset)}")
        self.xl_positions = xl_positions
        self.name = name
        self.truncate_source = truncate_source
        self.contrast = contrast if contrast is not None and contrast.active else None
        self.padding_idx = dataset.src_dict.pad()
        self.padded_items = getattr(dataset, "buckets", None) is not None

    def raw_positions(self, index: int, num_tokens: int) -> torch.Tensor:
        """Raw XL positions for example `index` whose source has `num_tokens` tokens including EOS."""
        pieces = num_tokens - 1
        if self.xl_positions is None:
            return torch.arange(pieces, dtype=torch.long)
        raw = self.xl_positions[index].long()
        if raw.numel() == pieces:
            return raw
        if self.truncate_source and raw.numel() > pieces:
            return rerank(raw[:pieces])
        raise ValueError(
            f"{self.name}: sentence {index + 1} has {raw.numel()} XL positions but its source has {pieces} tokens "
            "(+ EOS) in this task; options that add or remove source tokens (prepend_bos, append_source_id, ...) "
            "are not supported with XL positions")

    def __getitem__(self, index: int) -> dict:
        item = self.dataset[index]
        source = item["source"]
        # a LanguagePairDataset example is unpadded unless it buckets lengths (--num-batch-buckets pads each one)
        raw = self.raw_positions(index, int(source.ne(self.padding_idx).sum()) if self.padded_items else
                                 source.numel())
        if self.contrast is not None:
            pieces = source[source.ne(self.padding_idx)][:-1]  # EOS excluded
            raw = self.contrast.apply(pieces, raw if self.xl_positions is not None else None, SPLIT_SENTENCE, index)
        if self.noise is not None:
            raw = self.noise.apply(source[source.ne(self.padding_idx)][:-1], raw, self.epoch, index)
        item[_ITEM_KEY] = raw  # put into the model's convention per batch (collater)
        return item

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        self.epoch = epoch

    def collater(self, samples: list, pad_to_length: Optional[dict] = None) -> dict:
        batch = self.dataset.collater(samples, pad_to_length=pad_to_length)
        if not batch:
            return batch
        # collate() sorts examples by descending source length; match rows by example id, not by sample order.
        by_id = {int(s["id"]): s[_ITEM_KEY] for s in samples}
        ids = batch["id"].tolist()
        src_tokens = batch["net_input"]["src_tokens"]
        batch["net_input"][XL_POSITIONS_KEY] = place_raw_like_tokens(
            src_tokens, [by_id[i] for i in ids], self.padding_idx, ids)
        return batch

    # LanguagePairDataset attributes other fairseq code reads from task.dataset(split).
    @property
    def src(self):
        return self.dataset.src

    @property
    def tgt(self):
        return self.dataset.tgt

    @property
    def src_dict(self):
        return self.dataset.src_dict

    @property
    def tgt_dict(self):
        return self.dataset.tgt_dict

    @property
    def src_sizes(self):
        return self.dataset.src_sizes

    @property
    def tgt_sizes(self):
        return self.dataset.tgt_sizes

    @property
    def left_pad_source(self) -> bool:
        return self.dataset.left_pad_source

    def num_tokens_vec(self, indices):
        return self.dataset.num_tokens_vec(indices)

    def batch_by_size(self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
        """fairseq's batches, plus the final one that fairseq 0.12 drops when its size is not a multiple of
        --required-batch-size-multiple (default 8): without it fairseq-generate silently skips up to 7 test
        sentences and every epoch skips its last examples (facebookresearch/fairseq#5036)."""
        if self.dataset.get_batch_shapes() is not None and max_tokens is None:
            # fairseq's bare `assert` otherwise; each bucket's batch size is derived from --max-tokens
            raise ValueError("--num-batch-buckets needs --max-tokens (fairseq sizes each bucket's batches by it)")
        batches = list(self.dataset.batch_by_size(indices, max_tokens=max_tokens, max_sentences=max_sentences,
                                                  required_batch_size_multiple=required_batch_size_multiple))
        indices = np.asarray(indices, dtype=np.int64)
        covered = sum(len(b) for b in batches)
        # Batches are consecutive runs of `indices`; only a tail can be missing, and it formed one valid batch.
        if self.dataset.get_batch_shapes() is None and covered < len(indices):
            batches.append(indices[covered:])
        return batches


def concat_like_source(parts: list, upsample_primary: int):
    """Combine XL-position shards exactly as load_langpair_dataset combines the source shards."""
    if len(parts) == 1:
        return parts[0]
    from fairseq.data import ConcatDataset

    ratios = [1] * len(parts)
    ratios[0] = upsample_primary
    return ConcatDataset(parts, ratios)


def load_source_sizes(prefix: str, dictionary, dataset_impl: Optional[str]) -> np.ndarray:
    dataset = data_utils.load_indexed_dataset(prefix, dictionary, dataset_impl)
    if dataset is None:
        raise FileNotFoundError(f"binarized source not found: {prefix}.bin/.idx")
    # A copy: fairseq's mmap sizes are a view that dies with the dataset object.
    return np.array(dataset.sizes, dtype=np.int64)
