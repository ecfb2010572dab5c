"""A synthetic parallel corpus with systematic, nested reordering, for testing the pipeline end to end.

The source is English-like (SVO, prepositions, adjectives before nouns, relative clauses and prepositional
phrases after the noun, complement clauses after the verb); the target is head-final and Japanese-like (SOV,
postpositions, verb-final clauses, relative clauses and prepositional modifiers before the noun, adjectives before
the noun, case particles). A small probabilistic grammar generates one tree per sentence; the tree is linearised
head-initial for the source and head-final for the target, and a fixed lexicon maps every source word to
made-up target words. Because the generator knows the tree, it also writes the gold word alignment and the gold
reordering of every sentence.

Alignment is deliberately not one-to-one:
- source-only words: the articles "the"/"a" and the relative pronoun "that" have no translation;
- target-only words: case particles ("ga" subject, "wo" object, "no" genitive on noun-modifying phrases);
- one-to-many: some verbs translate to a stem plus the light verb "shita";
- many-to-one: the multi-word prepositions "in front of" and "next to" translate to one postposition.

Gold order (`{split}.gold-order`): the source indices in target order, lader's `order` format. Source words with
no translation are placed right before their right neighbour (the last word of a sentence: right after its left
neighbour), which is what `xlpos-prep oracle --attach-null right` gives them, so a perfect reorderer trained on
oracle ranks from the gold alignment reproduces the gold order.
"""
from __future__ import annotations

import argparse
import logging
import os
import random
from dataclasses import dataclass, field

from .io import SEED, atomic_output, declare_files, int_option

logger = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")

# Target function words with no source counterpart, or shared by many source words.
SUBJECT_PARTICLE = "ga"
OBJECT_PARTICLE = "wo"
GENITIVE_PARTICLE = "no"
QUOTATIVE = "tte"  # translation of the complementizer "that"
LIGHT_VERB = "shita"  # second target word of some verbs ("studied" -> "benkyo shita")
TARGET_FUNCTION_WORDS = (SUBJECT_PARTICLE, OBJECT_PARTICLE, GENITIVE_PARTICLE, QUOTATIVE, LIGHT_VERB, "。")

NOUNS = ("man woman boy girl child teacher student doctor farmer king queen dog cat bird horse fish mouse house "
         "park garden river school city village forest mountain table chair book letter picture song car train "
         "bridge road tree flower window door box ship island lake field kitchen market church castle friend "
         "soldier painter baker").split()
ADJECTIVES = ("big small old young red blue green happy sad tall short quiet noisy clever brave lazy strange "
              "beautiful dark bright cold warm heavy famous").split()
TRANSITIVE_VERBS = ("saw liked chased found helped visited painted built opened carried watched followed called "
                    "met bought sold loved feared ate read wrote washed pushed pulled").split()
INTRANSITIVE_VERBS = "slept ran laughed cried smiled danced sang waited swam arrived fell jumped".split()
COMPLEMENT_VERBS = "said thought knew believed heard hoped".split()
PREPOSITIONS = [(p,) for p in "in on near with behind under above beside across".split()]
PREPOSITIONS += [("in", "front", "of"), ("next", "to")]
ADVERBS = "quickly slowly quietly happily often yesterday today again".split()
NULL_DETERMINERS = ("the", "a")  # no target counterpart
ALIGNED_DETERMINERS = ("this", "every", "some")
RELATIVE_PRONOUN = "that"  # no target counterpart in relative clauses ...
COMPLEMENTIZER = "that"  # ... but translated by QUOTATIVE in complement clauses
LIGHT_VERB_EVERY = 3  # every 3rd verb of the lexicon takes the light verb

_CONSONANTS = "k s t n h m y r w g z d b p".split()
_VOWELS = "a i u e o".split()
_LEXICON_SEED = 20200705  # the lexicon is fixed: corpora generated with different --seed share it


