"""Evidence for the paper's claims: word alignments read from a model's encoder-decoder attention
(``attention_alignment``, ``align_attention``), their quality against gold alignments (``aer``), and the
attention heatmap of one sentence (``attention_map``). The paired significance tests live in the fairseq-free
package (``xlpos_prep.significance``, command ``xlpos-significance``).

``aer`` and ``attention_alignment`` import neither fairseq nor torch themselves; only ``align_attention`` and
``attention_map`` load models. Imported through this package they still run ``xlpos/__init__``, which imports
fairseq (seconds of CPU): ``benchmarks/bleu.py`` loads ``aer`` from its file instead (``evaluation_module``).
"""
