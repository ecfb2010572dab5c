"""The neural BTG reorderer: a BiLSTM over the sentence scores word pairs, a BTG search turns them into an order.

Design (this project's choice, measured against the linear model in docs/reorderer-neural.md):
- Words: an embedding of the word when it was seen at least twice in training, plus hashed embeddings of its
  prefixes and suffixes of 1-3 characters and its character-class shape, summed. The hashed parts give an unseen
  word (a name, a rare inflection) a representation, and word dropout in training teaches the model to use them.
- Context: a bidirectional LSTM over the words (one layer of 64 per direction by default), trained from scratch
  on the oracle orders (a corpus of 50k short sentences is plenty for that, and nothing pre-trained is needed).
- Pairs: for source words i < j less than max_span apart, a one-hidden-layer scorer of (h_i, h_j, the bucketed
  distance j - i) gives the log-odds that j precedes i in the target order. Trained with cross-entropy on the
  oracle's pair orders (pairs the oracle ties are skipped), i.e. on exactly what corpus Kendall tau counts.
- Chunks (`chunks`): a second one-hidden-layer scorer of neighbouring words (h_{k-1}, h_k) gives the log-odds that
  they stay one chunk in the target order (next to each other, in order: what the fuzzy reordering score counts),
  trained with cross-entropy beside the pairs. Pairs alone put nearly as many pairs right as the linear model
  (within 0.01 of its tau) but break more chunks, so their orders scored below even the monotone order in FRS on
  Japanese sources (measured in docs/reorderer-neural.md); the chunk scores give the search a reason to move a chunk
  whole.
- Search: the BTG derivation that maximises the summed gains of the pairs it inverts plus chunk_weight times the
  chunk log-odds of the neighbours it keeps together (`xlpos_prep.pairbtg`): every output is a BTG permutation
  and the tree is available, as with the linear model. Gains are the log-odds (default) or the probability
  difference p(inverted) - p(straight), whose sum is the expected number of pairs put right, i.e. the expected
  Kendall tau ("prob"; the chunk scores then in the same units).
- Abstention as for the linear model, in log-odds units: an inversion margin, no inversion of spans longer than
  twice the longest training sentence, and a sentence-level fallback to monotone for sentences longer than the
  longest training sentence.

Inference is numpy only (the weights are exported from torch into the model file; forward pass batched over
sentences of similar length): `reorder` imports neither torch nor compiles anything. Training
(`xlpos_prep.neural_train`, `xlpos-prep train-reorderer --kind neural`) needs torch.

Model file: one `.npz` (allow_pickle=False) holding
  header       a JSON string: {"format": "xlpos-neural-btg-reorderer", "version": 1, "config": {...},
               "training": {...}, "complete": bool, "source": {...}}
  vocab        the known words, UTF-8, newline-separated, as uint8 (row k + 2 of the word embedding; rows 0/1 are
               padding and unknown)
  w/NAME       float32 weights (see `WEIGHTS`)
  source_bits  the Bloom filter of the training words (xlpos_prep.source_vocab)
  opt/...      only in MODEL.snapshot while training runs: the optimizer state, for --resume
"""
from __future__ import annotations

import json
import unicodedata
import zlib
from dataclasses import asdict, dataclass, replace
from typing import Sequence

import numpy as np

from . import pairbtg
from .btg import ParseResult, inversion_penalties, tree_string
from .io import atomic_output
from .reorderer import NEURAL_FORMAT_NAME as FORMAT_NAME
from .reorderer import ModelFileError
from .sentence_bounds import parse_in_pieces, sentence_cuts
from .source_vocab import SourceVocabulary

FORMAT_VERSION = 1
GAINS = ("logodds", "prob")
PAD, UNK = 0, 1
N_HASHED = 7  # prefixes 1-3, suffixes 1-3, shape
MAX_PAIRS_PER_BATCH = 400_000  # padded sentences x length x max_span cells per forward pass: bounds memory
BATCH = 256  # sentences per forward pass at most
# A sentence of more words (a file whose line ends were lost) is cut into pieces of equal length, each encoded and
# searched alone and composed straight, so that memory stays that of MAX_PARSE_WORDS words (as the linear model
# does); no training sentence of the recipes' data is that long.
MAX_PARSE_WORDS = 256


