"""The recipes' download, extraction, cleaning and tokenization, run against local copies of the real archives.

Each test builds, in a tmp dir, archives laid out as the real ones (file names, tar.gz members, SGML test sets, the
ASPEC directory tree), serves them through XLPOS_MIRROR from a loopback HTTP server (with Range requests, so that
downloads can resume; the server can cut a transfer midway) or from a local folder, and runs the recipe with
STOP_AFTER=tok: download -> extraction -> cleaning -> tokenization, nothing after. The content is a few sentences
per corpus (plus filler members standing for the other language pairs an archive holds), so a test takes seconds;
what is checked is that every file is found where the real one is and read as the real format is.

Where the layout facts come from:
  WMT14 En-De training archives and their de-en members: fairseq's examples/translation/prepare-wmt14en2de.sh
    (URLS, and CORPORA = training/europarl-v7.de-en, commoncrawl.de-en, training/news-commentary-v9.de-en: the
    Common Crawl archive keeps its files at the top, the others under training/).
  News Commentary v12 (WMT17): the same script with --icml17 reads training/news-commentary-v12.de-en; zh-en sits
    beside it.
  Test sets (URL and file inside the archive): sacreBLEU 2's catalogue (sacrebleu.dataset.DATASETS), e.g. wmt14/full
    = https://statmt.org/wmt14/test-full.tgz, test-full/newstest2014-deen-src.en.sgm. The SGML is WMT's "fake SGML":
    <srcset>/<refset>, <doc ...>, <p>, one <seg id="N">text</seg> per line; only lines starting with "<seg " hold
    text (sacreBLEU's FakeSGMLDataset reads them so). The first segments of newstest2014 and of Europarl and News
    Commentary are quoted as they begin in the real files; the rest is made up.
  ASPEC-JE: ASPEC/ASPEC-JE/{train/train-{1,2,3}.txt, dev/dev.txt, devtest/devtest.txt, test/test.txt}, fields split
    on " ||| " (train: score, document, sentence, ja, en; the others: document, sentence, ja, en), as WAT's
    baseline data preparation reads them; ASPEC-JC is the sibling directory. Document ids here are made up.
  UN Parallel Corpus v1.0: its en-zh archive extracts to en-zh/UNv1.0.en-zh.{en,zh}.
  Multi30k: github.com/multi30k/dataset data/task1/raw/{train,val,test_2016_flickr}.{en,de}.gz (gzip files).
  Tanaka: github.com/odashi/small_parallel_enja {train,dev,test}.{en,ja} (plain text, tokenized).
"""
from __future__ import annotations

import gzip
import io
import os
import random
import re
import subprocess
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import test_recipes as recipes_test
from test_recipes import RECIPES, check_ok


