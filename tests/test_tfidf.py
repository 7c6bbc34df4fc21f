"""TF-IDF first stage: Terrier's TF_IDF scores by hand, analysis, ranking against brute force, artifact files."""
import math
import random
from collections import Counter

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_fandom_colbert.lexical.analysis import STOPWORDS, Analyzer
from pyterrier_fandom_colbert.lexical.tfidf import TfidfConfig, TfidfIndex

CORPUS = [
    {"docno": "d1", "text": "Dragons guard the river."},
    {"docno": "d2", "text": "A river, a river and the rivers of the north."},
    {"docno": "d3", "text": "Knights with swords fight dragons in the north."},
    {"docno": "d4", "text": "The old mill."},
]
#: the analysis of CORPUS, written out by hand: stopwords of the default "lucene" list (the, a, and, of, with, in)
#: gone, Porter stems; "mill" stays (the longer "glasgow" list would drop it)
TERMS = {
    "d1": ["dragon", "guard", "river"],
    "d2": ["river", "river", "river", "north"],
    "d3": ["knight", "sword", "fight", "dragon", "north"],
    "d4": ["old", "mill"],
}


def terrier_tf_idf(query_terms, doc_terms, corpus_terms, k1=1.2, b=0.75):
    """Terrier's TF_IDF written out term by term, in plain Python."""
    n = len(corpus_terms)
    avgdl = sum(len(t) for t in corpus_terms.values()) / n
    dl = len(doc_terms)
    score = 0.0
    for term, qtf in Counter(query_terms).items():
        tf = doc_terms.count(term)
        if tf == 0:
            continue
        df = sum(term in t for t in corpus_terms.values())
        robertson_tf = k1 * tf / (tf + k1 * (1 - b + b * dl / avgdl))
        idf = math.log2(n / df + 1)
        score += qtf * robertson_tf * idf
    return score


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    path = tmp_path_factory.mktemp("tfidf") / "index"
    return TfidfIndex.build(path, iter(CORPUS), store_text=True)


def topics(*queries):
    return pd.DataFrame({"qid": [f"q{i}" for i in range(len(queries))], "query": list(queries)})


def test_analysis_matches_hand_written_terms():
    analyzer = Analyzer()
    assert {d["docno"]: analyzer.terms(d["text"]) for d in CORPUS} == TERMS


def test_stopwords_and_stemming_can_be_switched_off():
    assert Analyzer(stemmer=None).terms("Dragons guard the rivers") == ["dragons", "guard", "rivers"]
    assert Analyzer(stopwords=False).terms("Dragons guard the rivers") == ["dragon", "guard", "the", "river"]


def test_stopword_list_is_the_glasgow_list():
    stop_words = pytest.importorskip("sklearn.feature_extraction._stop_words")
    assert STOPWORDS == stop_words.ENGLISH_STOP_WORDS


def test_hand_computed_scores(index):
    # N = 4, avgdl = 14/4; query terms dragon (df 2) and river (df 2)
    d1 = 1.2 * 1 / (1 + 1.2 * (0.25 + 0.75 * 3 / 3.5)) * math.log2(4 / 2 + 1) * 2  # tf 1 for both terms
    d2 = 1.2 * 3 / (3 + 1.2 * (0.25 + 0.75 * 4 / 3.5)) * math.log2(4 / 2 + 1)      # river ×3
    d3 = 1.2 * 1 / (1 + 1.2 * (0.25 + 0.75 * 5 / 3.5)) * math.log2(4 / 2 + 1)      # dragon ×1
    res = index.retriever()(topics("dragons of the river"))
    assert res["docno"].tolist() == ["d1", "d2", "d3"]
    np.testing.assert_allclose(res["score"].to_numpy(), [d1, d2, d3], rtol=1e-12)
    assert res["rank"].tolist() == [0, 1, 2]
    for docno, score in zip(res["docno"], res["score"]):
        assert score == pytest.approx(terrier_tf_idf(["dragon", "river"], TERMS[docno], TERMS), rel=1e-12)


