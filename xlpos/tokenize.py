"""Raw-text word tokenizers and detokenizers of fairseq-interactive and the hub: the ones the corpus was tokenized
with, which live in the fairseq-free package (xlpos_prep.text) so that `xlpos-prep tokenize` and inference share
one implementation. Kept as an import path for the task and for user code."""
from xlpos_prep.text import DETOKENIZERS, WORD_TOKENIZERS, Detokenizer, WordTokenizer, WordTokenizerSpec

__all__ = ["DETOKENIZERS", "WORD_TOKENIZERS", "Detokenizer", "WordTokenizer", "WordTokenizerSpec"]
