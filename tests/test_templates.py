"""Fact templates, wikitables, infoboxes, skipped sections and stub reasons (templates.py, wikitables.py,
infobox.py, passages.py). The wikitext is our own, written in the style of Wikipedia and Fandom pages."""
import json
import time
from pathlib import Path
from xml.sax.saxutils import escape

import pytest

from pyterrier_fandom_colbert.data.passages import (
    READER_VERSION,
    DumpStats,
    EmptyDumpError,
    PassageConfig,
    dump_passages,
    text_passages,
)
from pyterrier_fandom_colbert.data.templates import RENDERERS, parse_call, render_templates
from pyterrier_fandom_colbert.data.wikidump import clean_wikitext, read_page
from pyterrier_fandom_colbert.data.wikitables import tables_to_text

ISSUE = ("{{Infobox character|name=Luke Skywalker|born=19 BBY|species=Human}} Lincoln was {{convert|6|ft|4|in|m}} "
         "tall. He was born on {{birth date|1809|2|12}}.")


def test_issue_example_renders_values_and_keeps_the_infobox_as_facts():
    assert clean_wikitext(ISSUE) == "Lincoln was 6 ft 4 in (1.93 m) tall. He was born on February 12, 1809."
    page = read_page(ISSUE, "Luke Skywalker")
    assert page.facts == (("born", "19 BBY"), ("species", "Human"))  # name == title: left out


@pytest.mark.parametrize("wikitext, shown", [
    # convert: 6 ft 4 in = 76 in = 1.9304 m; one inch is 0.0254 m, so two decimals
    ("{{convert|6|ft|4|in|m}}", "6 ft 4 in (1.93 m)"),
    ("{{Convert|100|km|mi}}", "100 km (62 mi)"),              # 62.137 mi
    ("{{convert|1|km|mi}}", "1 km (0.62 mi)"),                 # two significant figures at least
    ("{{cvt|5|-|10|km}}", "5–10 km (3.1–6.2 mi)"),            # default target for km is mi
    ("{{convert|30|C}}", "30 °C (86 °F)"),                     # 30 * 9/5 + 32
    ("{{convert|1.93|m|ftin}}", "1.93 m (6 ft 4 in)"),         # 75.98 in
    ("{{convert|2|kg|lb|disp=or}}", "2 kg or 4.4 lb"),         # 4.409 lb
    ("{{convert|1,000|m2|sqft|0}}", "1,000 m² (10,764 sq ft)"),  # precision argument: 0 places
    ("{{convert|7|furlong}}", "7 furlong"),                    # unknown unit: shown as written
    ("{{height|ft=6|in=4}}", "6 ft 4 in (1.93 m)"),
    ("{{height|m=1.93}}", "1.93 m (6 ft 4 in)"),
    # dates
    ("{{birth date|1809|2|12}}", "February 12, 1809"),
    ("{{Birth_date|1809|2|12|df=y}}", "12 February 1809"),
    ("{{death date and age|1865|4|15|1809|2|12}}", "April 15, 1865 (aged 56)"),
    ("{{death date and age|1865|2|11|1809|2|12}}", "February 11, 1865 (aged 55)"),  # a day before the birthday
    ("{{birth date and age|1961|8|4}}", "August 4, 1961"),    # no age: it would depend on the day of reading
    ("{{start date|2016|06}}", "June 2016"),
    ("{{end date|1999}}", "1999"),
    ("{{dts|1809|Feb|12}}", "February 12, 1809"),
    ("{{dts|12 February 1809}}", "12 February 1809"),
    ("{{age|1809|2|12|1865|4|15}}", "56"),
    ("a{{age|1809|2|12}}b", "ab"),
    ("{{circa|1850}}", "c. 1850"),
    # names and text
    ("{{lang|fr|Tour Eiffel}}", "Tour Eiffel"),
    ("{{lang-de|Schloss}}", "German: Schloss"),
    ("{{nowrap|10 km}}", "10 km"),
    ("{{small|(2008)}}", "(2008)"),
    ("{{abbr|UK|United Kingdom}}", "UK"),
    ("{{sort|Smith|John Smith}}", "John Smith"),
    ("{{nihongo|Pikachu|ピカチュウ|Pikachu}}", "Pikachu (ピカチュウ, Pikachu)"),
    ("{{frac|1|2}} {{frac|3|1|2}} {{frac|4}}", "1/2 3 1/2 1/4"),
    ("{{flagicon|France}} {{flag|France}}", "France"),
    ("{{flagcountry|Japan}}", "Japan"),
    ("{{hlist|Fire|Water|Grass}}", "Fire, Water, Grass"),
    ("{{marriage|Ann Lee|1990|2000|end=div}}", "Ann Lee (m. 1990; div. 2000)"),
    ("{{tooltip|HP|hit points}}", "HP"),
    ("{{color|red|Danger}}", "Danger"),
    ("a {{!}} b {{snd}} c", "a | b – c"),
    ("{{nowrap|{{convert|5|km|mi}}}}", "5 km (3.1 mi)"),     # nested: innermost first
    ("{{unknown template|x|y=z}} kept", "x kept"),         # the general rule: positional arguments shown
    ("{{unknown template\n|x}}\nkept", "kept"),             # a block call (over lines) is not shown
    ("Ann.{{sfn|Smith|2000}} {{IPA-fr|pa.ʁi}}{{#expr:1+1}} {{Item|sprite.png}}", "Ann."),  # not visible text
])
def test_template_renderers(wikitext, shown):
    assert clean_wikitext(wikitext) == shown


