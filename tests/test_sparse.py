"""Learned sparse retrieval: SPLADE pooling by hand, encoders, the exact index against brute force, and the two
pruning methods (topic filter, binary tree) against the exhaustive ranking; PISA when pyterrier-pisa is here."""
import math
from pathlib import Path
from typing import ClassVar, Dict, List

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_fandom_colbert.sparse.index import Postings, SparseIndex
from pyterrier_fandom_colbert.sparse.maths import splade_pool
from pyterrier_fandom_colbert.sparse.topics import MiniLMEmbedder, TopicConfig, TopicModel, keep_topics
from pyterrier_fandom_colbert.sparse.tree import BinaryTree, TreeConfig

VOCAB = [f"t{i}" for i in range(40)]
NUM_DOCS = 160


# -- fixtures ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def splade(tiny_mlm_dir):
    from pyterrier_fandom_colbert.sparse.encoder import Splade, SpladeConfig

    config = SpladeConfig(doc_max_length=32, query_max_length=16, batch_tokens=64, min_weight=0.3)
    return Splade.from_pretrained(tiny_mlm_dir, device="cpu", config=config)


def random_toks(rng, n_terms):
    """A term dict with weights in quarters (exact in binary, so PISA's ×100 integers are exact too)."""
    terms = rng.choice(len(VOCAB), size=n_terms, replace=False)
    return {VOCAB[t]: float(rng.integers(1, 12)) / 4 for t in terms}


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(7)
    words = ["river", "dragon", "castle", "north", "sword", "mill", "crown", "island", "star", "smith"]
    return [{"docno": f"d{i:03d}", "toks": random_toks(rng, int(rng.integers(2, 9))),
             "text": " ".join(rng.choice(words, size=6))} for i in range(NUM_DOCS)]


@pytest.fixture(scope="module")
def queries():
    rng = np.random.default_rng(11)
    return pd.DataFrame({"qid": [f"q{i}" for i in range(12)], "query": [f"question {i}" for i in range(12)],
                         "query_toks": [random_toks(rng, int(rng.integers(1, 6))) for _ in range(12)]})


@pytest.fixture(scope="module")
def index(tmp_path_factory, corpus):
    path = tmp_path_factory.mktemp("sparse") / "index"
    return SparseIndex(path).indexer().index(iter(corpus))


@pytest.fixture(scope="module")
def dense(corpus):
    """Document × VOCAB weights, for brute force."""
    out = np.zeros((len(corpus), len(VOCAB)))
    for i, d in enumerate(corpus):
        for t, w in d["toks"].items():
            out[i, VOCAB.index(t)] = w
    return out


def qvec(toks):
    v = np.zeros(len(VOCAB))
    for t, w in toks.items():
        v[VOCAB.index(t)] = w
    return v


def brute_force(dense, toks, allowed=None, k=1000):
    """[(docno, score)] by score descending then index order, over documents sharing a term (and allowed)."""
    scores = dense @ qvec(toks)
    ids = np.flatnonzero(scores > 0)
    if allowed is not None:
        ids = np.array([i for i in ids if i in set(allowed)], dtype=np.int64)
    ids = ids[np.lexsort((ids, -scores[ids]))][:k]
    return [(f"d{i:03d}", scores[i]) for i in ids]


def as_pairs(frame, qid):
    rows = frame[frame["qid"] == qid].sort_values("rank")
    return list(zip(rows["docno"], rows["score"]))


def assert_same_ranking(got, expected):
    assert [d for d, _ in got] == [d for d, _ in expected]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], rtol=1e-12)


# -- SPLADE pooling and encoders ------------------------------------------------------------------------------------

def test_pooling_hand_computed():
    import torch

    logits = torch.tensor([[[0.5, -1.0, 2.0, 0.0], [3.0, -0.5, 1.0, 7.0]],    # text 1: both tokens real
                           [[1.0, 1.0, -3.0, 0.0], [8.0, 8.0, 8.0, 8.0]]])    # text 2: second token is padding
    mask = torch.tensor([[1, 1], [1, 0]])
    expected = [[math.log(4.0), 0.0, math.log(3.0), math.log(8.0)],
                [math.log(2.0), math.log(2.0), 0.0, 0.0]]
    np.testing.assert_allclose(splade_pool(logits, mask).numpy(), expected, rtol=1e-6)


