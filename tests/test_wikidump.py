"""Dump reading, wikitext cleaning and passage splitting (wikidump.py, passages.py)."""
import bz2
import gzip
import threading
from pathlib import Path
from xml.sax.saxutils import escape

import pytest

from pyterrier_fandom_colbert.data.passages import (
    DumpStats,
    PassageConfig,
    dump_passages,
    section_paragraphs,
    split_sentences,
    text_passages,
)
from pyterrier_fandom_colbert.data.wikidump import clean_wikitext, is_translation, iter_pages

MARKUP = """{{Infobox character
| name = Orrin
| image = [[File:Orrin.png|200px]]
}}
__NOTOC__
'''Orrin''' is a ''smith'' of [[Vel Amara|the castle]] and a [[dragon]]s' friend.<ref name="a">Guide, p. 4</ref> \
He forged the [[Starblade (weapon)|]] in the year 312.<ref name="b" />
[[File:Forge.jpg|thumb|The forge at [[Vel Amara]]]]
<!-- editors: keep this short -->
He is tall &amp; strong&nbsp;today.<small>(citation needed)</small>

== Early life <!--T:2--> ==
{{Quote|Fire remembers.}}
Orrin was born in [[Saltmere]].<br/>He left at 12. See [https://example.org/orrin the official site] or \
https://example.org/raw for more.

{| class="wikitable"
! Year !! Event
|-
| 300 || Born
|}
* First item with [[:Category:Smiths|smiths]]
* Second item {{Dagger}}
<gallery>
Orrin young.png|Young Orrin
</gallery>

=== Later ===
; Fate : He retired.
[[Category:Characters]]
[[de:Orrin]]
"""

CLEAN = """Orrin is a smith of the castle and a dragons' friend. He forged the Starblade in the year 312.
He is tall & strong today.(citation needed)

== Early life ==
Orrin was born in Saltmere.
He left at 12. See the official site or for more.

Year: 300; Event: Born.

First item with smiths
Second item

=== Later ===
Fate: He retired."""


def make_dump(pages, dbname="testwiki", schema="0.11") -> str:
    """A MediaWiki export; pages are (title, ns, page_id, text) or (..., redirect_target)."""
    out = [f'<mediawiki xmlns="http://www.mediawiki.org/xml/export-{schema}/" version="{schema}" xml:lang="en">',
           f"  <siteinfo>\n    <sitename>Test Wiki</sitename>\n    <dbname>{dbname}</dbname>",
           "    <base>https://test.fandom.com/wiki/Main_Page</base>\n  </siteinfo>"]
    for title, ns, page_id, text, *redirect in pages:
        out.append(f"  <page>\n    <title>{escape(title)}</title>\n    <ns>{ns}</ns>\n    <id>{page_id}</id>")
        if redirect:
            out.append(f'    <redirect title="{escape(redirect[0])}" />')
        out.append(f"    <revision>\n      <id>{page_id * 10}</id>\n      <model>wikitext</model>")
        out.append(f'      <text bytes="{len(text)}" xml:space="preserve">{escape(text)}</text>')
        out.append("    </revision>\n  </page>")
    out.append("</mediawiki>\n")
    return "\n".join(out)


def raises_dump_error(match=None):
    """DumpError, caught by its builtin base (ValueError) and checked by name: pytest's doctest collection of the
    package imports wikidump a second time, so the class object a test imports may not be the one raised."""
    return pytest.raises(ValueError, match=match)


PROSE = ("The river folk built the castle of Vel Amara in the third age. " * 12).strip()
PAGES = [
    ("Orrin", 0, 1, MARKUP),
    ("Vel Amara", 0, 2, f"'''Vel Amara''' is a castle.\n\n== History ==\n{PROSE}\n\n== Trivia ==\nIt is cold. "
                        "Snow falls there in every month of the year and the lake never thaws."),
    ("Castle", 0, 3, "#REDIRECT [[Vel Amara]]"),
    ("Old castle", 0, 4, "Moved.", "Vel Amara"),
    ("Talk:Orrin", 1, 5, PROSE),
    ("Vel Amara/de", 0, 6, PROSE),
    ("Stub", 0, 7, "{{Stub}}\nA short page.\n[[Category:Stubs]]"),
    ("AC/DC", 0, 8, PROSE),
]


