"""Training the neural BTG reorderer (xlpos_prep.neural_reorderer) with torch: `train-reorderer --kind neural`.

The network is trained on the oracle's pair orders: for every pair of source words i < j less than max_span
apart whose oracle ranks differ, binary cross-entropy of the log-odds that j precedes i, averaged over the pairs of
a batch (so every pair weighs the same, as in corpus Kendall tau). Adam with a linear warm-up and a linear decay
to a tenth of the peak rate; word dropout (a known word is replaced by the unknown word) so that the hashed
prefix/suffix/shape embeddings learn to stand in for unseen words. After training the weights are exported to
numpy arrays in the model file; inference never needs torch.

After every epoch the model so far is written to MODEL.snapshot (marked incomplete) with the torch parameters and
the optimizer state, so `--resume` continues exactly where an interrupted run stopped: the shuffle and the
dropout of epoch e depend only on (seed, e).
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import resource
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from tqdm import tqdm

from .neural_reorderer import (N_DISTANCE_BUCKETS, UNK, NeuralConfig, NeuralReorderer, NeuralTrainOptions,
                               WordFeatures, distance_buckets)

logger = logging.getLogger(__name__)


class PairModel(nn.Module):
    """The network of NeuralReorderer in torch; `export` gives the arrays its numpy forward pass reads."""

    def __init__(self, config: NeuralConfig, vocab_size: int, dropout: float):
        super().__init__()
        c = config
        self.config = c
        self.word = nn.Embedding(vocab_size + 2, c.word_dim)
        self.hashed = nn.Embedding(c.hash_buckets, c.word_dim)
        nn.init.normal_(self.word.weight, std=0.1)
        nn.init.normal_(self.hashed.weight, std=0.1 / math.sqrt(7))
        self.lstm = nn.LSTM(c.word_dim, c.hidden, num_layers=c.layers, bidirectional=True, batch_first=True,
                            dropout=dropout if c.layers > 1 else 0.0)
        self.wa = nn.Linear(2 * c.hidden, c.pair_dim)
        self.wc = nn.Linear(2 * c.hidden, c.pair_dim, bias=False)
        self.dist = nn.Embedding(N_DISTANCE_BUCKETS, c.pair_dim)
        nn.init.normal_(self.dist.weight, std=0.1)
        self.out = nn.Linear(c.pair_dim, 1)
        if c.chunks:
            self.chunk_l = nn.Linear(2 * c.hidden, c.pair_dim)
            self.chunk_r = nn.Linear(2 * c.hidden, c.pair_dim, bias=False)
            self.chunk_out = nn.Linear(c.pair_dim, 1)
        self.drop = nn.Dropout(dropout)
        self.register_buffer("buckets", torch.from_numpy(distance_buckets(1024)), persistent=False)

    def forward(self, words: torch.Tensor, hashed: torch.Tensor, lengths: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits[b, i, j]: log-odds that word j precedes word i (meaningful for i < j), chunks[b, k]: log-odds
        that words k - 1 and k stay one chunk (meaningful for k >= 1; None without chunks))."""
        B, T = words.shape
        x = self.drop(self.word(words) + self.hashed(hashed).sum(dim=2))
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(packed)
        h, _ = pad_packed_sequence(h, batch_first=True, total_length=T)
        h = self.drop(h)
        a = self.wa(h)
        c = self.wc(h)
        pos = torch.arange(T, device=words.device)
        dist = self.dist(self.buckets[(pos[None, :] - pos[:, None]).abs().clamp(max=1024)])  # (T, T, D)
        z = torch.relu(a[:, :, None, :] + c[:, None, :, :] + dist[None])
        if not self.config.chunks:
            return self.out(z).squeeze(-1), None
        chunks = torch.zeros(B, T, device=words.device)
        if T > 1:
            zc = torch.relu(self.chunk_l(h[:, :-1]) + self.chunk_r(h[:, 1:]))
            chunks = torch.cat([chunks[:, :1], self.chunk_out(zc).squeeze(-1)], dim=1)
        return self.out(z).squeeze(-1), chunks

    def export(self) -> dict[str, np.ndarray]:
        def arr(t: torch.Tensor) -> np.ndarray:
            return t.detach().float().cpu().numpy().copy()

        w = {"word": arr(self.word.weight), "hashed": arr(self.hashed.weight)}
        for layer in range(self.config.layers):
            for d, suffix in (("f", ""), ("b", "_reverse")):
                w[f"lstm{layer}{d}.w_ih"] = arr(getattr(self.lstm, f"weight_ih_l{layer}{suffix}"))
                w[f"lstm{layer}{d}.w_hh"] = arr(getattr(self.lstm, f"weight_hh_l{layer}{suffix}"))
                w[f"lstm{layer}{d}.b"] = arr(getattr(self.lstm, f"bias_ih_l{layer}{suffix}")
                                             + getattr(self.lstm, f"bias_hh_l{layer}{suffix}"))
        w.update({"pair.wa": arr(self.wa.weight), "pair.ba": arr(self.wa.bias), "pair.wc": arr(self.wc.weight),
                  "pair.dist": arr(self.dist.weight), "pair.w": arr(self.out.weight[0]),
                  "pair.b": arr(self.out.bias)})
        if self.config.chunks:
            w.update({"chunk.wl": arr(self.chunk_l.weight), "chunk.b1": arr(self.chunk_l.bias),
                      "chunk.wr": arr(self.chunk_r.weight), "chunk.w": arr(self.chunk_out.weight[0]),
                      "chunk.b": arr(self.chunk_out.bias)})
        return w