def test_encoder_matches_pooled_logits_text_by_text(splade):
    import torch

    texts = ["The castle by the river.", "", "Who forged the blade of the smith Orrin in the north?", "a " * 300]
    got = splade.encode(texts, "doc").toarray()
    for i, text in enumerate(texts):  # one text at a time: no padding, no batching
        enc = splade.tokenizer([text], truncation=True, max_length=splade.config.doc_max_length, return_tensors="pt")
        with torch.inference_mode():
            logits = splade.model(**enc).logits
        want = torch.log1p(torch.relu(logits[0])).max(dim=0).values.numpy()
        want[want <= splade.config.min_weight] = 0
        np.testing.assert_allclose(got[i], want, rtol=1e-4, atol=1e-5)
    assert splade.encode(texts[:1], "query").shape == (1, len(splade.vocab))


def test_encoder_transformers(splade):
    topics = pd.DataFrame({"qid": ["a", "b", "c"], "query": ["castle river", "", "castle river"], "x": [1, 2, 3]})
    enc = splade.query_encoder()
    out = enc(topics)
    assert list(out.columns) == ["qid", "query", "x", "query_toks"] == enc.transform_outputs(list(topics.columns))
    want = splade.encode(["castle river"], "query")
    assert out["query_toks"][0] == {splade.vocab[j]: pytest.approx(float(w), rel=1e-6)
                                    for j, w in zip(want.indices, want.data)}
    assert out["query_toks"][0] == out["query_toks"][2] and out["x"].tolist() == [1, 2, 3]
    empty = enc(topics.iloc[:0])
    assert len(empty) == 0 and "query_toks" in empty.columns
    docs = splade.doc_encoder()(pd.DataFrame({"docno": ["d1"], "text": ["castle river"]}))
    assert set(docs["toks"][0]) and all(w > splade.config.min_weight for w in docs["toks"][0].values())
    assert enc == splade.query_encoder() and hash(enc) == hash(splade.query_encoder())
    assert enc != splade.with_config(query_max_length=8).query_encoder()
    assert splade.doc_encoder() != splade.doc_encoder("body")
    with pytest.raises(ValueError, match="qid"):
        enc(pd.DataFrame({"qid": ["z"], "query": [None]}))


def test_default_weights_error_is_actionable(monkeypatch):
    from importlib import metadata

    from pyterrier_fandom_colbert.sparse import encoder

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    with pytest.raises(ModuleNotFoundError, match=r"\[splade\]"):
        encoder.default_weights()


def test_splade_index_end_to_end(tmp_path, splade):
    docs = pd.DataFrame({"docno": ["a", "b", "c"], "text": ["The castle by the river.", "Dragons of the north.",
                                                            "A silver crown for the smith."]})
    index = (splade.doc_encoder() >> SparseIndex(tmp_path / "idx").indexer()).index(docs.to_dict("records"))
    res = (splade.query_encoder() >> index.retriever())(pd.DataFrame({"qid": ["1"], "query": ["river castle"]}))
    d, q = splade.encode(docs["text"].tolist(), "doc"), splade.encode(["river castle"], "query")
    scores = (d @ q.T).toarray().ravel()
    order = [i for i in np.lexsort((np.arange(3), -scores)) if scores[i] > 0]
    assert len(order) > 0 and res["docno"].tolist() == docs["docno"][order].tolist()
    np.testing.assert_allclose(res["score"], scores[order], rtol=1e-5)


# -- the exact index ----------------------------------------------------------------------------------------------