@dataclass(frozen=True)
class NeuralConfig:
    """Everything that determines the network and the search; stored in the model header."""

    word_dim: int = 64
    hash_buckets: int = 1 << 14
    hidden: int = 64  # per direction
    layers: int = 1
    pair_dim: int = 64
    max_span: int = 64  # longest span the search builds and longest pair distance scored
    max_term: int = 4  # longest straight span written as one F node in trees
    chunks: bool = False  # the network also scores neighbouring words as one chunk (models before it: without)
    gain: str = "logodds"
    # abstention at inference (see xlpos_prep.pairbtg); not part of the network: `reorder` may override them
    invert_margin: float = 0.0
    chunk_weight: float = 1.0  # the chunk scores' weight in the search (with chunks)
    max_invert_span: int = 0
    fallback_length: int = 0
    fallback_margin: float = 0.0
    split_sentences: bool = False  # each sentence of a line parsed alone (xlpos_prep.sentence_bounds)

    def __post_init__(self) -> None:
        for name in ("word_dim", "hidden", "layers", "pair_dim", "max_term"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.hash_buckets < 1 or self.hash_buckets > 1 << 24:
            raise ValueError(f"hash_buckets must be in 1..2**24, got {self.hash_buckets}")
        if self.max_span < 2:
            raise ValueError(f"max_span must be >= 2, got {self.max_span}")
        if self.gain not in GAINS:
            raise ValueError(f"gain must be one of {GAINS}, got {self.gain!r}")
        for name in ("invert_margin", "fallback_margin", "chunk_weight"):
            value = getattr(self, name)
            if not (value >= 0 and np.isfinite(value)):
                raise ValueError(f"{name} must be finite and >= 0, got {value}")
        for name in ("max_invert_span", "fallback_length"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: none), got {getattr(self, name)}")


@dataclass(frozen=True)
class NeuralTrainOptions:
    epochs: int = 6
    lr: float = 2e-3
    batch_pairs: int = 16_000  # padded sentences x length^2 per batch at most
    dropout: float = 0.2
    word_dropout: float = 0.1
    min_count: int = 2  # words seen fewer times get no word embedding of their own
    max_vocab: int = 50_000
    max_len: int = 100
    seed: int = 1
    device: str = "auto"
    threads: int = 0  # 0: torch's default

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"--epochs must be >= 1, got {self.epochs}")
        if not 0 <= self.dropout < 1 or not 0 <= self.word_dropout < 1:
            raise ValueError("--dropout and --word-dropout must be in [0, 1)")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"--device must be auto, cpu or cuda, got {self.device!r}")


def distance_buckets(max_distance: int) -> np.ndarray:
    """Bucket of each pair distance 0..max_distance: exact up to 8, then wider, the last one open-ended."""
    edges = [8, 12, 16, 24, 32, 48]
    d = np.arange(max_distance + 1)
    return np.where(d <= 8, d, 8 + np.searchsorted(edges, d, side="left")).astype(np.int64)


N_DISTANCE_BUCKETS = int(distance_buckets(1000).max()) + 1


