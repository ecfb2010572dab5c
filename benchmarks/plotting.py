"""What every benchmark plot needs from matplotlib: a file-only backend, and a PNG that appears whole or not at all."""
from __future__ import annotations

import logging
from pathlib import Path


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display needed), its font-search debug lines silenced
    (they flood a log whose root level is DEBUG)."""
    import matplotlib
    matplotlib.use("Agg")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, out: Path, dpi: int) -> None:
    """Write fig to out through a temporary file in its folder, then close it: a cut run leaves no half PNG."""
    plt = pyplot()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.stem + ".tmp" + out.suffix)  # same suffix: matplotlib picks the format from it
    fig.savefig(tmp, dpi=dpi)
    plt.close(fig)
    tmp.replace(out)