def declared_artifacts():
    """The ``pyterrier.artifact`` entry points pyproject.toml declares (the installed metadata may predate them)."""
    from importlib.metadata import EntryPoint

    try:
        import tomllib
    except ImportError:  # Python 3.10: the test extra installs tomli
        import tomli as tomllib
    with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as f:
        declared = tomllib.load(f)["project"]["entry-points"]["pyterrier.artifact"]
    return [EntryPoint(name, value, group="pyterrier.artifact") for name, value in declared.items()]


def test_index_artifact(index, corpus, monkeypatch):
    monkeypatch.setattr(pt.utils, "entry_points", lambda group: declared_artifacts() if group == "pyterrier.artifact"
                        else [])
    loaded = pt.Artifact.load(str(index.path))
    assert isinstance(loaded, SparseIndex) and loaded.num_docs == NUM_DOCS
    assert index.meta["num_docs"] == NUM_DOCS and index.meta["num_postings"] == sum(len(d["toks"]) for d in corpus)
    assert list(index.get_corpus_iter()) == [{"docno": d["docno"], "toks": d["toks"]} for d in corpus]
    with pytest.raises(FileExistsError):
        index.indexer().index(corpus)


def test_exhaustive_matches_brute_force(index, queries, dense):
    res = index.retriever()(queries)
    for qid, toks in zip(queries["qid"], queries["query_toks"]):
        assert_same_ranking(as_pairs(res, qid), brute_force(dense, toks))
    top3 = (index.retriever() % 3)(queries)
    for qid, toks in zip(queries["qid"], queries["query_toks"]):
        assert_same_ranking(as_pairs(top3, qid), brute_force(dense, toks, k=3))


def test_postings_ranges_score_only_inside(index, dense, queries):
    order = np.random.default_rng(3).permutation(NUM_DOCS)
    postings = Postings(index.docs, order)
    toks = queries["query_toks"][0]
    terms, weights = index.query_vector(toks)
    docids, scores = postings.score(terms, weights, [(10, 40), (100, 120)])
    inside = set(order[10:40]) | set(order[100:120])
    want = {i: s for i, s in enumerate(dense @ qvec(toks)) if s > 0 and i in inside}
    assert dict(zip(docids.tolist(), scores.tolist())) == pytest.approx(want, rel=1e-12)


def test_bad_input_is_refused(tmp_path, index):
    with pytest.raises(ValueError, match="non-negative"):
        SparseIndex(tmp_path / "neg").indexer().index([{"docno": "a", "toks": {"x": -1.0}}])
    with pytest.raises(ValueError, match="no 'toks'"):
        SparseIndex(tmp_path / "missing").indexer().index([{"docno": "a", "text": "x"}])
    with pytest.raises(ValueError, match="'a' occurs more than once"):
        SparseIndex(tmp_path / "dup").indexer().index([{"docno": "a", "toks": {"x": 1.0}}] * 2)
    with pytest.raises(TypeError, match="qid 'q'"):
        index.retriever()(pd.DataFrame({"qid": ["q"], "query_toks": [["t1", "t2"]]}))
    assert not (tmp_path / "neg").exists() and not (tmp_path / "dup").exists()
    one = SparseIndex(tmp_path / "one").indexer().index([{"docno": "a", "toks": {"x": 1.0}}])  # one document is fine
    assert one.retriever()(pd.DataFrame({"qid": ["q"], "query_toks": [{"x": 2.0}]}))["docno"].tolist() == ["a"]


# -- binary tree ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=["unsorted", "cluster"])
def tree(request, index):
    return BinaryTree.build(index, TreeConfig(split=request.param, min_leaf=5))


def test_tree_nodes_store_max_of_their_documents(tree, dense, queries):
    cols = [VOCAB.index(t) for t in tree.index.lexicon]
    agg = tree.aggregates.toarray()
    for node in range(len(tree.nodes)):
        docs = tree.order[tree.lo[node]:tree.hi[node]]
        np.testing.assert_array_equal(agg[node], dense[docs][:, cols].max(axis=0))
        for toks in queries["query_toks"]:  # max aggregate: an upper bound of every document below
            terms, weights = tree.index.query_vector(toks)
            bound = tree.bounds(np.array([node]), terms, weights)[0]
            assert bound >= (dense[docs] @ qvec(toks)).max() - 1e-12
    if tree.config.split == "unsorted":
        assert tree.order.tolist() == list(range(NUM_DOCS))
    assert sorted(tree.order.tolist()) == list(range(NUM_DOCS))
    assert (tree.size[tree.left < 0] <= 5).all()


