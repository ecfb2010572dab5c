"""The whole plugin through the real CLIs: xlpos-prep binarize -> fairseq-train (+ resume) -> fairseq-generate ->
fairseq-interactive, and the hub interface, on the tiny synthetic corpus (see conftest.py)."""
import re
import shutil

from fairseq.data.indexed_dataset import MMapIndexedDataset

from conftest import PLUGIN_DIR, cli, run_cli, tiny_model_args

DECODE = ["--beam", "2", "--max-len-a", "1", "--max-len-b", "2", "--cpu"]


def hypothesis_ids(output: str) -> list[int]:
    return sorted(int(m) for m in re.findall(r"^H-(\d+)\t", output, flags=re.M))


def test_binarize_cli_writes_what_the_task_reads(tiny_corpus, tmp_path):
    # One split through the console script (validation itself is covered in-process in test_xl_dataset.py).
    data_bin = tiny_corpus.copy_data_bin(tmp_path / "bin", with_xl_positions=False)
    run_cli([cli("xlpos-prep"), "binarize", "--xlpos", str(tiny_corpus.raw("test", "xlpos")), "--data-bin",
             str(data_bin), "--split", "test", "--source-lang", "src", "--target-lang", "tgt"])
    stored = MMapIndexedDataset(str(data_bin / "test.src-tgt.xlpos"))
    assert [stored[i].tolist() for i in range(len(stored))] == tiny_corpus.xl_positions("test")
    assert sorted(p.name for p in data_bin.glob("*xlpos*")) == ["test.src-tgt.xlpos.bin", "test.src-tgt.xlpos.idx"]


def test_train_resume_generate_interactive_hub(trained_model, tmp_path):
    corpus = trained_model.corpus
    # fairseq-train (run by the fixture): checkpoints and tensorboard event files
    assert trained_model.checkpoint.exists()
    for subset in ("train", "valid"):
        assert list((trained_model.tensorboard_dir / subset).glob("events.out.tfevents.*")), subset
    assert f"num_updates {trained_model.updates}" in trained_model.log

    # resume: a second run with a higher --max-update continues from checkpoint_last.pt
    save_dir = tmp_path / "checkpoints"
    shutil.copytree(trained_model.save_dir, save_dir)
    more = trained_model.updates + 4
    resumed = run_cli(tiny_model_args(corpus, save_dir, more, tmp_path / "tensorboard"))
    log = resumed.stdout + resumed.stderr
    assert re.search(rf"Loaded checkpoint \S*checkpoint_last\.pt \(epoch \d+ @ {trained_model.updates} updates\)",
                     log), log[-3000:]
    assert f"num_updates {more}" in log
    checkpoint = save_dir / "checkpoint_last.pt"

    # fairseq-generate: the checkpoint loads (weights_only=True) and every test sentence gets a hypothesis,
    # including those of the last, partial batch (--batch-size 8, 20 sentences)
    generated = run_cli([cli("fairseq-generate"), str(corpus.data_bin), "--user-dir", str(PLUGIN_DIR),
                         "--task", "translation_xlpos", "--path", str(checkpoint), "--gen-subset", "test",
                         "--batch-size", "8", *DECODE])
    assert hypothesis_ids(generated.stdout) == list(range(corpus.sizes["test"]))

    # fairseq-interactive: raw sentences on stdin, monotone XL positions
    sentences = [" ".join(s) for s in corpus.sentences("test")[:5]]
    interactive = run_cli([cli("fairseq-interactive"), str(corpus.data_bin), "--user-dir", str(PLUGIN_DIR),
                           "--task", "translation_xlpos", "--xl-positions", "monotone", "--path", str(checkpoint),
                           "-s", "src", "-t", "tgt", *DECODE], stdin="\n".join(sentences) + "\n")
    assert hypothesis_ids(interactive.stdout) == list(range(len(sentences)))
    sources = re.findall(r"^S-\d+\t(.*)$", interactive.stdout, flags=re.M)
    assert sources == sentences

    # hub interface: from_pretrained -> translate, positions from xl_positions_for_inference
    from xlpos.models import XLPosTransformerModel

    hub = XLPosTransformerModel.from_pretrained(str(save_dir), checkpoint_file="checkpoint_last.pt",
                                                data_name_or_path=str(corpus.data_bin))
    calls = []
    original = hub.task.xl_positions_for_inference

    def spy(src_tokens):
        calls.append(len(src_tokens))
        return original(src_tokens)

    hub.task.xl_positions_for_inference = spy
    translations = hub.translate(sentences[:2], beam=2, max_len_a=1, max_len_b=2)
    assert len(translations) == 2 and all(isinstance(t, str) and t for t in translations)
    assert calls and sum(calls) >= 2
