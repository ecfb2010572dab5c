"""Evidence for the paper's claims: significance of score differences (``significance``, sacreBLEU's paired tests),
word alignments read from a model's encoder-decoder attention (``attention_alignment``, ``align_attention``) and
their quality against gold alignments (``aer``).

``significance``, ``aer`` and ``attention_alignment`` import neither fairseq nor torch themselves; only
``align_attention`` loads models. Imported through this package they still run ``xlpos/__init__``, which imports
fairseq (seconds of CPU): ``benchmarks/bleu.py`` loads them from their files instead (``evaluation_module``).
"""
