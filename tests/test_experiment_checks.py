"""A rank cut-off never changes the ranking above it: ``(e2e % k)`` and ``(e2e % k).compile()`` give, for every
query, exactly the top k of the uncut end-to-end retriever (fp16 and compressed indexes), though ``compile()``
fuses the cut into the retriever."""
import numpy as np
import pandas as pd
import pytest

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.index.residual import compress as compressed


@pytest.fixture(scope="module")
def collection(small_colbert, word_records, tmp_path_factory):
    """(fp16 index, residual2 index, 24 topics) over 400 story-word documents: enough tokens (several thousand)
    that the candidate depth of a 10-result search (k̂ = 50) finds fewer documents than that of 1,000."""
    docs = word_records(400, 3, 4)
    folder = tmp_path_factory.mktemp("cutoff")
    fp16 = pfc.ColBERTIndex(folder / "fp16").indexer(small_colbert, batch_size=64).index(docs)
    spec = compressed.CompressionSpec("residual2", num_centroids=32, niter=8)
    residual = pfc.ColBERTIndex(folder / "r2").indexer(small_colbert, batch_size=64, compression=spec).index(docs)
    words = word_records(24, 11, 2)
    topics = pd.DataFrame({"qid": [f"q{i}" for i in range(24)],
                           "query": [" ".join(d["text"].split()[:3]) for d in words]})
    return fp16, residual, topics


def _top(frame, k):
    return {q: list(zip(g.sort_values("rank").docno[:k], np.round(g.sort_values("rank").score[:k], 5)))
            for q, g in frame.groupby("qid")}


#: (index, end-to-end retriever settings, the same search asked for 10 results at its own depth)
SYSTEMS = {"fp16 default": ("fp16", {"faiss": "exact"}, None),
           "fp16 lam": ("fp16", {"faiss": "exact", "num_results": 100, "lam": 10},
                        {"faiss": "exact", "num_results": 10, "lam": 10}),
           "residual default": ("residual", {}, {"num_results": 10})}


@pytest.mark.parametrize("system", list(SYSTEMS))
def test_cut_and_compiled_keep_the_uncut_top_k_for_every_query(collection, small_colbert, system):
    fp16, residual, topics = collection
    which, settings, cheap = SYSTEMS[system]
    index = fp16 if which == "fp16" else residual
    e2e = index.retriever(small_colbert, **settings)
    uncut = _top(e2e(topics), 10)
    compiled = (e2e % 10).compile()
    assert compiled.retriever.num_results == 10  # the cut is fused into the retriever ...
    assert _top(compiled(topics), 10) == uncut  # ... and its top 10 is the uncut top 10, query by query
    assert _top((e2e % 10)(topics), 10) == uncut
    if cheap is not None:  # the check can fail: the search at a 10-result depth ranks some queries otherwise
        assert _top(index.retriever(small_colbert, **cheap)(topics), 10) != uncut


def test_maxlens_are_arguments_of_from_pretrained(tiny_bert_dir, tmp_path):
    config = pfc.ColBERTConfig(dim=16)
    given = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=config, query_maxlen=8, doc_maxlen=20, device="cpu")
    through_config = pfc.ColBERT.from_pretrained(
        tiny_bert_dir, config=pfc.ColBERTConfig(dim=16, query_maxlen=8, doc_maxlen=20), device="cpu")
    assert (given.config.query_maxlen, given.config.doc_maxlen) == (8, 20)
    assert given.fingerprint() == through_config.fingerprint()
    Q, _ = given.encode_queries(["who forged the silver blade of the north in the third age"])
    assert Q.shape[1] == 8
    folder = given.save_pretrained(tmp_path / "ckpt")
    longer = pfc.ColBERT.from_pretrained(folder, query_maxlen=12, device="cpu")  # a checkpoint's setting too
    assert longer.config.query_maxlen == 12 and longer.config.doc_maxlen == 20
    assert longer.encode_queries(["who forged the silver blade"])[0].shape[1] == 12
    with pytest.raises(ValueError, match="query_maxlen=0"):
        pfc.ColBERT.from_pretrained(tiny_bert_dir, config=config, query_maxlen=0, device="cpu")


def test_a_device_torch_cannot_use_is_a_clear_error(tiny_bert_dir):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    with pytest.raises(ValueError, match=r"device='cuda'.*0 CUDA device.*available: cpu"):
        pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(dim=16), device="cuda")