def weight_shapes(config: NeuralConfig, vocab_size: int) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every weight array (`vocab_size` known words, without the padding and unknown rows)."""
    c = config
    shapes: dict[str, tuple[int, ...]] = {"word": (vocab_size + 2, c.word_dim), "hashed": (c.hash_buckets, c.word_dim)}
    for layer in range(c.layers):
        inp = c.word_dim if layer == 0 else 2 * c.hidden
        for d in ("f", "b"):
            shapes[f"lstm{layer}{d}.w_ih"] = (4 * c.hidden, inp)
            shapes[f"lstm{layer}{d}.w_hh"] = (4 * c.hidden, c.hidden)
            shapes[f"lstm{layer}{d}.b"] = (4 * c.hidden,)
    shapes.update({"pair.wa": (c.pair_dim, 2 * c.hidden), "pair.ba": (c.pair_dim,),
                   "pair.wc": (c.pair_dim, 2 * c.hidden), "pair.dist": (N_DISTANCE_BUCKETS, c.pair_dim),
                   "pair.w": (c.pair_dim,), "pair.b": (1,)})
    if c.chunks:
        shapes.update({"chunk.wl": (c.pair_dim, 2 * c.hidden), "chunk.wr": (c.pair_dim, 2 * c.hidden),
                       "chunk.b1": (c.pair_dim,), "chunk.w": (c.pair_dim,), "chunk.b": (1,)})
    return shapes


# -------------------------------------------------------------------------------------------------------------
# Words -> ids


def _char_class(ch: str) -> str:
    if ch.isdigit():
        return "0"
    if ch.isalpha():
        name = unicodedata.name(ch, "")
        if name.startswith("HIRAGANA"):
            return "h"
        if name.startswith("KATAKANA"):
            return "k"
        if name.startswith("CJK"):
            return "c"
        return "A" if ch.isupper() else "a"
    return "p" if unicodedata.category(ch).startswith("P") else "o"


def word_shape(word: str) -> str:
    """Character classes with repeats collapsed, at most 4 (e.g. "Tokyo" -> "Aa", "3.5" -> "0p0")."""
    out: list[str] = []
    for ch in word:
        c = _char_class(ch)
        if not out or out[-1] != c:
            out.append(c)
    return "".join(out[:4])


class WordFeatures:
    """word -> (vocabulary id, N_HASHED hashed-feature ids); stable across processes (crc32 of the feature text)."""

    def __init__(self, vocab: Sequence[str], hash_buckets: int):
        self.vocab = list(vocab)
        self.index = {w: k + 2 for k, w in enumerate(self.vocab)}
        self.hash_buckets = hash_buckets
        self._cache: dict[str, tuple[int, tuple[int, ...]]] = {}

    def hashed(self, word: str) -> tuple[int, ...]:
        feats = [f"p{k}\x1f{word[:k]}" for k in (1, 2, 3)] + [f"s{k}\x1f{word[-k:]}" for k in (1, 2, 3)]
        feats.append("shape\x1f" + word_shape(word))
        return tuple(zlib.crc32(f.encode("utf-8", "surrogatepass")) % self.hash_buckets for f in feats)

    def ids(self, word: str) -> tuple[int, tuple[int, ...]]:
        got = self._cache.get(word)
        if got is None:
            got = (self.index.get(word, UNK), self.hashed(word))
            if len(self._cache) < 2_000_000:
                self._cache[word] = got
        return got

    def encode(self, sentences: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(word ids (B, T), hashed ids (B, T, N_HASHED), lengths (B,)), padded with PAD / 0."""
        lengths = np.array([len(s) for s in sentences], dtype=np.int64)
        T = int(lengths.max()) if len(sentences) else 0
        words = np.zeros((len(sentences), T), dtype=np.int64)
        hashed = np.zeros((len(sentences), T, N_HASHED), dtype=np.int64)
        for b, s in enumerate(sentences):
            for t, w in enumerate(s):
                wid, hid = self.ids(w)
                words[b, t] = wid
                hashed[b, t] = hid
        return words, hashed, lengths


# -------------------------------------------------------------------------------------------------------------
# The forward pass in numpy (mirrors xlpos_prep.neural_train.PairModel operation for operation)


