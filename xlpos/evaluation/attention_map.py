"""One sentence's encoder-decoder attention as a heatmap over words: where the decoder looks while it writes.

The model translates a raw sentence (beam search, as ``translate()``), then is run once more on its own best
translation (teacher-forced, so every target word's attention is the one that produced it) with fairseq's
``alignment_layer`` set, which returns the per-head attention of that decoder layer. The piece matrix becomes a
word matrix as for the alignment scores (:mod:`xlpos.evaluation.attention_alignment`: a source word's weight is the
sum over its pieces, a target word's row the mean over its pieces; EOS rows and columns are left out, so a row sums
to at most 1). Under each source word the picture gives its XL position.

    python -m xlpos.evaluation.attention_map checkpoints/xl-input --data data-bin \
        --sentence "a man saw the dog in the park ." --layer -1 --out attention.svg
    model.attention_map("a man saw the dog .", layer=0, head=1).save("attention.png")    # the hub; PNG: matplotlib
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

import numpy as np

from xlpos_prep.show import Picture, heatmap_picture, xl_of_order

from .align_attention import head_option, layer_attention, resolve_layer
from .attention_alignment import WORD_MARKER, word_attention, word_ids


@dataclass(frozen=True)
class AttentionMap:
    """The encoder-decoder attention of one decoder layer over the words of a sentence and its translation."""
    sentence: str
    translation: str
    source_words: list[str]
    target_words: list[str]
    weights: np.ndarray              # target words x source words, each row the mean of its pieces' rows
    layer: int                       # 0-based decoder layer
    head: int | None                 # None: mean over the layer's heads
    xl_positions: list[int] | None   # each source word's XL position (None: the model has no XL positions)

    def picture(self) -> Picture:
        what = "mean of the heads" if self.head is None else f"head {self.head}"
        return heatmap_picture(
            self.weights, self.target_words, self.source_words,
            title=f"encoder-decoder attention, decoder layer {self.layer} ({what})",
            col_notes=None if self.xl_positions is None else [str(x) for x in self.xl_positions],
            col_axis="source words" + ("" if self.xl_positions is None else " (XL position below)"),
            row_axis="rows: the words of the model's translation")

    def svg(self) -> str:
        return self.picture().svg()

    def save(self, path: str) -> None:
        """Write the heatmap: SVG, or PNG when `path` ends in .png (needs matplotlib)."""
        self.picture().save(path)


def _words(pieces: list[str], marker: str | None) -> list[str]:
    """The words the pieces spell (pieces joined at the word-start marker)."""
    words: list[str] = []
    for k, word in zip(word_ids(pieces, marker), pieces):
        if k == len(words):
            words.append("")
        words[k] += word.replace(marker, "") if marker else word
    return words


def attention_map(hub, sentence: str, layer: int = -1, head: int | None = None, beam: int = 5,
                  **decode) -> AttentionMap:
    """The :class:`AttentionMap` of a raw sentence under a hub model (:class:`xlpos.hub.XLPosHubInterface`)."""
    import torch

    model = hub.models[0]
    resolved = resolve_layer(model, layer, head)
    tokens = hub.encode(sentence)
    best = hub.generate(tokens, beam=beam, **decode)[0]["tokens"]
    src_dict, tgt_dict = hub.task.source_dictionary, hub.task.target_dictionary
    [batch] = list(hub._build_batches([tokens], False))  # the task's inference batch: XL positions included
    batch = {k: (v.to(hub.device) if torch.is_tensor(v) else v) for k, v in batch["net_input"].items()}
    prev = torch.cat([best.new_tensor([tgt_dict.eos()]), best[:-1]]).unsqueeze(0).to(hub.device)
    was_training = model.training
    model.eval()
    try:
        with layer_attention(model, resolved) as captured, torch.no_grad():
            model(**batch, prev_output_tokens=prev, alignment_layer=resolved)
    finally:
        model.train(was_training)
    attn = captured["attn"].float()
    attn = (attn.mean(dim=0) if head is None else attn[head])[0]  # target x source pieces, EOS included
    src_pieces = [src_dict[int(t)] for t in tokens[:-1]]
    tgt_pieces = [tgt_dict[int(t)] for t in best[:-1]]
    marker = WORD_MARKER if any(p.startswith(WORD_MARKER) for p in src_pieces + tgt_pieces) else None
    src_words, tgt_words = word_ids(src_pieces, marker), word_ids(tgt_pieces, marker)
    weights = word_attention(attn[:-1, :-1].cpu().numpy(), tgt_words, src_words)
    source_words = _words(src_pieces, marker)
    xl_positions = None
    if hasattr(hub.task, "xl_pipeline") and hub.task.xl_pipeline.can_encode_text:
        info = hub.xl_positions(sentence)
        if len(info.words) == len(source_words):  # the reorderer's words are the ones the pieces spell
            source_words, xl_positions = list(info.words), xl_of_order(info.order)
    return AttentionMap(sentence, hub.decode(best), source_words, _words(tgt_pieces, marker), weights, resolved,
                        head, xl_positions)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m xlpos.evaluation.attention_map", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir", help="directory of the checkpoint")
    p.add_argument("--checkpoint", default="checkpoint_best.pt", help="file in MODEL_DIR (default checkpoint_best.pt)")
    p.add_argument("--data", required=True, help="the data-bin holding the dictionaries")
    p.add_argument("--sentence", required=True, help="the raw source sentence")
    p.add_argument("--out", required=True, help="the heatmap: .svg, or .png when matplotlib is installed")
    p.add_argument("--layer", type=int, default=-1, help="decoder layer, 0-based; negative counts from the last "
                                                         "(default -1)")
    p.add_argument("--head", type=head_option, default="mean",
                   help="'mean' over the layer's heads (default) or one head's index")
    p.add_argument("--beam", type=int, default=5, help="beam size of the translation (default 5)")
    p.add_argument("--verbose", action="store_true", help="show fairseq's INFO lines")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from xlpos import XLPosTransformerModel

    # paths relative to the current directory (fairseq would take a --data starting with "." as relative to the model)
    hub = XLPosTransformerModel.from_pretrained(os.path.abspath(args.model_dir), checkpoint_file=args.checkpoint,
                                                data_name_or_path=os.path.abspath(args.data), verbose=args.verbose)
    try:
        result = hub.attention_map(args.sentence, layer=args.layer, head=args.head, beam=args.beam)
        result.save(args.out)
    except ValueError as e:
        raise SystemExit(str(e))
    print(f"{args.sentence} => {result.translation}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
