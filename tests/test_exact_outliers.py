"""Residual indexes that also store their worst-coded tokens exactly (``CompressionSpec.exact_share``): which rows
are stored, what every reader sees, that every writer path stores the same, that nothing changes without them, and
that damage to their files is found. Each checked against a brute-force reference computed here with numpy."""
import json
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.app.folder import SearchSettings
from pyterrier_fandom_colbert.index.residual.compress import CompressionSpec, compress_spill
from pyterrier_fandom_colbert.index.sharded.artifact import ShardedColBERTIndex
from pyterrier_fandom_colbert.index.writer import IndexWriter
from pyterrier_fandom_colbert.model.config import ColBERTConfig
from pyterrier_fandom_colbert.storage import DamagedFileError, MissingFileError, build_manifest, sealed

DIM = 16
SHARE = 0.05
SPEC = CompressionSpec("residual2", num_centroids=16, niter=8, exact_share=SHARE)
EXACT_FILES = ("exact_rows.u32", "exact_vectors.f16")
CODED_FILES = ("codes.u16", "residuals.u8", "ivf_offsets.i64", "ivf_docs.i32", "token_ids.u16", "offsets.i64",
               "centroids.f16", "bucket_cutoffs.f32", "bucket_weights.f32")


def unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def synthetic_docs(num_docs=60, seed=3):
    """(docno, vectors, token ids) of documents of clustered unit vectors, a few far from every cluster."""
    rng = np.random.default_rng(seed)
    centres = unit(rng.normal(size=(10, DIM)))
    lengths = rng.integers(2, 25, num_docs)
    x = centres[rng.integers(0, 10, lengths.sum())] + 0.3 * rng.normal(size=(lengths.sum(), DIM)) / np.sqrt(DIM)
    far = rng.random(len(x)) < 0.03  # rare tokens: nowhere near a centroid
    x[far] = rng.normal(size=(far.sum(), DIM))
    x = unit(x)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    return [(f"d{i}", x[bounds[i]:bounds[i + 1]], np.arange(bounds[i], bounds[i + 1]) % 300)
            for i in range(num_docs)]


def write(path, docs, spec=SPEC, codec=None):
    with IndexWriter(path, ColBERTConfig(dim=DIM), "synthetic", compression=spec, codec=codec) as w:
        for docno, v, ids in docs:
            w.add(docno, v, ids)
    return pfc.ColBERTIndex(path)


def reference(codec, vectors):
    """Brute force: each fp16 vector's error under ``codec`` (nearest centroid, per-dimension bucket, decoded by its
    weight), the rows above the codec's threshold, and the vectors a reader should see."""
    half = vectors.astype(np.float16).astype(np.float32)
    nearest = ((half[:, None, :] - codec.centroids[None]) ** 2).sum(-1).argmin(1)
    residual = half - codec.centroids[nearest]
    buckets = np.stack([np.searchsorted(codec.cutoffs[j], residual[:, j]) for j in range(DIM)], 1)
    decompressed = codec.centroids[nearest] + codec.weights[np.arange(DIM), buckets]
    errors = np.linalg.norm(decompressed - half, axis=1)
    rows = np.flatnonzero(errors > codec.exact_above)
    seen = decompressed.copy()
    seen[rows] = half[rows]
    return errors, rows, seen


@pytest.fixture(scope="module")
def docs():
    return synthetic_docs()


@pytest.fixture(scope="module")
def two_pass(docs, tmp_path_factory):
    return write(tmp_path_factory.mktemp("exact") / "two-pass", docs)


def stored(index):
    rows = np.fromfile(index.path / "exact_rows.u32", dtype=np.uint32).astype(np.int64)
    return rows, np.fromfile(index.path / "exact_vectors.f16", dtype=np.float16).reshape(-1, DIM)


