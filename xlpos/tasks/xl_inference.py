"""On-the-fly XL positions for raw text: words -> reorderer -> order -> sentencepiece pieces -> XL positions.

Used by the task ``translation_xlpos`` for fairseq-interactive, the hub interface (``translate()``) and
``--xl-positions reorder``. Two routes lead to the same positions:

* **from text** (:meth:`XLPositionPipeline.analyze_lines`): the raw line is word-tokenized as the training corpus
  was, the reorderer orders the words, sentencepiece encodes them, and the piece positions are computed exactly as
  ``xlpos-prep reorder`` + ``xlpos-prep positions`` compute them offline (the same functions). The result is
  remembered by its token ids.
* **from token ids** (:meth:`XLPositionPipeline.positions_for_tokens`), for batches that carry only token ids
  (fairseq-interactive rebuilds ``net_input`` from tokens, fairseq-generate on a data-bin without ``.xlpos``
  files): a sentence seen by the first route gets the positions remembered for its ids; otherwise the ids are
  decoded to pieces through the source dictionary and the words are the pieces joined at sentencepiece's
  word-boundary marker. That is exact when sentencepiece ran on the tokenized words (docs/design.md), except for
  words holding characters sentencepiece normalizes or that the dictionary maps to ``<unk>``, which the
  reorderer then sees in that form.

Nothing here ever raises on the content of an input line: a sentence whose pieces cannot be mapped to its words
gets monotone positions and a logged warning; a sentence longer than the model accepts is truncated (positions
re-ranked over the kept pieces, as ``--truncate-source`` does in training) with a warning.
"""
from __future__ import annotations

import collections
import hashlib
import logging
import os
import tempfile
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import torch

from xlpos_prep.subword import WORD_BOUNDARY, piece_word_ids, xl_positions_for_pieces
from xlpos.data.xl_positions_dataset import rerank

if TYPE_CHECKING:  # numba and the BTG code are imported only when a reorderer is loaded
    from xlpos_prep.reorderer import AnyReorderer

logger = logging.getLogger(__name__)

REORDERER = "reorderer"
MONOTONE = "monotone"
FALLBACK = "monotone-fallback"

_CACHE_SIZE = 8192  # sentences whose positions are remembered by token ids (interactive buffers, hub batches)


# ------------------------------------------------------------------------------------------------ model files
@dataclass(frozen=True)
class ModelFile:
    """A reorderer or sentencepiece model held in memory: what checkpoints store, what inference loads."""

    kind: str  # "reorderer" or "sentencepiece"
    data: bytes
    origin: str  # where it came from, for logs: a path, or "checkpoint (trained with PATH)"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def describe(self) -> str:
        return f"{self.kind} from {self.origin} (sha256 {self.sha256[:12]}, {len(self.data) / 1e6:.2f} MB)"


def resolve_model_path(path: str, search_dirs: Sequence[str], what: str) -> str:
    """An absolute path as given; a relative one is looked up in `search_dirs`, then the current directory.

    The first existing file wins; when there is none, the error lists every place tried.
    """
    expanded = os.path.expanduser(path)
    if os.path.isabs(expanded):
        if not os.path.isfile(expanded):
            raise FileNotFoundError(f"{what} {path}: no such file")
        return expanded
    tried = []
    for directory in [*search_dirs, os.getcwd()]:
        candidate = os.path.abspath(os.path.join(directory, expanded))
        if candidate in tried:
            continue
        tried.append(candidate)
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(f"{what} {path!r} not found; looked for {', '.join(tried)}")


def read_reorderer_file(path: str) -> ModelFile:
    """Validate a reorderer model file of either kind (``load_reorderer``) and return its bytes, without learner
    state."""
    from xlpos_prep.reorderer import load_reorderer

    reorderer = load_reorderer(path)  # one-line FileNotFoundError / ModelFileError naming the file
    if reorderer.state is None:
        with open(path, "rb") as f:
            return ModelFile("reorderer", f.read(), path)
    # A --resumable model carries the raw learner state, which inference never uses: store the weights only.
    with tempfile.TemporaryDirectory() as tmp:
        stripped = os.path.join(tmp, "reorderer.npz")
        reorderer.stripped().save(stripped)
        with open(stripped, "rb") as f:
            return ModelFile("reorderer", f.read(), path)


