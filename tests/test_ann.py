"""The ANN kinds on their own: each registered kind builds, caches (atomically) and reloads the same index."""
import json

import numpy as np
import pytest

from pyterrier_fandom_colbert import storage
from pyterrier_fandom_colbert.index import ann

DIM = 16


@pytest.fixture(scope="module")
def vectors():
    """Clustered, as token vectors are (occurrences of a word near its vector), with unequal norms."""
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((100, DIM))
    points = centres[rng.integers(0, 100, 2000)] + 0.3 * rng.standard_normal((2000, DIM))
    return (points * rng.uniform(0.5, 2, (2000, 1))).astype(np.float16)


@pytest.mark.parametrize("name", list(ann.KINDS))
def test_each_kind_round_trips_through_the_cache(name, vectors, tmp_path, monkeypatch):
    kind = ann.KINDS[name]
    spec = ann.FaissSpec(name).resolve(len(vectors), DIM)
    queries = ann.as_search_vectors(np.asarray(vectors[:5], np.float32) + 0.1, True)
    built = ann.load_or_build(tmp_path, vectors, spec, "cosine")
    assert built.kind is kind and built.ntotal == len(vectors)
    ids = ann.search(built, queries, 10, kind.default_nprobe)
    assert ids.shape == (5, 10) and (ids >= 0).all()
    target = ann.cache_file(tmp_path, spec)
    if target is None:  # built on use: nothing written
        assert list(tmp_path.iterdir()) == []
        return
    # the index, its parameters and the build lock, and no temporary files
    assert sorted(p.name for p in target.parent.iterdir()) == sorted(
        [target.name, f"{spec.file_stem()}.json", f"{spec.file_stem()}.lock"])
    params = json.loads(target.with_suffix(".json").read_text())
    assert params["spec"] == spec.to_dict() and params["factory"] == spec.factory_string()
    assert params["similarity"] == "cosine" and params["num_tokens"] == len(vectors)
    assert params["file"] == storage.manifest_entry(target) and params["vectors"] is None
    # a second call reads the file (building again would fail) and finds the same neighbours
    monkeypatch.setattr(type(kind), "build", lambda *a, **k: pytest.fail("rebuilt despite the cache"))
    loaded = ann.load_or_build(tmp_path, vectors, spec, "cosine")
    np.testing.assert_array_equal(ann.search(loaded, queries, 10, kind.default_nprobe), ids)


@pytest.mark.parametrize("name", [n for n in ann.KINDS if ann.FaissSpec(n).file_stem() is not None])
def test_a_failed_cache_write_leaves_no_index_file(name, vectors, tmp_path, monkeypatch):
    kind = ann.KINDS[name]
    spec = ann.FaissSpec(name).resolve(len(vectors), DIM)

    def half_written(self, index, path):
        path.write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(type(kind), "write", half_written)
    with pytest.raises(OSError, match="disk full"):
        ann.load_or_build(tmp_path, vectors, spec, "cosine")
    assert not any(p.suffix == ".faiss" or p.name.startswith(".") for p in (tmp_path / ann.CACHE_DIR).iterdir())


@pytest.mark.parametrize("name", list(ann.KINDS))
def test_every_kind_finds_the_exact_neighbours_when_probed_fully_and_refined(name, vectors, tmp_path,
                                                                             numpy_similarity):
    """Exact kinds find the exact nearest tokens; approximate ones, with every list probed and a candidate list
    20x longer cut down by the stored vectors (``refine``), too."""
    import torch

    kind = ann.KINDS[name]
    spec = ann.FaissSpec(name).resolve(len(vectors), DIM)
    queries = np.asarray(vectors[:20], np.float32) + 0.05
    truth = np.argsort(-numpy_similarity("l2", queries, vectors), axis=1)[:, :10]
    built = ann.load_or_build(tmp_path, vectors, spec, "l2")
    prepared = ann.as_search_vectors(queries, False)
    if kind.exact:
        ids = ann.search(built, prepared, 10)
    else:
        ids = ann.refine(torch.as_tensor(vectors), prepared, ann.search(built, prepared, 200, spec.nlist), 10, "l2")
    assert [sorted(row) for row in ids.tolist()] == [sorted(row) for row in truth.tolist()]
