"""Fusion: the pure score functions against hand-computed values, the transformers against a brute-force pandas
reference, missing documents, empty frames, ``%``, equality, the tuner and the adaptive hybrid."""
import re
from typing import ClassVar, Dict, List

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
from ir_measures import RR, R

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.fusion import maths as S
from pyterrier_fandom_colbert.fusion import tune_fusion, weight_grid
from pyterrier_fandom_colbert.fusion.tuning import per_query

TOPICS = pd.DataFrame({"qid": ["q1", "q2", "q3"], "query": ["alpha", "beta", "gamma"], "lang": ["en", "en", "de"]})


def run_frame(rows):
    """(qid, docno, score) rows -> a result frame with ranks."""
    frame = pd.DataFrame(rows, columns=["qid", "docno", "score"])
    return pt.model.add_ranks(frame) if len(frame) else frame.assign(rank=pd.Series(dtype="int64"))


def system(rows):
    return pt.Transformer.from_df(run_frame(rows))


def random_runs(seed, n_queries=6, n_docs=30, depth=12, n_systems=2):
    """Random result lists that overlap partly (some documents only one system returns), with ties."""
    rng = np.random.default_rng(seed)
    runs = []
    for _ in range(n_systems):
        rows = []
        for q in range(n_queries):
            for d in rng.choice(n_docs, size=rng.integers(1, depth + 1), replace=False):
                rows.append((f"q{q}", f"d{d}", float(rng.integers(0, 6)) * rng.choice([1.0, 0.37])))
        runs.append(run_frame(rows))
    return runs


# -- brute-force references: one query and one document at a time, with plain pandas ---------------------------
def reference_linear(runs, weights, normalise, missing):
    out = []
    for qid in pd.unique(pd.concat(runs)["qid"]):
        per_system = []
        for r in runs:
            s = r[r.qid == qid].set_index("docno")["score"].astype(float)
            if normalise == "minmax" and len(s):
                s = (s - s.min()) / (s.max() - s.min()) if s.max() > s.min() else s * 0 + 1.0
            elif normalise == "zscore" and len(s):
                s = (s - s.mean()) / s.std(ddof=0) if s.std(ddof=0) > 0 else s * 0
            per_system.append(s)
        docs = sorted(set().union(*[set(s.index) for s in per_system]))
        for d in docs:
            total = 0.0
            for w, s in zip(weights, per_system):
                if d in s.index:
                    value = s[d]
                elif missing == "min":
                    value = s.min() if len(s) else 0.0
                elif missing == "zero" or not len(s):
                    value = 0.0
                else:
                    value = missing
                total += w * value
            out.append((qid, d, total))
    return reference_ranks(out)


def reference_rrf(runs, k, weights):
    out = []
    for qid in pd.unique(pd.concat(runs)["qid"]):
        lists = []
        for r in runs:
            q = r[r.qid == qid].sort_values(["score", "docno"], ascending=[False, True])
            lists.append({d: i + 1 for i, d in enumerate(q["docno"])})
        for d in sorted(set().union(*lists)):
            out.append((qid, d, sum(w / (k + ranks[d]) for w, ranks in zip(weights, lists) if d in ranks)))
    return reference_ranks(out)


def reference_ranks(rows):
    frame = pd.DataFrame(rows, columns=["qid", "docno", "score"]).assign(key=lambda f: f["score"].round(12))
    frame = frame.sort_values(["qid", "key", "docno"], ascending=[True, False, True]).drop(columns="key")
    frame["rank"] = frame.groupby("qid").cumcount()
    return frame.reset_index(drop=True)


def comparable(frame):
    return frame.sort_values(["qid", "rank"]).reset_index(drop=True)[["qid", "docno", "score", "rank"]]


# -- pure functions ------------------------------------------------------------------------------------------------
def test_normalisations_hand_computed():
    groups = np.array([0, 0, 0, 1, 1, 2])
    scores = np.array([2.0, 6.0, 4.0, -1.0, 3.0, 7.0])
    assert S.minmax(scores, groups).tolist() == [0.0, 1.0, 0.5, 0.0, 1.0, 1.0]
    # group 0: mean 4, population std sqrt(8/3); group 1: mean 1, std 2; group 2: a single score -> 0
    z = S.zscore(scores, groups)
    np.testing.assert_allclose(z, [-2 / np.sqrt(8 / 3), 2 / np.sqrt(8 / 3), 0.0, -1.0, 1.0, 0.0])
    np.testing.assert_allclose(S.normalise(scores, groups, None), scores)
    with pytest.raises(ValueError, match="normalise='l2'"):
        S.normalise(scores, groups, "l2")


