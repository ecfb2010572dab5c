"""Model contracts a cluster user relies on: fine-tuning XL models from vanilla checkpoints, HeadXL's training
input, fairseq's calling conventions (positional arguments, attention weights and hooks), rotary dtypes, and
encoder-free models."""
import pytest
import torch

from test_models import (
    ORDERS,
    XL_MODES,
    batch,
    build_vanilla,
    build_xl,
    prev_output_tokens_for,
)
from xlpos.modules import XLHeadSelfAttention, apply_rotary, lookup_position_encoding, rotary_cos_sin


# ---- fine-tuning from a vanilla checkpoint --------------------------------------------------------------------
@pytest.mark.parametrize("integration,fusion", XL_MODES)
def test_vanilla_state_loads_strictly_into_every_xl_mode(integration, fusion):
    vanilla = build_vanilla(seed=3)
    xl = build_xl(integration, fusion, seed=4)  # other weights, to see that loading replaced them
    xl.load_state_dict(vanilla.state_dict(), strict=True)  # what --finetune-from-model does
    ours = dict(xl.state_dict())
    for key, value in vanilla.state_dict().items():
        assert torch.equal(ours.pop(key), value), key
    # whatever the vanilla model lacks holds exactly a fresh model's initial values
    fresh = build_xl(integration, fusion, seed=5).state_dict()
    for key, value in ours.items():
        assert torch.equal(value, fresh[key]), key


def test_gated_model_from_vanilla_starts_as_the_average_of_both_encodings():
    xl = build_xl("input", "gated", seed=4)
    with torch.no_grad():  # a trained gate, as if this model had been trained before loading
        xl.encoder.xl_fusion.weight.normal_()
        xl.encoder.xl_fusion.bias.normal_()
    xl.load_state_dict(build_vanilla(seed=3).state_dict(), strict=True)
    assert not xl.encoder.xl_fusion.weight.any() and not xl.encoder.xl_fusion.bias.any()


def test_an_xl_checkpoint_keeps_its_trained_gate():
    trained = build_xl("input", "gated", seed=4)
    with torch.no_grad():
        trained.encoder.xl_fusion.bias.fill_(0.7)
    other = build_xl("input", "gated", seed=5)
    other.load_state_dict(trained.state_dict(), strict=True)
    assert torch.all(other.encoder.xl_fusion.bias == 0.7)


# ---- HeadXL sees dropout(E + PE_xl) with the standard input's mask ---------------------------------------------
def captured_xl_inputs(model, tokens, lengths, xl):
    seen = {}

    def hook(module, args, kwargs, output):
        seen["x"], seen["xl_input"] = kwargs["query"], kwargs["xl_input"]

    layer0 = model.encoder.layers[0]
    handle = layer0.self_attn.register_forward_hook(hook, with_kwargs=True)
    try:
        model.encoder(tokens, src_lengths=lengths, src_xl_positions=xl)
    finally:
        handle.remove()
    return seen["x"], seen["xl_input"]


def test_headxl_training_input_is_dropout_of_e_plus_pe_xl_with_the_same_mask():
    p = 0.3
    model = build_xl("head", dropout=p, encoder_normalize_before=False).train()
    tokens, lengths, xl = batch()
    torch.manual_seed(11)
    x, xl_input = captured_xl_inputs(model, tokens, lengths, xl)
    enc = model.encoder
    embedded = enc.embed_scale * enc.embed_tokens(tokens)
    e_abs = (embedded + enc.embed_positions(tokens)).transpose(0, 1)
    e_xl = (embedded + lookup_position_encoding(enc.embed_positions, xl)).transpose(0, 1)
    not_pad = tokens.ne(enc.padding_idx).transpose(0, 1).unsqueeze(-1)
    # recover the dropout mask from the standard input: dropped channels are exactly zero
    kept = (x != 0) & not_pad
    assert 0.5 < kept.float().sum() / not_pad.float().sum() / x.size(-1) < 0.9  # dropout really was on
    scale = 1 / (1 - p)
    torch.testing.assert_close(x[kept], (e_abs * scale)[kept])
    torch.testing.assert_close(xl_input[kept], (e_xl * scale)[kept])
    # dropped channels carry nothing in either input: no PE_xl - PE_abs, no absolute-position noise
    dropped = (~kept) & not_pad
    assert dropped.any() and torch.all(xl_input[dropped] == 0)


def test_headxl_dropout_draws_the_same_mask_as_vanilla():
    """Same seed, same random draws: the standard input is what the vanilla encoder computes."""
    tokens, lengths, xl = batch()
    vanilla = build_vanilla(dropout=0.3).train()
    head = build_xl("head", dropout=0.3).train()
    torch.manual_seed(5)
    expected = vanilla.encoder.forward_embedding(tokens)[0].transpose(0, 1)
    expected = expected * tokens.ne(vanilla.encoder.padding_idx).transpose(0, 1).unsqueeze(-1)
    torch.manual_seed(5)
    x, _ = captured_xl_inputs(head, tokens, lengths, xl)
    torch.testing.assert_close(x, expected)


def test_headxl_inference_input_is_e_plus_pe_xl():
    model = build_xl("head", dropout=0.3).eval()
    tokens, lengths, xl = batch()
    _, xl_input = captured_xl_inputs(model, tokens, lengths, xl)
    enc = model.encoder
    e_xl = enc.embed_scale * enc.embed_tokens(tokens) + lookup_position_encoding(enc.embed_positions, xl)
    not_pad = tokens.ne(enc.padding_idx).transpose(0, 1).unsqueeze(-1)
    torch.testing.assert_close(xl_input * not_pad, e_xl.transpose(0, 1) * not_pad)


