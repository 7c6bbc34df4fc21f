"""Hostile and messy wikitext: the linear-time guard (wikiguard.py, wikidump.clean_page) and the rules that keep
removed markup from leaving residue in passages."""
import logging
import re
from xml.sax.saxutils import escape

import pytest

from pyterrier_fandom_colbert.data import wikidump
from pyterrier_fandom_colbert.data.passages import DumpStats, PassageConfig, dump_passages, text_passages
from pyterrier_fandom_colbert.data.wikidump import clean_page, clean_wikitext
from pyterrier_fandom_colbert.data.wikiguard import GONE_MARKUP, neutralise, neutralise_lines

MARKUP = """{{Infobox character
| name = Orrin
}}
'''Orrin''' is a ''smith'' of [[Vel Amara|the castle]].<ref name="a">Guide, p. 4</ref> He forged the [[Starblade]].
[[File:Forge.jpg|thumb|The forge at [[Vel Amara]]]]
<!-- editors: keep this short -->
He is tall &amp; strong&nbsp;today.<small>(citation needed)</small>

== Early life <!--T:2--> ==
{{Quote|Fire remembers.}}
Orrin was born in [[Saltmere]].<br/>He left at 12. See [https://example.org/orrin the official site].
* First item with [[:Category:Smiths|smiths]]
* Second item {{Dagger}}
[[Category:Characters]]
"""


def make_dump(pages) -> str:
    """A MediaWiki export of (title, ns, page_id, text) pages."""
    out = ['<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11" xml:lang="en">',
           "<siteinfo><sitename>Test Wiki</sitename><dbname>testwiki</dbname>",
           "<base>https://test.fandom.com/wiki/Main_Page</base></siteinfo>"]
    for title, ns, page_id, text in pages:
        out.append(f"<page><title>{escape(title)}</title><ns>{ns}</ns><id>{page_id}</id><revision>"
                   f"<id>{page_id * 10}</id><text>{escape(text)}</text></revision></page>")
    out.append("</mediawiki>\n")
    return "\n".join(out)

# ------------------------------------------------------------------------------------ hostile pages finish
# Each took minutes before the pre-pass (mwparserfromhell backtracks over every unclosed construct: quadratic).
# The expected texts follow from the rules: an opener that never closes is dropped, the text after it is kept.


@pytest.mark.timeout(30)
def test_unterminated_templates():
    assert clean_wikitext("{{a|b=" * 10000) == "a|b=" * 10000
    assert clean_wikitext("{{a|b=" * 50000) == "a|b=" * 50000


@pytest.mark.timeout(30)
def test_unclosed_refs():
    assert clean_wikitext("<ref>" * 50000) == ""
    assert clean_wikitext("<ref>x" * 50000) == "x" * 50000


@pytest.mark.timeout(30)
def test_other_unclosed_constructs():
    assert clean_wikitext('<ref name="' * 10000) == '<ref name="' * 10000  # not a tag: text, as MediaWiki shows it
    assert clean_wikitext("<p>" * 20000 + "end") == "end"
    assert clean_wikitext("[[a|[[b]]" * 10000) == "a|b" * 10000
    assert clean_wikitext("{{{a|" * 10000) == "a|" * 10000
    assert clean_wikitext("<!--" * 20000) == ""  # an unclosed comment hides the rest of the page


# ------------------------------------------------------------------------------------ the pre-pass


def gone(text: str) -> str:
    return text.replace(GONE_MARKUP, "@")


def test_neutralise_removes_matched_templates_and_drops_unmatched_openers():
    assert gone(neutralise("a {{b|c={{d|e}}|f}} g")) == "a @ g"
    assert gone(neutralise("a {{{arg|{{t}}}}} b")) == "a @ b"
    assert gone(neutralise("a {{b|c {{d}} e")) == "a @b|c @ e"  # outer unclosed, inner closed
    assert gone(neutralise("a }} b {{c}}} d")) == "a @ b @@ d"  # stray closers and the odd brace are debris
    assert gone(neutralise("a [[b|c [[d]] e")) == "a @b|c [[d]] e"
    assert gone(neutralise("a [https://x.org y] [https://z.org\nw]")) == "a [https://x.org y] @https://z.org\nw]"