def test_fill_missing_and_weighted_sum_hand_computed():
    m = np.array([[1.0, np.nan], [0.0, 0.4], [np.nan, 1.0], [np.nan, 0.2]])
    groups = np.array([0, 0, 0, 1])
    # system 0 returned nothing for query 1: it contributes 0 there under every policy
    assert S.fill_missing(m, groups, 2, "min").tolist() == [[1.0, 0.4], [0.0, 0.4], [0.0, 1.0], [0.0, 0.2]]
    assert S.fill_missing(m, groups, 2, -2.5).tolist() == [[1.0, -2.5], [0.0, 0.4], [-2.5, 1.0], [-2.5, 0.2]]
    filled = S.fill_missing(m, groups, 2, "zero")
    np.testing.assert_allclose(S.weighted_sum(filled, [0.25, 0.75]), [0.25, 0.3, 0.75, 0.15])
    with pytest.raises(ValueError, match="missing='max'"):
        S.fill_missing(m, groups, 2, "max")


def test_reciprocal_ranks_and_ranks_within():
    np.testing.assert_allclose(S.reciprocal_ranks(np.array([0.0, 4.0, np.nan]), k=60), [1 / 61, 1 / 65, 0.0])
    scores = np.array([1.0, 3.0, 3.0, 2.0, 5.0])
    groups = np.array([0, 0, 0, 0, 1])
    assert S.ranks_within(scores, groups, tiebreak=np.array(["a", "c", "b", "d", "e"])).tolist() == [3, 1, 0, 2, 0]


# -- transformers against the reference ----------------------------------------------------------------------------
@pytest.mark.parametrize("normalise", ["minmax", "zscore", None])
@pytest.mark.parametrize("missing", ["min", "zero", -1.5])
def test_linear_fusion_equals_reference(normalise, missing):
    for seed in range(3):
        runs = random_runs(seed, n_systems=3)
        topics = pd.DataFrame({"qid": [f"q{i}" for i in range(6)], "query": ["x"] * 6})
        weights = [0.5, 0.2, 0.3]
        fusion = pfc.LinearFusion([pt.Transformer.from_df(r) for r in runs], weights, normalise=normalise,
                                  missing=missing)
        got = comparable(fusion(topics))
        want = reference_linear(runs, weights, normalise, missing)
        pd.testing.assert_frame_equal(got[["qid", "docno", "rank"]], want[["qid", "docno", "rank"]])
        np.testing.assert_allclose(got["score"], want["score"], atol=1e-12)


@pytest.mark.parametrize("k,weights", [(60, [1.0, 1.0]), (0, [1.0, 1.0]), (10, [0.3, 2.0])])
def test_rrf_equals_reference(k, weights):
    for seed in range(3):
        runs = random_runs(seed + 10)
        topics = pd.DataFrame({"qid": [f"q{i}" for i in range(6)], "query": ["x"] * 6})
        got = comparable(pfc.RRF([pt.Transformer.from_df(r) for r in runs], k=k, weights=weights)(topics))
        want = reference_rrf(runs, k, weights)
        pd.testing.assert_frame_equal(got[["qid", "docno", "rank"]], want[["qid", "docno", "rank"]])
        np.testing.assert_allclose(got["score"], want["score"], atol=1e-12)