def test_query_term_frequency_multiplies(index):
    res = index.retriever()(topics("river river dragons"))
    got = dict(zip(res["docno"], res["score"]))
    for docno in ("d1", "d2", "d3"):
        assert got[docno] == pytest.approx(terrier_tf_idf(["river", "river", "dragon"], TERMS[docno], TERMS))


def test_stemming_matches_inflections_and_stopwords_do_not_match(index):
    retr = index.retriever()
    assert retr(topics("knight"))["docno"].tolist() == ["d3"]       # "Knights" in d3
    assert len(retr(topics("the of a"))) == 0                      # only stopwords
    assert retr(topics("the mill"))["docno"].tolist() == ["d4"]    # a content word the default list keeps
    glasgow = Analyzer(stopwords="glasgow")
    assert glasgow.terms("the mill system") == [] and Analyzer().terms("the mill system") == ["mill", "system"]


def test_ranking_equals_brute_force(tmp_path):
    rng = random.Random(7)
    words = ["castle", "river", "dragon", "knight", "sword", "crown", "silver", "north", "winter", "witch", "potion",
             "forest", "village", "battle", "king", "queen", "wolf", "ship", "storm"]
    docs = [{"docno": f"doc{i:03d}", "text": " ".join(rng.choice(words) for _ in range(rng.randint(1, 30)))}
            for i in range(200)]
    queries = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 5))) for _ in range(30)]
    index = TfidfIndex.build(tmp_path / "idx", docs)
    res = index.retriever(num_results=15)(topics(*queries))

    analyzer = Analyzer()
    corpus = {d["docno"]: analyzer.terms(d["text"]) for d in docs}
    for qi, query in enumerate(queries):
        q_terms = analyzer.terms(query)
        brute = [(terrier_tf_idf(q_terms, corpus[d["docno"]], corpus), i) for i, d in enumerate(docs)]
        brute = sorted((b for b in brute if b[0] > 0), key=lambda b: (-b[0], b[1]))[:15]
        got = res[res["qid"] == f"q{qi}"]
        assert got["docno"].tolist() == [docs[i]["docno"] for _, i in brute]
        np.testing.assert_allclose(got["score"].to_numpy(), [s for s, _ in brute], rtol=1e-10)
        assert got["rank"].tolist() == list(range(len(brute)))


