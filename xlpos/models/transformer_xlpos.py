"""``transformer_xlpos``: fairseq's Transformer whose encoder also sees cross-lingual (XL) source positions.

The decoder is fairseq's.  The encoder takes ``src_xl_positions`` (B x T, same layout as ``src_tokens``: real
tokens hold xl + padding_idx + 1, EOS holds N + padding_idx + 1, pads hold padding_idx), which the task
``translation_xlpos`` puts into ``net_input``; fairseq hands every ``net_input`` key except ``prev_output_tokens``
to the encoder, so training, validation and beam search need nothing else.  The positions travel in
``encoder_out["src_xl_positions"]`` and are reordered with the batch in beam search.

``--xl-integration`` chooses how the encoder uses them:

* ``none``  — exactly fairseq's ``transformer`` (same parameters, same random draws, same outputs).
* ``input`` — InXL: the encoder input is embed_scale * tok + F(PE(abs), PE(xl)) with ``--xl-fusion``
  F = PE(abs) + PE(xl) (``sum``), a learned per-channel convex gate (``gated``,
  :class:`xlpos.modules.GatedPositionFusion`), the same gate also fed the word and its neighbours (``context``)
  or tanh(U PE(abs) + V PE(xl)) (``tanh``); see :data:`xlpos.modules.POSITION_FUSIONS`.  PE is the encoder's own table (sinusoidal, or learned with
  ``--encoder-learned-pos``, sharing its parameters).
* ``head``  — HeadXL: in the encoder layers listed by ``--xl-head-layers`` (default: the first), the first
  ``--xl-heads`` heads (default: half) compute queries and keys from the layer input with the absolute encoding
  swapped for the XL one: the first layer's XL heads see exactly dropout(embed_scale * tok + PE(xl)), with the
  dropout mask of the standard input (in training too), later XL layers their input plus the same shift; the
  other heads, and all values, use the standard input.
* ``rope``  — ours: in the same layers, queries/keys of the XL heads are rotated (RoPE) by XL positions and those
  of the other heads by absolute positions.  The absolute sinusoidal input encoding is kept, as in the vanilla
  model, so ``rope`` differs from ``none`` only in those layers' attention.

``--encoder-layers 0`` (an encoder-free model: embeddings and position encodings straight into the decoder's
cross-attention) works with ``none`` and ``input``; ``head`` and ``rope`` need attention layers and say so.

With input/sum, head and rope no parameter is added; the other fusions add parameters initialised without random
draws (zeros, or the identity), which a vanilla checkpoint lacks: loading one (``--finetune-from-model``) fills
them with those initial values.  No mode draws
extra random numbers, so every model built with the same seed starts from the vanilla model's weights.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
from fairseq import utils
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig, TransformerEncoder, TransformerModel
from fairseq.models.transformer.transformer_legacy import (
    base_architecture,
    transformer_iwslt_de_en,
    transformer_vaswani_wmt_en_de_big,
    transformer_wmt_en_de,
)
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from torch import Tensor

from xlpos.modules import (
    POSITION_FUSIONS,
    XLTransformerEncoderLayer,
    lookup_position_encoding,
    rotary_cos_sin,
)

XL_INTEGRATIONS = ("none", "input", "head", "rope")
XL_FUSIONS = tuple(POSITION_FUSIONS)
# InXL's fusion when --xl-fusion is not given: this project's choice by measurement (docs/positions.md). A
# checkpoint keeps the fusion it was trained with: the architecture writes the default into the saved arguments.
DEFAULT_XL_FUSION = "tanh"
DEFAULT_XL_INTEGRATION = "input"
DEFAULT_XL_HEAD_LAYERS = "0"  # HeadXL/rotary: the first encoder layer

MISSING_XL_POSITIONS = (
    "transformer_xlpos with --xl-integration {mode} needs net_input['src_xl_positions'], which this task does not "
    "provide: use --task translation_xlpos (it reads the binarized XL positions of each split; "
    "--xl-positions monotone uses absolute positions instead), or --xl-integration none"
)


def parse_xl_layers(spec: str, num_layers: int) -> Tuple[int, ...]:
    """``"all"`` or comma-separated 0-based encoder layer indices -> sorted unique indices."""
    text = str(spec).strip()
    if text == "all":
        return tuple(range(num_layers))
    try:
        indices = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ValueError(f"--xl-head-layers must be 'all' or comma-separated layer indices, got {spec!r}") from None
    if not indices:
        raise ValueError(f"--xl-head-layers names no layer: {spec!r}")
    bad = [i for i in indices if not 0 <= i < num_layers]
    if bad:
        raise ValueError(f"--xl-head-layers {spec!r}: layer(s) {bad} outside 0..{num_layers - 1}")
    return tuple(indices)


@dataclass(frozen=True)
class XLPositionOptions:
    """How the encoder uses XL positions (validated ``--xl-*`` options)."""

    integration: str
    fusion: str
    xl_heads: int
    layers: Tuple[int, ...]

    @classmethod
    def from_args(cls, args, num_heads: int, num_layers: int) -> "XLPositionOptions":
        integration = getattr(args, "xl_integration", None) or DEFAULT_XL_INTEGRATION
        fusion = getattr(args, "xl_fusion", None) or DEFAULT_XL_FUSION
        if integration not in XL_INTEGRATIONS:
            raise ValueError(f"--xl-integration must be one of {XL_INTEGRATIONS}, got {integration!r}")
        if fusion not in XL_FUSIONS:
            raise ValueError(f"--xl-fusion must be one of {XL_FUSIONS}, got {fusion!r}")
        xl_heads = getattr(args, "xl_heads", None)
        xl_heads = default_xl_heads(num_heads) if xl_heads is None else int(xl_heads)
        if not 1 <= xl_heads <= num_heads:
            raise ValueError(f"--xl-heads must be between 1 and --encoder-attention-heads ({num_heads}), got {xl_heads}")
        layers: Tuple[int, ...] = ()
        if integration in ("head", "rope"):  # the only modes that act inside attention layers
            if num_layers == 0:
                raise ValueError(f"--xl-integration {integration} puts XL positions into encoder self-attention, "
                                 "and --encoder-layers 0 has none: use --xl-integration input (or none) for an "
                                 "encoder-free model")
            layers = parse_xl_layers(getattr(args, "xl_head_layers", None) or DEFAULT_XL_HEAD_LAYERS, num_layers)
        return cls(integration=integration, fusion=fusion, xl_heads=xl_heads, layers=layers)


def default_xl_heads(num_heads: int) -> int:
    """Half of the heads, at least one: this project's default, not a setting quoted from the paper."""
    return max(1, num_heads // 2)


class XLPosTransformerEncoder(TransformerEncoder):
    """fairseq's Transformer encoder that also consumes ``src_xl_positions``."""

    def __init__(self, args, dictionary, embed_tokens, return_fc: bool = False) -> None:
        cfg = TransformerConfig.from_namespace(args)
        # Both are read by build_encoder_layer, which the parent constructor calls once per layer.
        self.xl = XLPositionOptions.from_args(args, cfg.encoder.attention_heads, cfg.encoder.layers)
        self._num_layers_built = 0
        super().__init__(args, dictionary, embed_tokens, return_fc=return_fc)

        mode = self.xl.integration
        if mode in ("input", "head") and self.embed_positions is None:
            raise ValueError(
                f"--xl-integration {mode} encodes XL positions with the encoder's positional embeddings; "
                "remove --no-token-positional-embeddings"
            )
        if mode == "head" and cfg.quant_noise.pq > 0:
            raise ValueError("--xl-integration head does not support --quant-noise-pq")
        if mode == "rope" and (cfg.encoder.embed_dim // cfg.encoder.attention_heads) % 2:
            raise ValueError("--xl-integration rope needs an even attention head dimension")
        # Created last and without random draws, so all other parameters match the vanilla model's.
        self.xl_fusion = POSITION_FUSIONS[self.xl.fusion](cfg.encoder.embed_dim) if mode == "input" else None

    def build_encoder_layer(self, args):
        index = self._num_layers_built
        self._num_layers_built += 1
        if self.xl.integration not in ("head", "rope") or index not in self.xl.layers:
            return super().build_encoder_layer(args)
        cfg = TransformerConfig.from_namespace(args)
        layer = XLTransformerEncoderLayer(cfg, self.xl.xl_heads, return_fc=self.return_fc)
        # Same wrapping as fairseq's layers.
        if cfg.checkpoint_activations:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        min_params_to_wrap = cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0
        return fsdp_wrap(layer, min_num_params=min_params_to_wrap)

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
        src_xl_positions: Optional[Tensor] = None,
    ) -> Dict[str, List[Tensor]]:
        """fairseq's encoder output dict plus ``"src_xl_positions": [B x T]`` (empty list when not given)."""
        if torch.jit.is_scripting():
            # TorchScript compiles only this branch: the vanilla computation, the one mode that scripts
            # (__prepare_scriptable__ refuses the others before compilation).
            scripted = self.forward_scriptable(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
            scripted["src_xl_positions"] = [] if src_xl_positions is None else [src_xl_positions]
            return scripted
        if src_xl_positions is not None and src_xl_positions.shape != src_tokens.shape:
            raise ValueError(
                f"src_xl_positions has shape {tuple(src_xl_positions.shape)}, src_tokens {tuple(src_tokens.shape)}"
            )
        if self.xl.integration == "none":
            out = self.forward_scriptable(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        elif src_xl_positions is None:
            raise ValueError(MISSING_XL_POSITIONS.format(mode=self.xl.integration))
        else:
            out = self._forward_xl(src_tokens, src_xl_positions, return_all_hiddens, token_embeddings)
        out["src_xl_positions"] = [] if src_xl_positions is None else [src_xl_positions]
        return out

    def _forward_xl(
        self,
        src_tokens: Tensor,
        src_xl_positions: Tensor,
        return_all_hiddens: bool,
        token_embeddings: Optional[Tensor],
    ) -> Dict[str, List[Tensor]]:
        mode = self.xl.integration
        encoder_padding_mask = src_tokens.eq(self.padding_idx)
        has_pads = bool(encoder_padding_mask.any())

        if token_embeddings is None:
            token_embeddings = self.embed_tokens(src_tokens)
        encoder_embedding = self.embed_scale * token_embeddings
        pe_abs = self.embed_positions(src_tokens) if self.embed_positions is not None else None
        pe_xl = lookup_position_encoding(self.embed_positions, src_xl_positions) if mode in ("input", "head") else None

        if mode == "input":
            x = encoder_embedding + self.xl_fusion(pe_abs, pe_xl, encoder_embedding)
        elif pe_abs is not None:
            x = encoder_embedding + pe_abs
        else:
            x = encoder_embedding
        # HeadXL: the XL heads' input is E + PE(xl) prepared exactly like the standard input, with the same
        # dropout mask, so that in training too they see dropout(E + PE(xl)) and no trace of PE(abs).
        x_xl = encoder_embedding + pe_xl if mode == "head" else None
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
            x_xl = self.layernorm_embedding(x_xl) if x_xl is not None else None
        if x_xl is None:
            x = self.dropout_module(x)
        else:
            ones = torch.ones_like(x)
            keep = self.dropout_module(ones)  # the mask F.dropout would draw for x (same shape, same draws)
            if keep is not ones:
                x, x_xl = x * keep, x_xl * keep
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        if has_pads:
            not_pad = 1 - encoder_padding_mask.unsqueeze(-1).type_as(x)
            x = x * not_pad
            x_xl = x_xl * not_pad if x_xl is not None else None
        x = x.transpose(0, 1)  # B x T x C -> T x B x C

        xl_inputs: Dict[str, Tensor] = {}
        if x_xl is not None:
            # Every XL layer adds this to its own input: in the first layer that gives x_xl exactly.
            xl_inputs["xl_shift"] = x_xl.transpose(0, 1) - x
        elif mode == "rope":
            head_dim = x.size(-1) // self.cfg.encoder.attention_heads
            abs_positions = utils.make_positions(src_tokens, self.padding_idx)
            xl_inputs["rotary_abs"] = rotary_cos_sin(abs_positions, head_dim, dtype=x.dtype)
            xl_inputs["rotary_xl"] = rotary_cos_sin(src_xl_positions, head_dim, dtype=x.dtype)

        encoder_states: List[Tensor] = [x] if return_all_hiddens else []
        fc_results: List[Optional[Tensor]] = []
        layer_padding_mask = encoder_padding_mask if has_pads else None
        for layer in self.layers:  # a LayerDropModuleList may skip layers: each layer knows whether it is XL
            if getattr(layer, "takes_xl_inputs", False):
                result = layer(x, encoder_padding_mask=layer_padding_mask, **xl_inputs)
            else:
                result = layer(x, encoder_padding_mask=layer_padding_mask)
            if isinstance(result, tuple) and len(result) == 2:
                x, fc_result = result
            else:
                x, fc_result = result, None
            if return_all_hiddens:
                encoder_states.append(x)
                fc_results.append(fc_result)

        if self.layer_norm is not None:
            x = self.layer_norm(x)
        src_lengths = src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1).contiguous()
        return {
            "encoder_out": [x],  # T x B x C
            "encoder_padding_mask": [encoder_padding_mask],  # B x T
            "encoder_embedding": [encoder_embedding],  # B x T x C
            "encoder_states": encoder_states,  # List[T x B x C]
            "fc_results": fc_results,
            "src_tokens": [],
            "src_lengths": [src_lengths],
        }

    def __prepare_scriptable__(self):
        """``torch.jit.script`` hook: only ``--xl-integration none`` is scriptable (see the class docstring)."""
        if self.xl.integration != "none":
            raise RuntimeError(
                f"torch.jit.script supports transformer_xlpos with --xl-integration none only, not "
                f"{self.xl.integration}: the XL modes use Python-side options and fused attention that TorchScript "
                "cannot compile; use the eager model (or torch.compile / torch.export)")
        return self

    def upgrade_state_dict_named(self, state_dict, name):
        """fairseq's upgrades, plus the fusion's parameters at their initial values when the state lacks them (a
        vanilla Transformer checkpoint, ``--finetune-from-model``/``--restore-file`` into InXL): the model then
        starts as the vanilla model it was loaded from, with the fusion at its fresh start."""
        state_dict = super().upgrade_state_dict_named(state_dict, name)
        if hasattr(self.xl_fusion, "initial_state"):
            prefix = f"{name}.xl_fusion." if name else "xl_fusion."
            for key, value in self.xl_fusion.initial_state().items():
                state_dict.setdefault(prefix + key, value)
        return state_dict

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        """fairseq's reordering, plus the XL positions (selected along the batch dimension)."""
        reordered = super().reorder_encoder_out(encoder_out, new_order)
        xl: List[Tensor] = encoder_out["src_xl_positions"] if "src_xl_positions" in encoder_out else []
        reordered["src_xl_positions"] = [xl[0].index_select(0, new_order)] if len(xl) > 0 else []
        return reordered


# XLTransformerEncoderLayer is the only layer type that takes XL inputs; the flag is found through wrappers
# (FSDP forwards unknown attributes to the wrapped module).
XLTransformerEncoderLayer.takes_xl_inputs = True


@register_model("transformer_xlpos")
class XLPosTransformerModel(TransformerModel):
    """Transformer with cross-lingual position representations in the encoder (Ding et al., ACL 2020)."""

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser) -> None:
        super().add_args(parser)
        # No defaults here: fairseq suppresses model-argument defaults so that architectures can set them.
        parser.add_argument(
            "--xl-integration",
            choices=XL_INTEGRATIONS,
            help="how the encoder uses XL positions: none (vanilla Transformer), input (InXL: added to the input "
            "encoding), head (HeadXL: queries/keys of some heads), rope (rotary, XL heads by XL positions); "
            f"default: {DEFAULT_XL_INTEGRATION}",
        )
        parser.add_argument(
            "--xl-fusion",
            choices=XL_FUSIONS,
            help="input mode: sum = PE(abs) + PE(xl); gated = learned per-channel gate g*PE(abs) + (1-g)*PE(xl); "
            "context = that gate also fed the word and its neighbours; tanh = tanh(U PE(abs) + V PE(xl)); "
            f"default: {DEFAULT_XL_FUSION} (docs/positions.md compares them)",
        )
        parser.add_argument(
            "--xl-heads",
            type=int,
            metavar="K",
            help="head/rope modes: number of attention heads that see XL positions; default: half of the heads",
        )
        parser.add_argument(
            "--xl-head-layers",
            metavar="LAYERS",
            help="head/rope modes: 0-based encoder layers with XL heads, comma-separated, or 'all'; "
            f"default: {DEFAULT_XL_HEAD_LAYERS}",
        )

    @classmethod
    def hub_models(cls):
        # fairseq's pretrained Transformer names would otherwise resolve to its own (non-XL) downloads.
        return {}

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="checkpoint_best.pt", data_name_or_path=".",
                        **kwargs):
        """Load a checkpoint for translation of raw text: returns :class:`xlpos.hub.XLPosHubInterface`
        (``translate()``, ``xl_positions()``, ``reorder()``); see :func:`xlpos.hub.from_pretrained`."""
        from xlpos.hub import from_pretrained

        return from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path, **kwargs)

    @classmethod
    def build_model(cls, args, task):
        base_architecture(args)  # fills fairseq's options (idempotent) so that the head count is known
        xl_architecture_defaults(args)
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return XLPosTransformerEncoder(args, src_dict, embed_tokens)

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Tensor,
        prev_output_tokens: Tensor,
        return_all_hiddens: bool = True,
        features_only: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
        src_xl_positions: Optional[Tensor] = None,
    ):
        # src_xl_positions comes last so that fairseq's positional calls (TransformerModel's order) still work.
        encoder_out = self.encoder(
            src_tokens,
            src_lengths=src_lengths,
            src_xl_positions=src_xl_positions,
            return_all_hiddens=return_all_hiddens,
        )
        return self.decoder(
            prev_output_tokens,
            encoder_out=encoder_out,
            features_only=features_only,
            alignment_layer=alignment_layer,
            alignment_heads=alignment_heads,
            src_lengths=src_lengths,
            return_all_hiddens=return_all_hiddens,
        )

    def extract_features(self, src_tokens, src_lengths, prev_output_tokens, src_xl_positions=None, **kwargs):
        # The base class would hand src_xl_positions to the decoder too.
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, src_xl_positions=src_xl_positions)
        return self.decoder.extract_features(prev_output_tokens, encoder_out=encoder_out, **kwargs)


