"""Tasks of the xlpos plugin; importing this package registers ``translation_xlpos`` with fairseq."""
from .translation_xlpos import TranslationXLPosConfig, TranslationXLPosTask
from .xl_inference import SentenceXLPositions, XLPositionPipeline

__all__ = ["TranslationXLPosConfig", "TranslationXLPosTask", "SentenceXLPositions", "XLPositionPipeline"]
