"""CUDA checks (marker ``gpu``): half-precision training of every mode through fairseq's own Trainer and CLI, beam
search batched vs one sentence at a time on the GPU, and ``--xl-integration none`` == vanilla on the GPU.

Without a CUDA device every test here is skipped with the reason; CPU behaviour is covered by test_models.py and
test_task.py. Run them alone with ``python -m pytest -m gpu tests`` (benchmarks/gpu_check.sh does).
"""
import copy
import math

import pytest
import torch
from fairseq import options, tasks, utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.trainer import Trainer

import xlpos  # noqa: F401  (registers the task and the model)
from conftest import PLUGIN_DIR, run_cli, tiny_model_args
from xlpos.models.transformer_xlpos import XL_FUSIONS
from test_models import (  # the CPU tests' models and data, so both devices check the same things
    ORDERS,
    batch,
    briefly_trained,  # noqa: F401  (fixture: a tiny model trained to output the source in XL order)
    build_vanilla,
    build_xl,
    generate,
    prev_output_tokens_for,
    xl_positions_for,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason=f"needs a CUDA GPU: torch {torch.__version__} (CUDA build: {torch.version.cuda}) sees "
                              "none"),
]

# every integration, and InXL with every fusion (tanh: the default)
MODES = [("none", None), *(("input", f) for f in XL_FUSIONS), ("head", None), ("rope", None)]
HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}
# First-step loss of a half-precision model against the float32 one from the same weights and batch: bfloat16
# keeps 8 bits of mantissa, float16 11, so their rounding differs by about 8x.
LOSS_RTOL = {"fp16": 0.01, "bf16": 0.04}


def trainer_for(data_bin, integration, fusion, precision):
    """fairseq-train's objects (task, model, criterion, Trainer) built from command-line arguments, as
    fairseq_cli.train builds them; precision None (float32), 'fp16' or 'bf16'."""
    argv = [str(data_bin), "--user-dir", str(PLUGIN_DIR), "--task", "translation_xlpos", "-s", "src", "-t", "tgt",
            "--arch", "transformer_xlpos", "--xl-integration", integration,
            *(["--xl-fusion", fusion] if fusion else []),
            "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
            "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4",
            "--decoder-attention-heads", "4", "--share-all-embeddings", "--dropout", "0",
            "--optimizer", "adam", "--lr", "0.001", "--criterion", "label_smoothed_cross_entropy",
            "--label-smoothing", "0.1", "--max-tokens", "600", "--seed", "1", "--num-workers", "0"]
    if precision:
        argv.append(f"--{precision}")
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    cfg = convert_namespace_to_omegaconf(args)
    utils.import_user_module(cfg.common)
    torch.manual_seed(1)  # same initial weights for every precision
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train")
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    trainer = Trainer(cfg, task, model, criterion)
    itr = task.get_batch_iterator(dataset=task.dataset("train"), max_tokens=600, max_positions=(1024, 1024),
                                  num_workers=0).next_epoch_itr(shuffle=False)
    return trainer, next(itr)


@pytest.mark.parametrize("precision", sorted(HALF))
@pytest.mark.parametrize("integration,fusion", MODES)
def test_half_precision_training_step(tiny_corpus, integration, fusion, precision):
    """One update with fairseq's Trainer in fp16 / bf16 (model in half precision, float32 master weights): the
    update is applied, the loss is finite and close to float32's on the same weights and batch, and no weight
    becomes inf/NaN."""
    reference, sample = trainer_for(tiny_corpus.data_bin, integration, fusion, None)
    assert "src_xl_positions" in sample["net_input"]
    expected = reference.train_step([sample])["loss"]
    trainer, sample = trainer_for(tiny_corpus.data_bin, integration, fusion, precision)
    model = trainer.model
    assert next(model.parameters()).dtype == HALF[precision] and next(model.parameters()).is_cuda
    before = {name: p.detach().float().clone() for name, p in model.named_parameters()}
    log = trainer.train_step([sample])
    # fp16's dynamic loss scale starts at 128 and a tiny model's gradients do not overflow it: an update that was
    # skipped (log None, counter not advanced) is a failure here.
    assert log is not None and trainer.get_num_updates() == 1, "the half-precision update was skipped"
    assert math.isfinite(log["loss"])
    assert log["loss"] == pytest.approx(expected, rel=LOSS_RTOL[precision])
    changed = [name for name, p in model.named_parameters() if not torch.equal(p.detach().float(), before[name])]
    assert changed, "no weight changed"
    for name, p in model.named_parameters():
        assert torch.isfinite(p).all(), name
    if fusion == "gated":  # the gate is zero-initialised: it moves only if its gradient reached it in half precision
        assert any(name.startswith("encoder.xl_fusion.") for name in changed)


