"""Hub interface for xlpos models: ``translate()`` raw text with on-the-fly XL positions, and inspect them.

    from xlpos import XLPosTransformerModel

    model = XLPosTransformerModel.from_pretrained("checkpoints/xl-input", checkpoint_file="checkpoint_best.pt",
                                                  data_name_or_path="data-bin")
    model.translate("a raw source sentence .")           # one sentence -> str
    model.translate(["first sentence .", "second ."])    # a batch -> list[str]
    info = model.xl_positions("a raw source sentence .")  # words, order, pieces, xl_positions, ...
    model.reorder("a raw source sentence .")             # the words in predicted target order

Raw text goes through the word tokenizer, reorderer and sentencepiece model that the checkpoint carries (see
:mod:`xlpos.tasks.translation_xlpos`); ``from_pretrained(..., xl_reorderer=PATH, xl_spm=PATH)`` replaces them
(relative paths: the model directory, the data directory, then the current directory), and the other task options
(``xl_word_tokenizer="moses"``, ``xl_detokenizer="moses"``, ``xl_positions="monotone"``, ...) are keyword
arguments too.
"""
from __future__ import annotations

import os
from typing import List, Optional, Union

import torch
from fairseq import hub_utils
from fairseq.hub_utils import GeneratorHubInterface

from xlpos.tasks.translation_xlpos import TranslationXLPosTask
from xlpos.tasks.xl_inference import SentenceXLPositions

# Keyword arguments of from_pretrained that name model files: resolved against the model directory and applied
# after loading, so that they replace what the checkpoint carries.
MODEL_FILE_KWARGS = {"xl_reorderer": "reorderer", "xl_spm": "spm"}


class XLPosHubInterface(GeneratorHubInterface):
    """fairseq's generator hub interface whose raw-text input gets XL positions from the task's reorderer."""

    def __init__(self, cfg, task, models):
        super().__init__(cfg, task, models)
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
        return task.analyze_lines(list(sentences))

    def reorder(self, sentence: str) -> List[str]:
        """The words of a raw sentence in the reorderer's predicted target order."""
        return self.xl_positions(sentence).reordered_words

    def tree(self, sentence: str) -> Optional[str]:
        """The reorderer's BTG derivation of a raw sentence as a bracketed tree (None without a reorderer)."""
        task = self._xl_task()
        reorderer = task.xl_pipeline.reorderer
        return None if reorderer is None else reorderer.tree(self.xl_positions(sentence).words)


def from_pretrained(model_name_or_path: str, checkpoint_file: str = "checkpoint_best.pt",
                    data_name_or_path: str = ".", **kwargs) -> XLPosHubInterface:
    """Load a translation_xlpos checkpoint (or an ensemble: ``checkpoint_file="a.pt:b.pt"``) for translation.

    `data_name_or_path` holds the dictionaries (a path starting with "." is relative to `model_name_or_path`).
    Other keyword arguments override the stored configuration, as in fairseq's ``from_pretrained``.
    """
    import xlpos  # noqa: F401  (safe checkpoint loading and registration, in case only xlpos.hub was imported)

    model_files = {MODEL_FILE_KWARGS[k]: kwargs.pop(k) for k in list(kwargs) if k in MODEL_FILE_KWARGS}
    loaded = hub_utils.from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path, archive_map=None,
                                       **kwargs)
    task = loaded["task"]
    model_files = {k: v for k, v in model_files.items() if v is not None}
    if model_files:
        if not isinstance(task, TranslationXLPosTask):
            raise TypeError(f"{', '.join('xl_' + k for k in model_files)} need a translation_xlpos checkpoint, "
                            f"this one uses {type(task).__name__}")
        task.set_xl_inference_models(search_dirs=[os.path.abspath(model_name_or_path)], **model_files)
    return XLPosHubInterface(loaded["args"], task, loaded["models"])