def read_spm_file(path: str) -> ModelFile:
    """Validate a sentencepiece model file and return its bytes."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such sentencepiece model")
    with open(path, "rb") as f:
        data = f.read()
    load_spm(ModelFile("sentencepiece", data, path))
    return ModelFile("sentencepiece", data, path)


def load_reorderer(model: ModelFile) -> "AnyReorderer":
    from xlpos_prep import reorderer

    # reorderer.load_reorderer tells the kinds apart, validates the format and version, and reads only from a file.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "reorderer.npz")
        with open(path, "wb") as f:
            f.write(model.data)
        try:
            return reorderer.load_reorderer(path)
        except ValueError as e:
            raise ValueError(f"{model.origin}: {str(e).split(': ', 1)[-1]}") from None


def load_spm(model: ModelFile):
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model.data)
    except (RuntimeError, OSError, TypeError) as e:
        raise ValueError(f"{model.origin}: not a sentencepiece model ({str(e).splitlines()[0] if str(e) else e})") \
            from None
    return processor


def model_file_to_tensor(model: ModelFile) -> torch.Tensor:
    """Bytes as a uint8 tensor: a type fairseq checkpoints load under weights_only=True."""
    return torch.frombuffer(bytearray(model.data), dtype=torch.uint8)


def model_file_from_tensor(kind: str, tensor: torch.Tensor, origin: str) -> ModelFile:
    return ModelFile(kind, tensor.cpu().contiguous().numpy().tobytes(), origin)


def valid_text(line: str) -> tuple[str, bool]:
    """(line with lone surrogates replaced by U+FFFD, whether any were). Python decodes undecodable input bytes
    to lone surrogates (surrogateescape, e.g. stdin under the C locale), which sentencepiece cannot take."""
    try:
        line.encode("utf-8")
        return line, False
    except UnicodeEncodeError:
        pass
    try:  # surrogateescape: back to the original bytes, each invalid byte becomes one U+FFFD
        return line.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), True
    except UnicodeEncodeError:  # other lone surrogates
        return line.encode("utf-8", "surrogatepass").decode("utf-8", "replace"), True


# ------------------------------------------------------------------------------------------------ one sentence
@dataclass(frozen=True)
class SentenceXLPositions:
    """How one source sentence was turned into model input: for inspection, plots and debugging."""

    words: list[str]  # the words the reorderer saw
    order: list[int]  # word indices in predicted target order (a permutation of range(len(words)))
    pieces: list[str]  # the source tokens given to the model, EOS excluded
    xl_positions: list[int]  # one per piece: its index in the reordered piece sequence
    token_ids: list[int] = field(repr=False)  # source dictionary ids of the pieces, then EOS
    method: str = REORDERER  # "reorderer", "monotone" (no reorderer / --xl-positions monotone), "monotone-fallback"
    note: str = ""  # why a fallback or a truncation happened

    @property
    def reordered_words(self) -> list[str]:
        """The words in predicted target order."""
        return [self.words[i] for i in self.order]

    @property
    def reordered_pieces(self) -> list[str]:
        """The pieces sorted by XL position."""
        out = [""] * len(self.pieces)
        for piece, position in zip(self.pieces, self.xl_positions):
            out[position] = piece
        return out

    def as_dict(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------------------------------------ the pipeline
class XLPositionPipeline:
    """Raw lines or token ids -> source token ids and raw 0-based XL positions (EOS excluded).

    Args:
        src_dict: the task's source dictionary.
        reorderer: the trained reorderer, or None for monotone positions (XL = absolute).
        sentencepiece: the sentencepiece processor the source was encoded with, or None when source tokens are
            whole words (a word-level vocabulary).
        word_tokenizer: raw line -> words, as the training corpus was tokenized.
        max_source_tokens: the most source tokens (EOS included) the model accepts; longer inputs are truncated.
    """

    def __init__(self, src_dict, reorderer: Optional[AnyReorderer], sentencepiece=None,
                 word_tokenizer: Callable[[str], list[str]] = str.split, max_source_tokens: Optional[int] = None):
        self.src_dict = src_dict
        self.reorderer = reorderer
        self.sp = sentencepiece
        self.word_tokenizer = word_tokenizer
        self.max_source_tokens = max_source_tokens
        # Pieces are mapped to words by the word-boundary marker when the source was sentencepiece-encoded: known
        # from the model, or seen in the dictionary (a user may give pieces without the model).
        self.uses_pieces = sentencepiece is not None or any(
            s.startswith(WORD_BOUNDARY) for s in src_dict.symbols[src_dict.nspecial:])
        self._remembered: collections.OrderedDict[tuple[int, ...], torch.Tensor] = collections.OrderedDict()

    @property
    def method(self) -> str:
        return REORDERER if self.reorderer is not None else MONOTONE

    @property
    def can_encode_text(self) -> bool:
        """Raw text can be turned into pieces here (a sentencepiece model, or a word-level vocabulary)."""
        return self.sp is not None or not self.uses_pieces

    # ---- from text --------------------------------------------------------------------------------------------
    def analyze_lines(self, lines: Sequence[str], word_tokenizer: Optional[Callable[[str], list[str]]] = None,
                      first_index: int = 0) -> list[SentenceXLPositions]:
        """Raw lines -> model input and XL positions (remembered by token ids for the id route)."""
        tokenize = word_tokenizer or self.word_tokenizer
        sentences = []
        for k, line in enumerate(lines):
            line, replaced = valid_text(line)
            if replaced:
                logger.warning("translation_xlpos: input %d: characters that are not valid UTF-8 were replaced by "
                               "U+FFFD", first_index + k)
            try:
                sentences.append(tokenize(line))
            except Exception as e:  # a tokenizer failing on odd input must not stop the others
                logger.warning("translation_xlpos: input %d: the word tokenizer failed (%s: %s); splitting it on "
                               "whitespace", first_index + k, type(e).__name__, e)
                sentences.append(line.split())
        return self.analyze_words(sentences, first_index)

    def analyze_words(self, sentences: Sequence[Sequence[str]], first_index: int = 0) -> list[SentenceXLPositions]:
        """Tokenized sentences -> model input and XL positions (remembered by token ids for the id route)."""
        if not self.can_encode_text:
            raise ValueError("the source dictionary holds sentencepiece pieces but no sentencepiece model is known: "
                             "give --xl-spm (or train with it, so checkpoints carry it)")
        prepared = []
        for k, words in enumerate(sentences):
            try:
                prepared.append(self._pieces_for_words(list(words)))
            except Exception as e:  # e.g. sentencepiece rejecting a string: translate nothing rather than stop
                # (logged with the other notes below)
                prepared.append(([], [], [], f"could not be encoded ({type(e).__name__}: {e}); translated as an "
                                             "empty sentence"))
        orders = self._reorder([p[0] for p in prepared], first_index)
        results = []
        for k, ((words, pieces, word_ids, note), order) in enumerate(zip(prepared, orders)):
            method = self.method
            if word_ids is None:  # the pieces could not be mapped to the words
                method, order = FALLBACK, list(range(len(words)))
                positions = list(range(len(pieces)))
            elif order is None:  # the reorderer failed on this sentence
                method, order, note = FALLBACK, list(range(len(words))), "the reorderer failed on it"
                positions = xl_positions_for_pieces(word_ids, order)
            else:
                positions = xl_positions_for_pieces(word_ids, order)
            if method == FALLBACK:
                logger.warning("translation_xlpos: input %d: %s; monotone XL positions for it", first_index + k, note)
            elif note:
                logger.warning("translation_xlpos: input %d: %s", first_index + k, note)
            ids = [self.src_dict.index(p) for p in pieces]
            info = SentenceXLPositions(words=words, order=order, pieces=pieces, xl_positions=positions,
                                       token_ids=ids + [self.src_dict.eos()], method=method, note=note)
            info = self._truncate(info, first_index + k)
            self.remember(info)
            results.append(info)
        return results

    def _pieces_for_words(self, words: list[str]) -> tuple[list[str], list[str], Optional[list[int]], str]:
        """(words the reorderer sees, pieces, piece -> word index or None when unmappable, note)."""
        if self.sp is None:  # word-level vocabulary: every word is one token
            return words, list(words), list(range(len(words))), ""
        pieces = self.sp.encode(" ".join(words), out_type=str)
        word_ids, problem = self._word_ids(pieces, len(words))
        if problem is None:
            return words, pieces, word_ids, ""
        # Words sentencepiece normalizes away (zero-width or control characters alone) have no piece: the
        # offline pipeline rejects such lines; here the reorderer orders the words that remain.
        kept = [w for w in words if self.sp.encode(w, out_type=str)]
        if len(kept) < len(words):
            pieces = self.sp.encode(" ".join(kept), out_type=str)
            word_ids, problem = self._word_ids(pieces, len(kept))
            if problem is None:
                dropped = len(words) - len(kept)
                return kept, pieces, word_ids, f"{dropped} word(s) without any sentencepiece piece were ignored"
        return words, pieces, None, problem

    @staticmethod
    def _word_ids(pieces: list[str], n_words: int) -> tuple[Optional[list[int]], Optional[str]]:
        try:
            word_ids = piece_word_ids(pieces)
        except ValueError as e:
            return None, str(e)
        found = word_ids[-1] + 1 if word_ids else 0
        if found != n_words:
            return None, f"its {len(pieces)} pieces form {found} words but it has {n_words}"
        return word_ids, None

    def _reorder(self, sentences: list[list[str]], first_index: int) -> list[Optional[list[int]]]:
        if self.reorderer is None:
            return [list(range(len(words))) for words in sentences]
        try:
            return self.reorderer.reorder_batch(sentences)
        except Exception:  # one bad sentence must not cost the others their order: retry one by one
            orders: list[Optional[list[int]]] = []
            for k, words in enumerate(sentences):
                try:
                    orders.append(self.reorderer.reorder(words))
                except Exception as e:
                    logger.warning("translation_xlpos: input %d: the reorderer failed (%s: %s)", first_index + k,
                                   type(e).__name__, e)
                    orders.append(None)
            return orders

    def _truncate(self, info: SentenceXLPositions, index: int) -> SentenceXLPositions:
        limit = self.max_source_tokens
        if limit is None or len(info.token_ids) <= limit:
            return info
        keep = max(limit - 1, 0)
        note = (f"{len(info.pieces)} source tokens exceed the model's limit of {limit} (with EOS): truncated to the "
                f"first {keep}")
        logger.warning("translation_xlpos: input %d: %s", index, note)
        positions = rerank(torch.tensor(info.xl_positions[:keep], dtype=torch.long)).tolist()
        return SentenceXLPositions(
            words=info.words, order=info.order, pieces=info.pieces[:keep], xl_positions=positions,
            token_ids=info.token_ids[:keep] + [self.src_dict.eos()], method=info.method,
            note="; ".join(n for n in (info.note, note) if n))

    def truncate_tokens(self, tokens: torch.Tensor, index: int) -> torch.Tensor:
        """Token ids (ending with EOS) cut to the model's limit, EOS kept; a warning when something is cut."""
        limit = self.max_source_tokens
        if limit is None or tokens.numel() <= limit:
            return tokens
        logger.warning("translation_xlpos: input %d: %d source tokens exceed the model's limit of %d (with EOS): "
                       "truncated to the first %d", index, tokens.numel() - 1, limit, limit - 1)
        return torch.cat([tokens[:limit - 1], tokens.new_tensor([self.src_dict.eos()])])

    # ---- remembered positions -----------------------------------------------------------------------------------
    def remember(self, info: SentenceXLPositions) -> None:
        key = tuple(info.token_ids)
        self._remembered[key] = torch.tensor(info.xl_positions, dtype=torch.long)
        self._remembered.move_to_end(key)
        while len(self._remembered) > _CACHE_SIZE:
            self._remembered.popitem(last=False)

    def remembered(self, token_ids: Sequence[int]) -> Optional[torch.Tensor]:
        return self._remembered.get(tuple(token_ids))

    # ---- from token ids -----------------------------------------------------------------------------------------
    def positions_for_tokens(self, src_tokens: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Raw XL positions (EOS excluded) for token-id sentences ending with EOS; pads, if any, are ignored."""
        pad, eos = self.src_dict.pad(), self.src_dict.eos()
        ids_list = []
        for tokens in src_tokens:
            ids = tokens[tokens.ne(pad)].tolist()
            ids_list.append(ids[:-1] if ids and ids[-1] == eos else ids)
        out: list[Optional[torch.Tensor]] = [None] * len(ids_list)
        todo = []
        for k, ids in enumerate(ids_list):
            known = self.remembered(ids + [eos])
            if known is not None and known.numel() == len(ids):
                out[k] = known
            elif self.reorderer is None:
                out[k] = torch.arange(len(ids), dtype=torch.long)
            else:
                todo.append(k)
        if todo:
            decoded = [self._words_of_ids(ids_list[k]) for k in todo]
            mappable = [d[0] if d[1] is not None else [] for d in decoded]
            orders = self._reorder(mappable, 0)
            for k, (words, word_ids, problem), order in zip(todo, decoded, orders):
                if word_ids is None or order is None:
                    logger.warning("translation_xlpos: a source sentence of %d tokens: %s; monotone XL positions "
                                   "for it", len(ids_list[k]), problem or "the reorderer failed on it")
                    out[k] = torch.arange(len(ids_list[k]), dtype=torch.long)
                else:
                    out[k] = torch.tensor(xl_positions_for_pieces(word_ids, order), dtype=torch.long)
        return out  # type: ignore[return-value]

    def _words_of_ids(self, ids: list[int]) -> tuple[list[str], Optional[list[int]], Optional[str]]:
        symbols = [self.src_dict[i] for i in ids]
        if not self.uses_pieces:
            return symbols, list(range(len(symbols))), None
        try:
            word_ids = piece_word_ids(symbols)
        except ValueError as e:
            return [], None, str(e)
        words = [""] * (word_ids[-1] + 1 if word_ids else 0)
        for symbol, w in zip(symbols, word_ids):
            words[w] += symbol
        return [w.lstrip(WORD_BOUNDARY) for w in words], word_ids, None


# ------------------------------------------------------------------------------------------------ fairseq adapters
class WordTokenizerAdapter:
    """fairseq tokenizer interface (encode/decode strings) over a word tokenizer and a target detokenizer."""

    def __init__(self, tokenize: Callable[[str], list[str]], detokenize: Callable[[str], str]):
        self.tokenize = tokenize
        self.detokenize = detokenize

    def encode(self, x: str) -> str:
        return " ".join(self.tokenize(x))

    def decode(self, x: str) -> str:
        return self.detokenize(x)


class SentencepieceAdapter:
    """fairseq bpe interface over an in-memory sentencepiece model (the one checkpoints carry)."""

    def __init__(self, processor):
        self.sp = processor

    def encode(self, x: str) -> str:
        return " ".join(self.sp.encode(x, out_type=str))

    def decode(self, x: str) -> str:
        # As fairseq's sentencepiece bpe: pieces joined, word-boundary markers become spaces.
        return x.replace(" ", "").replace(WORD_BOUNDARY, " ").strip()

    def is_beginning_of_word(self, x: str) -> bool:
        return x in ("<unk>", "<s>", "</s>", "<pad>") or x.startswith(WORD_BOUNDARY)