def test_bm25_without_pyterrier_pisa_names_the_install(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "pyterrier_pisa", None)  # as if not installed
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'pyterrier-fandom-colbert\[pisa\]'"):
        pfc.BM25(tmp_path / "bm25", [{"docno": "d1", "text": "castle"}])


def test_bm25_is_quiet_by_default(monkeypatch, tmp_path, capfd):
    """pfc.BM25 over a stand-in pyterrier-pisa whose indexing prints from Python and from native code (fd 2)."""
    import os
    import sys
    import types

    class PisaIndex:
        def __init__(self, path, **options):
            self.path, self.options = path, options

        def indexer(self):
            index = self

            class Indexer:
                def index(self, docs):
                    print("progress line")
                    os.write(2, b"native progress\n")
                    (index_path := __import__("pathlib").Path(index.path)).mkdir(parents=True, exist_ok=True)
                    (index_path / "pt_meta.json").write_text("{}")
                    (index_path / "fwd.terms").write_text("castle\n")
            return Indexer()

        def bm25(self, **options):
            return ("bm25", options)

    monkeypatch.setitem(sys.modules, "pyterrier_pisa", types.SimpleNamespace(PisaIndex=PisaIndex))
    kind, options = pfc.BM25(tmp_path / "bm25", [{"docno": "d1", "text": "castle"}], num_results=10)
    assert kind == "bm25" and options == {"k1": 0.9, "b": 0.4, "num_results": 10, "verbose": False}
    out, err = capfd.readouterr()
    assert "progress" not in out + err
    pfc.BM25(tmp_path / "loud", [{"docno": "d1", "text": "castle"}], verbose=True)
    out, err = capfd.readouterr()
    assert "progress line" in out and "native progress" in err
    assert pfc.BM25(tmp_path / "bm25")[0] == "bm25"  # an existing index, opened
    with pytest.raises(FileNotFoundError, match="no BM25"):
        pfc.BM25(tmp_path / "none")


def test_tfidf_scorer_rescores_given_documents_as_the_retriever_scores_them(tmp_path):
    docs = [{"docno": f"d{i}", "text": t} for i, t in enumerate([
        "the castle by the river", "a dragon over the castle", "the smith forged a blade", "river folk and boats",
        "nothing in common here"])]
    index = pfc.TfidfIndex.build(tmp_path / "tfidf", docs)
    topics = pd.DataFrame({"qid": ["q1", "q2"], "query": ["castle river", "smith blade dragon"]})
    retrieved = index.retriever(10)(topics)
    candidates = pd.DataFrame({"qid": ["q1", "q1", "q1", "q2", "q2"],
                               "query": ["castle river"] * 3 + ["smith blade dragon"] * 2,
                               "docno": ["d3", "d0", "d4", "d1", "d2"], "extra": range(5)})
    scored = index.scorer()(candidates)
    expected = dict(zip(zip(retrieved.qid, retrieved.docno), retrieved.score))
    for qid, docno, score in zip(scored.qid, scored.docno, scored.score):
        assert score == pytest.approx(expected.get((qid, docno), 0.0))  # d4 shares no term: 0
    assert scored[scored.qid == "q1"].sort_values("rank").docno.tolist() == ["d0", "d3", "d4"]
    assert set(scored.extra) == set(range(5))  # input columns kept
    # as a feature: ** needs a scorer
    features = (index.scorer() ** index.scorer())(candidates)
    np.testing.assert_allclose(np.stack(features.features.to_numpy())[:, 0], scored.set_index(
        ["qid", "docno"]).loc[list(zip(features.qid, features.docno)), "score"].to_numpy())
    assert len(index.scorer()(candidates.iloc[:0])) == 0
    assert index.scorer() == pfc.TfidfIndex(tmp_path / "tfidf").scorer()
    with pytest.raises(ValueError, match="d9"):
        index.scorer()(candidates.assign(docno="d9"))


def test_empty_documents_are_indexed_with_a_counted_warning(small_colbert, tmp_path):
    docs = [{"docno": "d0", "text": "the castle by the river"}, {"docno": "d1", "text": ""},
            {"docno": "d2", "text": "   "}, {"docno": "d3", "text": "a dragon"}]
    with pytest.warns(UserWarning, match=r"2 of 4 documents have an empty 'text'"):
        index = pfc.ColBERTIndex(tmp_path / "idx").indexer(small_colbert).index(docs)
    assert index.meta.num_docs == 4