@pytest.mark.parametrize("flag,integration,fusion", [("--fp16", "input", "gated"), ("--bf16", "rope", None)])
def test_fairseq_train_cli_in_half_precision(tiny_corpus, tmp_path, flag, integration, fusion):
    """The real fairseq-train command on the GPU (no --cpu) with --fp16 / --bf16, validation and BLEU included."""
    args = [a for a in tiny_model_args(tiny_corpus, tmp_path / "ckpt", 4, tmp_path / "tb") if a != "--cpu"]
    i = args.index("--xl-integration")
    args[i + 1] = integration
    args += [flag] + (["--xl-fusion", fusion] if fusion else [])
    proc = run_cli(args, timeout=300)
    log = proc.stdout + proc.stderr
    assert "num_updates" in log and "done training" in log
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_none_is_exactly_vanilla_on_cuda(dtype):
    vanilla = build_vanilla().to("cuda", dtype)
    model = build_xl("none").to("cuda", dtype)
    tokens, lengths, xl = (t.cuda() for t in batch())
    prev = prev_output_tokens_for(tokens)
    expected = vanilla(tokens, lengths, prev)[0]
    assert torch.equal(model(tokens, lengths, prev, src_xl_positions=xl)[0], expected)
    # Training mode: dropout draws from the CUDA generator in the same order, so the outputs are identical too.
    vanilla.train()
    model.train()
    outputs = []
    for m, extra in ((vanilla, {}), (model, {"src_xl_positions": xl})):
        torch.manual_seed(5)
        out = m(tokens, lengths, prev, **extra)[0]
        out.float().sum().backward()
        outputs.append(out)
    assert torch.equal(outputs[0], outputs[1])
    # Gradients: some CUDA backward kernels (attention, embedding) accumulate with atomics, in an order that
    # varies from run to run even for one model, so bitwise equality is not a property of the device; a tolerance
    # of that rounding order is.
    rtol, atol = (1e-5, 1e-7) if dtype == torch.float32 else (1e-2, 1e-3)
    for (name, p), (_, q) in zip(vanilla.named_parameters(), model.named_parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            assert torch.allclose(p.grad.float(), q.grad.float(), rtol=rtol, atol=atol), name


def test_beam_search_batched_equals_one_sentence_at_a_time_on_cuda(briefly_trained):  # noqa: F811
    """The CPU test's model on the GPU: the batched beam search (sentences finishing at different steps, so the
    batch shrinks and reorder_encoder_out selects XL positions) equals one sentence at a time, and the CPU."""
    cpu_model = briefly_trained
    model = copy.deepcopy(cpu_model).cuda()
    tokens, lengths, xl = batch()
    on_cpu = generate(cpu_model, tokens, lengths, xl)
    batched = generate(model, tokens.cuda(), lengths.cuda(), xl.cuda())
    assert len({len(hyps[0]["tokens"]) for hyps in batched}) > 1  # sentences finish at different steps
    for i, n in enumerate(lengths.tolist()):
        single = generate(model, tokens[i:i + 1, -n:].cuda(), lengths[i:i + 1].cuda(), xl[i:i + 1, -n:].cuda())
        assert len(single[0]) == len(batched[i]) == 4
        for hyp_single, hyp_batched in zip(single[0], batched[i]):
            assert torch.equal(hyp_single["tokens"], hyp_batched["tokens"])
            assert torch.allclose(hyp_single["score"], hyp_batched["score"], atol=1e-4)
        # CPU and GPU kernels round differently (float32 both): same best hypothesis, scores close
        assert torch.equal(batched[i][0]["tokens"].cpu(), on_cpu[i][0]["tokens"])
        assert torch.allclose(batched[i][0]["score"].cpu(), on_cpu[i][0]["score"], atol=1e-3)
    # The XL positions reach the search on the GPU too.
    reversed_xl = xl_positions_for(tokens, [list(reversed(o)) for o in ORDERS]).cuda()
    rescored = generate(model, tokens.cuda(), lengths.cuda(), reversed_xl)
    assert any(abs(float(a[0]["score"]) - float(b[0]["score"])) > 1e-3 for a, b in zip(batched, rescored))