def test_missing_documents_hand_computed():
    a = system([("q1", "d1", 10.0), ("q1", "d2", 6.0), ("q1", "d3", 2.0)])
    b = system([("q1", "d3", 0.9), ("q1", "d4", 0.5)])
    topics = TOPICS.iloc[:1]
    # min-max: a = {d1 1, d2 .5, d3 0}, b = {d3 1, d4 0}; 'min' fills a's d4 and b's d1, d2 with 0
    got = pfc.LinearFusion([a, b], [0.6, 0.4])(topics)
    assert got["docno"].tolist() == ["d1", "d3", "d2", "d4"]
    np.testing.assert_allclose(got["score"], [0.6, 0.4, 0.3, 0.0])
    # z-score: a = {d1 1.2247, d2 0, d3 -1.2247}, b = {d3 1, d4 -1}; missing -> each system's lowest z
    got = pfc.LinearFusion([a, b], [0.5, 0.5], normalise="zscore")(topics).set_index("docno")["score"]
    r = np.sqrt(1.5)
    np.testing.assert_allclose(got[["d1", "d2", "d3", "d4"]], [(r - 1) / 2, -0.5, (-r + 1) / 2, (-r - 1) / 2])
    # RRF: documents one system did not return get nothing from it
    got = pfc.RRF([a, b], k=1)(topics).set_index("docno")["score"]
    np.testing.assert_allclose(got[["d1", "d2", "d3", "d4"]], [1 / 2, 1 / 3, 1 / 4 + 1 / 2, 1 / 3])


def test_query_columns_kept_and_query_order():
    a = system([("q2", "d1", 1.0), ("q1", "d2", 2.0), ("q3", "d5", 1.0)])
    b = system([("q1", "d2", 1.0), ("q2", "d3", 3.0)])
    topics = TOPICS.iloc[[1, 0, 2]]
    out = pfc.LinearFusion([a, b])(topics)
    assert list(out.columns) == ["qid", "query", "lang", "docno", "score", "rank"]
    assert out["qid"].tolist() == ["q2", "q2", "q1", "q3"]
    assert out.set_index("qid")["query"].to_dict() == {"q1": "alpha", "q2": "beta", "q3": "gamma"}
    assert pfc.LinearFusion([a, b]).transform_outputs(list(TOPICS.columns)) == list(out.columns)


def test_reranking_mode_keeps_input_rows_and_columns():
    cands = run_frame([("q1", "d1", 3.0), ("q1", "d2", 2.0), ("q1", "d3", 1.0)]).assign(
        query="alpha", text=["t1", "t2", "t3"])
    keep = pt.apply.generic(lambda df: df)  # the first stage's own scores
    other = pt.apply.generic(lambda df: df[df.docno != "d1"].assign(score=lambda x: x.docno.map({"d2": 1.0,
                                                                                                  "d3": 5.0})))
    out = pfc.LinearFusion([keep, other], [0.5, 0.5])(cands)
    assert sorted(out.columns) == sorted(cands.columns) and len(out) == 3
    # keep: min-max {d1 1, d2 .5, d3 0}; other: {d2 0, d3 1}, d1 missing -> 0. d1 and d3 tie: docno decides
    assert out["docno"].tolist() == ["d1", "d3", "d2"] and out["text"].tolist() == ["t1", "t3", "t2"]
    np.testing.assert_allclose(out["score"], [0.5, 0.5, 0.25])
    assert out["rank"].tolist() == [0, 1, 2]


def test_pyterrier_operators_give_the_same_ranking_for_minmax_with_zeros():
    runs = random_runs(3)
    a, b = (pt.Transformer.from_df(r) for r in runs)
    topics = pd.DataFrame({"qid": [f"q{i}" for i in range(6)], "query": ["x"] * 6})
    ours = pfc.LinearFusion([a, b], [0.3, 0.7], missing="zero")(topics)
    theirs = ((a >> pfc.Normalise()) * 0.3 + (b >> pfc.Normalise()) * 0.7)(topics)
    merged = ours.merge(theirs, on=["qid", "docno"], suffixes=("", "_pt"))
    assert len(merged) == len(ours) == len(theirs)
    np.testing.assert_allclose(merged["score"], merged["score_pt"], atol=1e-12)


# -- empty frames, %, equality, errors -----------------------------------------------------------------------------
def test_empty_input_and_empty_systems():
    a = system([("q1", "d1", 1.0)])
    nothing = system([])
    for fusion in (pfc.LinearFusion([a, nothing]), pfc.RRF([a, nothing]), pfc.LinearFusion([nothing, nothing])):
        empty = fusion(TOPICS.iloc[:0])
        assert len(empty) == 0 and list(empty.columns) == ["qid", "query", "lang", "docno", "score", "rank"]
    assert len(pfc.LinearFusion([nothing, nothing])(TOPICS)) == 0
    assert pfc.LinearFusion([a, nothing])(TOPICS)["docno"].tolist() == ["d1"]
    assert len(pfc.Normalise("zscore")(run_frame([]))) == 0