# -------------------------------------------------------------------------------------------------- the mirror
class Mirror:
    """A loopback HTTP server of the files under `root` (path = HOST/PATH of the original URL), answering Range
    requests (bytes=N-) with 206. `cut_once`: paths whose first transfer stops halfway (the connection closes
    with the rest of the announced length missing, as a dropped download does). `ranges=False`: a server that
    ignores Range and always sends the whole file. `requests` records (path, Range header) of every GET."""

    def __init__(self, root: Path, cut_once: set[str] = frozenset(), ranges: bool = True) -> None:
        self.root = root
        self.cut_once = set(cut_once)
        self.ranges = ranges
        self.requests: list[tuple[str, str | None]] = []
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                mirror.requests.append((self.path, self.headers.get("Range")))
                path = mirror.root / self.path.lstrip("/")
                if not path.is_file():
                    self.send_error(404)
                    return
                data = path.read_bytes()
                start = 0
                m = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
                if m and mirror.ranges:
                    start = int(m.group(1))
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                body = data[start:]
                if self.path in mirror.cut_once:
                    mirror.cut_once.discard(self.path)
                    body = body[:len(body) // 2]
                    self.close_connection = True
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def ranges_asked(self, path: str) -> list[int]:
        return [int(r.split("=")[1].rstrip("-")) for p, r in self.requests if p == path and r]


@pytest.fixture
def mirror_root(tmp_path):
    root = tmp_path / "mirror"
    root.mkdir()
    return root


@pytest.fixture
def serve():
    servers = []

    def start(root: Path, **kwargs) -> Mirror:
        servers.append(Mirror(root, **kwargs))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


# -------------------------------------------------------------------------------------------------- fixtures
def lines_bytes(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


def filler(n: int, seed: int) -> list[str]:
    """Lines standing for the language pairs an archive holds besides the one the recipe reads (and making the
    archive large enough that cutting a transfer in half leaves a real prefix)."""
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(10**6)}" for _ in range(12)) for _ in range(n)]


def write_tgz(path: Path, members: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


def sgml(kind: str, setid: str, lang: str, docs: list[tuple[str, list[str]]]) -> bytes:
    """WMT's fake SGML: a src (srcset) or ref (refset) file; docs are (docid, segments)."""
    head = (f'<srcset setid="{setid}" srclang="any">' if kind == "src"
            else f'<refset setid="{setid}" srclang="any" trglang="{lang}">')
    out = [head]
    seg = 0
    for docid, segments in docs:
        out += [f'<doc sysid="ref" docid="{docid}" genre="news" origlang="en">', "<p>"]
        for text in segments:
            seg += 1
            out.append(f'<seg id="{seg}">{text}</seg>')
        out += ["</p>", "</doc>"]
    out.append("</srcset>" if kind == "src" else "</refset>")
    return lines_bytes(out)


def seg_texts(docs: list[tuple[str, list[str]]]) -> list[str]:
    """What sacreBLEU makes of the segments: stripped, whitespace collapsed, entities kept."""
    return [re.sub(r"\s+", " ", t.strip()) for _, segs in docs for t in segs]


def run_recipe(script: str, env: dict) -> subprocess.CompletedProcess:
    """test_recipes' run_recipe with one worker and no wait between download tries."""
    return recipes_test.run_recipe(script, {"WORKERS": "1", "XL_FETCH_WAIT": "0", **env}, timeout=300)


def read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def stopped_before_alignment(work: Path) -> None:
    assert not (work / "reorder").exists() and not (work / "data-bin").exists()


# -------------------------------------------------------------------------------------------------- WMT14 En-De
EUROPARL = [  # (en, de); the first two as the real files begin; an empty pair as Europarl has them
    ("Resumption of the session", "Wiederaufnahme der Sitzungsperiode"),
    ("I declare resumed the session of the European Parliament adjourned on Friday 17 December 1999.",
     "Ich erkläre die am Freitag, dem 17. Dezember unterbrochene Sitzungsperiode des Europäischen Parlaments für "
     "wiederaufgenommen."),
    ("", ""),
    ("Please rise, then, for this minute's silence.", "Ich bitte Sie, sich zu einer Schweigeminute zu erheben."),
]
LONG_EN, LONG_DE = " ".join(["house"] * 250), " ".join(["Haus"] * 250)
COMMONCRAWL = [
    ("Rooms from 49\u00a0€ per night, breakfast included.",
     "Zimmer ab 49\u00a0€ pro Nacht, inklusive Frühstück."),
    (LONG_EN, LONG_DE),  # 250 words: the longest pair the WMT recipes keep (CLEAN_MAX_LEN)
    (LONG_EN + " house", LONG_DE + " Haus"),  # 251: dropped
    ("Line one\u2028line two\x0cand three.", "Zeile eins\u2028Zeile zwei\x0cund drei."),  # separators inside a line
]
NEWS_COMMENTARY_9 = [
    ("$10,000 Gold?", "Gold für 10.000 Dollar?"),
    ("SAN FRANCISCO – It has never been easy to have a rational conversation about the value of gold.",
     "SAN FRANCISCO – Es war noch nie leicht, ein rationales Gespräch über den Wert von Gold zu führen.")]
NEWSTEST2013 = {"en": [("doc1", ["A Republican strategy to counter the re-election of Obama",
                                 "  Tom &amp; Jerry   meet  again. "])],
                "de": [("doc1", ["Eine republikanische Strategie, um der Wiederwahl von Obama entgegenzutreten",
                                 "Tom &amp; Jerry treffen sich wieder."])]}
NEWSTEST2014 = {"en": [("1012-bbc", ["Gutach: Increased safety for pedestrians"]),
                       ("1013-bbc", ["They are not even 100 metres apart.", "\u201cIt works,\u201d he said."])],
                "de": [("1012-bbc", ["Gutach: Noch mehr Sicherheit für Fußgänger"]),
                       ("1013-bbc", ["Sie stehen keine 100 Meter voneinander entfernt.",
                                     "\u201eEs funktioniert\u201c, sagte er."])]}


def build_wmt14(root: Path) -> dict[str, Path]:
    def side(pairs, k):
        return lines_bytes([p[k] for p in pairs])

    archives = {
        "europarl": write_tgz(root / "statmt.org/wmt13/training-parallel-europarl-v7.tgz", {
            "training/europarl-v7.cs-en.cs": lines_bytes(filler(300, 1)),
            "training/europarl-v7.de-en.de": side(EUROPARL, 1),
            "training/europarl-v7.de-en.en": side(EUROPARL, 0),
            "training/europarl-v7.fr-en.fr": lines_bytes(filler(300, 2)),
        }),
        "commoncrawl": write_tgz(root / "statmt.org/wmt13/training-parallel-commoncrawl.tgz", {
            "commoncrawl.de-en.annotation": lines_bytes(["http://example.org/x"] * len(COMMONCRAWL)),
            "commoncrawl.de-en.de": side(COMMONCRAWL, 1),
            "commoncrawl.de-en.en": side(COMMONCRAWL, 0),
            "commoncrawl.fr-en.fr": lines_bytes(filler(50, 3)),
        }),
        "nc": write_tgz(root / "statmt.org/wmt14/training-parallel-nc-v9.tgz", {
            "training/news-commentary-v9.cs-en.cs": lines_bytes(filler(50, 4)),
            "training/news-commentary-v9.de-en.de": side(NEWS_COMMENTARY_9, 1),
            "training/news-commentary-v9.de-en.en": side(NEWS_COMMENTARY_9, 0),
        }),
        "wmt13": write_tgz(root / "statmt.org/wmt13/test.tgz", {
            "test/newstest2013-src.de.sgm": sgml("src", "newstest2013", "de", NEWSTEST2013["de"]),
            "test/newstest2013-src.en.sgm": sgml("src", "newstest2013", "en", NEWSTEST2013["en"]),
            "test/newstest2013-src.fr.sgm": sgml("src", "newstest2013", "fr", [("doc1", ["Une", "Deux"])]),
        }),
        "wmt14": write_tgz(root / "statmt.org/wmt14/test-full.tgz", {
            "test-full/newstest2014-deen-ref.de.sgm": sgml("ref", "newstest2014", "de", NEWSTEST2014["de"]),
            "test-full/newstest2014-deen-ref.en.sgm": sgml("ref", "newstest2014", "en", NEWSTEST2014["en"]),
            "test-full/newstest2014-deen-src.de.sgm": sgml("src", "newstest2014", "de", NEWSTEST2014["de"]),
            "test-full/newstest2014-deen-src.en.sgm": sgml("src", "newstest2014", "en", NEWSTEST2014["en"]),
        }),
    }
    return archives


def test_wmt14_downloads_resume_and_the_real_layout_is_read(tmp_path, mirror_root, serve):
    archives = build_wmt14(mirror_root)
    europarl = "/statmt.org/wmt13/training-parallel-europarl-v7.tgz"
    mirror = serve(mirror_root, cut_once={europarl})
    work = tmp_path / "work"
    out = check_ok(run_recipe("wmt14_en_de.sh", {"WORK": str(work), "XLPOS_MIRROR": mirror.url,
                                                 "STOP_AFTER": "tok"}))
    # the first transfer was cut halfway; the second asked for the rest only, and the archive is whole
    asked = mirror.ranges_asked(europarl)
    assert len(asked) == 1 and 0 < asked[0] < archives["europarl"].stat().st_size, mirror.requests
    assert "resume " in out
    copy = work / "download" / "statmt.org/wmt13/training-parallel-europarl-v7.tgz"
    assert copy.read_bytes() == archives["europarl"].read_bytes() and not Path(f"{copy}.part").exists()
    # only the de-en members were extracted
    extracted = {p.name for p in (work / "download").rglob("*") if p.is_file()}
    assert "europarl-v7.de-en.en" in extracted and "commoncrawl.de-en.de" in extracted
    assert not {"europarl-v7.fr-en.fr", "commoncrawl.fr-en.fr", "newstest2013-src.fr.sgm"} & extracted

    raw, tok = work / "raw", work / "tok"
    for k, lang in enumerate(("en", "de")):
        assert read(raw / f"train.{lang}") == [p[k] for p in EUROPARL + COMMONCRAWL + NEWS_COMMENTARY_9]
        assert read(raw / f"valid.{lang}") == seg_texts(NEWSTEST2013[lang])
        assert read(raw / f"test.{lang}") == seg_texts(NEWSTEST2014[lang])
    assert read(raw / "valid.en")[1] == "Tom &amp; Jerry meet again."  # sacreBLEU's text: entities kept

    # cleaning: the empty pair and the 251-word pair go, the 250-word pair stays; lines stay parallel although
    # some hold line-separator characters (U+2028, form feed)
    train_en, train_de = read(tok / "train.en"), read(tok / "train.de")
    assert len(train_en) == len(train_de) == 8
    assert "clean: kept 8 of 10" in out
    assert max(len(s.split()) for s in train_en) == 250 and LONG_EN in train_en
    assert train_en[0] == "Resumption of the session"
    assert train_de[-2] == "Gold für 10.000 Dollar ?"
    assert read(tok / "test.en")[0] == "Gutach : Increased safety for pedestrians"
    assert len(read(tok / "test.de")) == 3 and len(read(tok / "valid.de")) == 2
    stopped_before_alignment(work)
    assert "STOP_AFTER=tok" in out

    # a rerun finds every step done and downloads nothing
    n = len(mirror.requests)
    check_ok(run_recipe("wmt14_en_de.sh", {"WORK": str(work), "XLPOS_MIRROR": mirror.url, "STOP_AFTER": "tok"}))
    assert len(mirror.requests) == n


def test_wmt14_stop_after_raw_from_a_local_folder_mirror(tmp_path, mirror_root):
    build_wmt14(mirror_root)
    work = tmp_path / "work"
    out = check_ok(run_recipe("wmt14_en_de.sh", {"WORK": str(work), "XLPOS_MIRROR": str(mirror_root),
                                                 "STOP_AFTER": "raw", "DIRECTION": "de-en"}))
    assert read(work / "raw" / "test.de") == seg_texts(NEWSTEST2014["de"])
    assert not (work / "tok" / "train.en").exists() and "STOP_AFTER=raw" in out


def test_missing_file_on_the_mirror_is_named_at_once(tmp_path, mirror_root, serve):
    archives = build_wmt14(mirror_root)
    archives["nc"].unlink()
    mirror = serve(mirror_root)
    proc = run_recipe("wmt14_en_de.sh", {"WORK": str(tmp_path / "w"), "XLPOS_MIRROR": mirror.url,
                                         "STOP_AFTER": "tok", "XL_FETCH_WAIT": "30"})
    assert proc.returncode != 0
    assert (f"{mirror.url}/statmt.org/wmt14/training-parallel-nc-v9.tgz not found (curl exit 22, HTTP 404); "
            "XLPOS_MIRROR must hold it as statmt.org/wmt14/training-parallel-nc-v9.tgz") in proc.stderr
    assert "trying again" not in proc.stderr  # no retries (and no 30 s waits) for a file that is not there


# -------------------------------------------------------------------------------------------------- WMT17 Zh-En
NC12 = [("1929年还是1989年？", "1929 or 1989?"),
        ("巴黎—随着经济危机不断加深和蔓延，整个世界一直在寻找历史上的类似事件。",
         "PARIS – As the economic crisis deepens and widens, the world has been searching for historical analogies."),
        ("我们今天去北京。", "We are going to Beijing today.")]
UN = [("大会，", "The General Assembly,"), ("回顾其以往各项决议。", "Recalling its previous resolutions.")]
NEWSDEV2017 = {"zh": [("d1", ["中国经济增长放缓。"])], "en": [("d1", ["China's economic growth slows."])]}
NEWSTEST2017 = {"zh": [("d1", ["北京今天下雨。", "他们说：“这很好。”"])],
                "en": [("d1", ["It is raining in Beijing today.", "They said: \"This is good.\""])]}


def build_wmt17(root: Path) -> None:
    write_tgz(root / "data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz", {
        "training/news-commentary-v12.de-en.de": lines_bytes(filler(100, 5)),
        "training/news-commentary-v12.de-en.en": lines_bytes(filler(100, 6)),
        "training/news-commentary-v12.zh-en.en": lines_bytes([p[1] for p in NC12]),
        "training/news-commentary-v12.zh-en.zh": lines_bytes([p[0] for p in NC12]),
    })
    write_tgz(root / "data.statmt.org/wmt17/translation-task/dev.tgz", {
        "dev/newsdev2017-enzh-src.en.sgm": sgml("src", "newsdev2017", "en", NEWSDEV2017["en"]),
        "dev/newsdev2017-enzh-ref.zh.sgm": sgml("ref", "newsdev2017", "zh", NEWSDEV2017["zh"]),
        "dev/newsdev2017-zhen-ref.en.sgm": sgml("ref", "newsdev2017", "en", NEWSDEV2017["en"]),
        "dev/newsdev2017-zhen-src.zh.sgm": sgml("src", "newsdev2017", "zh", NEWSDEV2017["zh"]),
    })
    write_tgz(root / "data.statmt.org/wmt17/translation-task/test.tgz", {
        "test/newstest2017-zhen-ref.en.sgm": sgml("ref", "newstest2017", "en", NEWSTEST2017["en"]),
        "test/newstest2017-zhen-src.zh.sgm": sgml("src", "newstest2017", "zh", NEWSTEST2017["zh"]),
        "test/newstest2017-deen-src.de.sgm": sgml("src", "newstest2017", "de", [("d", ["Eins"])]),
    })


def test_wmt17_zh_en_news_commentary_un_layout_and_sgml_sets(tmp_path, mirror_root, serve):
    pytest.importorskip("jieba", reason="Chinese segmentation needs pip install -e '.[recipes]'")
    build_wmt17(mirror_root)
    extra = tmp_path / "extra"  # the UN corpus's en-zh archive extracted as it is
    (extra / "en-zh").mkdir(parents=True)
    (extra / "en-zh" / "UNv1.0.en-zh.zh").write_bytes(lines_bytes([p[0] for p in UN]))
    (extra / "en-zh" / "UNv1.0.en-zh.en").write_bytes(lines_bytes([p[1] for p in UN]))
    (extra / "en-zh" / "README").write_text("United Nations Parallel Corpus\n")
    mirror = serve(mirror_root, cut_once={"/data.statmt.org/wmt17/translation-task/test.tgz"})
    work = tmp_path / "work"
    out = check_ok(run_recipe("wmt17_zh_en.sh", {"WORK": str(work), "XLPOS_MIRROR": mirror.url,
                                                 "EXTRA_PARALLEL_DIR": str(extra), "STOP_AFTER": "tok"}))
    assert mirror.ranges_asked("/data.statmt.org/wmt17/translation-task/test.tgz")
    assert "WARNING: no EXTRA_PARALLEL_DIR" not in out
    raw, tok = work / "raw", work / "tok"
    for k, lang in enumerate(("zh", "en")):
        assert read(raw / f"train.{lang}") == [p[k] for p in NC12 + UN]
        assert read(raw / f"valid.{lang}") == seg_texts(NEWSDEV2017[lang])
        assert read(raw / f"test.{lang}") == seg_texts(NEWSTEST2017[lang])
    # jieba segmented the Chinese (NFKC: the full-width question mark became "?"); every pair kept
    zh = read(tok / "train.zh")
    assert len(zh) == len(read(tok / "train.en")) == 5
    assert zh[2] == "我们 今天 去 北京 。"
    assert zh[0].replace(" ", "") == "1929年还是1989年?"
    assert read(tok / "test.en")[1] == 'They said : " This is good . "'
    stopped_before_alignment(work)


# -------------------------------------------------------------------------------------------------- WAT17 ASPEC
ASPEC_PAIRS = [("私は猫が好きです。", "I like cats."), ("これはペンです。", "This is a pen."),
               ("研究の目的を述べる。", "The purpose of the study is described."),
               ("実験結果を表１に示す。", "The experimental results are shown in Table 1.")]


def build_aspec(top: Path) -> Path:
    je = top / "ASPEC-JE"
    pairs = ASPEC_PAIRS
    (je / "train").mkdir(parents=True)
    for k, part in enumerate(("train-1.txt", "train-2.txt", "train-3.txt")):
        score = (0.9, 0.5, 0.1)[k]
        lines = [f"{score - i / 100:.6f} ||| DOC{k}-{i} ||| {i + 1} ||| {ja} ||| {en}"
                 for i, (ja, en) in enumerate(pairs)]
        (je / "train" / part).write_bytes(lines_bytes(lines))
    for split, chosen in (("dev", pairs[:2]), ("devtest", pairs[1:3]), ("test", pairs[2:])):
        (je / split).mkdir()
        (je / split / f"{split}.txt").write_bytes(lines_bytes(
            [f"{split.upper()}-{i} ||| {i + 1} ||| {ja} ||| {en}" for i, (ja, en) in enumerate(chosen)]))
    jc = top / "ASPEC-JC" / "train"
    jc.mkdir(parents=True)
    (jc / "train.txt").write_bytes(lines_bytes(["JC-0 ||| 1 ||| 猫 ||| 猫"]))
    (top / "README").write_text("ASPEC\n")
    return je


def test_wat17_reads_the_aspec_tree(tmp_path):
    pytest.importorskip("fugashi", reason="Japanese segmentation needs pip install -e '.[recipes]'")
    top = tmp_path / "ASPEC"
    build_aspec(top)
    work = tmp_path / "work"
    check_ok(run_recipe("wat17_ja_en.sh", {"WORK": str(work), "ASPEC_DIR": str(top), "STOP_AFTER": "tok"}))
    raw, tok = work / "raw", work / "tok"
    # train-1 and train-2 (the default ASPEC_TRAIN_FILES), not train-3; dev is valid, test is test
    assert read(raw / "train.ja") == [p[0] for p in ASPEC_PAIRS] * 2
    assert read(raw / "train.en") == [p[1] for p in ASPEC_PAIRS] * 2
    assert read(raw / "valid.en") == [p[1] for p in ASPEC_PAIRS[:2]]
    assert read(raw / "test.ja") == [p[0] for p in ASPEC_PAIRS[2:]]
    ja = read(tok / "train.ja")
    assert len(ja) == 8 and ja[1] == "これ は ペン です 。"
    assert "1" in read(tok / "test.ja")[1].split()  # NFKC: the full-width digit of 表１
    assert read(tok / "valid.en")[1] == "This is a pen ."
    stopped_before_alignment(work)


# -------------------------------------------------------------------------------------------------- Multi30k, Tanaka
MULTI30K = {
    "train": [("Two young, White males are outside near many bushes.",
               "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."),
              ("Several men in hard hats are operating a giant pulley system.",
               "Mehrere Männer mit Schutzhelmen bedienen ein Antriebsradsystem.")],
    "val": [("A group of men are loading cotton onto a truck",
             "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen")],
    "test_2016_flickr": [("A man in an orange hat starring at something.",
                          "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.")]}
MULTI30K_PATH = "raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"


def test_multi30k_gz_files_resume_and_are_tokenized(tmp_path, mirror_root, serve):
    base = mirror_root / MULTI30K_PATH
    base.mkdir(parents=True)
    for name, pairs in MULTI30K.items():
        for k, lang in enumerate(("en", "de")):
            text = lines_bytes([p[k] for p in pairs] + (filler(400, 7) if name == "train" else []))
            (base / f"{name}.{lang}.gz").write_bytes(gzip.compress(text, mtime=0))
    cut = f"/{MULTI30K_PATH}/train.de.gz"
    mirror = serve(mirror_root, cut_once={cut})
    work = tmp_path / "work"
    check_ok(run_recipe("multi30k_en_de.sh", {"WORK": str(work), "XLPOS_MIRROR": mirror.url, "STOP_AFTER": "tok"}))
    assert mirror.ranges_asked(cut)
    assert read(work / "raw" / "train.de")[:2] == [p[1] for p in MULTI30K["train"]]
    assert read(work / "tok" / "train.en")[0] == "Two young , White males are outside near many bushes ."
    assert read(work / "tok" / "valid.de") == ["Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen"]
    assert len(read(work / "tok" / "test.en")) == 1
    stopped_before_alignment(work)


def test_tanaka_downloads_through_the_mirror(tmp_path, mirror_root, serve):
    base = mirror_root / "raw.githubusercontent.com/odashi/small_parallel_enja/master"
    base.mkdir(parents=True)
    corpus = {"train": [("i can 't tell who will arrive first .",
                         "誰 が 一番 に 着 く か 私 に は 分か り ま せ ん 。")] * 3,
              "dev": [("you are very kind .", "あなた は とても 親切 で す 。")],
              "test": [("it is a pen .", "それ は ペン で す 。")]}
    for split, pairs in corpus.items():
        for k, lang in enumerate(("en", "ja")):
            (base / f"{split}.{lang}").write_bytes(lines_bytes([p[k] for p in pairs]))
    mirror = serve(mirror_root, cut_once={"/raw.githubusercontent.com/odashi/small_parallel_enja/master/train.ja"})
    work = tmp_path / "work"
    check_ok(run_recipe("tanaka_ja_en.sh", {"WORK": str(work), "XLPOS_MIRROR": mirror.url, "STOP_AFTER": "tok"}))
    for split, name in (("train", "train"), ("valid", "dev"), ("test", "test")):
        for k, lang in enumerate(("en", "ja")):
            assert read(work / "tok" / f"{split}.{lang}") == [p[k] for p in corpus[name]]
    stopped_before_alignment(work)


# -------------------------------------------------------------------------------------------------- xl_fetch alone
def fetch(url: str, out: Path, mirror: str, tries: int = 3) -> subprocess.CompletedProcess:
    script = f'set -euo pipefail; source "{RECIPES}/lib.sh"; xl_fetch "$1" "$2"'
    env = {**os.environ, "XLPOS_MIRROR": mirror, "XL_FETCH_WAIT": "0", "XL_FETCH_TRIES": str(tries)}
    return subprocess.run(["bash", "-c", script, "_", url, str(out)], env=env, capture_output=True, text=True,
                          timeout=60)


def test_fetch_starts_over_where_it_cannot_resume(tmp_path, mirror_root, serve):
    data = os.urandom(200_000)
    (mirror_root / "example.org").mkdir()
    (mirror_root / "example.org" / "f.tgz").write_bytes(data)
    # a server that ignores Range: the cut transfer cannot be resumed, so the file comes again from its start
    mirror = serve(mirror_root, cut_once={"/example.org/f.tgz"}, ranges=False)
    out = tmp_path / "a" / "f.tgz"
    proc = fetch("https://example.org/f.tgz", out, mirror.url)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == data and "starting it over" in proc.stderr
    # a whole file left as OUT.part (a run killed before the rename): the server answers 416, the file is fetched
    # again rather than trusted
    mirror = serve(mirror_root)
    out = tmp_path / "b" / "f.tgz"
    out.parent.mkdir()
    Path(f"{out}.part").write_bytes(data)
    proc = fetch("https://example.org/f.tgz", out, mirror.url)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == data and mirror.ranges_asked("/example.org/f.tgz") == [len(data)]
    # a complete OUT is never fetched again
    n = len(mirror.requests)
    assert fetch("https://example.org/f.tgz", out, mirror.url).returncode == 0 and len(mirror.requests) == n


def test_fetch_gives_up_after_its_tries_and_a_rerun_resumes(tmp_path, mirror_root, serve):
    data = os.urandom(100_000)
    (mirror_root / "example.org").mkdir()
    (mirror_root / "example.org" / "g.tgz").write_bytes(data)
    mirror = serve(mirror_root, cut_once={"/example.org/g.tgz"})
    out = tmp_path / "g.tgz"
    proc = fetch("https://example.org/g.tgz", out, mirror.url, tries=1)
    assert proc.returncode != 0 and "could not download" in proc.stderr and "rerun to resume" in proc.stderr
    assert not out.exists() and Path(f"{out}.part").stat().st_size == len(data) // 2
    proc = fetch("https://example.org/g.tgz", out, mirror.url, tries=1)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == data and mirror.ranges_asked("/example.org/g.tgz") == [len(data) // 2]


# -------------------------------------------------------------------------------------------------- wmt_sets.py
def test_sgml_text_is_sacrebleus(tmp_path):
    """The recipe's references are what sacreBLEU itself makes of the same SGML file."""
    from sacrebleu.dataset import DATASETS
    sgm = tmp_path / "newstest2014-deen-ref.de.sgm"
    docs = [("a", ["  Erste   Zeile  ", "Tom &amp; Jerry", "<b>fett</b> gedruckt"]), ("b", ["Zweite\tZeile"])]
    sgm.write_bytes(sgml("ref", "newstest2014", "de", docs))
    ours = subprocess.run(["python", str(RECIPES / "wmt_sets.py"), "text", str(sgm)], capture_output=True,
                          text=True, check=True).stdout
    theirs = tmp_path / "sacrebleu.txt"
    DATASETS["wmt14/full"]._convert_format(str(sgm), str(theirs))
    assert ours == theirs.read_text(encoding="utf-8")
    assert ours.splitlines() == seg_texts(docs)


def test_locate_names_sacrebleus_archive_and_files():
    def locate(*args):
        return subprocess.run(["python", str(RECIPES / "wmt_sets.py"), "locate", *args], capture_output=True,
                              text=True)

    proc = locate("wmt14/full", "en-de")
    assert proc.returncode == 0 and proc.stdout.split() == [
        "https://statmt.org/wmt14/test-full.tgz", "test-full/newstest2014-deen-src.en.sgm",
        "test-full/newstest2014-deen-ref.de.sgm"]
    proc = locate("wmt14/full", "en-zh")
    assert proc.returncode == 1 and "has no language pair en-zh" in proc.stderr
    proc = locate("wmt99", "en-de")
    assert proc.returncode == 1 and "knows no test set 'wmt99'" in proc.stderr
    assert locate("wmt22", "en-de").returncode == 3  # an XML set: the recipe leaves it to sacrebleu


def test_stop_after_must_name_a_stage(tmp_path):
    proc = run_recipe("tanaka_ja_en.sh", {"WORK": str(tmp_path / "w"), "STOP_AFTER": "align"})
    assert proc.returncode != 0 and "STOP_AFTER must be raw or tok (or empty), not 'align'" in proc.stderr
