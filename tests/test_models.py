"""transformer_xlpos: equivalence with fairseq's transformer, use of XL positions, padding, beam search, archs."""
import argparse

import pytest
import torch
from fairseq import utils
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.models.transformer import TransformerModel
from fairseq.models.transformer.transformer_legacy import (
    base_architecture,
    transformer_iwslt_de_en,
    transformer_vaswani_wmt_en_de_big,
    transformer_wmt_en_de,
)
from fairseq.sequence_generator import SequenceGenerator

from xlpos.models.transformer_xlpos import (
    DEFAULT_XL_FUSION,
    XLPosTransformerModel,
    parse_xl_layers,
    transformer_xlpos,
    transformer_xlpos_iwslt_de_en,
    transformer_xlpos_vaswani_wmt_en_de_big,
    transformer_xlpos_wmt_en_de,
)

WORDS = "the cat sat on a mat dog ran far away and then came back home".split()
XL_MODES = [("input", "sum"), ("input", "gated"), ("input", "context"), ("input", "tanh"), ("head", "sum"),
            ("rope", "sum")]
# the parameters each fusion adds to the vanilla model's
FUSION_PARAMETERS = {"sum": [], "gated": ["encoder.xl_fusion.bias", "encoder.xl_fusion.weight"],
                     "context": ["encoder.xl_fusion.bias", "encoder.xl_fusion.weight"],
                     "tanh": ["encoder.xl_fusion.abs_proj", "encoder.xl_fusion.xl_proj"]}


class TinyTask:
    """Just what build_model reads from a task."""

    def __init__(self):
        self.dictionary = Dictionary()
        for word in WORDS:
            self.dictionary.add_symbol(word)

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary


TASK = TinyTask()
PAD, EOS = TASK.dictionary.pad(), TASK.dictionary.eos()


def tiny_args(**overrides):
    args = dict(
        encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_layers=2, encoder_attention_heads=4,
        decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2, decoder_attention_heads=4,
        dropout=0.1, max_source_positions=64, max_target_positions=64,
    )
    args.update(overrides)
    return argparse.Namespace(**args)


def build_vanilla(seed=0, **overrides):
    args = tiny_args(**overrides)
    base_architecture(args)
    torch.manual_seed(seed)
    return TransformerModel.build_model(args, TASK).eval()


def build_xl(integration, fusion="sum", seed=0, **overrides):
    args = tiny_args(xl_integration=integration, xl_fusion=fusion, **overrides)
    transformer_xlpos(args)
    torch.manual_seed(seed)
    return XLPosTransformerModel.build_model(args, TASK).eval()


def encode(sentences, left_pad=True):
    """Token rows (+EOS), padded; lengths."""
    rows = [[TASK.dictionary.index(w) for w in s.split()] + [EOS] for s in sentences]
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        if left_pad:
            tokens[i, width - len(row):] = torch.tensor(row)
        else:
            tokens[i, : len(row)] = torch.tensor(row)
    return tokens, torch.tensor([len(r) for r in rows])


def xl_positions_for(tokens, orders, left_pad=True):
    """Fairseq-convention XL positions: word i gets orders[row][i] + PAD + 1, EOS gets N + PAD + 1."""
    xl = torch.full_like(tokens, PAD)
    for i, order in enumerate(orders):
        values = torch.tensor(list(order) + [len(order)]) + PAD + 1
        if left_pad:
            xl[i, tokens.size(1) - len(values):] = values
        else:
            xl[i, : len(values)] = values
    return xl


SENTENCES = ["the cat sat on a mat", "dog ran far away", "and then came back home"]
ORDERS = [[5, 4, 3, 0, 2, 1], [3, 2, 1, 0], [4, 0, 1, 3, 2]]


def batch(left_pad=True, orders=ORDERS):
    tokens, lengths = encode(SENTENCES, left_pad)
    return tokens, lengths, xl_positions_for(tokens, orders, left_pad)


def prev_output_tokens_for(tokens):
    # Decoder input: EOS + the first tokens of the source rows, right-shifted (any target works for comparisons).
    prev = torch.roll(tokens, 1, dims=1)
    prev[:, 0] = EOS
    return prev


