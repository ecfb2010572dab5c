"""A further held-out test set put through a prepared pipeline (xlpos_prep.pipeline.prepare): reordered by its
reorderer, cut into pieces with XL positions by its sentencepiece model, and binarized with its dictionaries, each
a step of the completion rule (pipeline.Steps), as the pipeline prepares its own test split. benchmarks/bleu.py
scores its models on such sets (--test-src/--test-ref).
"""
from __future__ import annotations

from pathlib import Path

from .pipeline import Layout, PrepareConfig, SplitPieces, Steps, make_data_bin, pieces, reorder


def test_set_data_bin(steps: Steps, cfg: PrepareConfig, layout: Layout, name: str, src: str, tgt: str,
                      out_dir: str) -> dict[str, float | None]:
    """OUT_DIR/data-bin, subset test, of the tokenized pair `src`, `tgt`, with its orders (OUT_DIR/test.order) and
    pieces (OUT_DIR/pieces.*) beside it; the wall seconds of its steps, by name ('... extra NAME')."""
    s, t = cfg.src, cfg.tgt
    out, logs = Path(out_dir), Path(layout.logs)
    files = SplitPieces(f"extra {name}", src, tgt, str(out / "test.order"), str(out / "pieces.xlpos"),
                        str(out / f"pieces.{s}"), str(out / f"pieces.{t}"))
    seconds = {f"reorder extra {name}": reorder(steps, layout.reorderer, src, files.order, f"reorder extra {name}",
                                                cfg.workers, 1, logs, cfg.verbose)}
    seconds.update(pieces(steps, cfg, files, layout.spm_prefix + ".model", logs))
    seconds[f"extra {name}"] = steps.step(f"extra {name}", [out / "data-bin"], lambda: make_data_bin(
        s, t, {"test": str(out / "pieces")}, str(out / "data-bin"), {"test": files.xlpos},
        logs / "extra.log", dicts=layout.data_bin, verbose=cfg.verbose),
        inputs=[files.src_pieces, files.tgt_pieces, files.xlpos, layout.data_bin])
    return seconds
