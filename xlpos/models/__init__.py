"""Models of the xlpos plugin; importing this package registers them with fairseq."""
from .transformer_xlpos import (
    XLPosTransformerEncoder,
    XLPosTransformerModel,
    XLPositionOptions,
    parse_xl_layers,
)

__all__ = ["XLPosTransformerEncoder", "XLPosTransformerModel", "XLPositionOptions", "parse_xl_layers"]