def test_encoders_take_batch_size_verbose_and_text_field(small_colbert, count_calls, capsys):
    queries = pd.DataFrame({"qid": [f"q{i}" for i in range(5)], "query": [f"castle river {i}" for i in range(5)]})
    expected = small_colbert.query_encoder()(queries)
    tokenised = count_calls(type(small_colbert.tokenizer), "queries")
    got = small_colbert.query_encoder(batch_size=2)(queries)
    assert tokenised.calls == 3  # 5 queries, 2 per forward pass
    for a, b in zip(got["query_embs"], expected["query_embs"]):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert small_colbert.batch_size == 8  # the model's own setting is left as it was
    small_colbert.query_encoder(verbose=True)(queries)
    assert "encoding queries" in capsys.readouterr().err
    assert small_colbert.query_encoder(batch_size=2) == small_colbert.query_encoder()  # same vectors
    candidates = pd.DataFrame({"qid": ["q1", "q1"], "query": ["castle river"] * 2, "docno": ["d0", "d1"],
                               "body": ["the castle by the river", "a dragon in the sky"]})
    scored = small_colbert.text_scorer(text_field="body", batch_size=1)(candidates)
    plain = small_colbert.text_scorer()(candidates.rename(columns={"body": "text"}))
    np.testing.assert_allclose(scored.sort_values("docno").score, plain.sort_values("docno").score, atol=1e-5)
    assert "text_field='body'" in repr(small_colbert.text_scorer(text_field="body", batch_size=1))
    with pytest.raises(ValueError, match="batch_size=0"):
        small_colbert.query_encoder(batch_size=0)


def test_kde_answer_span_is_bounded_on_a_long_flat_passage():
    from pyterrier_fandom_colbert.explain.relevance import ExplainOptions, explain_passage

    words = [f"w{i}" for i in range(600)]
    text = " ".join(words)
    starts = np.cumsum([0] + [len(w) + 1 for w in words[:-1]])
    offsets = np.array([[0, 0], [0, 0]] + [[s, s + len(w)] for s, w in zip(starts, words)] + [[0, 0]])
    length = len(offsets)
    sim = np.zeros((32, length))
    for i in range(32):  # matches spread evenly over the whole passage: a flat density
        sim[i, 2 + (i * 37) % 600], sim[i, 2 + (i * 37 + 300) % 600] = 0.9, 0.8
    unbounded = explain_passage(sim, np.ones(length, bool), text, offsets, ExplainOptions(max_span=None))
    bounded = explain_passage(sim, np.ones(length, bool), text, offsets, ExplainOptions())
    assert np.subtract(*unbounded.answer_tokens[::-1]) > 300  # the unbounded span is most of the passage
    start, end = bounded.answer_tokens
    assert end - start <= 64
    peak = int(np.argmax(bounded.kde))
    assert start <= peak < end  # the bounded span holds the density's peak
    with pytest.raises(ValueError, match="max_span=0"):
        ExplainOptions(max_span=0)


def test_heatmap_of_a_long_passage_is_cut_to_the_best_window():
    from pyterrier_fandom_colbert.explain import render

    tokens = ["[CLS]", "[D]", *[f"t{i}" for i in range(400)], "[SEP]"]
    sim = np.full((3, len(tokens)), 0.1)
    sim[:, 252:262] = 0.9  # the match is far into the passage
    row = {"expl_sim": sim, "expl_query_tokens": ["[CLS]", "[Q]", "x"], "expl_tokens": tokens,
           "expl_words": np.array([-1, -1, *range(400), -1]), "docno": "d1", "query": "x"}
    fig = render.heatmap(row)
    ax = fig.axes[0]
    shown = [t.get_text() for t in ax.get_xticklabels()]
    assert len(shown) == render.HEATMAP_MAX_COLUMNS and {f"t{i}" for i in range(250, 260)} <= set(shown)
    assert fig.get_figwidth() <= 0.28 * render.HEATMAP_MAX_COLUMNS + 2
    assert f"of {len(tokens)} shown" in ax.get_title()
    assert len(render.heatmap(row, max_columns=None).axes[0].get_xticklabels()) == len(tokens)
