"""Training speed of transformer_xlpos (input, head, rope, ...) against fairseq's vanilla transformer.

All models have the same dimensions, train on the same batches (a word-level slice of the En-Ja corpus, joined
dictionary) for the same number of updates, forward + backward + Adam step, in one process.  Speed is fairseq's
"wps": target tokens (with EOS) per second.

Runs alternate at the finest grain: within a round every batch is trained on by every model in turn (vanilla,
input, head, rope, then the next batch starting with the next model), and wall-clock and process CPU time are
summed per model, so drifting load on a shared machine hits all models alike; CPU time is the steadier figure
there.  The ratio XL / vanilla is taken per round and summarised by its median and range.

In-process rather than through fairseq-train: identical batches for every model and no data-loading or logging
noise, so the figures isolate the model's cost.  XL positions are the reversed word order (speed does not depend
on their values).

On a GPU (--device cuda) every step ends with a device synchronisation, so wall-clock time is the step's; --fp16
/--bf16 run the step under torch.autocast with float32 weights (fairseq's --fp16 instead keeps float16 weights
and a float32 master copy: the same matrix products, a different optimizer step).  What fairseq-train costs end
to end, data loading and collation included, is benchmarks/train_throughput.py's measurement, which also calls
measure() here for its in-process column.

    python benchmarks/speed_xl_vs_vanilla.py --lines 2000 --updates 10 --rounds 5 --threads 1
    python benchmarks/speed_xl_vs_vanilla.py --modes input:sum,input:gated,head:sum,rope:sum --embed-dim 512
    python benchmarks/speed_xl_vs_vanilla.py --device cuda --fp16 --embed-dim 512 --ffn-dim 2048 --layers 6 --heads 8
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

import torch
import torch.nn.functional as F
from fairseq.data import Dictionary
from fairseq.models.transformer import TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture

from xlpos.models.transformer_xlpos import XLPosTransformerModel, transformer_xlpos

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "enja"


@dataclass
class Batch:
    src_tokens: torch.Tensor
    src_lengths: torch.Tensor
    src_xl_positions: torch.Tensor
    prev_output_tokens: torch.Tensor
    target: torch.Tensor
    ntokens: int


class JoinedDictTask:
    def __init__(self, dictionary: Dictionary) -> None:
        self.source_dictionary = self.target_dictionary = dictionary


def read_corpus(src_path: Path, tgt_path: Path, lines: int) -> List[tuple]:
    pairs = []
    with open(src_path, encoding="utf-8") as fs, open(tgt_path, encoding="utf-8") as ft:
        for _, (s, t) in zip(range(lines), zip(fs, ft)):
            pairs.append((s.split(), t.split()))
    if not pairs:
        raise ValueError(f"{src_path}: no sentence pairs read")
    return pairs


def make_batches(pairs: List[tuple], dictionary: Dictionary, max_tokens: int) -> List[Batch]:
    """fairseq's layout: left-padded source + EOS, right-padded target + EOS, prev_output_tokens = EOS + target."""
    pad, eos = dictionary.pad(), dictionary.eos()
    pairs = sorted(pairs, key=lambda p: (len(p[0]), len(p[1])))
    groups, current = [], []
    for pair in pairs:
        width = max([len(p[0]) for p in current + [pair]] + [len(p[1]) for p in current + [pair]]) + 1
        if current and width * (len(current) + 1) > max_tokens:
            groups.append(current)
            current = []
        current.append(pair)
    if current:
        groups.append(current)
    batches = []
    for group in groups:
        bsz = len(group)
        src_w = max(len(s) for s, _ in group) + 1
        tgt_w = max(len(t) for _, t in group) + 1
        src = torch.full((bsz, src_w), pad)
        xl = torch.full((bsz, src_w), pad)
        prev = torch.full((bsz, tgt_w), pad)
        tgt = torch.full((bsz, tgt_w), pad)
        for i, (s, t) in enumerate(group):
            n = len(s)
            src[i, src_w - n - 1:] = torch.tensor([dictionary.index(w) for w in s] + [eos])
            # reversed order: word i has XL position n-1-i; EOS gets n (all shifted by pad + 1)
            xl[i, src_w - n - 1:] = torch.tensor(list(range(n - 1, -1, -1)) + [n]) + pad + 1
            ids = [dictionary.index(w) for w in t] + [eos]
            tgt[i, : len(ids)] = torch.tensor(ids)
            prev[i, : len(ids)] = torch.tensor([eos] + ids[:-1])
        batches.append(Batch(src, src.ne(pad).sum(1), xl, prev, tgt, int(tgt.ne(pad).sum())))
    return batches


