"""A rank cut-off never changes the ranking above it: ``(e2e % k)`` and ``(e2e % k).compile()`` give, for every
query, exactly the top k of the uncut end-to-end retriever (fp16 and compressed indexes), though ``compile()``
fuses the cut into the retriever."""
import numpy as np
import pandas as pd
import pytest

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.index import compressed


@pytest.fixture(scope="module")
def collection(small_colbert, word_records, tmp_path_factory):
    """(fp16 index, residual2 index, 24 topics) over 400 story-word documents: enough tokens (several thousand)
    that the candidate depth of a 10-result search (k̂ = 50) finds fewer documents than that of 1,000."""
    docs = word_records(400, 3, 4)
    folder = tmp_path_factory.mktemp("cutoff")
    fp16 = pfc.ColBERTIndex(folder / "fp16").indexer(small_colbert, batch_size=64).index(docs)
    spec = compressed.CompressionSpec("residual2", num_centroids=32, niter=8)
    residual = pfc.ColBERTIndex(folder / "r2").indexer(small_colbert, batch_size=64, compression=spec).index(docs)
    words = word_records(24, 11, 2)
    topics = pd.DataFrame({"qid": [f"q{i}" for i in range(24)],
                           "query": [" ".join(d["text"].split()[:3]) for d in words]})
    return fp16, residual, topics


def _top(frame, k):
    return {q: list(zip(g.sort_values("rank").docno[:k], np.round(g.sort_values("rank").score[:k], 5)))
            for q, g in frame.groupby("qid")}


#: (index, end-to-end retriever settings, the same search asked for 10 results at its own depth)
SYSTEMS = {"fp16 default": ("fp16", {"faiss": "exact"}, None),
           "fp16 lam": ("fp16", {"faiss": "exact", "num_results": 100, "lam": 10},
                        {"faiss": "exact", "num_results": 10, "lam": 10}),
           "residual default": ("residual", {}, {"num_results": 10})}


@pytest.mark.parametrize("system", list(SYSTEMS))
def test_cut_and_compiled_keep_the_uncut_top_k_for_every_query(collection, small_colbert, system):
    fp16, residual, topics = collection
    which, settings, cheap = SYSTEMS[system]
    index = fp16 if which == "fp16" else residual
    e2e = index.retriever(small_colbert, **settings)
    uncut = _top(e2e(topics), 10)
    compiled = (e2e % 10).compile()
    assert compiled[-1].num_results == 10  # the cut is fused into the retriever ...
    assert _top(compiled(topics), 10) == uncut  # ... and its top 10 is the uncut top 10, query by query
    assert _top((e2e % 10)(topics), 10) == uncut
    if cheap is not None:  # the check can fail: the search at a 10-result depth ranks some queries otherwise
        assert _top(index.retriever(small_colbert, **cheap)(topics), 10) != uncut
