"""The one count checker: what it accepts, what it refuses, and that the transformers use it (a refusal names
the parameter, whichever transformer it comes from)."""
import numpy as np
import pandas as pd
import pytest

from pyterrier_fandom_colbert.checks import int_in_range, positive_int

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