def model_args(opts: argparse.Namespace, mode: str | None) -> argparse.Namespace:
    args = argparse.Namespace(
        encoder_embed_dim=opts.embed_dim, decoder_embed_dim=opts.embed_dim,
        encoder_ffn_embed_dim=opts.ffn_dim, decoder_ffn_embed_dim=opts.ffn_dim,
        encoder_layers=opts.layers, decoder_layers=opts.layers,
        encoder_attention_heads=opts.heads, decoder_attention_heads=opts.heads,
        dropout=0.1, share_all_embeddings=True,
        max_source_positions=1024, max_target_positions=1024,
    )
    if mode is None:
        base_architecture(args)
    else:
        integration, _, fusion = mode.partition(":")
        args.xl_integration, args.xl_fusion = integration, fusion or "sum"
        transformer_xlpos(args)
    return args


class Runner:
    def __init__(self, name: str, model, is_xl: bool, lr: float, device: torch.device,
                 autocast_dtype: torch.dtype | None = None) -> None:
        self.name, self.model, self.is_xl = name, model.to(device).train(), is_xl
        self.device, self.autocast_dtype = device, autocast_dtype
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98))

    def step(self, batch: Batch, pad: int) -> None:
        extra = {"src_xl_positions": batch.src_xl_positions} if self.is_xl else {}
        autocast = (torch.autocast(self.device.type, dtype=self.autocast_dtype) if self.autocast_dtype is not None
                    else nullcontext())
        with autocast:
            logits = self.model(batch.src_tokens, batch.src_lengths, batch.prev_output_tokens, **extra)[0]
        loss = F.cross_entropy(
            logits.float().view(-1, logits.size(-1)), batch.target.view(-1), ignore_index=pad, reduction="sum"
        ) / batch.ntokens
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def timed_step(self, batch: Batch, pad: int) -> tuple:
        """(wall seconds, CPU seconds of the process) of one update; on a GPU the step's kernels are waited for,
        so that its time is not billed to the next model's step."""
        wall, cpu = time.perf_counter(), time.process_time()
        self.step(batch, pad)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - wall, time.process_time() - cpu