def test_names_are_matched_as_mediawiki_does():
    for spelling in ("Birth date", "birth_date", "Template:Birth  date", "BIRTH DATE"):
        assert clean_wikitext(f"{{{{{spelling}|2000|1|2}}}}") == "January 2, 2000"
    assert parse_call("convert|2=km|1=5").args == ["5", "km"]  # numbered arguments are positional
    assert {"convert", "birth date", "nihongo", "frac", "flag", "lang"} <= set(RENDERERS)


def test_pagename_is_the_title():
    assert render_templates("{{PAGENAME}} is here", "Pallet Town") == "Pallet Town is here"


def test_deeply_nested_templates_stay_linear():
    depth = 20_000
    nested = "{{nowrap|" * depth + "x" + "}}" * depth
    start = time.process_time()  # this process's CPU time: other processes on a busy machine do not count
    assert clean_wikitext(f"a {nested} b") == "a b"  # deeper than MAX_DEPTH: removed by the guard
    table = "{|\n" + "|-\n| rowspan=50 colspan=50 | x || y\n" * 20_000 + "|}"
    rows = tables_to_text(table)
    assert rows.count("\n") > 1000
    assert time.process_time() - start < 30  # ~1.4 s on the loaded 2-core machine


def test_wikitable_rows_with_headers_rowspan_and_colspan():
    table = """Intro.
{| class="wikitable sortable"
|+ Releases
! Year !! Title !! Platforms
|-
| rowspan="2" | 2015 || ''[[Emberfall II|Ashen Crown]]'' || PC
|-
| Tactics || Switch
|-
| 2017 || colspan="2" style="text-align:center" | Cancelled
|-
! Total
| 3 || —
|}
After."""
    assert clean_wikitext(table) == (
        "Intro.\n\nReleases.\nYear: 2015; Title: Ashen Crown; Platforms: PC.\nYear: 2015; Title: Tactics; "
        "Platforms: Switch.\nYear: 2017; Title: Cancelled.\nTotal — Title: 3; Platforms: —.\n\nAfter.")
    assert not any(mark in clean_wikitext(table) for mark in ("{|", "|-", "||", "!!", "[[", "''"))


def test_a_large_table_is_cut_into_passages_between_rows():
    rows = "\n".join(f"|-\n| Item {i} || {i * 10} coins || found in cave {i}" for i in range(200))
    text = clean_wikitext("Items.\n{|\n! Name !! Price !! Where\n" + rows + "\n|}")
    passages = text_passages(text, PassageConfig())
    assert len(passages) > 10 and all(len(p.split()) <= 150 for _, p in passages)
    joined = " ".join(p for _, p in passages)
    assert joined.count("Name: Item") == 200
    assert "Name: Item 199; Price: 1990 coins; Where: found in cave 199." in joined


FANDOM_TOP = """{{Character
|name = Orrin
|image = Orrin.png
|image_size = 250px
|birth_place = [[Vel Amara]]
|species = Dwarf<br />(half)
|affiliation = [[Smiths' Guild]]
|coordinates = {{coord|12|N|5|E}}
|signature = Orrin sig.svg
|colour = #ffcc00
|first_appearance = ''Emberfall''
}}
'''Orrin''' is a smith."""


