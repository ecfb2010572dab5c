"""xlpos: cross-lingual position representations for fairseq Transformer encoders."""
from setuptools import find_packages, setup

setup(
    name="xlpos",
    version="0.1.0",
    description="Self-attention with cross-lingual position representations (Ding et al., ACL 2020) for fairseq",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11,<3.13",
    packages=find_packages(include=["xlpos", "xlpos.*"]) + ["xlpos_prep"],
    # The fairseq-free preprocessing lives in the preprocess/ folder (the documented layout) but is installed and
    # imported as xlpos_prep, a name that cannot clash with a user's own `preprocess` module.
    package_dir={"xlpos_prep": "preprocess"},
    install_requires=[
        # A range, so that `pip install -e .` keeps the torch a GPU cluster built for its CUDA driver.
        # Upper bound: 2.13 is the newest release tested (CI and the test suite run torch 2.13.0, CPU build);
        # 2.14 is excluded until it has been tested. Lower bound: 2.6, where torch.load's default became
        # weights_only=True, which xlpos/checkpoint.py is written for (see README, "Installing on a GPU cluster",
        # for what was run on 2.6.0). On a CPU machine with no torch yet, install a CPU build first (PyTorch's
        # CPU-only wheel index, or a local CPU wheel): otherwise pip takes PyPI's default, a CUDA build of GBs.
        "torch>=2.6,<2.14",
        # cp311 wheel of fairseq 0.12: the official 0.12.2 neither installs with current pip nor imports on 3.11.
        "ve-fairseq==0.12.3",
        "hydra-core>=1.3,<1.4",
        "omegaconf>=2.3,<2.4",
        "numpy",
        "numba",
        "sentencepiece",
        "sacrebleu>=2,<3",
        # the t-test over seed pairs (xlpos_prep.significance); fairseq installs it already (for scikit-learn)
        "scipy",
        "sacremoses",
        "nltk",
        "tensorboard",
        "tqdm",
        "eflomal>=2,<3",
    ],
    extras_require={
        # The test suite runs every recipe step, Japanese and Chinese segmentation included; pytest-xdist runs it
        # on 2 processes (pytest.ini).
        "test": ["pytest", "pytest-timeout", "pytest-xdist>=3.2", "fugashi[unidic-lite]", "jieba"],
        # Japanese and Chinese word segmentation for recipes/wat17_ja_en.sh and recipes/wmt17_zh_en.sh; both
        # bundle their dictionaries, so they work offline once installed.
        "recipes": ["fugashi[unidic-lite]", "jieba"],
        # plots of benchmarks/plot_bleu.py and plot_scale.py (benchmarks/bleu.py --plot, scale.py --plot)
        "bench": ["matplotlib"],
    },
    entry_points={"console_scripts": [
        "xlpos-prep = xlpos_prep.cli:main",
        # The evidence kit (issue 12): paired significance tests (sacreBLEU's), AER of word alignments, and word
        # alignments from a trained model's encoder-decoder attention scored against a gold file.
        "xlpos-significance = xlpos_prep.significance:main",
        "xlpos-aer = xlpos.evaluation.aer:main",
        "xlpos-align-attention = xlpos.evaluation.align_attention:main",
    ]},
)
