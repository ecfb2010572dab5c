"""Task ``translation_xlpos``: fairseq's translation task whose batches carry cross-lingual source positions.

Every batch gets ``net_input["src_xl_positions"]`` (see :mod:`xlpos.data.xl_positions_dataset` for the layout):

* training / fairseq-generate: from ``{split}.{S}-{T}.xlpos.{bin,idx}`` in the data-bin (``--xl-positions file``,
  the default; make them with ``xlpos-prep binarize``), the identity (``--xl-positions monotone``), or the
  reorderer run on the binarized source sentences (``--xl-positions reorder``: no ``.xlpos`` files needed);
* fairseq-interactive and hub ``translate()``: raw text -> words (``--xl-word-tokenizer``) -> reorderer ->
  sentencepiece pieces -> XL positions, on the fly (:mod:`xlpos.tasks.xl_inference`), unless
  ``--xl-positions monotone``.

``--xl-contrast {monotone,reversed,random,local-shuffle}`` then replaces those positions by word-level permutations
(:mod:`xlpos.data.contrastive_positions`) in every split the task loads (``fairseq-train --xl-contrast random``
trains the control system) and in raw input, deterministic per ``--xl-contrast-seed`` and sentence index in its split
(raw input: input index). fairseq-generate and -interactive take it from their command line (default ``none``); the
hub, like every task option, from the checkpoint's training configuration unless ``xl_contrast=...`` is given.

Self-contained checkpoints: the reorderer (``--xl-reorderer``), the sentencepiece model (``--xl-spm``) and the
word tokenizer settings given to fairseq-train are stored in every checkpoint (``task_state``, fairseq's place for
task state; the models as bytes, a few MB), so ``fairseq-interactive DATA --user-dir xlpos --task
translation_xlpos --path model/checkpoint_best.pt`` and ``XLPosTransformerModel.from_pretrained(model_dir)`` need
nothing else. Options given at inference time override what the checkpoint carries.

Relative model paths: an absolute path is used as given; a relative one is looked up in the model directory (hub
``from_pretrained``: its first argument), then the data directory (first path of DATA), then the current directory.
"""
# No `from __future__ import annotations` here: fairseq reads the config dataclass's field types at runtime.
import collections
import itertools
import logging
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from fairseq import utils
from fairseq.data import LanguagePairDataset
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask, load_langpair_dataset

from xlpos.data.contrastive_positions import CONTRASTS, RAW_INPUT, PositionNoise, XLContrast
from xlpos.data.length_buckets import apply_length_buckets
from xlpos.data.xl_positions_dataset import (
    XL_POSITIONS_KEY,
    LanguagePairWithXLPositionsDataset,
    check_xl_positions_match_source,
    concat_like_source,
    load_source_sizes,
    load_xl_positions,
    model_positions,
    place_like_tokens,
    source_tokens_prefix,
    xl_positions_prefix,
)
from xlpos.tasks.xl_inference import (
    ModelFile,
    SentenceXLPositions,
    SentencepieceAdapter,
    WordTokenizerAdapter,
    XLPositionPipeline,
    load_reorderer,
    load_spm,
    model_file_from_tensor,
    model_file_to_tensor,
    read_reorderer_file,
    read_spm_file,
    resolve_model_path,
    valid_text,
)
from xlpos.tokenize import DETOKENIZERS, WORD_TOKENIZERS, Detokenizer, WordTokenizer, WordTokenizerSpec

logger = logging.getLogger(__name__)

XL_POSITION_SOURCES = ChoiceEnum(["file", "monotone", "reorder"])
XL_CONTRAST_CHOICES = ChoiceEnum(list(CONTRASTS))
WORD_TOKENIZER_CHOICES = ChoiceEnum(list(WORD_TOKENIZERS))
DETOKENIZER_CHOICES = ChoiceEnum(list(DETOKENIZERS))

STATE_KEY = "xlpos_inference"  # our entry in the checkpoint's task_state
STATE_VERSION = 1
REORDERER, SPM = "reorderer", "sentencepiece"
_SETTINGS = ("word_tokenizer", "tokenizer_lang", "normalize", "lowercase", "detokenizer")
AGREEMENT_SAMPLE = 200  # sentences of a split on which file positions are compared with the reorderer's
AGREEMENT_WARN_BELOW = 0.9
RAW_INPUT_KEYS_KEPT = 65536  # raw inputs whose input index is remembered by token ids (--xl-contrast)
RAW_UNKNOWN = 2  # random stream of token ids the task did not encode itself: keyed by their content


