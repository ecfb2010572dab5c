"""XL-position data: the dataset wrapper that adds ``net_input["src_xl_positions"]`` and the binarizer."""
from .xl_positions_dataset import (
    XL_POSITIONS_KEY,
    LanguagePairWithXLPositionsDataset,
    load_xl_positions,
    model_positions,
    place_like_tokens,
    xl_positions_prefix,
)

__all__ = [
    "XL_POSITIONS_KEY",
    "LanguagePairWithXLPositionsDataset",
    "load_xl_positions",
    "model_positions",
    "place_like_tokens",
    "xl_positions_prefix",
]
