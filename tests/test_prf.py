"""ColBERT-PRF (index/prf.py) against a brute-force reference written from the paper's definition: document
frequencies counted with Python sets, IDF by hand, each centroid's token voted by plain sorting, the expanded
MaxSim computed token by token (the centroid as it is, against unit document vectors, as pyterrier_colbert scores
it); on an fp16 and a compressed index of one tiny corpus, re-ranking and re-retrieving."""
import dataclasses
import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
from pyterrier_fandom_colbert.index.prf import (
    PRF_COLUMNS,
    ColBERTPRF,
    PrfSettings,
    document_frequencies,
    kmeans,
    rescore,
)
from pyterrier_fandom_colbert.index.residual import compress as compressed

TOPICS = pd.DataFrame({"qid": ["q1", "q2"], "query": ["who forged the blade in the tower", "a storm over the harbour"]})


@pytest.fixture(scope="module")
def colbert(small_colbert):
    return small_colbert


@pytest.fixture(scope="module")
def records(word_records):
    return word_records(30, seed=5, min_words=5)


@pytest.fixture(scope="module", params=["fp16", "residual2"])
def index(request, colbert, records, tmp_path_factory):
    folder = tmp_path_factory.mktemp("prf")
    spec = compressed.CompressionSpec(request.param, num_centroids=8, niter=6) if request.param != "fp16" else "fp16"
    return ColBERTIndex(folder / request.param).indexer(colbert, compression=spec).index(records)


@pytest.fixture(scope="module")
def first_pass(colbert, index):
    return (colbert.query_encoder() >> index.retriever(num_results=12))(TOPICS)


def _cos(a, b):
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    return a @ b.T


def _unit_dot(centroid, d):
    """max over the document's rows of the raw centroid against each unit-normalised row."""
    return (d / np.linalg.norm(d, axis=-1, keepdims=True)) @ centroid


def reference(index, run, settings, candidates=None):
    """{(qid, docno): score} and {qid: expansion token ids}, by hand (cosine similarity, mean reduction), for the
    documents of ``run`` (or, given, every docno of ``candidates``)."""
    assert index.config.similarity == "cosine" and index.config.reduction == "mean"
    docs = {index.docnos_of(np.array([i]))[0]: index.doc_vectors(i) for i in range(len(index))}
    df = Counter(t for _, tids in docs.values() for t in set(tids.tolist()))
    n_docs = len(docs)
    scores, tokens = {}, {}
    for qid, rows in run.groupby("qid"):
        rows = rows.sort_values("rank")
        q = np.asarray(rows["query_embs"].iloc[0], dtype=np.float64)
        feedback = rows["docno"].tolist()[:settings.fb_docs]
        vecs = np.concatenate([docs[d][0] for d in feedback])
        tids = np.concatenate([docs[d][1] for d in feedback])
        centroids = kmeans(vecs, settings.k, settings.seed)  # the clustering itself is FAISS's
        chosen = []
        for c, centroid in enumerate(centroids):
            sims = _cos(centroid[None].astype(np.float64), vecs.astype(np.float64))[0]
            near = sorted(range(len(vecs)), key=lambda j: -sims[j])[:settings.nn_tokens]
            voters = [int(tids[j]) for j in near if df[int(tids[j])] < n_docs]  # tokens in every document skipped
            if not voters:
                continue  # the centroid is dropped
            votes = Counter(voters)
            top = max(votes.values())
            token = next(t for t in voters if votes[t] == top)
            chosen.append((-math.log((n_docs + 1) / (df[token] + 1)), c, token))
        chosen = sorted(chosen)[:settings.fb_embs]
        tokens[qid] = [t for _, _, t in chosen]
        for docno in (rows["docno"] if candidates is None else candidates):
            d = docs[docno][0].astype(np.float64)
            original = sum(_cos(qi[None], d).max() for qi in q)
            expansion = sum(-w * _unit_dot(centroids[c].astype(np.float64), d).max() for w, c, _ in chosen)
            scores[qid, docno] = (original + settings.beta * expansion) / len(q)
    return scores, tokens


@pytest.mark.parametrize("settings", [PrfSettings(), PrfSettings(fb_docs=2, fb_embs=3, beta=0.5, k=6, nn_tokens=1)])
def test_scores_and_expansions_match_the_brute_force_reference(index, first_pass, settings):
    out = ColBERTPRF(index, **dataclasses.asdict(settings))(first_pass)
    expected, tokens = reference(index, first_pass, settings)
    assert len(out) == len(first_pass) and set(out.columns) >= set(first_pass.columns) | set(PRF_COLUMNS)
    for row in out.itertuples():
        assert row.score == pytest.approx(expected[row.qid, row.docno], abs=1e-5)
        assert list(row.prf_toks) == tokens[row.qid]
    for _, rows in out.groupby("qid"):  # ranks follow the new scores
        assert rows.sort_values("rank")["score"].is_monotonic_decreasing


