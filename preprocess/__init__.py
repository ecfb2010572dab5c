"""The xlpos reordering pipeline: alignment, oracle BTG ranks, BTG reorderer, piece-level XL positions.

Nothing here imports fairseq or torch at module level, so the pipeline runs on machines without them.
"""
__version__ = "0.1.0"