def build_lexicon() -> dict[tuple[str, ...], tuple[str, ...]]:
    """Source word (or multi-word preposition) -> target words. Fixed, independent of the corpus seed."""
    source_units: list[tuple[str, ...]] = [
        (w,) for w in (NOUNS + ADJECTIVES + TRANSITIVE_VERBS + INTRANSITIVE_VERBS + COMPLEMENT_VERBS + ADVERBS
                       + list(ALIGNED_DETERMINERS))]
    source_units += PREPOSITIONS
    source_vocab = {w for unit in source_units for w in unit} | set(NULL_DETERMINERS) | {RELATIVE_PRONOUN, "."}
    taken = set(TARGET_FUNCTION_WORDS) | source_vocab
    rng = random.Random(_LEXICON_SEED)
    lexicon: dict[tuple[str, ...], tuple[str, ...]] = {}
    for unit in source_units:
        while True:
            word = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.choice((2, 2, 3))))
            if rng.random() < 0.2:
                word += "n"
            if word not in taken:
                taken.add(word)
                break
        lexicon[unit] = (word,)
    verbs = TRANSITIVE_VERBS + INTRANSITIVE_VERBS + COMPLEMENT_VERBS
    for k, verb in enumerate(verbs):
        if k % LIGHT_VERB_EVERY == 0:
            lexicon[(verb,)] = lexicon[(verb,)] + (LIGHT_VERB,)
    lexicon[(COMPLEMENTIZER,)] = (QUOTATIVE,)
    for article in NULL_DETERMINERS:
        lexicon[(article,)] = ()
    lexicon[(".",)] = ("。",)
    return lexicon


@dataclass(eq=False)
class Leaf:
    """A translation unit: source words and their target words (either side may be empty)."""

    src: tuple[str, ...]
    tgt: tuple[str, ...]


@dataclass(eq=False)
class Node:
    """A constituent; the same children are listed in source order and in target order.

    A child with no source words appears only in `tgt_children` (a particle), one with no target words only in
    `src_children` (an article).
    """

    src_children: list["Node | Leaf"] = field(default_factory=list)
    tgt_children: list["Node | Leaf"] = field(default_factory=list)


@dataclass(frozen=True)
class SyntheticPair:
    """One generated sentence pair with what the generator knows about it."""

    src: list[str]
    tgt: list[str]
    alignment: list[tuple[int, int]]  # (source index, target index), 0-based, sorted
    gold_order: list[int]  # source indices in target order (a permutation of range(len(src)))


def _leaves(node: Node | Leaf, side: str) -> list[Leaf]:
    if isinstance(node, Leaf):
        return [node]
    children = node.src_children if side == "src" else node.tgt_children
    return [leaf for child in children for leaf in _leaves(child, side)]


def linearize(tree: Node) -> SyntheticPair:
    """Source and target sentences, gold alignment and gold order of a generated tree."""
    src: list[str] = []
    src_start: dict[int, int] = {}
    for leaf in _leaves(tree, "src"):
        src_start[id(leaf)] = len(src)
        src.extend(leaf.src)
    tgt: list[str] = []
    alignment: list[tuple[int, int]] = []
    aligned_order: list[int] = []
    for leaf in _leaves(tree, "tgt"):
        if leaf.src:  # translated unit: every source word aligns to every target word of the unit
            start = src_start[id(leaf)]
            sources = list(range(start, start + len(leaf.src)))
            aligned_order.extend(sources)
            alignment.extend((i, len(tgt) + j) for i in sources for j in range(len(leaf.tgt)))
        tgt.extend(leaf.tgt)
    return SyntheticPair(src, tgt, sorted(alignment), attach_unaligned(len(src), aligned_order))


def attach_unaligned(n: int, aligned_order: list[int]) -> list[int]:
    """Insert the source words missing from `aligned_order` next to their neighbours (lader's attach-right).

    An unaligned word goes right before its right neighbour (which is placed first, so runs of unaligned words
    keep their source order); unaligned words at the end of the sentence go right after their left neighbour.
    """
    order = list(aligned_order)
    placed = set(order)
    if not order:
        return list(range(n))
    last_aligned = max(placed)
    for i in range(n - 1, -1, -1):
        if i not in placed and i < last_aligned:
            order.insert(order.index(i + 1), i)
            placed.add(i)
    for i in range(last_aligned + 1, n):
        order.insert(order.index(i - 1) + 1, i)
    return order


