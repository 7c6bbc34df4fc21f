"""``index.retriever(colbert)`` as one stage (:class:`TextRetriever`): the same frame as the two-stage pipeline
``colbert.query_encoder() >> index.retriever()`` on messy topics, for both index formats, with its parameters,
rank cut-off, equality and ``search``."""
import warnings

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
import torch

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
from pyterrier_fandom_colbert.index.residual.compress import CompressionSpec
from pyterrier_fandom_colbert.index.text_search import TextRetriever

WORDS = ["castle", "dragon", "smith", "river", "queen", "bard", "library", "moon", "fleet", "giant", "crown", "star",
         "harbour", "forge", "songs", "mountain"]
CONFIG = pfc.ColBERTConfig(dim=16, doc_maxlen=32, query_maxlen=16)
# repeated qids and texts, one text under two qids, one blank query, an extra column
TOPICS = pd.DataFrame({"qid": ["b", "a", "b", "c", "d", "e"],
                       "query": ["dragon castle", "the smith forged a crown", "dragon castle",
                                 "the smith forged a crown", "   ", "queen of the harbour"],
                       "extra": [1, 2, 3, 4, 5, 6]})
ONE_ROW_EACH = TOPICS.drop_duplicates("qid").reset_index(drop=True)


@pytest.fixture(scope="module")
def colbert(tiny_bert_dir):
    torch.set_num_threads(2)
    return pfc.ColBERT.from_pretrained(tiny_bert_dir, config=CONFIG, device="cpu", batch_size=4)


@pytest.fixture(scope="module", params=["fp16", "residual2"])
def index(request, colbert, tmp_path_factory):
    rng = np.random.default_rng(0)
    docs = [{"docno": f"p{i:02d}", "text": " ".join(rng.choice(WORDS, 8))} for i in range(40)]
    compression = "fp16" if request.param == "fp16" else CompressionSpec("residual2", num_centroids=8, niter=4)
    path = tmp_path_factory.mktemp(request.param) / "idx"
    return ColBERTIndex(path).indexer(colbert, compression=compression, ann=None).index(docs)


def quietly(transformer, frame):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformer(frame)


def assert_same_frames(got, want):
    assert list(got.columns) == list(want.columns) and len(got) == len(want)
    plain = [c for c in want.columns if c not in ("query_embs", "query_toks")]
    pd.testing.assert_frame_equal(got[plain], want[plain])
    for a, b in zip(got["query_embs"], want["query_embs"]):
        np.testing.assert_array_equal(a, b)
    assert got["query_toks"].tolist() == want["query_toks"].tolist()


def test_one_stage_gives_the_pipelines_frame(index, colbert):
    fused = index.retriever(colbert, num_results=5)
    assert isinstance(fused, TextRetriever) and list(fused) == [fused.encoder, fused.retriever] == [fused[0], fused[-1]]
    pipeline = colbert.query_encoder() >> index.retriever(num_results=5)
    got, want = quietly(fused, TOPICS), quietly(pipeline, TOPICS)
    assert_same_frames(got, want)
    # "d" is blank; each row of "b" gets its results, as through the pipeline
    assert got.groupby("qid").size().to_dict() == {"a": 5, "b": 10, "c": 5, "e": 5}
    assert list(got.columns) == fused.transform_outputs(list(TOPICS.columns))
    with pytest.warns(UserWarning, match=r"qid\(s\) \['d'\]"):
        fused(TOPICS)
    with pytest.raises(ValueError, match="empty or non-text query"):
        index.retriever(colbert, num_results=5, strict=True)(TOPICS)
    empty = fused(TOPICS.iloc[:0])
    assert len(empty) == 0 and list(empty.columns) == list(got.columns)
    with pytest.raises(pt.validate.InputValidationError, match="query"):
        fused(TOPICS[["qid"]])


def test_search_is_pyterriers_search_without_the_sort(index, colbert):
    fused = index.retriever(colbert, num_results=7)
    for text in ("dragon castle", "songs of the mountain forge"):
        got = fused.search(text, qid="q9")
        assert_same_frames(got, pt.Transformer.search(fused, text, qid="q9"))
        assert got["rank"].tolist() == list(range(7)) and got["score"].is_monotonic_decreasing


def test_compile_and_rank_cutoff_fuse(index, colbert):
    retriever = index.retriever(num_results=20)
    fused = (colbert.query_encoder() >> retriever).compile()
    assert fused == index.retriever(colbert, num_results=20) and hash(fused) == hash(index.retriever(colbert,
                                                                                                   num_results=20))
    assert fused != index.retriever(colbert, num_results=21)
    cut = (fused % 3).compile()
    assert isinstance(cut, TextRetriever) and cut.retriever.num_results == 3
    whole = quietly(fused, ONE_ROW_EACH)
    assert_same_frames(quietly(cut, ONE_ROW_EACH), whole[whole["rank"] < 3].reset_index(drop=True))
    assert (fused % 50).compile() is fused
    # any other left stage is not fused
    assert isinstance((pt.Transformer.identity() >> retriever).compile(), pt.Compose)


def test_parameters_are_the_parts(index, colbert):
    fused = index.retriever(colbert, num_results=6)
    assert fused.get_parameter("num_results") == 6 and fused.get_parameter("strict") is False
    fused.set_parameter("num_results", 2)
    assert fused.retriever.num_results == 2 and (quietly(fused, ONE_ROW_EACH).groupby("qid").size() == 2).all()
    fused.set_parameter("strict", True)
    assert fused.encoder.strict and fused.retriever.strict
    with pytest.raises(ValueError, match=r"has no parameter 'nprobes'; its parameters are .*num_results"):
        fused.get_parameter("nprobes")
    with pytest.raises(ValueError, match="num_results"):
        fused.set_parameter("num_results", 0)
    assert fused.retriever.num_results == 2  # a refused value changes nothing
