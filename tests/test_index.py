"""ColBERTIndex: building, loading, end-to-end FAISS retrieval and index-based re-ranking, checked against
brute-force MaxSim references computed here."""
import json
import math

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
import torch

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.index import ann as faiss_ann
from pyterrier_fandom_colbert.index.ann import FaissSpec
from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
from pyterrier_fandom_colbert.index.fp16.search import ColBERTRetriever
from pyterrier_fandom_colbert.index.text_search import TextRetriever
from pyterrier_fandom_colbert.model.scoring import maxsim
from pyterrier_fandom_colbert.model.similarity import SIMILARITIES, get_similarity

SUBJECTS = ["The castle of Vel Amara", "Captain Mirel of the grey fleet", "The silver dragon Ysolde",
            "Old Orrin the smith", "The river folk of Dunmere", "Queen Salasi", "The northern merchants' guild",
            "A wandering bard called Pell", "The library of Kest", "The twin moons of Arhan"]
FACTS = ["was built during the third age, after the flood", "fought a long war against the hill giants",
         "guards a crown of frozen fire beneath the mountain", "forged twelve blades from fallen stars",
         "trades spices and silk along the eastern coast", "is remembered in songs about the lost city of Ombra"]
PASSAGES = [f"{s} {f}." for s in SUBJECTS for f in FACTS]  # 60 short passages
TOPICS = pd.DataFrame({"qid": ["q1", "q2", "q3"],
                       "query": ["who forged blades from fallen stars", "when was the castle built",
                                 "what does the dragon guard under the mountain"]})
CONFIG = pfc.ColBERTConfig(dim=16, doc_maxlen=64, query_maxlen=16)


def corpus(n=len(PASSAGES)):
    return [{"docno": f"p{i:02d}", "text": PASSAGES[i]} for i in range(n)]


@pytest.fixture(scope="module")
def colbert(tiny_bert_dir):
    torch.set_num_threads(2)
    return pfc.ColBERT.from_pretrained(tiny_bert_dir, config=CONFIG, device="cpu", batch_size=8)


@pytest.fixture(scope="module")
def index(colbert, tmp_path_factory):
    path = tmp_path_factory.mktemp("idx") / "colbert.idx"
    return ColBERTIndex(path).indexer(colbert, batch_size=16).index(iter(corpus()))


def exhaustive(index, colbert, query):
    """Scores of every indexed document by brute force: scoring.maxsim over each document's stored vectors."""
    Q, mask = colbert.encode_queries([query])
    cfg = index.config
    out = {}
    for i in range(len(index)):
        vecs, _ = index.doc_vectors(i)
        out[f"p{i:02d}"] = float(maxsim(Q, torch.as_tensor(vecs)[None], mask, None, cfg.similarity, cfg.reduction))
    return out


def reference_search(index, colbert, query, k, lam):
    """The end-to-end algorithm written out by brute force: exact token neighbours over all stored vectors."""
    Q, mask = colbert.encode_queries([query])
    q = torch.nn.functional.normalize(Q[0][mask[0]], dim=-1)
    toks = torch.nn.functional.normalize(torch.as_tensor(np.asarray(index.vectors, dtype=np.float32)), dim=-1)
    rows = (q @ toks.T).topk(math.ceil(k / lam), dim=1).indices.flatten().numpy()
    docs = {int(np.searchsorted(index.offsets, r, side="right") - 1) for r in rows}
    scores = exhaustive(index, colbert, query)
    ranked = sorted(((scores[f"p{d:02d}"], f"p{d:02d}") for d in docs), key=lambda t: (-t[0], t[1]))
    return ranked[:k]