def interleaved_round(runners: List[Runner], batches: List[Batch], pad: int) -> Dict[str, tuple]:
    """One round: every batch is trained on by every model in turn (the starting model rotates from batch to
    batch), so that load changes on a shared machine hit all models alike.  Returns name -> (wall wps, CPU wps)."""
    wall = {r.name: 0.0 for r in runners}
    cpu = {r.name: 0.0 for r in runners}
    for j, batch in enumerate(batches):
        for runner in runners[j % len(runners):] + runners[: j % len(runners)]:
            w, c = runner.timed_step(batch, pad)
            wall[runner.name] += w
            cpu[runner.name] += c
    words = sum(b.ntokens for b in batches)
    return {name: (words / wall[name], words / cpu[name]) for name in wall}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA, help="folder with train.en and train.ja")
    parser.add_argument("--lines", type=int, default=2000, help="first N sentence pairs")
    parser.add_argument("--max-tokens", type=int, default=2048, help="padded tokens per batch")
    parser.add_argument("--updates", type=int, default=20, help="updates per timed run")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds")
    parser.add_argument("--modes", default="input:sum,head:sum,rope:sum", help="XL modes integration[:fusion]")
    parser.add_argument("--embed-dim", type=int, default=256)
    parser.add_argument("--ffn-dim", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (0: leave torch's default)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--fp16", action="store_true", help="autocast to float16 (GPU)")
    parser.add_argument("--bf16", action="store_true", help="autocast to bfloat16")
    parser.add_argument("--seed", type=int, default=1)
    return parser


def measure(opts: argparse.Namespace) -> Dict[str, List[tuple]]:
    """Train every model on the same batches, interleaved; name -> per-round (wall wps, CPU wps).  The baseline
    is named "vanilla", the XL models by their --modes entry."""
    if opts.threads:
        torch.set_num_threads(opts.threads)
    if opts.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    if opts.fp16 and opts.bf16:
        raise SystemExit("--fp16 and --bf16 exclude each other")
    device = torch.device(opts.device)
    autocast_dtype = torch.float16 if opts.fp16 else torch.bfloat16 if opts.bf16 else None

    pairs = read_corpus(opts.data / "train.en", opts.data / "train.ja", opts.lines)
    dictionary = Dictionary()
    for src, tgt in pairs:
        for word in src + tgt:
            dictionary.add_symbol(word)
    dictionary.pad_to_multiple_(8)
    batches = make_batches(pairs, dictionary, opts.max_tokens)
    generator = torch.Generator().manual_seed(opts.seed)
    order = torch.randperm(len(batches), generator=generator).tolist()
    run_batches = [to_device(batches[i % len(batches)], device) for i in order[: opts.updates]]
    task = JoinedDictTask(dictionary)
    print(
        f"data: {len(pairs)} pairs, dict {len(dictionary)}, {len(batches)} batches; timed run = {len(run_batches)} "
        f"updates, {sum(b.ntokens for b in run_batches)} target tokens; model {opts.layers}+{opts.layers} layers, "
        f"dim {opts.embed_dim}, ffn {opts.ffn_dim}, heads {opts.heads}; threads {torch.get_num_threads()}; "
        f"device {opts.device}{' autocast ' + str(autocast_dtype) if autocast_dtype else ''}"
    )

    runners = []
    for mode in [None] + opts.modes.split(","):
        torch.manual_seed(opts.seed)
        args = model_args(opts, mode)
        cls = TransformerModel if mode is None else XLPosTransformerModel
        runners.append(Runner(mode or "vanilla", cls.build_model(args, task), mode is not None, lr=5e-4,
                              device=device, autocast_dtype=autocast_dtype))

    interleaved_round(runners, run_batches, dictionary.pad())  # warm-up: allocator, kernels, every batch shape
    wps: Dict[str, List[tuple]] = {r.name: [] for r in runners}
    for round_index in range(opts.rounds):
        for name, figures in interleaved_round(runners, run_batches, dictionary.pad()).items():
            wps[name].append(figures)
        print(f"round {round_index + 1} wps (wall/CPU): "
              + "  ".join(f"{n} {v[-1][0]:.0f}/{v[-1][1]:.0f}" for n, v in wps.items()), flush=True)
    return wps


def to_device(batch: Batch, device: torch.device) -> Batch:
    return Batch(batch.src_tokens.to(device), batch.src_lengths.to(device), batch.src_xl_positions.to(device),
                 batch.prev_output_tokens.to(device), batch.target.to(device), batch.ntokens)


def main(argv: List[str] | None = None) -> int:
    opts = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    wps = measure(opts)
    for kind, k in (("wall-clock", 0), ("CPU-time", 1)):
        print(f"\n{kind} words/s over {opts.rounds} rounds; ratio XL/vanilla per round, median [min..max]")
        for name, values in wps.items():
            own = [v[k] for v in values]
            ratios = [v[k] / b[k] for v, b in zip(values, wps["vanilla"])]
            ratio = "" if name == "vanilla" else f"{statistics.median(ratios):.3f} [{min(ratios):.3f}..{max(ratios):.3f}]"
            print(f"  {name:<14} median {statistics.median(own):8.0f}  min {min(own):8.0f}  max {max(own):8.0f}  {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