def test_tree_pruning_nothing_is_exhaustive(tree, queries, index):
    full = index.retriever()(queries)
    for retriever in (tree.retriever(depth=0), tree.retriever(beam=len(tree.nodes)),
                      tree.retriever(leaf_size=NUM_DOCS)):
        pd.testing.assert_frame_equal(retriever(queries), full)


def brute_force_descent(tree, dense, toks, depth=None, leaf_size=None, beam=1):
    """The descent written out over dense vectors: node bound = query · (max of its documents' vectors)."""
    q = qvec(toks)

    def bound(n):
        return float(dense[tree.order[tree.lo[n]:tree.hi[n]]].max(axis=0) @ q)

    def done(n):
        return tree.left[n] < 0 or (depth is not None and tree.depth[n] >= depth) or \
            (leaf_size is not None and tree.size[n] <= leaf_size)

    frontier = [n for n in [0] if bound(n) > 0]
    while frontier and not all(done(n) for n in frontier):
        cand = [n for n in frontier if done(n)]
        cand += [c for n in frontier if not done(n) for c in (tree.left[n], tree.right[n])]
        cand = [n for n in cand if bound(n) > 0]
        frontier = sorted(cand, key=lambda n: (-bound(n), n))[:beam]
    return sorted(int(n) for n in frontier)


@pytest.mark.parametrize("settings", [{"depth": 2}, {"leaf_size": 20}, {"depth": 3, "beam": 2}, {"beam": 3}])
def test_tree_descent_scores_exactly_the_reached_subtrees(tree, queries, dense, settings):
    retriever = tree.retriever(**settings)
    res = retriever(queries)
    smaller = 0
    for qid, toks in zip(queries["qid"], queries["query_toks"]):
        terms, weights = tree.index.query_vector(toks)
        reached = brute_force_descent(tree, dense, toks, **settings)
        assert sorted(retriever.reached(terms, weights).tolist()) == reached
        allowed = np.concatenate([tree.order[tree.lo[n]:tree.hi[n]] for n in reached])
        expected = brute_force(dense, toks, allowed)
        assert_same_ranking(as_pairs(res, qid), expected)
        smaller += len(expected) < len(brute_force(dense, toks))
    assert smaller > 0  # these settings prune


def test_tree_save_load(tmp_path, tree, queries):
    loaded = BinaryTree.load(tree.save(tmp_path / "tree"), tree.index)
    assert loaded.retriever(depth=2) == tree.retriever(depth=2)
    pd.testing.assert_frame_equal(loaded.retriever(depth=2)(queries), tree.retriever(depth=2)(queries))


def test_tree_mean_aggregate(index, dense):
    tree = BinaryTree.build(index, TreeConfig(aggregate="mean", min_leaf=5))
    cols = [VOCAB.index(t) for t in index.lexicon]
    np.testing.assert_allclose(tree.aggregates[0].toarray()[0], dense.mean(axis=0)[cols], rtol=1e-6)


# -- topic filter ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def topics(index):
    return TopicModel.fit(index, config=TopicConfig(num_topics=5, source="splade", temperature=0.1))


def query_theta(topics, toks):
    """θ of a query from its vector over the index lexicon, by brute force."""
    v = np.array([toks.get(t, 0.0) for t in topics.index.lexicon])
    cos = topics.centroids.astype(np.float64) @ v / np.linalg.norm(v)
    e = np.exp(cos / topics.config.temperature)
    return e / e.sum()


