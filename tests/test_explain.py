"""Explanations: R_abs / R_acc against brute force, the KDE against scipy and on a known cluster, word offsets that
round-trip to the original text, the Explainer transformer (text and index paths), and the renderers."""
import re

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
import torch

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.explain import render
from pyterrier_fandom_colbert.explain.relevance import (
    ExplainOptions,
    explain_passage,
    kde_density,
    merge_words,
    relevance_abs,
    relevance_acc,
    single_token_view,
    top_matches,
)
from pyterrier_fandom_colbert.explain.transformer import EXPLANATION_COLUMNS, TOKEN_VIEW_COLUMNS, Explainer
from pyterrier_fandom_colbert.model.scoring import similarity_matrix

CONFIG = dict(dim=16, doc_maxlen=64, query_maxlen=16, score_query_masks=True)  # N_q vectors a query
PASSAGES = ["Emberfall was released in March 2011 for consoles and later for computers.",
            "Zoë visited Ørnvik—twice! The smith Orrin forged a blade there.",
            "Dragons breathe fire over the northern mountains every winter."]
QUERIES = ["when was emberfall released", "who forged the blade"]


def frame(queries=QUERIES, passages=PASSAGES):
    return pd.DataFrame([{"qid": f"q{i}", "query": q, "docno": f"d{j}", "text": p, "extra": 10 * i + j}
                         for i, q in enumerate(queries) for j, p in enumerate(passages)])


@pytest.fixture(scope="module")
def colbert(tiny_bert_dir):
    torch.set_num_threads(2)
    return pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(**CONFIG), device="cpu", batch_size=4)


# -- the maths -------------------------------------------------------------------------------------------------------
def brute_force(sim, d_mask, k):
    """R_abs and R_acc written out with loops: each query row picks its k best allowed tokens one at a time."""
    n_q, length = sim.shape
    r_abs, r_acc = np.zeros(length, dtype=np.int64), np.zeros(length)
    for i in range(n_q):
        taken = []
        for _ in range(min(k, int(sum(d_mask)))):
            best = None
            for pos in range(length):
                if d_mask[pos] and pos not in taken and (best is None or sim[i, pos] > sim[i, best]):
                    best = pos
            taken.append(best)
            r_abs[best] += 1
            r_acc[best] += sim[i, best]
    return r_abs, r_acc


@pytest.mark.parametrize("k", [1, 2, 3, 50])
def test_relevance_equals_brute_force(k):
    rng = np.random.default_rng(k)
    sim = rng.normal(size=(9, 23))
    d_mask = rng.random(23) > 0.25
    positions, values = top_matches(sim, d_mask, k)
    want_abs, want_acc = brute_force(sim, d_mask, k)
    np.testing.assert_array_equal(relevance_abs(positions, 23), want_abs)
    np.testing.assert_allclose(relevance_acc(positions, values, 23), want_acc)
    assert want_abs[~d_mask].sum() == 0 and want_abs.sum() == 9 * min(k, d_mask.sum())


def test_hand_built_embeddings():
    """Query vectors e0, e1; the passage has e0 (word 'alpha'), 0.8e0+0.6e1 ('beta'), e1 ('gamma')."""
    e = np.eye(4, dtype=np.float32)
    q = torch.tensor(e[:2])
    d = torch.tensor(np.stack([e[3], e[3], e[0], 0.8 * e[0] + 0.6 * e[1], e[1], e[3]]))
    sim = similarity_matrix(q, d, "cosine").numpy()
    text = "alpha beta gamma"
    offsets = np.array([[0, 0], [0, 0], [0, 5], [6, 10], [11, 16], [0, 0]])
    ex = explain_passage(sim, np.ones(6, bool), text, offsets, ExplainOptions(k_tilde=2, bandwidth=1.0))
    assert ex.r_abs.tolist() == [0, 0, 1, 2, 1, 0]
    np.testing.assert_allclose(ex.r_acc, [0, 0, 1.0, 1.4, 1.0, 0], atol=1e-6)
    assert ex.word_r_abs.tolist() == [1, 2, 1]
    assert int(np.argmax(ex.kde)) == 3 and text[slice(*ex.answer_span)] == "alpha beta gamma"
    # only one match each: 'beta' is nobody's best
    ex1 = explain_passage(sim, np.ones(6, bool), text, offsets, ExplainOptions(k_tilde=1, bandwidth=1.0))
    assert ex1.r_abs.tolist() == [0, 0, 1, 0, 1, 0]