def test_rank_cutoff():
    runs = random_runs(5)
    topics = pd.DataFrame({"qid": [f"q{i}" for i in range(6)], "query": ["x"] * 6})
    fusion = pfc.LinearFusion([pt.Transformer.from_df(r) for r in runs])
    full = fusion(topics)
    cut = (fusion % 3)(topics)
    pd.testing.assert_frame_equal(cut, full[full["rank"] < 3].reset_index(drop=True))
    assert fusion.fuse_rank_cutoff(3) == pfc.LinearFusion(fusion.systems, num_results=3)
    rrf = pfc.RRF(list(fusion.systems))
    pd.testing.assert_frame_equal((rrf % 2)(topics), rrf(topics).query("rank < 2").reset_index(drop=True))


def test_equality_hash_and_repr():
    a, b = system([("q1", "d1", 1.0)]), system([("q1", "d2", 1.0)])
    same = pfc.LinearFusion([a, b], [0.3, 0.7])
    assert same == pfc.LinearFusion([a, b], [0.3, 0.7]) and hash(same) == hash(pfc.LinearFusion([a, b], [0.3, 0.7]))
    assert same != pfc.LinearFusion([a, b], [0.7, 0.3])
    assert same != pfc.LinearFusion([b, a], [0.3, 0.7])
    assert same != pfc.LinearFusion([a, b], [0.3, 0.7], normalise="zscore")
    assert pfc.RRF([a, b]) == pfc.RRF([a, b]) != pfc.RRF([a, b], k=10)
    assert pfc.RRF([a, b]) != pfc.LinearFusion([a, b])
    assert "weights=[0.3, 0.7]" in repr(same) and "k=60" in repr(pfc.RRF([a, b]))
    assert pt.inspect.subtransformers(same) == {"systems": [a, b]}


def test_bad_arguments_are_named():
    a = system([("q1", "d1", 1.0)])
    with pytest.raises(ValueError, match="1 weight"):
        pfc.LinearFusion([a, a], [1.0])
    with pytest.raises(ValueError, match="normalise='max'"):
        pfc.LinearFusion([a, a], normalise="max")
    with pytest.raises(TypeError, match="list of systems"):
        pfc.LinearFusion(a)
    with pytest.raises(ValueError, match="num_results=0"):
        pfc.RRF([a], num_results=0)
    twice = system([("q1", "d1", 1.0), ("q1", "d1", 2.0)])
    with pytest.raises(ValueError, match="'d1' more than once"):
        pfc.LinearFusion([a, twice])(TOPICS)
    no_score = pt.apply.generic(lambda df: df.assign(docno="d1"))
    with pytest.raises(ValueError, match="without \\['score'\\]"):
        pfc.RRF([a, no_score])(TOPICS)


def test_in_experiment():
    runs = random_runs(7)
    a, b = (pt.Transformer.from_df(r) for r in runs)
    topics = pd.DataFrame({"qid": [f"q{i}" for i in range(6)], "query": ["x"] * 6})
    qrels = pd.DataFrame({"qid": [f"q{i}" for i in range(6)], "docno": ["d1", "d2", "d3", "d4", "d5", "d6"],
                          "label": 1})
    fusions = [pfc.LinearFusion([a, b]), pfc.RRF([a, b]) % 5]
    table = pt.Experiment(fusions, topics, qrels, [RR @ 10, R @ 5], names=["linear", "rrf"])
    for fusion, (_, row) in zip(fusions, table.iterrows()):
        want = per_query(fusion(topics), qrels, ["RR@10", "R@5"], topics["qid"]).mean()
        assert row["RR@10"] == pytest.approx(want["RR@10"]) and row["R@5"] == pytest.approx(want["R@5"])


# -- tuning -----------------------------------------------------------------------------------------------------
def test_weight_grid():
    assert weight_grid(2, 0.25) == [(0.0, 1.0), (0.25, 0.75), (0.5, 0.5), (0.75, 0.25), (1.0, 0.0)]
    grid = weight_grid(3, 0.1)
    assert len(grid) == 66 and all(abs(sum(p) - 1) < 1e-9 and min(p) >= 0 for p in grid)
    with pytest.raises(ValueError, match=re.escape("step=0.3")):
        weight_grid(2, 0.3)


