"""Raw text -> on-the-fly XL positions, through the real fairseq-interactive and fairseq-generate CLIs and the
inference pipeline in-process (conftest.py: `pipeline_corpus`, `pipeline_model`)."""
import re
import shutil
import sys

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary

import xlpos  # noqa: F401
from conftest import PLUGIN_DIR, cli, run_cli
from xlpos_prep.reorderer import Reorderer
from xlpos.tasks.xl_inference import FALLBACK, REORDERER, XLPositionPipeline
from xlpos.tokenize import Detokenizer, WordTokenizer, WordTokenizerSpec

# A fixed output length limit: with --max-len-a > 0 fairseq derives the limit from the longest source of the
# batch, so generate's batches of 8 and interactive's single sentences would decode under different limits.
DECODE = ["--beam", "2", "--max-len-a", "0", "--max-len-b", "24", "--cpu"]


def hypotheses(output: str) -> dict[int, tuple[float, str]]:
    """H-<id>\tscore\tpieces lines of fairseq-generate / fairseq-interactive output."""
    return {int(i): (float(score), text) for i, score, text in
            re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", output, flags=re.M)}


def interactive(model, lines, *extra, data_bin=None, cwd=None, timeout=180):
    """fairseq-interactive exactly as a user runs it: data dir, --user-dir, --task, --path; input on stdin."""
    return run_cli([cli("fairseq-interactive"), str(data_bin or model.corpus.data_bin), "--user-dir", str(PLUGIN_DIR),
                    "--task", "translation_xlpos", "--path", str(model.checkpoint), *DECODE, *extra],
                   stdin="".join(line + "\n" for line in lines), cwd=cwd, timeout=timeout)


# ------------------------------------------------------------------------------------------------ real CLIs
def test_interactive_on_raw_text_equals_generate_on_the_offline_pipeline(pipeline_model, tmp_path):
    corpus = pipeline_model.corpus
    lines = corpus.lines("test")
    # The training-time copies of the reorderer and spm model are gone (see the fixture); the data dir holds only
    # the dictionaries: the checkpoint alone must drive tokenization, reordering and sentencepiece.
    dicts_only = tmp_path / "dicts"
    dicts_only.mkdir()
    for name in ("dict.src.txt", "dict.tgt.txt"):
        shutil.copy(corpus.data_bin / name, dicts_only / name)
    # (fairseq infers -s/-t from binarized files; a directory of dictionaries needs them)
    online = interactive(pipeline_model, lines, "-s", "src", "-t", "tgt", data_bin=dicts_only, cwd=tmp_path)
    offline = run_cli([cli("fairseq-generate"), str(corpus.data_bin), "--user-dir", str(PLUGIN_DIR),
                       "--task", "translation_xlpos", "--path", str(pipeline_model.checkpoint),
                       "--gen-subset", "test", "--batch-size", "8", *DECODE])
    log = online.stdout + online.stderr
    assert "reorderer from the checkpoint (trained with" in log, log[-3000:]
    assert "sentencepiece from the checkpoint" in log

    # the pieces the model saw are those of `xlpos-prep positions --pieces-out`
    sources = re.findall(r"^S-\d+\t(.*)$", online.stdout, flags=re.M)
    assert [s.split() for s in sources] == corpus.pieces("test")
    got, want = hypotheses(online.stdout), hypotheses(offline.stdout)
    assert sorted(got) == sorted(want) == list(range(len(lines)))
    assert [got[i][1] for i in range(len(lines))] == [want[i][1] for i in range(len(lines))]
    # same positions, same model: the scores agree up to batching (padding changes float summation order, ~1e-7);
    # monotone positions instead move the scores of the 19 reordered test sentences by 7e-5 to 0.2 (measured)
    assert max(abs(got[i][0] - want[i][0]) for i in range(len(lines))) < 1e-5


def test_interactive_survives_hostile_input(hostile_interactive):
    out, text = hostile_interactive.stdout, hostile_interactive.log
    assert "Traceback" not in text
    assert sorted(hypotheses(out)) == list(range(len(hostile_interactive.lines)))  # one translation per line
    sources = dict(re.findall(r"^S-(\d+)\t(.*)$", out, flags=re.M))
    assert sources["0"] == "" and sources["1"] == ""  # empty input: EOS only
    # too long for the model: cut to its 1024 positions, said so, and batched despite --max-tokens 600
    assert re.search(r"input 3: \d+ source tokens exceed the model's limit of 1024 \(with EOS\): truncated to "
                     r"the first 1023", text), text[-3000:]
    assert len(sources["3"].split()) == 1023
    assert re.search(r"input 8: \d+ source tokens exceed the model's limit", text)
    assert "exceeds --max-tokens 600" in text
    # characters outside the vocabulary reach the model as <unk>
    assert "<unk>" in sources["5"] and "<unk>" in sources["6"]
    # a word that sentencepiece turns into nothing is left out of the reordering, and that is reported
    assert "input 7: 1 word(s) without any sentencepiece piece were ignored" in text
    assert "\u200b" not in sources["7"] and sources["7"]


# ------------------------------------------------------------------------------------------------ in-process
@pytest.fixture(scope="module")
def pipeline(pipeline_corpus):
    import sentencepiece

    src_dict = Dictionary.load(str(pipeline_corpus.data_bin / "dict.src.txt"))
    sp = sentencepiece.SentencePieceProcessor(model_file=str(pipeline_corpus.spm))
    return XLPositionPipeline(src_dict, Reorderer.load(str(pipeline_corpus.reorderer)), sp,
                              WordTokenizer(WordTokenizerSpec("none")), max_source_tokens=1024)


def test_text_route_reproduces_the_offline_pipeline(pipeline, pipeline_corpus):
    infos = pipeline.analyze_lines(pipeline_corpus.lines("test"))
    assert [i.order for i in infos] == pipeline_corpus.orders("test")
    assert [i.pieces for i in infos] == pipeline_corpus.pieces("test")
    assert [i.xl_positions for i in infos] == pipeline_corpus.xl_positions("test")
    assert {i.method for i in infos} == {REORDERER}


def test_token_route_agrees_with_the_text_route(pipeline, pipeline_corpus):
    # A fresh pipeline remembers nothing: the positions come from decoding the token ids to words.
    fresh = XLPositionPipeline(pipeline.src_dict, pipeline.reorderer, pipeline.sp, pipeline.word_tokenizer)
    infos = pipeline.analyze_lines(pipeline_corpus.lines("valid"))
    decoded = fresh.positions_for_tokens([torch.tensor(i.token_ids) for i in infos])
    assert [d.tolist() for d in decoded] == [i.xl_positions for i in infos]
    # padded rows, as collated batches hold them
    pad = pipeline.src_dict.pad()
    padded = [torch.cat([torch.full((3,), pad), torch.tensor(i.token_ids)]) for i in infos[:4]]
    assert [d.tolist() for d in fresh.positions_for_tokens(padded)] == [i.xl_positions for i in infos[:4]]


def test_unmappable_and_oversized_input_fall_back_without_raising(pipeline, caplog):
    vanished = pipeline.analyze_lines(["the \u200b dog ."])[0]
    assert vanished.words == ["the", "dog", "."] and vanished.method == REORDERER
    assert "without any sentencepiece piece" in vanished.note
    # pieces that do not split into the given words (a tokenizer / sentencepiece mismatch): monotone, warned
    broken = pipeline.analyze_words([["a", "b▁c"]])[0]
    assert broken.method == FALLBACK and broken.xl_positions == list(range(len(broken.pieces)))
    assert "monotone XL positions" in caplog.text
    small = XLPositionPipeline(pipeline.src_dict, pipeline.reorderer, pipeline.sp, pipeline.word_tokenizer,
                               max_source_tokens=5)
    cut = small.analyze_lines(["a man saw the big dog in the park ."])[0]
    assert len(cut.token_ids) == 5 and cut.token_ids[-1] == pipeline.src_dict.eos()
    assert sorted(cut.xl_positions) == [0, 1, 2, 3] and "truncated" in cut.note
    # undecodable input bytes arrive as lone surrogates (stdin under the C locale); sentencepiece rejects those
    bad_bytes = pipeline.analyze_lines([b"a \xff\xfe dog .".decode("utf-8", "surrogateescape")])[0]
    assert "input 0: characters that are not valid UTF-8 were replaced by U+FFFD" in caplog.text
    assert bad_bytes.words == ["a", "dog", "."]  # U+FFFD: no sentencepiece piece, so left out of the reordering
    empty = pipeline.analyze_lines([""])[0]
    assert empty.token_ids == [pipeline.src_dict.eos()] and empty.xl_positions == [] and empty.order == []


def make_task(data_bin, *extra: str):
    """translation_xlpos exactly as fairseq-generate configures it from these command-line arguments."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_generation_parser(default_task="translation_xlpos")
    args = options.parse_args_and_arch(parser, [str(data_bin), "--task", "translation_xlpos", "-s", "src", "-t", "tgt",
                                                *extra])
    return tasks.setup_task(convert_namespace_to_omegaconf(args).task)


def test_reorder_mode_needs_no_xlpos_files(pipeline_corpus, tmp_path):
    """--xl-positions reorder (e.g. fairseq-generate on a new test set): the reorderer run on the binarized source
    gives the offline pipeline's positions."""
    data_bin = tmp_path / "bin"
    shutil.copytree(pipeline_corpus.data_bin, data_bin, ignore=shutil.ignore_patterns("*.xlpos.*"))
    task = make_task(data_bin, "--xl-positions", "reorder", "--xl-reorderer", str(pipeline_corpus.reorderer),
                     "--xl-spm", str(pipeline_corpus.spm))
    task.load_dataset("test")
    dataset = task.dataset("test")
    assert [dataset.raw_positions(i, len(dataset.src[i])).tolist() for i in range(len(dataset))] == \
        pipeline_corpus.xl_positions("test")
    without = make_task(data_bin, "--xl-positions", "reorder")
    with pytest.raises(ValueError, match="--xl-positions reorder needs a reorderer"):
        without.load_dataset("test")


def test_positions_made_by_another_reorderer_are_reported(pipeline_corpus, tmp_path, caplog):
    from xlpos_prep.reorderer import ReordererConfig

    config = ReordererConfig(hash_bits=8)  # every derivation scores 0: not the reorderer that made the files
    Reorderer(config, np.zeros((1 << config.hash_bits) * 3)).save(str(tmp_path / "flat.reorderer"))
    task = make_task(pipeline_corpus.data_bin, "--xl-reorderer", str(tmp_path / "flat.reorderer"),
                     "--xl-spm", str(pipeline_corpus.spm))
    task.load_dataset("valid")
    assert re.search(r"the reorderer reproduces the XL positions of \d+/30 sentences of .*valid\.src-tgt\.xlpos: the "
                     r"file was not made with this reorderer", caplog.text)
    with pytest.raises(FileNotFoundError, match=r"--xl-reorderer 'nowhere.model' not found; looked for .*bin/nowhere"):
        make_task(pipeline_corpus.data_bin, "--xl-reorderer", "nowhere.model")


def test_checkpoint_state_round_trip_and_precedence(pipeline_corpus, tmp_path):
    """What fairseq-train stores in task_state is what inference uses, unless the command line says otherwise."""
    trained = make_task(pipeline_corpus.data_bin, "--xl-reorderer", str(pipeline_corpus.reorderer), "--xl-spm",
                        str(pipeline_corpus.spm), "--xl-word-tokenizer", "moses", "--xl-tokenizer-lang", "en",
                        "--xl-lowercase", "--xl-detokenizer", "moses")
    state = trained.state_dict()
    assert state["xlpos_inference"]["reorderer"].dtype == torch.uint8

    plain = make_task(pipeline_corpus.data_bin)  # fairseq-interactive DATA --task translation_xlpos --path ...
    assert plain.xl_model_file("reorderer") is None and plain.xl_setting("word_tokenizer") == "none"
    plain.load_state_dict(state)  # what load_model_ensemble does with the checkpoint's task_state
    assert plain.xl_model_file("reorderer").data == pipeline_corpus.reorderer.read_bytes()
    assert plain.xl_model_file("reorderer").origin == f"the checkpoint (trained with {pipeline_corpus.reorderer})"
    assert plain.word_tokenizer_spec() == WordTokenizerSpec("moses", "en", normalize=False, lowercase=True)
    assert plain.analyze_lines(["A man saw the dog."])[0].words == ["a", "man", "saw", "the", "dog", "."]
    assert plain.build_tokenizer(None).decode("Hello , world !") == "Hello, world!"

    flat = tmp_path / "flat.reorderer"
    shutil.copy(pipeline_corpus.reorderer, flat)
    override = make_task(pipeline_corpus.data_bin, "--xl-word-tokenizer", "none", "--xl-reorderer", str(flat))
    override.load_state_dict(state)
    assert override.xl_setting("word_tokenizer") == "none" and override.xl_setting("lowercase") is True
    assert override.xl_model_file("reorderer").origin == str(flat)
    assert override.xl_model_file("sentencepiece").origin.startswith("the checkpoint")


# ------------------------------------------------------------------------------------------------ tokenizers
def _corpus_tokenization(lang, normalize, lowercase, lines, tmp_path):
    """`xlpos-prep tokenize`, as the recipes tokenize their corpora."""
    from xlpos_prep import cli as prep_cli
    raw, tok = tmp_path / "raw.txt", tmp_path / "tok.txt"
    raw.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    args = ["tokenize", "--lang", lang, "--input", str(raw), "--output", str(tok)]
    assert prep_cli.main(args + ["--normalize"] * normalize + ["--lowercase"] * lowercase) == 0
    return tok.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("kind,lang,line", [
    ("moses", "en", "Hello, world! It's a well-known \u201ctest\u201d\u2026 isn't it?"),
    ("moses", "de", "Das ist ein Haus-Boot, oder?  Ja!"),
    ("ja", "ja", "ＡＢＣの猫が、公園で走った。"),
    ("zh", "zh", "我爱北京天安门，ABC１２３。"),
])
@pytest.mark.parametrize("normalize,lowercase", [(False, False), (True, True)])
def test_word_tokenizers_match_the_recipes(kind, lang, line, normalize, lowercase, tmp_path):
    """Raw input must be tokenized exactly as `xlpos-prep tokenize` tokenized the training corpus."""
    if kind in ("ja", "zh"):  # the optional `recipes` extra
        pytest.importorskip({"ja": "fugashi", "zh": "jieba"}[kind])
    ours = WordTokenizer(WordTokenizerSpec(kind, lang, normalize, lowercase))
    assert [" ".join(ours(line)), ""] == _corpus_tokenization(lang, normalize, lowercase, [line, "   "], tmp_path)
    assert ours("") == [] and ours("   ") == []
    assert ours(line) != line.split()  # the tokenizer did split something


def test_missing_optional_segmenter_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "fugashi", None)  # makes `import fugashi` raise ImportError
    with pytest.raises(ImportError, match=r"Japanese word segmentation needs fugashi\[unidic-lite\]: pip install -e "
                                          r"'\.\[recipes\]'"):
        WordTokenizer(WordTokenizerSpec("ja"))


def test_detokenizers():
    assert Detokenizer("none")("a , b") == "a , b"
    assert Detokenizer("moses", "en")("Hello , world !") == "Hello, world!"
    assert Detokenizer("ja")("猫 が ABC 123 を 見た 。") == "猫がABC 123を見た。"
    with pytest.raises(ValueError, match="unknown detokenizer"):
        Detokenizer("klingon")
