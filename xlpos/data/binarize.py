"""The plugin's name for the ``.xlpos`` binarizer, which lives in the fairseq-free package
(:mod:`xlpos_prep.binarize`, the ``xlpos-prep binarize`` step): the plugin may import the pipeline, never the
other way round."""
from xlpos_prep.binarize import BinarizeSummary, binarize_xl_positions, parse_positions

__all__ = ["BinarizeSummary", "binarize_xl_positions", "parse_positions"]