# -- the artifact ----------------------------------------------------------------------------------------
def test_round_trip_through_artifact_load(index, colbert):
    loaded = pt.Artifact.load(str(index.path))
    assert isinstance(loaded, ColBERTIndex)
    meta = json.loads((index.path / "pt_meta.json").read_text())
    assert (meta["type"], meta["format"], meta["package_hint"]) == ("colbert", "fp16", "pyterrier-fandom-colbert")
    assert len(loaded) == 60 and loaded.fingerprint == colbert.fingerprint() and loaded.config == colbert.config
    assert loaded.vectors.dtype == np.float16 and loaded.vectors.shape == (meta["num_tokens"], 16)
    assert loaded.offsets[0] == 0 and loaded.offsets[-1] == meta["num_tokens"]
    # stored vectors and token ids are what the encoder produces for that text, in input order
    for i in (0, 17, 59):
        batch = next(colbert.doc_batches([PASSAGES[i]]))
        _, fresh, fresh_ids = next(batch.per_document())
        vecs, ids = loaded.doc_vectors(f"p{i:02d}")
        np.testing.assert_allclose(vecs, fresh, atol=2e-3)
        assert ids.tolist() == fresh_ids.tolist() and ids.dtype == np.int32
        np.testing.assert_array_equal(loaded.doc_vectors(i)[0], vecs)
    assert loaded.doc_ids(["p59", "p00"]).tolist() == [59, 0]


def test_indexer_takes_a_dataframe_and_any_batch_size(index, colbert, tmp_path):
    other = ColBERTIndex(tmp_path / "df.idx").indexer(colbert, batch_size=7).index(pd.DataFrame(corpus()))
    np.testing.assert_array_equal(np.asarray(other.vectors), np.asarray(index.vectors))
    np.testing.assert_array_equal(np.asarray(other.offsets), np.asarray(index.offsets))
    assert other.docnos_of(np.arange(60)).tolist() == [d["docno"] for d in corpus()]


def test_interrupted_build_leaves_nothing(colbert, tmp_path):
    def failing():
        yield from corpus(30)
        raise RuntimeError("corpus reader died")

    target = tmp_path / "broken.idx"
    with pytest.raises(RuntimeError, match="reader died"):
        ColBERTIndex(target).indexer(colbert, batch_size=8).index(failing())
    assert not target.exists() and list(tmp_path.iterdir()) == []
    with pytest.raises(FileNotFoundError):
        pt.Artifact.load(str(target))


def test_overwrite_refused_unless_asked(colbert, tmp_path):
    target = tmp_path / "o.idx"
    idx = ColBERTIndex(target).indexer(colbert).index(corpus(5))
    with pytest.raises(FileExistsError, match="overwrite=True"):
        ColBERTIndex(target).indexer(colbert).index(corpus(8))
    assert len(ColBERTIndex(target)) == 5
    assert len(idx) == 5
    idx.indexer(colbert, overwrite=True).index(corpus(8))
    assert len(idx) == 8 and len(ColBERTIndex(target)) == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.idx"]


@pytest.mark.parametrize("docs, message", [
    ([{"docno": "a", "text": "one"}, {"docno": "b", "text": "two"}, {"docno": "a", "text": "three"}],
     r"duplicate docno\(s\) \['a'\]"),
    ([{"docno": "a", "text": "one"}, {"docno": "a", "text": "two"}], r"duplicate docno\(s\) \['a'\]"),
    ([{"docno": "a", "text": "one"}, {"docno": "b", "text": float("nan")}], r"document #1 \(docno 'b'\) has text=nan"),
    ([{"docno": "a", "text": None}], r"document #0 \(docno 'a'\) has text=None"),
    ([{"docno": 7, "text": "seven"}], "document #0 has docno=7; expected a non-empty string"),
    ([{"id": "a", "text": "one"}], "expected 'docno' and 'text'"),
    ([], "no documents"),
])
def test_bad_corpus_is_refused_and_leaves_nothing(colbert, tmp_path, docs, message):
    with pytest.raises(ValueError, match=message):
        ColBERTIndex(tmp_path / "bad.idx").indexer(colbert).index(docs)
    assert list(tmp_path.iterdir()) == []


