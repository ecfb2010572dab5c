"""Building blocks of the XL encoder: position lookups, gated fusion, rotary embedding, XL-head attention."""
import argparse

import pytest
import torch
from fairseq import utils
from fairseq.models.transformer import TransformerConfig, base_architecture
from fairseq.modules import MultiheadAttention, PositionalEmbedding, SinusoidalPositionalEmbedding
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase

from xlpos.modules import (
    POSITION_FUSIONS,
    ContextGatedPositionFusion,
    GatedPositionFusion,
    TanhPositionFusion,
    XLHeadSelfAttention,
    XLTransformerEncoderLayer,
    apply_rotary,
    lookup_position_encoding,
    rotary_cos_sin,
)

PAD = 1


def padded_tokens():
    # left-padded row, full row, right-padded row
    return torch.tensor([[PAD, PAD, 5, 6, 2], [7, 8, 9, 10, 2], [5, 6, 2, PAD, PAD]])


@pytest.mark.parametrize("learned", [False, True])
def test_lookup_at_absolute_positions_equals_fairseq_embedding(learned):
    torch.manual_seed(0)
    module = PositionalEmbedding(64, 16, PAD, learned=learned)
    tokens = padded_tokens()
    positions = utils.make_positions(tokens, PAD)
    assert torch.equal(lookup_position_encoding(module, positions), module(tokens))


def test_lookup_uses_the_given_positions_not_token_order():
    module = PositionalEmbedding(64, 8, PAD, learned=False)
    positions = torch.tensor([[4, 2, 3, PAD]])
    table = SinusoidalPositionalEmbedding.get_embedding(64, 8, PAD)
    got = lookup_position_encoding(module, positions)
    assert torch.equal(got[0], table[positions[0]])
    assert torch.count_nonzero(got[0, 3]) == 0  # pad slot: zero row


def test_sinusoidal_lookup_extends_a_short_table():
    module = SinusoidalPositionalEmbedding(8, PAD, init_size=4)
    positions = torch.arange(2, 12).unsqueeze(0)  # needs rows up to 11
    got = lookup_position_encoding(module, positions)
    expected = SinusoidalPositionalEmbedding.get_embedding(20, 8, PAD)[2:12]
    assert torch.allclose(got[0], expected)


def test_lookup_rejects_unknown_modules_and_bad_shapes():
    with pytest.raises(TypeError, match="cannot look up XL positions"):
        lookup_position_encoding(torch.nn.Embedding(10, 4), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="B x T"):
        lookup_position_encoding(PositionalEmbedding(8, 4, PAD), torch.zeros(3, dtype=torch.long))


def test_gated_fusion_starts_as_average_and_is_exact_when_encodings_agree():
    fusion = GatedPositionFusion(6)
    a, b = torch.randn(2, 3, 6), torch.randn(2, 3, 6)
    assert torch.allclose(fusion(a, b), (a + b) / 2)
    with torch.no_grad():
        fusion.weight.normal_()
        fusion.bias.normal_()
    assert torch.equal(fusion(a, a), a)
    fusion(a, b).sum().backward()
    assert fusion.weight.grad is not None and fusion.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("fusion", sorted(POSITION_FUSIONS))
def test_fusions_draw_no_random_numbers(fusion):
    torch.manual_seed(3)
    expected = torch.rand(5)
    torch.manual_seed(3)
    POSITION_FUSIONS[fusion](32)
    assert torch.equal(torch.rand(5), expected)


def test_context_gate_starts_as_average_depends_on_the_words_and_is_exact_when_encodings_agree():
    fusion = ContextGatedPositionFusion(6)
    a, b, words = torch.randn(2, 4, 6), torch.randn(2, 4, 6), torch.randn(2, 4, 6)
    assert torch.allclose(fusion(a, b, words), (a + b) / 2)
    with torch.no_grad():
        fusion.weight.normal_()
    assert torch.equal(fusion(a, a, words), a)
    other = words.clone()
    other[0, 1] += 1.0  # one word changed: its gate and its neighbours' change, nothing else
    changed = (fusion(a, b, words) - fusion(a, b, other)).abs().sum(-1) > 0
    assert changed.tolist() == [[True, True, True, False], [False, False, False, False]]
    fusion(a, b, words).sum().backward()
    assert fusion.weight.grad[:, 12:].abs().sum() > 0  # the word and context columns learn
    with pytest.raises(ValueError, match="token embeddings"):
        fusion(a, b)


def test_tanh_fusion_starts_as_tanh_of_the_sum_and_learns_both_projections():
    fusion = TanhPositionFusion(6)
    a, b = torch.randn(2, 3, 6), torch.randn(2, 3, 6)
    assert torch.allclose(fusion(a, b), torch.tanh(a + b))
    fusion(a, b).sum().backward()
    assert fusion.abs_proj.grad.abs().sum() > 0 and fusion.xl_proj.grad.abs().sum() > 0
    assert set(fusion.initial_state()) == {name for name, _ in fusion.named_parameters()}