def test_none_is_exactly_fairseq_transformer():
    vanilla = build_vanilla()
    model = build_xl("none")
    assert list(model.state_dict()) == list(vanilla.state_dict())
    for name, tensor in vanilla.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    tokens, lengths, xl = batch()
    prev = prev_output_tokens_for(tokens)
    expected_enc = vanilla.encoder(tokens, lengths)["encoder_out"][0]
    assert torch.equal(model.encoder(tokens, lengths, src_xl_positions=xl)["encoder_out"][0], expected_enc)
    assert torch.equal(model.encoder(tokens, lengths)["encoder_out"][0], expected_enc)
    assert torch.equal(model(tokens, lengths, prev, src_xl_positions=xl)[0], vanilla(tokens, lengths, prev)[0])
    # Training mode with dropout: same random stream, same result.
    vanilla.train()
    model.train()
    torch.manual_seed(5)
    expected = vanilla(tokens, lengths, prev)[0]
    torch.manual_seed(5)
    assert torch.equal(model(tokens, lengths, prev, src_xl_positions=xl)[0], expected)


@pytest.mark.parametrize("integration,fusion", XL_MODES)
def test_xl_modes_start_from_the_vanilla_weights(integration, fusion):
    vanilla = build_vanilla().state_dict()
    model = build_xl(integration, fusion).state_dict()
    extra = sorted(set(model) - set(vanilla))
    assert extra == (FUSION_PARAMETERS[fusion] if integration == "input" else [])
    assert set(vanilla) <= set(model)
    for name, tensor in vanilla.items():
        assert torch.equal(model[name], tensor), name


def test_vanilla_checkpoint_weights_load_into_xl_models():
    vanilla = build_vanilla(seed=1).state_dict()
    for integration in ("none", "input", "head", "rope"):
        build_xl(integration, seed=2).load_state_dict(vanilla, strict=True)


def test_vanilla_checkpoint_loads_into_every_fusion_with_its_initial_parameters():
    vanilla = build_vanilla(seed=1).state_dict()
    for fusion in FUSION_PARAMETERS:
        model = build_xl("input", fusion, seed=2)
        state = dict(vanilla)
        model.upgrade_state_dict(state)  # in place, as fairseq's checkpoint loading calls it
        model.load_state_dict(state, strict=True)  # the fusion's parameters were filled in
        fresh = build_xl("input", fusion, seed=3).encoder.xl_fusion.state_dict()
        for name, tensor in model.encoder.xl_fusion.state_dict().items():
            assert torch.equal(tensor, fresh[name]), (fusion, name)


@pytest.mark.parametrize("integration,fusion", XL_MODES + [("none", "sum")])
def test_permuting_xl_positions_changes_encoder_output_except_in_none_mode(integration, fusion):
    model = build_xl(integration, fusion)
    tokens, lengths, xl = batch()
    permuted = xl_positions_for(tokens, [list(reversed(o)) for o in ORDERS])
    out = model.encoder(tokens, lengths, src_xl_positions=xl)["encoder_out"][0]
    out_permuted = model.encoder(tokens, lengths, src_xl_positions=permuted)["encoder_out"][0]
    if integration == "none":
        assert torch.equal(out, out_permuted)
    else:
        assert not torch.allclose(out, out_permuted, atol=1e-3)


def test_input_sum_adds_exactly_the_xl_encoding_to_the_vanilla_input():
    vanilla, model = build_vanilla(), build_xl("input", "sum")
    tokens, lengths, xl = batch()
    table = model.encoder.embed_positions.weights  # the encoder's sinusoidal table, rows = fairseq positions
    shifted = vanilla.encoder.embed_tokens(tokens) + table[xl] / model.encoder.embed_scale
    expected = vanilla.encoder(tokens, lengths, token_embeddings=shifted)["encoder_out"][0]
    got = model.encoder(tokens, lengths, src_xl_positions=xl)["encoder_out"][0]
    assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize(
    "integration,fusion,overrides",
    [("head", "sum", {}), ("head", "sum", {"encoder_normalize_before": True}), ("input", "gated", {}),
     ("input", "context", {}), ("head", "sum", {"xl_head_layers": "all", "xl_heads": 3})],
)
def test_xl_equal_to_absolute_positions_reproduces_vanilla(integration, fusion, overrides):
    vanilla, model = build_vanilla(**overrides), build_xl(integration, fusion, **overrides)
    with torch.no_grad():  # a non-trivial gate: the equality must not depend on g
        for p in model.encoder.xl_fusion.parameters() if fusion in ("gated", "context") else []:
            p.normal_()
    tokens, lengths, _ = batch()
    absolute = utils.make_positions(tokens, PAD)
    expected = vanilla.encoder(tokens, lengths)["encoder_out"][0]
    got = model.encoder(tokens, lengths, src_xl_positions=absolute)["encoder_out"][0]
    assert torch.allclose(got, expected, atol=1e-5)


