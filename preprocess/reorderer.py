"""The discriminative BTG reorderer: word encoding, the model file, training, and the `train-reorderer` /
`reorder` commands. The forest, features and CKY live in `xlpos_prep.btg` (this folder).

Model file: one `.npz` (numpy.savez, loaded with allow_pickle=False) holding
  header          a JSON string: {"format": "xlpos-btg-reorderer", "version": 1, "config": {...}, "training": {...}}
  weight_index    uint32 positions of the non-zero weights in the flat (2**hash_bits * 3) weight vector
  weight_value    float32 values (the averaged weights used for reordering)
A model with a classK word view keeps its word classes in the header (training.word_classes: word -> class).
And, when trained with --resumable, the raw learner state (state_index, state_weight, state_sum, float64) so
`--resume` continues exactly where training stopped.
The header's "complete" is false in the per-iteration snapshot `MODEL.snapshot` that `train-reorderer` keeps while
it runs (with the learner state, for `--resume` after an interruption); the model path itself only ever receives
the finished model. Loading an incomplete model for reordering is refused.

How the defaults were chosen, and what they score: docs/reorderer.md.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import logging
import os
import resource
import sys
import time
import zipfile
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Iterable, Sequence, Sized, Union

import numpy as np
from numba import typeof
from tqdm import tqdm

from . import btg, wordclass
from .io import (SEED, WORKERS, InputError, Shard, atomic_output, count_sentences, declare_files, float_option,
                 fork_pool, int_option, iter_tokens, pool_worker_setup, read_tokens, shard_option)
from .sentence_bounds import parse_in_pieces, sentence_cuts
from .source_vocab import SourceVocabulary, language_of_path

if TYPE_CHECKING:
    from .neural_reorderer import NeuralReorderer

logger = logging.getLogger(__name__)

FORMAT_NAME = "xlpos-btg-reorderer"
FORMAT_VERSION = 1
NEURAL_FORMAT_NAME = "xlpos-neural-btg-reorderer"  # xlpos_prep.neural_reorderer's format (it imports this module)
KINDS = ("linear", "neural")

FEATURE_GROUPS = {"span": btg.FEAT_SPAN, "children": btg.FEAT_CHILDREN, "terminal": btg.FEAT_TERMINAL,
                  "outside-child": btg.FEAT_OUTSIDE_CHILD, "junction": btg.FEAT_JUNCTION, "wide": btg.FEAT_WIDE,
                  "context": btg.FEAT_CONTEXT}
LOSSES = ("tau", "chunk", "tau+chunk")
UPDATES = {"perceptron": btg.UPDATE_PERCEPTRON, "pa": btg.UPDATE_PA}
LOSS_NORMS = ("none", "sentence")
# train-reorderer's defaults where they differ from ReordererConfig's (which stay those of models made before them,
# and need no word classes): measured on Tanaka dev at 50k, see docs/reorderer.md
CLI_HASH_BITS = 22
# + "context" (issue 15): half the dev gap to the oracle in both directions; with the fallback below, at or above
# monotone on every stress set (docs/reorderer.md)
CLI_FEATURES = ("span", "children", "terminal", "outside-child", "wide", "context")
CLI_VIEWS = ("word",)
CLI_INVERT_MARGIN = 1.0
# the sentence-level fallback (ReordererConfig.fallback_margin), chosen on training sentences longer than those
# a model was trained on (docs/reorderer.md, "The sentence-level fallback")
CLI_FALLBACK_MARGIN = 1.5
# train-reorderer: the sentences of a line reordered one by one (both kinds; xlpos_prep.sentence_bounds, measured on
# joined dev sentences in docs/reorderer.md)
CLI_SPLIT_SENTENCES = True
AUTO_INVERT_SPAN = -1  # TrainOptions.max_invert_span: INVERT_SPAN_FACTOR x the longest training sentence
AUTO_FALLBACK_LENGTH = -1  # TrainOptions.fallback_length: the longest training sentence
INVERT_SPAN_FACTOR = 2
BATCH = 256  # sentences per numba call: amortizes dispatch, keeps progress bars moving


# -------------------------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class ReordererConfig:
    """Everything that determines features and inference; stored in the model header."""

    hash_bits: int = 20  # weight rows = 2**hash_bits, times 3 columns (S, I, F)
    max_term: int = 4  # longest F (monotone terminal) span
    max_span: int = 64  # longest span built by CKY; longer sentences are chains of such segments (see btg)
    features: tuple[str, ...] = ("span", "children", "terminal", "outside-child", "wide")
    views: tuple[str, ...] = ("word",)  # word representations: "word", "suffixN", "prefixN" (N = 1..9)
    hash_key: str = "xlpos-btg-1"  # key of the word hash (vocabulary-free: any word gets an id)
    # Abstention at inference (btg.inversion_penalties): an I edge must beat the straight alternative by
    # invert_margin, and spans longer than max_invert_span words (0: no limit) stay straight. Not features: a
    # model can be reordered with other values (`reorder --invert-margin/--max-invert-span`). Models written
    # before these fields existed load with 0 / 0, i.e. exactly as they reordered before.
    invert_margin: float = 0.0
    max_invert_span: int = 0
    # Sentence-level fallback at inference (btg.parse_batch): a sentence of n > fallback_length words keeps the
    # model's order only if its best derivation beats the best straight one (the monotone order) by
    # fallback_margin * (n - fallback_length)**2, else it stays monotone. Training sets fallback_length to its
    # longest sentence. 0 / 0: none (models written before these fields load so, and reorder as before).
    fallback_length: int = 0
    fallback_margin: float = 0.0
    # Each sentence of a line parsed alone, composed straight (xlpos_prep.sentence_bounds). Off in files written
    # before it existed (they reorder as before); train-reorderer turns it on (CLI_SPLIT_SENTENCES).
    split_sentences: bool = False

    def __post_init__(self) -> None:
        if not 8 <= self.hash_bits <= 28:
            raise ValueError(f"hash_bits must be in 8..28, got {self.hash_bits}")
        if self.max_term < 1:
            raise ValueError(f"max_term must be >= 1, got {self.max_term}")
        if self.max_span < 2:
            raise ValueError(f"max_span must be >= 2, got {self.max_span}")
        unknown = [f for f in self.features if f not in FEATURE_GROUPS]
        if unknown:
            raise ValueError(f"unknown feature group(s) {unknown}; known: {list(FEATURE_GROUPS)}")
        if not self.views or len(self.views) > btg.MAX_VIEWS:
            raise ValueError(f"need 1..{btg.MAX_VIEWS} views, got {list(self.views)}")
        for v in self.views:
            _view_function(v)  # validates
        if not (self.invert_margin >= 0 and np.isfinite(self.invert_margin)):
            raise ValueError(f"invert_margin must be finite and >= 0, got {self.invert_margin}")
        if self.max_invert_span < 0:
            raise ValueError(f"max_invert_span must be >= 0 (0: no limit), got {self.max_invert_span}")
        if not (self.fallback_margin >= 0 and np.isfinite(self.fallback_margin)):
            raise ValueError(f"fallback_margin must be finite and >= 0, got {self.fallback_margin}")
        if self.fallback_length < 0:
            raise ValueError(f"fallback_length must be >= 0 (0: no fallback), got {self.fallback_length}")

    @property
    def feature_flags(self) -> int:
        flags = 0
        for f in self.features:
            flags |= FEATURE_GROUPS[f]
        return flags

    @property
    def mask(self) -> np.uint64:
        return np.uint64((1 << self.hash_bits) - 1)

    @property
    def inv_penalty(self) -> np.ndarray:
        return btg.inversion_penalties(self.max_span, self.invert_margin, self.max_invert_span)


@dataclass(frozen=True)
class TrainOptions:
    iterations: int = 10
    loss: str = "tau+chunk"
    update: str = "pa"
    pa_c: float = 0.1  # PA-I aggressiveness cap (largest step)
    loss_norm: str = "none"  # "sentence": tau / pairs and chunk / (n + 1), each sentence's loss in [0, 1]
    chunk_weight: float = 12.0  # weight of one break relative to one discordant pair in tau+chunk
    max_len: int = 100  # training skips longer sentences
    seed: int = 1
    # the model's max_invert_span: AUTO_INVERT_SPAN = twice the longest training sentence used, else that value
    max_invert_span: int = -1
    # the model's fallback_length: AUTO_FALLBACK_LENGTH = the longest training sentence used, else that value
    fallback_length: int = -1

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"--loss must be one of {LOSSES}, got {self.loss!r}")
        if self.update not in UPDATES:
            raise ValueError(f"--update must be one of {list(UPDATES)}, got {self.update!r}")
        if self.loss_norm not in LOSS_NORMS:
            raise ValueError(f"--loss-norm must be one of {LOSS_NORMS}, got {self.loss_norm!r}")
        if self.iterations < 1:
            raise ValueError(f"--iterations must be >= 1, got {self.iterations}")
        if self.max_len < 2:
            raise ValueError(f"--max-len must be >= 2, got {self.max_len}")
        if self.max_invert_span < AUTO_INVERT_SPAN:
            raise ValueError(f"--max-invert-span must be >= 0 or auto, got {self.max_invert_span}")
        if self.fallback_length < AUTO_FALLBACK_LENGTH:
            raise ValueError(f"--fallback-length must be >= 0 or auto, got {self.fallback_length}")


# -------------------------------------------------------------------------------------------------------------
# Words -> ids


def class_view_size(view: str) -> int | None:
    """K of a `classK` view (word classes learned from the training source, xlpos_prep.wordclass), else None."""
    if view.startswith("class") and view[5:].isdigit() and 2 <= int(view[5:]) <= 4096:
        return int(view[5:])
    return None


def _view_function(view: str, classes: dict[str, int] | None = None):
    if view == "word":
        return lambda w: w
    for prefix, fn in (("suffix", lambda n: (lambda w: w[-n:])), ("prefix", lambda n: (lambda w: w[:n]))):
        if view.startswith(prefix) and view[len(prefix):].isdigit() and 1 <= int(view[len(prefix):]) <= 9:
            return fn(int(view[len(prefix):]))
    if class_view_size(view) is not None:
        if classes is None:
            return None  # validation only: the encoder is given the model's classes
        return lambda w: str(classes.get(w, wordclass.UNKNOWN))
    raise ValueError(f"unknown word view {view!r}: use word, suffixN, prefixN (N = 1..9) or classK (K = 2..4096)")


class WordEncoder:
    """Maps words to rows of 64-bit ids (one per view), stable across processes and machines (blake2b)."""

    _BOS = "\x00<s>"
    _EOS = "\x00</s>"

    def __init__(self, views: Sequence[str], hash_key: str, classes: dict[str, int] | None = None):
        self.views = tuple(views)
        if classes is None and any(class_view_size(v) for v in self.views):
            raise ValueError(f"views {list(self.views)} need word classes")
        self._fns = [_view_function(v, classes) for v in self.views]
        self._key = hashlib.blake2b(hash_key.encode("utf-8"), digest_size=32).digest()
        self._cache: dict[str, np.ndarray] = {}
        self._bos = self._ids_of_marker(self._BOS)
        self._eos = self._ids_of_marker(self._EOS)

    def _hash(self, text: str) -> int:
        return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8,
                                              key=self._key).digest(), "little")

    def _ids_of_marker(self, marker: str) -> np.ndarray:
        return np.array([self._hash(v + "\x1f" + marker) for v in self.views], dtype=np.uint64)

    def ids(self, word: str) -> np.ndarray:
        row = self._cache.get(word)
        if row is None:
            row = np.array([self._hash(v + "\x1f" + fn(word)) for v, fn in zip(self.views, self._fns)],
                           dtype=np.uint64)
            if len(self._cache) < 2_000_000:  # bounded, for long-running processes (interactive translation)
                self._cache[word] = row
        return row

    def encode_batch(self, sentences: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
        """(tok, offsets): sentence s is tok[offsets[s]:offsets[s+1]], its words between the two markers."""
        offsets = np.zeros(len(sentences) + 1, dtype=np.int64)
        for s, words in enumerate(sentences):
            offsets[s + 1] = offsets[s] + len(words) + 2
        tok = np.empty((int(offsets[-1]), len(self.views)), dtype=np.uint64)
        for s, words in enumerate(sentences):
            o = int(offsets[s])
            tok[o] = self._bos
            for i, w in enumerate(words, 1):
                tok[o + i] = self.ids(w)
            tok[o + len(words) + 1] = self._eos
        return tok, offsets


# -------------------------------------------------------------------------------------------------------------
# Short jobs on a fresh install

# `reorder` of at most this many sentences parses with btg's numpy path when no compiled kernel is at hand, and
# starts no compilation: btg compiles in a thread the process waits for at exit (so that numba's cache gets the
# code), which made a fresh install's first `reorder` of 20 sentences take the ~10 s of the compile. The numpy
# path does a few hundred short sentences per second, so below this size the compile costs more than it saves.
INTERPRETED_MAX_SENTENCES = 1000


def _parse_interpreted(tok: np.ndarray, offsets: np.ndarray, weights: np.ndarray, mask: np.uint64, max_term: int,
                       max_span: int, flags: int, inv_penalty: np.ndarray, fallback_length: int,
                       fallback_margin: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """btg.parse_batch (same arguments, same output) without compiling: the compiled kernel when this process
    has it or numba's cache holds it (loading that takes a fraction of a second), else btg's numpy path, which
    gives the kernel's derivations (tests/test_cold_start.py), fallback included."""
    args = (tok, offsets, weights, mask, max_term, max_span, flags, inv_penalty)
    if btg._parse_batch_jit.overloads or btg._in_disk_cache(tuple(typeof(a) for a in args)):
        return btg.parse_batch(*args, fallback_length, fallback_margin)

    def never() -> bool:
        return False

    orders, edges, scores, _ = btg._np_parse_batch(*args, never)
    lengths = np.diff(offsets) - 2
    thresholds = btg.fallback_thresholds(lengths, fallback_length, fallback_margin)
    tested = np.flatnonzero(thresholds > 0)
    if tested.size:
        sub_tok = np.concatenate([tok[offsets[s]:offsets[s + 1]] for s in tested])
        sub_offsets = np.zeros(tested.size + 1, dtype=np.int64)
        np.cumsum(lengths[tested] + 2, out=sub_offsets[1:])
        straight = np.full(max_span + 1, 1e30)  # btg.parse_batch's search for the best straight derivation
        s_orders, s_edges, s_scores, _ = btg._np_parse_batch(sub_tok, sub_offsets, weights, mask, max_term,
                                                             max_span, flags, straight, never)
        for j, s in enumerate(tested):
            if scores[s] - s_scores[j] < thresholds[s]:
                orders[s], edges[s] = s_orders[j], s_edges[j]
    return btg._concat(orders, edges)


