"""The package's transformers under pyterrier-caching: a cached second run gives the same frame and does no
model work, and ``cache_folder`` keys a cache by the transformer's equality, stably across processes."""
import os
import subprocess
import sys

import pandas as pd
import pytest

import pyterrier_fandom_colbert as pfc

pyterrier_caching = pytest.importorskip("pyterrier_caching")

TEXTS = ["The castle of Vel Amara was built in the third age by the river folk.",
         "When was the game released? It came out in the spring of 2011.",
         "Who forged the blade? The smith Orrin forged it from fallen stars.",
         "The river folk sailed south when the winter came early that year.",
         "The silver blade of the north was forged by the river smith."]
CORPUS = [{"docno": f"d{i}", "text": t} for i, t in enumerate(TEXTS)]
TOPICS = pd.DataFrame({"qid": ["q1", "q2"], "query": ["who forged the silver blade", "when did the river folk sail"]})


@pytest.fixture(scope="module")
def parts(tiny_parts):
    return tiny_parts(CORPUS, "caching")



def _sorted(frame):
    return frame.sort_values(["qid", "docno"] if "docno" in frame.columns else ["qid"]).reset_index(drop=True)


def test_retriever_cache_second_run_encodes_nothing(parts, tmp_path, count_calls):
    colbert, _, index = parts
    retriever = index.retriever(colbert, num_results=3)
    expected = retriever(TOPICS)
    encodes = count_calls(pfc.ColBERT, "encode_queries")
    cached = pyterrier_caching.RetrieverCache(pfc.cache_folder(tmp_path, retriever), retriever)
    first = cached(TOPICS[["qid", "query"]])
    assert encodes.calls == 1
    second = cached(TOPICS[["qid", "query"]])
    assert encodes.calls == 1  # every query came from the cache
    for frame in (first, second):
        pd.testing.assert_frame_equal(_sorted(frame)[["qid", "docno", "score", "rank"]],
                                      _sorted(expected)[["qid", "docno", "score", "rank"]])


def test_scorer_cache_second_run_encodes_no_document(parts, tmp_path, count_calls):
    colbert, tfidf, _ = parts
    first_stage = tfidf.retriever(num_results=4, text=True)
    scorer = colbert.text_scorer()
    candidates = first_stage(TOPICS)
    expected = scorer(candidates)
    batches = count_calls(pfc.ColBERT, "doc_batches")
    encodes = count_calls(pfc.ColBERT, "encode_queries")
    cached = pyterrier_caching.ScorerCache(pfc.cache_folder(tmp_path, scorer), scorer)
    first = cached(candidates)
    work = batches.calls + encodes.calls
    assert work > 0
    second = cached(candidates)
    assert batches.calls + encodes.calls == work  # no document or query encoded again
    for frame in (first, second):
        pd.testing.assert_series_equal(_sorted(frame)["score"], _sorted(expected)["score"], check_dtype=False)


def test_key_value_cache_of_the_query_encoder(parts, tmp_path, count_calls):
    colbert, _, index = parts
    encoder = colbert.query_encoder()
    expected = (encoder >> index.retriever(num_results=3))(TOPICS)
    encodes = count_calls(pfc.ColBERT, "encode_queries")
    cache = pyterrier_caching.KeyValueCache(pfc.cache_folder(tmp_path, encoder), encoder, key="query",
                                            value=["query_embs", "query_toks"])
    pipeline = cache >> index.retriever(num_results=3)
    pipeline(TOPICS)
    assert encodes.calls == 1
    second = pipeline(TOPICS)
    assert encodes.calls == 1
    pd.testing.assert_frame_equal(_sorted(second)[["qid", "docno", "score"]],
                                  _sorted(expected)[["qid", "docno", "score"]])


def test_cache_folders_follow_equality(parts, tiny_bert_dir, tmp_path):
    colbert, tfidf, index = parts
    assert pfc.cache_folder("c", index.retriever(num_results=5)) == \
        pfc.cache_folder("c", pfc.ColBERTIndex(index.path).retriever(num_results=5))
    assert pfc.cache_folder("c", index.retriever(num_results=5)) != \
        pfc.cache_folder("c", index.retriever(num_results=6))
    other = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(dim=16), seed=1, device="cpu")
    assert repr(other) == repr(colbert)  # the reprs agree, the weights do not
    assert pfc.cache_folder("c", colbert.query_encoder()) != pfc.cache_folder("c", other.query_encoder())
    hybrid = pfc.Hybrid(tfidf.retriever(5), index.retriever(colbert, num_results=5), weight=0.3)
    assert pfc.cache_folder("c", hybrid) == pfc.cache_folder("c", pfc.Hybrid(
        pfc.TfidfIndex(tfidf.path).retriever(5), index.retriever(colbert, num_results=5), weight=0.3))
    assert pfc.cache_folder("c", hybrid) != pfc.cache_folder("c", hybrid.with_weight(0.4))
    code = ("import pyterrier_fandom_colbert as pfc; "
            f"print(pfc.cache_folder('c', pfc.TfidfIndex({str(tfidf.path)!r}).retriever(5, text=True)))")
    folders = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip() for seed in ("1", "2")}
    assert folders == {str(pfc.cache_folder("c", tfidf.retriever(5, text=True)))}