def _lstm(xp: np.ndarray, w_hh: np.ndarray) -> np.ndarray:
    """One LSTM direction over precomputed input projections xp (B, T, 4H) (biases included); torch's gate order
    i, f, g, o. Padding sits after each sentence's words, so it never reaches a real word's state."""
    B, T, H4 = xp.shape
    H = H4 // 4
    # sigmoid(x) = 0.5 + 0.5 tanh(x / 2): one tanh over all four gates per step
    scale = np.full(H4, 0.5, dtype=xp.dtype)
    scale[2 * H:3 * H] = 1.0
    h = np.zeros((B, H), dtype=xp.dtype)
    c = np.zeros((B, H), dtype=xp.dtype)
    out = np.empty((B, T, H), dtype=xp.dtype)
    w = np.ascontiguousarray(w_hh.T)
    for t in range(T):
        g = np.tanh((xp[:, t] + h @ w) * scale)
        i = 0.5 + 0.5 * g[:, :H]
        f = 0.5 + 0.5 * g[:, H:2 * H]
        o = 0.5 + 0.5 * g[:, 3 * H:]
        c = f * c + i * g[:, 2 * H:3 * H]
        h = o * np.tanh(c)
        out[:, t] = h
    return out


def reverse_index(lengths: np.ndarray, T: int) -> np.ndarray:
    """(B, T) index that reverses each sentence within its length and leaves padding in place (an involution)."""
    t = np.arange(T)[None, :]
    n = lengths[:, None]
    return np.where(t < n, n - 1 - t, t)


def encode_numpy(w: dict[str, np.ndarray], config: NeuralConfig, words: np.ndarray, hashed: np.ndarray,
                 lengths: np.ndarray) -> np.ndarray:
    """Contextual word vectors (B, T, 2 * hidden), float32."""
    x = w["word"][words] + w["hashed"][hashed].sum(axis=2)
    B, T = words.shape
    rev = reverse_index(lengths, T)
    rows = np.arange(B)[:, None]
    for layer in range(config.layers):
        fw = _lstm(x @ w[f"lstm{layer}f.w_ih"].T + w[f"lstm{layer}f.b"], w[f"lstm{layer}f.w_hh"])
        xr = x[rows, rev]
        bw = _lstm(xr @ w[f"lstm{layer}b.w_ih"].T + w[f"lstm{layer}b.b"], w[f"lstm{layer}b.w_hh"])[rows, rev]
        x = np.concatenate([fw, bw], axis=2)
    return x


def pair_logits_numpy(w: dict[str, np.ndarray], config: NeuralConfig, h: np.ndarray) -> np.ndarray:
    """G[b, j, delta] = log-odds that word j precedes word j - delta, for delta = 1..L-1 (L = min(T, max_span));
    (B, T, L), zeros where j - delta < 0."""
    B, T, _ = h.shape
    L = min(T, config.max_span)
    a = h @ w["pair.wa"].T + w["pair.ba"]
    c = h @ w["pair.wc"].T
    dist = w["pair.dist"][distance_buckets(max(L, 1))]
    G = np.zeros((B, T, max(L, 1)), dtype=np.float32)
    for delta in range(1, L):
        z = np.maximum(a[:, :T - delta] + c[:, delta:] + dist[delta], 0.0)
        G[:, delta:, delta] = z @ w["pair.w"] + w["pair.b"][0]
    return G


def chunk_logits_numpy(w: dict[str, np.ndarray], h: np.ndarray) -> np.ndarray:
    """K[b, k] = log-odds that words k - 1 and k stay one chunk, for k = 1..T-1; (B, T), K[:, 0] = 0."""
    B, T, _ = h.shape
    K = np.zeros((B, T), dtype=np.float32)
    if T > 1:
        z = np.maximum(h[:, :-1] @ w["chunk.wl"].T + h[:, 1:] @ w["chunk.wr"].T + w["chunk.b1"], 0.0)
        K[:, 1:] = z @ w["chunk.w"] + w["chunk.b"][0]
    return K


# -------------------------------------------------------------------------------------------------------------
# The model