def test_any_docnos_index_and_read_back(colbert, tmp_path):
    """One document, and a last docno unlike all before it, are indexed and found (npids once wrote both
    unreadably, so the first was refused and the second failed inside npids)."""
    one = ColBERTIndex(tmp_path / "one.idx").indexer(colbert).index([{"docno": "solo", "text": "a lone dragon"}])
    assert len(one) == 1 and one.doc_ids(["solo"]).tolist() == [0]
    docs = [{"docno": f"doc-{i:04d}", "text": f"passage {i}"} for i in range(300)] + [{"docno": "zz", "text": "x"}]
    odd = ColBERTIndex(tmp_path / "odd.idx").indexer(colbert, batch_size=128).index(docs)
    assert odd.doc_ids(["zz", "doc-0007"]).tolist() == [300, 7]
    assert odd.docnos_of(np.array([300, 0])).tolist() == ["zz", "doc-0000"]


def test_writer_refuses_bad_vectors(tmp_path):
    with pytest.raises(ValueError, match=r"expected \[n, 16\]"), \
            ColBERTIndex(tmp_path / "w.idx").writer(CONFIG, "fp") as w:
        w.add("d1", np.ones((3, 8), dtype=np.float32), np.arange(3))
    with pytest.raises(ValueError, match="no token vectors"), \
            ColBERTIndex(tmp_path / "w.idx").writer(CONFIG, "fp") as w:
        w.add("d1", np.ones((0, 16), dtype=np.float32), np.arange(0))
    assert list(tmp_path.iterdir()) == []


def test_unbuilt_index_says_how_to_build(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"\.indexer\(colbert\)\.index"):
        len(ColBERTIndex(tmp_path / "nothing"))


# -- end-to-end retrieval ------------------------------------------------------------------------------------
def test_exact_lambda_1_large_k_is_exhaustive_maxsim(index, colbert):
    res = index.retriever(colbert, num_results=1000, lam=1, faiss="exact")(TOPICS)
    assert list(res.columns) == ["qid", "query", "query_embs", "query_toks", "docno", "score", "rank"]
    for qid, query in zip(TOPICS.qid, TOPICS["query"]):
        got = res[res.qid == qid]
        ref = sorted(exhaustive(index, colbert, query).items(), key=lambda t: (-t[1], t[0]))
        assert got.docno.tolist() == [d for d, _ in ref]  # every document, fewer than k = 1000
        np.testing.assert_allclose(got.score.to_numpy(), [s for _, s in ref], atol=1e-5)
        assert got["rank"].tolist() == list(range(60))


@pytest.mark.parametrize("k, lam", [(5, 1), (10, 2), (8, 8)])
def test_small_k_follows_the_candidate_algorithm(index, colbert, k, lam):
    res = index.retriever(colbert, num_results=k, lam=lam, faiss="exact")(TOPICS)
    for qid, query in zip(TOPICS.qid, TOPICS["query"]):
        got = res[res.qid == qid]
        ref = reference_search(index, colbert, query, k, lam)
        assert got.docno.tolist() == [d for _, d in ref]
        np.testing.assert_allclose(got.score.to_numpy(), [s for s, _ in ref], atol=1e-5)


def test_rank_cutoff_is_fused(index, colbert):
    retr = index.retriever(num_results=50, lam=1, faiss="exact")
    fused = (retr % 5).compile()
    assert isinstance(fused, ColBERTRetriever) and fused.num_results == 5
    assert (retr % 100).compile() is retr
    pipeline = index.retriever(colbert, num_results=50, lam=1, faiss="exact")
    # the encoder and the retriever compile into one stage, equal by key: same encoder and settings
    assert (colbert.query_encoder() >> retr).compile() == pipeline and pipeline.retriever == retr
    # the cut keeps the uncut search's k̂ (50 = 50 / λ), so its top 5 is the uncut list's top 5
    cut = (pipeline % 5).compile()
    assert isinstance(cut, TextRetriever) and cut.retriever == index.retriever(num_results=5, k_hat=50, faiss="exact")
    pd.testing.assert_frame_equal(cut(TOPICS), index.retriever(colbert, num_results=5, k_hat=50, faiss="exact")(TOPICS))