def test_topic_model_scores(topics, dense):
    cols = [VOCAB.index(t) for t in topics.index.lexicon]
    x = dense[:, cols] / np.linalg.norm(dense[:, cols], axis=1, keepdims=True)
    np.testing.assert_allclose(np.linalg.norm(topics.centroids, axis=1), 1.0, rtol=1e-5)
    e = np.exp(x @ topics.centroids.T.astype(np.float64) / 0.1)
    np.testing.assert_allclose(topics.doc_topics, e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-7)
    assert len(set(np.argmax(topics.doc_topics, axis=1))) > 1


def test_topic_filter_pruning_nothing_is_exhaustive(topics, queries, index):
    full = index.retriever()(queries)
    for q, p in ((5, 5), (0.0, 0.0), (5, 0.0)):
        pd.testing.assert_frame_equal(topics.retriever(query_topics=q, passage_topics=p)(queries), full)


@pytest.mark.parametrize("query_setting,passage_setting", [(1, 1), (2, 1), (0.3, 0.2), (1, 2)])
def test_topic_filter_scores_exactly_the_shared_topic_passages(topics, queries, dense, query_setting,
                                                               passage_setting):
    res = topics.retriever(query_topics=query_setting, passage_topics=passage_setting)(queries)
    doc_keep = keep_topics(topics.doc_topics, passage_setting)
    smaller = 0
    for qid, toks in zip(queries["qid"], queries["query_toks"]):
        q_keep = keep_topics(query_theta(topics, toks)[None], query_setting)[0]
        allowed = np.flatnonzero((doc_keep & q_keep[None, :]).any(axis=1))
        expected = brute_force(dense, toks, allowed)
        assert_same_ranking(as_pairs(res, qid), expected)
        smaller += len(expected) < len(brute_force(dense, toks))
    assert smaller > 0


@pytest.mark.parametrize("weighting", ["dot", "cosine"])
def test_topic_weighting_and_score_threshold(topics, queries, dense, weighting):
    retriever = topics.retriever(query_topics=5, passage_topics=5, weighting=weighting, score_threshold=0.5)
    res = retriever(queries)
    for qid, toks in zip(queries["qid"], queries["query_toks"]):
        theta, exact = query_theta(topics, toks), dense @ qvec(toks)
        w = topics.doc_topics.astype(np.float64) @ theta
        if weighting == "cosine":
            w = w / (np.linalg.norm(topics.doc_topics, axis=1) * np.linalg.norm(theta))
        final = exact * w
        ids = np.flatnonzero((exact > 0) & (final >= 0.5))
        ids = ids[np.lexsort((ids, -final[ids]))]
        got = as_pairs(res, qid)
        assert [d for d, _ in got] == [f"d{i:03d}" for i in ids]
        np.testing.assert_allclose([s for _, s in got], final[ids], rtol=1e-5)


def test_query_scorer_feeds_the_filter(topics, queries):
    scorer = topics.query_scorer()
    scored = scorer(queries)
    assert scorer.transform_outputs(list(queries.columns)) == list(scored.columns)
    for toks, theta in zip(queries["query_toks"], scored["query_theta"]):
        np.testing.assert_allclose(theta, query_theta(topics, toks), rtol=1e-6)
    retriever = topics.retriever(query_topics=1, passage_topics=1)
    pd.testing.assert_frame_equal(retriever(scored).drop(columns="query_theta"), retriever(queries))
    assert len(scorer(queries.iloc[:0])) == 0 and scorer == topics.query_scorer()
    with pytest.raises(ValueError, match="query_theta of shape"):
        retriever(scored.assign(query_theta=[np.ones(2)] * len(scored)))


def test_keep_topics_settings():
    theta = np.array([[0.1, 0.6, 0.3]])
    assert keep_topics(theta, 0.3).tolist() == [[False, True, True]]
    assert keep_topics(theta, 1).tolist() == [[False, True, False]]
    assert keep_topics(theta, 3).all()
    for bad in (-0.1, 1.5, float("nan"), "2"):
        with pytest.raises(ValueError, match="threshold"):
            keep_topics(theta, bad)


