"""Alignment quality of a trained model's encoder-decoder attention (the paper's section 4.3), one command.

Force-decodes the reference translations of a binarized split with a trained checkpoint (baseline `transformer`
or `transformer_xlpos`: the decoder is run on the reference's prev_output_tokens, no search), takes the
encoder-decoder attention of one decoder layer (averaged over its heads, or one head), maps pieces to words on both
sides by sentencepiece's "▁" marker, extracts word alignments (argmax per target word, the mutual-argmax
intersection, a threshold; see xlpos.evaluation.attention_alignment) and, given a gold alignment file, scores
them: AER, precision, recall (xlpos.evaluation.aer; sure/possible links supported).

    python -m xlpos.evaluation.align_attention data-bin --path checkpoints/xl-input/checkpoint_best.pt \
        --gen-subset test --gold work/synth/test.gold-align --layer -1 --out-prefix out/xl-input.test --json aer.json
    ... --head 2                                  # one head instead of the mean over heads
    ... --overrides '{"xl_positions": "monotone"}'   # task/model options replacing the checkpoint's

EOS rows and columns are excluded before words are formed, so attention mass on the source EOS counts for no word.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from .aer import AlignmentScore, add_gold_options, format_links, gold_options, read_gold, score_alignments
from .attention_alignment import DEFAULT_THRESHOLD, METHODS, WORD_MARKER, sentence_links, word_ids

logger = logging.getLogger("xlpos.align_attention")


@dataclass(frozen=True)
class AttentionAlignment:
    """What one run produced: the links of every sentence by every method, and their scores when gold is given."""
    checkpoint: str
    subset: str
    layer: int                    # resolved decoder layer index (0-based)
    head: int | None              # None: mean over heads
    sentences: int
    links: dict                   # method -> list (by sentence id) of frozensets of (source word, target word)
    scores: dict                  # method -> AlignmentScore (empty without gold)


def _load(checkpoint: str, data_bin: str, overrides: dict, cpu: bool):
    import torch

    import xlpos  # noqa: F401  (registers the task and models, and the checkpoint-loading fix, like --user-dir)
    from fairseq import checkpoint_utils
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint],
                                                                      arg_overrides={"data": data_bin, **overrides})
    model = models[0].eval()
    if torch.cuda.is_available() and not cpu:
        model = model.cuda()
    return model, task


def force_decode_attention(checkpoint: str, data_bin: str, subset: str = "test", layer: int = -1,
                           head: int | None = None, overrides: dict | None = None, max_tokens: int = 4000,
                           cpu: bool = False):
    """(resolved layer index, iterator of (sentence id, attention (target pieces x source pieces, EOS excluded),
    target pieces, source pieces)). The model is loaded before this returns, so option errors come first."""
    model, task = _load(checkpoint, data_bin, overrides or {}, cpu)
    try:
        resolved = resolve_layer(model, layer, head)
    except ValueError as e:
        raise SystemExit(str(e))
    return resolved, _attention_batches(model, task, subset, resolved, head, max_tokens)


def resolve_layer(model, layer: int, head: int | None) -> int:
    """The 0-based index of decoder layer `layer` (negative: from the last); ValueError naming --layer or --head
    when the model has no such layer or head."""
    layers = model.decoder.layers
    resolved = layer if layer >= 0 else len(layers) + layer
    if not 0 <= resolved < len(layers):
        raise ValueError(f"--layer {layer}: the decoder has {len(layers)} layers")
    heads = layers[resolved].encoder_attn.num_heads
    if head is not None and not 0 <= head < heads:
        raise ValueError(f"--head {head}: the decoder layer has {heads} heads")
    return resolved


@contextmanager
def layer_attention(model, layer: int) -> Iterator[dict]:
    """While the block runs, every forward pass of the model puts the encoder-decoder attention of decoder layer
    `layer` (heads x batch x target x source) under "attn" of the yielded dict; call the model with
    ``alignment_layer=layer`` so that fairseq asks that layer for its per-head weights."""
    captured: dict = {}

    def keep_head_weights(_module, _inputs, output):
        # a decoder layer returns (x, attn, None); with need_head_weights attn is heads x batch x tgt x src
        captured["attn"] = output[1]

    hook = model.decoder.layers[layer].register_forward_hook(keep_head_weights)
    try:
        yield captured
    finally:
        hook.remove()


def _attention_batches(model, task, subset: str, layer: int, head: int | None, max_tokens: int):
    import torch
    from fairseq import utils

    task.load_dataset(subset)
    dataset = task.dataset(subset)
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    itr = task.get_batch_iterator(
        dataset=dataset, max_tokens=max_tokens,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
        ignore_invalid_inputs=False, required_batch_size_multiple=1).next_epoch_itr(shuffle=False)
    device = next(model.parameters()).device
    with layer_attention(model, layer) as captured, torch.no_grad():
        for sample in itr:
            sample = utils.move_to_cuda(sample) if device.type == "cuda" else sample
            # alignment_layer makes fairseq ask that layer for its per-head encoder-decoder weights
            model(**sample["net_input"], alignment_layer=layer)
            attn = captured.pop("attn").float()
            attn = attn.mean(dim=0) if head is None else attn[head]
            src, tgt = sample["net_input"]["src_tokens"], sample["target"]
            for b, sid in enumerate(sample["id"].tolist()):
                cols = (src[b] != src_dict.pad()).nonzero().flatten()[:-1]   # left-padded; drop EOS
                rows = (tgt[b] != tgt_dict.pad()).nonzero().flatten()[:-1]   # right-padded; drop EOS
                a = attn[b].index_select(0, rows).index_select(1, cols).cpu().numpy()
                yield (sid, a, [tgt_dict[int(t)] for t in tgt[b, rows]], [src_dict[int(t)] for t in src[b, cols]])


def align_attention(checkpoint: str, data_bin: str, subset: str = "test", layer: int = -1, head: int | None = None,
                    methods=METHODS, threshold: float = DEFAULT_THRESHOLD, marker: str | None = WORD_MARKER,
                    gold: list | None = None, overrides: dict | None = None, max_tokens: int = 4000,
                    cpu: bool = False, gold_name: str = "gold") -> AttentionAlignment:
    """Force-decode, extract word links, score them against `gold` (a list of GoldAlignment) when given."""
    resolved, it = force_decode_attention(checkpoint, data_bin, subset, layer, head, overrides, max_tokens, cpu)
    by_id, words = {}, {}
    for sid, attn, tgt_pieces, src_pieces in it:
        by_id[sid] = sentence_links(attn, tgt_pieces, src_pieces, methods, threshold, marker)
        words[sid] = (len(set(word_ids(src_pieces, marker))), len(set(word_ids(tgt_pieces, marker))))
    n = len(by_id)
    if sorted(by_id) != list(range(n)):
        raise SystemExit(f"{data_bin} {subset}: sentence ids are not 0..{n - 1}")
    links = {m: [by_id[k][m] for k in range(n)] for m in methods}
    scores: dict[str, AlignmentScore] = {}
    if gold is not None:
        if len(gold) != n:
            raise SystemExit(f"{gold_name}: {len(gold)} lines but {data_bin} {subset} has {n} sentences")
        for k, g in enumerate(gold):
            bad = [(i, j) for i, j in g.possible if i >= words[k][0] or j >= words[k][1]]
            if bad:
                raise SystemExit(f"{gold_name}:{k + 1}: link {bad[0][0]}-{bad[0][1]} outside the sentence's "
                                 f"{words[k][0]} source and {words[k][1]} target words (pieces grouped by "
                                 f"{marker or 'token'}; wrong --word-marker, --one-based or --reverse-gold?)")
        scores = {m: score_alignments(links[m], gold) for m in methods}
    return AttentionAlignment(checkpoint, subset, resolved, head, n, links, scores)


def head_option(text: str) -> int | None:
    """--head: 'mean' (None: the mean over the layer's heads) or one head's index."""
    if text == "mean":
        return None
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r}: 'mean' or a head index")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m xlpos.evaluation.align_attention", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="fairseq data-bin holding the split (and its .xlpos files for XL models)")
    p.add_argument("--path", required=True, help="the checkpoint")
    p.add_argument("--gen-subset", default="test", help="split to force-decode (default test)")
    p.add_argument("--layer", type=int, default=-1, help="decoder layer, 0-based; negative counts from the last "
                                                         "(default -1, the last, as fairseq's alignment_layer)")
    p.add_argument("--head", type=head_option, default="mean",
                   help="'mean' over the layer's heads (default) or one head's index")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated: {', '.join(METHODS)}")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help=f"word weight for the threshold method (default {DEFAULT_THRESHOLD})")
    p.add_argument("--word-marker", default=WORD_MARKER,
                   help="piece prefix that starts a word (default sentencepiece's ▁); 'none': one word per token")
    p.add_argument("--gold", help="gold alignment file (source-target words, one line per sentence)")
    add_gold_options(p)
    p.add_argument("--out-prefix", help="write PREFIX.METHOD.align (Pharaoh i-j, 0-based) per method")
    p.add_argument("--json", help="write the settings and scores to this JSON file")
    p.add_argument("--overrides", default="{}", help="JSON of options replacing the checkpoint's (fairseq "
                                                     "arg_overrides), e.g. '{\"xl_positions\": \"monotone\"}'")
    p.add_argument("--max-tokens", type=int, default=4000)
    p.add_argument("--cpu", action="store_true", help="stay on the CPU even when a GPU is present")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise SystemExit(f"--methods {args.methods}: choose from {', '.join(METHODS)}")
    head = args.head
    try:
        overrides = json.loads(args.overrides)
    except json.JSONDecodeError as e:
        raise SystemExit(f"--overrides: not JSON ({e})")
    if not isinstance(overrides, dict):
        raise SystemExit("--overrides: expected a JSON object")
    if not Path(args.path).is_file():
        raise SystemExit(f"{args.path}: checkpoint not found")
    try:
        gold = read_gold(args.gold, **gold_options(args)) if args.gold else None
    except (ValueError, OSError) as e:
        raise SystemExit(str(e))
    marker = None if args.word_marker == "none" else args.word_marker
    t0 = time.perf_counter()
    result = align_attention(args.path, args.data, args.gen_subset, args.layer, head, methods, args.threshold,
                             marker, gold, overrides, args.max_tokens, args.cpu, args.gold or "gold")
    seconds = time.perf_counter() - t0
    what = "mean of the heads" if head is None else f"head {head}"
    print(f"{args.path}: force-decoded {result.sentences} {args.gen_subset} sentences of {args.data} in "
          f"{seconds:.1f} s; encoder-decoder attention of decoder layer {result.layer} ({what})")
    if args.out_prefix:
        from xlpos_prep.io import atomic_output
        Path(args.out_prefix).parent.mkdir(parents=True, exist_ok=True)
        for m in methods:
            with atomic_output(f"{args.out_prefix}.{m}.align") as f:
                f.writelines(format_links(links) + "\n" for links in result.links[m])
            print(f"wrote {args.out_prefix}.{m}.align")
    for m in methods:
        n_links = sum(len(x) for x in result.links[m])
        line = f"{m:<10} {n_links:>7} links"
        if m in result.scores:
            s = result.scores[m]
            line += f"  AER {s.aer:.4f}  precision {s.precision:.4f}  recall {s.recall:.4f}"
        print(line)
    if gold is not None:
        print(f"gold: {args.gold} ({sum(len(g.sure) for g in gold)} sure, {sum(len(g.possible) for g in gold)} "
              f"possible links)")
    if args.json:
        from xlpos_prep.io import atomic_output
        record = {"checkpoint": args.path, "data": args.data, "subset": args.gen_subset, "layer": result.layer,
                  "head": "mean" if head is None else head, "methods": methods, "threshold": args.threshold,
                  "word_marker": args.word_marker, "gold": args.gold, "gold_options": gold_options(args),
                  "overrides": overrides, "sentences": result.sentences, "seconds": round(seconds, 2),
                  "scores": {m: asdict(s) for m, s in result.scores.items()},
                  "links": {m: sum(len(x) for x in result.links[m]) for m in methods}}
        with atomic_output(args.json) as f:
            json.dump(record, f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