def test_neutralise_tags():
    assert gone(neutralise("a<ref name=x>{{cite|b}}</ref> c<ref name=y/> d")) == "a@ c@ d"
    assert gone(neutralise("a <span>b <div>c</div> d")) == "a @b <div>c</div> d"
    assert gone(neutralise("a <b x=\"1>c")) == "a &lt;b x=\"1>c"  # incomplete tag: text
    assert gone(neutralise("x<y and <br> z")) == "x&lt;y and <br> z"


def test_neutralise_leaves_raw_text_and_comments_alone():
    assert gone(neutralise("<nowiki>{{a [[b <ref></nowiki> {{c}}")) == "<nowiki>{{a [[b <ref></nowiki> @"
    assert gone(neutralise("<!-- {{a [[b --> c")) == "<!-- {{a [[b --> c"
    assert gone(neutralise("a <math>{{</math> b")) == "a @ b"
    assert neutralise(f"a{GONE_MARKUP}b") == "ab"  # the mark cannot come from the input


def test_neutralise_lines_cuts_outside_links_and_comments():
    text = "one two three\nfour five [[x\ny]] six\n<!-- c\nd -->\nend"
    pieces = neutralise_lines(text, 10)
    assert "".join(pieces) == neutralise(text)
    assert pieces == ["one two three", "\nfour five [[x\ny]] six", "\n<!-- c\nd -->", "\nend"]
    # a link that never closes does not stop the cutting for good (after twice the size, any line break will do)
    pieces = neutralise_lines("[[x " + "a b c d e\n" * 10, 10)
    assert len(pieces) == 6 and max(map(len, pieces)) <= 2 * 10 + len("a b c d e\n")


# ------------------------------------------------------------------------------------ the guard


def test_nul_characters_do_not_end_the_page():
    assert clean_wikitext("a\x00b [[c]] d") == "ab c d"  # mwparserfromhell stops at a NUL


def test_size_guard_uses_the_fallback_cleaner():
    page = clean_page(MARKUP, max_chars=10)
    assert page.fallback == "size"
    parsed = clean_page(MARKUP)
    assert parsed.fallback is None
    # the fallback cleaner is rougher, but on ordinary markup it gives the same prose
    assert page.text.replace("\n\n", "\n") == parsed.text.replace("\n\n", "\n")


def test_time_budget_parses_the_first_run_and_falls_back_for_the_rest(monkeypatch):
    monkeypatch.setattr(wikidump, "RUN_CHARS", 20)
    text = "First [[a|line]].\nSecond [[b]] line.\n== H ==\nThird ''line''."
    assert clean_page(text, time_budget=None) == (
        "First line.\nSecond b line.\n== H ==\nThird line.", None)
    page = clean_page(text, time_budget=0)
    assert page.fallback == "time"
    assert page.text == "First line.\nSecond b line.\n== H ==\nThird line."


def test_single_line_over_the_run_limit_goes_to_the_fallback(monkeypatch):
    monkeypatch.setattr(wikidump, "MAX_RUN_CHARS", 30)
    text = "Short line.\n" + "A [[long|very long]] line " * 3
    page = clean_page(text)
    assert page.fallback == "size"
    assert page.text == "Short line.\n" + "A very long line " * 2 + "A very long line"


def test_bad_guard_settings():
    with pytest.raises(ValueError, match="max_chars"):
        clean_page("x", max_chars=-1)
    with pytest.raises(ValueError, match="page_time_budget"):
        PassageConfig(page_time_budget=0)
    assert PassageConfig.from_json(PassageConfig(page_time_budget=None).to_json()).page_time_budget is None


def test_guarded_pages_are_counted_and_reported(tmp_path, caplog):
    prose = "The river folk built the castle of Vel Amara in the third age. " * 5
    path = tmp_path / "testwiki_pages_current.xml"
    path.write_text(make_dump([("Small", 0, 1, prose), ("Huge", 0, 2, prose * 4), ("Also huge", 0, 3, prose * 4)]),
                    encoding="utf-8")
    stats = DumpStats()
    with caplog.at_level(logging.WARNING, logger="pyterrier_fandom_colbert.data.passages"):
        passages = list(dump_passages(path, PassageConfig(max_page_chars=len(prose) + 10), stats))
    assert {p.title for p in passages} == {"Small", "Huge", "Also huge"}
    assert stats.guarded == {"size": 2} and stats.guarded_titles == ["Huge", "Also huge"]
    assert "fallback cleaner" in caplog.text and "Huge" in caplog.text


# ------------------------------------------------------------------------------------ residue of removed markup