def test_minilm_topics_follow_index_order(tmp_path, index, corpus, tiny_bert_dir, queries):
    embedder = MiniLMEmbedder(tiny_bert_dir, device="cpu")
    shuffled = [corpus[i] for i in np.random.default_rng(1).permutation(len(corpus))]
    model = TopicModel.fit(index, shuffled, TopicConfig(num_topics=3, temperature=0.2), embedder=embedder)
    vectors = embedder([d["text"] for d in corpus])
    e = np.exp(vectors @ model.centroids.T.astype(np.float64) / 0.2)
    np.testing.assert_allclose(model.doc_topics, e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-6)
    retriever = model.retriever(query_topics=1, passage_topics=1)
    assert "query" in retriever.transform_outputs(["qid", "query", "query_toks"])
    with pytest.raises(pt.validate.InputValidationError, match="query"):
        retriever.transform_outputs(["qid", "query_toks"])
    scored = model.query_scorer()(queries)  # θ from the query text, batched; then the text is not needed
    np.testing.assert_allclose(np.stack(scored["query_theta"]),
                               model.query_scorer()(queries.iloc[::-1])["query_theta"].iloc[::-1].tolist())
    pd.testing.assert_frame_equal(retriever(scored.drop(columns="query")).drop(columns="query_theta"),
                                  retriever(queries).drop(columns="query"))
    loaded = TopicModel.load(model.save(tmp_path / "topics"), index)
    loaded._embedder = embedder
    pd.testing.assert_frame_equal(loaded.retriever(query_topics=1, passage_topics=1)(queries), retriever(queries))
    with pytest.raises(ValueError, match="no text"):
        TopicModel.fit(index, corpus[1:], embedder=embedder)


# -- the transformer contract, for every retriever ------------------------------------------------------------------

@pytest.fixture(scope="module")
def retrievers(index, topics):
    tree = BinaryTree.build(index, TreeConfig(split="cluster", min_leaf=5))
    return {
        "exhaustive": (index.retriever(), index.retriever(num_results=50)),
        "tree": (tree.retriever(depth=2), tree.retriever(depth=3)),
        "topics": (topics.retriever(query_topics=1), topics.retriever(query_topics=2)),
    }


@pytest.mark.parametrize("name", ["exhaustive", "tree", "topics"])
def test_retriever_contract(retrievers, queries, name):
    retriever, other = retrievers[name]
    empty = retriever(queries.iloc[:0])
    assert len(empty) == 0 and list(empty.columns) == retriever.transform_outputs(list(queries.columns))
    res = retriever(queries)
    assert list(res.columns) == ["qid", "query", "query_toks", "docno", "score", "rank"]
    assert res.groupby("qid")["rank"].apply(lambda r: r.tolist() == list(range(len(r)))).all()
    unknown = retriever(pd.DataFrame({"qid": ["u"], "query": ["x"], "query_toks": [{"never-seen": 1.0}]}))
    assert len(unknown) == 0 and "docno" in unknown.columns
    twin = retriever.with_num_results(retriever.num_results)
    assert twin == retriever and hash(twin) == hash(retriever) and twin != other
    assert retriever != retriever.with_num_results(5)
    cut = (retriever % 4)(queries)
    assert cut.groupby("qid").size().max() <= 4
    pd.testing.assert_frame_equal(cut, res[res["rank"] < 4].reset_index(drop=True))
    assert name in repr(retriever).lower() or "Retriever" in repr(retriever)


def test_bad_settings_are_refused(index, topics):
    tree = BinaryTree.build(index)
    with pytest.raises(ValueError, match="beam"):
        tree.retriever(beam=0)
    with pytest.raises(ValueError, match="depth"):
        tree.retriever(depth=-1)
    with pytest.raises(ValueError, match="weighting"):
        topics.retriever(weighting="sum")
    with pytest.raises(ValueError, match="num_results"):
        index.retriever(num_results=0)