def _everything(index):
    """A retriever of ``index`` whose candidates are every document (exhaustive search)."""
    if index.compressed:
        return index.retriever(num_results=len(index), ncells=8, threshold=-1.0, ndocs=None)
    return index.retriever(num_results=len(index), faiss="exact", k_hat=int(index.meta.num_tokens))


@pytest.mark.parametrize("settings", [PrfSettings(), PrfSettings(fb_docs=2, fb_embs=3, beta=0.5, k=6, nn_tokens=1)])
def test_re_retrieval_scores_every_document_the_retriever_finds_as_the_reference_does(index, first_pass, settings):
    prf = index.prf(**dataclasses.asdict(settings), retriever=_everything(index))
    out = prf(first_pass)
    every = index.docnos_of(np.arange(len(index))).tolist()
    expected, tokens = reference(index, first_pass, settings, candidates=every)
    assert set(out.columns) == set(prf.transform_outputs(list(first_pass.columns)))
    for qid, rows in out.groupby("qid"):
        assert sorted(rows["docno"]) == sorted(every)  # beyond the 12 documents it was given
        assert rows.sort_values("rank")["score"].is_monotonic_decreasing
        assert list(rows["prf_toks"].iloc[0]) == tokens[qid]
        q_given = first_pass[first_pass["qid"] == qid]["query_embs"].iloc[0]
        np.testing.assert_array_equal(np.asarray(rows["query_embs"].iloc[0]), np.asarray(q_given))
    for row in out.itertuples():
        assert row.score == pytest.approx(expected[row.qid, row.docno], abs=1e-5)
    # on the documents both hold, re-ranking gives the same scores: the retrieval only adds candidates
    reranked = index.prf(**dataclasses.asdict(settings))(first_pass)
    merged = reranked.merge(out, on=["qid", "docno"])
    assert len(merged) == len(first_pass)
    np.testing.assert_allclose(merged["score_x"], merged["score_y"], atol=1e-6)


def test_re_retrieval_searches_with_the_expanded_query(index, first_pass):
    import pyterrier as pt

    seen = []

    def spy(topics):
        seen.append(topics)
        return first_pass[first_pass["qid"] == topics["qid"].iloc[0]][["qid", "docno", "score", "rank"]] \
            .merge(topics, on="qid")

    prf = index.prf(fb_embs=4, k=6, retriever=pt.apply.by_query(spy, add_ranks=False))
    prf(first_pass)
    assert len(seen) == 2
    for topics in seen:
        own = first_pass[first_pass["qid"] == topics["qid"].iloc[0]]["query_embs"].iloc[0]
        expanded = np.asarray(topics["query_embs"].iloc[0])
        assert expanded.shape == (len(own) + 4, index.meta.dim)
        np.testing.assert_allclose(expanded[:len(own)], np.asarray(own), atol=1e-6)


def test_beta_zero_is_colberts_own_score(index, first_pass):
    prf = index.prf(beta=0.0)(first_pass)
    plain = index.scorer()(first_pass.drop(columns=["score", "rank"]))
    merged = prf.merge(plain, on=["qid", "docno"], suffixes=("_prf", "_colbert"))
    np.testing.assert_allclose(merged["score_prf"], merged["score_colbert"], atol=1e-5)
    np.testing.assert_allclose(merged["prf_query_score"], merged["score_colbert"], atol=1e-5)


def test_rescore_gives_what_a_run_with_those_settings_gives(index, first_pass):
    full = index.prf(beta=1.0, fb_embs=10)(first_pass)
    direct = index.prf(beta=0.5, fb_embs=5)(first_pass)
    again = rescore(full, beta=0.5, fb_embs=5)
    merged = again.merge(direct, on=["qid", "docno"])
    np.testing.assert_allclose(merged["score_x"], merged["score_y"], atol=1e-9)
    assert (merged["rank_x"] == merged["rank_y"]).all()


def test_document_frequencies_count_documents_not_occurrences():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 9, size=20)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tids = rng.integers(0, 15, size=offsets[-1])
    by_hand = Counter(t for i in range(20) for t in set(tids[offsets[i]:offsets[i + 1]].tolist()))
    df = document_frequencies(tids, offsets, vocab_size=20)
    assert len(df) == 20 and df.tolist() == [by_hand.get(t, 0) for t in range(20)]


def test_kmeans_recovers_separated_clusters_and_is_seeded():
    rng = np.random.default_rng(1)
    means = np.array([[5.0, 0, 0], [0, 5.0, 0], [0, 0, 5.0]], dtype=np.float32)
    points = np.concatenate([m + 0.01 * rng.standard_normal((20, 3)) for m in means]).astype(np.float32)
    found = kmeans(points, 3, seed=7)
    for m in means:
        assert np.abs(found - m).sum(1).min() < 0.05
    np.testing.assert_array_equal(found, kmeans(points, 3, seed=7))
    assert len(kmeans(points[:2], 24)) == 2  # fewer vectors than clusters: each its own


