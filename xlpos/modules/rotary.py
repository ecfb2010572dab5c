"""Rotary position embedding (RoPE) driven by arbitrary integer positions.

Each head's query/key vector is split into two halves (x1, x2); channel pair i is rotated by the angle
position * base^(-2i/head_dim).  The score q·k then depends on positions only through their difference, so a
constant shift of all positions (e.g. fairseq's padding_idx+1 offset) changes nothing.
"""
from __future__ import annotations

import torch
from torch import Tensor


def rotary_cos_sin(positions: Tensor, head_dim: int, base: float = 10000.0, dtype: torch.dtype | None = None) -> Tensor:
    """Rotation table for ``positions`` (B x T): a 2 x B x 1 x T x head_dim tensor, (cos, cos) and (-sin, sin) of
    the angles, each over the two halves of a head's channels (the form :func:`apply_rotary` multiplies by).

    The angles are computed in float32 (positions up to a few thousand keep full precision there) and the result
    is cast to ``dtype`` (default float32).  The singleton axis broadcasts over heads.
    """
    if head_dim % 2:
        raise ValueError(f"rotary position embedding needs an even head dimension, got {head_dim}")
    half = head_dim // 2
    inv_freq = base ** (-torch.arange(half, device=positions.device, dtype=torch.float32) * 2.0 / head_dim)
    angles = positions.to(torch.float32).unsqueeze(-1) * inv_freq  # B x T x half
    cos, sin = angles.cos(), angles.sin()
    table = torch.stack([torch.cat([cos, cos], dim=-1), torch.cat([-sin, sin], dim=-1)]).unsqueeze(2)
    return table.to(dtype or torch.float32)


def apply_rotary(x: Tensor, cos_sin: Tensor) -> Tensor:
    """Rotate ``x`` (B x H x T x head_dim) by a table from :func:`rotary_cos_sin` (broadcast over H): channel pair
    (x1[i], x2[i]) of the two halves becomes (x1 cos - x2 sin, x2 cos + x1 sin)."""
    # In the activations' dtype: under --amp, q/k are half while the table was built in float32, and a float32
    # table would silently promote the rotation (and the attention after it) to float32.
    cos, sin = cos_sin[0].to(x.dtype), cos_sin[1].to(x.dtype)
    # (x2, x1) in one op; with the table's (cos, cos) and (-sin, sin) this is four element-wise ops in all, where
    # splitting x and joining the halves again takes eight, each with its backward pass
    swapped = x.unflatten(-1, (2, -1)).flip(-2).flatten(-2)
    return x * cos + swapped * sin
