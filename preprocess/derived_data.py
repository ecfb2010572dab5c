"""Data-bins made from a prepared pipeline (xlpos_prep.pipeline.prepare) besides its own: the same tokens with XL
positions from the oracle ranks instead of the reorderer's orders (the oracle ablation of benchmarks/bleu.py), and
a further held-out test set put through the pipeline's reorderer, sentencepiece model and dictionaries. Each is one
step of the completion rule (pipeline.Steps), so a rerun skips it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from .pipeline import Layout, PrepareConfig, Steps, make_data_bin, prep_cmd, run
from .text import check_parallel


def oracle_data_bin(steps: Steps, cfg: PrepareConfig, layout: Layout, dest: str, xlpos: str,
                    splits: Sequence[str] = ("train", "valid")) -> float | None:
    """DEST: layout.data_bin's dictionaries and tokens of `splits`, linked, with each split's XL positions made from
    its oracle ranks (written to the `xlpos` template, {split}); the oracle must cover every line of those splits
    (PrepareConfig.full_oracle, all lines aligned). Its wall seconds (Steps.step)."""
    s, t = cfg.src, cfg.tgt
    spm_model = layout.spm_prefix + ".model"
    logs = Path(layout.logs)

    def make() -> None:
        tmp = dest + ".tmp"  # a killed run's is taken up where it stopped
        os.makedirs(tmp, exist_ok=True)
        for name in os.listdir(layout.data_bin):
            if name.startswith("dict.") or (name.split(".")[0] in splits and ".xlpos." not in name):
                link = os.path.join(tmp, name)
                if not os.path.exists(link):
                    os.symlink(os.path.realpath(os.path.join(layout.data_bin, name)), link)
        for split in splits:
            run(prep_cmd("positions", "--src", layout.path("tok", split, s), "--oracle", layout.path("oracle", split),
                         "--spm", spm_model, "--out", xlpos.format(split=split), "--workers", str(cfg.workers)),
                logs / "positions.log", verbose=cfg.verbose)
            run(prep_cmd("binarize", "--xlpos", xlpos.format(split=split), "--data-bin", tmp, "--split", split,
                         "--source-lang", s, "--target-lang", t, "--no-progress"),
                logs / "preprocess.log", verbose=cfg.verbose)
        os.replace(tmp, dest)

    return steps.step("data-bin-oracle", [dest], make, settings={"splits": list(splits)},
                      inputs=[layout.data_bin, spm_model, *(p for split in splits for p in (
                          layout.path("tok", split, s), layout.path("oracle", split)))])


def test_set_data_bin(steps: Steps, cfg: PrepareConfig, layout: Layout, name: str, src: str, tgt: str,
                      out_dir: str) -> float | None:
    """OUT_DIR/data-bin, subset test: the tokenized pair `src`, `tgt` reordered by the pipeline's reorderer
    (OUT_DIR/test.order), its pieces and XL positions made with the pipeline's sentencepiece model
    (OUT_DIR/pieces.*) and binarized with layout.data_bin's dictionaries, as the pipeline prepares its own test
    split. Its wall seconds (Steps.step)."""
    s, t = cfg.src, cfg.tgt
    spm_model = layout.spm_prefix + ".model"
    log_path = Path(layout.logs) / "extra.log"
    out = Path(out_dir)

    def make() -> None:
        check_parallel([src, tgt])
        run(prep_cmd("reorder", "--model", layout.reorderer, "--src", src, "--out", out / "test.order",
                     "--workers", str(cfg.workers)), log_path, verbose=cfg.verbose)
        run(prep_cmd("positions", "--src", src, "--order", out / "test.order", "--spm", spm_model,
                     "--out", out / "pieces.xlpos", "--pieces-out", out / f"pieces.{s}"), log_path, verbose=cfg.verbose)
        run(prep_cmd("spm-encode", "--model", spm_model, "--input", tgt, "--output", out / f"pieces.{t}"),
            log_path, verbose=cfg.verbose)
        make_data_bin(s, t, {"test": str(out / "pieces")}, str(out / "data-bin"), {"test": str(out / "pieces.xlpos")},
                      cfg.workers, log_path, dicts=layout.data_bin, verbose=cfg.verbose)

    return steps.step(f"extra {name}", [out / "data-bin"], make,
                      inputs=[src, tgt, layout.reorderer, spm_model, layout.data_bin])