def test_empty_frame_equality_and_parameters(index, first_pass):
    prf = index.prf()
    empty = prf(first_pass.iloc[:0])
    assert len(empty) == 0 and list(empty.columns) == prf.transform_outputs(list(first_pass.columns))
    assert prf == index.prf() and hash(prf) == hash(index.prf()) and prf != index.prf(beta=0.5)
    assert prf == ColBERTIndex(index.path).prf()
    assert prf.get_parameter("beta") == 1.0 and prf.get_parameter("fb_embs") == 10
    prf.set_parameter("beta", 0.5)
    assert prf == index.prf(beta=0.5) and prf.get_parameter("beta") == 0.5
    with pytest.raises(ValueError, match="fb_embs=30"):
        prf.set_parameter("fb_embs", 30)
    with pytest.raises(ValueError, match="beta=-1"):
        index.prf(beta=-1)
    assert prf.get_parameter("beta") == 0.5  # a refused value leaves the settings as they were
    assert repr(index.prf(fb_docs=2)).endswith(".prf(fb_docs=2, fb_embs=10, beta=1.0, k=24, nn_tokens=10, seed=42)")
    retrieving = index.prf(retriever=index.retriever(num_results=5))
    assert retrieving != index.prf() and retrieving == index.prf(retriever=index.retriever(num_results=5))
    assert retrieving != index.prf(retriever=index.retriever(num_results=6))
    assert "retriever=" in repr(retrieving)
    empty = retrieving(first_pass.iloc[:0])
    assert len(empty) == 0 and list(empty.columns) == retrieving.transform_outputs(list(first_pass.columns))
    with pytest.raises(TypeError, match="retriever='idx'"):
        index.prf(retriever="idx")


def test_missing_columns_are_named(index, first_pass):
    import pyterrier as pt

    with pytest.raises(pt.validate.InputValidationError, match="query_embs"):
        index.prf()(first_pass.drop(columns=["query_embs"]))


def _prf_eval():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "prf_eval.py"
    spec = importlib.util.spec_from_file_location("prf_eval", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_one_pass_over_fb_docs_gives_one_run_per_value(index, first_pass):
    """benchmarks/prf_eval.py scores the expansions of several fb_docs in one similarity pass: each run must be
    what index.prf(fb_docs=...) gives on its own (the benchmark's figures rest on it)."""
    base = index.prf(fb_embs=4, beta=0.7)
    runs = _prf_eval().rerank_fb_docs(base, first_pass, [1, 3, 2, 3])
    assert list(runs) == [1, 3, 2]
    for fb_docs, run in runs.items():
        alone = base.replace(fb_docs=fb_docs)(first_pass)
        assert list(run.columns) == list(alone.columns)
        key = ["qid", "docno"]
        run, alone = run.sort_values(key).reset_index(drop=True), alone.sort_values(key).reset_index(drop=True)
        assert run[key].equals(alone[key]) and run["rank"].tolist() == alone["rank"].tolist()
        np.testing.assert_allclose(run["score"], alone["score"], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(run["prf_query_score"], alone["prf_query_score"], rtol=1e-6, atol=1e-7)
        for column in ("prf_toks", "prf_weights", "prf_maxsim", "prf_embs"):
            for got, want in zip(run[column], alone[column]):
                np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64),
                                           rtol=1e-6, atol=1e-7)
    assert len({tuple(r["prf_toks"].iloc[0]) for r in runs.values()}) > 1  # the values do differ
    with pytest.raises(ValueError, match="re-retrieves"):
        _prf_eval().rerank_fb_docs(index.prf(retriever=index.retriever()), first_pass, [1])


def test_expansion_terms_as_text(index, first_pass, colbert):
    plain = index.prf(fb_embs=4, k=6)(first_pass)
    named = index.prf(fb_embs=4, k=6, colbert=colbert)(first_pass)
    assert "prf_terms" not in plain.columns and list(named.columns) == [*plain.columns, "prf_terms"]
    for toks, terms in zip(named["prf_toks"], named["prf_terms"]):
        assert terms == colbert.tokenizer.hf.convert_ids_to_tokens([int(t) for t in toks])  # decoded, in order
        assert all(isinstance(t, str) for t in terms) and len(terms) == 4
    assert set(" ".join(t for ts in named["prf_terms"] for t in ts).split()) <= set(colbert.tokenizer.hf.get_vocab())
    retrieved = index.prf(fb_embs=4, k=6, colbert=colbert, retriever=index.retriever(num_results=5))(first_pass)
    assert len(retrieved) and all(len(t) == 4 for t in retrieved["prf_terms"])
    empty = index.prf(colbert=colbert)(first_pass.iloc[:0])
    assert len(empty) == 0 and "prf_terms" in empty.columns
