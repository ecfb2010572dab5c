"""xlpos fairseq plugin: `--user-dir xlpos` registers the task, models and the checkpoint-loading fix.

Importing the package (``--user-dir``, or ``import xlpos`` before ``TransformerModel.from_pretrained``) makes
fairseq's checkpoint loading work under torch >= 2.6 with ``weights_only=True`` and an allowlist
(:mod:`xlpos.checkpoint`), and registers the task ``translation_xlpos`` and the ``transformer_xlpos``
architectures.
"""
from . import checkpoint

checkpoint.install()

from . import data, models, tasks  # noqa: E402  (registration needs fairseq, after the loading fix)

__all__ = ["checkpoint", "data", "models", "tasks"]