def test_postings_spilled_in_small_pieces_make_the_same_files(tmp_path, monkeypatch):
    """The postings go to disk as they are made (a buffer of 5 here: many writes, documents split between
    them); the files equal those of a build that never flushes before the end, and no spill file is left."""
    from pyterrier_fandom_colbert.lexical.postings import PostingsSpill

    rng = random.Random(3)
    words = ["castle", "river", "dragon", "knight", "sword", "crown", "the", "north", "winter", "witch"]
    docs = [{"docno": f"doc{i:03d}", "text": " ".join(rng.choice(words) for _ in range(rng.randint(0, 12)))}
            for i in range(150)]
    monkeypatch.setattr(PostingsSpill, "BUFFER", 10**9)
    TfidfIndex.build(tmp_path / "whole", docs)
    monkeypatch.setattr(PostingsSpill, "BUFFER", 5)
    pieces = TfidfIndex.build(tmp_path / "pieces", docs)
    names = sorted(p.name for p in (tmp_path / "pieces").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "whole").iterdir()) and not any("tmp" in n for n in names)
    for name in names:
        assert (tmp_path / "pieces" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    import scipy.sparse as sp

    expected = {d["docno"]: Counter(Analyzer().terms(d["text"])) for d in docs}
    tf, vocab = sp.load_npz(tmp_path / "pieces" / "tf.npz").tocsr(), pieces.vocab
    assert tf.nnz == sum(len(c) for c in expected.values())
    for row, d in enumerate(docs):  # the matrix holds every document's counts, by hand
        got = {t: int(tf[row, i]) for t, i in vocab.items() if tf[row, i]}
        assert got == dict(expected[d["docno"]])


def test_ties_break_by_index_order(tmp_path):
    docs = [{"docno": "z", "text": "wolf pack"}, {"docno": "a", "text": "wolf pack"},
            {"docno": "m", "text": "wolf pack pack"}]
    res = TfidfIndex.build(tmp_path / "idx", docs).retriever()(topics("wolf"))
    assert res["docno"].tolist()[:2] == ["z", "a"]
    assert res["score"].iloc[0] == res["score"].iloc[1]


def test_rank_cutoff_fuses(index):
    retr = index.retriever()
    assert (retr % 2).compile().num_results == 2
    full = retr(topics("dragons river", "north"))
    cut = (retr % 2)(topics("dragons river", "north"))
    expected = full[full["rank"] < 2].reset_index(drop=True)
    pd.testing.assert_frame_equal(cut, expected)
    assert (retr % 5000).compile() is retr


def test_empty_frame_and_columns(index):
    retr = index.retriever(text=True)
    out = retr(pd.DataFrame({"qid": pd.Series([], dtype=str), "query": pd.Series([], dtype=str)}))
    assert len(out) == 0
    assert list(out.columns) == ["qid", "query", "docno", "score", "rank", "text"]
    assert retr.transform_outputs(["qid", "query"]) == list(out.columns)


def test_queries_without_known_terms_give_no_rows(index):
    inp = topics("zyzzyva", "", "   ", "dragons")
    inp["extra"] = [1, 2, 3, 4]
    inp.index = [10, 11, 12, 13]
    with pytest.warns(UserWarning, match=r"2 unusable queries .*\['q1', 'q2'\]"):  # empty and blank: no rows
        out = index.retriever()(inp)
    assert set(out["qid"]) == {"q3"}
    assert out["extra"].tolist() == [4, 4]
    assert out["docno"].tolist() == ["d1", "d3"]
    assert len(index.retriever()(topics("zyzzyva"))) == 0


def test_bad_queries_give_no_rows_or_are_refused_when_strict(index):
    with pytest.warns(UserWarning, match=r"1 unusable query .*\['q0'\]"):
        assert len(index.retriever()(pd.DataFrame({"qid": ["q0"], "query": [None]}))) == 0
    with pytest.raises(ValueError, match="q0"):
        index.retriever(strict=True)(pd.DataFrame({"qid": ["q0"], "query": [None]}))
    with pytest.raises(pt.validate.InputValidationError):
        index.retriever()(pd.DataFrame({"qid": ["q0"]}))


def test_text_column(index):
    out = index.retriever(text=True)(topics("north"))
    by_docno = {d["docno"]: d["text"] for d in CORPUS}
    assert out["text"].tolist() == [by_docno[d] for d in out["docno"]]


def test_unicode_text_round_trips_and_text_requires_storage(tmp_path):
    docs = [{"docno": "h", "text": "Héloïse visited Zürich — 東京 too"}, {"docno": "x", "text": "plain"}]
    index = TfidfIndex.build(tmp_path / "idx", docs, store_text=True)
    out = index.retriever(text=True)(topics("héloïse zürich"))
    assert out["text"].tolist() == [docs[0]["text"]]
    plain = TfidfIndex.build(tmp_path / "plain", docs)
    with pytest.raises(ValueError, match="store_text=True"):
        plain.retriever(text=True)


def test_artifact_round_trip(index):
    loaded = pt.Artifact.load(str(index.path))
    assert isinstance(loaded, TfidfIndex)
    meta = loaded.meta
    assert (meta.type, meta.format) == ("sparse_index", "tfidf")
    assert meta.package_hint == "pyterrier-fandom-colbert"
    assert (meta.num_docs, meta.num_tokens) == (4, 14)
    assert loaded.config == TfidfConfig()
    q = topics("dragons river", "north knights")
    pd.testing.assert_frame_equal(loaded.retriever()(q), index.retriever()(q))


def test_config_is_saved_and_used(tmp_path):
    cfg = TfidfConfig(k1=2.0, b=0.5, stemmer=None, stopwords=False)
    TfidfIndex.build(tmp_path / "idx", CORPUS, config=cfg)
    loaded = pt.Artifact.load(str(tmp_path / "idx"))
    assert loaded.config == cfg
    retr = loaded.retriever()
    assert len(retr(topics("dragon"))) == 0                       # no stemming: only "dragons" is indexed
    res = retr(topics("the"))
    raw = {d["docno"]: Analyzer(stemmer=None, stopwords=False).terms(d["text"]) for d in CORPUS}
    for docno, score in zip(res["docno"], res["score"]):
        assert score == pytest.approx(terrier_tf_idf(["the"], raw[docno], raw, k1=2.0, b=0.5))


def test_dataframe_input_and_generator_input_agree(tmp_path):
    a = TfidfIndex.build(tmp_path / "a", pd.DataFrame(CORPUS))
    b = TfidfIndex.build(tmp_path / "b", (d for d in CORPUS))
    q = topics("dragons river north")
    pd.testing.assert_frame_equal(a.retriever()(q), b.retriever()(q))


def test_overwrite_is_refused_unless_asked(index, tmp_path):
    path = tmp_path / "idx"
    TfidfIndex.build(path, CORPUS)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        TfidfIndex.build(path, CORPUS[:2])
    assert TfidfIndex(path).meta.num_docs == 4
    TfidfIndex.build(path, CORPUS[:2], overwrite=True)
    assert pt.Artifact.load(str(path)).meta.num_docs == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]   # no temp or old folders left


