"""The neural BTG reorderer against the linear one on the same files: Tanaka En->Ja and Ja->En, as % of the gap.

Oracles are the pipeline's: eflomal + grow-diag-final-and on train+dev (benchmarks/reorderer_enja.py's `prepare`,
cached in --work), `--attach-null right` for the English source and `left` for the Japanese one. For each
direction and seed, both kinds are trained by `xlpos-prep train-reorderer` in a child process (wall seconds, peak
RSS) on the same lines and reorder the same evaluation lines in this process:

  --eval-split tune   train on the first 49,000 training lines, score lines 49,001-50,000 (choosing settings)
  --eval-split dev    train on all 50,000, score the 500 dev sentences (the figure to report, once)

Scores: corpus Kendall tau and fuzzy reordering score (xlpos_prep.metrics) and the share of the monotone -> oracle
tau distance closed, (tau - tau_monotone) / (1 - tau_monotone), as reorderer_enja.py and the README define it.
Beside them, the BTG ceiling: the scores of the BTG permutation closest to each oracle (xlpos_prep.oracle's
btg_closest_order), which no reorderer whose output is a BTG permutation can pass. `--kinds ""` prints only it.
`--second-alignment`: the labels' own noise. The same sentences are aligned again (eflomal samples from
/dev/urandom, so a second run is an independent draw; cached in WORK/second-alignment) and the oracle built from that
alignment, its ties in source order, is scored as if it were a reorderer against the first: how well one draw of the
pipeline's oracle predicts another. Every order is then also scored on the pairs both draws order the same way
(`agreed`): how much of the reordering that the labels agree on a reorderer finds.
Speed: warm reordering of the evaluation lines in this process, one thread (OMP/OPENBLAS/MKL_NUM_THREADS=1 are set
before numpy loads), sentences per second of wall time, median of --speed-repeats passes, word caches cleared.

Models are written to WORK/models/KIND-TAG.DIRECTION.PART.npz (PART train = 50k, train49000) and reused when present,
so benchmarks/reorderer_stress.py with the same --work finds the same 50k models under its naming.

    python benchmarks/reorderer_neural.py --work work/neural --eval-split tune --seeds 1 \\
        --neural-args "--threads 1 --epochs 8"
    python benchmarks/reorderer_neural.py --work work/neural --eval-split dev --seeds 1,2 --json dev.json
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # per-core speed; the training children get their threads from --threads

import argparse  # noqa: E402
import json  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import reorderer_enja as enja  # noqa: E402

DIRECTIONS = {"en-ja": ("en", "right"), "ja-en": ("ja", "left")}  # source language, the pipeline's attach-null


def train(work: Path, kind: str, tag: str, direction: str, part: str, src: Path, oracle: Path, seed: int,
          extra: list[str]) -> dict:
    models = work / "models"
    models.mkdir(exist_ok=True)
    path = models / f"{kind}-{tag}-s{seed}.{direction}.{part}.npz"
    meta = path.with_suffix(".json")
    if not (path.exists() and meta.exists()):
        seconds, mb = enja.run_child(enja.prep("train-reorderer", "--kind", kind, "--src", str(src), "--oracle",
                                               str(oracle), "--model", str(path), "--seed", str(seed), *extra))
        meta.write_text(json.dumps({"train_s": seconds, "train_mb": mb, "args": extra}))
    return {"path": str(path), "model_mb": path.stat().st_size / 2**20, **json.loads(meta.read_text())}


def measure(model_path: str, sentences: list[list[str]], ranks: list[list[int]], repeats: int
            ) -> tuple[dict, list[list[int]]]:
    """(scores and speed, the orders) of the model on the evaluation lines."""
    from xlpos_prep.metrics import evaluate_orders
    from xlpos_prep.reorderer import load_reorderer
    model = load_reorderer(model_path)
    if hasattr(model, "encoder"):
        from xlpos_prep import btg
        model.reorder_batch(sentences[:10])
        btg.wait_for_compile()
    orders = model.reorder_batch(sentences)
    times = []
    for _ in range(repeats):
        cache = model.encoder._cache if hasattr(model, "encoder") else model.features._cache
        cache.clear()
        t0 = time.perf_counter()
        again = model.reorder_batch(sentences)
        times.append(time.perf_counter() - t0)
        assert again == orders
    out = vars(evaluate_orders(orders, ranks))
    out["sent_per_s"] = len(sentences) / statistics.median(times)
    if hasattr(model, "gains"):
        out["pairs"] = pair_accuracy(model, sentences, ranks, orders)
    return out, orders


def pair_accuracy(model, sentences: list[list[str]], ranks: list[list[int]], orders: list[list[int]]) -> dict:
    """The neural model's pair classifier before the search against the order the search made of it: the share
    of oracle-ordered word pairs (within the model's max_span) each puts right, all pairs and adjacent ones."""
    from xlpos_prep.metrics import ranks_of_order
    right = {"classifier": 0, "order": 0, "adjacent_classifier": 0, "adjacent_order": 0}
    pairs = adjacent = 0
    for start in range(0, len(sentences), 256):
        gains = model.gains(sentences[start:start + 256])[0]
        for b, r in enumerate(ranks[start:start + 256]):
            position = ranks_of_order(orders[start + b])
            for j in range(len(r)):
                for d in range(1, min(j + 1, gains.shape[2])):
                    i = j - d
                    if r[i] == r[j]:
                        continue
                    inverted = r[j] < r[i]
                    classifier = (gains[b, j, d] > 0) == inverted
                    order = (position[j] < position[i]) == inverted
                    pairs += 1
                    right["classifier"] += classifier
                    right["order"] += order
                    if d == 1:
                        adjacent += 1
                        right["adjacent_classifier"] += classifier
                        right["adjacent_order"] += order
    return {k: v / (adjacent if k.startswith("adjacent") else pairs) for k, v in right.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="work/neural", help="cache and output directory")
    parser.add_argument("--data", default=str(enja.DATA))
    parser.add_argument("--directions", default="en-ja,ja-en")
    parser.add_argument("--eval-split", choices=("tune", "dev"), default="tune")
    parser.add_argument("--seeds", default="1", help="training seeds, comma-separated")
    parser.add_argument("--kinds", default="linear,neural", help='comma-separated; "": only the BTG ceiling')
    parser.add_argument("--linear-args", default="", help="extra train-reorderer arguments of the linear model")
    parser.add_argument("--neural-args", default="--threads 1", help="extra train-reorderer arguments (neural)")
    parser.add_argument("--tag", default="default", help="model name part for --neural-args (cache key)")
    parser.add_argument("--decode", default="",
                        help="also score the neural models with other search settings, e.g. "
                             "'prob:0,logodds:0.5,logodds:0.5:2' (gain:invert margin[:chunk weight, for models "
                             "trained with --chunks]; for choosing them on --eval-split tune)")
    parser.add_argument("--align-args", default="",
                        help='extra `xlpos-prep align` options for the oracles, e.g. "--samplers 10" (one --work each)')
    parser.add_argument("--reference-work",
                        help="score against the oracles of this --work (same data, made with other --align-args) "
                             "instead of this run's own: models trained on one alignment's labels, judged by another's")
    parser.add_argument("--second-alignment", action="store_true",
                        help="also score a second, independent alignment's oracle against the first (label noise)")
    parser.add_argument("--speed-repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    from xlpos_prep.metrics import evaluate_orders, monotone_order
    from xlpos_prep.oracle import btg_closest_order, read_oracle

    work = Path(args.work).resolve()
    second = work / "second-alignment"
    align_args = tuple(shlex.split(args.align_args))
    reference = Path(args.reference_work).resolve() if args.reference_work else work
    for attach in ("right", "left"):
        enja.prepare(work, Path(args.data), attach, align_args)
        if reference != work:  # its oracles as that directory's own options make them
            enja.prepare(reference, Path(args.data), attach, recorded_align_args(reference))
        if args.second_alignment:
            enja.prepare(second, Path(args.data), attach, align_args)
    if args.second_alignment:
        print(f"two alignments of the same pairs share {100 * link_f1(work, second):.1f}% of their links (F1)")
    rows = []
    for direction in args.directions.split(","):
        src_lang, attach = DIRECTIONS[direction]
        name = enja.oracle_name(direction, attach)
        train_src = enja.read(work / f"train.{src_lang}")
        train_oracle = enja.read(work / f"train.{name}.oracle")
        if args.eval_split == "tune":
            size = len(train_src) - enja.TUNE_LINES
            part = f"train{size}"
            eval_src = enja.subset(work, f"tune.{src_lang}", train_src[size:])
            judged = train_oracle if reference == work else enja.read(reference / f"train.{name}.oracle")
            eval_oracle = enja.subset(work, f"tune.{name}{'' if reference == work else '.reference'}.oracle",
                                      judged[size:])
            src = enja.subset(work, f"{part}.{src_lang}", train_src[:size])
            oracle = enja.subset(work, f"{part}.{name}.oracle", train_oracle[:size])
        else:
            part = "train"
            eval_src, eval_oracle = work / f"dev.{src_lang}", reference / f"dev.{name}.oracle"
            src, oracle = work / f"train.{src_lang}", work / f"train.{name}.oracle"
        sentences = [line.split() for line in enja.read(eval_src)]
        ranks = read_oracle(str(eval_oracle), [len(s) for s in sentences])
        mono = evaluate_orders([monotone_order(len(s)) for s in sentences], ranks)
        ceiling = vars(evaluate_orders([btg_closest_order(r) for r in ranks], ranks))
        ceiling["gap"] = (ceiling["corpus_tau"] - mono.corpus_tau) / (1 - mono.corpus_tau)
        if args.second_alignment:
            other = enja.read(second / f"train.{name}.oracle")[size:] if args.eval_split == "tune" else \
                enja.read(second / f"dev.{name}.oracle")
            other_ranks = read_oracle(str(enja.subset(second, f"{args.eval_split}.{name}.oracle", other)),
                                      [len(s) for s in sentences])
            agreement = vars(evaluate_orders([sorted(range(len(r)), key=lambda i: (r[i], i)) for r in other_ranks],
                                             ranks))
            agreement["gap"] = (agreement["corpus_tau"] - mono.corpus_tau) / (1 - mono.corpus_tau)
            agreed_mono = agreed_pair_tau([monotone_order(len(s)) for s in sentences], ranks, other_ranks)
            agreement["agreed_pairs"] = agreed_mono["pairs"]
            agreement["agreed_monotone_tau"] = agreed_mono["tau"]
        for seed in (int(s) for s in args.seeds.split(",")):
            row = {"direction": direction, "oracle": name, "split": args.eval_split, "seed": seed,
                   "monotone": vars(mono), "btg_ceiling": ceiling}
            if args.second_alignment:
                row["second_alignment_oracle"] = agreement
            for kind in filter(None, args.kinds.split(",")):
                extra = shlex.split(args.neural_args if kind == "neural" else args.linear_args)
                tag = args.tag if kind == "neural" else "default"
                m = train(work, kind, tag, name, part, src, oracle, seed, extra)
                scores, orders = measure(m["path"], sentences, ranks, args.speed_repeats)
                scores["gap"] = (scores["corpus_tau"] - mono.corpus_tau) / (1 - mono.corpus_tau)
                if args.second_alignment:
                    agreed = agreed_pair_tau(orders, ranks, other_ranks)
                    scores["agreed_tau"] = agreed["tau"]
                    scores["agreed_gap"] = (agreed["tau"] - agreed_mono["tau"]) / (1 - agreed_mono["tau"])
                row[kind] = {**m, **scores}
                if kind == "neural" and args.decode:
                    row["decode"] = decode_variants(m["path"], args.decode, sentences, ranks, mono.corpus_tau)
            rows.append(row)
            print_row(row)
    print("\n=== summary ===")
    for row in rows:
        print_row(row)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


def recorded_align_args(work: Path) -> tuple[str, ...]:
    """The `xlpos-prep align` options a prepared --work was aligned with (none for a directory not yet aligned)."""
    meta = work / "align.json"
    return tuple(json.loads(meta.read_text()).get("align_args", [])) if meta.exists() else ()


def link_f1(work: Path, other: Path) -> float:
    shared = first = second = 0
    for a, b in zip(enja.read(work / "all.en-ja.align"), enja.read(other / "all.en-ja.align")):
        links_a, links_b = set(a.split()), set(b.split())
        shared, first, second = shared + len(links_a & links_b), first + len(links_a), second + len(links_b)
    return 2 * shared / (first + second)


def agreed_pair_tau(orders: list[list[int]], ranks: list[list[int]], other: list[list[int]]) -> dict:
    """Corpus Kendall tau of `orders` over the word pairs that `ranks` and `other` (a second draw) order alike."""
    from xlpos_prep.metrics import agreed_kendall_tau_counts
    counts = [agreed_kendall_tau_counts(o, a, b) for o, a, b in zip(orders, ranks, other)]
    discordant, pairs = sum(c[0] for c in counts), sum(c[1] for c in counts)
    return {"tau": 1 - discordant / pairs if pairs else 1.0, "pairs": pairs}


def decode_variants(model_path: str, spec: str, sentences: list[list[str]], ranks: list[list[int]],
                    mono_tau: float) -> dict:
    from dataclasses import replace

    from xlpos_prep.metrics import evaluate_orders
    from xlpos_prep.neural_reorderer import NeuralReorderer
    from xlpos_prep.reorderer import load_reorderer
    model = load_reorderer(model_path)
    out = {}
    for item in spec.split(","):
        gain, margin, *weight = item.split(":")
        config = replace(model.config, gain=gain, invert_margin=float(margin))
        if weight:
            config = replace(config, chunk_weight=float(weight[0]))
        variant = NeuralReorderer(config, model.weights, model.vocab)
        s = vars(evaluate_orders(variant.reorder_batch(sentences), ranks))
        s["gap"] = (s["corpus_tau"] - mono_tau) / (1 - mono_tau)
        out[item] = s
    return out


def print_row(row: dict) -> None:
    m = row["monotone"]
    print(f"{row['oracle']:11} {row['split']} seed {row['seed']}: monotone tau {m['corpus_tau']:.4f} "
          f"FRS {m['corpus_frs']:.4f}", flush=True)
    c = row["btg_ceiling"]
    print(f"  BTG ceiling tau {c['corpus_tau']:.4f} FRS {c['corpus_frs']:.4f} gap {100 * c['gap']:5.1f}%", flush=True)
    if "second_alignment_oracle" in row:
        a = row["second_alignment_oracle"]
        print(f"  second alignment's oracle tau {a['corpus_tau']:.4f} FRS {a['corpus_frs']:.4f} "
              f"gap {100 * a['gap']:5.1f}%; {a['agreed_pairs']} pairs ordered alike by both draws, "
              f"monotone tau on them {a['agreed_monotone_tau']:.4f}", flush=True)
    for kind in ("linear", "neural"):
        if kind in row:
            s = row[kind]
            print(f"  {kind:7} tau {s['corpus_tau']:.4f} FRS {s['corpus_frs']:.4f} gap {100 * s['gap']:5.1f}%  "
                  f"train {s['train_s']:7.1f} s {s['train_mb']:5.0f} MB  model {s['model_mb']:5.1f} MB  "
                  f"{s['sent_per_s']:7.0f} sent/s (1 thread)", flush=True)
            if "pairs" in s:
                q = s["pairs"]
                print(f"          pairs right: classifier {q['classifier']:.4f}, its BTG order {q['order']:.4f}; "
                      f"adjacent pairs {q['adjacent_classifier']:.4f}, {q['adjacent_order']:.4f}", flush=True)
            if "agreed_tau" in s:
                print(f"          on the agreed pairs: tau {s['agreed_tau']:.4f} gap {100 * s['agreed_gap']:5.1f}%",
                      flush=True)
    for item, s in row.get("decode", {}).items():
        print(f"  neural search {item:12} tau {s['corpus_tau']:.4f} FRS {s['corpus_frs']:.4f} "
              f"gap {100 * s['gap']:5.1f}%", flush=True)


if __name__ == "__main__":
    sys.exit(main())
