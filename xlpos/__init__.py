"""xlpos fairseq plugin: `--user-dir xlpos` registers the task, models and the checkpoint-loading fix.

Importing the package (``--user-dir``, or ``import xlpos`` / ``from xlpos import XLPosTransformerModel``) makes
fairseq's checkpoint loading work under torch >= 2.6 with ``weights_only=True`` and an allowlist
(:mod:`xlpos.checkpoint`), and registers the task ``translation_xlpos`` and the ``transformer_xlpos``
architectures. ``XLPosTransformerModel.from_pretrained(model_dir, checkpoint_file=..., data_name_or_path=...)``
returns an :class:`xlpos.hub.XLPosHubInterface` that translates raw text.
"""
from . import checkpoint

checkpoint.install()

from . import data, models, tasks  # noqa: E402  (registration needs fairseq, after the loading fix)
from . import interactive_input  # noqa: E402,F401  (fairseq-interactive: invalid UTF-8 never stops the loop)
from .hub import XLPosHubInterface, from_pretrained  # noqa: E402
from .models import XLPosTransformerModel  # noqa: E402

__all__ = ["checkpoint", "data", "models", "tasks", "XLPosHubInterface", "XLPosTransformerModel", "from_pretrained"]