# -------------------------------------------------------------------------------------------------------------
# The model


class ModelFileError(ValueError):
    """A model file that is not a readable xlpos reorderer of a supported version (one-line message)."""


class Reorderer:
    """A trained BTG reorderer. `reorder(words)` gives the source indices in predicted target order."""

    kind = "linear"

    def __init__(self, config: ReordererConfig, weights: np.ndarray, training: dict | None = None,
                 state: tuple[np.ndarray, np.ndarray] | None = None, complete: bool = True,
                 origin: str = "the model", classes: dict[str, int] | None = None,
                 source: SourceVocabulary | None = None):
        expected = (1 << config.hash_bits) * btg.N_COLUMNS
        if weights.shape != (expected,):
            raise ValueError(f"weights must have shape ({expected},), got {weights.shape}")
        self.config = config
        # Stored as float32 in the file; held as float64 (of float32 values) so inference and training share one
        # compiled version of the scoring code, and a loaded model scores exactly as the one that was saved.
        self.weights = np.asarray(weights, dtype=np.float32).astype(np.float64)
        self.training = dict(training or {})
        self.state = state  # (raw weights, averaging sums) float64 when saved --resumable
        self.complete = complete  # False: a snapshot of training that has not finished
        self.origin = origin  # the file it was loaded from, for messages
        # word -> class of a classK view, learned by training and kept in training["word_classes"] (the header), so
        # that a Reorderer(config, weights, training) made from a loaded model's parts keeps them
        if classes is None and "word_classes" in self.training:
            classes = {str(w): int(c) for w, c in self.training["word_classes"].items()}
        elif classes is not None:
            self.training["word_classes"] = dict(classes)
        self.classes = classes
        self.source = source  # language and word set of the training source (models written before: None)
        self.encoder = WordEncoder(config.views, config.hash_key, classes)
        self._inv_penalty = config.inv_penalty
        # True: parse with btg's numpy path and start no compilation (a short job that would otherwise wait for
        # the compile to finish before its process exits; `reorder` sets it for small inputs)
        self.interpreted = False

    def with_abstention(self, invert_margin: float | None = None, max_invert_span: int | None = None,
                        fallback_margin: float | None = None, fallback_length: int | None = None,
                        split_sentences: bool | None = None) -> "Reorderer":
        """The same weights reordering with other inference settings (None: keep the model's)."""
        changes = {k: v for k, v in (("invert_margin", invert_margin), ("max_invert_span", max_invert_span),
                                     ("fallback_margin", fallback_margin), ("fallback_length", fallback_length),
                                     ("split_sentences", split_sentences))
                   if v is not None}
        if not changes:
            return self
        return Reorderer(replace(self.config, **changes), self.weights, self.training, self.state, self.complete,
                         self.origin, self.classes, self.source)

    def stripped(self) -> "Reorderer":
        """The model without learner state (what inference needs)."""
        return Reorderer(self.config, self.weights, self.training, None, self.complete, self.origin, self.classes,
                         self.source)

    # --- inference -------------------------------------------------------------------------------------------

    def parse_batch(self, sentences: Sequence[Sequence[str]]) -> list[btg.ParseResult]:
        """Best derivations, in input order; with split_sentences each sentence of a line alone, composed straight."""
        if self.config.split_sentences:
            return parse_in_pieces(self._parse_lines, sentences, sentence_cuts)
        return self._parse_lines(sentences)

    def _parse_lines(self, sentences: Sequence[Sequence[str]]) -> list[btg.ParseResult]:
        if not sentences:
            return []
        tok, offsets = self.encoder.encode_batch(sentences)
        c = self.config
        parse = _parse_interpreted if self.interpreted else btg.parse_batch
        orders, order_offsets, edges, edge_offsets = parse(
            tok, offsets, self.weights, c.mask, c.max_term, c.max_span, c.feature_flags, self._inv_penalty,
            c.fallback_length, c.fallback_margin)
        return [btg.ParseResult(orders[order_offsets[s]:order_offsets[s + 1]],
                                edges[edge_offsets[s]:edge_offsets[s + 1]]) for s in range(len(sentences))]

    def reorder_batch(self, sentences: Sequence[Sequence[str]]) -> list[list[int]]:
        out: list[list[int]] = []
        for start in range(0, len(sentences), BATCH):
            out.extend(p.order.tolist() for p in self.parse_batch(sentences[start:start + BATCH]))
        return out

    def reorder(self, words: Sequence[str]) -> list[int]:
        return self.reorder_batch([words])[0]

    def tree(self, words: Sequence[str]) -> str:
        """The best derivation as a bracketed tree, e.g. (S (F a b) (I (F c) (F d))) for the order a b d c."""
        return btg.tree_string(self.parse_batch([words])[0].edges, list(words))

    # --- file ------------------------------------------------------------------------------------------------

    def header(self) -> dict:
        config = asdict(self.config)
        config["features"] = list(self.config.features)
        config["views"] = list(self.config.views)
        header = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "config": config, "training": self.training,
                  "complete": self.complete}
        if self.source is not None:
            header["source"] = self.source.header()
        return header

    def save(self, path: str) -> None:
        """Write the model atomically (temporary file + rename)."""
        nz = np.flatnonzero(self.weights).astype(np.uint32)
        arrays = {"header": np.array(json.dumps(self.header(), sort_keys=True)),
                  "weight_index": nz, "weight_value": self.weights[nz].astype(np.float32)}
        if self.state is not None:
            w, u = self.state
            snz = np.flatnonzero((w != 0) | (u != 0)).astype(np.uint32)
            arrays.update(state_index=snz, state_weight=w[snz], state_sum=u[snz])
        if self.source is not None:
            arrays["source_bits"] = self.source.bits
        with atomic_output(path, "wb") as f:
            np.savez(f, **arrays)

    @classmethod
    def load(cls, path: str, allow_incomplete: bool = False) -> "Reorderer":
        """Read a linear model file; a snapshot of unfinished training is refused unless `allow_incomplete`.
        `load_reorderer` reads either kind."""
        header, arrays = read_model_file(path)
        if header["format"] != FORMAT_NAME:
            raise ModelFileError(f"{path}: not a linear xlpos reorderer (format {header['format']!r}; "
                                 f"xlpos_prep.reorderer.load_reorderer reads every kind)")
        return cls.from_arrays(path, header, arrays, allow_incomplete)

    @classmethod
    def from_arrays(cls, path: str, header: dict, arrays: dict[str, np.ndarray],
                    allow_incomplete: bool = False) -> "Reorderer":
        """A linear model from a read model file's header and arrays (see `read_model_file`)."""
        if header.get("version") != FORMAT_VERSION:
            raise ModelFileError(f"{path}: unsupported version {header.get('version')} of {FORMAT_NAME} "
                                 f"(this xlpos reads version {FORMAT_VERSION})")
        try:
            cfg = dict(header["config"])
            cfg["features"] = tuple(cfg["features"])
            cfg["views"] = tuple(cfg["views"])
            config = ReordererConfig(**cfg)
            size = (1 << config.hash_bits) * btg.N_COLUMNS
            weights = np.zeros(size)
            weights[arrays["weight_index"].astype(np.int64)] = arrays["weight_value"]
            state = None
            if "state_index" in arrays:
                w = np.zeros(size)
                u = np.zeros(size)
                idx = arrays["state_index"].astype(np.int64)
                w[idx] = arrays["state_weight"]
                u[idx] = arrays["state_sum"]
                state = (w, u)
            training = header.get("training", {})
            if any(class_view_size(v) for v in config.views) and not (
                    isinstance(training, dict) and isinstance(training.get("word_classes"), dict)):
                raise KeyError("training.word_classes")
            source = (SourceVocabulary.from_file(header["source"], arrays["source_bits"])
                      if "source" in header else None)
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise ModelFileError(f"{path}: corrupt xlpos reorderer model ({type(e).__name__}: {e})") from None
        if not np.isfinite(weights).all() or (state is not None and not all(np.isfinite(a).all() for a in state)):
            raise ModelFileError(f"{path}: the model has non-finite weights (NaN or inf): refusing it")
        complete = header.get("complete", True) is not False  # models written before the flag are complete
        if not complete and not allow_incomplete:
            options = training.get("options", {}) if isinstance(training, dict) else {}
            raise ModelFileError(
                f"{path}: an incomplete reorderer (a snapshot of training stopped after "
                f"{training.get('iterations_done', '?')} of {options.get('iterations', '?')} iterations); finish "
                f"it with `xlpos-prep train-reorderer ... --resume`")
        return cls(config, weights, training, state, complete=complete, origin=path, source=source)


