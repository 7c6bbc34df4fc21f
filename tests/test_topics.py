"""Messy topics: every retriever and scorer gives an unusable query (empty, whitespace, not text) no rows and warns
once naming it, gives the other queries exactly what they get alone, and refuses it with strict=True."""
import warnings

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
import torch

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.frames import usable_query_rows

CONFIG = pfc.ColBERTConfig(dim=16, doc_maxlen=48, query_maxlen=16)
PASSAGES = ["The castle of Vel Amara was built after the flood.", "Old Orrin the smith forged twelve blades.",
            "The silver dragon guards a crown beneath the mountain.", "River folk trade spices along the coast."]
GOOD = pd.DataFrame({"qid": ["q1", "q3"], "query": ["who forged the blades", "what does the dragon guard"]})
MESSY = pd.DataFrame({"qid": ["q1", "q2", "q3", "q4", "q5"],
                      "query": ["who forged the blades", "", "what does the dragon guard", "   ", None]})
BAD_QIDS = ["q2", "q4", "q5"]


@pytest.fixture(scope="module")
def colbert(tiny_bert_dir):
    torch.set_num_threads(2)
    return pfc.ColBERT.from_pretrained(tiny_bert_dir, config=CONFIG, device="cpu", batch_size=8)


@pytest.fixture(scope="module")
def corpus():
    return [{"docno": f"d{i}", "text": t} for i, t in enumerate(PASSAGES)]


@pytest.fixture(scope="module")
def index(colbert, corpus, tmp_path_factory):
    return pfc.ColBERTIndex(tmp_path_factory.mktemp("idx") / "c").indexer(colbert).index(corpus)


@pytest.fixture(scope="module")
def tfidf(corpus, tmp_path_factory):
    return pfc.TfidfIndex.build(tmp_path_factory.mktemp("tfidf") / "t", corpus, store_text=True)


def candidates(topics, corpus):
    """Every (query, passage) pair: the input of the re-rankers."""
    return pd.DataFrame([{**q, "docno": d["docno"], "text": d["text"]}
                         for q in topics.to_dict("records") for d in corpus])


STAGES = {
    "tfidf retriever": lambda c, idx, tf: (tf.retriever(num_results=4), tf.retriever(num_results=4, strict=True),
                                           False),
    "colbert retriever": lambda c, idx, tf: (idx.retriever(c, num_results=4, faiss="exact"),
                                             idx.retriever(c, num_results=4, faiss="exact", strict=True), False),
    "index scorer": lambda c, idx, tf: (idx.scorer(c), idx.scorer(c, strict=True), True),
    "text scorer": lambda c, idx, tf: (c.text_scorer(), c.text_scorer(strict=True), True),
    "explainer": lambda c, idx, tf: (pfc.Explainer(c), pfc.Explainer(c, strict=True), True),
}


@pytest.mark.parametrize("name", list(STAGES))
def test_unusable_queries_get_no_rows_one_warning_and_strict_refuses(name, colbert, index, tfidf, corpus):
    stage, strict, reranks = STAGES[name](colbert, index, tfidf)
    messy, good = (candidates(MESSY, corpus), candidates(GOOD, corpus)) if reranks else (MESSY, GOOD)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = stage(messy)
    ours = [w for w in caught if "unusable quer" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert all(repr(q) in str(ours[0].message) for q in BAD_QIDS) and "strict=True" in str(ours[0].message)
    assert set(out["qid"]) == {"q1", "q3"}
    alone = stage(good)  # the usable queries get exactly what they get without the messy ones
    keep = [c for c in alone.columns if c not in ("query_embs",) and not c.startswith("expl_") and c not in
            ("r_abs", "r_acc", "kde", "word_spans", "word_r_abs", "word_r_acc", "word_kde")]
    pd.testing.assert_frame_equal(out[keep].reset_index(drop=True), alone[keep].reset_index(drop=True))
    with pytest.raises(ValueError, match="'q2'"):
        strict(messy)
    # only unusable queries: no rows, the declared columns
    with pytest.warns(UserWarning, match="3 unusable queries"):
        empty = stage(messy[messy.qid.isin(BAD_QIDS)])
    assert len(empty) == 0 and set(out.columns) <= set(empty.columns) | {"query_embs", "query_toks"}


def test_an_experiment_over_messy_topics_completes(colbert, index, tfidf):
    from ir_measures import nDCG

    qrels = pd.DataFrame({"qid": ["q1", "q2", "q3"], "docno": ["d1", "d0", "d2"], "label": [1, 1, 1]})
    systems = [tfidf.retriever(num_results=4), index.retriever(colbert, num_results=4, faiss="exact"),
               tfidf.retriever(num_results=4) >> index.scorer(colbert)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = pt.Experiment(systems, MESSY, qrels, [nDCG @ 10], names=["tfidf", "colbert", "rerank"])
    assert len(table) == 3 and np.isfinite(table["nDCG@10"]).all()


def test_usable_query_rows_keeps_order_and_index_and_accepts_frames_without_queries():
    frame = MESSY.set_index(pd.Index([7, 3, 5, 1, 9]))
    with pytest.warns(UserWarning, match=r"3 unusable queries .*\['q2', 'q4', 'q5'\]"):
        kept = usable_query_rows(frame, context="stage")
    assert kept.index.tolist() == [7, 5] and kept["qid"].tolist() == ["q1", "q3"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to say about clean frames
        assert usable_query_rows(GOOD) is GOOD
        no_text = pd.DataFrame({"qid": ["q1"], "query_embs": [np.ones((2, 4))]})
        assert usable_query_rows(no_text) is no_text
    repeated = pd.concat([MESSY] * 3, ignore_index=True)  # each qid named once however many rows it has
    with pytest.warns(UserWarning, match=r"3 unusable queries .*\['q2', 'q4', 'q5'\];"):
        assert len(usable_query_rows(repeated)) == 6
    with pytest.raises(ValueError, match="'q2'"):
        usable_query_rows(MESSY, strict=True)
