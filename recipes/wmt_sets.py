"""WMT validation/test sets for the recipes, from the archives sacreBLEU names, without sacreBLEU's download.

sacreBLEU fetches its test sets itself, from statmt.org, with no way to point it at a mirror; a cluster without
internet (or one with XLPOS_MIRROR, see lib.sh `xl_fetch`) needs the recipe to download the archive. This script
tells the recipe which archive and which files in it make a set, from sacreBLEU's own catalogue (so every
`-t NAME` sacreBLEU knows keeps working), and turns an SGML file of it into one sentence per line exactly as
sacreBLEU does (FakeSGMLDataset._convert_format: the text of every line that starts with `<seg `, whitespace
collapsed, entities left as they are), so that the references are the ones sacreBLEU users score against.

    python recipes/wmt_sets.py locate wmt14/full en-de   # URL, source file, reference file (one per line)
    python recipes/wmt_sets.py text dir/test-full/newstest2014-deen-src.en.sgm > test.en

`locate` exits with status 3 for a set that is not one archive of SGML or plain-text files (sacreBLEU's XML and
TSV sets, several archives): the recipe then runs sacreBLEU itself, which needs the internet.
"""
from __future__ import annotations

import re
import sys

NOT_AN_ARCHIVE_SET = 3
_SEG = re.compile(r"<seg.*?>(.*)</seg>.*?")  # sacreBLEU's pattern, so the text matches its own extraction


def locate(name: str, pair: str) -> list[str]:
    """[URL, source file, reference file] of sacreBLEU's set `name` for `pair` (paths inside the archive)."""
    from sacrebleu.dataset import DATASETS
    from sacrebleu.dataset.fake_sgml import FakeSGMLDataset
    from sacrebleu.dataset.plain_text import PlainTextDataset

    if name not in DATASETS:
        raise SystemExit(f"error: sacreBLEU knows no test set '{name}' (sacrebleu --list shows them)")
    dataset = DATASETS[name]
    if pair not in dataset.langpairs:
        raise SystemExit(f"error: sacreBLEU's test set '{name}' has no language pair {pair} "
                         f"(it has {', '.join(sorted(k for k in dataset.langpairs if '-' in k))})")
    files = dataset.langpairs[pair]
    if (not isinstance(dataset, (FakeSGMLDataset, PlainTextDataset)) or len(dataset.data) != 1 or len(files) != 2
            or not dataset.data[0].endswith((".tgz", ".tar.gz"))):
        sys.exit(NOT_AN_ARCHIVE_SET)
    return [dataset.data[0], files[0], files[1]]


def text(path: str) -> None:
    """One sentence per line on stdout: the segments of an SGML file, or the lines of a plain one."""
    # Read as sacreBLEU reads it (text mode, UTF-8, universal newlines), so the line structure is the same too.
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not path.endswith(".sgm"):
                    print(line.rstrip())
                elif line.startswith("<seg "):
                    print(re.sub(r"\s+", " ", _SEG.sub(r"\1", line).strip()))
    except UnicodeDecodeError as e:
        raise SystemExit(f"error: {path}: not valid UTF-8 ({e.reason})") from None
    except FileNotFoundError:
        raise SystemExit(f"error: {path}: file not found") from None


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "locate":
        print("\n".join(locate(argv[1], argv[2])))
    elif len(argv) == 2 and argv[0] == "text":
        text(argv[1])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
