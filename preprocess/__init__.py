"""The xlpos reordering pipeline: alignment, oracle BTG ranks, BTG reorderer, piece-level XL positions.

Installed and imported as `xlpos_prep` (setup.py maps it onto this preprocess/ folder), so that it cannot clash
with a user's own top-level `preprocess` module.

Nothing here imports fairseq or torch at module level, so the pipeline runs on machines without them.
"""
__version__ = "0.1.0"