def test_rotary_scores_depend_only_on_position_differences():
    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    positions = torch.tensor([[3, 7, 2, 9, 4]])

    def scores(pos):
        table = rotary_cos_sin(pos, 8)
        return apply_rotary(q, table) @ apply_rotary(k, table).transpose(-1, -2)

    assert torch.allclose(scores(positions), scores(positions + 11), atol=1e-5)
    assert not torch.allclose(scores(positions), scores(positions.flip(-1)), atol=1e-3)
    rotated = apply_rotary(q, rotary_cos_sin(positions, 8))
    assert torch.allclose(rotated.norm(dim=-1), q.norm(dim=-1), atol=1e-5)


def test_rotary_rejects_odd_head_dim():
    with pytest.raises(ValueError, match="even head dimension"):
        rotary_cos_sin(torch.zeros(1, 2, dtype=torch.long), 7)


def make_attention(xl_heads=2, seed=0):
    torch.manual_seed(seed)
    attn = XLHeadSelfAttention(16, 4, xl_heads)
    torch.manual_seed(seed)
    reference = MultiheadAttention(16, 4, self_attention=True)
    return attn.eval(), reference.eval()


def test_xl_attention_has_fairseq_parameters_and_matches_it_without_xl_input():
    attn, reference = make_attention()
    assert [n for n, _ in attn.named_parameters()] == [n for n, _ in reference.named_parameters()]
    for (_, p), (_, r) in zip(attn.named_parameters(), reference.named_parameters()):
        assert torch.equal(p, r)
    x = torch.randn(5, 3, 16)
    mask = padded_tokens().eq(PAD)
    expected, _ = reference(x, x, x, key_padding_mask=mask, need_weights=False)
    assert torch.allclose(attn.forward_xl(x, mask), expected, atol=1e-6)
    assert torch.allclose(attn.forward_xl(x, mask, xl_input=x), expected, atol=1e-6)


def identity_output(attn):
    with torch.no_grad():
        attn.out_proj.weight.copy_(torch.eye(16))
        attn.out_proj.bias.zero_()


def test_only_the_xl_heads_see_the_xl_input():
    attn, _ = make_attention(xl_heads=1)
    identity_output(attn)  # output channels = concatenated head outputs
    x, other = torch.randn(5, 3, 16), torch.randn(5, 3, 16)
    mask = padded_tokens().eq(PAD)
    base = attn.forward_xl(x, mask, xl_input=x)
    changed = attn.forward_xl(x, mask, xl_input=other)
    head_dim = 4
    assert not torch.allclose(base[..., :head_dim], changed[..., :head_dim], atol=1e-4)
    assert torch.allclose(base[..., head_dim:], changed[..., head_dim:], atol=1e-6)


def test_rotary_attention_rotates_xl_heads_by_xl_positions_only():
    attn, _ = make_attention(xl_heads=2)
    identity_output(attn)
    x = torch.randn(5, 3, 16)
    mask = padded_tokens().eq(PAD)
    abs_positions = utils.make_positions(padded_tokens(), PAD)
    xl_positions = abs_positions.clone()
    xl_positions[1] = xl_positions[1].flip(0)
    rot_abs = rotary_cos_sin(abs_positions, 4)
    same = attn.forward_xl(x, mask, rotary_xl=rot_abs, rotary_abs=rot_abs)
    permuted = attn.forward_xl(x, mask, rotary_xl=rotary_cos_sin(xl_positions, 4), rotary_abs=rot_abs)
    assert not torch.allclose(same[:, 1, :8], permuted[:, 1, :8], atol=1e-4)  # XL heads of the permuted row
    assert torch.allclose(same[:, 1, 8:], permuted[:, 1, 8:], atol=1e-6)  # absolute heads
    assert torch.allclose(same[:, [0, 2]], permuted[:, [0, 2]], atol=1e-6)  # other rows
    with pytest.raises(ValueError, match="together"):
        attn.forward_xl(x, mask, rotary_xl=rot_abs)


def test_xl_heads_must_be_in_range():
    with pytest.raises(ValueError, match="--xl-heads"):
        XLHeadSelfAttention(16, 4, 0)
    with pytest.raises(ValueError, match="--xl-heads"):
        XLHeadSelfAttention(16, 4, 5)


@pytest.mark.parametrize("normalize_before", [False, True])
def test_xl_layer_matches_fairseq_layer_when_shift_is_zero(normalize_before):
    args = argparse.Namespace(
        encoder_embed_dim=16, encoder_ffn_embed_dim=32, encoder_attention_heads=4,
        encoder_normalize_before=normalize_before, dropout=0.0,
    )
    base_architecture(args)
    cfg = TransformerConfig.from_namespace(args)
    torch.manual_seed(0)
    layer = XLTransformerEncoderLayer(cfg, xl_heads=2).eval()
    torch.manual_seed(0)
    reference = TransformerEncoderLayerBase(cfg).eval()
    assert list(layer.state_dict()) == list(reference.state_dict())
    x = torch.randn(5, 3, 16)
    mask = padded_tokens().eq(PAD)
    expected = reference(x, mask)
    assert torch.allclose(layer(x, mask, xl_shift=torch.zeros_like(x)), expected, atol=1e-5)
    assert not torch.allclose(layer(x, mask, xl_shift=torch.randn_like(x)), expected, atol=1e-3)
