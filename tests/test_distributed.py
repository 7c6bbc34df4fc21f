"""Sharded indexes built and searched on a local Ray cluster (127.0.0.1 only, two CPUs, no dashboard): the Ray
build stores what the local build stores (same codec, same documents per shard, same scores), shard actors
answer as the local sharded retriever does, a shard that does not answer in time is an error or a flagged
partial result, and a build whose worker is killed resumes, writing only the lost shard. Skipped without the
``[ray]`` extra. Each test starts Ray workers (torch imported per process), hence ``slow``."""
import contextlib
import json
import os
import signal
import threading
import time

import numpy as np
import pandas as pd
import pytest

ray = pytest.importorskip("ray")

import pyterrier_fandom_colbert as pfc  # noqa: E402
from pyterrier_fandom_colbert.heap import KERNEL_CACHES  # noqa: E402
from pyterrier_fandom_colbert.index.residual.compress import CompressionSpec  # noqa: E402
from pyterrier_fandom_colbert.index.sharded.artifact import ShardedColBERTIndex  # noqa: E402
from pyterrier_fandom_colbert.index.sharded.build import work_folder  # noqa: E402

pytestmark = pytest.mark.slow

NUM_DOCS, BATCH = 24, 4
SPEC = CompressionSpec("residual2", num_centroids=16)
CONFIG = {"dim": 16, "doc_maxlen": 32, "query_maxlen": 16}
SEARCH = {"num_results": 8, "ndocs": None, "ncells": 4}
#: a timeout only a hang should exceed (pytest's own timeout stops a real hang), never a slow, loaded machine
PATIENCE_S = 600.0


