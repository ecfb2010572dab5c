"""Hub interface for xlpos models: ``translate()`` raw text with on-the-fly XL positions, and inspect them.

    from xlpos import XLPosTransformerModel

    model = XLPosTransformerModel.from_pretrained("checkpoints/xl-input", checkpoint_file="checkpoint_best.pt",
                                                  data_name_or_path="data-bin")
    model.translate("a raw source sentence .")           # one sentence -> str
    model.translate(["first sentence .", "second ."])    # a batch -> list[str]
    info = model.xl_positions("a raw source sentence .")  # words, order, pieces, xl_positions, ...
    model.reorder("a raw source sentence .")             # the words in predicted target order
    model.tree("a raw source sentence .")                # the reorderer's BTG derivation, bracketed
    model.draw_tree("a raw source sentence .", "tree.svg")            # ... as a picture with the XL positions
    model.attention_map("a raw source sentence .").save("attention.svg")  # encoder-decoder attention, one layer

Raw text goes through the word tokenizer, reorderer and sentencepiece model that the checkpoint carries (see
:mod:`xlpos.tasks.translation_xlpos`); ``from_pretrained(..., xl_reorderer=PATH, xl_spm=PATH)`` replaces them
(relative paths: the model directory, the data directory, then the current directory), and the other task options
(``xl_word_tokenizer="moses"``, ``xl_detokenizer="moses"``, ``xl_positions="monotone"``, ...) are keyword
arguments too.

The hub is quiet: at the default log level ``translate()``, ``xl_positions()``, ``tree()`` and loading print
nothing of fairseq's (its INFO lines about batch iterators, torch's pin_memory warning on CPU). fairseq's INFO lines
come back with ``verbose=True`` (``from_pretrained(..., verbose=True)``, ``hub.verbose = True`` or per call,
``translate(..., verbose=True)``, which also logs fairseq's S/H/P lines) or by setting the level of the "fairseq"
logger yourself (``logging.getLogger("fairseq").setLevel(logging.INFO)``): a level you set is never changed.
Warnings of xlpos's own (an input cut to the model's length, a reorderer failure) are always shown.
"""
from __future__ import annotations

import logging
import os
import warnings
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, List, Optional, Union

import torch
from fairseq import hub_utils
from fairseq.hub_utils import GeneratorHubInterface

from xlpos.tasks.translation_xlpos import TranslationXLPosTask
from xlpos.tasks.xl_inference import SentenceXLPositions

if TYPE_CHECKING:
    from xlpos.evaluation.attention_map import AttentionMap

# Importing fairseq leaves the root logger at DEBUG (a logging.basicConfig in one of its model modules), so numba
# would log every step of compiling the reorderer's kernels, which a fresh install does in a background thread
# after the call that needed them returned: numba stays at WARNING unless the user set its level.
if logging.getLogger("numba").level == logging.NOTSET:
    logging.getLogger("numba").setLevel(logging.WARNING)

# Keyword arguments of from_pretrained that name model files: resolved against the model directory and applied
# after loading, so that they replace what the checkpoint carries.
MODEL_FILE_KWARGS = {"xl_reorderer": "reorderer", "xl_spm": "spm"}


@contextmanager
def fairseq_quiet(verbose: bool = False) -> Iterator[None]:
    """Hide fairseq's INFO lines and torch's CPU pin_memory warning for the duration, unless `verbose` or the user
    set the "fairseq" logger's level (fairseq configures the root logger at INFO when imported, so its per-batch
    INFO lines would otherwise print on every call)."""
    if verbose:
        yield
        return
    fairseq_logger = logging.getLogger("fairseq")
    ours = fairseq_logger.level == logging.NOTSET
    if ours:
        fairseq_logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            # fairseq's iterators ask for pinned memory; on a machine without an accelerator torch says it is unused
            warnings.filterwarnings("ignore", message=".*pin_memory.*", category=UserWarning)
            yield
    finally:
        if ours:
            fairseq_logger.setLevel(logging.NOTSET)


