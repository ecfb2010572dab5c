"""Tasks of the xlpos plugin; importing this package registers ``translation_xlpos`` with fairseq."""
from .translation_xlpos import TranslationXLPosConfig, TranslationXLPosTask

__all__ = ["TranslationXLPosConfig", "TranslationXLPosTask"]