def _leaves_nothing(tmp_path, docs, error, match):
    path = tmp_path / "idx"
    with pytest.raises(error, match=match):
        TfidfIndex.build(path, docs)
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(FileNotFoundError):
        pt.Artifact.load(str(path))


def test_duplicate_docnos_are_named(tmp_path):
    docs = [*CORPUS, {"docno": "d2", "text": "again"}, {"docno": "d4", "text": "again"}]
    _leaves_nothing(tmp_path, docs, ValueError, r"2 docno\(s\) occur more than once: \['d2', 'd4'\]")


@pytest.mark.parametrize("bad, error, match", [({"docno": "", "text": "x"}, ValueError, "#2 has docno=''"),
                                               ({"text": "x"}, ValueError, r"#2 has fields \['text'\]; expected"),
                                               ({"docno": "d9"}, ValueError, r"#2 has fields \['docno'\]; expected"),
                                               ({"docno": "d9", "text": float("nan")}, ValueError, "text=nan"),
                                               (("d9", "text"), TypeError, "#2 is a tuple")])
def test_bad_documents_are_refused(tmp_path, bad, error, match):
    _leaves_nothing(tmp_path, [*CORPUS[:2], bad], error, match)


def test_empty_corpus_is_refused(tmp_path):
    _leaves_nothing(tmp_path, [], ValueError, "empty")


def test_interrupted_build_leaves_nothing(tmp_path):
    def docs():
        yield from CORPUS[:3]
        raise RuntimeError("connection lost")
    _leaves_nothing(tmp_path, docs(), RuntimeError, "connection lost")


def test_interrupted_overwrite_keeps_the_old_index(tmp_path):
    path = tmp_path / "idx"
    TfidfIndex.build(path, CORPUS)

    def docs():
        yield CORPUS[0]
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError):
        TfidfIndex.build(path, docs(), overwrite=True)
    assert pt.Artifact.load(str(path)).meta.num_docs == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_missing_index_is_explained(tmp_path):
    with pytest.raises(FileNotFoundError, match="indexer"):
        TfidfIndex(tmp_path / "nothing").retriever()(topics("x"))


# -- the main job (pfc-compare) on an in-memory dataset ------------------------------------------------------

class ToyDataset:
    """The three methods of a PyTerrier dataset that the comparison uses."""

    def get_corpus_iter(self, verbose=False):
        return iter(CORPUS)

    def get_topics(self):
        return topics("where do dragons guard", "rivers of the north", "old mill")

    def get_qrels(self):
        return pd.DataFrame({"qid": ["q0", "q1", "q2"], "docno": ["d1", "d2", "d3"], "label": [1, 1, 1]})