def test_tuner_picks_the_best_point_on_a_synthetic_case():
    # a is right with a large margin on q0-q3 and wrong by a little on q4-q7; b the other way round. Only weights
    # near the middle rank the relevant document first everywhere.
    rows_a, rows_b, qrels = [], [], []
    for q in range(8):
        rel, other = f"r{q}", f"x{q}"
        qrels.append((f"q{q}", rel, 1))
        if q < 4:
            rows_a += [(f"q{q}", rel, 10.0), (f"q{q}", other, 0.0), (f"q{q}", f"z{q}", 0.0)]
            rows_b += [(f"q{q}", other, 10.0), (f"q{q}", rel, 5.0), (f"q{q}", f"z{q}", 0.0)]
        else:
            rows_a += [(f"q{q}", other, 10.0), (f"q{q}", rel, 5.0), (f"q{q}", f"z{q}", 0.0)]
            rows_b += [(f"q{q}", rel, 10.0), (f"q{q}", other, 0.0), (f"q{q}", f"z{q}", 0.0)]
    a, b = system(rows_a), system(rows_b)
    topics = pd.DataFrame({"qid": [f"q{q}" for q in range(8)], "query": ["x"] * 8})
    qrels = pd.DataFrame(qrels, columns=["qid", "docno", "label"])
    grid = [0.0, 0.2, 0.5, 0.8, 1.0]
    tuned = tune_fusion([a, b], topics, qrels, "RR@10", grid, measures=["R@1"])
    assert tuned.best == 0.5 and tuned.value == pytest.approx(1.0)
    assert tuned.curve["RR@10"].tolist() == pytest.approx([0.75, 0.75, 1.0, 0.75, 0.75])
    assert tuned.curve["w0"].tolist() == grid and list(tuned.curve.columns) == ["point", "w0", "w1", "RR@10", "R@1"]
    assert tuned.transformer() == pfc.LinearFusion([a, b], [0.5, 0.5])
    # brute force: each grid point through pt.Experiment
    table = pt.Experiment([pfc.LinearFusion([a, b], [w, 1 - w]) for w in grid], topics, qrels, [RR @ 10])
    assert table["RR@10"].tolist() == pytest.approx(tuned.curve["RR@10"].tolist())
    # RRF, k = 0: equal weights tie the relevant document with the other one at 1 + 1/2 (docno "r…" < "x…" wins)
    rrf = tune_fusion([a, b], topics, qrels, "RR@10", [(1.0, 0.0), (1.0, 1.0)], fusion="rrf", k=0)
    assert rrf.curve["RR@10"].tolist() == pytest.approx([0.75, 1.0])
    assert rrf.best == (1.0, 1.0) and rrf.transformer() == pfc.RRF([a, b], k=0)


def test_tuning_plot(tmp_path):
    runs = random_runs(9)
    a, b = (pt.Transformer.from_df(r) for r in runs)
    topics = pd.DataFrame({"qid": [f"q{i}" for i in range(6)], "query": ["x"] * 6})
    qrels = pd.DataFrame({"qid": ["q0", "q1"], "docno": ["d1", "d2"], "label": 1})
    tuned = tune_fusion([a, b], topics, qrels, "RR@10", weight_grid(2, 0.25))
    path = tuned.plot(tmp_path / "curve.png", title="synthetic")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- the hybrid ---------------------------------------------------------------------------------------------------
def test_hybrid_is_a_zscore_fusion_with_the_lexical_weight():
    runs = random_runs(11)
    lexical, neural = (pt.Transformer.from_df(r) for r in runs)
    topics = pd.DataFrame({"qid": [f"q{i}" for i in range(6)], "query": ["x"] * 6})
    hybrid = pfc.Hybrid(lexical, neural)
    assert hybrid.weight == pfc.fusion.DEFAULT_WEIGHT
    w = hybrid.weight
    got = comparable(hybrid(topics))
    want = reference_linear(runs, [w, 1 - w], "zscore", "min")
    pd.testing.assert_frame_equal(got[["qid", "docno", "rank"]], want[["qid", "docno", "rank"]])
    np.testing.assert_allclose(got["score"], want["score"], atol=1e-12)
    # weight 1 / 0: restricted to one system's documents, the fused ranking is that system's own ranking
    for weight, run in ((1.0, runs[0]), (0.0, runs[1])):
        fused = comparable(pfc.Hybrid(lexical, neural, weight=weight)(topics))
        own = comparable(reference_ranks(run[["qid", "docno", "score"]].values.tolist()))
        kept = fused.merge(own[["qid", "docno"]], on=["qid", "docno"])
        assert kept.groupby("qid")["docno"].apply(list).to_dict() == own.groupby("qid")["docno"].apply(list).to_dict()