def test_fandom_infobox_at_the_top_becomes_humanised_facts():
    page = read_page(FANDOM_TOP, "Orrin")
    assert page.text == "Orrin is a smith."
    assert page.facts == (("birth place", "Vel Amara"), ("species", "Dwarf (half)"),
                          ("affiliation", "Smiths' Guild"), ("first appearance", "Emberfall"))
    # the same call lower on the page is an ordinary template (dropped), unless its name says infobox
    assert read_page("Text first.\n" + FANDOM_TOP, "Orrin").facts == ()
    lower = "Text first.\n" + FANDOM_TOP.replace("{{Character", "{{Infobox character")
    assert dict(read_page(lower, "Orrin").facts)["species"] == "Dwarf (half)"


def test_wikipedia_infobox_values_are_rendered_and_portable_infobox_read():
    wp = ("{{Infobox person\n| name = Abraham Lincoln\n| birth_date = {{birth date|1809|2|12}}\n"
          "| height = {{height|ft=6|in=4}}\n| spouse = {{marriage|Mary Todd|1842}}\n}}\nLincoln was a lawyer.")
    assert read_page(wp, "Abraham Lincoln").facts == (
        ("birth date", "February 12, 1809"), ("height", "6 ft 4 in (1.93 m)"), ("spouse", "Mary Todd (m. 1842)"))
    portable = ('<infobox><title source="name"><default>Orrin</default></title>'
                '<data source="born"><label>Born</label><default>Year 312</default></data>'
                '<data source="image"><default>Orrin.png</default></data></infobox>Orrin is a smith.')
    page = read_page(portable, "Orrin")
    assert page.facts == (("born", "Year 312"),) and page.text == "Orrin is a smith."


def _dump(tmp_path: Path, pages) -> Path:
    body = "".join(f"<page><title>{escape(t)}</title><ns>{ns}</ns><id>{i}</id><revision><id>{i}</id>"
                   f"<text>{escape(text)}</text></revision></page>" for i, (t, ns, text) in enumerate(pages, 1))
    path = tmp_path / "testwiki_pages_current.xml"
    path.write_text('<mediawiki><siteinfo><dbname>testwiki</dbname><sitename>Test</sitename>'
                    f'<base>https://test.fandom.com/wiki/Main</base></siteinfo>{body}</mediawiki>', encoding="utf-8")
    return path


PROSE = " ".join(f"Orrin forged blade number {i} in the old forge." for i in range(6))


def test_facts_passage_first_and_boilerplate_sections_left_out(tmp_path):
    text = FANDOM_TOP + " " + PROSE + "\n== Trivia ==\n" + PROSE + "\n== References ==\n" + PROSE + \
        "\n=== Notes on sources ===\nISBN 978-0-00-000000-0 is cited here by many words of bibliography."
    path = _dump(tmp_path, [("Orrin", 0, text)])
    facts = ("Orrin — birth place: Vel Amara; species: Dwarf (half); affiliation: Smiths' Guild; "
             "first appearance: Emberfall")
    stats = DumpStats()
    own = list(dump_passages(path, PassageConfig(facts_in_lead=False), stats))
    assert own[0].text == facts and own[0].doc_id == "testwiki-1-0"
    assert (stats.facts_passages, stats.facts_in_lead, stats.facts) == (1, 0, 4)
    assert [p.section for p in own[1:]] == ["", "Trivia"]  # Trivia is content; References is not
    assert "ISBN" not in " ".join(p.text for p in own)
    # the default: the facts open the lead passage (they fit in max_words together); the rest is unchanged
    stats = DumpStats()
    passages = list(dump_passages(path, PassageConfig(), stats))
    assert passages[0].text == f"{facts}. {own[1].text}" and passages[0].text.startswith(f"{facts}. Orrin is a smith.")
    assert [(p.doc_id, p.section) for p in passages] == [("testwiki-1-0", ""), ("testwiki-1-1", "Trivia")]
    assert [p.text for p in passages[1:]] == [p.text for p in own[2:]]
    assert (stats.facts_passages, stats.facts_in_lead, stats.facts) == (1, 1, 4)
    # a lead of 58 words and 15 words of facts do not fit in 60: the facts keep their own passage
    small = dict(target_words=60, max_words=60)
    assert [p.text for p in dump_passages(path, PassageConfig(**small))] == \
        [p.text for p in dump_passages(path, PassageConfig(facts_in_lead=False, **small))]
    assert len(own[1].text.split()) == 58 and len(facts.split()) == 15
    kept = list(dump_passages(path, PassageConfig(skip_sections=(), infobox_passage=False)))
    assert [p.section for p in kept] == ["", "Trivia", "References"] and "ISBN" in kept[-1].text