@pytest.fixture(scope="module")
def cluster():
    """A Ray cluster of this test module's own, stopped at the end of the module: ``address="local"`` starts a new
    one even where RAY_ADDRESS is set or a cluster started with ``ray start`` runs on this machine (Ray would
    join those)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus(word_records):
    return word_records(NUM_DOCS, 11, 3)


def _indexer(path, tiny_bert_dir, **options):
    from pyterrier_fandom_colbert.distributed import build

    return build.ShardedIndexer(path, tiny_bert_dir, config=pfc.ColBERTConfig(**CONFIG),
                                model_options={"batch_size": 8}, compression=SPEC, batch_size=BATCH, **options)


@pytest.fixture(scope="module")
def built(cluster, small_colbert, tiny_bert_dir, corpus, tmp_path_factory):
    """(the sharded index built on Ray, the same built here without Ray, the Ray build's shard reports)."""
    folder = tmp_path_factory.mktemp("ray-built")
    local = ShardedColBERTIndex(folder / "local")
    local.indexer(small_colbert, num_shards=2, compression=SPEC, batch_size=BATCH).index(corpus)
    indexer = _indexer(folder / "ray", tiny_bert_dir, num_shards=2, workers=2)
    # bounds of the driver's own, set after the cluster started: the encoder actors get them from the driver
    saved = {name: os.environ.get(name) for name in KERNEL_CACHES}
    os.environ.update({name: "17" for name in KERNEL_CACHES})
    try:
        remote = indexer.index(pd.DataFrame(corpus))
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return remote, local, indexer.reports


def _queries(colbert):
    return colbert.query_encoder()(pd.DataFrame({"qid": ["1", "2"], "query": ["dragon castle", "river queen"]}))


def _untimed(path):
    return {k: v for k, v in json.loads(path.read_text()).items() if k != "seconds"}


def test_ray_build_stores_what_the_local_build_stores(built, small_colbert):
    remote, local, _ = built
    np.testing.assert_array_equal(remote.codec.centroids, local.codec.centroids)
    np.testing.assert_array_equal(remote.codec.cutoffs, local.codec.cutoffs)
    for a, b in zip(remote.shards, local.shards):
        assert a.docnos_of(np.arange(len(a))).tolist() == b.docnos_of(np.arange(len(b))).tolist()
        # the same bytes in every data file of every shard (pt_meta.json lists their checksums)
        files = sorted(f.relative_to(a.path) for f in a.path.rglob("*") if f.is_file() and f.name != "pt_meta.json")
        assert files and files == sorted(f.relative_to(b.path) for f in b.path.rglob("*")
                                         if f.is_file() and f.name != "pt_meta.json")
        for name in files:
            if name.suffix == ".json":  # descriptions: the same but for the build's own timings
                assert _untimed(a.path / name) == _untimed(b.path / name), f"{a.path.name}/{name} differs"
            else:
                assert (a.path / name).read_bytes() == (b.path / name).read_bytes(), f"{a.path.name}/{name} differs"
    queries = _queries(small_colbert)
    got, want = remote.retriever(**SEARCH)(queries), local.retriever(**SEARCH)(queries)
    assert got["docno"].tolist() == want["docno"].tolist()
    np.testing.assert_allclose(got["score"], want["score"], rtol=0, atol=1e-5)
    checked = remote.verify()
    assert checked["shards"] == 2 and "codec/centroids.f16" in checked["files"]


def test_ray_encoders_run_with_the_drivers_kernel_cache_bounds(built):
    """The encoder actors' oneDNN and ideep caches are bounded (build memory) by the driver's settings, which the
    test set to 17 after the cluster had started: they travel with the actors, not with the cluster."""
    *_, reports = built
    assert len(reports) == 2
    for report in reports:
        assert report["encoder_kernel_caches"] == {name: "17" for name in KERNEL_CACHES}


def test_pfc_verify_checks_a_sharded_index(built, capsys):
    from pyterrier_fandom_colbert.app.cli import main

    remote, *_ = built
    assert main(["verify", str(remote.path)]) == 0
    assert "sharded intact" in capsys.readouterr().out


def test_shard_actors_answer_as_the_local_merge(built, small_colbert):
    from pyterrier_fandom_colbert.distributed.search import RayShardedRetriever

    remote, *_ = built
    queries = _queries(small_colbert)
    # the 30 s default was exceeded by the actors' first search under -n 2 and two CPU hogs: only a hang may fail
    retriever = RayShardedRetriever(remote, cpus_per_actor=0.5, timeout_s=PATIENCE_S, **SEARCH)
    try:
        got, want = retriever(queries), remote.retriever(**SEARCH)(queries)
        pd.testing.assert_frame_equal(got.drop(columns="query_embs"), want.drop(columns="query_embs"))
        assert all(a is b for a, b in zip(got["query_embs"], want["query_embs"]))  # the caller's, kept
        assert len(retriever(queries.iloc[:0])) == 0
        one = retriever.replace(num_results=3)  # a cut below the shards' own depth: the merge keeps the best 3
        try:
            pd.testing.assert_frame_equal(one(queries).drop(columns="query_embs"),
                                          want[want["rank"] < 3].reset_index(drop=True).drop(columns="query_embs"))
        finally:
            one.close()
    finally:
        retriever.close()


def test_a_shard_that_does_not_answer_in_time_is_never_silently_left_out(built, small_colbert):
    from pyterrier_fandom_colbert.distributed.search import RayShardedRetriever, ShardServer, ShardTimeoutError

    class StallingServer(ShardServer):
        """Never answers for shard-00000 (it waits to be stopped): that shard cannot answer in time, however
        fast or slow the machine is."""

        def search(self, qids, embs):
            if "shard-00000" in self.names:
                time.sleep(600)
            return super().search(qids, embs)

    remote, *_ = built
    queries = _queries(small_colbert)
    strict = RayShardedRetriever(remote, actors=1, cpus_per_actor=0.5, timeout_s=1.0, server=StallingServer,
                                 **SEARCH)
    try:
        with pytest.raises(ShardTimeoutError, match="shard-00000"):
            strict(queries)
    finally:
        strict.close()
    lenient = RayShardedRetriever(remote, actors=2, cpus_per_actor=0.5, timeout_s=1.0, partial=True,
                                  server=StallingServer, **SEARCH)
    try:
        out = lenient(queries)
        assert "shard-00000" in out.attrs["missing_shards"] and "partial" in out.columns and out["partial"].all()
        answering = remote.shards[1]
        assert set(out["docno"]) <= set(answering.docnos_of(np.arange(len(answering))))  # the other's, if in time
        complete = lenient.replace(timeout_s=PATIENCE_S, server=ShardServer)
        try:
            full = complete(queries)
            assert not full["partial"].any() and full.attrs["missing_shards"] == []
        finally:
            complete.close()
    finally:
        lenient.close()


def test_actors_that_cannot_start_are_an_error_naming_their_shards_not_a_hang(built, caplog):
    from pyterrier_fandom_colbert.distributed.search import RayShardedRetriever

    remote, *_ = built
    # each actor reserves more CPUs than the whole two-CPU cluster has: it can never be scheduled
    late = r"shards \['shard-00000', 'shard-00001'\] did not start within 2\.0 s"
    with caplog.at_level("WARNING", logger="pyterrier_fandom_colbert.distributed.search"), \
            pytest.raises(TimeoutError, match=late):
        RayShardedRetriever(remote, actors=1, cpus_per_actor=3, start_timeout_s=2.0, **SEARCH)
    assert "the 1 shard actors reserve 3 CPUs and the cluster has" in caplog.text
    with pytest.raises(ValueError, match="start_timeout_s=0"):
        RayShardedRetriever(remote, start_timeout_s=0, **SEARCH)
    # the cluster is free again: a retriever that fits starts and answers
    fits = RayShardedRetriever(remote, actors=1, cpus_per_actor=0.5, start_timeout_s=PATIENCE_S, **SEARCH)
    fits.close()


def test_the_server_must_be_a_shard_server(built):
    from pyterrier_fandom_colbert.distributed.search import RayShardedRetriever

    remote, *_ = built
    with pytest.raises(TypeError, match="server must be ShardServer or a subclass of it, not <class 'object'>"):
        RayShardedRetriever(remote, server=object, **SEARCH)


def test_a_killed_worker_loses_only_its_shard_and_the_build_resumes(cluster, tiny_bert_dir, corpus, tmp_path):
    from pyterrier_fandom_colbert.distributed.build import ShardWriter

    class StallingWriter(ShardWriter):
        """Waits (to be killed) once it has opened the last shard: the marker cannot vanish before it is read."""

        def open(self, shard, path, marker):
            super().open(shard, path, marker)
            if shard == 1:
                time.sleep(600)

    target = tmp_path / "resumed"
    work = work_folder(target)
    marker = work / "shard-00001.running"  # the last of two shards: the first is kept
    errors = []

    def run():
        try:
            _indexer(target, tiny_bert_dir, num_shards=2, workers=1, writer=StallingWriter).index(corpus)
        except RuntimeError as err:
            errors.append(err)

    def written():
        """The marker's "host pid" line once it is whole (it is created empty, then written)."""
        with contextlib.suppress(FileNotFoundError):
            line = marker.read_text()
            if line.endswith("\n"):
                return line.split()
        return None

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + PATIENCE_S
    while (owner := written()) is None and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert owner is not None, "the writer of the last shard never started"
    os.kill(int(owner[1]), signal.SIGKILL)
    thread.join()
    assert errors and "[1]" in str(errors[0])
    assert sorted(p.name for p in work.glob("shard-0000?")) == ["shard-00000"]
    kept = {"shard-00000": os.stat(work / "shard-00000" / "pt_meta.json").st_mtime_ns}
    index = _indexer(target, tiny_bert_dir, num_shards=2, workers=1).index(corpus)
    assert {n: os.stat(target / n / "pt_meta.json").st_mtime_ns for n in kept} == kept
    assert len(index) == NUM_DOCS
    index.verify()


def test_a_shard_written_whole_is_kept_when_its_writer_dies_before_reporting(cluster, tiny_bert_dir, corpus,
                                                                           tmp_path):
    """The writer's process ends between finishing shard 0 and returning its report: shard 0 is whole on disk,
    so it is kept and only shard 1 (queued behind it on that writer) is lost."""
    from pyterrier_fandom_colbert.distributed.build import LostShardsError, ShardWriter

    class DyingWriter(ShardWriter):
        def close(self):
            super().close()
            os._exit(1)

    target = tmp_path / "whole"
    with pytest.raises(LostShardsError) as caught:
        _indexer(target, tiny_bert_dir, num_shards=2, workers=1, writer=DyingWriter).index(corpus)
    assert sorted(caught.value.lost) == [1]
    work = work_folder(target)
    assert sorted(p.name for p in work.glob("shard-0000?")) == ["shard-00000"]
    indexer = _indexer(target, tiny_bert_dir, num_shards=2, workers=1)
    index = indexer.index(corpus)
    assert [r["shard"] for r in indexer.reports] == [1]
    assert len(index) == NUM_DOCS
    index.verify()


def test_pfc_search_folder_with_a_sharded_colbert_part_built_and_served_on_ray(cluster, tiny_bert_dir, corpus,
                                                                              tmp_path):
    """`pfc index --ray` (build_folder with a RayBuild) and `pfc serve --ray` (Searcher with ray): the sharded
    ColBERT part answers through the shard actors as through the local merge."""
    from pyterrier_fandom_colbert.app.folder import build_folder
    from pyterrier_fandom_colbert.app.search import Searcher
    from pyterrier_fandom_colbert.app.sharded import RayBuild

    # a saved checkpoint: a fresh model over a backbone is initialised differently under another number of torch
    # threads (Ray's one-CPU actors have one), and the actors refuse an encoder other than the driver's
    checkpoint = pfc.ColBERT.from_pretrained(tiny_bert_dir, device="cpu").save_pretrained(tmp_path / "checkpoint")
    colbert = pfc.ColBERT.from_pretrained(checkpoint, device="cpu")
    build_folder(corpus, tmp_path / "folder", checkpoint=str(checkpoint), colbert=colbert, batch_size=8,
                 ray=RayBuild(shards=2, workers=2))
    assert (tmp_path / "folder" / "colbert" / "shard-00001" / "pt_meta.json").is_file()
    local = Searcher(tmp_path / "folder", colbert=colbert, warm=False)
    remote = Searcher(tmp_path / "folder", colbert=colbert, warm=False, ray="", ray_timeout_s=PATIENCE_S)
    for system in ("colbert", "hybrid"):
        a = local.search("dragon castle", system=system, k=5)
        b = remote.search("dragon castle", system=system, k=5)
        assert [r["docno"] for r in a["results"]] == [r["docno"] for r in b["results"]]
        assert a["results"][0]["words"]  # explained from the re-encoded text
    # `pfc serve --ray --ray-timeout S`: the served folder's searchers wait S seconds for the shard actors
    from pyterrier_fandom_colbert.app.live import ServedFolder

    remote.pipeline("dense").close()  # the cluster's CPUs back to it, for the served folder's actors
    served = ServedFolder(tmp_path / "folder", ray="", ray_timeout_s=PATIENCE_S / 2)
    b = served.searcher.search("dragon castle", system="colbert", k=5)
    assert [r["docno"] for r in b["results"]] == [r["docno"] for r in local.search("dragon castle", k=5,
                                                                                  system="colbert")["results"]]
    assert served.searcher.pipeline("dense").timeout_s == PATIENCE_S / 2
    served.searcher.pipeline("dense").close()


def test_the_writer_must_be_a_shard_writer(tiny_bert_dir, tmp_path):
    with pytest.raises(TypeError, match="writer must be ShardWriter or a subclass of it, not <class 'object'>"):
        _indexer(tmp_path / "x", tiny_bert_dir, num_shards=2, writer=object)