def xl_architecture_defaults(args) -> None:
    """Our options' defaults; call after the fairseq architecture has set the head count."""
    if getattr(args, "xl_integration", None) is None:
        args.xl_integration = DEFAULT_XL_INTEGRATION
    if getattr(args, "xl_fusion", None) is None:
        args.xl_fusion = DEFAULT_XL_FUSION
    if getattr(args, "xl_heads", None) is None:
        args.xl_heads = default_xl_heads(args.encoder_attention_heads)
    if getattr(args, "xl_head_layers", None) is None:
        args.xl_head_layers = DEFAULT_XL_HEAD_LAYERS


@register_model_architecture("transformer_xlpos", "transformer_xlpos")
def transformer_xlpos(args) -> None:
    base_architecture(args)
    xl_architecture_defaults(args)


@register_model_architecture("transformer_xlpos", "transformer_xlpos_iwslt_de_en")
def transformer_xlpos_iwslt_de_en(args) -> None:
    transformer_iwslt_de_en(args)
    xl_architecture_defaults(args)


@register_model_architecture("transformer_xlpos", "transformer_xlpos_wmt_en_de")
def transformer_xlpos_wmt_en_de(args) -> None:
    transformer_wmt_en_de(args)
    xl_architecture_defaults(args)


@register_model_architecture("transformer_xlpos", "transformer_xlpos_vaswani_wmt_en_de_big")
def transformer_xlpos_vaswani_wmt_en_de_big(args) -> None:
    transformer_vaswani_wmt_en_de_big(args)
    xl_architecture_defaults(args)