@pytest.fixture()
def dump_xml(tmp_path) -> Path:
    path = tmp_path / "testwiki_pages_current.xml"
    path.write_text(make_dump(PAGES), encoding="utf-8")
    return path


def test_clean_wikitext_every_markup_type():
    assert clean_wikitext(MARKUP) == CLEAN


def test_clean_wikitext_details():
    assert clean_wikitext("A [[w:c:other:Page|label]] and [[Help:Editing]].") == "A label and Help:Editing."
    assert clean_wikitext("<span style='x'>Kept</span> <math>x^2</math> gone") == "Kept gone"
    assert clean_wikitext("Line one\n{{Template only line}}\nLine two") == "Line one\nLine two"
    assert clean_wikitext("Before\n{|\n|cell\n|}\nAfter") == "Before\n\ncell.\n\nAfter"  # a table: its own paragraph
    assert clean_wikitext("<center>Unclosed <span style='c'>text") == "Unclosed text"


def test_translation_subpages():
    assert [is_translation(t) for t in ["A/de", "A/pt-br", "A/en", "AC/DC", "Part 1/2", "A/ending", "/de"]] == \
        [True, True, True, False, False, False, False]


def test_pages_and_skipping(dump_xml):
    pages = list(iter_pages(dump_xml))
    assert [p.title for _, p in pages] == [p[0] for p in PAGES]
    site, orrin = pages[0]
    assert (site.dbname, site.base_url, orrin.page_id, orrin.revid) == ("testwiki", "https://test.fandom.com/wiki/",
                                                                      1, 10)
    assert orrin.text == MARKUP
    stats = DumpStats()
    passages = list(dump_passages(dump_xml, stats=stats))
    assert sorted({p.title for p in passages}) == ["AC/DC", "Orrin", "Vel Amara"]
    assert stats.skipped == {"redirect": 2, "namespace": 1, "translation": 1, "stub": 1}
    assert (stats.pages, stats.articles, stats.passages) == (8, 3, len(passages))
    assert stats.bytes_read == dump_xml.stat().st_size
    stats = DumpStats()
    list(dump_passages(dump_xml, PassageConfig(min_page_words=0, skip_translations=False, namespaces=(0, 1)),
                       stats))
    assert stats.skipped == {"redirect": 2}


def test_passage_fields(dump_xml):
    passages = list(dump_passages(dump_xml))
    assert [p.doc_id for p in passages if p.page_id == 1] == ["testwiki-1-0", "testwiki-1-1"]
    first = passages[0]
    assert (first.title, first.wiki, first.url, first.section, first.revid) == \
        ("Orrin", "testwiki", "https://test.fandom.com/wiki/Orrin", "", 10)
    assert passages[0].text == CLEAN.split("\n\n")[0].replace("\n", " ")
    assert next(p for p in passages if p.title == "AC/DC").url == "https://test.fandom.com/wiki/AC/DC"
    # under 20 words, "Orrin was born ... for more." joins the next paragraph of its section; the "Later" section
    # holds only a 3-word fragment: appended to the previous passage, keeping its own heading
    assert passages[1].text == ("Early life. Orrin was born in Saltmere. He left at 12. See the official site or for "
                                "more. Year: 300; Event: Born. First item with smiths Second item Later. "
                                "Fate: He retired.")
    assert passages[1].section == "Early life"


def words(n, word="word"):
    return " ".join([word] * n)