def test_skip_reasons_and_the_empty_dump_error_name_the_option(tmp_path):
    path = _dump(tmp_path, [("Short", 0, "Only a few words here."), ("Gone", 0, "#REDIRECT [[Short]]"),
                            ("Talk:Short", 1, PROSE), ("Mercury", 0, "{{disambiguation}}\n" + PROSE),
                            ("Blank", 0, "{{Stub}}\n[[Category:X]]")])
    stats = DumpStats()
    assert list(dump_passages(path, PassageConfig(), stats)) == []
    assert dict(stats.skipped) == {"stub": 1, "redirect": 1, "namespace": 1, "disambiguation": 1, "empty": 1}
    err = stats.empty_error(path)
    assert isinstance(err, EmptyDumpError) and "--min-words" in str(err) and "1 stub" in str(err) and \
        "1 disambiguation" in str(err) and str(path) in str(err)
    assert [p.title for p in dump_passages(path, PassageConfig(min_page_words=2))] == ["Short"]


def test_source_of_a_dump_with_nothing_to_index_raises_the_counted_error(tmp_path):
    from pyterrier_fandom_colbert.app.folder import SourceStats, open_source

    path = _dump(tmp_path, [("Short", 0, "Few words.")])
    records, _, _ = open_source(path, SourceStats())
    with pytest.raises(EmptyDumpError, match=r"1 stub.*--min-words"):
        list(records)
    records, _, _ = open_source(path, SourceStats(), passage_config=PassageConfig(min_page_words=1))
    assert [r["text"] for r in records] == ["Few words."]


def test_search_folder_from_an_older_reader_asks_for_a_rebuild(tmp_path):
    from pyterrier_fandom_colbert.app.folder import MANIFEST, VERSION, load_manifest

    folder = tmp_path / "wiki"
    folder.mkdir()
    values = {"source": "/data/x_pages_current.xml", "name": "x", "checkpoint": None, "fingerprint": "f",
              "pages": 1, "articles": 1, "passages": 1, "tokens": 1, "seconds": {}, "bytes": 1,
              "format": "pfc-search-folder", "version": VERSION}
    (folder / MANIFEST).write_text(json.dumps(values))
    with pytest.raises(ValueError, match=r"older dump reader.*pfc index /data/x_pages_current.xml .*--overwrite"):
        load_manifest(folder)
    (folder / MANIFEST).write_text(json.dumps({**values, "reader": READER_VERSION}))
    assert load_manifest(folder).reader == READER_VERSION
    (folder / MANIFEST).write_text(json.dumps({**values, "source": "irds:fandom-qa/sample"}))
    assert load_manifest(folder).reader is None  # passages from a release: no reader involved


def test_pfc_index_min_words_lowers_the_stub_limit(tmp_path, tiny_bert_dir, capsys):
    from pyterrier_fandom_colbert.app.cli import main
    from pyterrier_fandom_colbert.app.folder import load_manifest

    dump = _dump(tmp_path, [("Short", 0, "A genuine but short article of eight words."),
                            ("Gone", 0, "#REDIRECT [[Short]]")])
    folder = tmp_path / "wiki"
    assert main(["index", str(dump), str(folder), "--checkpoint", tiny_bert_dir, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "nothing to index" in err and "1 redirect, 1 stub" in err and "--min-words" in err
    assert not folder.exists()
    assert main(["index", str(dump), str(folder), "--checkpoint", tiny_bert_dir, "--quiet", "--min-words", "5"]) == 0
    manifest = load_manifest(folder)
    assert (manifest.passages, manifest.reader, manifest.skipped) == (1, READER_VERSION, {"redirect": 1})
    assert main(["index", str(dump), str(tmp_path / "x"), "--quiet", "--min-words", "-1"]) == 2
    assert "--min-words=-1; expected an integer ≥ 0" in capsys.readouterr().err


def test_fandom_corpus_records_the_reader_and_names_older_stores(tmp_path, monkeypatch, caplog):
    from pyterrier_fandom_colbert.data import irds

    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "home"))
    dump = _dump(tmp_path, [("Orrin", 0, FANDOM_TOP + " " + PROSE)])
    monkeypatch.setenv("FANDOM_QA_DUMP_READERTEST", str(dump))
    old = tmp_path / "home" / "fandom-qa" / "readertest" / "passages-0123456789ab"
    old.mkdir(parents=True)
    (old / "config.json").write_text(json.dumps({"config": {}, "source": {}}))  # no reader: version 1
    with caplog.at_level("WARNING", logger="pyterrier_fandom_colbert.data.irds"):
        docs = list(irds.fandom_dataset("readertest", dbname="testwiki").docs_iter())
    assert docs == list(dump_passages(dump)) and docs[0].text.startswith("Orrin — birth place: Vel Amara")
    assert str(old) in caplog.text and "reader version 1" in caplog.text
    new = [p for p in old.parent.iterdir() if p.name.startswith("passages-") and p != old]
    assert json.loads((new[0] / "config.json").read_text())["reader"] == READER_VERSION

    (tmp_path / "stubs").mkdir()
    monkeypatch.setenv("FANDOM_QA_DUMP_STUBS", str(_dump(tmp_path / "stubs", [("Short", 0, "Few words.")])))
    with pytest.raises(EmptyDumpError, match=r"1 stub.*--min-words"):
        list(irds.fandom_dataset("stubs", dbname="testwiki").docs_iter())