def test_other_columns_kept_and_empty_frames(index, colbert):
    topics = TOPICS.assign(extra=[1, 2, 3])
    retr = index.retriever(colbert, num_results=4)
    res = retr(topics)
    assert list(res.columns) == retr.transform_outputs(list(topics.columns))
    assert (res.groupby("qid").extra.first() == pd.Series([1, 2, 3], index=["q1", "q2", "q3"])).all()
    empty = retr(topics.iloc[:0])
    assert len(empty) == 0 and list(empty.columns) == list(res.columns)
    scored = index.scorer(colbert)(res.iloc[:0])
    assert len(scored) == 0 and {"score", "rank"} <= set(scored.columns)


def test_ivf_and_ivfpq_overlap_exact_and_are_cached(index, colbert):
    flat = index.retriever(colbert, num_results=10, faiss="exact")(TOPICS)
    for kind, nprobe, refine in [("ivf", 8, 1), ("ivfpq", 8, 1), ("ivfpq-fs", 8, 2)]:
        approx = index.retriever(colbert, num_results=10, faiss=kind, nprobe=nprobe, refine=refine)(TOPICS)
        overlap = np.mean([len(set(flat[flat.qid == q].docno) & set(approx[approx.qid == q].docno)) / 10
                           for q in TOPICS.qid])
        assert overlap >= 0.8, (kind, overlap)
        spec = FaissSpec(kind).resolve(index.meta.num_tokens, 16)
        params = json.loads((index.path / "faiss" / f"{spec.file_stem()}.json").read_text())
        assert params["spec"]["nlist"] == spec.nlist and params["num_tokens"] == index.meta.num_tokens
        # a fresh handle reads the cached FAISS index and gives the same results
        again = ColBERTIndex(index.path).retriever(colbert, num_results=10, faiss=kind, nprobe=nprobe,
                                                   refine=refine)(TOPICS)
        pd.testing.assert_frame_equal(again, approx)
    # exhaustive probing of fp16 IVF lists finds exactly the exact neighbours
    nlist = FaissSpec("ivf").resolve(index.meta.num_tokens, 16).nlist
    full = index.retriever(colbert, num_results=10, faiss="ivf", nprobe=nlist)(TOPICS)
    assert full.docno.tolist() == flat.docno.tolist()


def test_k_hat_is_the_neighbour_count_and_survives_rank_cutoff(index, colbert):
    retr = index.retriever(num_results=50, k_hat=7, faiss="exact")
    assert retr.k_hat == 7 and retr.lam is None
    fused = (retr % 5).compile()
    assert fused.num_results == 5 and fused.k_hat == 7
    assert index.retriever(num_results=50, lam=5).k_hat == 10
    assert index.retriever(num_results=151).k_hat == 76  # ceil(151 / 2): λ defaults to 2 ...
    assert index.retriever(num_results=51).k_hat == 50  # ... with at least 50 neighbours
    assert (index.retriever(num_results=1000) % 10).compile().k_hat == 500  # % k keeps the uncut k̂
    for qid, query in zip(TOPICS.qid, TOPICS["query"]):  # k̂ = 7 neighbours, as with λ = 5 / 7
        got = (colbert.query_encoder() >> fused)(TOPICS[TOPICS.qid == qid])
        ref = reference_search(index, colbert, query, 5, 5 / 7)
        assert got.docno.tolist() == [d for _, d in ref]