# ---- fairseq's calling conventions --------------------------------------------------------------------------------
@pytest.mark.parametrize("integration", ["none", "input"])
def test_positional_return_all_hiddens_keeps_its_meaning(integration):
    model = build_xl(integration)
    tokens, lengths, xl = batch()
    out = model.encoder(tokens, lengths, True, src_xl_positions=xl)
    assert len(out["encoder_states"]) == model.encoder.num_layers + 1


def test_model_forward_takes_fairseq_positional_arguments():
    model = build_xl("none")
    tokens, lengths, _ = batch()
    prev = prev_output_tokens_for(tokens)
    logits, extra = model(tokens, lengths, prev, False, False, 0, None)
    assert logits.shape[:2] == prev.shape
    assert extra["attn"][0] is not None  # alignment_layer=0 reached the decoder


@pytest.mark.parametrize("integration", ["head", "rope"])
def test_xl_attention_returns_weights_like_fairseq(integration):
    model = build_xl(integration).eval()
    tokens, lengths, xl = batch()
    seen = []
    handle = model.encoder.layers[0].self_attn.register_forward_hook(lambda m, a, o: seen.append(o))
    model.encoder(tokens, src_lengths=lengths, src_xl_positions=xl)
    handle.remove()
    assert len(seen) == 1 and seen[0][1] is None  # the layer asks for no weights, as fairseq's does
    attn = model.encoder.layers[0].self_attn
    x = torch.randn(tokens.size(1), tokens.size(0), 32)
    pad = tokens.eq(model.encoder.padding_idx)
    extra = {"xl_input": x + 0.5} if integration == "head" else {
        "rotary_xl": rotary_cos_sin(xl, 8), "rotary_abs": rotary_cos_sin(xl.flip(1), 8)}
    out_fast, none = attn(x, x, x, key_padding_mask=pad, need_weights=False, **extra)
    out, averaged = attn(x, x, x, key_padding_mask=pad, need_weights=True, **extra)
    _, per_head = attn(x, x, x, key_padding_mask=pad, need_head_weights=True, **extra)
    assert none is None
    torch.testing.assert_close(out, out_fast, atol=1e-5, rtol=1e-4)
    bsz, seq = tokens.shape
    assert averaged.shape == (bsz, seq, seq) and per_head.shape == (4, bsz, seq, seq)
    torch.testing.assert_close(averaged, per_head.mean(0))
    torch.testing.assert_close(averaged.sum(-1), torch.ones(bsz, seq))
    assert torch.all(averaged.masked_select(pad.unsqueeze(1).expand(-1, seq, -1)) == 0)


def test_xl_attention_refuses_cross_attention():
    attn = XLHeadSelfAttention(8, 2, 1)
    x = torch.randn(3, 1, 8)
    with pytest.raises(ValueError, match="self-attention"):
        attn(x, torch.randn(4, 1, 8), torch.randn(4, 1, 8))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rotary_keeps_the_activations_dtype(dtype):
    q = torch.randn(2, 4, 5, 8, dtype=dtype)
    table = rotary_cos_sin(torch.arange(5).expand(2, 5), 8)  # float32, as built
    assert apply_rotary(q, table).dtype == dtype


# ---- encoder-free models ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("integration,fusion", [("none", "sum"), ("input", "sum"), ("input", "gated")])
def test_encoder_free_models_use_positions(integration, fusion):
    model = build_xl(integration, fusion, encoder_layers=0)
    assert len(model.encoder.layers) == 0
    tokens, lengths, xl = batch()
    prev = prev_output_tokens_for(tokens)
    out = model(tokens, lengths, prev, src_xl_positions=xl)[0]
    assert torch.isfinite(out).all()
    if integration == "input":
        _, _, other = batch(orders=[list(reversed(o)) for o in ORDERS])
        assert not torch.allclose(model(tokens, lengths, prev, src_xl_positions=other)[0], out)


@pytest.mark.parametrize("integration", ["head", "rope"])
def test_encoder_free_attention_modes_say_why_not(integration):
    with pytest.raises(ValueError, match="--encoder-layers 0") as error:
        build_xl(integration, encoder_layers=0)
    assert "\n" not in str(error.value)


# ---- TorchScript -------------------------------------------------------------------------------------------------
def test_none_mode_scripts_like_fairseqs_transformer():
    model = build_xl("none")
    scripted = torch.jit.script(model)
    tokens, lengths, _ = batch()
    prev = prev_output_tokens_for(tokens)
    torch.testing.assert_close(scripted(tokens, lengths, prev)[0], model(tokens, lengths, prev)[0])


@pytest.mark.parametrize("integration", ["input", "head", "rope"])
def test_scripting_an_xl_mode_says_it_is_unsupported(integration):
    with pytest.raises(RuntimeError, match="--xl-integration none only"):
        torch.jit.script(build_xl(integration))


@pytest.mark.parametrize("integration", ["none", "input"])
def test_encoder_free_model_trains_and_translates_through_the_clis(tiny_corpus, tmp_path, integration):
    from conftest import PLUGIN_DIR, cli, run_cli, tiny_model_args

    save_dir = tmp_path / "checkpoints"
    args = tiny_model_args(tiny_corpus, save_dir, 3, tmp_path / "tensorboard")
    args[args.index("--xl-integration") + 1] = integration
    args[args.index("--encoder-layers") + 1] = "0"
    run_cli(args)
    proc = run_cli([cli("fairseq-generate"), str(tiny_corpus.data_bin), "--user-dir", str(PLUGIN_DIR),
                    "--task", "translation_xlpos", "--path", str(save_dir / "checkpoint_last.pt"),
                    "--gen-subset", "test", "--beam", "2", "--max-len-b", "5", "--cpu"])
    assert proc.stdout.count("\nH-") == tiny_corpus.sizes["test"]