def read_model_file(path: str) -> tuple[dict, dict[str, np.ndarray]]:
    """(header, arrays) of a reorderer model file of any kind, or a one-line error naming the file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such model file")
    if not zipfile.is_zipfile(path):
        raise ModelFileError(f"{path}: not an xlpos reorderer model (not an .npz archive)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as e:
        raise ModelFileError(f"{path}: not an xlpos reorderer model (cannot read it as .npz: "
                             f"{str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    try:
        header = json.loads(str(arrays["header"]))
        fmt = header["format"]
    except (KeyError, ValueError, TypeError):
        raise ModelFileError(f"{path}: not an xlpos reorderer model (no valid header)") from None
    if fmt not in (FORMAT_NAME, NEURAL_FORMAT_NAME):
        raise ModelFileError(f"{path}: not an xlpos reorderer model (format {fmt!r})")
    return header, arrays


AnyReorderer = Union["Reorderer", "NeuralReorderer"]


def load_reorderer(path: str, allow_incomplete: bool = False) -> AnyReorderer:
    """Read a reorderer model file of either kind (linear or neural), told apart by the format in its header.

    Every command and library entry point that reads a model goes through here; a snapshot of unfinished
    training is refused unless `allow_incomplete`, a model with non-finite weights always."""
    header, arrays = read_model_file(path)
    if header["format"] == NEURAL_FORMAT_NAME:
        from .neural_reorderer import NeuralReorderer
        return NeuralReorderer.from_arrays(path, header, arrays, allow_incomplete)
    return Reorderer.from_arrays(path, header, arrays, allow_incomplete)


# -------------------------------------------------------------------------------------------------------------
# Training


@dataclass
class DevSet:
    sentences: list[list[str]]
    ranks: list[list[int]]


@dataclass
class IterationReport:
    iteration: int
    updates: int
    train_loss: float  # mean loss of the loss-augmented derivations
    oracle_loss: float  # mean loss of the latent oracle derivations (0 when the forest reaches the oracle)
    seconds: float
    dev: dict | None = None


def _loss_weights(ranks: list[list[int]], options: TrainOptions) -> tuple[np.ndarray, np.ndarray]:
    """Per-sentence weights of one discordant pair and of one break."""
    use_tau = options.loss in ("tau", "tau+chunk")
    use_chunk = options.loss in ("chunk", "tau+chunk")
    tw = np.zeros(len(ranks))
    cw = np.zeros(len(ranks))
    for s, r in enumerate(ranks):
        n = len(r)
        if options.loss_norm == "sentence":
            counts = np.bincount(np.asarray(r, dtype=np.int64)) if n else np.zeros(0, dtype=np.int64)
            pairs = n * (n - 1) // 2 - int((counts * (counts - 1) // 2).sum())
            tw[s] = (1.0 / pairs) if (use_tau and pairs) else 0.0
            cw[s] = options.chunk_weight / (n + 1) if use_chunk else 0.0
        else:
            tw[s] = 1.0 if use_tau else 0.0
            cw[s] = options.chunk_weight if use_chunk else 0.0
    return tw, cw


def _flat_ranks(ranks: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(ranks) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in ranks])
    flat = np.fromiter((x for r in ranks for x in r), dtype=np.int64, count=int(offsets[-1]))
    return flat, offsets


def evaluate(reorderer: Reorderer, dev: DevSet) -> dict:
    from .metrics import evaluate_orders
    scores = evaluate_orders(reorderer.reorder_batch(dev.sentences), dev.ranks)
    return asdict(scores)


def _selection_score(dev_scores: dict) -> float:
    # Both quality targets matter equally: keep the iteration with the best corpus tau + corpus FRS.
    return dev_scores["corpus_tau"] + dev_scores["corpus_frs"]


def check_parallel(sentences: list[list[str]], ranks: list[list[int]]) -> None:
    """Training sentences and their oracle ranks must be parallel, word for word."""
    if len(sentences) != len(ranks):
        raise ValueError(f"{len(sentences)} sentences but {len(ranks)} oracle rank lines")
    for s, (w, r) in enumerate(zip(sentences, ranks)):
        if len(w) != len(r):
            raise ValueError(f"sentence {s + 1}: {len(w)} words but {len(r)} oracle ranks")


def train(sentences: list[list[str]], ranks: list[list[int]], config: ReordererConfig = ReordererConfig(),
          options: TrainOptions = TrainOptions(), dev: DevSet | None = None, resume: Reorderer | None = None,
          on_iteration=None, progress: bool = True, src_lang: str | None = None) -> Reorderer:
    """Train a reorderer with the latent-derivation online learner (see btg.train_batch).

    `ranks` must be dense oracle ranks (preprocess.oracle.read_oracle checks that). With `dev`, the averaged
    weights of the iteration with the best dev corpus tau + FRS are kept; without, those of the last iteration.
    `on_iteration(reorderer, report)` is called after each iteration (the CLI saves the model there).
    `resume` continues a model saved with its learner state (same config and options except iterations).
    The model records `src_lang` and the set of training words (`reorder` warns when its input is mostly others).
    """
    check_parallel(sentences, ranks)
    keep = [s for s, w in enumerate(sentences) if 2 <= len(w) <= options.max_len]
    too_long = sum(len(w) > options.max_len for w in sentences)
    if too_long:
        logger.info("skipping %d of %d training sentences longer than --max-len %d", too_long, len(sentences),
                    options.max_len)
    if not keep:
        raise ValueError("no training sentence of 2..max-len words")
    classes = None
    source = SourceVocabulary.build(sentences, src_lang)
    if resume is not None:
        classes = resume.classes
        source = resume.source
        if "fallback_length" not in resume.training.get("options", {}):
            # a model from before the fallback (its config has none): resumed as it was begun
            options = replace(options, fallback_length=0)
    else:
        sizes = [k for k in (class_view_size(v) for v in config.views) if k]
        if len(set(sizes)) > 1:
            raise ValueError(f"at most one number of word classes, got views {list(config.views)}")
        if sizes:
            t0 = time.perf_counter()
            classes = wordclass.learn_classes([sentences[s] for s in keep], sizes[0], seed=options.seed)
            logger.info("learned %d word classes for %d words in %.1fs", sizes[0], len(classes),
                        time.perf_counter() - t0)
    longest = max(len(sentences[s]) for s in keep)
    config = replace(config, max_invert_span=(INVERT_SPAN_FACTOR * longest if options.max_invert_span ==
                                              AUTO_INVERT_SPAN else options.max_invert_span),
                     fallback_length=(longest if options.fallback_length == AUTO_FALLBACK_LENGTH
                                      else options.fallback_length))
    logger.info("inverted spans of up to %s words when reordering (the longest training sentence has %d)%s",
                config.max_invert_span or "any number of", longest,
                f"; sentences longer than {config.fallback_length} words fall back to monotone unless the model "
                f"beats it by {config.fallback_margin:g} x (words over {config.fallback_length})^2"
                if config.fallback_margin > 0 and config.fallback_length > 0 else "")
    encoder = WordEncoder(config.views, config.hash_key, classes)
    train_sents = [sentences[s] for s in keep]
    train_ranks = [ranks[s] for s in keep]
    tok, offsets = encoder.encode_batch(train_sents)
    flat_ranks, rank_offsets = _flat_ranks(train_ranks)
    tau_w, chunk_w = _loss_weights(train_ranks, options)

    size = (1 << config.hash_bits) * btg.N_COLUMNS
    counter = np.zeros(1)
    history: list[dict] = []
    start_iteration = 0
    best = None  # (selection score, iteration, averaged weights, dev scores)
    if resume is not None:
        if resume.state is None:
            raise ValueError(f"{resume.origin}: the model to resume holds no learner state: train it with "
                             f"--resumable")
        if resume.config != config:
            raise ValueError(f"{resume.origin}: --resume: the model was trained with {resume.config}, not {config}")
        prev = resume.training
        prev_opts = {k: v for k, v in prev.get("options", {}).items() if k != "iterations"}
        prev_opts.setdefault("fallback_length", 0)  # written before the option existed: no fallback
        if prev_opts != {k: v for k, v in asdict(options).items() if k != "iterations"}:
            raise ValueError(f"{resume.origin}: --resume: the model was trained with options {prev.get('options')}, "
                             f"not {asdict(options)}")
        weights, sums = (a.copy() for a in resume.state)
        counter[0] = float(prev["counter"])
        start_iteration = int(prev["iterations_done"])
        history = list(prev.get("history", []))
        if dev is not None and prev.get("best_iteration"):
            best = (float(prev["best_selection"]), int(prev["best_iteration"]), resume.weights.copy(), None)
        if start_iteration >= options.iterations:
            logger.info("the model already has %d iterations (asked for %d): nothing to do", start_iteration,
                        options.iterations)
    else:
        weights = np.zeros(size)
        sums = np.zeros(size)
    update_rule = UPDATES[options.update]
    flags = config.feature_flags
    model = resume
    for iteration in range(start_iteration, options.iterations):
        t0 = time.perf_counter()
        # The shuffle of iteration i depends only on (seed, i): a resumed run sees the same orders.
        perm = np.random.default_rng([options.seed, iteration]).permutation(len(train_sents)).astype(np.int64)
        updates = 0
        pred_loss = orc_loss = 0.0
        with tqdm(total=len(perm), desc=f"train iteration {iteration + 1}/{options.iterations}", unit="sent",
                  file=sys.stderr, disable=None if progress else True, mininterval=1.0, leave=False) as bar:
            for b in range(0, len(perm), BATCH):
                batch = perm[b:b + BATCH]
                u, lp, lo, _, _ = btg.train_batch(tok, offsets, flat_ranks, rank_offsets, batch, weights, sums,
                                                  counter, config.mask, config.max_term, config.max_span, flags,
                                                  tau_w, chunk_w, update_rule, options.pa_c)
                updates += u
                pred_loss += lp
                orc_loss += lo
                bar.update(len(batch))
        averaged = (weights - sums / counter[0]).astype(np.float32)
        report = IterationReport(iteration + 1, updates, pred_loss / len(perm), orc_loss / len(perm),
                                 time.perf_counter() - t0)
        training = {"options": asdict(options), "iterations_done": iteration + 1, "counter": counter[0],
                    "train_sentences": len(train_sents), "skipped_too_long": too_long}
        candidate = Reorderer(config, averaged, training, classes=classes)
        if dev is not None:
            report.dev = evaluate(candidate, dev)
            sel = _selection_score(report.dev)
            if best is None or sel > best[0]:
                best = (sel, iteration + 1, averaged, report.dev)
        history.append(asdict(report))
        training["history"] = history
        if best is not None:
            training.update(best_iteration=best[1], best_selection=best[0])
            model = Reorderer(config, best[2], training, (weights, sums), classes=classes, source=source)
        else:
            model = Reorderer(config, averaged, training, (weights, sums), classes=classes, source=source)
        logger.info("iteration %d: %d updates, loss %.3f (oracle %.3f), %.1fs%s", iteration + 1, updates,
                    report.train_loss, report.oracle_loss, report.seconds,
                    "" if report.dev is None else
                    f"; dev tau {report.dev['corpus_tau']:.4f} FRS {report.dev['corpus_frs']:.4f}"
                    f" (best: iteration {best[1]})")
        if on_iteration is not None:
            on_iteration(model, report)
    assert model is not None
    return model


# -------------------------------------------------------------------------------------------------------------
# CLI: train-reorderer


def _read_corpus(src: str, oracle: str) -> tuple[list[list[str]], list[list[int]]]:
    from .oracle import read_oracle
    sentences = read_tokens(src, allow_empty=True)
    ranks = read_oracle(oracle, [len(s) for s in sentences], src)
    return sentences, ranks


def snapshot_path(model_path: str) -> str:
    """Where train-reorderer keeps the model of the last finished iteration while training runs."""
    return model_path + ".snapshot"


def _load_for_resume(model_path: str) -> Reorderer:
    # An interrupted run's snapshot first (its training is further along than any finished model at the same
    # path could be); else a finished model saved with --resumable, to train for more iterations.
    snapshot = snapshot_path(model_path)
    path = snapshot if os.path.exists(snapshot) else model_path
    if not os.path.exists(path):
        raise InputError(model_path, None, f"--resume: neither this model nor its snapshot {snapshot} exists")
    model = Reorderer.load(path, allow_incomplete=True)
    if model.state is None:
        raise InputError(path, None, "--resume: the model holds no learner state; train it with --resumable "
                                     "(snapshots of an interrupted run always have it)")
    logger.info("resuming %s after %s iterations", path, model.training.get("iterations_done", "?"))
    return model


def _invert_span_option(text: str) -> int:
    """argparse type of train-reorderer --max-invert-span and --fallback-length: auto or a count."""
    return AUTO_INVERT_SPAN if text == "auto" else int_option(0, 100_000)(text)


_invert_span_option.__name__ = "auto or integer"
assert AUTO_INVERT_SPAN == AUTO_FALLBACK_LENGTH  # one "auto" value for both options


def _check_kind_options(args: argparse.Namespace) -> None:
    """An option of the other kind of reorderer, set to anything but its default, is an error naming it."""
    linear, neural = _kind_defaults()
    other = neural if args.kind == "linear" else linear
    for dest, default in other.items():
        if getattr(args, dest) != default:
            raise ValueError(f"--{dest.replace('_', '-')} is an option of --kind "
                             f"{'neural' if args.kind == 'linear' else 'linear'}, not of --kind {args.kind}")


def run_train_reorderer(args: argparse.Namespace) -> int:
    if (args.dev_src is None) != (args.dev_oracle is None):
        raise ValueError("--dev-src and --dev-oracle go together")
    _check_kind_options(args)
    src_lang = args.src_lang if args.src_lang is not None else language_of_path(args.src)
    margins = CLI_MARGINS[args.kind]
    if args.invert_margin is None:
        args.invert_margin = margins[0]
    if args.fallback_margin is None:
        args.fallback_margin = margins[1]
    if args.kind == "neural":
        return _run_train_neural(args, src_lang)
    config = ReordererConfig(hash_bits=args.hash_bits, max_term=args.max_term, max_span=args.max_span,
                             features=tuple(args.features.split(",")), views=tuple(args.views.split(",")),
                             invert_margin=args.invert_margin, fallback_margin=args.fallback_margin,
                             split_sentences=args.split_sentences)
    options = TrainOptions(iterations=args.iterations, loss=args.loss, update=args.update, pa_c=args.pa_c,
                           loss_norm=args.loss_norm, chunk_weight=args.chunk_weight, max_len=args.max_len,
                           seed=args.seed, max_invert_span=args.max_invert_span,
                           fallback_length=args.fallback_length)
    resume = None
    snapshot = snapshot_path(args.model)
    if args.resume:
        resume = _load_for_resume(args.model)
        config = resume.config  # the model's feature config wins; options must match (checked in train)
    elif os.path.exists(snapshot):
        logger.warning("%s: snapshot of an earlier, interrupted run; starting over (--resume would continue it)",
                       snapshot)
    sentences, ranks = _read_corpus(args.src, args.oracle)
    if not any(2 <= len(s) <= options.max_len for s in sentences):
        raise InputError(args.src, None, f"no training sentence of 2..{options.max_len} words (--max-len)")
    dev = None
    if args.dev_src:
        dev = DevSet(*_read_corpus(args.dev_src, args.dev_oracle))
    t0 = time.perf_counter()

    def save_snapshot(model: Reorderer, report: IterationReport) -> None:
        # After every iteration, under another name and marked incomplete, with the learner state: an
        # interrupted run can be resumed, and the model path never holds a partly trained model.
        Reorderer(model.config, model.weights, model.training, model.state, complete=False,
                  classes=model.classes, source=model.source).save(snapshot)

    model = train(sentences, ranks, config, options, dev, resume, on_iteration=save_snapshot, src_lang=src_lang)
    # The learner state stays in the final model when asked for, or when extending a finished --resumable model;
    # a run resumed from its snapshot ends as the uninterrupted run would.
    keep_state = args.resumable or (resume is not None and resume.complete)
    final = model if keep_state else model.stripped()
    final.save(args.model)
    if os.path.exists(snapshot):
        os.unlink(snapshot)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    logger.info("trained in %.1fs (peak memory %.0f MB)%s; wrote %s", time.perf_counter() - t0, peak_mb,
                "" if "best_iteration" not in model.training else
                f"; kept iteration {model.training['best_iteration']}", args.model)
    return 0


def _run_train_neural(args: argparse.Namespace, src_lang: str | None) -> int:
    from .neural_reorderer import NeuralReorderer
    from .neural_train import run_train_neural
    snapshot = snapshot_path(args.model)
    resume = None
    if args.resume:
        path = snapshot if os.path.exists(snapshot) else args.model
        if not os.path.exists(path):
            raise InputError(args.model, None, f"--resume: neither this model nor its snapshot {snapshot} exists")
        resume = load_reorderer(path, allow_incomplete=True)
        if not isinstance(resume, NeuralReorderer) or resume.state is None:
            raise InputError(path, None, "--resume: not the snapshot of an interrupted --kind neural run")
    elif os.path.exists(snapshot):
        logger.warning("%s: snapshot of an earlier, interrupted run; starting over (--resume would continue it)",
                       snapshot)
    sentences, ranks = _read_corpus(args.src, args.oracle)
    if not any(2 <= len(s) <= args.max_len for s in sentences):
        raise InputError(args.src, None, f"no training sentence of 2..{args.max_len} words (--max-len)")
    dev = _read_corpus(args.dev_src, args.dev_oracle) if args.dev_src else None
    source = resume.source if resume is not None else SourceVocabulary.build(sentences, src_lang)
    return run_train_neural(args, sentences, ranks, dev, source, snapshot, resume)


# --invert-margin / --fallback-margin defaults per kind (model-score units differ: summed feature weights for the
# linear model, summed log-odds for the neural one). The neural fallback margin is the smallest that kept the
# short-half chunk models of two seeds at or above monotone FRS at every length of the longer training sentences,
# both directions (docs/reorderer-neural.md)
CLI_MARGINS = {"linear": (CLI_INVERT_MARGIN, CLI_FALLBACK_MARGIN), "neural": (0.5, 7.0)}
# train-reorderer --kind neural --chunks: on by default (FRS up in both directions on held-out training lines,
# docs/reorderer-neural.md); NeuralConfig's own default stays off, which is what model files without it hold
CLI_NEURAL_CHUNKS = True


def _kind_defaults() -> tuple[dict, dict]:
    """train-reorderer options of one kind only -> their defaults (LINEAR_ONLY, NEURAL_ONLY)."""
    from .neural_reorderer import NeuralConfig, NeuralTrainOptions
    o, n, c = TrainOptions(), NeuralTrainOptions(), NeuralConfig()
    linear = {"iterations": o.iterations, "loss": o.loss, "update": o.update, "pa_c": o.pa_c,
              "loss_norm": o.loss_norm, "chunk_weight": o.chunk_weight, "hash_bits": CLI_HASH_BITS,
              "features": ",".join(CLI_FEATURES), "views": ",".join(CLI_VIEWS), "resumable": False}
    neural = {"epochs": n.epochs, "lr": n.lr, "batch_pairs": n.batch_pairs, "dropout": n.dropout,
              "word_dropout": n.word_dropout, "min_count": n.min_count, "device": n.device, "threads": n.threads,
              "word_dim": c.word_dim, "hash_buckets": c.hash_buckets, "hidden": c.hidden, "layers": c.layers,
              "pair_dim": c.pair_dim, "chunks": CLI_NEURAL_CHUNKS, "gain": c.gain}
    return linear, neural


def configure_train_reorderer(parser: argparse.ArgumentParser) -> None:
    parser.epilog = """examples:
  xlpos-prep train-reorderer --src train.en --oracle train.oracle --model en-ja.reorderer
  xlpos-prep train-reorderer --kind neural --src train.en --oracle train.oracle --model en-ja.reorderer
  xlpos-prep train-reorderer --src train.en --oracle train.oracle --model en-ja.reorderer \\
      --dev-src dev.en --dev-oracle dev.oracle --iterations 20
  xlpos-prep train-reorderer --src train.en --oracle train.oracle --model m --resumable --iterations 5
  xlpos-prep train-reorderer --src train.en --oracle train.oracle --model m --resume --iterations 10