@dataclass
class Encoded:
    """A corpus as padded-per-batch tensors are made from: ids per sentence, oracle ranks."""

    words: list[np.ndarray]
    hashed: list[np.ndarray]
    ranks: list[np.ndarray]


def build_vocab(sentences: list[list[str]], min_count: int, max_vocab: int) -> list[str]:
    counts = Counter(w for s in sentences for w in s)
    ranked = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    return ranked[:max_vocab]


def encode_corpus(features: WordFeatures, sentences: list[list[str]], ranks: list[list[int]]) -> Encoded:
    words, hashed = [], []
    for s in sentences:
        ids = [features.ids(w) for w in s]
        words.append(np.array([i[0] for i in ids], dtype=np.int64))
        hashed.append(np.array([i[1] for i in ids], dtype=np.int64).reshape(len(s), -1))
    return Encoded(words, hashed, [np.asarray(r, dtype=np.int64) for r in ranks])


def batches(lengths: np.ndarray, batch_pairs: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Sentence index batches of similar length (sorted with random tie order), at most batch_pairs padded
    length^2 cells each, in random order."""
    order = np.lexsort((rng.random(lengths.shape[0]), lengths))
    out, start = [], 0
    while start < order.shape[0]:
        end = start + 1
        while end < order.shape[0] and (end - start + 1) * int(lengths[order[end]]) ** 2 <= batch_pairs:
            end += 1
        out.append(order[start:end])
        start = end
    rng.shuffle(out)
    return out


@dataclass
class Batch:
    """One padded batch: the words, and the oracle's labels with the masks of what counts."""

    words: torch.Tensor  # (B, T) ids
    hashed: torch.Tensor  # (B, T, N_HASHED) ids
    lengths: torch.Tensor  # (B,), on the CPU
    targets: torch.Tensor  # (B, T, T): 1 when the oracle puts j before i
    mask: torch.Tensor  # the pairs i < j, less than max_span apart, whose oracle ranks differ
    chunk_targets: torch.Tensor  # (B, T): 1 when words k - 1 and k are one chunk of the oracle order
    chunk_mask: torch.Tensor  # the neighbours (k - 1, k) inside each sentence


def make_batch(data: Encoded, idx: np.ndarray, max_span: int, device: torch.device) -> Batch:
    """The sentences idx as one padded batch. A chunk is what the fuzzy reordering score counts
    (xlpos_prep.metrics): the oracle rank steps from word k - 1 to word k by 0 or 1."""
    lengths = np.array([data.words[s].shape[0] for s in idx], dtype=np.int64)
    B, T = len(idx), int(lengths.max())
    words = np.zeros((B, T), dtype=np.int64)
    hashed = np.zeros((B, T, data.hashed[idx[0]].shape[1]), dtype=np.int64)
    ranks = np.full((B, T), -1, dtype=np.int64)
    for b, s in enumerate(idx):
        n = lengths[b]
        words[b, :n] = data.words[s]
        hashed[b, :n] = data.hashed[s]
        ranks[b, :n] = data.ranks[s]
    i = np.arange(T)
    upper = (i[:, None] < i[None, :]) & (i[None, :] - i[:, None] < max_span)
    valid = (i[None, :] < lengths[:, None])
    mask = upper[None] & valid[:, :, None] & valid[:, None, :] & (ranks[:, :, None] != ranks[:, None, :])
    targets = (ranks[:, :, None] > ranks[:, None, :]).astype(np.float32)
    step = np.zeros((B, T), dtype=np.int64)
    step[:, 1:] = ranks[:, 1:] - ranks[:, :-1]
    chunk_targets = ((step == 0) | (step == 1)).astype(np.float32)
    chunk_mask = valid & (i[None, :] >= 1)
    t = torch.from_numpy
    return Batch(t(words).to(device), t(hashed).to(device), t(lengths), t(targets).to(device), t(mask).to(device),
                 t(chunk_targets).to(device), t(chunk_mask).to(device))


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available")
    return torch.device(name)


def _state_arrays(model: PairModel, optimizer: torch.optim.Optimizer, step: int) -> dict[str, np.ndarray]:
    """The torch parameters and Adam moments as named arrays (the snapshot's opt/ entries)."""
    out: dict[str, np.ndarray] = {"step": np.array([step], dtype=np.int64)}
    for name, p in model.named_parameters():
        out[f"param/{name}"] = p.detach().cpu().numpy().copy()
        st = optimizer.state.get(p, {})
        if st:
            out[f"exp_avg/{name}"] = st["exp_avg"].detach().cpu().numpy().copy()
            out[f"exp_avg_sq/{name}"] = st["exp_avg_sq"].detach().cpu().numpy().copy()
            out[f"adam_step/{name}"] = np.array([float(st["step"])], dtype=np.float64)
    return out


def _restore_state(model: PairModel, optimizer: torch.optim.Optimizer, state: dict[str, np.ndarray]) -> int:
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(torch.from_numpy(state[f"param/{name}"]))
    for name, p in params.items():
        if f"exp_avg/{name}" in state:
            optimizer.state[p] = {"step": torch.tensor(float(state[f"adam_step/{name}"][0])),
                                  "exp_avg": torch.from_numpy(state[f"exp_avg/{name}"]).to(p.device),
                                  "exp_avg_sq": torch.from_numpy(state[f"exp_avg_sq/{name}"]).to(p.device)}
    return int(state["step"][0])


def train_neural(sentences: list[list[str]], ranks: list[list[int]], config: NeuralConfig,
                 options: NeuralTrainOptions, dev: tuple[list[list[str]], list[list[int]]] | None = None,
                 resume: NeuralReorderer | None = None, source=None,
                 on_epoch: Callable[[NeuralReorderer], None] | None = None, progress: bool = True,
                 auto_invert_span: bool = True, auto_fallback_length: bool = True) -> NeuralReorderer:
    """Train a neural reorderer on sentences with dense oracle ranks. With `dev`, the epoch with the best dev
    corpus tau + FRS is kept; without, the last. `on_epoch(snapshot)` gets the incomplete model after each
    epoch, with the optimizer state (the CLI writes it to MODEL.snapshot)."""
    from .metrics import evaluate_orders
    from .reorderer import check_parallel

    check_parallel(sentences, ranks)
    keep = [s for s, w in enumerate(sentences) if 2 <= len(w) <= options.max_len]
    if not keep:
        raise ValueError("no training sentence of 2..max-len words")
    too_long = sum(len(w) > options.max_len for w in sentences)
    if options.threads > 0:
        torch.set_num_threads(options.threads)
    device = _device(options.device)
    train_sents = [sentences[s] for s in keep]
    longest = max(len(s) for s in train_sents)
    if resume is not None:
        vocab = resume.vocab
        config = resume.config
    else:
        vocab = build_vocab(train_sents, options.min_count, options.max_vocab)
        config = NeuralConfig(**{**asdict(config),
                                 "max_invert_span": 2 * longest if auto_invert_span else config.max_invert_span,
                                 "fallback_length": longest if auto_fallback_length else config.fallback_length})
    features = WordFeatures(vocab, config.hash_buckets)
    data = encode_corpus(features, train_sents, [ranks[s] for s in keep])
    lengths = np.array([w.shape[0] for w in data.words], dtype=np.int64)
    torch.manual_seed(options.seed)
    model = PairModel(config, len(vocab), options.dropout).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=options.lr)
    steps_per_epoch = len(batches(lengths, options.batch_pairs, np.random.default_rng([options.seed, 0])))
    total_steps = steps_per_epoch * options.epochs
    warmup = min(500, total_steps // 10 + 1)

    def lr_at(step: int) -> float:
        if step < warmup:
            return options.lr * (step + 1) / warmup
        return options.lr * max(0.1, 1.0 - 0.9 * (step - warmup) / max(1, total_steps - warmup))

    step = 0
    start_epoch = 0
    history: list[dict] = []
    best: tuple[float, int, dict[str, np.ndarray]] | None = None
    if resume is not None:
        if resume.state is None:
            raise ValueError(f"{resume.origin}: --resume: the model holds no optimizer state")
        prev = resume.training
        prev_opts = {k: v for k, v in prev.get("options", {}).items() if k not in ("epochs", "device", "threads")}
        now_opts = {k: v for k, v in asdict(options).items() if k not in ("epochs", "device", "threads")}
        if prev_opts != now_opts:
            raise ValueError(f"{resume.origin}: --resume: the model was trained with options {prev.get('options')}, "
                             f"not {asdict(options)}")
        step = _restore_state(model, optimizer, resume.state)
        start_epoch = int(prev["epochs_done"])
        history = list(prev.get("history", []))
        if dev is not None and prev.get("best_epoch"):
            best = (float(prev["best_selection"]), int(prev["best_epoch"]),
                    {k: v.copy() for k, v in resume.weights.items()})
    logger.info("neural reorderer: %d training sentences (longest %d words), %d known words, %d parameters, on %s "
                "with %d threads", len(train_sents), longest, len(vocab), sum(p.numel() for p in model.parameters()),
                device, torch.get_num_threads())
    result: NeuralReorderer | None = resume
    for epoch in range(start_epoch, options.epochs):
        t0 = time.perf_counter()
        rng = np.random.default_rng([options.seed, epoch])
        torch.manual_seed(options.seed * 1000 + epoch)
        model.train()
        total_loss = total_pairs = total_chunk_loss = total_neighbours = 0.0
        plan = batches(lengths, options.batch_pairs, rng)
        with tqdm(total=len(plan), desc=f"train epoch {epoch + 1}/{options.epochs}", unit="batch", file=sys.stderr,
                  disable=None if progress else True, mininterval=1.0, leave=False) as bar:
            for idx in plan:
                batch = make_batch(data, idx, config.max_span, device)
                words, mask = batch.words, batch.mask
                if options.word_dropout > 0:
                    drop = torch.rand(words.shape, device=device) < options.word_dropout
                    words = torch.where(drop & (words > UNK), torch.full_like(words, UNK), words)
                logits, chunk_logits = model(words, batch.hashed, batch.lengths)
                pairs = mask.sum()
                if pairs == 0:
                    bar.update(1)
                    continue
                loss = nn.functional.binary_cross_entropy_with_logits(logits[mask], batch.targets[mask],
                                                                      reduction="sum")
                objective = loss / pairs
                if chunk_logits is not None:  # mean over neighbours, beside the mean over pairs
                    cm = batch.chunk_mask
                    chunk_loss = nn.functional.binary_cross_entropy_with_logits(
                        chunk_logits[cm], batch.chunk_targets[cm], reduction="sum")
                    objective = objective + chunk_loss / cm.sum()
                    total_chunk_loss += float(chunk_loss.detach())
                    total_neighbours += float(cm.sum())
                for g in optimizer.param_groups:
                    g["lr"] = lr_at(step)
                optimizer.zero_grad(set_to_none=True)
                objective.backward()
                nn.utils.clip_grad_norm_(model.parameters(), 5.0)
                optimizer.step()
                step += 1
                total_loss += float(loss.detach())
                total_pairs += float(pairs)
                bar.update(1)
        model.eval()
        weights = model.export()
        report = {"epoch": epoch + 1, "loss": total_loss / max(total_pairs, 1.0), "pairs": total_pairs,
                  "seconds": time.perf_counter() - t0}
        if config.chunks:
            report["chunk_loss"] = total_chunk_loss / max(total_neighbours, 1.0)
        training = {"kind": "neural", "options": asdict(options), "epochs_done": epoch + 1,
                    "train_sentences": len(train_sents), "skipped_too_long": too_long, "longest": longest,
                    "device": str(device), "threads": torch.get_num_threads()}
        if dev is not None:
            scores = evaluate_orders(NeuralReorderer(config, weights, vocab).reorder_batch(dev[0]), dev[1])
            report["dev"] = asdict(scores)
            sel = scores.corpus_tau + scores.corpus_frs
            if best is None or sel > best[0]:
                best = (sel, epoch + 1, weights)
        history.append(report)
        training["history"] = history
        if best is not None:
            training.update(best_epoch=best[1], best_selection=best[0])
        kept = best[2] if best is not None else weights
        result = NeuralReorderer(config, kept, vocab, training, complete=False, source=source,
                                 state=_state_arrays(model, optimizer, step))
        logger.info("epoch %d: pair loss %.4f%s, %.1fs%s", epoch + 1, report["loss"],
                    f", chunk loss {report['chunk_loss']:.4f}" if config.chunks else "", report["seconds"],
                    "" if dev is None else f"; dev tau {report['dev']['corpus_tau']:.4f} FRS "
                                           f"{report['dev']['corpus_frs']:.4f} (best: epoch {best[1]})")
        if on_epoch is not None:
            on_epoch(result)
    assert result is not None
    return NeuralReorderer(result.config, result.weights, result.vocab, result.training, complete=True,
                           source=result.source)


def run_train_neural(args: argparse.Namespace, sentences: list[list[str]], ranks: list[list[int]],
                     dev: tuple[list[list[str]], list[list[int]]] | None, source, snapshot: str,
                     resume: NeuralReorderer | None) -> int:
    """train-reorderer --kind neural, after the shared checks and reading (xlpos_prep.reorderer)."""
    from .reorderer import AUTO_FALLBACK_LENGTH, AUTO_INVERT_SPAN
    config = NeuralConfig(word_dim=args.word_dim, hash_buckets=args.hash_buckets, hidden=args.hidden,
                          layers=args.layers, pair_dim=args.pair_dim, max_span=args.max_span, max_term=args.max_term,
                          chunks=args.chunks, split_sentences=args.split_sentences,
                          gain=args.gain, invert_margin=args.invert_margin, fallback_margin=args.fallback_margin,
                          max_invert_span=max(args.max_invert_span, 0), fallback_length=max(args.fallback_length, 0))
    options = NeuralTrainOptions(epochs=args.epochs, lr=args.lr, batch_pairs=args.batch_pairs, dropout=args.dropout,
                                 word_dropout=args.word_dropout, min_count=args.min_count, max_len=args.max_len,
                                 seed=args.seed, device=args.device, threads=args.threads)
    t0 = time.perf_counter()
    model = train_neural(sentences, ranks, config, options, dev, resume, source,
                         on_epoch=lambda m: m.save(snapshot),
                         auto_invert_span=args.max_invert_span == AUTO_INVERT_SPAN,
                         auto_fallback_length=args.fallback_length == AUTO_FALLBACK_LENGTH)
    model.save(args.model)
    if os.path.exists(snapshot):
        os.unlink(snapshot)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    logger.info("trained in %.1fs (peak memory %.0f MB)%s; wrote %s", time.perf_counter() - t0, peak_mb,
                f"; kept epoch {model.training['best_epoch']}" if "best_epoch" in model.training else "", args.model)
    return 0