def test_rope_is_relative_in_xl_positions():
    model = build_xl("rope", xl_head_layers="all")
    tokens, lengths, xl = batch()
    shifted = torch.where(xl.eq(PAD), xl, xl + 7)
    out = model.encoder(tokens, lengths, src_xl_positions=xl)["encoder_out"][0]
    out_shifted = model.encoder(tokens, lengths, src_xl_positions=shifted)["encoder_out"][0]
    real = tokens.ne(PAD).t()  # pad slots are never attended to; their own outputs are don't-care
    assert torch.allclose(out_shifted[real], out[real], atol=1e-5)


@pytest.mark.parametrize("integration,fusion", XL_MODES + [("none", "sum")])
@pytest.mark.parametrize("learned", [False, True])
def test_left_and_right_padding_give_the_same_sentence_encodings(integration, fusion, learned):
    model = build_xl(integration, fusion, encoder_learned_pos=learned)
    left_tokens, lengths, left_xl = batch(left_pad=True)
    right_tokens, _, right_xl = batch(left_pad=False)
    left = model.encoder(left_tokens, lengths, src_xl_positions=left_xl)["encoder_out"][0]
    right = model.encoder(right_tokens, lengths, src_xl_positions=right_xl)["encoder_out"][0]
    assert torch.isfinite(left).all() and torch.isfinite(right).all()
    width = left_tokens.size(1)
    for i, n in enumerate(lengths.tolist()):
        assert torch.allclose(left[width - n:, i], right[:n, i], atol=1e-5)


def test_training_step_is_finite_and_reaches_the_positions():
    model = build_xl("head", encoder_learned_pos=True).train()
    tokens, lengths, xl = batch()
    logits = model(tokens, lengths, prev_output_tokens_for(tokens), src_xl_positions=xl)[0]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), tokens.reshape(-1), ignore_index=PAD)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is None or torch.isfinite(g).all() for g in grads.values())
    assert grads["encoder.embed_positions.weight"].abs().sum() > 0


def test_activation_checkpointing_gives_the_same_gradients():
    def gradients(**overrides):
        model = build_xl("head", dropout=0.0, encoder_learned_pos=True, **overrides).train()
        tokens, lengths, xl = batch()
        model(tokens, lengths, prev_output_tokens_for(tokens), src_xl_positions=xl)[0].sum().backward()
        return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    plain, checkpointed = gradients(), gradients(checkpoint_activations=True)
    assert set(plain) == set(checkpointed) and "encoder.embed_positions.weight" in plain
    for name, grad in plain.items():
        assert torch.allclose(checkpointed[name], grad, atol=1e-4, rtol=1e-4), name


def test_reorder_encoder_out_selects_xl_positions_along_the_batch():
    model = build_xl("input")
    tokens, lengths, xl = batch()
    out = model.encoder(tokens, lengths, src_xl_positions=xl)
    order = torch.tensor([2, 2, 0, 1])
    reordered = model.encoder.reorder_encoder_out(out, order)
    assert torch.equal(reordered["src_xl_positions"][0], xl[order])
    assert torch.equal(reordered["encoder_out"][0], out["encoder_out"][0][:, order])
    assert model.encoder.reorder_encoder_out(build_xl("none").encoder(tokens, lengths), order)["src_xl_positions"] == []


def test_missing_or_misshapen_xl_positions_are_clear_errors():
    model = build_xl("head")
    tokens, lengths, xl = batch()
    with pytest.raises(ValueError, match="translation_xlpos"):
        model.encoder(tokens, lengths)
    with pytest.raises(ValueError, match="shape"):
        model.encoder(tokens, lengths, src_xl_positions=xl[:, 1:])