# -- PISA -----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", ["maxscore", "block_max_wand", "ranked_or"])
def test_pisa_matches_exhaustive(tmp_path_factory, index, queries, dense, algorithm):
    pytest.importorskip("pyterrier_pisa")
    from pyterrier_fandom_colbert.sparse.pisa import build_pisa_index, pisa_retriever

    path = tmp_path_factory.getbasetemp() / "pisa-index"
    pisa = build_pisa_index(path, index.get_corpus_iter()) if not path.exists() else path
    res = pisa_retriever(pisa, 10, algorithm=algorithm)(queries)
    for qid, toks in zip(queries["qid"], queries["query_toks"]):
        got = as_pairs(res, qid)
        exact = dict(brute_force(dense, toks))
        want = sorted(exact.values(), reverse=True)[:10]
        # weights are quarters, so PISA's integers (× 100 for documents and queries) are exact
        np.testing.assert_allclose([s / 1e4 for _, s in got], want, rtol=1e-6)
        assert all(exact[d] == pytest.approx(s / 1e4) for d, s in got)


# -- the main job ---------------------------------------------------------------------------------------------------

class ToyDataset:
    docs: ClassVar[List[Dict[str, str]]] = [
        {"docno": "a", "text": "The castle by the river."}, {"docno": "b", "text": "Dragons of the north."},
        {"docno": "c", "text": "A silver crown for the smith."}]

    def get_corpus_iter(self, verbose=False):
        return iter(self.docs)

    def get_topics(self):
        return pd.DataFrame({"qid": ["q1", "q2"], "query": ["castle river", "silver crown"]})

    def get_qrels(self):
        return pd.DataFrame({"qid": ["q1", "q2"], "docno": ["a", "c"], "label": [1, 1]})


def test_main_job_splade_systems(tmp_path, tiny_mlm_dir, tiny_bert_dir):
    from pyterrier_fandom_colbert.app.compare import build_parser, compare

    assert "splade" not in build_parser().parse_args([]).systems  # an optional extra: only when asked for
    table = compare(ToyDataset(), "toy/test", ["splade", "splade-colbert"], "RR@10,R@1,R@2", tmp_path, k=2,
                    checkpoint=tiny_bert_dir, splade=tiny_mlm_dir)
    assert table["name"].tolist() == ["SPLADE", "SPLADE >> ColBERT"]
    # re-ranking SPLADE's top 2 cannot change which passages are among them
    assert table.iloc[1]["R@2"] == pytest.approx(table.iloc[0]["R@2"])
    built = [p for p in (tmp_path / "cache" / "toy--test").iterdir() if p.name.startswith("splade-")]
    assert len(built) == 1 and SparseIndex(built[0]).num_docs == 3


def test_package_wiring():
    import subprocess
    import sys

    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert import sparse
    from pyterrier_fandom_colbert.sparse.encoder import Splade

    assert (pfc.Splade, pfc.SparseIndex, sparse.BinaryTree, sparse.TopicModel) == (Splade, SparseIndex, BinaryTree,
                                                                                   TopicModel)
    code = ("import sys, pyterrier_fandom_colbert.sparse; "
            "print(sorted(m for m in ('torch', 'transformers', 'scipy', 'pyterrier_pisa') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_set_parameter_rebuilds_sparse_retrievers_as_their_constructors(tree, queries, index):
    """PyTerrier's parameter protocol (pt.GridSearch): the same transformer, output and checks as constructing it
    with the value."""
    for retriever, param, value, bad, expected in (
            (index.retriever(num_results=50), "num_results", 3, 0, index.retriever(num_results=3)),
            (tree.retriever(beam=1), "beam", 4, 0, tree.retriever(beam=4)),
            (tree.retriever(), "depth", 1, -1, tree.retriever(depth=1))):
        before = retriever(queries)
        retriever.set_parameter(param, value)
        assert retriever == expected and repr(retriever) == repr(expected)
        pd.testing.assert_frame_equal(retriever(queries), expected(queries))
        with pytest.raises(AssertionError):
            pd.testing.assert_frame_equal(retriever(queries), before)
        with pytest.raises(ValueError, match=param):
            retriever.set_parameter(param, bad)
        assert retriever.get_parameter(param) == value