class NeuralReorderer:
    """A trained neural BTG reorderer; the same interface as xlpos_prep.reorderer.Reorderer."""

    kind = "neural"

    def __init__(self, config: NeuralConfig, weights: dict[str, np.ndarray], vocab: Sequence[str],
                 training: dict | None = None, complete: bool = True, origin: str = "the model",
                 source: SourceVocabulary | None = None, state: dict[str, np.ndarray] | None = None):
        shapes = weight_shapes(config, len(vocab))
        for name, shape in shapes.items():
            if name not in weights:
                raise KeyError(f"weight {name} missing")
            if tuple(weights[name].shape) != shape:
                raise ValueError(f"weight {name} has shape {tuple(weights[name].shape)}, expected {shape}")
        self.config = config
        self.weights = {k: np.ascontiguousarray(weights[k], dtype=np.float32) for k in shapes}
        self.vocab = list(vocab)
        self.training = dict(training or {})
        self.complete = complete
        self.origin = origin
        self.source = source
        self.state = state  # optimizer state (snapshots of unfinished training only)
        self.features = WordFeatures(self.vocab, config.hash_buckets)
        self._inv_penalty = inversion_penalties(config.max_span, config.invert_margin, config.max_invert_span)

    def with_abstention(self, invert_margin: float | None = None, max_invert_span: int | None = None,
                        fallback_margin: float | None = None, fallback_length: int | None = None,
                        split_sentences: bool | None = None,
                        chunk_weight: float | None = None) -> "NeuralReorderer":
        """The same network reordering with other search settings (None: keep the model's)."""
        changes = {k: v for k, v in (("invert_margin", invert_margin), ("max_invert_span", max_invert_span),
                                     ("fallback_margin", fallback_margin), ("fallback_length", fallback_length),
                                     ("split_sentences", split_sentences), ("chunk_weight", chunk_weight))
                   if v is not None}
        if not changes:
            return self
        return NeuralReorderer(replace(self.config, **changes), self.weights, self.vocab, self.training,
                               self.complete, self.origin, self.source, self.state)

    def stripped(self) -> "NeuralReorderer":
        """The model without optimizer state (what inference needs)."""
        return NeuralReorderer(self.config, self.weights, self.vocab, self.training, self.complete, self.origin,
                               self.source)

    # --- inference -------------------------------------------------------------------------------------------

    def gains(self, sentences: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(padded pair gains (B, T, L) as pairbtg takes them, lengths, chunk scores (B, T) already weighted or
        None without chunks) of one batch of sentences."""
        words, hashed, lengths = self.features.encode(sentences)
        c = self.config
        if words.shape[1] == 0:
            return np.zeros((len(sentences), 0, 1), dtype=np.float32), lengths, None
        h = encode_numpy(self.weights, c, words, hashed, lengths)
        G = pair_logits_numpy(self.weights, c, h)
        K = chunk_logits_numpy(self.weights, h) if c.chunks and c.chunk_weight > 0 else None
        if c.gain == "prob":  # p(inverted) - p(straight) = 2 sigmoid(x) - 1; the chunks in the same units
            G = np.tanh(0.5 * G)
            K = None if K is None else np.tanh(0.5 * K)
        return G, lengths, None if K is None else c.chunk_weight * K

    def parse_batch(self, sentences: Sequence[Sequence[str]]) -> list[ParseResult]:
        """Best derivations, in input order; with split_sentences each sentence of a line alone, and lines (or
        sentences) longer than MAX_PARSE_WORDS in pieces; pieces are composed straight (sentence_bounds)."""
        return parse_in_pieces(self._parse_uncut, sentences, self._cuts)

    def _cuts(self, words: Sequence[str]) -> list[int]:
        cuts = sentence_cuts(words) if self.config.split_sentences else [0, len(words)]
        out = [0]
        for a, b in zip(cuts, cuts[1:]):
            count = -(-(b - a) // MAX_PARSE_WORDS)
            out += [a + (b - a) * i // count for i in range(1, count)] + [b]
        return out

    def _parse_uncut(self, sentences: Sequence[Sequence[str]]) -> list[ParseResult]:
        """Best derivations, in input order. Sentences are grouped by length so padding stays small."""
        out: list[ParseResult | None] = [None] * len(sentences)
        by_length = sorted(range(len(sentences)), key=lambda s: len(sentences[s]))
        c = self.config
        start = 0
        while start < len(by_length):
            end = start + 1
            longest = len(sentences[by_length[start]])
            while end < len(by_length) and end - start < BATCH:
                n = len(sentences[by_length[end]])
                if (end - start + 1) * n * min(n, c.max_span) > MAX_PAIRS_PER_BATCH:
                    break
                longest = n
                end += 1
            group = [sentences[s] for s in by_length[start:end]]
            if longest == 0:
                results = [pairbtg.monotone_derivation(0, c.max_term) for _ in group]
            else:
                G, lengths, K = self.gains(group)
                results = pairbtg.parse_padded(G.astype(np.float64), lengths, c.max_span, c.max_term,
                                               self._inv_penalty, c.fallback_length, c.fallback_margin,
                                               None if K is None else K.astype(np.float64))
            for s, r in zip(by_length[start:end], results):
                out[s] = r
            start = end
        return out  # type: ignore[return-value]

    def reorder_batch(self, sentences: Sequence[Sequence[str]]) -> list[list[int]]:
        return [p.order.tolist() for p in self.parse_batch(sentences)]

    def reorder(self, words: Sequence[str]) -> list[int]:
        return self.reorder_batch([words])[0]

    def tree(self, words: Sequence[str]) -> str:
        """The best derivation as a bracketed tree, as Reorderer.tree writes it."""
        return tree_string(self.parse_batch([words])[0].edges, list(words))

    # --- file ------------------------------------------------------------------------------------------------

    def header(self) -> dict:
        header = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "config": asdict(self.config),
                  "training": self.training, "complete": self.complete}
        if self.source is not None:
            header["source"] = self.source.header()
        return header

    def save(self, path: str) -> None:
        """Write the model atomically (temporary file + rename)."""
        arrays = {"header": np.array(json.dumps(self.header(), sort_keys=True)),
                  "vocab": np.frombuffer("\n".join(self.vocab).encode("utf-8"), dtype=np.uint8)}
        arrays.update({f"w/{k}": v for k, v in self.weights.items()})
        if self.source is not None:
            arrays["source_bits"] = self.source.bits
        if self.state is not None:
            arrays.update({f"opt/{k}": v for k, v in self.state.items()})
        with atomic_output(path, "wb") as f:
            np.savez(f, **arrays)

    @classmethod
    def from_arrays(cls, path: str, header: dict, arrays: dict[str, np.ndarray],
                    allow_incomplete: bool = False) -> "NeuralReorderer":
        """A model from a read model file's header and arrays (xlpos_prep.reorderer.load_reorderer reads it)."""
        if header.get("version") != FORMAT_VERSION:
            raise ModelFileError(f"{path}: unsupported version {header.get('version')} of {FORMAT_NAME} "
                                 f"(this xlpos reads version {FORMAT_VERSION})")
        try:
            config = NeuralConfig(**header["config"])
            text = arrays["vocab"].tobytes().decode("utf-8")
            vocab = text.split("\n") if text else []
            weights = {k[2:]: v for k, v in arrays.items() if k.startswith("w/")}
            state = {k[4:]: v for k, v in arrays.items() if k.startswith("opt/")} or None
            source = (SourceVocabulary.from_file(header["source"], arrays["source_bits"])
                      if "source" in header else None)
            training = header.get("training", {})
            model = cls(config, weights, vocab, training, complete=header.get("complete", True) is not False,
                        origin=path, source=source, state=state)
        except (KeyError, TypeError, ValueError, UnicodeDecodeError) as e:
            raise ModelFileError(f"{path}: corrupt xlpos reorderer model ({type(e).__name__}: {e})") from None
        bad = [k for k, v in model.weights.items() if not np.isfinite(v).all()]
        if bad:
            raise ModelFileError(f"{path}: the model has non-finite weights (NaN or inf, in {', '.join(bad[:3])}"
                                 f"{' ...' if len(bad) > 3 else ''}): refusing it")
        if not model.complete and not allow_incomplete:
            raise ModelFileError(
                f"{path}: an incomplete reorderer (a snapshot of training stopped after "
                f"{model.training.get('epochs_done', '?')} of {model.training.get('options', {}).get('epochs', '?')} "
                f"epochs); finish it with `xlpos-prep train-reorderer --kind neural ... --resume`")
        return model