def test_bad_retriever_settings(index, colbert):
    with pytest.raises(ValueError, match="nprobe=4 applies only"):
        index.retriever(colbert, nprobe=4, faiss="exact")
    with pytest.raises(ValueError, match="faiss='hnsw' is not supported"):
        index.retriever(colbert, faiss="hnsw")
    with pytest.raises(ValueError, match="lam=0"):
        index.retriever(colbert, lam=0)
    with pytest.raises(ValueError, match="lam=2 and k_hat=10 both set"):
        index.retriever(colbert, lam=2, k_hat=10)
    with pytest.raises(ValueError, match="k_hat=0"):
        index.retriever(colbert, k_hat=0)
    with pytest.raises(ValueError, match=r"refine=2; .*faiss='exact' neighbours are exact"):
        index.retriever(colbert, refine=2, faiss="exact")
    with pytest.raises(ValueError, match="refine=0"):
        index.retriever(colbert, faiss="ivfpq", refine=0)


@pytest.mark.parametrize("kind", list(faiss_ann.KINDS))
def test_retriever_refuses_what_a_kind_does_not_accept(index, colbert, kind):
    """Each kind says which options it takes; the others are refused with a message naming the kind."""
    accepts = faiss_ann.KINDS[kind].options
    for option, value in [("nprobe", 4), ("refine", 2)]:
        if option in accepts:
            retr = index.retriever(faiss=kind, **{option: value})
            assert getattr(retr, option) == value
        else:
            with pytest.raises(ValueError, match=f"{option}={value}.*faiss='{kind}'"):
                index.retriever(colbert, faiss=kind, **{option: value})
    for option in ("nlist", "pq_m", "pq_bits", "train_size"):
        if option not in accepts:
            with pytest.raises(ValueError, match=f"{option}=4 does not apply to faiss='{kind}'"):
                index.retriever(colbert, faiss=FaissSpec(kind, **{option: 4}))
    default = index.retriever(faiss=kind)
    assert default.nprobe == faiss_ann.KINDS[kind].default_nprobe and default.refine == 1


def test_flat_is_another_name_for_exact(index, colbert):
    flat = index.retriever(colbert, num_results=10, faiss="flat")
    exact = index.retriever(colbert, num_results=10, faiss="exact")
    assert exact.retriever.spec == flat.retriever.spec and exact.retriever.spec.kind == "exact"
    assert "faiss='exact'" in repr(flat.retriever)
    pd.testing.assert_frame_equal(exact(TOPICS), flat(TOPICS))


def test_a_new_kind_is_one_registered_class(index, colbert):
    """HNSW written here as a user would add it: a registered AnnKind subclass, nothing else changed."""
    import faiss

    class Hnsw(faiss_ann.AnnKind):
        name = "test-hnsw"
        options = frozenset({"refine"})

        def factory_string(self, spec):
            return "HNSW16"

        def file_stem(self, spec):
            return f"{self.name}-m16"

        def search(self, index, queries, k, nprobe=None):
            _, ids = index.search(queries, k, params=faiss.SearchParametersHNSW(efSearch=max(256, k)))
            return ids

    faiss_ann.register_kind(Hnsw())
    try:
        flat = index.retriever(colbert, num_results=10, faiss="exact")(TOPICS)
        hnsw = index.retriever(colbert, num_results=10, faiss="test-hnsw", refine=2)(TOPICS)
        overlap = np.mean([len(set(flat[flat.qid == q].docno) & set(hnsw[hnsw.qid == q].docno)) / 10
                           for q in TOPICS.qid])
        assert overlap >= 0.9
        assert (index.path / "faiss" / "test-hnsw-m16.faiss").exists()
        with pytest.raises(ValueError, match=r"nprobe=4 applies only to faiss in .*, not faiss='test-hnsw'"):
            index.retriever(colbert, faiss="test-hnsw", nprobe=4)
    finally:
        del faiss_ann.KINDS["test-hnsw"]