def test_stored_rows_are_exactly_those_coded_worse_than_the_threshold(two_pass, docs):
    vectors = np.concatenate([v for _, v, _ in docs])
    codec = two_pass.codec
    errors, rows, seen = reference(codec, vectors)
    # the threshold: the (1 - share) quantile of the errors of the k-means sample (here every token: < 65,536)
    assert codec.exact_above == pytest.approx(float(np.quantile(errors, 1 - SHARE)), rel=1e-6)
    got_rows, got_vectors = stored(two_pass)
    np.testing.assert_array_equal(got_rows, rows)
    assert 0 < len(rows) < 0.1 * len(vectors)
    np.testing.assert_array_equal(got_vectors, vectors[rows].astype(np.float16))
    info = json.loads((two_pass.path / "codec.json").read_text())
    assert (info["exact_rows"], info["exact_row_dtype"], two_pass.meta.exact_rows) == (len(rows), "uint32", len(rows))
    # every reader of vectors sees the exact ones there: doc_vectors (PRF, explanations) and stage 5's decompression
    bounds = two_pass.offsets
    for i in range(len(docs)):
        np.testing.assert_allclose(two_pass.doc_vectors(i)[0], seen[bounds[i]:bounds[i + 1]], rtol=0, atol=1e-6)
    arrays = two_pass.store.arrays
    picked = np.random.default_rng(0).permutation(len(vectors))[:300]
    out = arrays.decompress_rows(picked, torch.empty(len(picked), DIM))
    np.testing.assert_allclose(out.numpy(), seen[picked], rtol=0, atol=1e-6)
    # and the stored norms are those of the vectors scoring sees, the exact ones included
    assert info["token_norms"] is True
    norms = np.fromfile(two_pass.path / "token_norms.f32", dtype=np.float32)
    np.testing.assert_allclose(norms, np.linalg.norm(seen, axis=1), rtol=1e-5)
    np.testing.assert_array_equal(arrays.norms, norms)


def test_an_index_written_before_token_norms_scores_the_same_by_decompressing(two_pass, docs, tmp_path):
    """An older index (no token_norms.f32, no ``token_norms`` in codec.json) opens, verifies and scores its
    tokens by decompressing them: the same scores as the tables give the index with norms, and as brute force."""
    old = tmp_path / "old"
    shutil.copytree(two_pass.path, old)
    info = json.loads((old / "codec.json").read_text())
    del info["token_norms"]
    (old / "codec.json").write_text(json.dumps(info))
    (old / "token_norms.f32").unlink()
    meta = json.loads((old / "pt_meta.json").read_text())
    del meta["files"]["token_norms.f32"]
    meta["files"]["codec.json"] = build_manifest(old, ["codec.json"])["codec.json"]
    (old / "pt_meta.json").write_text(json.dumps(sealed(meta)))
    older = pfc.ColBERTIndex(old)
    older.verify()
    assert older.store.arrays.norms is None and two_pass.store.arrays.norms is not None
    _, _, seen = reference(two_pass.codec, np.concatenate([v for _, v, _ in docs]))
    bounds = two_pass.offsets
    docs_asked = np.array([3, 0, 41, 17, 17, 59])
    for seed in range(3):
        q = torch.from_numpy(unit(np.random.default_rng(seed).normal(size=(6, DIM))))
        tables, decompressing = two_pass.store.exact_scores(q, docs_asked), older.store.exact_scores(q, docs_asked)
        np.testing.assert_allclose(tables, decompressing, rtol=1e-5, atol=1e-6)
        qn = q.numpy()
        brute = [(unit(seen[bounds[d]:bounds[d + 1]]) @ qn.T).max(0).mean() for d in docs_asked]
        np.testing.assert_allclose(tables, brute, rtol=1e-5, atol=1e-5)


def test_one_pass_and_copied_writers_store_the_same_files(two_pass, docs, tmp_path):
    codec = two_pass.codec
    one_pass = write(tmp_path / "one-pass", docs, codec=codec)
    arrays = one_pass.store.arrays
    copy = tmp_path / "copy"
    with IndexWriter(copy, ColBERTConfig(dim=DIM), "synthetic", compression=SPEC, codec=codec) as w:
        for i, (docno, v, ids) in enumerate(docs):
            start, end = int(one_pass.offsets[i]), int(one_pass.offsets[i + 1])
            if i % 5 == 0:
                w.add(docno, v, ids)  # re-encoded, as an update encodes a changed page
            else:
                w.add_coded(docno, arrays.codes[start:end], arrays.residuals[start:end], ids,
                            exact=arrays.exact_between(start, end))
    for name in CODED_FILES + EXACT_FILES + ("token_norms.f32",):
        want = (two_pass.path / name).read_bytes()
        assert (one_pass.path / name).read_bytes() == want, name
        assert (copy / name).read_bytes() == want, name
    with pytest.raises(ValueError, match="need their exact rows and vectors"), \
            IndexWriter(tmp_path / "x", ColBERTConfig(dim=DIM), "synthetic", compression=SPEC, codec=codec) as w:
        w.add_coded("d0", arrays.codes[:2], arrays.residuals[:2], np.zeros(2))
    assert not (tmp_path / "x").exists()