def test_hybrid_weight_equality_cutoff_and_errors():
    a, b = system([("q1", "d1", 1.0), ("q1", "d2", 0.5)]), system([("q1", "d2", 1.0), ("q1", "d3", 0.2)])
    hybrid = pfc.Hybrid(a, b, weight=0.3)
    assert hybrid == pfc.Hybrid(a, b, weight=0.3) and hash(hybrid) == hash(pfc.Hybrid(a, b, weight=0.3))
    assert hybrid != pfc.Hybrid(a, b, weight=0.4) and hybrid != pfc.LinearFusion([a, b], [0.3, 0.7],
                                                                                 normalise="zscore")
    assert hybrid.with_weight(0.4) == pfc.Hybrid(a, b, weight=0.4)
    assert (hybrid.lexical, hybrid.neural) == (a, b)
    assert repr(hybrid).startswith("Hybrid(") and "weight=0.3" in repr(hybrid)
    assert len((hybrid % 1)(TOPICS)) == 1
    assert (hybrid % 1).compile() == pfc.Hybrid(a, b, weight=0.3, num_results=1)
    for bad in (-0.1, 1.5, "high"):
        with pytest.raises(ValueError, match="lexical share"):
            pfc.Hybrid(a, b, weight=bad)


def test_tuning_the_hybrid_weight():
    # the lexical system is right on every query but one, the neural one on that one only
    rows_l, rows_n, qrels = [], [], []
    for q in range(5):
        qrels.append((f"q{q}", "rel", 1))
        good, bad = [(f"q{q}", "rel", 3.0), (f"q{q}", "x", 1.0), (f"q{q}", "y", 0.0)], \
            [(f"q{q}", "x", 3.0), (f"q{q}", "rel", 1.0), (f"q{q}", "y", 0.0)]
        rows_l += good if q else bad
        rows_n += bad if q else good
    lexical, neural = system(rows_l), system(rows_n)
    topics = pd.DataFrame({"qid": [f"q{q}" for q in range(5)], "query": ["x"] * 5})
    qrels = pd.DataFrame(qrels, columns=["qid", "docno", "label"])
    tuned = tune_fusion([lexical, neural], topics, qrels, "RR@10", [0.0, 0.25, 1.0],
                        fusion=lambda w: pfc.Hybrid(lexical, neural, weight=w))
    assert tuned.curve["RR@10"].tolist() == pytest.approx([0.6, 0.6, 0.9])
    assert tuned.best == 1.0 and tuned.transformer() == pfc.Hybrid(lexical, neural, weight=1.0)


# -- the main job: the hybrid's weight comes from the tuning split, the figures from the test split -----------
class _Toy:
    CORPUS: ClassVar[List[Dict[str, str]]] = [{"docno": f"d{i}", "text": t} for i, t in enumerate([
        "Dragons guard the river crossing.", "The rivers of the north freeze in winter.",
        "Knights fight dragons in the north.", "The old mill grinds grain.", "Emberfall was released in spring.",
        "The blade was forged from fallen stars.", "The castle was built by river folk.", "Wizards fight knights."])]

    def __init__(self, questions):
        self.questions = questions

    def get_corpus_iter(self, verbose=False):
        return iter(self.CORPUS)

    def get_topics(self):
        return pd.DataFrame({"qid": [q for q, _, _ in self.questions], "query": [t for _, t, _ in self.questions]})

    def get_qrels(self):
        return pd.DataFrame({"qid": [q for q, _, _ in self.questions], "docno": [d for _, _, d in self.questions],
                             "label": 1})