class Grammar:
    """The probabilistic grammar; `depth` counts embeddings (PP, relative and complement clauses)."""

    def __init__(self, rng: random.Random, max_depth: int = 3):
        self.rng = rng
        self.max_depth = max_depth
        self.lexicon = build_lexicon()

    def word(self, *src: str) -> Leaf:
        return Leaf(tuple(src), self.lexicon[tuple(src)])

    def choice(self, words: list[str] | tuple[str, ...]) -> Leaf:
        return self.word(self.rng.choice(words))

    def sentence(self) -> Node:
        clause = self.clause(0)
        period = self.word(".")
        return Node([clause, period], [clause, period])

    def clause(self, depth: int) -> Node:
        # S -> NP VP  |  target: NP ga VP (the VP is verb-final)
        subject, vp = self.noun_phrase(depth), self.verb_phrase(depth)
        return Node([subject, vp], [subject, Leaf((), (SUBJECT_PARTICLE,)), vp])

    def verb_phrase(self, depth: int) -> Node:
        rng = self.rng
        kinds, weights = ["transitive", "intransitive"], [0.6, 0.2]
        if depth < self.max_depth:
            kinds.append("complement")
            weights.append(0.2)
        kind = rng.choices(kinds, weights)[0]
        if kind == "complement":
            # V that S  |  target: S tte V  (an SVO clause inside an inverted VP: nested inversion)
            verb, comp, clause = self.choice(COMPLEMENT_VERBS), self.word(COMPLEMENTIZER), self.clause(depth + 1)
            return Node([verb, comp, clause], [clause, comp, verb])
        verb = self.choice(TRANSITIVE_VERBS if kind == "transitive" else INTRANSITIVE_VERBS)
        pp = self.prep_phrase(depth + 1, attributive=False) if depth < self.max_depth and rng.random() < 0.3 else None
        adverb = self.choice(ADVERBS) if rng.random() < 0.2 else None
        src: list[Node | Leaf] = [verb]
        tgt: list[Node | Leaf] = []
        if pp is not None:
            tgt.append(pp)
        if kind == "transitive":
            # V NP [PP] [Adv]  |  target: [PP] NP wo [Adv] V
            obj = self.noun_phrase(depth)
            src.append(obj)
            tgt += [obj, Leaf((), (OBJECT_PARTICLE,))]
        src += [c for c in (pp, adverb) if c is not None]
        tgt += ([adverb] if adverb is not None else []) + [verb]
        return Node(src, tgt)

    def noun_phrase(self, depth: int) -> Node:
        # Det Adj* N [PP] [Rel]  |  target: [Rel] [PP no] Det Adj* N
        rng = self.rng
        det = self.choice(NULL_DETERMINERS if rng.random() < 0.85 else ALIGNED_DETERMINERS)
        adjectives = [self.choice(ADJECTIVES) for _ in range(rng.choices((0, 1, 2), (0.55, 0.35, 0.10))[0])]
        noun = self.choice(NOUNS)
        can_embed = depth < self.max_depth
        pp = self.prep_phrase(depth + 1, attributive=True) if can_embed and rng.random() < 0.25 else None
        rel = self.relative_clause(depth + 1) if can_embed and rng.random() < 0.2 else None
        head = [det, *adjectives, noun]
        src = head + [c for c in (pp, rel) if c is not None]
        tgt = [c for c in (rel, pp) if c is not None] + [c for c in head if c.tgt]
        return Node(src, tgt)

    def prep_phrase(self, depth: int, attributive: bool) -> Node:
        # P NP  |  target: NP P (+ "no" when the phrase modifies a noun)
        prep = self.word(*self.rng.choice(PREPOSITIONS))
        np = self.noun_phrase(depth)
        tgt: list[Node | Leaf] = [np, prep]
        if attributive:
            tgt.append(Leaf((), (GENITIVE_PARTICLE,)))
        return Node([prep, np], tgt)

    def relative_clause(self, depth: int) -> Node:
        that = Leaf((RELATIVE_PRONOUN,), ())
        if self.rng.random() < 0.6:
            # subject relative: that VP  |  target: VP (verb-final)
            vp = self.verb_phrase(depth)
            return Node([that, vp], [vp])
        # object relative: that NP V  |  target: NP ga V
        subject, verb = self.noun_phrase(depth), self.choice(TRANSITIVE_VERBS)
        return Node([that, subject, verb], [subject, Leaf((), (SUBJECT_PARTICLE,)), verb])


def split_seed(seed: int, split: str) -> str:
    # A string seed is hashed with SHA-512 by `random`, so it is stable across runs and Python versions.
    return f"xlpos-synth:{seed}:{split}"


def generate_split(count: int, seed: int, split: str, min_len: int = 4, max_len: int = 25, max_depth: int = 3,
                   exclude: set[str] | None = None, progress: bool = False) -> list[SyntheticPair]:
    """`count` distinct sentence pairs with `min_len` to `max_len` source words, none whose source is in `exclude`."""
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= --min-len <= --max-len, got {min_len} and {max_len}")
    if min_len > 25 or max_len < 4:
        raise ValueError(f"the grammar makes sentences of about 4-25 words; --min-len {min_len} "
                         f"--max-len {max_len} leaves nothing to generate")
    grammar = Grammar(random.Random(split_seed(seed, split)), max_depth=max_depth)
    seen = set(exclude or ())
    pairs: list[SyntheticPair] = []
    attempts = 0
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=count, desc=f"synth {split}", unit="sent", leave=False)
    while len(pairs) < count:
        attempts += 1
        if attempts > 200 * count + 10_000:
            raise ValueError(f"could only generate {len(pairs)} distinct {split} sentences of {min_len}-{max_len} "
                             f"words; ask for fewer or widen the length range")
        pair = linearize(grammar.sentence())
        key = " ".join(pair.src)
        if not min_len <= len(pair.src) <= max_len or key in seen:
            continue
        seen.add(key)
        pairs.append(pair)
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    return pairs