def test_compare_writes_table_curve_and_plot(tmp_path, tiny_bert_dir):
    from pyterrier_fandom_colbert.app.compare import compare

    table = compare(ToyDataset(), "toy/test", ["tfidf", "colbert-rerank"], "RR@10,R@1,R@10", tmp_path, k=10,
                    checkpoint=tiny_bert_dir)
    assert table["name"].tolist() == ["TF-IDF", "TF-IDF >> ColBERT"]
    assert list(table.columns) == ["name", "RR@10", "R@1", "R@10"]
    # TF-IDF by hand: q0 (dragon, guard) → d1 first, the only doc with both: RR 1; q1 (river, north) → d2 first
    # (river ×3 and north): RR 1; q2 (old; mill is a stopword) retrieves only d4, not the judged d3: RR 0
    tfidf = table.iloc[0]
    assert tfidf["RR@10"] == pytest.approx(2 / 3) and tfidf["R@1"] == pytest.approx(2 / 3)
    # re-ranking the same 10 candidates cannot change which passages are among them
    assert table.iloc[1]["R@10"] == pytest.approx(tfidf["R@10"])
    assert (tmp_path / "recall_at_k.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    written = pd.read_csv(tmp_path / "results.csv")
    np.testing.assert_allclose(written["RR@10"].to_numpy(), table["RR@10"].to_numpy())
    curve = pd.read_csv(tmp_path / "recall_at_k.csv").set_index("name")
    assert list(curve.columns) == [f"R@{c}" for c in range(1, 11)]
    assert (np.diff(curve.to_numpy(), axis=1) >= 0).all()  # recall never falls as k grows
    cached = tmp_path / "cache" / "toy--test" / f"tfidf-{TfidfConfig().settings_digest()}"  # named by the settings
    assert pt.Artifact.load(str(cached)).meta.num_docs == 4


def test_main_job_takes_the_question_text_as_query(capsys):
    from pyterrier_fandom_colbert.app.compare import query_topics

    dataset = pt.get_dataset("irds:fandom-qa/sample/test")
    got = query_topics(dataset)
    assert list(got.columns[:2]) == ["qid", "query"] and len(got) == 30
    questions = {q.query_id: q.text for q in dataset.irds_ref().queries_iter()}
    assert all(questions[qid] == query for qid, query in zip(got.qid, got["query"]))
    printed = capsys.readouterr()
    assert "multiple query fields" not in printed.out + printed.err  # PyTerrier prints it for get_topics()
    assert query_topics(ToyDataset())["query"].tolist() == ToyDataset().get_topics()["query"].tolist()


# -- PyTerrier's text loader ------------------------------------------------------------------------------------

def test_get_text_loads_the_stored_passages(tmp_path):
    docs = [{"docno": f"p{i}", "text": t} for i, t in enumerate(
        ["Första raden: Zürich och Malmö.", "The second passage, with \"quotes\".", "", "A fourth one\nover lines."])]
    index = TfidfIndex(tmp_path / "with-text")
    index.indexer(store_text=True).index(docs)
    results = pd.DataFrame({"qid": ["1", "1", "2", "2"], "docno": ["p3", "p0", "p0", "p2"], "score": [4.0, 3, 2, 1],
                            "rank": [0, 1, 0, 1]})
    for loader in (pt.text.get_text(index, "text"), pt.text.get_text(index), index.text_loader()):
        out = loader(results)
        by_docno = {d["docno"]: d["text"] for d in docs}
        assert out["text"].tolist() == [by_docno[d] for d in results["docno"]]
        pd.testing.assert_frame_equal(out.drop(columns=["text"]), results)
        assert list(loader(results.iloc[:0]).columns) == [*results.columns, "text"]
    assert pt.text.get_text(index, "text") == TfidfIndex(index.path).text_loader("text")
    with pytest.raises(ValueError, match=r"'title'.*stores the field 'text' only"):
        pt.text.get_text(index, ["text", "title"])
    with pytest.raises(ValueError, match=r"not in the TF-IDF index.*\['p9'\]"):
        index.text_loader()(results.assign(docno=["p3", "p9", "p0", "p2"]))
    bare = TfidfIndex(tmp_path / "no-text")
    bare.indexer().index(docs)
    with pytest.raises(ValueError, match="stores no text"):
        pt.text.get_text(bare, "text")