def test_cutting_near_equal_at_sentence_boundaries():
    cfg = PassageConfig(target_words=10, max_words=15, min_words=3)
    s = [f"S{i} {words(3)} end." for i in range(4)]  # 5 words each: W = 20 -> n = 2, cut at 10 words
    assert [t for _, t in text_passages(" ".join(s), cfg)] == [f"{s[0]} {s[1]}", f"{s[2]} {s[3]}"]
    long = words(40) + "."  # one 40-word sentence over max_words: cut at word boundaries into 4 x 10
    assert [len(t.split()) for _, t in text_passages(long, cfg)] == [10, 10, 10, 10]


def test_cutting_properties_on_random_paragraphs():
    import random
    rng = random.Random(0)
    cfg = PassageConfig()
    for _ in range(50):
        sentences = [f"S{i} " + words(rng.randint(3, 40)) + "." for i in range(rng.randint(1, 30))]
        text = " ".join(sentences)
        out = [t for _, t in text_passages(text, cfg)]
        assert " ".join(out) == text  # nothing lost, order kept, cuts only between sentences
        assert all(len(t.split()) <= cfg.max_words for t in out)
        assert all(t.endswith(".") for t in out)
        sizes = [len(t.split()) for t in out]
        for i, n in enumerate(sizes):  # a short passage is left only when no neighbour can take it
            if n < cfg.min_words:
                assert all(sizes[k] + n > cfg.max_words for k in (i - 1, i + 1) if 0 <= k < len(sizes))


def test_heading_prefix_pseudo_heading_and_merging():
    cfg = PassageConfig(target_words=10, max_words=15, min_words=3, heading_max_words=3)
    text = ("Lead sentence of six words here.\n\n"
            "== Rewards ==\nPrizes:\n\nYou get one silver coin.\n\n"
            "== Trivia ==\nEight words sit in this one line here.\n\nIt rains.\n\n"
            "== Notes ==\nShort one.")
    assert text_passages(text, cfg) == [
        ("", "Lead sentence of six words here."),
        ("Rewards", "Rewards. Prizes: You get one silver coin."),
        # "It rains." (2 < 3 words) joins the previous passage of its section; "Short one." has no neighbour in
        # its section and goes to the previous passage, keeping its own heading
        ("Trivia", "Trivia. Eight words sit in this one line here. It rains. Notes. Short one."),
    ]
    no_prefix = PassageConfig(target_words=10, max_words=15, min_words=3, heading_prefix=False)
    assert text_passages("== A ==\nOne two three four.", no_prefix) == [("A", "One two three four.")]


def test_sections_and_sentences():
    assert section_paragraphs("== A ==\n\n== B ==\nx\ny\n\nz") == [("B", [["x", "y"], ["z"]])]
    assert split_sentences("He met Mr. Orrin at 5 p.m. on Monday. Then (later) he left? \"Yes.\" Done") == \
        ["He met Mr. Orrin at 5 p.m. on Monday.", "Then (later) he left?", "\"Yes.\"", "Done"]


def test_config_validation_and_json():
    with pytest.raises(ValueError, match="min_words"):
        PassageConfig(target_words=10, max_words=5)
    cfg = PassageConfig(target_words=100, namespaces=[0, 4])
    assert cfg.namespaces == (0, 4)
    assert PassageConfig.from_json(cfg.to_json()) == cfg


def _7z(path: Path, data: bytes, preset: int = 6) -> Path:
    import py7zr
    out = path.with_suffix(".xml.7z")
    with py7zr.SevenZipFile(out, "w", filters=[{"id": py7zr.FILTER_LZMA2, "preset": preset}]) as z:
        z.writestr(data, "testwiki_pages_current.xml")
    return out


def test_compressed_formats_give_identical_passages(dump_xml, tmp_path):
    data = dump_xml.read_bytes()
    (tmp_path / "d.xml.bz2").write_bytes(bz2.compress(data))
    (tmp_path / "d.xml.gz").write_bytes(gzip.compress(data))
    plain = list(dump_passages(dump_xml))
    for path in [tmp_path / "d.xml.bz2", tmp_path / "d.xml.gz", _7z(tmp_path / "d", data)]:
        stats = DumpStats()
        assert list(dump_passages(path, stats=stats)) == plain, path
        assert stats.bytes_read == len(data)


