"""The package's one ranking module: top_k against a full sort, slices against Python ranges, the result
frames against each other and against pandas."""
import numpy as np
import pandas as pd
import pytest

from pyterrier_fandom_colbert.ranking import concat_slices, found_hits, hits_frame, rank_by_score, stacked_hits, top_k


def _brute_top_k(scores, ids, k):
    """The reference: every entry sorted by score descending, then id ascending, cut at k."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], ids[i]))
    return order[:k]


@pytest.mark.parametrize("seed", range(20))
def test_top_k_matches_a_full_sort(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    scores = rng.integers(0, 5, n).astype(float)  # few distinct values: many ties at the cut-off
    ids = rng.permutation(1000)[:n] if seed % 2 else np.sort(rng.permutation(1000)[:n])  # both id orders
    for k in (1, 3, 7, n, n + 5):
        assert top_k(scores, ids, k).tolist() == _brute_top_k(scores.tolist(), ids.tolist(), k)


def test_top_k_agrees_with_numpy_argsort_on_distinct_scores():
    rng = np.random.default_rng(7)
    scores = rng.normal(size=500)
    ids = rng.permutation(500)
    assert top_k(scores, ids, 25).tolist() == np.argsort(-scores)[:25].tolist()


def test_top_k_breaks_ties_by_id_not_position():
    # all tied: the three smallest ids win, whatever their positions
    assert top_k(np.ones(5), np.array([40, 10, 30, 20, 50]), 3).tolist() == [1, 3, 2]


def test_concat_slices_matches_python_ranges():
    rng = np.random.default_rng(3)
    starts = rng.integers(0, 100, 30)
    ends = starts + rng.integers(0, 6, 30)
    idx, which = concat_slices(starts, ends)
    expected = [(j, i) for i, (s, e) in enumerate(zip(starts, ends)) for j in range(s, e)]
    assert list(zip(idx.tolist(), which.tolist())) == expected
    assert idx.dtype == np.int64


def test_hits_frame_of_found_hits_orders_as_rank_by_score():
    rng = np.random.default_rng(5)
    inp = pd.DataFrame({"qid": ["q2", "q1", "q3"], "query": ["b", "a", "c"]})
    found = [(rng.permutation(20)[:6], rng.integers(0, 3, 6).astype(float)) for _ in range(3)]
    found[2] = (np.zeros(0, np.int64), np.zeros(0))  # a query with no result
    docnos_of = lambda ids: np.array([f"d{i:02d}" for i in ids], dtype=object)
    codes = np.array([0, 1, 2])
    got = hits_frame(inp, *found_hits(codes, found, docnos_of))
    rows = [(inp.iloc[c]["qid"], inp.iloc[c]["query"], d, s) for c in codes for d, s in
            zip(docnos_of(found[c][0]), found[c][1])]
    expected = rank_by_score(pd.DataFrame(rows, columns=["qid", "query", "docno", "score"]))
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)
    assert got["qid"].tolist()[:6] == ["q2"] * 6  # queries in order of first appearance
    assert got.groupby("qid")["rank"].apply(list).to_dict() == {"q1": list(range(6)), "q2": list(range(6))}


def test_stacked_hits_keeps_rank_order_and_input_columns():
    inp = pd.DataFrame({"qid": ["a", "b", "c"], "extra": [1.5, 2.5, 3.5]})
    docnos = np.array([f"doc{i}" for i in range(5)], dtype=object)
    hits = [(2, np.array([4, 1]), np.array([3.0, 2.0])), (0, np.array([1]), np.array([0.5]))]
    out, unique, inverse = stacked_hits(inp, hits, docnos)
    assert out["qid"].tolist() == ["c", "c", "a"]
    assert out["extra"].tolist() == [3.5, 3.5, 1.5]
    assert out["docno"].tolist() == ["doc4", "doc1", "doc1"]
    assert out["score"].tolist() == [3.0, 2.0, 0.5]
    assert out["rank"].tolist() == [0, 1, 0]
    assert unique[inverse].tolist() == [4, 1, 1]