def test_without_a_share_nothing_changes(two_pass, docs, tmp_path):
    plain = write(tmp_path / "plain", docs, spec=CompressionSpec("residual2", num_centroids=16, niter=8))
    # the same codec and the same codes: the exact outliers are stored beside them, not instead
    for name in CODED_FILES:
        assert (plain.path / name).read_bytes() == (two_pass.path / name).read_bytes(), name
    assert not [p for p in plain.path.iterdir() if p.name.startswith("exact")]
    meta = json.loads((plain.path / "pt_meta.json").read_text())
    info = json.loads((plain.path / "codec.json").read_text())
    assert "exact_rows" not in meta and not {"exact_above", "exact_rows"} & set(info)
    assert info["spec"] == {"format": "residual2", "num_centroids": 16, "sample": None, "niter": 8, "seed": 0}
    assert plain.codec.exact_above is None and plain.store.arrays.exact_rows is None
    bounds = plain.offsets
    vectors = np.concatenate([v for _, v, _ in docs]).astype(np.float16).astype(np.float32)
    codec = plain.codec
    for i in (0, 7, 30):
        np.testing.assert_array_equal(plain.doc_vectors(i)[0],
                                      codec.decompress(*codec.compress(vectors[bounds[i]:bounds[i + 1]])))


def test_the_spill_path_is_the_writers(two_pass, docs, tmp_path):
    folder = tmp_path / "spill"
    folder.mkdir()
    vectors = np.concatenate([v for _, v, _ in docs])
    vectors.astype(np.float16).tofile(folder / "vectors.f16")
    np.concatenate([ids for _, _, ids in docs]).astype(np.int32).tofile(folder / "token_ids.i32")
    np.asarray(two_pass.offsets).tofile(folder / "offsets.i64")
    compress_spill(folder, len(vectors), DIM, SPEC, vectors_file="vectors.f16", token_ids_file_i32="token_ids.i32",
                   offsets_file="offsets.i64", chunk_tokens=50)  # many chunks
    for name in (*EXACT_FILES, "codes.u16", "residuals.u8"):
        assert (folder / name).read_bytes() == (two_pass.path / name).read_bytes(), name


def _flip(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-2])


def _append(path):
    path.write_bytes(path.read_bytes() + b"\0\0")


def _zero(path):
    path.write_bytes(bytes(path.stat().st_size))


DAMAGE = {"flip": _flip, "truncate": _truncate, "append": _append, "zero": _zero, "delete": lambda p: p.unlink()}


@pytest.mark.parametrize("how", sorted(DAMAGE))
@pytest.mark.parametrize("name", EXACT_FILES)
def test_damaged_exact_files_are_named_by_verify_and_on_first_read(two_pass, tmp_path, name, how):
    assert set(EXACT_FILES) <= set(two_pass.verify()["files"])
    damaged = tmp_path / "damaged"
    shutil.copytree(two_pass.path, damaged)
    DAMAGE[how](damaged / name)
    pattern = name.replace(".", r"\.")
    with pytest.raises((DamagedFileError, MissingFileError), match=pattern):
        pfc.ColBERTIndex(damaged).verify()
    with pytest.raises((DamagedFileError, MissingFileError), match=pattern):
        pfc.ColBERTIndex(damaged).doc_vectors(0)


def test_bad_shares_are_refused_naming_the_value():
    for bad in (-0.1, 1.0, 2, True, "0.01", float("nan")):
        with pytest.raises(ValueError, match=r"exact_share=.*expected a share of the tokens in \[0, 1\)"):
            CompressionSpec("residual2", exact_share=bad)
    with pytest.raises(ValueError, match=r"exact_share=0\.01 needs a residual format"):
        CompressionSpec("fp16", exact_share=0.01)
    with pytest.raises(ValueError, match=r"exact_share=1\.5"):
        SearchSettings.of(exact_share=1.5)
    assert CompressionSpec("residual2", exact_share=0).to_dict() == CompressionSpec("residual2").to_dict()


# -- encoded indexes: retrieval and scoring, and a sharded build ---------------------------------------------------
@pytest.fixture(scope="module")
def corpus(word_records):
    return word_records(36, 7, 3)