@pytest.mark.parametrize("rule", ["scott", "silverman"])
def test_kde_equals_scipy(rule):
    from scipy.stats import gaussian_kde

    samples = np.random.default_rng(0).integers(0, 60, size=40).astype(float)
    np.testing.assert_allclose(kde_density(samples, 60, rule), gaussian_kde(samples, rule)(np.arange(60)), rtol=1e-10)


def test_kde_peak_and_span_at_dense_cluster():
    words = [f"w{i}" for i in range(40)]
    text = " ".join(words)
    starts = np.cumsum([0] + [len(w) + 1 for w in words[:-1]])
    offsets = np.array([[0, 0], [0, 0]] + [[s, s + len(w)] for s, w in zip(starts, words)] + [[0, 0]])
    length = len(offsets)
    sim = np.full((12, length), 0.0)
    for i in range(10):                      # ten query vectors match words 30..33 (positions 32..35)
        sim[i, 32 + i % 4], sim[i, 32 + (i + 1) % 4] = 0.9, 0.8
    sim[10, 5], sim[10, 12], sim[11, 20], sim[11, 3] = 0.9, 0.8, 0.9, 0.8   # scattered single matches
    sim[:, 0] = 0.95                          # [CLS] is everyone's best match: it must not pull the density
    ex = explain_passage(sim, np.ones(length, bool), text, offsets, ExplainOptions(k_tilde=3, bandwidth="scott"))
    assert ex.r_abs[0] == 12
    assert 32 <= int(np.argmax(ex.kde)) <= 35
    start, end = ex.answer_span
    inside = set(text[start:end].split())
    assert {"w30", "w31", "w32", "w33"} <= inside and not inside & {"w1", "w3", "w10", "w18"}
    assert ex.answer_tokens[0] <= 33 and ex.answer_tokens[1] >= 35


def test_single_token_view_by_string_and_position():
    sim = np.arange(12.0).reshape(3, 4)
    tokens = ["[Q]", "when", "##ever"]
    assert single_token_view(sim, tokens, "when").tolist() == [4, 5, 6, 7]
    assert single_token_view(sim, tokens, "ever").tolist() == [8, 9, 10, 11]
    assert single_token_view(sim, tokens, 0).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="out of range"):
        single_token_view(sim, tokens, 3)


@pytest.mark.parametrize("bad", [dict(k_tilde=0), dict(k_tilde=1.5), dict(bandwidth=0), dict(bandwidth="wide"),
                                 dict(span_threshold=0)])
