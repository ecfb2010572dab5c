"""Building blocks for cross-lingual position representations in the encoder."""
from .rotary import apply_rotary, rotary_cos_sin
from .xl_head_attention import XLHeadSelfAttention, XLTransformerEncoderLayer
from .xl_position_encoding import GatedPositionFusion, lookup_position_encoding

__all__ = [
    "GatedPositionFusion",
    "XLHeadSelfAttention",
    "XLTransformerEncoderLayer",
    "apply_rotary",
    "lookup_position_encoding",
    "rotary_cos_sin",
]