@dataclass
class TranslationXLPosConfig(TranslationConfig):
    xl_positions: XL_POSITION_SOURCES = field(
        default="file",
        metadata={"help": "where source XL positions come from: 'file' reads {split}.{src}-{tgt}.xlpos.{bin,idx} "
                          "from the data directory (made by `xlpos-prep binarize`) and, for raw input "
                          "(fairseq-interactive, hub), runs the reorderer; 'reorder' runs the reorderer on the "
                          "binarized source sentences of the data-bin splits too (no .xlpos files needed, e.g. "
                          "fairseq-generate on a new test set); 'monotone' uses the absolute positions everywhere "
                          "(no reordering; for baselines and ablations)"},
    )
    xl_reorderer: Optional[str] = field(
        default=None,
        metadata={"help": "reorderer model (`xlpos-prep train-reorderer`) for XL positions of raw input. Given to "
                          "fairseq-train, it is stored in every checkpoint, so inference needs nothing else; given "
                          "at inference, it replaces the checkpoint's. Relative paths: model dir (hub), data dir, "
                          "then the current directory"},
    )
    xl_spm: Optional[str] = field(
        default=None,
        metadata={"help": "sentencepiece model the source pieces were made with (`xlpos-prep positions --spm`); "
                          "stored in checkpoints like --xl-reorderer. Not needed for a word-level vocabulary"},
    )
    xl_word_tokenizer: Optional[WORD_TOKENIZER_CHOICES] = field(
        default=None,
        metadata={"help": "how raw input is split into the words the reorderer and sentencepiece were trained on, "
                          "as the training corpus was tokenized (xlpos-prep tokenize): none (input is "
                          "already tokenized), moses (sacremoses), ja (fugashi + unidic-lite), zh (jieba); stored in "
                          "checkpoints; default: the checkpoint's, else none"},
    )
    xl_tokenizer_lang: Optional[str] = field(
        default=None,
        metadata={"help": "language code for --xl-word-tokenizer moses; default: the checkpoint's, else the "
                          "source language"},
    )
    xl_normalize: Optional[bool] = field(
        default=None,
        metadata={"help": "normalize raw input before word tokenization (moses: punctuation normalization; "
                          "ja/zh: NFKC), as `xlpos-prep tokenize --normalize`; stored in checkpoints"},
    )
    xl_lowercase: Optional[bool] = field(
        default=None,
        metadata={"help": "lowercase the words of raw input (for corpora trained lowercased); stored in checkpoints"},
    )
    xl_detokenizer: Optional[DETOKENIZER_CHOICES] = field(
        default=None,
        metadata={"help": "how target words are joined into text in hub translate() and the D- lines of "
                          "fairseq-interactive: none (space-separated words), moses, ja, zh (no spaces); stored "
                          "in checkpoints; default: the checkpoint's, else none"},
    )
    xl_contrast: XL_CONTRAST_CHOICES = field(
        default="none",
        metadata={"help": "replace the XL positions of every split and raw input by a word permutation, to test "
                          "whether a model uses them or to train a control (random): none (as loaded), monotone, "
                          "reversed, random, local-shuffle (within --xl-contrast-window words); docs/evidence.md"},
    )
    xl_contrast_window: int = field(
        default=3,
        metadata={"help": "window K of --xl-contrast local-shuffle (at least 2): words move only within "
                          "consecutive groups of K words of the loaded XL order"},
    )
    xl_position_noise: float = field(
        default=0.0,
        metadata={"help": "training only: in every epoch, perturb the XL word order of each sentence of the "
                          "training split (--train-subset) anew: words sorted by their XL rank + U(0, K), so "
                          "a word moves at most K places (K = 2: about one adjacent pair in eight swapped); the "
                          "model then trains on positions about as uncertain as the reorderer's at test time. "
                          "0: off"},
    )
    xl_contrast_seed: int = field(
        default=1,
        metadata={"help": "seed of --xl-contrast random / local-shuffle: a sentence's permutation depends only on "
                          "this seed and the sentence's index in its split (raw input: its input index, as "
                          "fairseq-interactive numbers it), never on batching, epoch or --seed"},
    )


