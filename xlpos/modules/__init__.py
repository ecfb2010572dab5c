"""Building blocks for cross-lingual position representations in the encoder."""
from .rotary import apply_rotary, rotary_cos_sin
from .xl_head_attention import XLHeadSelfAttention, XLTransformerEncoderLayer
from .xl_position_encoding import (POSITION_FUSIONS, ContextGatedPositionFusion, GatedPositionFusion,
                                   SumPositionFusion, TanhPositionFusion, lookup_position_encoding)

__all__ = [
    "POSITION_FUSIONS",
    "ContextGatedPositionFusion",
    "GatedPositionFusion",
    "SumPositionFusion",
    "TanhPositionFusion",
    "XLHeadSelfAttention",
    "XLTransformerEncoderLayer",
    "apply_rotary",
    "lookup_position_encoding",
    "rotary_cos_sin",
]
