"""Input edges: invisible-only queries, lone surrogates, bidi controls in rendered explanations, degenerate TF-IDF
corpora. Each error names the query or document at fault."""
import html
import re

import numpy as np
import pandas as pd
import pytest

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.explain import render
from pyterrier_fandom_colbert.frames import check_queries, check_record, check_texts

INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
             "\u2066", "\u2067", "\u2068", "\u2069", "\x00"]
BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")


def queries(*texts):
    # object columns: pandas' default string columns are Arrow-backed where pyarrow is installed (it comes with
    # the [ray] extra), and Arrow cannot hold a lone surrogate at all
    return pd.DataFrame({"qid": [f"q{i}" for i in range(len(texts))], "query": pd.Series(list(texts), dtype=object)})


@pytest.mark.parametrize("char", INVISIBLE)
def test_invisible_only_query_is_empty(char):
    with pytest.raises(ValueError, match=r"empty or non-text query for qid\(s\) \['q1'\]"):
        check_queries(queries("dragons", f" {char}{char} \t"))
    assert check_queries(queries(f"drag{char}ons")) == [f"drag{char}ons"]  # with a word it is a query


def test_lone_surrogates_are_named():
    with pytest.raises(ValueError, match=r"query of qid\(s\) \['q1'\] holds a lone surrogate"):
        check_queries(queries("fine", "broken \ud800 text"))
    # in a Python str even a UTF-16 pair is two lone surrogates (it cannot be encoded); "\U0001f600" is the character
    docs = pd.DataFrame({"docno": ["d1", "d2", "d3", "d4"],
                         "text": pd.Series(["ok", "x\udfff", "\ud83d\ude00", "\U0001f600 ok"], dtype=object)})
    with pytest.raises(ValueError, match=r"'text' of docno\(s\) \['d2', 'd3'\] holds a lone surrogate"):
        check_texts(docs)
    assert check_texts(docs.iloc[[0, 3]]) == ["ok", "\U0001f600 ok"]
    with pytest.raises(ValueError, match=r"document #4 \(docno 'd9'\) has in its 'body' a lone surrogate"):
        check_record({"docno": "d9", "body": "a\udc80b"}, 4, "body")
    with pytest.raises(ValueError, match=r"document #0 \(docno 'd\\udc80'\) has in its docno a lone surrogate"):
        check_record({"docno": "d\udc80", "text": "a"}, 0, "text")


def test_colbert_refuses_them_by_name(tiny_bert_dir):
    colbert = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(dim=8, query_maxlen=8,
                                                                                  doc_maxlen=16))
    scorer = colbert.text_scorer()
    frame = pd.DataFrame([{"qid": "q1", "query": "who forged it", "docno": "d1", "text": "Orrin forged it."}])
    assert np.isfinite(scorer(frame)["score"]).all()
    invisible = frame.assign(qid="qx", query="\u200b\u202e\ufeff")
    with pytest.warns(UserWarning, match=r"\['qx'\]"):  # unusable, like an empty query: no rows (one policy for all)
        assert len(scorer(invisible)) == 0
    with pytest.raises(ValueError, match=r"\['qx'\]"):
        colbert.text_scorer(strict=True)(invisible)
    with pytest.raises(ValueError, match=r"\['dx'\] holds a lone surrogate"):
        scorer(frame.assign(docno="dx", text=pd.Series(["Orrin \ud800 forged it."], dtype=object)))


def test_tfidf_refuses_surrogates_and_duplicates_and_takes_any_docnos(tmp_path):
    with pytest.raises(ValueError, match=r"docno 'd2'\) has in its 'text' a lone surrogate"):
        pfc.TfidfIndex.build(tmp_path / "s", [{"docno": "d1", "text": "a"}, {"docno": "d2", "text": "b\ud800"}])
    with pytest.raises(ValueError, match=r"1 docno\(s\) occur more than once: \['d1'\]"):
        pfc.TfidfIndex.build(tmp_path / "dup", [{"docno": "d1", "text": "a dragon"}] * 3)
    with pytest.raises(ValueError, match=r"\['d1'\]"):  # duplicates through the first block of 256, then others
        pfc.TfidfIndex.build(tmp_path / "dup2", [{"docno": "d1", "text": "a"}] * 300 + [{"docno": "d2", "text": "b"}])
    assert list(tmp_path.iterdir()) == []  # no half-built folder left
    # one document, and a last docno unlike the 300 before it (npids once wrote both unreadably)
    one = pfc.TfidfIndex.build(tmp_path / "one", [{"docno": "d1", "text": "the dragon sleeps"}])
    assert one.retriever()(pd.DataFrame({"qid": ["q"], "query": ["dragon"]}))["docno"].tolist() == ["d1"]
    docs = [{"docno": f"doc-{i:04d}", "text": "river"} for i in range(300)] + [{"docno": "zz", "text": "dragon"}]
    odd = pfc.TfidfIndex.build(tmp_path / "odd", docs)
    assert odd.retriever()(pd.DataFrame({"qid": ["q"], "query": ["dragon"]}))["docno"].tolist() == ["zz"]
    two = pfc.TfidfIndex.build(tmp_path / "two", [{"docno": "d1", "text": "dragon"}, {"docno": "d2", "text": "x"}])
    assert two.retriever()(queries("dragon"))["docno"].tolist() == ["d1"]


# -- rendering: a passage cannot reverse the page -------------------------------------------------------------------
def explained_by_hand() -> pd.DataFrame:
    """The columns the renderers read, written by hand: a passage, query, qid and docno full of bidi controls."""
    text = "Orrin \u202eforged the \u2067blade"
    spans = np.array([[m.start(), m.end()] for m in re.finditer(r"\S+", text)])
    return pd.DataFrame([{"qid": "q\u202e1", "query": "who \u202eforged", "docno": "d\u202e1", "text": text,
                          "word_spans": spans, "word_r_abs": np.array([1.0, 3.0, 0.0, 2.0]),
                          "word_r_acc": np.array([0.5, 2.0, 0.0, 1.0]), "word_kde": np.array([0.1, 0.9, 0.2, 0.4]),
                          "answer_span": (int(spans[1][0]), int(spans[1][1]))}])


def test_html_isolates_every_bidi_control():
    frame = explained_by_hand()
    page = render.to_html(frame, title="Why \u202e?")
    assert BIDI.search(page)  # the passage is shown as it is ...
    depth = 0
    for m in re.finditer(r"</?bdi>|[\u202a-\u202e\u2066-\u2069]", page):  # ... but only inside <bdi> isolates
        if m.group() == "<bdi>":
            depth += 1
        elif m.group() == "</bdi>":
            depth -= 1
        else:
            assert depth > 0, f"bidi control outside <bdi> at {m.start()}: {page[m.start() - 40:m.start()]!r}"
    assert depth == 0
    assert not BIDI.search(re.search(r"<title>(.*?)</title>", page).group(1))
    cells = re.findall(r'<td dir="auto"><bdi>(.*?)</bdi></td>', page, flags=re.S)
    assert len(cells) == 3 and all(html.unescape(re.sub(r"<[^>]+>", "", c)) == frame["text"][0] for c in cells)


def test_terminal_strips_bidi_controls():
    row = explained_by_hand().iloc[0]
    for method in ("r_abs", "kde"):
        for color in (False, True):
            out = render.to_terminal(row, method, color=color)
            assert not BIDI.search(out)
    assert render.to_terminal(row, "r_abs", color=False).splitlines()[1] == "Orrin [forged] the [blade]"
