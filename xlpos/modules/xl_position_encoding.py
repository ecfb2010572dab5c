"""Position-encoding lookups at given positions, and the fusions of two encodings (``--xl-fusion``).

fairseq's positional-embedding modules compute positions from the tokens themselves (``make_positions``);
``SinusoidalPositionalEmbedding.forward`` even ignores a ``positions=`` argument and
``LearnedPositionalEmbedding.forward`` refuses one while it has a padding index.  XL positions are given by the
data, so we read the encoder's own table at those positions: the XL encoding comes from the same family (and, for
learned positions, the same parameters) as the absolute one, and position p means the same vector in both.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import LearnedPositionalEmbedding, SinusoidalPositionalEmbedding
from torch import Tensor


def lookup_position_encoding(embed_positions: nn.Module, positions: Tensor) -> Tensor:
    """Encodings of ``positions`` (B x T, fairseq convention: first position padding_idx+1, pads padding_idx).

    Returns B x T x C in the table's dtype and device.  Pad slots get the table's padding row (zeros for the
    sinusoidal table; the never-updated, zero-initialised row for the learned one).
    """
    if positions.dim() != 2:
        raise ValueError(f"positions must be B x T, got shape {tuple(positions.shape)}")
    if isinstance(embed_positions, LearnedPositionalEmbedding):
        return F.embedding(positions, embed_positions.weight, embed_positions.padding_idx)
    if isinstance(embed_positions, SinusoidalPositionalEmbedding):
        return _sinusoidal_lookup(embed_positions, positions)
    raise TypeError(
        f"cannot look up XL positions in {type(embed_positions).__name__}; "
        "expected fairseq's SinusoidalPositionalEmbedding or LearnedPositionalEmbedding"
    )


def _sinusoidal_lookup(module: SinusoidalPositionalEmbedding, positions: Tensor) -> Tensor:
    bsz, seq_len = positions.shape
    # A valid position in a row of length T is at most padding_idx + T (T tokens numbered from padding_idx + 1),
    # the same bound fairseq uses for the absolute table, so no device sync on positions.max() is needed.
    needed = module.padding_idx + 1 + seq_len
    weights = module.weights
    if needed > weights.size(0):
        weights = SinusoidalPositionalEmbedding.get_embedding(
            needed, module.embedding_dim, module.padding_idx
        ).to(weights)
        if module.auto_expand:
            module.weights = weights
    return weights.index_select(0, positions.reshape(-1)).view(bsz, seq_len, -1).detach()


class GatedPositionFusion(nn.Module):
    """Learned per-dimension convex combination of the absolute and the XL position encoding.

    g = sigmoid(W [PE(abs); PE(xl)] + b), fused = g * PE(abs) + (1 - g) * PE(xl)  (g has one value per channel,
    per token).  W and b start at zero, so training starts from the plain average of the two encodings, and
    creating the module draws nothing from the random generator: every other parameter of a model gets the same
    initial values as in the vanilla Transformer built with the same seed.  When XL = absolute positions the
    output equals PE(abs) whatever the gate, i.e. the vanilla input.
    """

    def __init__(self, embed_dim: int) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.weight = nn.Parameter(torch.zeros(embed_dim, 2 * embed_dim))
        self.bias = nn.Parameter(torch.zeros(embed_dim))

    def initial_state(self) -> dict[str, Tensor]:
        """The parameters as a freshly built module holds them (the state a vanilla checkpoint lacks)."""
        return {"weight": torch.zeros_like(self.weight), "bias": torch.zeros_like(self.bias)}

    def forward(self, pe_abs: Tensor, pe_xl: Tensor, token_embedding: Optional[Tensor] = None) -> Tensor:
        gate = torch.sigmoid(F.linear(torch.cat([pe_abs, pe_xl], dim=-1), self.weight, self.bias))
        return pe_xl + gate * (pe_abs - pe_xl)

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}"


class ContextGatedPositionFusion(GatedPositionFusion):
    """The gated fusion whose gate also sees the word and its neighbours, so that it can learn where to trust the
    XL position less (a word the reorderer often misplaces, a context where it does).

    g = sigmoid(W [PE(abs); PE(xl); E(w_t); (E(w_t-1) + E(w_t) + E(w_t+1)) / 3] + b), fused as the gated fusion.
    E is the scaled token embedding the encoder adds the positions to (pads are zero vectors, so a padded
    neighbour adds nothing). Zero-initialised like the gated fusion: training starts from the plain average, and
    building it draws no random numbers. This project's design, not the paper's.
    """

    def __init__(self, embed_dim: int) -> None:
        nn.Module.__init__(self)
        self.embed_dim = embed_dim
        self.weight = nn.Parameter(torch.zeros(embed_dim, 4 * embed_dim))
        self.bias = nn.Parameter(torch.zeros(embed_dim))

    def forward(self, pe_abs: Tensor, pe_xl: Tensor, token_embedding: Optional[Tensor] = None) -> Tensor:
        if token_embedding is None:
            raise ValueError("the context-gated fusion needs the token embeddings")
        window = token_embedding.clone()
        window[:, 1:] += token_embedding[:, :-1]
        window[:, :-1] += token_embedding[:, 1:]
        features = torch.cat([pe_abs, pe_xl, token_embedding, window / 3], dim=-1)
        gate = torch.sigmoid(F.linear(features, self.weight, self.bias))
        return pe_xl + gate * (pe_abs - pe_xl)


class TanhPositionFusion(nn.Module):
    """A non-linear fusion of projected encodings: fused = tanh(U PE(abs) + V PE(xl)).

    Offered as an option: it has been recalled as the paper's InXL combination, but this project does not hold
    the paper's words for it. U and V start as the identity, so training starts from tanh(PE(abs) + PE(xl)) and
    building it draws no random numbers (every other parameter matches the vanilla model's).
    """

    def __init__(self, embed_dim: int) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.abs_proj = nn.Parameter(torch.eye(embed_dim))
        self.xl_proj = nn.Parameter(torch.eye(embed_dim))

    def initial_state(self) -> dict[str, Tensor]:
        return {"abs_proj": torch.eye(self.embed_dim), "xl_proj": torch.eye(self.embed_dim)}

    def forward(self, pe_abs: Tensor, pe_xl: Tensor, token_embedding: Optional[Tensor] = None) -> Tensor:
        return torch.tanh(F.linear(pe_abs, self.abs_proj) + F.linear(pe_xl, self.xl_proj))

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}"


class SumPositionFusion(nn.Module):
    """PE(abs) + PE(xl), no parameters."""

    def forward(self, pe_abs: Tensor, pe_xl: Tensor, token_embedding: Optional[Tensor] = None) -> Tensor:
        return pe_abs + pe_xl


# --xl-fusion NAME -> the module (built with the encoder's embedding dimension). Modules with parameters have
# initial_state(): what a checkpoint without them (a vanilla model's) is completed with.
POSITION_FUSIONS = {
    "sum": lambda embed_dim: SumPositionFusion(),
    "gated": GatedPositionFusion,
    "context": ContextGatedPositionFusion,
    "tanh": TanhPositionFusion,
}