The model file is written once, when training has finished. After every iteration the model so far is kept in
MODEL.snapshot (marked incomplete, with the learner state): after an interruption, --resume continues from it.
With --dev-src/--dev-oracle the model keeps the averaged weights of the iteration with the best dev corpus
Kendall tau + fuzzy reordering score (--kind neural: the epoch with the best).

--kind linear (default): the discriminative BTG reorderer with sparse lexical features. --kind neural: a BiLSTM
over the sentence scores word pairs and the same BTG search orders them (docs/reorderer-neural.md); training
needs torch, reordering does not. `reorder` and everything else read either kind."""
    from .neural_reorderer import GAINS, NeuralConfig, NeuralTrainOptions
    nc, no = NeuralConfig(), NeuralTrainOptions()
    d = ReordererConfig(hash_bits=CLI_HASH_BITS, features=CLI_FEATURES, views=CLI_VIEWS,
                        invert_margin=CLI_INVERT_MARGIN, fallback_margin=CLI_FALLBACK_MARGIN)
    o = TrainOptions()
    parser.add_argument("--kind", choices=KINDS, default="linear",
                        help="linear (sparse features, default) or neural (BiLSTM pair scores)")
    parser.add_argument("--src", required=True, help="tokenized source sentences")
    parser.add_argument("--oracle", required=True, help="oracle ranks (`xlpos-prep oracle`), parallel to --src")
    parser.add_argument("--model", required=True, help="output model file (.npz; written atomically)")
    parser.add_argument("--src-lang", help="language of --src, kept in the model (default: the file suffix of "
                                           "--src when it looks like a language code, e.g. train.en -> en)")
    parser.add_argument("--dev-src", help="held-out source sentences: scored after every iteration")
    parser.add_argument("--dev-oracle", help="oracle ranks of --dev-src")
    parser.add_argument("--iterations", type=int_option(1, 10_000), default=o.iterations,
                        help=f"linear: passes (default {o.iterations})")
    parser.add_argument("--loss", choices=LOSSES, default=o.loss, help=f"training loss (default {o.loss})")
    parser.add_argument("--update", choices=list(UPDATES), default=o.update,
                        help=f"online update rule (default {o.update})")
    parser.add_argument("--pa-c", type=float_option(0, 1e6, lo_open=True), default=o.pa_c,
                        help=f"PA-I step cap (default {o.pa_c})")
    parser.add_argument("--loss-norm", choices=LOSS_NORMS, default=o.loss_norm,
                        help=f"per-sentence loss normalization (default {o.loss_norm})")
    parser.add_argument("--chunk-weight", type=float_option(0, 1e6), default=o.chunk_weight,
                        help=f"weight of a chunk break relative to a discordant pair (default {o.chunk_weight})")
    parser.add_argument("--max-term", type=int_option(1, 64), default=d.max_term,
                        help=f"longest monotone terminal span (default {d.max_term})")
    parser.add_argument("--max-span", type=int_option(2, 1024), default=d.max_span,
                        help=f"longest span parsed by CKY; longer sentences are chains of segments "
                             f"(default {d.max_span})")
    parser.add_argument("--max-len", type=int_option(2, 100_000), default=o.max_len,
                        help=f"skip training sentences longer than this (default {o.max_len})")
    parser.add_argument("--hash-bits", type=int_option(8, 28), default=d.hash_bits,
                        help=f"log2 of the hashed feature rows (default {d.hash_bits})")
    parser.add_argument("--features", default=",".join(d.features),
                        help=f"feature groups, comma-separated (default {','.join(d.features)})")
    parser.add_argument("--views", default=",".join(d.views),
                        help=f"word views, comma-separated: word, suffixN, prefixN, classK (K word classes learned "
                             f"from --src; default {','.join(d.views)})")
    parser.add_argument("--seed", type=SEED, default=o.seed,
                        help=f"shuffling and word-class seed (default {o.seed})")
    parser.add_argument("--max-invert-span", type=_invert_span_option, default="auto",
                        help=f"when reordering, spans longer than this stay straight (abstention where training "
                             f"had no evidence); auto: {INVERT_SPAN_FACTOR} x the longest training sentence; "
                             f"0: no limit (default auto)")
    parser.add_argument("--invert-margin", type=float_option(0, 1e6), default=None,
                        help=f"when reordering, an inversion must beat the straight order by this model score "
                             f"(default {CLI_MARGINS['linear'][0]} linear, {CLI_MARGINS['neural'][0]} neural)")
    parser.add_argument("--fallback-length", type=_invert_span_option, default="auto",
                        help="when reordering, sentences longer than this are tested for the fallback to "
                             "monotone; auto: the longest training sentence; 0: never (default auto)")
    parser.add_argument("--fallback-margin", type=float_option(0, 1e6), default=None,
                        help=f"when reordering, a sentence e words longer than --fallback-length keeps the "
                             f"model's order only if it beats the monotone order by this x e^2 model score, else "
                             f"it stays monotone; 0: no fallback (default {CLI_MARGINS['linear'][1]} linear, "
                             f"{CLI_MARGINS['neural'][1]} neural)")
    parser.add_argument("--split-sentences", action=argparse.BooleanOptionalAction, default=CLI_SPLIT_SENTENCES,
                        help="when reordering, each sentence of a line (ended by . ! ? or their full-width forms) "
                             "is ordered alone and the sentences keep their order; --no-split-sentences: a line "
                             f"is parsed whole (default {CLI_SPLIT_SENTENCES})")
    parser.add_argument("--resumable", action="store_true",
                        help="linear: also store the learner state in the model, so --resume can continue training")
    neural = parser.add_argument_group("--kind neural")
    neural.add_argument("--epochs", type=int_option(1, 1000), default=no.epochs,
                        help=f"passes over the training sentences (default {no.epochs})")
    neural.add_argument("--lr", type=float_option(0, 1, lo_open=True), default=no.lr,
                        help=f"peak Adam learning rate (default {no.lr})")
    neural.add_argument("--batch-pairs", type=int_option(100, 10_000_000), default=no.batch_pairs,
                        help=f"a batch holds at most this many (sentences x length^2) (default {no.batch_pairs})")
    neural.add_argument("--dropout", type=float_option(0, 0.9), default=no.dropout,
                        help=f"dropout of embeddings and LSTM outputs (default {no.dropout})")
    neural.add_argument("--word-dropout", type=float_option(0, 0.9), default=no.word_dropout,
                        help=f"share of known words shown as unknown in training (default {no.word_dropout})")
    neural.add_argument("--min-count", type=int_option(1, 1_000_000), default=no.min_count,
                        help=f"words seen fewer times get no embedding of their own (default {no.min_count})")
    neural.add_argument("--word-dim", type=int_option(8, 1024), default=nc.word_dim,
                        help=f"word embedding size (default {nc.word_dim})")
    neural.add_argument("--hash-buckets", type=int_option(1, 1 << 24), default=nc.hash_buckets,
                        help=f"rows of the hashed prefix/suffix/shape embeddings (default {nc.hash_buckets})")
    neural.add_argument("--hidden", type=int_option(8, 2048), default=nc.hidden,
                        help=f"LSTM size per direction (default {nc.hidden})")
    neural.add_argument("--layers", type=int_option(1, 8), default=nc.layers,
                        help=f"BiLSTM layers (default {nc.layers})")
    neural.add_argument("--pair-dim", type=int_option(8, 2048), default=nc.pair_dim,
                        help=f"hidden size of the pair scorer (default {nc.pair_dim})")
    neural.add_argument("--chunks", action=argparse.BooleanOptionalAction, default=CLI_NEURAL_CHUNKS,
                        help="also score whether neighbouring words stay one chunk of the target order, and search "
                             "for the order that keeps the likely chunks together; --no-chunks: pairs only "
                             f"(default {CLI_NEURAL_CHUNKS})")
    neural.add_argument("--gain", choices=GAINS, default=nc.gain,
                        help="what the search sums over inverted pairs: logodds (pair log-odds) or prob "
                             f"(p(inverted) - p(straight), the expected Kendall tau) (default {nc.gain})")
    neural.add_argument("--device", choices=("auto", "cpu", "cuda"), default=no.device,
                        help=f"where to train; auto: a GPU when there is one (default {no.device})")
    neural.add_argument("--threads", type=int_option(0, 1024), default=no.threads,
                        help="CPU threads for training (default 0: torch's choice)")
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted run from MODEL.snapshot, or the --model file (saved with "
                             "--resumable), up to --iterations")
    parser.set_defaults(run=run_train_reorderer)
    declare_files(parser, inputs=("src", "oracle", "dev_src", "dev_oracle"), outputs=("model",),
                  derived_outputs=lambda args: [("the snapshot of --model", snapshot_path(args.model))])


# -------------------------------------------------------------------------------------------------------------
# CLI: reorder

_worker_model: AnyReorderer | None = None


def _init_reorder_worker(model_path: str, abstention: tuple) -> None:
    global _worker_model
    pool_worker_setup()
    _worker_model = load_reorderer(model_path).with_abstention(*abstention)


def _reorder_chunk(job: tuple[list[list[str]], bool]) -> list[tuple[str, str | None]]:
    sentences, with_trees = job
    assert _worker_model is not None
    results = _worker_model.parse_batch(sentences)
    return [(" ".join(map(str, p.order.tolist())), btg.tree_string(p.edges, words) if with_trees else None)
            for p, words in zip(results, sentences)]


def reorder_lines(model_path: str, sentences: Iterable[list[str]], workers: int = 1, with_trees: bool = False,
                  progress: bool = True, model: AnyReorderer | None = None,
                  abstention: tuple = (None, None, None, None, None),
                  total: int | None = None) -> Iterable[tuple[str, str | None]]:
    """(order line, tree line or None) per sentence, in input order, with `workers` processes.

    `sentences` may be a stream (iter_tokens): it is read in batches as the workers take them, so a corpus is never
    held (`total`: its length, for the progress bar). Worker processes load `model_path` and apply `abstention`
    (the arguments of Reorderer.with_abstention: invert margin, longest inverted span, fallback margin, fallback
    length, split sentences; None keeps the model's); with workers == 1 an already loaded `model` is used as it is
    when given."""
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    if total is None and isinstance(sentences, Sized):
        total = len(sentences)
    stream = iter(sentences)
    jobs = ((batch, with_trees) for batch in iter(lambda: list(itertools.islice(stream, BATCH)), []))
    bar = tqdm(total=total, desc="reorder", unit="sent", file=sys.stderr,
               disable=None if progress else True, mininterval=1.0)
    try:
        if workers == 1:
            global _worker_model
            _worker_model = model if model is not None else load_reorderer(model_path).with_abstention(*abstention)
            for job in jobs:
                chunk = _reorder_chunk(job)
                yield from chunk
                bar.update(len(chunk))
        else:
            with fork_pool(workers, _init_reorder_worker, (model_path, abstention)) as pool:
                for chunk in pool.imap(_reorder_chunk, jobs):
                    yield from chunk
                    bar.update(len(chunk))
    finally:
        bar.close()


# `reorder` warns when most words of its input are unknown to the model (the wrong side of the corpus, another
# language), judged on this many lines: enough words for the share to be clear, read before any work.
VOCABULARY_CHECK_LINES = 10_000


def run_reorder(args: argparse.Namespace) -> int:
    model = load_reorderer(args.model)  # fail early, with the model file named, before reading the corpus
    abstention = (args.invert_margin, args.max_invert_span, args.fallback_margin, args.fallback_length,
                  args.split_sentences)
    model = model.with_abstention(*abstention)
    # The corpus is streamed, never held: a WMT training split is millions of sentences, and every --shard job
    # reads the same file.
    start, end = Shard.parse(args.shard).bounds(count_sentences(args.src))
    if model.source is not None:  # judged on the shard's first lines, before any work
        sample = iter_tokens(args.src, allow_empty=True, start=start, end=min(end, start + VOCABULARY_CHECK_LINES))
        warning = model.source.warning(sample, args.src, args.model)
        if warning:
            logger.warning(warning)
    if isinstance(model, Reorderer) and end - start <= INTERPRETED_MAX_SENTENCES:
        model.interpreted = True  # a short job: no compile to wait for at exit (workers > 1 fork this model)
    t0 = time.perf_counter()
    sentences = iter_tokens(args.src, allow_empty=True, start=start, end=end)
    with atomic_output(args.out) as out, \
            (atomic_output(args.trees) if args.trees else contextlib.nullcontext()) as trees:
        for order, tree in reorder_lines(args.model, sentences, args.workers, trees is not None, model=model,
                                         abstention=abstention, total=end - start):
            out.write(order + "\n")
            if trees is not None:
                trees.write(tree + "\n")
    seconds = time.perf_counter() - t0
    logger.info("reordered %d sentences (lines %d-%d) in %.1fs (%.0f sentences/s); wrote %s", end - start,
                start + 1, end, seconds, (end - start) / max(seconds, 1e-9), args.out)
    return 0


def configure_reorder(parser: argparse.ArgumentParser) -> None:
    parser.epilog = """examples:
  xlpos-prep reorder --model en-ja.reorderer --src test.en --out test.order
  xlpos-prep reorder --model en-ja.reorderer --src test.en --out test.order --trees test.trees --workers 2
  xlpos-prep reorder --model en-ja.reorderer --src train.en --out train.order.0 --shard 0/4

order file: per line a permutation of 0..n-1, the source word indices in predicted target order (lader's `order`
format). Tree file: per line the BTG derivation, (S A B) straight, (I A B) inverted (B's words before A's),
(F w1 ... wk) a monotone terminal span; children appear in source order, brackets inside words are written
-LRB- / -RRB-. Empty source lines give empty lines."""
    parser.add_argument("--model", required=True, help="model from `xlpos-prep train-reorderer`")
    parser.add_argument("--src", required=True, help="tokenized source sentences")
    parser.add_argument("--out", required=True, help="output order file (written atomically)")
    parser.add_argument("--trees", help="also write the bracketed BTG trees here")
    parser.add_argument("--workers", type=WORKERS, default=1, help="processes (default 1)")
    parser.add_argument("--shard", type=shard_option, default="0/1",
                        help="process only contiguous shard I of N lines, e.g. 0/4")
    parser.add_argument("--invert-margin", type=float_option(0, 1e6),
                        help="override the model's: an inversion must beat the straight order by this score")
    parser.add_argument("--max-invert-span", type=int_option(0, 100_000),
                        help="override the model's: spans longer than this stay straight (0: no limit)")
    parser.add_argument("--fallback-margin", type=float_option(0, 1e6),
                        help="override the model's: a sentence e words longer than the fallback length keeps the "
                             "model's order only if it beats monotone by this x e^2 (0: no fallback)")
    parser.add_argument("--fallback-length", type=int_option(0, 100_000),
                        help="override the model's (its longest training sentence): sentences longer than this "
                             "are tested for the fallback (0: none)")
    parser.add_argument("--split-sentences", action=argparse.BooleanOptionalAction, default=None,
                        help="override the model's: order each sentence of a line alone (--no-split-sentences: "
                             "parse a line whole)")
    parser.set_defaults(run=run_reorder)
    declare_files(parser, inputs=("model", "src"), outputs=("out", "trees"))
