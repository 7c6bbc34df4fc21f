"""BM25 from pyterrier-pisa (sparse/bm25.py) as the lexical side of ``pfc.Hybrid``: the fused scores are the
z-score fusion computed by hand from the two runs. Skipped without pyterrier-pisa (the ``pisa`` extra)."""
import numpy as np
import pandas as pd
import pytest
import torch

import pyterrier_fandom_colbert as pfc

pytest.importorskip("pyterrier_pisa")

from pyterrier_fandom_colbert.sparse.bm25 import build_bm25_index

TEXTS = ["The castle of Vel Amara was built in the third age by the river folk.",
         "When was the game released? It came out in the spring of 2011.",
         "Dragons, knights and wizards fight over the silver crown of the north.",
         "Who forged the blade? The smith Orrin forged it from fallen stars.",
         "The river folk sailed south when the winter came early that year.",
         "A blade of fallen stars hangs in the castle hall of the north."]
CORPUS = [{"docno": f"d{i}", "text": t} for i, t in enumerate(TEXTS)]
TOPICS = pd.DataFrame({"qid": ["q1", "q2"], "query": ["who forged the blade", "river folk castle"]})


@pytest.fixture(scope="module")
def systems(tiny_bert_dir, tmp_path_factory):
    torch.set_num_threads(2)
    folder = tmp_path_factory.mktemp("bm25")
    colbert = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(dim=16), device="cpu")
    index = pfc.ColBERTIndex(folder / "colbert")
    index.indexer(colbert).index(CORPUS)
    bm25 = build_bm25_index(folder / "bm25", CORPUS).bm25(num_results=3)
    return bm25, index.retriever(colbert, num_results=4), folder


def _z(run):
    s = run["score"].to_numpy(dtype=float)
    sd = s.std()
    return dict(zip(run["docno"], (s - s.mean()) / sd if sd > 0 else np.zeros_like(s)))


def test_bm25_ranks_the_passages_that_share_the_query_words(systems):
    bm25 = systems[0]
    run = bm25(TOPICS)
    top = run[run["rank"] == 0].set_index("qid")["docno"]
    assert top["q1"] == "d3" and top["q2"] in {"d0", "d4"}  # "forged ... blade" twice in d3
    assert set(run[run["qid"] == "q1"]["docno"]) <= {"d3", "d5"}  # only passages holding a query word


def test_hybrid_of_bm25_and_colbert_fuses_as_the_maths_says(systems):
    bm25, colbert, _ = systems
    weight = 0.3
    fused = pfc.Hybrid(bm25, colbert, weight=weight)(TOPICS)
    lexical, neural = bm25(TOPICS), colbert(TOPICS)
    for qid in TOPICS["qid"]:
        zl, zn = _z(lexical[lexical["qid"] == qid]), _z(neural[neural["qid"] == qid])
        docs = set(zl) | set(zn)
        expected = {d: weight * zl.get(d, min(zl.values())) + (1 - weight) * zn.get(d, min(zn.values()))
                    for d in docs}
        got = fused[fused["qid"] == qid].set_index("docno")["score"]
        assert set(got.index) == docs
        for d, value in expected.items():
            assert got[d] == pytest.approx(value, abs=1e-9)


def test_an_existing_index_is_reopened_and_not_rebuilt(systems):
    folder = systems[2]
    before = sorted(p.stat().st_mtime_ns for p in (folder / "bm25").iterdir())
    again = build_bm25_index(folder / "bm25", CORPUS)
    assert sorted(p.stat().st_mtime_ns for p in (folder / "bm25").iterdir()) == before
    pd.testing.assert_frame_equal(again.bm25(num_results=3)(TOPICS), systems[0](TOPICS))