def test_bad_options(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        ExplainOptions(**bad)


# -- words and character offsets ------------------------------------------------------------------------------------
TEXTS = {"Zoë visited Ørnvik—twice!": ["Zoë", "visited", "Ørnvik", "—", "twice", "!"],
         "Héloïse's café: naïve… (São Paulo) 3.14%": ["Héloïse", "'", "s", "café", ":", "naïve", "…", "(",
                                                      "São", "Paulo", ")", "3", ".", "14", "%"],
         "  two\tspaces  and\na newline ": ["two", "spaces", "and", "a", "newline"]}


@pytest.mark.parametrize("backbone", ["bert", "roberta"])
def test_word_offsets_round_trip(backbone, tiny_bert_dir, tiny_roberta_dir):
    folder = tiny_bert_dir if backbone == "bert" else tiny_roberta_dir
    tok = pfc.ColBERT.from_pretrained(folder, config=pfc.ColBERTConfig(**CONFIG)).tokenizer
    batch = tok.documents(list(TEXTS), offsets=True)
    for j, (text, expected) in enumerate(TEXTS.items()):
        n = int(batch.lengths[j])
        content = np.zeros(n, bool)
        content[2:n - 1] = True
        word_of, spans = merge_words(text, batch.offsets[j], content)
        assert [text[s:e] for s, e in spans] == expected
        assert word_of[:2].tolist() == [-1, -1] and word_of[-1] == -1
        for pos in range(2, n - 1):          # every piece's characters lie inside its word
            s, e = batch.offsets[j][pos]
            ws, we = spans[word_of[pos]]
            assert (ws <= s and e <= we) or text[s:e].strip() == ""


# -- the transformer ------------------------------------------------------------------------------------------------
def test_columns_kept_and_declared(colbert):
    inp = frame()
    explainer = Explainer(colbert)
    out = explainer(inp)
    assert list(out.columns) == explainer.transform_outputs(list(inp.columns))
    assert list(out.columns[:len(inp.columns)]) == list(inp.columns)
    pd.testing.assert_frame_equal(out[inp.columns], inp)
    for _, row in out.iterrows():
        length = len(row["expl_tokens"])
        assert row["r_abs"].shape == row["r_acc"].shape == row["kde"].shape == (length,)
        assert row["expl_sim"].shape == (len(row["expl_query_tokens"]), length)
        assert len(row["word_r_abs"]) == len(row["word_kde"]) == len(row["word_spans"])


def test_transformer_equals_brute_force(colbert):
    out = Explainer(colbert, k_tilde=3)(frame())
    for _, row in out.iterrows():
        sim = row["expl_sim"].astype(np.float64)
        d_mask = ~np.isnan(sim[0])
        want_abs, want_acc = brute_force(np.nan_to_num(sim, nan=-np.inf), d_mask, 3)
        np.testing.assert_array_equal(row["r_abs"], want_abs)
        np.testing.assert_allclose(row["r_acc"], want_acc, atol=1e-5)
        assert row["r_abs"].sum() == 3 * colbert.config.query_maxlen
        # the similarities are the encoders' own: MaxSim of the row equals the text scorer's score
        maxsim = np.nanmax(sim, axis=1).mean()
        one = pd.DataFrame([row[["qid", "query", "docno", "text"]]])
        assert abs(colbert.text_scorer()(one)["score"].iloc[0] - maxsim) < 1e-5
        # word-level values pool the token values of each word
        words = row["expl_words"]
        for w in range(len(row["word_spans"])):
            assert row["word_r_abs"][w] == row["r_abs"][words == w].sum()
            assert np.isclose(row["word_kde"][w], row["kde"][words == w].mean())
        # the answer span starts and ends on word boundaries
        start, end = row["answer_span"]
        assert start in row["word_spans"][:, 0] and end in row["word_spans"][:, 1]


def test_unscored_query_masks(tiny_bert_dir):
    cfg = pfc.ColBERTConfig(**{**CONFIG, "score_query_masks": False})
    colbert = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=cfg, device="cpu")
    out = Explainer(colbert, k_tilde=2)(frame())
    for _, row in out.iterrows():
        q_tokens = row["expl_query_tokens"]
        assert "[MASK]" not in q_tokens and q_tokens[0] == "[CLS]" and q_tokens[-1] == "[SEP]"
        assert row["expl_sim"].shape[0] == len(q_tokens)
        assert row["r_abs"].sum() == 2 * len(q_tokens)
    masked = Explainer(pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(**CONFIG)))(frame())
    assert all(len(t) == CONFIG["query_maxlen"] for t in masked["expl_query_tokens"])


def test_query_token_view(colbert):
    out = Explainer(colbert, query_token="when")(frame(queries=["when was emberfall released"]))
    for _, row in out.iterrows():
        which = row["expl_query_tokens"].index("when")
        np.testing.assert_array_equal(row["token_sim"], row["expl_sim"][which])
        words = row["expl_words"]
        for w in range(len(row["word_spans"])):
            assert np.isclose(row["word_token_sim"][w], np.nanmax(row["token_sim"][words == w]))
    with pytest.raises(ValueError, match=r"qid 'q1'.*'when' is not among"):
        Explainer(colbert, query_token="when")(frame())