@pytest.mark.parametrize("similarity", list(SIMILARITIES))
def test_refine_keeps_the_exactly_nearest_of_the_candidates(similarity, numpy_similarity):
    rng = np.random.default_rng(3)
    stored = torch.as_tensor(rng.standard_normal((200, 8)) * rng.uniform(0.5, 2, (200, 1)), dtype=torch.float16)
    queries = rng.standard_normal((5, 8)).astype(np.float32)
    ids = np.stack([rng.choice(200, 30, replace=False) for _ in range(5)])
    ids[1, 25:] = -1  # fewer candidates for this query vector
    ids[2, 4:] = -1   # fewer candidates than k
    got = faiss_ann.refine(stored, queries, ids, 6, similarity)
    assert got.shape == (5, 6)
    for q, cand, kept in zip(queries, ids, got):
        cand = cand[cand >= 0]
        sims = numpy_similarity(similarity, q[None], stored.double().numpy()[cand])[0]
        want = set(cand[np.argsort(-sims)[:6]].tolist())
        assert set(kept[kept >= 0].tolist()) == want and (kept < 0).sum() == 6 - len(want)


def test_refine_over_every_token_recovers_the_exact_neighbours(index, colbert):
    """Probing every list and refining a candidate list as long as the index leaves only the exact k̂
    nearest tokens, whatever the 4-bit codes got wrong: the result is the flat retriever's."""
    flat = index.retriever(colbert, num_results=10, lam=2, faiss="exact")(TOPICS)
    spec = FaissSpec("ivfpq-fs").resolve(index.meta.num_tokens, index.meta.dim)
    rough = index.retriever(colbert, num_results=10, lam=2, faiss="ivfpq-fs", nprobe=spec.nlist)(TOPICS)
    refine = math.ceil(index.meta.num_tokens / 5)  # k̂ = 5
    retr = index.retriever(colbert, num_results=10, lam=2, faiss="ivfpq-fs", nprobe=spec.nlist, refine=refine)
    bare = index.retriever(num_results=10, lam=2, faiss="ivfpq-fs", nprobe=spec.nlist, refine=refine)
    assert (bare % 5).compile().refine == refine and f"refine={refine}" in repr(bare)
    refined = retr(TOPICS)
    assert refined.docno.tolist() == flat.docno.tolist()
    np.testing.assert_allclose(refined.score, flat.score, rtol=0, atol=1e-6)
    assert rough.docno.tolist() != flat.docno.tolist()  # the codes alone do not find them


def test_mismatched_query_encoder_is_refused(index, tiny_bert_dir):
    other = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=CONFIG, seed=1, device="cpu")
    for factory in (index.retriever, index.scorer):
        with pytest.raises(ValueError, match="is not the encoder") as err:
            factory(other)
        assert other.fingerprint() in str(err.value) and index.fingerprint in str(err.value)


# -- index-based re-ranking ----------------------------------------------------------------------------------
def test_index_scorer_matches_text_scorer(index, colbert):
    rng = np.random.default_rng(0)
    rows = [{"qid": qid, "query": query, "docno": f"p{i:02d}", "text": PASSAGES[i], "first_stage": float(j)}
            for qid, query in zip(TOPICS.qid, TOPICS["query"])
            for j, i in enumerate(rng.choice(60, 20, replace=False))]
    cands = pd.DataFrame(rows)
    by_index = index.scorer(colbert)(cands.drop(columns="text"))
    by_text = colbert.text_scorer()(cands)
    merged = by_index.merge(by_text, on=["qid", "docno"], suffixes=("", "_text"))
    assert len(merged) == 60
    assert np.abs(merged.score - merged.score_text).max() < 1e-3
    assert "first_stage" in by_index.columns
    for qid in TOPICS.qid:  # rank follows score within each query
        got = by_index[by_index.qid == qid]
        assert got["rank"].tolist() == list(range(20)) and got.score.is_monotonic_decreasing


def test_index_scorer_equals_retriever_scores(index, colbert):
    res = index.retriever(colbert, num_results=15, lam=1, faiss="exact")(TOPICS)
    rescored = index.scorer(colbert)(res.drop(columns=["score", "rank"]))
    np.testing.assert_allclose(rescored.score.to_numpy(), res.score.to_numpy(), atol=1e-6)