def generate(model, tokens, lengths, xl):
    generator = SequenceGenerator([model], TASK.dictionary, beam_size=4, max_len_a=0, max_len_b=8)
    sample = {"net_input": {"src_tokens": tokens, "src_lengths": lengths, "src_xl_positions": xl}}
    return generator.generate([model], sample)


def reordering_batch(generator, size):
    """Random word strings; target = the words in XL order (word with XL position k is target word k)."""
    vocab = list(range(TASK.dictionary.nspecial, len(TASK.dictionary)))
    rows, orders = [], []
    for _ in range(size):
        n = int(torch.randint(2, 7, (1,), generator=generator))
        rows.append([vocab[int(i)] for i in torch.randint(len(vocab), (n,), generator=generator)])
        orders.append(torch.randperm(n, generator=generator).tolist())
    width = max(len(r) for r in rows) + 1
    src, tgt, prev = (torch.full((size, width), PAD) for _ in range(3))
    for i, (row, order) in enumerate(zip(rows, orders)):
        src[i, width - len(row) - 1:] = torch.tensor(row + [EOS])
        target = [row[order.index(k)] for k in range(len(row))] + [EOS]
        tgt[i, : len(target)] = torch.tensor(target)
        prev[i, : len(target)] = torch.tensor([EOS] + target[:-1])
    return src, src.ne(PAD).sum(1), xl_positions_for(src, orders), prev, tgt


@pytest.fixture(scope="module", params=["input", "head", "rope"])
def briefly_trained(request):
    """A tiny model trained for 150 steps to output the source in XL order: its hypotheses end at different
    lengths, so beam search finalises sentences at different steps and shrinks the batch."""
    model = build_xl(request.param, seed=3, dropout=0.0).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(150):
        src, lengths, xl, prev, tgt = reordering_batch(generator, 32)
        logits = model(src, lengths, prev, src_xl_positions=xl)[0]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def test_beam_search_batched_equals_one_sentence_at_a_time(briefly_trained):
    model = briefly_trained
    tokens, lengths, xl = batch()
    batched = generate(model, tokens, lengths, xl)
    assert len({len(hyps[0]["tokens"]) for hyps in batched}) > 1  # sentences finish at different steps
    for i, n in enumerate(lengths.tolist()):
        single = generate(model, tokens[i:i + 1, -n:], lengths[i:i + 1], xl[i:i + 1, -n:])
        assert len(single[0]) == len(batched[i]) == 4
        for hyp_single, hyp_batched in zip(single[0], batched[i]):
            assert torch.equal(hyp_single["tokens"], hyp_batched["tokens"])
            assert torch.allclose(hyp_single["score"], hyp_batched["score"], atol=1e-4)
    # The XL positions reach the search: reversing them changes the best hypotheses' scores.
    reversed_xl = xl_positions_for(tokens, [list(reversed(o)) for o in ORDERS])
    rescored = generate(model, tokens, lengths, reversed_xl)
    assert any(abs(float(a[0]["score"]) - float(b[0]["score"])) > 1e-3 for a, b in zip(batched, rescored))


FAIRSEQ_ARCHS = [
    ("transformer_xlpos", transformer_xlpos, base_architecture),
    ("transformer_xlpos_iwslt_de_en", transformer_xlpos_iwslt_de_en, transformer_iwslt_de_en),
    ("transformer_xlpos_wmt_en_de", transformer_xlpos_wmt_en_de, transformer_wmt_en_de),
    ("transformer_xlpos_vaswani_wmt_en_de_big", transformer_xlpos_vaswani_wmt_en_de_big, transformer_vaswani_wmt_en_de_big),
]


