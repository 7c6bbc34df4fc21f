"""Sharded ColBERT indexes on one machine (no Ray): built with one shared codec, opened by pt.Artifact.load,
searched and re-ranked exactly as one index over the same documents, verified, and resumed after a failure."""
import os

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.index.residual.compress import CompressionSpec
from pyterrier_fandom_colbert.index.sharded.artifact import ShardedColBERTIndex, merge_ranked
from pyterrier_fandom_colbert.index.sharded.build import shard_bounds, work_folder
from pyterrier_fandom_colbert.storage import DamagedFileError

#: 3 shards of 12 documents; batches of 4 from each shard's start are also the single index's batches, so both
#: encode every document in the same batch and store the same vectors
NUM_DOCS, SHARDS, BATCH = 36, 3, 4
SPEC = CompressionSpec("residual2", num_centroids=16)


@pytest.fixture(scope="module")
def corpus(word_records):
    return word_records(NUM_DOCS, 7, 3)


@pytest.fixture(scope="module")
def built(small_colbert, corpus, tmp_path_factory):
    """(the sharded index, one index over the same documents with the sharded index's codec)."""
    folder = tmp_path_factory.mktemp("sharded")
    sharded = ShardedColBERTIndex(folder / "sharded")
    sharded.indexer(small_colbert, num_shards=SHARDS, compression=SPEC, batch_size=BATCH).index(corpus)
    single = pfc.ColBERTIndex(folder / "single")
    single.indexer(small_colbert, compression=SPEC, batch_size=BATCH, codec=sharded.codec).index(corpus)
    return sharded, single


def _queries(colbert):
    topics = pd.DataFrame({"qid": ["1", "2", "3"], "query": ["dragon castle", "the smith forged a blade",
                                                             "queen of the harbour"]})
    return colbert.query_encoder()(topics)


def test_shard_bounds_split_documents_evenly_and_in_order():
    assert shard_bounds(10, num_shards=4) == [0, 3, 6, 8, 10]
    assert shard_bounds(7, shard_size=7) == [0, 7]
    with pytest.raises(ValueError, match="exactly one"):
        shard_bounds(7)


def test_artifact_load_opens_a_sharded_index_with_its_documents(built, corpus):
    sharded, _ = built
    loaded = pt.Artifact.load(str(sharded.path))
    assert isinstance(loaded, ShardedColBERTIndex)
    assert len(loaded) == NUM_DOCS and len(loaded.shards) == SHARDS
    held = [d for shard in loaded.shards for d in shard.docnos_of(np.arange(len(shard)))]
    assert held == [r["docno"] for r in corpus]  # disjoint ranges, in input order
    assert {s.meta.format for s in loaded.shards} == {"residual2"}


def test_shards_share_one_codec(built):
    sharded, _ = built
    for shard in sharded.shards:
        np.testing.assert_array_equal(shard.codec.centroids, sharded.codec.centroids)
        np.testing.assert_array_equal(shard.codec.weights, sharded.codec.weights)


def test_exhaustive_search_over_shards_equals_one_index(built, small_colbert):
    sharded, single = built
    queries = _queries(small_colbert)
    options = {"num_results": 10, "ndocs": None, "ncells": 4}
    got = sharded.retriever(**options)(queries)
    want = single.retriever(**options)(queries)
    assert got["qid"].tolist() == want["qid"].tolist()
    assert got["docno"].tolist() == want["docno"].tolist()
    np.testing.assert_allclose(got["score"], want["score"], rtol=0, atol=1e-6)
    assert got.groupby("qid")["rank"].apply(list).tolist() == [list(range(10))] * 3


def test_merge_keeps_the_exact_top_k_when_every_shard_prunes(built, small_colbert):
    """With pruning each shard keeps its own best; the merge holds the true top k of what the shards scored:
    every result of the single index's pruned search that scores above the sharded cut-off is found too."""
    sharded, single = built
    queries = _queries(small_colbert)
    got = sharded.retriever(num_results=5)(queries)
    exact = single.retriever(num_results=NUM_DOCS, ndocs=None, ncells=16)(queries)
    for qid, rows in got.groupby("qid"):
        best = exact[exact["qid"] == qid].set_index("docno")["score"]
        np.testing.assert_allclose(rows["score"], best[rows["docno"]].to_numpy(), atol=1e-6)