def test_unknown_docnos_are_named(index, colbert):
    frame = pd.DataFrame({"qid": ["q1"] * 3, "query": ["castle"] * 3, "docno": ["p01", "nope-1", "nope-2"]})
    with pytest.raises(ValueError, match=r"2 docno\(s\) are not in the index.*'nope-1', 'nope-2'"):
        index.scorer(colbert)(frame)
    with pytest.raises(ValueError, match="nope-3"):
        index.doc_vectors("nope-3")


def test_scores_do_not_depend_on_blocking(index, colbert):
    from pyterrier_fandom_colbert.index.fp16.search import score_docs

    Q, mask = colbert.encode_queries(["castle built by the river folk"])
    docs = np.array([3, 5, 8, 13, 21, 34, 55])
    whole = score_docs(index, Q[0][mask[0]], docs)
    for block in (1, 7, 40):  # one token per block (each document alone), a few documents, many
        np.testing.assert_allclose(score_docs(index, Q[0][mask[0]], docs, block_tokens=block), whole, atol=1e-6)
    ref = exhaustive(index, colbert, "castle built by the river folk")
    np.testing.assert_allclose(whole, [ref[f"p{d:02d}"] for d in docs], atol=1e-5)


@pytest.mark.parametrize("similarity", list(SIMILARITIES))
def test_every_similarity_retrieves_by_its_own_neighbours(tiny_bert_dir, tmp_path, similarity, numpy_similarity):
    """End to end with few neighbours per query vector (so the neighbour search decides the candidates): the
    documents of the brute-force nearest stored tokens by the similarity, scored by exhaustive MaxSim; exhaustive
    probing of fp16 IVF lists finds the same."""
    # the synthetic corpus repeats words, so some stored tokens tie as neighbours of a query token and either
    # may be kept; with the [MASK] vectors scored too (this query set's known tie-free setting) none decides the top 5
    config = CONFIG.replace(similarity=similarity, normalise=False, score_query_masks=True)
    colbert = pfc.ColBERT.from_pretrained(tiny_bert_dir, device="cpu", config=config)
    index = ColBERTIndex(tmp_path / "s.idx").indexer(colbert).index(corpus(30))
    toks = np.asarray(index.vectors, dtype=np.float32)
    Q, mask = colbert.encode_queries(TOPICS["query"].tolist())
    expected = []
    for i in range(len(TOPICS)):
        rows = np.argsort(-numpy_similarity(similarity, Q[i][mask[i]].numpy(), toks), axis=1)[:, :3]
        docs = set(np.searchsorted(index.offsets, rows.ravel(), side="right") - 1)
        scores = {d: float(maxsim(Q[i:i + 1], torch.as_tensor(index.doc_vectors(int(d))[0])[None], mask[i:i + 1],
                                  None, similarity)) for d in docs}
        expected += [f"p{d:02d}" for d in sorted(docs, key=lambda d: (-scores[d], d))][:5]
    assert index.retriever(colbert, num_results=5, k_hat=3, faiss="exact")(TOPICS).docno.tolist() == expected
    nlist = FaissSpec("ivf").resolve(index.meta.num_tokens, 16).nlist
    ivf = index.retriever(colbert, num_results=5, k_hat=3, faiss="ivf", nprobe=nlist)(TOPICS)
    assert ivf.docno.tolist() == expected