@register_task("translation_xlpos", dataclass=TranslationXLPosConfig)
class TranslationXLPosTask(TranslationTask):
    """Translation with cross-lingual position representations (Ding et al., 2020).

    Compatible with fairseq-train, fairseq-generate, fairseq-interactive and the hub interface; use it with an
    encoder that reads ``net_input["src_xl_positions"]`` (``--arch transformer_xlpos``).
    """

    cfg: TranslationXLPosConfig

    def __init__(self, cfg: TranslationXLPosConfig, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self._warned_monotone_inference = False
        # True when cfg is the training configuration read from a checkpoint (hub from_pretrained): its model
        # paths are then where the files were at training time, and the copies the checkpoint carries win.
        self._cfg_from_checkpoint = False
        self._configured_files: Dict[str, Optional[ModelFile]] = {}  # from cfg paths, read on first use
        self._override_files: Dict[str, ModelFile] = {}  # set_xl_inference_models (hub keyword arguments)
        self._checkpoint_state: Optional[Dict[str, Any]] = None  # our task_state entry of the loaded checkpoint
        self._checkpoint_files: Dict[str, ModelFile] = {}  # the model files that entry carries
        self._state_tensors: Dict[str, Tuple[str, torch.Tensor]] = {}  # kind -> (sha256, tensor) for state_dict
        self._pipeline: Optional[XLPositionPipeline] = None
        self._model_max_source_positions: Optional[int] = None
        self._external_tokenizer = None  # a fairseq --tokenizer the user chose (interactive / hub)
        self._external_bpe = False  # the user chose a fairseq --bpe: raw text is encoded by it, not by us
        self._inputs_seen = 0  # raw inputs encoded so far: fairseq-interactive's S-<id> numbering
        self._word_tokenizer: Optional[WordTokenizer] = None
        # Configurations saved before --xl-contrast existed (hub from_pretrained of an older checkpoint) lack it.
        self.xl_contrast = XLContrast(str(getattr(cfg, "xl_contrast", "none")),
                                      int(getattr(cfg, "xl_contrast_window", 3)),
                                      int(getattr(cfg, "xl_contrast_seed", 1)), src_dict)
        # token ids of a raw input -> its input index, so the batches fairseq-interactive rebuilds from token ids
        # alone get the same contrastive permutation as the dataset gave them (see _raw_input_key).
        self._raw_input_keys: "collections.OrderedDict[Tuple[int, ...], int]" = collections.OrderedDict()

    @classmethod
    def setup_task(cls, cfg: TranslationXLPosConfig, **kwargs):
        task = super().setup_task(cfg, **kwargs)
        task._cfg_from_checkpoint = bool(kwargs.get("from_checkpoint", False))
        task._upsample_primary()  # a bad value is an error now, not when a later epoch combines shards
        if task.xl_contrast.active:
            logger.info("translation_xlpos: %s: contrastive XL positions for every split and raw input",
                        task.xl_contrast.describe())
        if not task._cfg_from_checkpoint:
            # Paths typed on the command line: a missing or corrupt file is an error now, not after training.
            for kind in (REORDERER, SPM):
                task._configured_file(kind)
        return task

    # ---- models and settings for raw input ------------------------------------------------------------------
    def _search_dirs(self) -> List[str]:
        return utils.split_paths(self.cfg.data)[:1] if self.cfg.data else []

    def _configured_file(self, kind: str) -> Optional[ModelFile]:
        if kind not in self._configured_files:
            path = self.cfg.xl_reorderer if kind == REORDERER else self.cfg.xl_spm
            option = "--xl-reorderer" if kind == REORDERER else "--xl-spm"
            model = None
            if path:
                try:
                    resolved = resolve_model_path(path, self._search_dirs(), option)
                    model = read_reorderer_file(resolved) if kind == REORDERER else read_spm_file(resolved)
                except (OSError, ValueError) as e:
                    if not self._cfg_from_checkpoint:
                        raise
                    # A training-time path that is gone: only a problem when the checkpoint carries no copy.
                    logger.warning("translation_xlpos: %s from the training configuration is not usable (%s)",
                                   kind, e)
            self._configured_files[kind] = model
        return self._configured_files[kind]

    def _checkpoint_file(self, kind: str) -> Optional[ModelFile]:
        return self._checkpoint_files.get(kind)

    def xl_model_file(self, kind: str) -> Optional[ModelFile]:
        """The reorderer or sentencepiece model in use: given at inference > carried by the checkpoint >
        configured path (for fairseq-train, -generate and -interactive the configured path is the command
        line's, so it comes first)."""
        if kind in self._override_files:
            return self._override_files[kind]
        if self._cfg_from_checkpoint:
            return self._checkpoint_file(kind) or self._configured_file(kind)
        return self._configured_file(kind) or self._checkpoint_file(kind)

    def xl_setting(self, name: str):
        """A word tokenizer setting: the command line / hub keyword > the checkpoint's > the default."""
        value = getattr(self.cfg, "xl_" + name, None)
        if value is None:
            value = (self._checkpoint_state or {}).get(name)
        if value is None:
            value = {"word_tokenizer": "none", "detokenizer": "none", "normalize": False, "lowercase": False,
                     "tokenizer_lang": self.cfg.source_lang or "en"}[name]
        return value if isinstance(value, bool) else str(value)

    def word_tokenizer_spec(self) -> WordTokenizerSpec:
        return WordTokenizerSpec(kind=self.xl_setting("word_tokenizer"), lang=self.xl_setting("tokenizer_lang"),
                                 normalize=bool(self.xl_setting("normalize")),
                                 lowercase=bool(self.xl_setting("lowercase")))

    def set_xl_inference_models(self, reorderer: Optional[str] = None, spm: Optional[str] = None,
                                search_dirs: Sequence[str] = ()) -> None:
        """Use these model files for raw input instead of the checkpoint's (relative paths: `search_dirs`, the
        data directory, then the current directory)."""
        dirs = [*search_dirs, *self._search_dirs()]
        if reorderer is not None:
            self._override_files[REORDERER] = read_reorderer_file(resolve_model_path(reorderer, dirs, "xl_reorderer"))
        if spm is not None:
            self._override_files[SPM] = read_spm_file(resolve_model_path(spm, dirs, "xl_spm"))
        self._pipeline = None

    @property
    def xl_pipeline(self) -> XLPositionPipeline:
        """Raw text / token ids -> XL positions, built on first use from the models and settings in effect."""
        if self._pipeline is None:
            reorderer_file = None if self.cfg.xl_positions == "monotone" else self.xl_model_file(REORDERER)
            spm_file = self.xl_model_file(SPM)
            spec = self.word_tokenizer_spec()
            self._pipeline = XLPositionPipeline(
                self.source_dictionary,
                load_reorderer(reorderer_file) if reorderer_file is not None else None,
                load_spm(spm_file) if spm_file is not None else None,
                self._tokenize_words,
                self._max_source_tokens(),
            )
            logger.info("translation_xlpos: XL positions for raw input: %s; pieces: %s; words: %s",
                        reorderer_file.describe() if reorderer_file else
                        ("monotone (--xl-positions monotone)" if self.cfg.xl_positions == "monotone" else
                         "monotone (no reorderer)"),
                        spm_file.describe() if spm_file else
                        ("sentencepiece pieces, model unknown" if self._pipeline.uses_pieces else "whole words"),
                        spec.describe())
        return self._pipeline

    def _tokenize_words(self, line: str) -> List[str]:
        return self.word_tokenizer()(line)

    def word_tokenizer(self) -> WordTokenizer:
        """The word tokenizer in effect, built on first use (ja/zh import optional packages)."""
        spec = self.word_tokenizer_spec()
        if self._word_tokenizer is None or self._word_tokenizer.spec != spec:
            self._word_tokenizer = WordTokenizer(spec)
        return self._word_tokenizer

    def _max_source_tokens(self) -> Optional[int]:
        limits = [n for n in (self.cfg.max_source_positions, self._model_max_source_positions) if n]
        return min(limits) if limits else None

    # ---- checkpoints ----------------------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """fairseq's task state plus the reorderer, sentencepiece model and tokenizer settings in effect."""
        state = dict(super().state_dict())
        entry: Dict[str, Any] = {"version": STATE_VERSION}
        for name in _SETTINGS:
            entry[name] = self.xl_setting(name)
        for kind in (REORDERER, SPM):
            model = self.xl_model_file(kind)
            if model is None:
                continue
            cached = self._state_tensors.get(kind)
            if cached is None or cached[0] != model.sha256:
                cached = (model.sha256, model_file_to_tensor(model))
                self._state_tensors[kind] = cached
            entry[kind] = cached[1]
            entry[kind + "_path"] = model.origin
            entry[kind + "_sha256"] = model.sha256
        state[STATE_KEY] = entry
        return state

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        entry = state_dict.pop(STATE_KEY, None)
        super().load_state_dict(state_dict)
        if entry is None:
            return
        if int(entry.get("version", 0)) > STATE_VERSION:
            raise ValueError(f"this checkpoint's xlpos inference state has version {entry.get('version')}; this "
                             f"xlpos reads up to version {STATE_VERSION}: upgrade xlpos")
        previous = self._checkpoint_state
        if previous is not None:  # an ensemble: every member is loaded in turn, the last one's state stays
            for kind in (REORDERER, SPM):
                if previous.get(kind + "_sha256") != entry.get(kind + "_sha256"):
                    logger.warning("translation_xlpos: the ensemble's checkpoints carry different %s models; "
                                   "using the last one's", kind)
        self._checkpoint_state = entry
        self._checkpoint_files = {
            kind: model_file_from_tensor(kind, entry[kind], f"the checkpoint (trained with {entry.get(kind + '_path')})")
            for kind in (REORDERER, SPM) if entry.get(kind) is not None}
        self._pipeline = None

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        max_positions = model.max_positions()
        source_max = max_positions[0] if isinstance(max_positions, (tuple, list)) else max_positions
        if source_max:
            self._model_max_source_positions = min(int(source_max), self._model_max_source_positions or int(source_max))
        if self._pipeline is not None:
            self._pipeline.max_source_tokens = self._max_source_tokens()
        if not from_checkpoint and self.cfg.xl_positions != "monotone" and self.xl_model_file(REORDERER) is None:
            logger.warning("translation_xlpos: no --xl-reorderer: checkpoints will not carry a reorderer, so "
                           "fairseq-interactive and the hub will need --xl-reorderer (and --xl-spm) to reorder "
                           "raw input, or use monotone XL positions")
        return model

    # ---- datasets from the data-bin -------------------------------------------------------------------------
    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs) -> None:
        pair = self._load_language_pair(split, epoch, combine)
        if self.xl_contrast.ignores_loaded:  # the positions of the data-bin would be thrown away: not read
            xl, name = None, f"XL positions of split {split} ({self.xl_contrast.describe()})"
        elif self.cfg.xl_positions == "monotone":
            xl, name = None, "monotone XL positions"
        elif self.cfg.xl_positions == "reorder":
            xl, name = self._reorder_split(split, pair), f"reorderer XL positions of split {split}"
        else:
            xl, name = self._load_split_xl_positions(split, epoch, combine)
            self._report_agreement_with_reorderer(split, pair, xl, name)
        noise = float(getattr(self.cfg, "xl_position_noise", 0.0))  # configurations saved before it lack it
        self.datasets[split] = LanguagePairWithXLPositionsDataset(
            pair, xl, name=name, truncate_source=self.cfg.truncate_source, contrast=self.xl_contrast,
            noise=PositionNoise(noise, self.src_dict) if noise and split == self.cfg.train_subset else None)

    def _upsample_primary(self) -> int:
        """Copies of the first shard (``{split}``) when split shards (``{split}1``, ...) are combined. fairseq's
        default, -1, means "not set" but reaches ConcatDataset as a ratio and crashes fairseq 0.12 (vanilla
        translation too: "negative dimensions are not allowed"); here it means 1."""
        value = int(self.cfg.upsample_primary)
        if value == -1:
            return 1
        if value < 1:
            raise ValueError(f"--upsample-primary {value}: must be a positive number of copies of the first shard "
                             "(-1, the default, means 1)")
        return value

    def _load_language_pair(self, split: str, epoch: int, combine: bool) -> LanguagePairDataset:
        """The dataset TranslationTask.load_dataset builds, with what fairseq 0.12 cannot do itself: split shards
        with the default --upsample-primary (see _upsample_primary) and --num-batch-buckets under numpy 2
        (xlpos.data.length_buckets)."""
        pair = load_langpair_dataset(
            self._split_data_path(split, epoch), split, self.cfg.source_lang, self.src_dict, self.cfg.target_lang,
            self.tgt_dict, combine=combine, dataset_impl=self.cfg.dataset_impl,
            upsample_primary=self._upsample_primary(), left_pad_source=self.cfg.left_pad_source,
            left_pad_target=self.cfg.left_pad_target, max_source_positions=self.cfg.max_source_positions,
            max_target_positions=self.cfg.max_target_positions, load_alignments=self.cfg.load_alignments,
            truncate_source=self.cfg.truncate_source, num_buckets=0, shuffle=(split != "test"),
            pad_to_multiple=self.cfg.required_seq_len_multiple)
        if self.cfg.num_batch_buckets > 0:
            apply_length_buckets(pair, self.cfg.num_batch_buckets)
        return pair

    def _reorder_split(self, split: str, pair: LanguagePairDataset) -> List[torch.Tensor]:
        pipeline = self.xl_pipeline
        if pipeline.reorderer is None:
            raise ValueError("--xl-positions reorder needs a reorderer: give --xl-reorderer PATH (and --xl-spm "
                             "for a sentencepiece vocabulary), or a checkpoint trained with them")
        logger.info("translation_xlpos: reordering the %d source sentences of split %s", len(pair.src), split)
        return pipeline.positions_for_tokens([pair.src[i] for i in range(len(pair.src))])

    def _report_agreement_with_reorderer(self, split: str, pair: LanguagePairDataset, xl, name: str) -> None:
        """When a reorderer is in use, compare it with the file on a sample: raw input will get the reorderer's
        positions, so a file made with another reorderer (or oracle positions) means a train/test mismatch."""
        if self.xl_model_file(REORDERER) is None:
            return
        pipeline = self.xl_pipeline
        n = min(AGREEMENT_SAMPLE, len(pair.src))
        if n == 0 or pipeline.reorderer is None:
            return
        # The first n sentences in corpus order (not the shortest, which would flatter the reorderer); sentences
        # cut by --truncate-source have fewer tokens than positions and are left out.
        predicted = pipeline.positions_for_tokens([pair.src[i] for i in range(n)])
        compared = [(p, xl[i].long()) for i, p in enumerate(predicted) if p.numel() == xl[i].numel()]
        if not compared:
            return
        same = sum(torch.equal(p, q) for p, q in compared)
        n, rate = len(compared), same / len(compared)
        message = (f"translation_xlpos: the reorderer reproduces the XL positions of {same}/{n} sentences of "
                   f"{name}")
        if rate < AGREEMENT_WARN_BELOW:
            logger.warning("%s: the file was not made with this reorderer and sentencepiece model (or holds oracle "
                           "positions), so raw input at inference will see differently made positions", message)
        else:
            logger.info(message)

    def _split_data_path(self, split: str, epoch: int) -> str:
        # TranslationTask.load_dataset's choice: one data-bin of DATA (data-bin1:data-bin2:...) per epoch,
        # round-robin, for the training split; the first one for the others.
        paths = utils.split_paths(self.cfg.data)
        if split != self.cfg.train_subset:
            paths = paths[:1]
        return paths[(epoch - 1) % len(paths)]

    def _load_split_xl_positions(self, split: str, epoch: int, combine: bool):
        """XL positions of every shard (split, split1, split2, ...) that load_langpair_dataset reads, combined the
        same way, each checked against its source shard's sentence lengths."""
        data_path = self._split_data_path(split, epoch)
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        parts = []
        for k in itertools.count():
            split_k = split + (str(k) if k > 0 else "")
            source_prefix = source_tokens_prefix(data_path, split_k, src, tgt)
            if source_prefix is None:
                if k == 0:  # super().load_dataset found it with the configured --dataset-impl; we cannot
                    raise FileNotFoundError(f"binarized source of split '{split}' not found in {data_path}")
                break
            try:
                xl = load_xl_positions(data_path, split_k, src, tgt)
            except FileNotFoundError as e:
                if self.xl_model_file(REORDERER) is not None:
                    raise FileNotFoundError(f"{e}; or --xl-positions reorder to compute them with the reorderer "
                                            "in use") from None
                raise
            check_xl_positions_match_source(
                xl.sizes, load_source_sizes(source_prefix, self.src_dict, self.cfg.dataset_impl),
                xl_positions_prefix(data_path, split_k, src, tgt) + ".bin", source_prefix + ".bin")
            parts.append(xl)
            if not combine:
                break
        return concat_like_source(parts, self._upsample_primary()), xl_positions_prefix(data_path, split, src, tgt)

    # ---- raw text: fairseq-interactive and hub ----------------------------------------------------------------
    def build_tokenizer(self, args):
        """A --tokenizer the user chose, else the word tokenizer + target detokenizer in effect."""
        external = super().build_tokenizer(args)
        self._external_tokenizer = external
        if external is not None:
            return external
        detokenizer = Detokenizer(self.xl_setting("detokenizer"), lang=self.cfg.target_lang or "en")
        # Built now, so a missing optional package (fugashi, jieba) stops at startup, not at the first line.
        return WordTokenizerAdapter(self.word_tokenizer(), detokenizer)

    def build_bpe(self, args):
        """A --bpe the user chose, else the sentencepiece model in effect (None for a word-level vocabulary)."""
        external = super().build_bpe(args)
        self._external_bpe = external is not None
        if external is not None:
            return external
        sp = self.xl_pipeline.sp
        return SentencepieceAdapter(sp) if sp is not None else None

    def _words_of_line(self, line: str) -> List[str]:
        if self._external_tokenizer is not None:
            return self._external_tokenizer.encode(line).split()
        return self.word_tokenizer()(line)

    def analyze_lines(self, lines: Sequence[str]) -> List[SentenceXLPositions]:
        """Raw lines -> words, predicted order, pieces, XL positions and token ids, as translation uses them."""
        pipeline = self.xl_pipeline
        infos = pipeline.analyze_lines(lines, self._words_of_line, first_index=self._inputs_seen)
        self._inputs_seen += len(lines)
        return infos

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        """Raw lines -> token ids. With our word tokenizer and sentencepiece model the XL positions are computed
        from the words here (and found again by token ids in build_dataset_for_inference / inference_step);
        with a --bpe of the user's, fairseq encodes and the positions come from the decoded pieces."""
        pipeline = self.xl_pipeline
        first_index = self._inputs_seen
        if not self._external_bpe and pipeline.can_encode_text:
            tokens = [torch.tensor(info.token_ids, dtype=torch.long) for info in self.analyze_lines(lines)]
        else:
            lines = [valid_text(line)[0] for line in lines]
            tokens, _ = super().get_interactive_tokens_and_lengths(lines, encode_fn)
            tokens = [pipeline.truncate_tokens(t, self._inputs_seen + k) for k, t in enumerate(tokens)]
            self._inputs_seen += len(lines)
        if self.xl_contrast.active:
            self._remember_raw_inputs(tokens, first_index)
        return tokens, [t.numel() for t in tokens]

    # ---- contrastive positions of raw input -------------------------------------------------------------------
    def _remember_raw_inputs(self, tokens: Sequence[torch.Tensor], first_index: int) -> None:
        for k, t in enumerate(tokens):
            key = tuple(t.tolist())
            self._raw_input_keys[key] = first_index + k  # identical lines: the latest index wins
            self._raw_input_keys.move_to_end(key)
        while len(self._raw_input_keys) > max(RAW_INPUT_KEYS_KEPT, len(tokens)):
            self._raw_input_keys.popitem(last=False)

    def _raw_input_key(self, ids: Tuple[int, ...]) -> Tuple[int, int]:
        """(random stream, key) of a raw input: its input index when this task encoded it (fairseq-interactive's
        S-<id>; the hub: the order the hub encoded sentences in), else its content (token ids given directly)."""
        index = self._raw_input_keys.get(ids)
        if index is not None:
            return RAW_INPUT, index
        return RAW_UNKNOWN, zlib.crc32(torch.tensor(ids, dtype=torch.int64).numpy().tobytes())

    def raw_input_xl_positions(self, src_tokens: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """Raw XL positions (EOS excluded) of inference input: :meth:`xl_positions_for_inference`, then
        ``--xl-contrast``. Inputs are CPU token-id sentences ending with EOS (pads ignored)."""
        contrast = self.xl_contrast
        if not contrast.active:
            return self.xl_positions_for_inference(src_tokens)
        pad = self.source_dictionary.pad()
        sentences = [t[t.ne(pad)] for t in src_tokens]
        loaded = ([None] * len(sentences) if contrast.ignores_loaded
                  else self.xl_positions_for_inference(sentences))
        out = []
        for tokens, positions in zip(sentences, loaded):
            domain, key = self._raw_input_key(tuple(tokens.tolist()))
            out.append(contrast.apply(tokens[:-1], positions, domain, key))
        return out

    def xl_positions_for_inference(self, src_tokens: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """Raw 0-based XL positions (EOS excluded) for binarized source sentences that have no .xlpos file.

        Each input is one sentence's token ids ending with EOS (pads, if any, are ignored); each output holds one
        position per non-EOS token. Sentences encoded from raw text by this task get the positions computed from
        their words; others are decoded to words through the source dictionary and reordered; with
        ``--xl-positions monotone`` or without a reorderer, the identity.
        """
        if self.cfg.xl_positions == "monotone":
            pad = self.source_dictionary.pad()
            return [torch.arange(int(tokens.ne(pad).sum()) - 1, dtype=torch.long) for tokens in src_tokens]
        pipeline = self.xl_pipeline
        if pipeline.reorderer is None and not self._warned_monotone_inference:
            logger.warning("translation_xlpos: no reorderer (the checkpoint carries none and no --xl-reorderer was "
                           "given): monotone XL positions (XL = absolute) for input without a .xlpos file")
            self._warned_monotone_inference = True
        return pipeline.positions_for_tokens(src_tokens)

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        pair = super().build_dataset_for_inference(src_tokens, src_lengths, constraints=constraints)
        dataset = LanguagePairWithXLPositionsDataset(pair, self.raw_input_xl_positions(src_tokens),
                                                     name="inference input XL positions")
        dataset.xl_inference_input = True  # see get_batch_iterator
        return dataset

    def get_batch_iterator(self, dataset, max_tokens=None, *args, **kwargs):
        # fairseq refuses a sentence longer than --max-tokens with an exception, which would end
        # fairseq-interactive (or a hub translate() of a batch): for raw input, let a batch grow to the longest
        # sentence instead (sentences were already cut to the model's maximum length).
        if max_tokens is not None and getattr(dataset, "xl_inference_input", False) and len(dataset) > 0:
            longest = int(max(dataset.src_sizes))
            if longest > max_tokens:
                logger.warning("translation_xlpos: an input of %d tokens exceeds --max-tokens %d: batching with "
                               "--max-tokens %d for it", longest, max_tokens, longest)
                max_tokens = longest
        return super().get_batch_iterator(dataset, max_tokens, *args, **kwargs)

    def xl_positions_for_batch(self, src_tokens: torch.Tensor) -> torch.Tensor:
        """``src_xl_positions`` for a collated source batch (any padding side), via raw_input_xl_positions.

        The batch crosses to the CPU once and the positions come back once (the reorderer and dictionary work on
        the CPU), not once per sentence: each transfer synchronizes the GPU."""
        pad = self.source_dictionary.pad()
        cpu_tokens = src_tokens.cpu()
        sentences = [row[row.ne(pad)] for row in cpu_tokens]
        rows = [model_positions(raw, pad) for raw in self.raw_input_xl_positions(sentences)]
        return place_like_tokens(cpu_tokens, rows, pad).to(src_tokens.device)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        # fairseq-interactive rebuilds net_input from src_tokens and src_lengths only, dropping our key; put it
        # back from the same source of positions its dataset used.
        net_input = sample["net_input"]
        if XL_POSITIONS_KEY not in net_input:
            net_input = dict(net_input)
            net_input[XL_POSITIONS_KEY] = self.xl_positions_for_batch(net_input["src_tokens"])
            sample = dict(sample, net_input=net_input)
        return super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                      constraints=constraints)
