"""The storage formats behind ColBERTIndex (index/*/store.py): each format's retriever takes only its own parameters,
the index picks its store from the metadata, and both stores' exact scores, retrievers and scorer agree with
brute-force MaxSim over vectors read straight from the files."""
import re

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
import torch

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
from pyterrier_fandom_colbert.index.formats import (
    STORES,
    Fp16Store,
    ResidualStore,
    retriever_parameters,
    store_class,
)
from pyterrier_fandom_colbert.index.fp16.search import ColBERTRetriever
from pyterrier_fandom_colbert.index.residual import compress as compressed
from pyterrier_fandom_colbert.index.residual.search import CentroidRetriever
from pyterrier_fandom_colbert.index.writer import IndexWriter
from pyterrier_fandom_colbert.model.scoring import maxsim

QUERIES = ["who forged the blade in the tower", "the dragon of the mountain", "a storm over the harbour"]


@pytest.fixture(scope="module")
def colbert(small_colbert):
    return small_colbert


@pytest.fixture(scope="module")
def records(word_records):
    return word_records(40, seed=3, min_words=4)


@pytest.fixture(scope="module")
def both(colbert, records, tmp_path_factory):
    """(fp16 index, residual2 index) of one corpus."""
    folder = tmp_path_factory.mktemp("stores")
    fp16 = ColBERTIndex(folder / "fp16").indexer(colbert, long_docs="truncate").index(records)
    spec = compressed.CompressionSpec("residual2", num_centroids=8, niter=6)
    residual = ColBERTIndex(folder / "r2").indexer(colbert, long_docs="truncate", compression=spec).index(records)
    return fp16, residual


def file_vectors(index):
    """Every document's vectors read straight from the folder (fp16 vectors, or the codec applied to the codes and
    residuals), not through the store."""
    meta, path = index.meta, index.path
    offsets = np.fromfile(path / "offsets.i64", dtype=np.int64)
    if index.compression == "fp16":
        rows = np.fromfile(path / "vectors.f16", dtype=np.float16).reshape(meta.num_tokens, meta.dim)
        rows = rows.astype(np.float32)
    else:
        codec = index.codec
        codes = np.fromfile(path / "codes.u16", dtype=np.uint16).astype(np.int64)
        residuals = np.fromfile(path / "residuals.u8", dtype=np.uint8).reshape(meta.num_tokens, -1)
        rows = codec.decompress(codes, residuals)
    return [rows[offsets[i]:offsets[i + 1]] for i in range(meta.num_docs)]


def brute_force(index, colbert, query):
    """Docno -> MaxSim of ``query`` against every document, from :func:`file_vectors`."""
    Q, mask = colbert.encode_queries([query])
    cfg = index.config
    return {f"d{i:02d}": float(maxsim(Q, torch.as_tensor(v)[None], mask, None, cfg.similarity, cfg.reduction))
            for i, v in enumerate(file_vectors(index))}


# -- the interface -------------------------------------------------------------------------------------------

def test_the_index_picks_its_store_from_the_metadata(both, colbert):
    fp16, residual = both
    assert type(fp16.store) is Fp16Store and type(residual.store) is ResidualStore
    for index, stage in ((fp16, ColBERTRetriever), (residual, CentroidRetriever)):
        loaded = pt.Artifact.load(str(index.path))  # through the pyproject.toml entry points
        assert isinstance(loaded, ColBERTIndex) and type(loaded.store) is type(index.store)
        pipeline = loaded.retriever(colbert, num_results=5)
        assert isinstance(pipeline[-1], stage) and isinstance(loaded.retriever(num_results=5), stage)
    assert {fmt: store_class(fmt) for fmt in ("fp16", "residual1", "residual2", "residual4")} == STORES
    with pytest.raises(ValueError, match=r"format='residual3'.*expected one of"):
        store_class("residual3")


def test_each_format_takes_only_its_own_retriever_parameters(both):
    fp16, residual = both
    own = {store: set(retriever_parameters(store)) for store in (Fp16Store, ResidualStore)}
    shared = own[Fp16Store] & own[ResidualStore]
    assert shared == {"num_results", "strict", "verbose"}
    assert own[Fp16Store] - shared == {"lam", "k_hat", "faiss", "nprobe", "refine"}
    assert own[ResidualStore] - shared == {"ncells", "threshold", "ndocs", "nscore"}
    for index, other in ((fp16, ResidualStore), (residual, Fp16Store)):
        for name in sorted(own[other] - shared):
            with pytest.raises(TypeError, match=re.escape(f"{name}=None apply only to {other.KIND}")):
                index.retriever(**{name: None})  # even None: not this format's parameter
            with pytest.raises(TypeError, match=name):  # the factory itself, called directly
                index.store.retriever(**{name: None})
    with pytest.raises(TypeError, match=r"ndocs='auto' apply only to compressed.*stores fp16 vectors .*k_hat"):
        fp16.retriever(ndocs="auto")
    with pytest.raises(TypeError, match=r"k_hat=5, lam=2 apply only to fp16 indexes; the index at .* is "
                                        r"residual2-compressed .*\(num_results, ncells"):
        residual.retriever(k_hat=5, lam=2)
    with pytest.raises(TypeError, match="nprob=3 is not a parameter of any retriever"):
        fp16.retriever(nprob=3)