@pytest.mark.slow
def test_main_job_tunes_the_hybrid_on_the_tuning_split(tmp_path, tiny_bert_dir):
    from pyterrier_fandom_colbert.app.compare import SYSTEMS, TUNING_GRID, compare, systems_for

    test = _Toy([("t1", "where do dragons guard", "d0"), ("t2", "who forged the blade", "d5"),
                 ("t3", "when was emberfall released", "d4")])
    dev = _Toy([("v1", "which rivers freeze", "d1"), ("v2", "who built the castle", "d6"),
                ("v3", "who fights knights", "d7")])
    table = compare(test, "toy/test", ["tfidf", "colbert-full", "hybrid"], "RR@10,R@1", tmp_path, k=8,
                    checkpoint=tiny_bert_dir, tune=dev)
    curve = pd.read_csv(tmp_path / "hybrid_tuning.csv")
    assert curve["w0"].tolist() == pytest.approx(TUNING_GRID)
    best = TUNING_GRID[int(np.argmax(curve["RR@10"].to_numpy()))]
    systems = systems_for(test.get_corpus_iter, ["tfidf", "colbert-full"], tmp_path / "cache" / "toy--test", 8,
                          tiny_bert_dir)
    lexical, neural = systems[SYSTEMS["tfidf"]], systems[SYSTEMS["colbert-full"]]
    # the curve is the dev questions' (not the test questions')
    dev_value = per_query(pfc.Hybrid(lexical, neural, weight=best)(dev.get_topics()), dev.get_qrels(), ["RR@10"],
                          dev.get_topics()["qid"])["RR@10"].mean()
    assert curve["RR@10"].max() == pytest.approx(dev_value)
    want = per_query(pfc.Hybrid(lexical, neural, weight=best, num_results=8)(test.get_topics()), test.get_qrels(),
                     ["RR@10"], test.get_topics()["qid"])["RR@10"].mean()
    assert table.set_index("name").loc[SYSTEMS["hybrid"], "RR@10"] == pytest.approx(want)


# -- the evaluation protocol's SQuAD split ------------------------------------------------------------------------
def _squad_file(path, titles):
    import json

    data = {"version": "1.1", "data": [
        {"title": t, "paragraphs": [{"context": f"{t} is a place.", "qas": [
            {"id": f"{t}-q", "question": f"what is {t}?", "answers": [{"text": t, "answer_start": 0}]}]}]}
        for t in titles]}
    path.write_text(json.dumps(data))
    return path


def test_protocol_split_is_by_article_seeded_and_disjoint(tmp_path):
    import json

    from pyterrier_fandom_colbert.data.protocol import (
        selection_articles,
        squad_protocol,
        write_squad_subset,
        write_training_parts,
    )

    train = _squad_file(tmp_path / "train.json", [f"T{i}" for i in range(10)])
    dev = _squad_file(tmp_path / "dev.json", ["D0", "D1"])
    split = squad_protocol(train, dev, n_selection=3, seed=7)
    assert split.selection == tuple(selection_articles([f"T{i}" for i in range(10)], 3, 7))
    assert split.report == ("D0", "D1") and len(split.train) == 7
    assert not set(split.train) & set(split.selection)
    assert squad_protocol(train, dev, n_selection=3, seed=7) == split  # deterministic
    assert squad_protocol(train, dev, n_selection=3, seed=8).selection != split.selection
    subset = write_squad_subset(train, split.train, tmp_path / "train-part.json")
    assert [a["title"] for a in json.loads(subset.read_text())["data"]] == list(split.train)
    parts = write_training_parts(split, tmp_path / "new" / "parts")
    assert [p.name for p in parts] == ["train-part.json", "selection-part.json"]
    assert [[a["title"] for a in json.loads(p.read_text())["data"]] for p in parts] == \
        [list(split.train), [f"T{i}" for i in range(10) if f"T{i}" in split.selection]]   # in the file's order
    with pytest.raises(ValueError, match="in both"):
        squad_protocol(train, train)
    with pytest.raises(ValueError, match="no article"):
        write_squad_subset(train, ["nowhere"], tmp_path / "x.json")


def test_protocol_on_the_shared_squad_files():
    from pathlib import Path

    from pyterrier_fandom_colbert.data.protocol import part_counts, squad_protocol

    folder = Path(__file__).resolve().parents[2] / "shared" / "data" / "squad-v1.1-split"
    if not folder.exists():
        pytest.skip(f"{folder} not found")
    split = squad_protocol(folder / "train-v1.1.json", folder / "dev-v1.1.json")
    counts = part_counts(split)
    assert {p: c["articles"] for p, c in counts.items()} == {"train": 20, "selection": 4, "report": 8}
    assert counts["report"]["questions"] == 1512
    assert sum(c["questions"] for p, c in counts.items() if p != "report") == 5886
