"""The BTG reorderer off its training distribution (issue 15): stress sets, before vs after, both directions.

Sets (Tanaka En-Ja from ../shared/data/enja; oracles from one eflomal + grow-diag-final-and alignment of
train+dev, made once by benchmarks/reorderer_enja.py's `prepare` in --work and reused):
  dev      the 500 held-out dev sentences (in-domain), model trained on all 50k training sentences;
  concat   the dev sentences joined in consecutive groups of 2, 3, 4, 6, 8, 12 (xlpos_prep.stress.concatenate):
           88 inputs of 45 English / 64 Japanese words on average, up to 109 / 149, against at most 16 in
           training; the oracle is the concatenation of the parts' oracles in order; same 50k model;
  long     the dev sentences longer than the median training length (En > 8, Ja > 11 words), model trained on the
           training sentences of at most that length (the short half): lengths it never saw;
  multi30k (English source only) Multi30k val + test_2016_flickr English, tokenized and lowercased with
           sacremoses: image captions, a domain the Tanaka-trained En->Ja model never saw. There is no Japanese
           for it, so no oracle: the table shows how far the model moves these sentences from monotone (tau of
           its order against the source order, share of sentences changed) next to the same figures on dev.
           That shows whether the model holds back on unfamiliar input, not whether its orders are right.
Direction en-de builds the same dev / concat / long sets on Multi30k (English source, German order; train 29k,
dev = test_2016_flickr, sacremoses-tokenized and lowercased, its own eflomal alignment of train+val+test): the
method in a second domain and language pair, with an oracle. It is not the Tanaka model on Multi30k: nothing
here has an English-Japanese oracle for captions, or an English-German one for Tanaka.

Variants: "before" is the preprocess package of --before-rev (git archive, first on PYTHONPATH; trained and run
with that revision's defaults), "after" this checkout with its defaults plus --train-args. Each model is trained
by `train-reorderer` in a child process (wall time, peak RSS from os.wait4) and each set is reordered by that
variant's `reorder` command; scores come from xlpos_prep.metrics (corpus level and sentence average).

    python benchmarks/reorderer_stress.py --work /work/r15 --json stress.json
    python benchmarks/reorderer_stress.py --directions en-ja --train-args "--views word,class128" --tag cls
    python benchmarks/reorderer_stress.py --directions ja-en --attach-null left   # the pipeline's Japanese oracles

--attach-null left (Japanese-source directions only): oracles made with `xlpos-prep oracle --attach-null left`, as
the pipeline makes them for Japanese sources, for training and scoring alike (files and models named ja-en-left).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import reorderer_enja as enja  # noqa: E402  (prepare: alignment and oracles, cached in --work)
from xlpos_prep.io import log  # noqa: E402

ENDE = REPO.parent / "shared" / "data" / "ende"
DEFAULT_BEFORE = "f859ddc"  # the last commit before issue 15's parts 1-2


def before_tree(work: Path, rev: str) -> Path:
    """The preprocess package of `rev` as work/before-REV/xlpos_prep (importable under the current name)."""
    root = work / f"before-{rev}"
    if not (root / "xlpos_prep" / "__init__.py").exists():
        root.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "preprocess"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
        (root / "preprocess").rename(root / "xlpos_prep")
    return root


def child(variant_root: Path | None, work: Path, args: list[str]) -> tuple[float, float]:
    """Run `xlpos-prep ARGS` of a variant (None: this checkout); (wall seconds, peak RSS MB of the child)."""
    env = dict(os.environ)
    if variant_root is not None:
        env["PYTHONPATH"] = str(variant_root) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "xlpos_prep.cli", *args]
    log("$ " + ("" if variant_root is None else f"PYTHONPATH={variant_root} ") + shlex.join(cmd))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=str(work))  # cwd: no xlpos_prep there to shadow the variant's
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"command failed: {shlex.join(cmd)}")
    return seconds, usage.ru_maxrss / 1024


def check_variant(root: Path | None, work: Path) -> None:
    env = dict(os.environ)
    if root is not None:
        env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", "import xlpos_prep; print(xlpos_prep.__file__)"], env=env,
                         cwd=str(work), capture_output=True, text=True, check=True).stdout.strip()
    expected = (root / "xlpos_prep") if root is not None else (REPO / "preprocess")
    if Path(out).resolve().parent != expected.resolve():
        raise RuntimeError(f"variant {root or REPO} imports {out}")


def tokenized(lang: str, split: str) -> list[str]:
    """A Multi30k file, sacremoses-tokenized and lowercased (Tanaka's conventions)."""
    from sacremoses import MosesTokenizer
    tok = MosesTokenizer(lang=lang)
    return [tok.tokenize(line.strip().lower(), escape=False, return_str=True)
            for line in (ENDE / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()]


def multi30k_english(work: Path) -> Path:
    """Multi30k val + test_2016_flickr English, tokenized (the Tanaka En->Ja model's out-of-domain input)."""
    path = work / "multi30k.en"
    if not path.exists():
        enja.write_lines(path, tokenized("en", "val") + tokenized("en", "test_2016_flickr"))
    return path


def prepare_multi30k(work: Path) -> Path:
    """work/multi30k/: train (29k) and dev (= test_2016_flickr, 1000) En/De, tokenized, one eflomal alignment
    of train+val+test together, and En->(De order) oracles, in the file names stress_sets expects."""
    m = work / "multi30k"
    m.mkdir(parents=True, exist_ok=True)
    if not (m / "dev.en-de.oracle").exists():
        parts = {lang: {split: tokenized(lang, split) for split in ("train", "val", "test_2016_flickr")}
                 for lang in ("en", "de")}
        for lang in ("en", "de"):
            enja.write_lines(m / f"train.{lang}", parts[lang]["train"])
            enja.write_lines(m / f"dev.{lang}", parts[lang]["test_2016_flickr"])
            enja.write_lines(m / f"all.{lang}", sum(parts[lang].values(), []))
        if not (m / "all.en-de.align").exists():
            child(None, m, ["align", "--src", "all.en", "--tgt", "all.de", "--out", "all.en-de.align"])
        links = enja.read(m / "all.en-de.align")
        n_train, n_val = len(parts["en"]["train"]), len(parts["en"]["val"])
        enja.write_lines(m / "train.en-de.align", links[:n_train])
        enja.write_lines(m / "dev.en-de.align", links[n_train + n_val:])
        for split in ("train", "dev"):
            child(None, m, ["oracle", "--src", f"{split}.en", "--align", f"{split}.en-de.align", "--out",
                            f"{split}.en-de.oracle"])
    return m


def stress_sets(work: Path, direction: str, out_of_domain: bool) -> dict:
    """{name: (source path, oracle path or None, model part)}; writes the files once. out_of_domain: add the
    oracle-free Multi30k set (for the Tanaka English-source model)."""
    from xlpos_prep import stress
    from xlpos_prep.oracle import read_oracle

    src = direction.split("-")[0]
    dev_words = [line.split() for line in enja.read(work / f"dev.{src}")]
    dev_ranks = read_oracle(str(work / f"dev.{direction}.oracle"), [len(s) for s in dev_words])
    train_words = [line.split() for line in enja.read(work / f"train.{src}")]
    train_ranks = read_oracle(str(work / f"train.{direction}.oracle"), [len(s) for s in train_words])
    threshold = stress.median_length(train_words)
    short, _ = stress.length_split(train_words, threshold)
    _, long = stress.length_split(dev_words, threshold)
    joined, joined_ranks = stress.concatenate(dev_words, dev_ranks)
    files = {
        f"short.{src}": [" ".join(train_words[i]) for i in short],
        f"short.{direction}.oracle": [" ".join(map(str, train_ranks[i])) for i in short],
        f"concat.{src}": [" ".join(s) for s in joined],
        f"concat.{direction}.oracle": [" ".join(map(str, r)) for r in joined_ranks],
        f"long.{src}": [" ".join(dev_words[i]) for i in long],
        f"long.{direction}.oracle": [" ".join(map(str, dev_ranks[i])) for i in long],
    }
    for name, lines in files.items():
        if not (work / name).exists():
            enja.write_lines(work / name, lines)
    sets = {"dev": (work / f"dev.{src}", work / f"dev.{direction}.oracle", "train"),
            "concat": (work / f"concat.{src}", work / f"concat.{direction}.oracle", "train"),
            f"long (> {threshold:g} words)": (work / f"long.{src}", work / f"long.{direction}.oracle", "short")}
    if out_of_domain:
        sets["multi30k (no oracle)"] = (multi30k_english(work), None, "train")
    return sets


def train_model(work: Path, root: Path | None, name: str, direction: str, part: str, extra: list[str]) -> dict:
    """Train (or reuse) models/NAME.DIRECTION.PART.npz; {"path", "train_s", "train_mb"} (cached in a .json)."""
    src = direction.split("-")[0]
    models = work / "models"
    models.mkdir(exist_ok=True)
    path = models / f"{name}.{direction}.{part}.npz"
    meta = path.with_suffix(".json")
    if not (path.exists() and meta.exists()):
        seconds, mb = child(root, work, ["train-reorderer", "--src", f"{part}.{src}", "--oracle",
                                         f"{part}.{direction}.oracle", "--model", str(path), *extra])
        meta.write_text(json.dumps({"train_s": seconds, "train_mb": mb, "args": extra}))
    return {"path": path, **json.loads(meta.read_text())}


def away_from_monotone(orders: list[list[int]]) -> dict:
    """How far orders move sentences: corpus tau of the order against the source order, share changed."""
    from xlpos_prep.metrics import evaluate_orders
    ranks = [list(range(len(o))) for o in orders]
    s = evaluate_orders(orders, ranks)
    return {"tau_vs_source": s.corpus_tau, "changed": sum(o != sorted(o) for o in orders) / max(len(orders), 1)}


def score_set(orders: list[list[int]], oracle: Path | None, words: list[list[str]]) -> dict:
    from xlpos_prep.metrics import evaluate_orders
    from xlpos_prep.oracle import read_oracle
    out = away_from_monotone(orders)
    if oracle is not None:
        out.update(vars(evaluate_orders(orders, read_oracle(str(oracle), [len(w) for w in words]))))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="/tmp/xlpos-stress", help="cache and output directory")
    parser.add_argument("--data", default=str(enja.DATA), help="directory with train/dev .en/.ja")
    parser.add_argument("--directions", default="en-ja,ja-en,en-de",
                        help="en-ja, ja-en (Tanaka), en-de (Multi30k: train 29k, dev = test_2016_flickr)")
    parser.add_argument("--before-rev", default=DEFAULT_BEFORE, help="git revision of the 'before' variant")
    parser.add_argument("--train-args", default="", help="extra train-reorderer arguments of 'after' (quoted)")
    parser.add_argument("--reorder-args", default="",
                        help="extra `reorder` arguments of 'after' (quoted), e.g. --split-sentences: inference "
                             "settings tried on the same models")
    parser.add_argument("--tag", default="after", help="model name of the 'after' variant (cache key)")
    parser.add_argument("--attach-null", choices=("right", "left"), default="right",
                        help="oracles of Japanese-source directions (right: the oracle command's default; left: "
                             "what the pipeline uses for Japanese sources)")
    parser.add_argument("--json", help="also write all figures as JSON here")
    args = parser.parse_args(argv)
    from xlpos_prep.metrics import monotone_order

    work = Path(args.work).resolve()
    meta = enja.prepare(work, Path(args.data), "right")
    if args.attach_null == "left":
        enja.prepare(work, Path(args.data), "left")
    before = before_tree(work, args.before_rev)
    check_variant(before, work)
    check_variant(None, work)
    variants = {"before": (before, "before-" + args.before_rev, []),
                "after": (None, args.tag, shlex.split(args.train_args))}
    reorder_extra = {"before": [], "after": shlex.split(args.reorder_args)}
    order_suffix = {"before": "", "after": ".r" + hashlib.sha1(args.reorder_args.encode()).hexdigest()[:8]
                    if args.reorder_args else ""}  # the orders of other inference settings kept apart
    results: dict = {"meta": meta, "before_rev": args.before_rev, "train_args": args.train_args,
                     "reorder_args": args.reorder_args,
                     "attach_null": args.attach_null, "directions": {}}
    for plain_direction in args.directions.split(","):
        home = prepare_multi30k(work) if plain_direction == "en-de" else work
        direction = (enja.oracle_name(plain_direction, args.attach_null) if plain_direction.startswith("ja-")
                     else plain_direction)  # file names: ja-en-left.oracle etc.
        sets = stress_sets(home, direction, out_of_domain=direction == "en-ja")
        res = results["directions"][direction] = {"models": {}, "sets": {}}
        for vname, (root, name, extra) in variants.items():
            for part in ("train", "short"):
                m = train_model(home, root, name, direction, part, extra)
                res["models"][f"{vname} {part}"] = {k: (str(v) if k == "path" else v) for k, v in m.items()}
        for sname, (src, oracle, part) in sets.items():
            words = [line.split() for line in enja.read(src)]
            row = {"sentences": len(words), "avg_len": sum(map(len, words)) / len(words),
                   "max_len": max(map(len, words)), "model_part": part,
                   "monotone": score_set([monotone_order(len(w)) for w in words], oracle, words)}
            for vname, (root, name, _) in variants.items():
                out = home / f"{sname.split()[0]}.{direction}.{name}{order_suffix[vname]}.order"
                model = res["models"][f"{vname} {part}"]["path"]
                child(root, home, ["reorder", "--model", model, "--src", str(src), "--out", str(out),
                                   *reorder_extra[vname]])
                row[vname] = score_set([[int(x) for x in line.split()] for line in enja.read(out)], oracle, words)
            res["sets"][sname] = row
    print_tables(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


def print_tables(results: dict) -> None:
    print(f"\nbefore = {results['before_rev']} (its defaults); after = this checkout "
          f"{results['train_args'] or '(defaults)'}"
          + (f", reordering with {results['reorder_args']}" if results.get("reorder_args") else "")
          + "; corpus tau/FRS, sentence-average tau/FRS in brackets")
    for direction, res in results["directions"].items():
        print(f"\n=== {direction} order ===")
        for name, m in res["models"].items():
            print(f"  model {name:13} trained in {m['train_s']:6.1f} s, peak {m['train_mb']:5.0f} MB")
        head = f"{'set':22} {'n':>4} {'len':>5} {'max':>4} | {'monotone':^29} | {'before':^29} | {'after':^29}"
        print(head)
        print("-" * len(head))
        for sname, row in res["sets"].items():
            cells = []
            for v in ("monotone", "before", "after"):
                s = row[v]
                if "corpus_tau" in s:
                    cells.append(f"{s['corpus_tau']:.4f} {s['corpus_frs']:.4f} ({s['sentence_tau']:.4f} "
                                 f"{s['sentence_frs']:.4f})")
                else:  # no oracle: distance from monotone
                    cells.append(f"vs src {s['tau_vs_source']:.4f} chg {s['changed']:.2f}".ljust(29))
            print(f"{sname:22} {row['sentences']:4d} {row['avg_len']:5.1f} {row['max_len']:4d} | "
                  + " | ".join(cells))
        dev = res["sets"]["dev"]
        mono = dev["monotone"]["corpus_tau"]
        for v in ("before", "after"):
            s = dev[v]
            print(f"  {v}: dev gap recovered (tau - monotone) / (1 - monotone) = "
                  f"{(s['corpus_tau'] - mono) / (1 - mono):.3f}; moved from source order: dev tau vs source "
                  f"{s['tau_vs_source']:.4f}, {s['changed']:.2f} of sentences changed")
        for sname, row in res["sets"].items():
            for v in ("before", "after"):
                s, m = row[v], row["monotone"]
                if "corpus_tau" in s:
                    below = [k for k in ("corpus_tau", "corpus_frs", "sentence_tau", "sentence_frs") if s[k] < m[k]]
                    if below:
                        print(f"  BELOW MONOTONE: {v} on {sname}: {', '.join(below)}")


if __name__ == "__main__":
    sys.exit(main())