ROWS_PAGE = """Where the lantern can be found:
{{Drops/head|Lanterns}}
{{DropRow|[[Ashen Cave|Ashen Cave]]|Rare}}
{{DropRow|Glimmer Marsh|Common<br>{{Star}}}}
{{DropRow|Reef|Pearl <br> Shell}}
|}

{{SellRow|Harbour Market|1,200}}
|}
{{Banner|lanterns}}
Ends here."""


def test_templates_used_as_rows_render_their_positional_arguments_as_rows():
    text = clean_wikitext(ROWS_PAGE)
    lines = text.split("\n")
    assert "Ashen Cave; Rare." in lines  # a run of calls of one template, then a table end
    assert "Glimmer Marsh; Common." in lines  # line break in a cell: a comma; the empty inner call removed
    assert "Reef; Pearl, Shell." in lines  # the spaces around a line break go with it
    assert "Harbour Market; 1,200." in lines  # a single call before a table end
    assert "Lanterns" not in text  # the head template is alone on its line next to other templates: not a row
    assert "lanterns" not in text  # a block call that is no row: left out, as before


def test_an_infobox_list_of_pictures_and_names_keeps_the_names():
    page = read_page("{{Infobox item\n|name=Lantern\n|holders=<div></div>\n*[[File:Ann.png|30px]]Ann\n"
                     "*[[File:Bo (Red).png|30px]]Bo (Red)\n|icon=[[File:L.png|200px]]\n|sprite=l.png\n"
                     "|picture=[[File:L.png|200px]]\n|found=x.jpg\n}}\nText.", "Lantern")
    assert page.facts == (("holders", "Ann, Bo (Red)"),)  # file-only values dropped, by key or by value


def test_a_call_repeated_on_a_page_renders_and_counts_each_time():
    from collections import Counter

    from pyterrier_fandom_colbert.data.templates import FALLBACK_COUNT, all_positional
    from pyterrier_fandom_colbert.data.wikiguard import GONE_MARKUP

    taken = []

    def on_infobox(call, at_top):
        taken.append(call.name)
        return call.name == "infobox x"

    counts: Counter = Counter()
    text = "{{convert|1|km}} or {{convert|1|km}}; {{Gem|Ruby}} {{Gem|Ruby}}\n{{Infobox x|a=1}}\n{{Infobox x|a=1}}"
    out = render_templates(text, "T", on_infobox, all_positional, counts=counts)
    assert out.split("\n")[0] == "1 km (0.62 mi) or 1 km (0.62 mi); Ruby Ruby"
    assert out.split("\n")[1:] == [GONE_MARKUP, GONE_MARKUP]
    assert counts["convert"] == 2 and counts[FALLBACK_COUNT] == 2
    assert taken.count("infobox x") == 2  # every infobox call reaches the callback (its facts are read)


def test_cell_split_matches_the_token_scan_on_random_cells():
    import random

    from pyterrier_fandom_colbert.data.wikitables import _cell, _split_attrs

    def reference(raw: str):  # the token scan over the whole cell: the first pipe outside links
        link, pipe = raw.find("[["), raw.find("|")
        if link < 0 or pipe < link:
            return raw[:pipe], raw[pipe + 1:]
        return _split_attrs(raw, link)

    rng = random.Random(0)
    pieces = ["[[", "]]", "[", "]", "|", "a", " ", "File:x.png", " colspan=2 "]
    for _ in range(20000):
        raw = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 10)))
        if "|" not in raw:
            continue
        attrs, text = reference(raw)
        assert _cell(raw, False)[1] == text.strip().lstrip("!|").strip(), raw
        assert _cell(raw, False)[3] == (2 if "colspan=2" in attrs else 1), raw