def test_7z_stream_in_chunks_and_stop_early(tmp_path):
    import base64
    import random
    rng = random.Random(1)
    # ~1.8 MB of incompressible text: over py7zr's 1 MiB read block of 7z data, so it must come in several chunks
    pages = [(f"Page {i}", 0, i + 1, " ".join(base64.b64encode(rng.randbytes(900)).decode() + "." for _ in range(50)))
             for i in range(30)]
    path = _7z(tmp_path / "big", make_dump(pages).encode(), preset=1)
    from pyterrier_fandom_colbert.data.wikidump import xml_chunks
    sizes = [len(c) for c in xml_chunks(path)]
    assert len(sizes) > 1 and sum(sizes) == len(make_dump(pages).encode())
    first = next(iter(iter_pages(path)))  # abandon the generator after one page: the worker thread must end
    assert first[1].title == "Page 0"
    del first
    import gc
    gc.collect()
    assert not [t for t in threading.enumerate() if t.name.startswith("7z:")]


def test_malformed_xml_names_file_and_position(tmp_path):
    text = make_dump(PAGES)
    bad_line = text[: text.index("<title>Castle</title>")].count("\n") + 1
    path = tmp_path / "bad.xml"
    path.write_text(text.replace("<title>Castle</title>", "<title>Castle</titel>"), encoding="utf-8")
    seen = []
    with raises_dump_error() as err:
        for _, page in iter_pages(path):
            seen.append(page.title)
    assert seen == ["Orrin", "Vel Amara"]  # the pages before the error still come out
    assert type(err.value).__name__ == "DumpError" and err.value.line == bad_line
    assert str(path) in str(err.value) and f"line {bad_line}" in str(err.value)