def test_empty_and_bad_input(colbert):
    empty = frame().iloc[:0]
    out = Explainer(colbert, query_token=2)(empty)
    assert len(out) == 0 and list(out.columns) == list(empty.columns) + EXPLANATION_COLUMNS + TOKEN_VIEW_COLUMNS
    with pytest.raises(pt.validate.InputValidationError, match="text"):
        Explainer(colbert)(frame().drop(columns="text"))
    with pytest.raises(ValueError, match="query_token"):
        Explainer(colbert, query_token=1.5)
    one = frame().iloc[:1].assign(text="")     # an empty passage: no words, no span
    row = Explainer(colbert)(one).iloc[0]
    assert row["expl_tokens"] == ["[CLS]", "[D]", "[SEP]"] and len(row["word_spans"]) == 0
    assert row["answer_span"] is None


def test_index_path_equals_text_path(colbert, tmp_path):
    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex

    docs = [{"docno": f"d{j}", "text": p} for j, p in enumerate(PASSAGES)]
    index = ColBERTIndex(tmp_path / "idx").indexer(colbert).index(iter(docs))
    from_text = Explainer(colbert)(frame())
    from_index = Explainer(colbert, index=index)(frame())
    for (_, a), (_, b) in zip(from_text.iterrows(), from_index.iterrows()):
        assert a["expl_tokens"] == b["expl_tokens"]
        np.testing.assert_allclose(a["expl_sim"], b["expl_sim"], atol=5e-3)      # fp16 storage
        np.testing.assert_array_equal(a["word_spans"], b["word_spans"])
    wrong = frame().assign(text=lambda f: f["text"] + " extra words")
    with pytest.raises(ValueError, match=r"docno 'd0'.*give the text that was indexed"):
        Explainer(colbert, index=str(tmp_path / "idx"))(wrong)


# -- rendering ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def explained(colbert):
    passages = [*PASSAGES, '<script>alert("x")</script> & <b>bold</b> Dragons\x1b[31m fire']
    return Explainer(colbert, query_token="when")(frame(queries=["when was emberfall released"], passages=passages))


def test_html_is_escaped_and_self_contained(explained, tmp_path):
    path = render.save_html(explained, tmp_path / "page.html", methods=("r_abs", "r_acc", "kde", "token_sim"))
    page = path.read_text(encoding="utf-8")
    assert "<script" not in page.lower() and "<b>bold" not in page
    visible = re.sub(r"<[^>]+>", "", page)
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in visible
    assert not re.search(r"(src|href)\s*=|https?://|@import", page)
    assert "Zoë" in page and "Ørnvik" in page and page.count('class="answer"') == len(explained)
    # the visible text of every cell is exactly the passage, its control characters (not allowed in HTML) shown
    # as U+FFFD
    assert "\x1b" not in page
    cells = re.findall(r'<td dir="auto">(.*?)</td>', page, flags=re.S)
    assert len(cells) == 4 * len(explained)
    for cell, text in zip(cells[::4], explained["text"]):
        import html
        assert html.unescape(re.sub(r"<[^>]+>", "", cell)) == text.replace("\x1b", "\ufffd")
    assert "No passages" in render.to_html(explained.iloc[:0])
    with pytest.raises(ValueError, match="word_token_sim"):
        render.to_html(explained.drop(columns=["word_token_sim"]), methods=["token_sim"])


def test_terminal_plain_and_colour(explained):
    row = explained.iloc[0]
    plain = render.to_terminal(row, "kde", color=False)
    body = plain.splitlines()[1]
    assert "\x1b" not in plain and re.sub(r"[\[\]«»]", "", body) == row["text"]
    start, end = row["answer_span"]
    assert re.sub(r"[\[\]]", "", body.split("«")[1].split("»")[0]) == row["text"][start:end]
    coloured = render.to_terminal(explained.iloc[-1], "r_abs", color=True)
    assert "\x1b[48;5;" in coloured and "\x1b[31m" not in coloured     # the passage's own escape is removed


def test_heatmap(explained):
    row = explained.iloc[0]
    fig = render.heatmap(row)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == row["expl_tokens"]
    assert [t.get_text() for t in ax.get_yticklabels()] == row["expl_query_tokens"]
    assert len(ax.collections[0].get_offsets()) == 2 * len(row["expl_query_tokens"])   # every match on screen
    content = render.heatmap(row, specials=False, k_tilde=None).axes[0]
    assert [t.get_text() for t in content.get_xticklabels()] == row["expl_tokens"][2:-1]