class XLPosHubInterface(GeneratorHubInterface):
    """fairseq's generator hub interface whose raw-text input gets XL positions from the task's reorderer.

    `verbose`: let fairseq's INFO lines through (see the module's docstring); a per-call ``verbose=True`` does too.
    """

    def __init__(self, cfg, task, models, verbose: bool = False):
        super().__init__(cfg, task, models)
        self.verbose = verbose
        if isinstance(task, TranslationXLPosTask):
            # fairseq builds these from cfg alone; the task adds the word tokenizer, detokenizer and
            # sentencepiece model the checkpoint carries when the configuration names none.
            self.tokenizer = task.build_tokenizer(cfg.tokenizer)
            self.bpe = task.build_bpe(cfg.bpe)

    def _xl_task(self) -> TranslationXLPosTask:
        if not isinstance(self.task, TranslationXLPosTask):
            raise TypeError(f"this model was trained with task {type(self.task).__name__}, which has no XL positions "
                            "(train with --task translation_xlpos)")
        return self.task

    def _quiet(self, verbose: bool = False):
        return fairseq_quiet(verbose or self.verbose)

    def generate(self, tokenized_sentences, beam: int = 5, verbose: bool = False, **kwargs):
        """fairseq's generate (which translate() and sample() call), without fairseq's INFO lines unless verbose."""
        with self._quiet(verbose):
            return super().generate(tokenized_sentences, beam, verbose, **kwargs)

    def encode(self, sentence: str) -> torch.LongTensor:
        """Raw sentence -> source token ids (EOS included); the XL positions are computed on the way."""
        if not isinstance(self.task, TranslationXLPosTask):
            return super().encode(sentence)
        tokens, _ = self.task.get_interactive_tokens_and_lengths([sentence], self.encode_fn_for_task)
        return tokens[0]

    def encode_fn_for_task(self, sentence: str) -> str:
        """fairseq's text route (--tokenizer / --bpe of the user's), for the task to call."""
        return self.apply_bpe(self.tokenize(sentence))

    def xl_positions(self, sentences: Union[str, List[str]]) -> Union[SentenceXLPositions, List[SentenceXLPositions]]:
        """How raw sentence(s) become model input: the words, the reorderer's order, the pieces, their XL
        positions and token ids (:class:`xlpos.tasks.xl_inference.SentenceXLPositions`)."""
        if isinstance(sentences, str):
            return self.xl_positions([sentences])[0]
        task = self._xl_task()
        if not task.xl_pipeline.can_encode_text or task._external_bpe:
            raise ValueError("xl_positions() needs the sentencepiece model the source was encoded with: give "
                             "xl_spm=PATH to from_pretrained, or train with --xl-spm")
        with self._quiet():
            return task.analyze_lines(list(sentences))

    def reorder(self, sentence: str) -> List[str]:
        """The words of a raw sentence in the reorderer's predicted target order."""
        return self.xl_positions(sentence).reordered_words

    def tree(self, sentence: str) -> Optional[str]:
        """The reorderer's BTG derivation of a raw sentence as a bracketed tree (None without a reorderer)."""
        task = self._xl_task()
        reorderer = task.xl_pipeline.reorderer
        words = self.xl_positions(sentence).words
        with self._quiet():
            return None if reorderer is None else reorderer.tree(words)

    def draw_tree(self, sentences: Union[str, List[str]], path: Optional[str] = None) -> str:
        """A picture of the reorderer's BTG tree of raw sentence(s), each word with its absolute and XL position
        (what ``xlpos-prep show`` draws): the SVG text, also written to `path` when given (.svg, or .png with
        matplotlib)."""
        from xlpos_prep.show import sentence_trees

        lines = [sentences] if isinstance(sentences, str) else list(sentences)
        reorderer = self._xl_task().xl_pipeline.reorderer
        if reorderer is None:
            raise ValueError("draw_tree() needs a reorderer: this model has none (give xl_reorderer=PATH to "
                             "from_pretrained, or train with --xl-reorderer)")
        words = [info.words for info in self.xl_positions(lines)]
        with self._quiet():
            picture = sentence_trees(reorderer, words)
        if path is not None:
            picture.save(path)
        return picture.svg()

    def attention_map(self, sentence: str, layer: int = -1, head: Optional[int] = None, beam: int = 5,
                      **kwargs) -> "AttentionMap":
        """The encoder-decoder attention of one decoder layer (mean over heads, or one head) while the model
        writes its translation of a raw sentence, over words: :class:`xlpos.evaluation.attention_map.AttentionMap`
        (``.weights``, ``.svg()``, ``.save(path)``). Decoding options as for translate()."""
        from xlpos.evaluation.attention_map import attention_map

        with self._quiet(kwargs.get("verbose", False)):
            return attention_map(self, sentence, layer=layer, head=head, beam=beam, **kwargs)


def from_pretrained(model_name_or_path: str, checkpoint_file: str = "checkpoint_best.pt",
                    data_name_or_path: str = ".", **kwargs) -> XLPosHubInterface:
    """Load a translation_xlpos checkpoint (or an ensemble: ``checkpoint_file="a.pt:b.pt"``) for translation.

    `data_name_or_path` holds the dictionaries (a path starting with "." is relative to `model_name_or_path`).
    ``verbose=True`` shows fairseq's INFO lines (loading, and every call of the hub). Other keyword arguments
    override the stored configuration, as in fairseq's ``from_pretrained``.
    """
    import xlpos  # noqa: F401  (safe checkpoint loading and registration, in case only xlpos.hub was imported)

    verbose = bool(kwargs.pop("verbose", False))
    model_files = {MODEL_FILE_KWARGS[k]: kwargs.pop(k) for k in list(kwargs) if k in MODEL_FILE_KWARGS}
    with fairseq_quiet(verbose):
        loaded = hub_utils.from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path,
                                           archive_map=None, **kwargs)
    task = loaded["task"]
    model_files = {k: v for k, v in model_files.items() if v is not None}
    if model_files:
        if not isinstance(task, TranslationXLPosTask):
            raise TypeError(f"{', '.join('xl_' + k for k in model_files)} need a translation_xlpos checkpoint, "
                            f"this one uses {type(task).__name__}")
        task.set_xl_inference_models(search_dirs=[os.path.abspath(model_name_or_path)], **model_files)
    return XLPosHubInterface(loaded["args"], task, loaded["models"], verbose=verbose)