@pytest.mark.parametrize("which", ["fp16", "residual2"])
@pytest.mark.parametrize("bad", [1.5, "5", None, True, 0, np.float64(3.0)])
def test_both_retrievers_refuse_a_num_results_that_is_not_a_positive_integer(both, which, bad):
    index = both[0] if which == "fp16" else both[1]
    retriever_class = ColBERTRetriever if which == "fp16" else CentroidRetriever
    with pytest.raises(ValueError, match=rf"^num_results={re.escape(repr(bad))}; expected a positive integer$"):
        index.retriever(num_results=bad)
    with pytest.raises(ValueError, match=rf"^num_results={re.escape(repr(bad))}; expected a positive integer$"):
        retriever_class(index, num_results=bad)


def test_both_retrievers_take_a_numpy_integer_num_results(both):
    for index in both:
        assert index.retriever(num_results=np.int64(7)) == index.retriever(num_results=7)


def test_layout_covers_every_file_of_the_manifest(both):
    for index in both:
        layout = index.store.layout(index.meta)
        json_files = {"colbert_config.json"} | ({"codec.json"} if index.compressed else set())
        assert set(index.meta.files) - set(layout) == {"docnos.npids"} | json_files  # all others are arrays
        assert set(layout) <= set(index.meta.files)
        for name, (dtype, shape) in layout.items():
            assert (index.path / name).stat().st_size == int(np.prod(shape)) * np.dtype(dtype).itemsize
        assert set(index.store.CHECKED_ON_OPEN) <= set(index.meta.files) | {"parts.i64"}  # (windows mode only)


def test_format_only_parts_are_refused_by_the_other_format(both):
    fp16, residual = both
    with pytest.raises(ValueError, match=r"residual2-compressed and stores no fp16 vectors, which index\.vectors"):
        residual.vector_tensor  # noqa: B018
    with pytest.raises(ValueError, match=r"residual2-compressed .* which a neighbour \(FAISS\) index needs"):
        residual.ann(pfc.FaissSpec("exact"))
    with pytest.raises(ValueError, match="faiss='ivf'"):
        residual.build_ann("ivf")
    assert residual.build_ann() is None  # centroid search: nothing to build
    with pytest.raises(ValueError, match="is not compressed \\(format fp16\\): it has no codec"):
        fp16.codec  # noqa: B018


def test_writers_follow_the_format(tmp_path, colbert):
    config = pfc.ColBERTConfig(dim=16)
    for spec, writer in (("fp16", "Fp16Writer"), ("residual4", "ResidualWriter")):
        w = IndexWriter(tmp_path / spec, config, "f", compression=spec)
        assert type(w.format_writer).__name__ == writer
        w.abort()
    with pytest.raises(ValueError, match="ann='ivf': a residual1-compressed index searches by its centroids"):
        ColBERTIndex(tmp_path / "x").indexer(colbert, ann="ivf", compression="residual1")
    with pytest.raises(ValueError, match=r"unknown|ivfq"):  # the kind is checked before any encoding
        ColBERTIndex(tmp_path / "y").indexer(colbert, ann="ivfq")


# -- identical results: brute force over the files --------------------------------------------------------

def test_rows_are_the_stored_vectors(both):
    for index in both:
        expected = file_vectors(index)
        for i in (0, 7, len(index) - 1):
            np.testing.assert_array_equal(index.doc_vectors(i)[0], expected[i])


def test_exact_scores_of_both_stores_are_brute_force_maxsim(both, colbert):
    for index in both:
        ids = np.arange(len(index))
        for query in QUERIES:
            Q, mask = colbert.encode_queries([query])
            expected = brute_force(index, colbert, query)
            for block_tokens in (None, 16):
                got = index.store.exact_scores(Q[0][mask[0]], ids[::-1], block_tokens)
                np.testing.assert_allclose(got, [expected[f"d{i:02d}"] for i in ids[::-1]], atol=1e-5)


@pytest.mark.parametrize("which", [0, 1])
def test_exhaustive_retrieval_and_scorer_of_both_stores_rank_by_brute_force(both, colbert, which):
    index = both[which]
    n = len(index)
    exhaustive = {"faiss": "exact", "k_hat": index.meta.num_tokens} if which == 0 else \
        {"ncells": 10**6, "ndocs": None}
    topics = pd.DataFrame({"qid": ["a", "b", "c"], "query": QUERIES})
    run = index.retriever(colbert, num_results=n, **exhaustive)(topics)
    rescored = index.scorer(colbert)(run[["qid", "query", "docno"]])
    for qid, query in zip("abc", QUERIES):
        expected = sorted(brute_force(index, colbert, query).items(), key=lambda kv: (-kv[1], kv[0]))
        for frame in (run, rescored):
            got = frame[frame.qid == qid].sort_values("rank")
            assert got.docno.tolist() == [d for d, _ in expected]
            np.testing.assert_allclose(got.score, [s for _, s in expected], atol=1e-5)