@pytest.fixture(scope="module")
def encoded(small_colbert, corpus, tmp_path_factory):
    """(fp16 index, residual2 index with exact outliers) of the same corpus."""
    folder = tmp_path_factory.mktemp("encoded")
    fp16 = pfc.ColBERTIndex(folder / "fp16").indexer(small_colbert, batch_size=4).index(corpus)
    spec = CompressionSpec("residual2", num_centroids=16, exact_share=0.1)
    exact = pfc.ColBERTIndex(folder / "exact").indexer(small_colbert, batch_size=4, compression=spec).index(corpus)
    return fp16, exact


def brute_force(index, vectors, colbert, queries):
    """{query: {docno: MaxSim over ``vectors`` (the decompressed ones with the exact outliers put back)}}."""
    from pyterrier_fandom_colbert.model.scoring import maxsim

    cfg, out = index.config, {}
    for query in queries:
        Q, mask = colbert.encode_queries([query])
        out[query] = {str(index.docnos_of(np.array([i]))[0]): float(maxsim(
            Q, torch.as_tensor(vectors[index.offsets[i]:index.offsets[i + 1]])[None], mask, None, cfg.similarity,
            cfg.reduction)) for i in range(len(index))}
    return out


QUERIES = ["dragon castle", "the smith forged a blade", "queen of the harbour"]


def test_retriever_and_scorer_score_the_exact_outliers(encoded, small_colbert):
    fp16, exact = encoded
    _, rows, seen = reference(exact.codec, np.asarray(fp16.vectors, dtype=np.float32))
    assert len(rows) and exact.meta.exact_rows == len(rows)
    want = brute_force(exact, seen, small_colbert, QUERIES)
    codec = exact.codec
    coded = brute_force(exact, codec.decompress(*codec.compress(np.asarray(fp16.vectors, dtype=np.float32))),
                        small_colbert, QUERIES)
    assert max(abs(want[q][d] - coded[q][d]) for q in QUERIES for d in want[q]) > 1e-3  # the outliers count
    topics = pd.DataFrame({"qid": ["a", "b", "c"], "query": QUERIES})
    full = exact.retriever(small_colbert, num_results=10, ncells=10**6, ndocs=None)(topics)
    pruned = exact.retriever(small_colbert, num_results=5, ncells=1, ndocs=12, nscore=6)(topics)
    rescored = exact.scorer(small_colbert)(pruned[["qid", "query", "docno"]])
    for qid, query in zip("abc", QUERIES):
        best = sorted(want[query].items(), key=lambda kv: (-kv[1], kv[0]))[:10]
        got = full[full.qid == qid].sort_values("rank")
        assert got.docno.tolist() == [d for d, _ in best]
        np.testing.assert_allclose(got.score, [s for _, s in best], atol=1e-5)
        for frame in (pruned, rescored):
            part = frame[frame.qid == qid]
            np.testing.assert_allclose(part.score, [want[query][d] for d in part.docno], atol=1e-5)


def test_a_sharded_build_stores_each_shards_exact_outliers(encoded, small_colbert, corpus, tmp_path):
    fp16, _ = encoded
    spec = CompressionSpec("residual2", num_centroids=16, exact_share=0.1)
    sharded = ShardedColBERTIndex(tmp_path / "sharded")
    sharded.indexer(small_colbert, num_shards=3, compression=spec, batch_size=4).index(corpus)
    codec = sharded.codec
    assert codec.exact_above is not None
    single = pfc.ColBERTIndex(tmp_path / "single").indexer(small_colbert, compression=spec, batch_size=4,
                                                           codec=codec).index(corpus)
    vectors = np.asarray(fp16.vectors, dtype=np.float32)
    _, rows, _ = reference(codec, vectors)
    np.testing.assert_array_equal(stored(single)[0], rows)
    start = 0
    for shard in sharded.shards:  # each shard: the rows of its documents, counted within it
        assert shard.codec.exact_above == codec.exact_above
        end = start + shard.meta.num_tokens
        inside = rows[(rows >= start) & (rows < end)]
        got_rows, got_vectors = stored(shard)
        np.testing.assert_array_equal(got_rows, inside - start)
        np.testing.assert_array_equal(got_vectors, vectors[inside].astype(np.float16))
        start = end
    topics = small_colbert.query_encoder()(pd.DataFrame({"qid": ["a", "b", "c"], "query": QUERIES}))
    options = {"num_results": 10, "ndocs": None, "ncells": 4}
    got, want = sharded.retriever(**options)(topics), single.retriever(**options)(topics)
    assert got["docno"].tolist() == want["docno"].tolist()
    np.testing.assert_allclose(got["score"], want["score"], rtol=0, atol=1e-6)