def generate_corpus(sizes: dict[str, int], seed: int, min_len: int = 4, max_len: int = 25, max_depth: int = 3,
                    progress: bool = False) -> dict[str, list[SyntheticPair]]:
    """All splits, with no source sentence shared between splits.

    Valid and test are generated first and train avoids them, so the evaluation sets of a seed do not change
    when only the training size does.
    """
    corpus: dict[str, list[SyntheticPair]] = {}
    used: set[str] = set()
    for split in sorted(sizes, key=lambda s: (s == "train", s)):
        corpus[split] = generate_split(sizes[split], seed, split, min_len, max_len, max_depth, used, progress)
        used.update(" ".join(p.src) for p in corpus[split])
    return {split: corpus[split] for split in sizes}


def write_split(out_dir: str, split: str, pairs: list[SyntheticPair], gold: bool = True) -> None:
    """`{split}.src`, `{split}.tgt` and, with `gold`, `{split}.gold-align` (Pharaoh) and `{split}.gold-order`."""
    files = {"src": lambda p: " ".join(p.src), "tgt": lambda p: " ".join(p.tgt)}
    if gold:
        files["gold-align"] = lambda p: " ".join(f"{i}-{j}" for i, j in p.alignment)
        files["gold-order"] = lambda p: " ".join(map(str, p.gold_order))
    for suffix, render in files.items():
        with atomic_output(os.path.join(out_dir, f"{split}.{suffix}")) as f:
            for pair in pairs:
                f.write(render(pair) + "\n")


def run_synth(args: argparse.Namespace) -> int:
    sizes = {"train": args.train, "valid": args.valid, "test": args.test}
    for split, n in sizes.items():
        if n < 1:
            raise ValueError(f"--{split} must be at least 1, got {n}")
    corpus = generate_corpus(sizes, args.seed, args.min_len, args.max_len, args.max_depth, progress=True)
    for split, pairs in corpus.items():
        write_split(args.out_dir, split, pairs, gold=not args.no_gold)
        words = sum(len(p.src) for p in pairs)
        logger.info("%s: %d sentence pairs, %.1f source words per sentence", split, len(pairs), words / len(pairs))
    logger.info("wrote %s/{%s}.{src,tgt%s}", args.out_dir, ",".join(SPLITS),
                "" if args.no_gold else ",gold-align,gold-order")
    return 0


def configure_synth(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out-dir", required=True, help="output directory (created if missing)")
    count = int_option(1, 10_000_000)
    parser.add_argument("--train", type=count, default=10000, help="training sentence pairs (default 10000)")
    parser.add_argument("--valid", type=count, default=500, help="validation sentence pairs (default 500)")
    parser.add_argument("--test", type=count, default=500, help="test sentence pairs (default 500)")
    parser.add_argument("--seed", type=SEED, default=1, help="random seed; the same seed gives the same corpus")
    length = int_option(1, 1000)
    parser.add_argument("--min-len", type=length, default=4, help="minimum source words per sentence (default 4)")
    parser.add_argument("--max-len", type=length, default=25, help="maximum source words per sentence (default 25)")
    parser.add_argument("--max-depth", type=int_option(0, 20), default=3,
                        help="maximum embedding depth of prepositional, relative and complement clauses (default 3)")
    parser.add_argument("--no-gold", action="store_true", help="do not write the gold alignments and orders")
    parser.epilog = """examples:
  xlpos-prep synth --out-dir data/synth
  xlpos-prep synth --out-dir data/synth --train 20000 --valid 300 --test 300 --seed 7

writes {train,valid,test}.src (English-like SVO), .tgt (head-final, Japanese-like), .gold-align (Pharaoh i-j,
0-based) and .gold-order (source indices in target order, lader's order format)."""
    parser.set_defaults(run=run_synth)
    declare_files(parser, output_dirs=("out_dir",), derived_outputs=_synth_outputs)


def _synth_outputs(args: argparse.Namespace) -> list[tuple[str, str]]:
    suffixes = ("src", "tgt") if args.no_gold else ("src", "tgt", "gold-align", "gold-order")
    return [("--out-dir", os.path.join(args.out_dir, f"{split}.{suffix}")) for split in SPLITS for suffix in suffixes]
