"""The one count checker: what it accepts, what it refuses, and that the transformers use it (a refusal names
the parameter, whichever transformer it comes from)."""
import numpy as np
import pandas as pd
import pytest

from pyterrier_fandom_colbert.checks import int_in_range, positive_int, real_in_range

REFUSED = [True, False, 1.5, 2.0, "5", None, 0, -3, np.float64(3.0), [1], float("nan")]


@pytest.mark.parametrize("value", REFUSED)
def test_positive_int_refuses_by_name(value):
    with pytest.raises(ValueError, match=r"^batch_size=.*; expected a positive integer$") as caught:
        positive_int("batch_size", value)
    assert f"batch_size={value!r}" in str(caught.value)


@pytest.mark.parametrize("value, expected", [(1, 1), (7, 7), (np.int64(12), 12), (np.uint8(3), 3), (10**12, 10**12)])
def test_positive_int_accepts_integers(value, expected):
    got = positive_int("k", value)
    assert got == expected and type(got) is int


def test_none_only_when_allowed():
    assert positive_int("num_results", None, none=True) is None
    with pytest.raises(ValueError, match=r"num_results=0; expected a positive integer or None"):
        positive_int("num_results", 0, none=True)


def test_ranges():
    assert [int_in_range("x", v, 0, 2) for v in (0, 1, 2)] == [0, 1, 2]
    for bad in (-1, 3):
        with pytest.raises(ValueError, match=rf"x={bad}; expected an integer from 0 to 2"):
            int_in_range("x", bad, 0, 2)


def test_transformers_refuse_through_it(tmp_path):
    """A few transformers of different parts refuse the same bad counts with the same wording."""
    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.explain.relevance import ExplainOptions
    from pyterrier_fandom_colbert.fusion.transformers import RRF
    from pyterrier_fandom_colbert.lexical.tfidf import TfidfIndex

    index = TfidfIndex(tmp_path / "tfidf").indexer().index([{"docno": "d1", "text": "a castle by the river"}])
    run = pd.DataFrame({"qid": ["q"], "query": ["castle"]})
    assert index.retriever(num_results=1)(run)["docno"].tolist() == ["d1"]
    makers = {
        "num_results": lambda v: index.retriever(num_results=v),
        "batch_size": lambda v: index.retriever(batch_size=v),
        "k_tilde": lambda v: ExplainOptions(k_tilde=v),
        "num_results ": lambda v: RRF([pfc.Normalise("minmax"), pfc.Normalise("zscore")], num_results=v),
    }
    for name, make in makers.items():
        for bad in (0, 1.5, True, "3"):
            with pytest.raises(ValueError, match=rf"{name.strip()}={bad!r}; expected a positive integer"):
                make(bad)


@pytest.mark.parametrize("value", [True, "0.5", None, float("nan"), float("inf"), -0.1, 1.5, [0.5], 1j])
def test_real_in_range_refuses_by_name(value):
    with pytest.raises(ValueError, match=r"^weight=.*; expected a number from 0\.0 to 1\.0 \(the lexical share\)$"):
        real_in_range("weight", value, 0.0, 1.0, what="the lexical share")


@pytest.mark.parametrize("value, expected", [(0, 0.0), (1, 1.0), (0.25, 0.25), (np.float32(0.5), 0.5),
                                             (np.int64(1), 1.0)])
def test_real_in_range_accepts_numbers(value, expected):
    got = real_in_range("weight", value, 0.0, 1.0)
    assert got == expected and type(got) is float


def test_real_bounds():
    assert real_in_range("threshold", -1e9) == -1e9 and real_in_range("x", None, 0.0, none=True) is None
    with pytest.raises(ValueError, match=r"lam=0\.0; expected a number > 0\.0$"):
        real_in_range("lam", 0.0, 0.0, above=True)
    with pytest.raises(ValueError, match=r"x=2; expected a number ≤ 1\.0$"):
        real_in_range("x", 2, most=1.0)


def test_real_settings_refuse_through_it(tmp_path):
    """Weights, thresholds and bandwidths of different parts refuse bools and strings by name."""
    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.explain.relevance import ExplainOptions
    from pyterrier_fandom_colbert.fusion.transformers import RRF, LinearFusion
    from pyterrier_fandom_colbert.index.prf import PrfSettings

    systems = [pfc.Normalise("minmax"), pfc.Normalise("zscore")]
    makers = {
        "Hybrid weight": lambda v: pfc.Hybrid(*systems, weight=v),
        "RRF k": lambda v: RRF(systems, k=v),
        "beta": lambda v: PrfSettings(beta=v),
        "bandwidth": lambda v: ExplainOptions(bandwidth=v),
        "span_threshold": lambda v: ExplainOptions(span_threshold=v),
    }
    for name, make in makers.items():
        for bad in (True, "0.5", float("nan")):
            # (a string bandwidth names a rule: refused as an unknown rule)
            with pytest.raises(ValueError, match=rf"^{name}={bad!r}(; expected a (finite )?number| is not supported)"):
                make(bad)
    assert pfc.Hybrid(*systems, weight=np.float32(0.25)).weight == 0.25
    for bad in (True, "0.5", float("inf")):
        with pytest.raises(ValueError, match=rf"^LinearFusion: weights=\[0\.5, {bad!r}\]; weights\[1\]={bad!r}; "
                                             "expected a finite number$"):
            LinearFusion(systems, [0.5, bad])


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "5", None])
def test_rank_cutoff_refuses_what_is_not_a_positive_integer(tmp_path, bad):
    """``% 0`` would return nothing and ``% True`` one result per query: both are mistakes, refused by name."""
    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.lexical.tfidf import TfidfIndex

    index = TfidfIndex(tmp_path / "tfidf").indexer().index([{"docno": f"d{i}", "text": "a castle by the river"}
                                                           for i in range(3)])
    run = pd.DataFrame({"qid": ["q"], "query": ["castle"]})
    for transformer in (index.retriever(num_results=5), pfc.RRF([index.retriever(), index.retriever()])):
        assert len((transformer % 2)(run)) == 2
        with pytest.raises(ValueError, match=rf"^k={bad!r}; expected a positive integer \(the rank cutoff % k"):
            transformer % bad


@pytest.mark.parametrize("setting, value", [("dim", True), ("dim", 4), ("doc_maxlen", "180"), ("doc_maxlen", 3),
                                            ("query_maxlen", 32.0), ("query_maxlen", None)])
def test_config_lengths_go_through_it(setting, value):
    import pyterrier_fandom_colbert as pfc

    with pytest.raises(ValueError, match=rf"^{setting}={value!r}; expected an integer"):
        pfc.ColBERTConfig(**{setting: value})