@pytest.mark.parametrize("name,ours,theirs", FAIRSEQ_ARCHS)
def test_architectures_match_fairseq_and_build(name, ours, theirs):
    assert ARCH_MODEL_REGISTRY[name] is XLPosTransformerModel
    ours_args, theirs_args = argparse.Namespace(), argparse.Namespace()
    ours(ours_args)
    theirs(theirs_args)
    for key, value in vars(theirs_args).items():
        assert getattr(ours_args, key) == value, key
    assert ours_args.xl_integration == "input" and ours_args.xl_fusion == DEFAULT_XL_FUSION == "tanh"
    assert ours_args.xl_heads == ours_args.encoder_attention_heads // 2 and ours_args.xl_head_layers == "0"
    # Build with the architecture's widths and heads (2+1 layers keep the test fast), in the mode that uses them.
    ours_args.encoder_layers, ours_args.decoder_layers, ours_args.xl_integration = 2, 1, "head"
    model = XLPosTransformerModel.build_model(ours_args, TASK)
    attn = model.encoder.layers[0].self_attn
    assert attn.embed_dim == theirs_args.encoder_embed_dim and attn.num_heads == theirs_args.encoder_attention_heads
    assert attn.xl_heads == theirs_args.encoder_attention_heads // 2
    assert type(model.encoder.layers[1].self_attn).__name__ == "MultiheadAttention"


def test_command_line_options():
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    XLPosTransformerModel.add_args(parser)
    args = parser.parse_args(["--xl-integration", "rope", "--xl-heads", "3", "--xl-head-layers", "0,1"])
    assert (args.xl_integration, args.xl_heads, args.xl_head_layers) == ("rope", 3, "0,1")
    assert not hasattr(args, "xl_fusion")  # left to the architecture
    with pytest.raises(SystemExit):
        parser.parse_args(["--xl-integration", "sideways"])
    model = build_xl("rope", xl_heads=3, xl_head_layers="all")
    assert [layer.self_attn.xl_heads for layer in model.encoder.layers] == [3, 3]


def test_invalid_options_are_rejected():
    assert parse_xl_layers("all", 3) == (0, 1, 2)
    assert parse_xl_layers("2, 0,2", 3) == (0, 2)
    for spec in ("3", "x", ""):
        with pytest.raises(ValueError, match="--xl-head-layers"):
            parse_xl_layers(spec, 3)
    with pytest.raises(ValueError, match="--xl-heads"):
        build_xl("head", xl_heads=5)
    with pytest.raises(ValueError, match="no-token-positional-embeddings"):
        build_xl("input", no_token_positional_embeddings=True)


def test_options_survive_fairseq_train_and_checkpoint_loading(tiny_corpus, tmp_path):
    """Real fairseq-train run, then the checkpoint loaded the way fairseq-generate loads it: the rebuilt model
    has the trained XL layout (not the defaults) and generates from the task's file-based XL positions."""
    from conftest import NO_PREFETCH_THREAD, PLUGIN_DIR, cli, run_cli
    from fairseq import checkpoint_utils

    save_dir = tmp_path / "checkpoints"
    run_cli([
        cli("fairseq-train"), str(tiny_corpus.data_bin), "--user-dir", str(PLUGIN_DIR),
        "--task", "translation_xlpos", "--arch", "transformer_xlpos", "--xl-integration", "rope",
        "--xl-heads", "1", "--xl-head-layers", "all",
        "--encoder-layers", "2", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
        "--decoder-attention-heads", "2", "--share-all-embeddings", "--optimizer", "adam", "--lr", "0.005",
        "--max-tokens", "600", "--max-update", "2", "--cpu", "--seed", "1", "--no-progress-bar",
        "--disable-validation", "--save-dir", str(save_dir), *NO_PREFETCH_THREAD,
    ])
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(save_dir / "checkpoint_last.pt")], arg_overrides={"data": str(tiny_corpus.data_bin)})
    encoder = models[0].encoder
    assert (encoder.xl.integration, encoder.xl.xl_heads, encoder.xl.layers) == ("rope", 1, (0, 1))
    # the defaults are written into the saved arguments: a later change of default leaves this model as trained
    assert cfg.model.xl_fusion == DEFAULT_XL_FUSION
    assert all(layer.takes_xl_inputs and layer.self_attn.xl_heads == 1 for layer in encoder.layers)

    task.load_dataset("test")
    sample = next(iter(task.get_batch_iterator(dataset=task.dataset("test"), max_sentences=8).next_epoch_itr(shuffle=False)))
    assert "src_xl_positions" in sample["net_input"]
    generator = task.build_generator(models, argparse.Namespace(beam=2, max_len_a=1, max_len_b=2))
    hypotheses = task.inference_step(generator, [m.eval() for m in models], sample)
    assert len(hypotheses) == len(sample["id"]) and all(len(h) == 2 for h in hypotheses)