def test_scorer_sends_each_document_to_its_shard(built, small_colbert, corpus):
    sharded, single = built
    queries = _queries(small_colbert)
    docnos = [r["docno"] for r in corpus[::5]]  # from every shard
    candidates = queries.merge(pd.DataFrame({"docno": docnos}), how="cross")
    got = sharded.scorer()(candidates).sort_values(["qid", "docno"]).reset_index(drop=True)
    want = single.scorer()(candidates).sort_values(["qid", "docno"]).reset_index(drop=True)
    assert got["docno"].tolist() == want["docno"].tolist()
    np.testing.assert_allclose(got["score"], want["score"], atol=1e-6)
    with pytest.raises(ValueError, match="not in the sharded index"):
        sharded.scorer()(candidates.assign(docno="nope"))


def test_empty_input_gives_empty_output_with_declared_columns(built, small_colbert):
    sharded, _ = built
    empty = _queries(small_colbert).iloc[:0]
    out = sharded.retriever(num_results=3)(empty)
    assert len(out) == 0 and {"docno", "score", "rank", "query_embs"} <= set(out.columns)


def test_merge_ranked_orders_by_score_then_docno():
    a = pd.DataFrame({"qid": ["q", "r"], "docno": ["b", "x"], "score": [1.0, 2.0], "rank": [0, 0]})
    b = pd.DataFrame({"qid": ["q", "q"], "docno": ["a", "c"], "score": [1.0, 3.0], "rank": [0, 1]})
    out = merge_ranked([a, b], 2)
    assert list(zip(out["qid"], out["docno"], out["rank"])) == [("q", "c", 0), ("q", "a", 1), ("r", "x", 0)]


def test_verify_checks_every_shard_and_names_a_damaged_file(built, tmp_path):
    import shutil

    sharded, _ = built
    checked = sharded.verify()
    assert checked["shards"] == SHARDS
    assert "shard-00001/residuals.u8" in checked["files"] and "shard-00002/pt_meta.json" in checked["files"]
    copy = tmp_path / "copy"
    shutil.copytree(sharded.path, copy)
    target = copy / "shard-00001" / "residuals.u8"
    data = bytearray(target.read_bytes())
    data[0] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(DamagedFileError, match=r"residuals\.u8"):
        ShardedColBERTIndex(copy).verify()
    meta = copy / "shard-00002" / "pt_meta.json"
    meta.write_text(meta.read_text().replace('"num_docs": 12', '"num_docs": 12 '))
    with pytest.raises(DamagedFileError, match=r"shard-00002/pt_meta\.json"):
        _ = ShardedColBERTIndex(copy).shards


def test_a_failed_build_resumes_keeping_the_shards_written(small_colbert, corpus, tmp_path):
    target = tmp_path / "resumed"
    broken = [dict(r) for r in corpus]
    broken[30]["docno"] = broken[29]["docno"]  # a duplicate inside the last shard: its writer fails at the end
    with pytest.raises(ValueError, match="duplicate docno"):
        ShardedColBERTIndex(target).indexer(small_colbert, num_shards=SHARDS, compression=SPEC,
                                            batch_size=BATCH).index(broken)
    work = work_folder(target)
    assert not target.exists() and sorted(p.name for p in work.glob("shard-*")) == ["shard-00000", "shard-00001"]
    kept = {p.name: os.stat(p / "pt_meta.json").st_mtime_ns for p in work.glob("shard-*")}
    index = ShardedColBERTIndex(target).indexer(small_colbert, num_shards=SHARDS, compression=SPEC,
                                                batch_size=BATCH).index(corpus)
    assert not work.exists() and len(index) == NUM_DOCS
    assert {name: os.stat(target / name / "pt_meta.json").st_mtime_ns for name in kept} == kept
    index.verify()


def test_another_plan_in_the_work_folder_is_refused(small_colbert, corpus, tmp_path):
    target = tmp_path / "other"
    broken = [dict(r) for r in corpus]
    broken[30]["docno"] = broken[29]["docno"]
    with pytest.raises(ValueError, match="duplicate docno"):
        ShardedColBERTIndex(target).indexer(small_colbert, num_shards=SHARDS, compression=SPEC,
                                            batch_size=BATCH).index(broken)
    with pytest.raises(ValueError, match="unfinished build of another plan"):
        ShardedColBERTIndex(target).indexer(small_colbert, num_shards=2, compression=SPEC,
                                            batch_size=BATCH).index(corpus)


def test_a_single_index_is_not_opened_as_sharded(built):
    _, single = built
    with pytest.raises(ValueError, match=r"not a colbert\.sharded"):
        _ = ShardedColBERTIndex(single.path).meta