def test_empty_parentheses_of_removed_templates_go():
    assert clean_wikitext("'''Paris''' ({{IPA-fr|pa.ʁi}}; {{lang-fr|Paris}}) is a city.") == \
        "Paris (French: Paris) is a city."
    assert clean_wikitext("'''Paris''' ({{IPA-fr|pa.ʁi}}; {{respell|x}}) is a city.") == "Paris is a city."
    assert clean_wikitext("Lyon ( {{IPA|x}} , {{audio|y}} ; ) is old.") == "Lyon is old."
    assert clean_wikitext("Nice (<ref>x</ref>) too.") == "Nice too."


def test_parentheses_keep_their_words():
    assert clean_wikitext("'''Ann''' ({{IPA|x}}, {{respell|A}}; born 1990) sings.") == "Ann (born 1990) sings."
    assert clean_wikitext("Born in Lyon (French: {{IPA|x}}).") == "Born in Lyon (French)."
    # parentheses that held no removed markup are the author's
    prose = "Marked (*) items; call f() now; ( ; ) stays."
    assert clean_wikitext(prose) == prose


def test_no_space_or_doubled_separator_where_markup_was_removed():
    assert clean_wikitext("It costs 5 {{coin}}. Then A, {{x}}, B and C {{y}} ; D") == "It costs 5. Then A, B and C; D"
    assert clean_wikitext("Keep a space : here .") == "Keep a space : here ."  # typed by the author


def test_links_and_templates_with_unbalanced_quotes_leave_nothing():
    assert clean_wikitext("A ''b [[File:X.png|thumb|It''s big]] c'' d.") == "A b c d."
    assert clean_wikitext("A ''b {{cite web|title=x'''y|url=z}} c'' d.") == "A b c d."
    assert clean_wikitext("x '''a {{cite book|title=''b}} c''' d") == "x a c d"
    assert clean_wikitext("Intro ''[[Image:A.jpg|thumb|caption [[x]] ''y]] tail") == "Intro tail"


def test_html_entities_are_decoded_everywhere():
    text = ("[[Caf&eacute;]] and [[Caf&eacute;|caf&eacute;]] &amp; [[Pok&eacute;mon (game)|]] "
            "<nowiki>&lt;3</nowiki> [https://x.org A&#x2014;B]\n== Q &amp; A ==\nx")
    expected = "Café and café & Pokémon <3 A\u2014B\n== Q & A ==\nx"
    assert clean_wikitext(text) == expected
    assert clean_wikitext(text, max_chars=0) == expected  # the fallback cleaner too


@pytest.mark.timeout(30)
def test_passages_of_hostile_text_finish():
    # short heading lines are prefixed to the next paragraph; joined one by one, 50,000 of them took quadratic time
    assert text_passages("a\n\nb:\n\nc\n\nEnd.") == [("", "a. b: c. End.")]
    assert text_passages("a\n\n" * 50000 + "End.")[-1][1].endswith(" a. a. End.")
    assert len(text_passages("Mr. X " * 20000)) > 1  # abbreviations: the last word is found in bounded time
    assert text_passages("." * 100000) == [("", "." * 100000)]  # a run of dots is scanned once


def test_drop_comments_marks_comments_but_not_raw_text_and_keeps_the_cuts():
    text = "a <!--T:1--> b <nowiki><!--kept--></nowiki>\n[[c|d<!--x-->]]\n" + "e <!--y-->\n" * 50
    assert gone(neutralise("a <!--T:1--> b <nowiki><!--kept--></nowiki>", drop_comments=True)) == \
        "a @ b <nowiki><!--kept--></nowiki>"
    kept, dropped = neutralise_lines(text, 40), neutralise_lines(text, 40, drop_comments=True)
    assert len(kept) == len(dropped) > 1  # the same cuts: each piece is the kept one with its comments marked
    for piece, marked in zip(kept, dropped):
        rest = piece.split("<nowiki>")
        assert marked.split("<nowiki>")[0] == re.sub(r"<!--.*?-->", GONE_MARKUP, rest[0], flags=re.S)
    # the reader's output does not change: the renderer drops a mark as it drops a comment
    for page in ("== H == <!--T:5-->\nx <!--c--> y.", "; a <!--c-->: b", "* one<!--c-->\n* two", "[[a|<!--c-->b]]"):
        assert clean_wikitext(page) == clean_wikitext(page.replace("<!--c-->", "").replace("<!--T:5-->", ""))
