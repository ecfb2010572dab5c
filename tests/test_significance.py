"""Paired significance tests (preprocess/significance.py, imported as xlpos_prep.significance): crafted systems
whose answer is known, agreement with sacreBLEU's own command line, seed pairing, and the CLI."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_cli, subprocess_env
from xlpos_prep import significance as sig

VOCAB = [f"w{i}" for i in range(60)]
FAST = {"bs_samples": 300, "ar_trials": 600}


def corpus(n: int = 150, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(VOCAB, k=rng.randint(6, 16))) for _ in range(n)]


def noisy(refs: list[str], rate: float, seed: int) -> list[str]:
    """Each word replaced by a random one with probability `rate`: a system of known quality."""
    rng = random.Random(seed)
    return [" ".join(w if rng.random() > rate else rng.choice(VOCAB) for w in r.split()) for r in refs]


def test_a_much_better_system_is_significant_with_tight_intervals() -> None:
    refs = corpus()
    [comp] = sig.paired_tests(noisy(refs, 0.5, 1), {"good": noisy(refs, 0.1, 2)}, refs, tokenize="none", **FAST)
    assert comp.system == "good" and comp.sentences == len(refs)
    assert [t.metric for t in comp.tests] == ["BLEU", "chrF2"]
    for t in comp.tests:
        assert t.delta > 10
        # the smallest p-value each test can give: 1 / (samples + 1)
        assert t.p_bootstrap == pytest.approx(1 / 301, abs=1e-6)
        assert t.p_randomization == pytest.approx(1 / 601, abs=1e-6)
        assert t.significant()
        # sacreBLEU's 95% interval is around the bootstrap mean, which is close to the score itself
        assert abs(t.system_mean - t.system_score) < t.system_ci95 and 0 < t.system_ci95 < 5
        assert "bs:300" in t.signature_bootstrap and "ar:600" in t.signature_randomization
        assert "seed:12345" in t.signature_bootstrap


def test_systems_differing_in_a_few_sentences_are_not_significant() -> None:
    refs = corpus()
    base = noisy(refs, 0.3, 1)
    other = noisy(refs, 0.3, 7)
    close = base[:-3] + other[-3:]  # same quality, 3 of 150 sentences differ
    [comp] = sig.paired_tests(base, {"close": close}, refs, tokenize="none", **FAST)
    bleu = comp.metric("BLEU")
    assert 0 < abs(bleu.delta) < 1
    assert bleu.p_bootstrap > 0.1 and bleu.p_randomization > 0.1 and not bleu.significant()


def test_identical_outputs_are_never_counted_significant() -> None:
    refs = corpus()
    base = noisy(refs, 0.3, 1)
    [comp] = sig.paired_tests(base, {"same": list(base)}, refs, tokenize="none", **FAST)
    for t in comp.tests:
        # sacreBLEU (after MultEval) does not attribute a zero difference to chance: the smallest p-value
        assert t.delta == 0 and t.p_bootstrap == pytest.approx(1 / 301, abs=1e-6)
        assert not t.significant()


def test_same_figures_as_sacrebleus_command_line(tmp_path: Path) -> None:
    refs = corpus(200)
    files = {"ref": refs, "base": noisy(refs, 0.30, 1), "sys": noisy(refs, 0.27, 2)}
    for name, lines in files.items():
        (tmp_path / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    [comp] = sig.paired_tests(files["base"], {"sys": files["sys"]}, refs, tokenize="13a", bs_samples=400,
                              ar_trials=400)
    ours = comp.metric("BLEU")
    assert 0.001 < ours.p_bootstrap < 0.5  # a p-value the test actually resolves, not the floor
    for flag, p_ours in (("--paired-bs", ours.p_bootstrap), ("--paired-ar", ours.p_randomization)):
        proc = subprocess.run([str(Path(sys.executable).with_name("sacrebleu")), str(tmp_path / "ref.txt"), "-i",
                               str(tmp_path / "base.txt"), str(tmp_path / "sys.txt"), "-m", "bleu", flag,
                               f"{flag}-n", "400", "-f", "json", "-q"],
                              capture_output=True, text=True, check=True, env={**subprocess_env(),
                                                                               "SACREBLEU_SEED": "12345"})
        baseline, system = json.loads(proc.stdout)
        assert system["BLEU"]["score"] == pytest.approx(ours.system_score, abs=1e-3)
        assert system["BLEU"]["p_value"] == pytest.approx(p_ours, abs=1e-5)
        if flag == "--paired-bs":
            assert system["BLEU"]["mean"] == pytest.approx(ours.system_mean, abs=1e-3)
            assert system["BLEU"]["ci"] == pytest.approx(ours.system_ci95, abs=1e-3)


def test_seed_pairs_share_the_seed_or_fall_back_to_position() -> None:
    assert sig.pair_seeds(["1", "2"], ["2", "1", "3"]) == [("1", "1"), ("2", "2")]
    assert sig.pair_seeds(["1", "2"], ["2"]) == [("2", "2")]
    assert sig.pair_seeds(["1", "2"], ["5", "6"]) == [("1", "5"), ("2", "6")]


def test_over_seeds_counts_significant_pairs_and_concatenates() -> None:
    refs = corpus(100)
    base = {"1": noisy(refs, 0.5, 1), "2": noisy(refs, 0.5, 2)}
    systems = {"good": {"1": noisy(refs, 0.1, 3), "2": noisy(refs, 0.1, 4)},
               "one-seed": {"2": noisy(refs, 0.1, 5)}}
    out = {c.system: c for c in sig.compare_over_seeds("base", base, systems, refs, tokenize="none", **FAST)}
    good = out["good"]
    assert [(p.baseline_seed, p.system_seed) for p in good.seed_pairs] == [("1", "1"), ("2", "2")]
    assert good.significant_pairs("BLEU") == 2 and good.significant_pairs("chrF") == 2
    assert good.concatenated is not None and good.concatenated.sentences == 200
    # the concatenation's score is that of the seeds' outputs appended (the baseline's too)
    b1, b2 = (p.comparison.metric("BLEU").baseline_score for p in good.seed_pairs)
    assert min(b1, b2) <= good.concatenated.metric("BLEU").baseline_score <= max(b1, b2)
    one = out["one-seed"]
    assert [(p.baseline_seed, p.system_seed) for p in one.seed_pairs] == [("2", "2")] and one.concatenated is None
    record = good.to_dict()
    assert record["significant_seed_pairs"] == {"BLEU": 2, "chrF2": 2} and record["seed_pair_count"] == 2
    assert "anti-conservative" in record["concatenated_caveat"]
    json.dumps(record)  # plain JSON types only
    table = sig.format_table([c.to_dict() for c in out.values()])
    assert "concat*" in table and "BLEU 2/2, chrF2 2/2" in table and "BLEU 1/1" in table


def test_the_t_test_over_seed_pairs_matches_the_textbook() -> None:
    # differences 1, 2, 3: mean 2, standard error 1/sqrt(3); t(2) at 0.975 is 4.3027, t = 3.4641 gives p 0.0742
    test = sig.seed_pair_t_test([1.0, 2.0, 3.0])
    assert (test.n, test.mean) == (3, 2.0)
    assert test.low == pytest.approx(2 - 4.3027 / 3 ** 0.5, abs=1e-4)
    assert test.high == pytest.approx(2 + 4.3027 / 3 ** 0.5, abs=1e-4)
    assert test.p == pytest.approx(0.0742, abs=1e-4)
    assert sig.seed_pair_t_test([-1.0, -2.0, -3.0]).p == pytest.approx(test.p)  # two-sided
    assert sig.seed_pair_t_test([0.4, -0.2]) is None  # two seed pairs: no test
    same = sig.seed_pair_t_test([0.5, 0.5, 0.5])
    assert (same.low, same.high, same.p) == (0.5, 0.5, 0.0)
    assert sig.seed_pair_t_test([0.0, 0.0, 0.0]).p == 1.0


def test_hypothesis_count_must_match() -> None:
    refs = corpus(10)
    with pytest.raises(ValueError, match="sys: 9 hypotheses for 10 references"):
        sig.paired_tests(refs, {"sys": refs[:9]}, refs)


def test_module_imports_neither_fairseq_nor_torch() -> None:
    code = ("import sys\n"
            "from xlpos_prep import significance as m\n"
            "refs = ['a b c d', 'e f g h']\n"
            "m.paired_tests(refs, {'x': ['a b c', 'e f g h']}, refs, bs_samples=10, ar_trials=10)\n"
            "m.seed_pair_t_test([0.1, 0.4, -0.2])\n"
            "print(sorted(k for k in sys.modules if k.split('.')[0] in ('fairseq', 'torch', 'xlpos')))\n")
    out = run_cli([sys.executable, "-c", code]).stdout
    assert out.strip() == "[]"


def test_command_line(tmp_path: Path) -> None:
    refs = corpus(80)
    paths = {}
    for name, lines in {"ref": refs, "b1": noisy(refs, 0.5, 1), "b2": noisy(refs, 0.5, 2),
                        "g1": noisy(refs, 0.1, 3), "g2": noisy(refs, 0.1, 4)}.items():
        paths[name] = tmp_path / f"{name}.txt"
        paths[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    # the fairseq-free command (`xlpos-significance` is the same main())
    cmd = [sys.executable, "-m", "xlpos_prep.significance", "--ref", str(paths["ref"]),
           "--baseline", f"vanilla={paths['b1']},{paths['b2']}", "--system", f"xl={paths['g1']},{paths['g2']}",
           "--seed-labels", "7,8", "--tokenize", "none", "--bs-samples", "200", "--ar-trials", "200",
           "--json", str(tmp_path / "sig.json")]
    proc = run_cli(cmd, cwd=REPO)
    assert "1 system(s) against vanilla" in proc.stdout and "BLEU 2/2, chrF2 2/2" in proc.stdout
    data = json.loads((tmp_path / "sig.json").read_text())
    [comp] = data["comparisons"]
    assert data["seeds"] == ["7", "8"] and comp["system"] == "xl"
    assert [p["system_seed"] for p in comp["seed_pairs"]] == ["7", "8"]
    assert comp["seed_pairs"][0]["comparison"]["tests"][0]["p_bootstrap"] == pytest.approx(1 / 201, abs=1e-6)
    # errors: one line naming the file or option (in-process: the message is what main() exits with)
    paths["short"] = tmp_path / "short.txt"
    paths["short"].write_text("x\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=f"^{paths['short']}: 1 lines but {paths['ref']} has 80$"):
        sig.main(cmd[3:-2] + ["--system", f"bad={paths['short']}"])
    with pytest.raises(SystemExit, match="--system xl: expected NAME=FILE"):
        sig.main(cmd[3:-2] + ["--system", "xl"])
