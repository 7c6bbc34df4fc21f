"""The package's transformers under pyterrier-caching: a cached second run gives the same frame and does no
model work, and ``cache_folder`` keys a cache by the transformer's equality, stably across processes."""
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyterrier as pt
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


def _scores(frame):
    return _sorted(frame)[["qid", "docno", "score"]]


def test_index_rebuilt_in_place_is_another_cache(tmp_path):
    """The researcher's stale cache: a TF-IDF index rebuilt in place with other analysis settings (and fewer
    documents) must not get the old cached run back."""
    folder = tmp_path / "tfidf"
    pfc.TfidfIndex(folder).indexer().index(CORPUS)
    before = pfc.TfidfIndex(folder).retriever(3)
    folder_before = pfc.cache_folder(tmp_path / "cache", before)
    with pfc.RetrieverCache(folder_before, before) as cache:
        old = cache(TOPICS)
    config = pfc.TfidfConfig(stemmer=None, stopwords="none", k1=2.0)
    pfc.TfidfIndex(folder).indexer(config=config, overwrite=True).index(CORPUS[:3])
    after = pfc.TfidfIndex(folder).retriever(3)
    fresh = after(TOPICS)
    assert not _scores(fresh).equals(_scores(old))  # the rebuild does change the run
    folder_after = pfc.cache_folder(tmp_path / "cache", after)
    assert folder_after != folder_before
    assert before != after  # equality follows the content too
    with pfc.RetrieverCache(folder_after, after) as cache:
        pd.testing.assert_frame_equal(_scores(cache(TOPICS)), _scores(fresh))


def test_colbert_index_rebuilt_in_place_is_another_cache(parts, tmp_path):
    colbert, _, _ = parts
    folder = tmp_path / "colbert"
    pfc.ColBERTIndex(folder).indexer(colbert).index(CORPUS)
    index = pfc.ColBERTIndex(folder)
    before = pfc.cache_folder("c", index.retriever(colbert, num_results=3))  # a pipeline: encoder >> retriever
    index.indexer(colbert, overwrite=True, long_docs="truncate").index(CORPUS[1:])  # the same object rebuilt
    assert pfc.cache_folder("c", index.retriever(colbert, num_results=3)) != before
    assert pfc.cache_folder("c", pfc.ColBERTIndex(folder).retriever(colbert, num_results=3)) != before


def test_relative_and_symlinked_paths_share_the_cache(parts, tmp_path, monkeypatch):
    colbert, tfidf, index = parts
    link = tmp_path / "link"
    link.symlink_to(index.path, target_is_directory=True)
    e2e = index.retriever(colbert, num_results=3)
    linked = pfc.ColBERTIndex(link).retriever(colbert, num_results=3)
    assert linked[1] == e2e[1]
    assert pfc.cache_folder("c", linked) == pfc.cache_folder("c", e2e)
    monkeypatch.chdir(Path(tfidf.path).parent)
    relative = pfc.TfidfIndex(Path(tfidf.path).name).retriever(3)
    assert pfc.cache_folder("c", relative >> e2e[1]) == pfc.cache_folder("c", tfidf.retriever(3) >> e2e[1])
    with pfc.RetrieverCache(pfc.cache_folder(tmp_path / "cache", e2e), e2e) as cache:
        expected = cache(TOPICS)
    spy = Spy(linked)
    with pfc.RetrieverCache(pfc.cache_folder(tmp_path / "cache", linked), spy) as cache:
        pd.testing.assert_frame_equal(_scores(cache(TOPICS)), _scores(expected))
    assert spy.seen == []  # every query came from the cache the original path wrote


def _zero_ending_topics(n):
    """Topics (qid, query) whose pyterrier-caching key (sha256 of the pickled sorted input row) ends in a zero
    byte, and as many whose key does not."""
    import hashlib
    import pickle

    zero, other = [], []
    i = 0
    while len(zero) < n or len(other) < n:
        qid, query = f"q{i}", "who forged the silver blade"
        ending = hashlib.sha256(pickle.dumps((qid, query))).digest()[-1]
        (zero if ending == 0 else other).append((qid, query))
        i += 1
    rows = zero[:n] + other[:n]
    return pd.DataFrame({"qid": [q for q, _ in rows], "query": [t for _, t in rows]}), {q for q, _ in zero[:n]}


def test_no_query_misses_whatever_its_key_ends_in(parts, tmp_path, count_calls):
    colbert, _, index = parts
    topics, zero = _zero_ending_topics(3)
    retriever = index.retriever(colbert, num_results=3)
    expected = retriever(topics)
    encodes = count_calls(pfc.ColBERT, "encode_queries")
    with pfc.RetrieverCache(pfc.cache_folder(tmp_path, retriever), retriever) as cache:
        cache(topics)
        first = encodes.calls
        second = cache(topics)
        assert encodes.calls == first  # no query recomputed, those whose key ends in a zero byte included
    pd.testing.assert_frame_equal(_scores(second), _scores(expected))
    # the upstream class misses exactly those queries (when this fails, pyterrier-caching fixed its bug)
    spy = Spy(retriever)
    with pyterrier_caching.RetrieverCache(tmp_path / "upstream", spy) as upstream:
        upstream(topics)
        spy.seen.clear()
        upstream(topics)
    assert set(spy.seen) == zero
    spy.seen.clear()
    with pfc.RetrieverCache(tmp_path / "upstream", spy) as fixed:  # reads the upstream cache's entries too
        pd.testing.assert_frame_equal(_scores(fixed(topics)), _scores(expected))
    assert spy.seen == []


class Spy(pt.Transformer):
    """``inner``, recording the qids it is asked for."""

    def __init__(self, inner):
        self.inner, self.seen = inner, []

    def transform_outputs(self, input_columns):
        return pt.inspect.transformer_outputs(self.inner, input_columns)

    def transform(self, frame):
        self.seen.extend(frame["qid"])
        return self.inner(frame)
