"""Evidence for the paper's claims: significance of score differences (``significance``, sacreBLEU's paired tests),
word alignments read from a model's encoder-decoder attention (``attention_alignment``, ``align_attention``) and
their quality against gold alignments (``aer``).

``significance`` and ``aer`` import neither fairseq nor torch; only ``align_attention`` loads models.
"""