@pytest.mark.parametrize("kind", ["xml", "bz2", "gz", "7z"])
def test_truncated_input_is_a_named_error(tmp_path, kind):
    data = make_dump(PAGES).encode()
    if kind == "7z":
        full = _7z(tmp_path / "t", data).read_bytes()
    else:
        full = {"xml": lambda d: d, "bz2": bz2.compress, "gz": gzip.compress}[kind](data)
    path = tmp_path / f"t.{kind}"
    path.write_bytes(full[: len(full) * 2 // 3])
    with raises_dump_error(r"t\." + kind) as err:
        list(iter_pages(path))
    assert type(err.value).__name__ == "DumpError"
    assert ("line" in str(err.value)) if kind == "xml" else ("truncated" in str(err.value))


def test_not_a_dump(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(b"PK\x03\x04zip")
    with raises_dump_error("not a MediaWiki XML export"):
        list(iter_pages(path))


def test_real_dump_has_no_markup_left():
    p = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikis" / "pokeclickerwiki_pages_current.xml.bz2"
    if not p.exists():
        pytest.skip(f"shared data not available: {p}")
    import re
    stats = DumpStats()
    passages = list(dump_passages(p, stats=stats))
    assert stats.pages == 1453 and stats.skipped["translation"] > 0 and stats.skipped["redirect"] > 0
    markup = re.compile(r"\{\{|\}\}|\[\[|\]\]|<ref|\{\||\|\}|<!--|__[A-Z]+__|'''|https?://|</?[a-z]+[ >/]")
    assert [x.doc_id for x in passages if markup.search(x.text)] == []
    assert not [x.title for x in passages if is_translation(x.title)]
    assert len({x.doc_id for x in passages}) == len(passages)
    cfg = PassageConfig()
    assert all(len(x.text.split()) - len(x.section.split()) <= cfg.max_words for x in passages)


def test_a_huge_page_is_cut_as_it_streams_and_never_held_whole(tmp_path):
    """A .gz of one 12 MB page (issue 42: 300 MB in a 290 KB .gz ran 400 s and 1.9 GB): the reader keeps the first
    max_page_bytes of its wikitext, whole characters and entities, and memory stays far below the page's size."""
    import tracemalloc

    unit = "Grand \u00e9t\u00e9 &amp; [[x]] "  # escaped already: 2-byte characters and an entity to cut around
    head, tail = make_dump([("Huge", 0, 1, "@"), ("Small", 0, 2, "Small page text.")]).split("@")
    path = tmp_path / "huge.xml.gz"
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(head.encode())
        for _ in range(12):
            out.write((unit * 40_000).encode())
        out.write(tail.encode())
    size = 12 * len((unit * 40_000).encode())
    tracemalloc.start()
    try:
        pages = [(p.title, p.text, p.cut_from) for _, p in iter_pages(path, max_page_bytes=100_000)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6_000_000, peak  # (the uncut page alone is 12 MB of text)
    (title, text, cut_from), small = pages
    assert title == "Huge" and cut_from == size and small == ("Small", "Small page text.", 0)
    whole = unit.replace("&amp;", "&") * 40_000
    assert whole.startswith(text) and 100_000 - len(unit.encode()) < len(escape(text).encode()) <= 100_000
    # without a limit the page comes whole; a PassageConfig's limit is counted and named in the stats
    assert [p.cut_from for _, p in iter_pages(tmp_path.joinpath("huge.xml.gz"), max_page_bytes=None)] == [0, 0]
    stats = DumpStats()
    list(dump_passages(path, PassageConfig(max_page_bytes=10_000, min_page_words=1), stats=stats))
    assert (stats.cut_pages, stats.cut_titles[0]) == (1, ("Huge", size, "page bytes"))
    assert "'Huge' (" + f"{size:,} page bytes)" in stats.summary()


def test_text_cap_cuts_every_text_element_at_whole_characters_across_any_chunking():
    import random
    import xml.etree.ElementTree as ET

    from pyterrier_fandom_colbert.data.dumpbytes import TextCap

    body = ("Grand \u00e9t\u00e9 &amp; [[x]] " * 700).encode()
    doc = b'<a><text x="1">' + body + b"</text><textarea>kept whole</textarea><b/><text/><text>short</text></a>"
    rng = random.Random(4)
    for limit in (0, 1, 7, 100, 5000, 10 ** 6):
        for _ in range(20):
            cap, out, pos = TextCap(limit), [], 0
            while pos < len(doc):
                n = rng.randint(1, 3000)
                out.append(cap.feed(doc[pos:pos + n]))
                pos += n
            root = ET.fromstring(b"".join(out) + cap.close())
            text = root[0].text or ""
            assert len(text.encode()) <= limit or limit >= len(body)
            assert body.decode().replace("&amp;", "&").startswith(text)
            assert root[1].text == "kept whole" and (root[4].text or "") == "short"[:limit]
            assert cap.cuts == ({0: len(body)} if limit < len(body) else {}) | ({2: 5} if limit < 5 else {})


def test_a_passage_is_cut_to_max_passage_chars_and_counted(tmp_path):
    """A page of one endless link (issue 42: 203 KB of [[…]] became one passage of 305k tokens)."""
    path = tmp_path / "links.xml"
    path.write_text(make_dump([("Links", 0, 1, "Intro words here. [[" + "ab" * 30_000 + "]]"),
                               ("Fine", 0, 2, PROSE)]), encoding="utf-8")
    stats = DumpStats()
    got = list(dump_passages(path, PassageConfig(min_page_words=1), stats=stats))
    assert max(len(p.text) for p in got) <= PassageConfig().max_passage_chars
    assert stats.cut_passages == 1 and stats.cut_titles == [("Links", 60_018, "passage chars")]
    fine = [p.text for p in got if p.title == "Fine"]
    assert fine == [p.text for p in dump_passages(path, PassageConfig(min_page_words=1, max_passage_chars=None))
                    if p.title == "Fine"]
    with pytest.raises(ValueError, match="max_passage_chars must be a positive number"):
        PassageConfig(max_passage_chars=0)
