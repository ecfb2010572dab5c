"""Head-level XL self-attention (HeadXL, and its rotary variant) and the encoder layer that uses it.

The attention keeps fairseq's parameter names and shapes (q_proj, k_proj, v_proj, out_proj) and creates them in
the same order with the same initialisation, so a model with XL layers starts from the same weights as the vanilla
Transformer built with the same seed and its checkpoints have the vanilla layout.

The XL heads are the first ``xl_heads`` heads of the layer (rows 0 .. xl_heads*head_dim-1 of q_proj/k_proj).

* HeadXL (``xl_input`` given): the XL heads compute queries and keys from ``xl_input`` — the layer input with the
  absolute position encoding swapped for the XL one — and the other heads from the standard input.  Values come
  from the standard input for every head.  Each head's projection rows are applied to exactly one input, so the
  cost equals the vanilla projections.
* RoPE (``rotary_xl``/``rotary_abs`` given): queries and keys come from the standard input and are then rotated,
  the XL heads by XL positions and the others by absolute positions.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from torch import Tensor

from .rotary import apply_rotary


class XLHeadSelfAttention(MultiheadAttention):
    """Encoder self-attention in which the first ``xl_heads`` heads see XL positions."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        xl_heads: int,
        *,
        dropout: float = 0.0,
        q_noise: float = 0.0,
        qn_block_size: int = 8,
    ) -> None:
        if not 1 <= xl_heads <= num_heads:
            raise ValueError(f"--xl-heads must be between 1 and the number of heads ({num_heads}), got {xl_heads}")
        super().__init__(
            embed_dim,
            num_heads,
            dropout=dropout,
            self_attention=True,
            q_noise=q_noise,
            qn_block_size=qn_block_size,
        )
        self.xl_heads = xl_heads

    def _split_projection(self, proj: torch.nn.Linear, xl_input: Tensor, std_input: Tensor) -> Tensor:
        rows = self.xl_heads * self.head_dim
        weight, bias = proj.weight, proj.bias
        xl_part = F.linear(xl_input, weight[:rows], None if bias is None else bias[:rows])
        std_part = F.linear(std_input, weight[rows:], None if bias is None else bias[rows:])
        return torch.cat([xl_part, std_part], dim=-1)

    def _head_rotations(self, rotary_xl: Tensor, rotary_abs: Tensor) -> Tensor:
        """One rotation table for all heads (2 x B x H x T x head_dim): the XL heads' rows from `rotary_xl`, the
        others' from `rotary_abs`. Queries and keys are then rotated in one pass each; the tables need no
        gradient, so joining them costs less than splitting and re-joining the heads of q and k."""
        k, rest = self.xl_heads, self.num_heads - self.xl_heads
        if not rest:
            return rotary_xl
        return torch.cat([rotary_xl.expand(-1, -1, k, -1, -1), rotary_abs.expand(-1, -1, rest, -1, -1)], dim=2)

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor] = None,
        value: Optional[Tensor] = None,
        key_padding_mask: Optional[Tensor] = None,
        incremental_state=None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
        xl_input: Optional[Tensor] = None,
        rotary_xl: Optional[Tensor] = None,
        rotary_abs: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """fairseq's ``MultiheadAttention.forward`` contract for encoder self-attention, plus the XL inputs.

        Returns ``(attn, attn_weights)`` like fairseq: T x B x C, and with ``need_weights`` the attention
        probabilities averaged over heads (B x T x T), with ``need_head_weights`` per head (H x B x T x T); None
        otherwise. So forward hooks on ``self_attn`` and analyses that ask for weights work on XL layers too.
        """
        if (key is not None and key is not query) or (value is not None and value is not query):
            raise ValueError("XLHeadSelfAttention is self-attention: key and value must be the query")
        if incremental_state is not None or static_kv or before_softmax:
            raise ValueError("XLHeadSelfAttention supports neither incremental_state, static_kv nor before_softmax")
        return self._attend(query, key_padding_mask, attn_mask, xl_input, rotary_xl, rotary_abs,
                            need_weights or need_head_weights, need_head_weights)

    def forward_xl(
        self,
        x: Tensor,
        key_padding_mask: Optional[Tensor],
        attn_mask: Optional[Tensor] = None,
        xl_input: Optional[Tensor] = None,
        rotary_xl: Optional[Tensor] = None,
        rotary_abs: Optional[Tensor] = None,
    ) -> Tensor:
        """Self-attention over ``x`` (T x B x C); returns T x B x C.

        key_padding_mask: B x T, True at pads.  attn_mask: T x T additive float mask (as fairseq's encoder layer
        prepares it).  xl_input: T x B x C query/key input of the XL heads.  rotary_xl / rotary_abs: tables from
        :func:`xlpos.modules.rotary.rotary_cos_sin` (both or neither).
        """
        return self._attend(x, key_padding_mask, attn_mask, xl_input, rotary_xl, rotary_abs, False, False)[0]

    def _attend(
        self,
        x: Tensor,
        key_padding_mask: Optional[Tensor],
        attn_mask: Optional[Tensor],
        xl_input: Optional[Tensor],
        rotary_xl: Optional[Tensor],
        rotary_abs: Optional[Tensor],
        need_weights: bool,
        need_head_weights: bool,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        seq_len, bsz, embed_dim = x.shape
        if xl_input is None:
            q = self.q_proj(x)
            k = self.k_proj(x)
        else:
            q = self._split_projection(self.q_proj, xl_input, x)
            k = self._split_projection(self.k_proj, xl_input, x)
        v = self.v_proj(x)

        def to_heads(t: Tensor) -> Tensor:  # T x B x C -> B x H x T x head_dim
            return t.view(seq_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

        q, k, v = to_heads(q), to_heads(k), to_heads(v)
        if (rotary_xl is None) != (rotary_abs is None):
            raise ValueError("rotary_xl and rotary_abs must be given together")
        if rotary_xl is not None:
            rotations = self._head_rotations(rotary_xl, rotary_abs)
            q, k = apply_rotary(q, rotations), apply_rotary(k, rotations)

        mask: Optional[Tensor] = None
        if key_padding_mask is not None:
            mask = ~key_padding_mask.to(torch.bool).view(bsz, 1, 1, seq_len)  # True = may attend
        if attn_mask is not None:
            additive = attn_mask.to(q.dtype).view(1, 1, seq_len, seq_len)
            if mask is not None:
                additive = additive.masked_fill(~mask, float("-inf"))
            mask = additive
        dropout_p = self.dropout_module.p if (self.training or self.dropout_module.apply_during_inference) else 0.0
        weights: Optional[Tensor] = None
        if need_weights:
            # The fused kernel does not return probabilities: the same computation, spelled out.
            scores = torch.matmul(q * self.scaling, k.transpose(-1, -2))  # B x H x T x T
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
            probs = torch.softmax(scores.float(), dim=-1).type_as(scores)
            out = torch.matmul(F.dropout(probs, p=dropout_p, training=dropout_p > 0), v)
            weights = probs.transpose(0, 1) if need_head_weights else probs.mean(dim=1)  # fairseq's layouts
        else:
            # Default scale 1/sqrt(head_dim) is fairseq's self.scaling.
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        out = out.permute(2, 0, 1, 3).reshape(seq_len, bsz, embed_dim)
        return self.out_proj(out), weights


class XLTransformerEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer with :class:`XLHeadSelfAttention`; the same parameters, names and init order."""

    def __init__(self, cfg, xl_heads: int, return_fc: bool = False) -> None:
        # Read by build_self_attention, which the parent constructor calls.
        self.xl_heads = xl_heads
        super().__init__(cfg, return_fc=return_fc)

    def build_self_attention(self, embed_dim, cfg):
        if cfg.encoder.xformers_att_config is not None:
            raise ValueError("XL encoder layers do not support --encoder-xformers-att-config")
        return XLHeadSelfAttention(
            embed_dim,
            cfg.encoder.attention_heads,
            self.xl_heads,
            dropout=cfg.attention_dropout,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
        )

    def forward(
        self,
        x: Tensor,
        encoder_padding_mask: Optional[Tensor],
        attn_mask: Optional[Tensor] = None,
        xl_shift: Optional[Tensor] = None,
        rotary_xl: Optional[Tensor] = None,
        rotary_abs: Optional[Tensor] = None,
    ):
        """Same computation as fairseq's encoder layer, with XL heads in the self-attention.

        xl_shift: T x B x C, the XL input minus the standard one at the encoder input (after the same dropout
        mask, see XLPosTransformerEncoder); the XL heads' query/key input is the (normalised, if normalize_before)
        layer input plus this shift.  rotary_xl/rotary_abs: see XLHeadSelfAttention.
        """
        if attn_mask is not None:
            # Same convention as fairseq: a finite large negative value, not -inf, for masked entries.
            attn_mask = attn_mask.masked_fill(attn_mask.to(torch.bool), -1e8 if x.dtype == torch.float32 else -1e4)

        residual = x
        xl_input = None if xl_shift is None else x + xl_shift
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
            if xl_input is not None:
                xl_input = self.self_attn_layer_norm(xl_input)
        # Through __call__ with fairseq's arguments, so hooks on self_attn see XL layers like vanilla ones.
        x, _ = self.self_attn(
            query=x,
            key=x,
            value=x,
            key_padding_mask=encoder_padding_mask,
            need_weights=False,
            attn_mask=attn_mask,
            xl_input=xl_input,
            rotary_xl=rotary_xl,
            rotary_abs=rotary_abs,
        )
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_fn(self.fc1(x))
        x = self.activation_dropout_module(x)
        x = self.fc2(x)
        fc_result = x
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)

        if self.return_fc:
            return x, fc_result
        return x