def test_l2_similarity_uses_l2_neighbours(tiny_bert_dir, tmp_path):
    """Unnormalised vectors scored by negated squared L2: FAISS must search by L2, not inner product."""
    from pyterrier_fandom_colbert.index import ann as faiss_ann

    colbert = pfc.ColBERT.from_pretrained(tiny_bert_dir, device="cpu",
                                          config=CONFIG.replace(similarity="l2", normalise=False))
    index = ColBERTIndex(tmp_path / "l2.idx").indexer(colbert).index(corpus(30))
    toks = torch.as_tensor(np.asarray(index.vectors, dtype=np.float32))
    assert np.abs(toks.norm(dim=1).numpy() - 1).max() > 0.1  # really not unit vectors
    Q, mask = colbert.encode_queries([TOPICS["query"][0]])
    q = Q[0][mask[0]]
    # token neighbours: FAISS rows are the brute-force L2 nearest rows
    _, normalise = faiss_ann.metric_for("l2")
    hits = faiss_ann.search(index.ann(FaissSpec("exact")), faiss_ann.as_search_vectors(q.numpy(), normalise), 3)
    np.testing.assert_array_equal(hits, torch.cdist(q, toks).topk(3, dim=1, largest=False).indices.numpy())
    # end to end with every token a candidate: exactly the exhaustive l2 MaxSim ranking
    res = index.retriever(colbert, num_results=1000, lam=1, faiss="exact")(TOPICS.iloc[:1])
    ref = {f"p{i:02d}": float(maxsim(Q, torch.as_tensor(index.doc_vectors(i)[0])[None], mask, None, "l2"))
           for i in range(30)}
    expected = sorted(ref.items(), key=lambda t: (-t[1], t[0]))
    assert res.docno.tolist() == [d for d, _ in expected]
    np.testing.assert_allclose(res.score.to_numpy(), [s for _, s in expected], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("similarity", list(SIMILARITIES))
def test_exact_search_finds_faiss_flat_neighbours(similarity, numpy_similarity):
    """FAISS with the similarity's metric (on unit vectors when it says so), exact search and ranking by its
    matrix (and by the numpy reference) find the same neighbours, for every registered similarity."""
    import faiss

    from pyterrier_fandom_colbert.index import ann as faiss_ann

    rng = np.random.default_rng(5)
    tokens = (rng.standard_normal((1000, 16)) * rng.uniform(0.5, 2, (1000, 1))).astype(np.float16)
    q = rng.standard_normal((7, 16)).astype(np.float32)
    metric, normalise = faiss_ann.metric_for(similarity)
    reference = faiss.IndexFlat(16, metric)
    reference.add(faiss_ann.as_search_vectors(tokens, normalise))
    prepared = faiss_ann.as_search_vectors(q, normalise)
    _, expected = reference.search(prepared, 25)
    by_matrix = get_similarity(similarity).matrix(torch.as_tensor(q), torch.as_tensor(tokens).float())
    np.testing.assert_array_equal(by_matrix.topk(25, dim=1).indices.numpy(), expected)
    np.testing.assert_array_equal(np.argsort(-numpy_similarity(similarity, q, tokens), axis=1)[:, :25], expected)
    for block_rows in (64, 333, 4096):  # blocks smaller than k, uneven, one block
        _, ids = faiss_ann.ExactSearch(tokens, similarity, block_rows=block_rows).search(prepared, 25)
        np.testing.assert_array_equal(ids, expected)
    _, ids = faiss_ann.ExactSearch(tokens[:10], similarity, block_rows=4).search(prepared, 25)
    assert ids.shape == (7, 10) and all(sorted(row) == list(range(10)) for row in ids.tolist())


def test_score_docs_is_exact_whatever_the_blocks(index, colbert):
    from pyterrier_fandom_colbert.index.fp16.search import score_docs

    query = TOPICS["query"][1]
    Q, mask = colbert.encode_queries([query])
    ids = np.array([59, 3, 17, 0, 42, 3, 28])  # unordered, one repeated; lengths differ (padding by repetition)
    assert len({int(index.offsets[i + 1] - index.offsets[i]) for i in ids}) > 1
    reference = exhaustive(index, colbert, query)
    expected = [reference[f"p{i:02d}"] for i in ids]
    for block_tokens in (1, 20, 64, 100_000):  # one document per block ... all in one block
        np.testing.assert_allclose(score_docs(index, Q[0][mask[0]], ids, block_tokens), expected, atol=1e-5)
