"""The residual-compressed index: codec, centroid-pruned search, building and opening, all checked against
brute-force references written out here."""
import numpy as np
import pytest
import torch

from pyterrier_fandom_colbert.index.residual import codec as rc
from pyterrier_fandom_colbert.index.residual import compress as compressed
from pyterrier_fandom_colbert.index.residual import search as cs
from pyterrier_fandom_colbert.model.similarity import SIMILARITIES
from pyterrier_fandom_colbert.ranking import found_hits, hits_frame

DIM = 16


def unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def clustered(n, dim=DIM, clusters=12, noise=0.35, seed=0):
    """Unit vectors around a few random directions, as ColBERT token vectors cluster by word."""
    rng = np.random.default_rng(seed)
    centres = unit(rng.normal(size=(clusters, dim)))
    return unit(centres[rng.integers(0, clusters, n)] + noise * rng.normal(size=(n, dim)) / np.sqrt(dim))


# -- codec ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_pack_unpack_round_trip(nbits):
    rng = np.random.default_rng(nbits)
    ids = rng.integers(0, 1 << nbits, size=(37, 32)).astype(np.uint8)
    packed = rc.pack_bits(ids, nbits)
    assert packed.shape == (37, 32 * nbits // 8) and packed.dtype == np.uint8
    np.testing.assert_array_equal(rc.unpack_bits(packed, nbits), ids)
    # the documented layout: dimension j sits in byte j // (8 / nbits) at bit offset nbits * (j % (8 / nbits))
    per_byte = 8 // nbits
    for j in (0, 5, 31):
        got = (packed[:, j // per_byte] >> (nbits * (j % per_byte))) & ((1 << nbits) - 1)
        np.testing.assert_array_equal(got, ids[:, j])


def test_bucketise_and_fit_buckets_match_brute_force():
    rng = np.random.default_rng(1)
    residuals = rng.normal(scale=rng.uniform(0.05, 0.5, DIM), size=(2000, DIM)).astype(np.float32)
    for nbits in (1, 2, 4):
        cutoffs, weights = rc.fit_buckets(residuals, nbits)
        options = 1 << nbits
        ids = rc.bucketise(residuals, cutoffs)
        for j in range(DIM):
            col = residuals[:, j]
            np.testing.assert_allclose(cutoffs[j], np.quantile(col, np.arange(1, options) / options), rtol=1e-6)
            np.testing.assert_array_equal(ids[:, j], np.searchsorted(cutoffs[j], col, side="left"))
            for b in range(options):
                np.testing.assert_allclose(weights[j, b], col[ids[:, j] == b].mean(), rtol=1e-5, atol=1e-7)


def test_nearest_centroids_is_the_l2_nearest():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(500, DIM)).astype(np.float32)
    c = rng.normal(size=(40, DIM)).astype(np.float32)
    expected = ((x[:, None, :] - c[None]) ** 2).sum(-1).argmin(1)
    np.testing.assert_array_equal(rc.nearest_centroids(x, c, block=64), expected)
    # every centroid twice, the copies after the originals: equal scores go to the lower id (the original)
    twice = np.concatenate([c, c])
    np.testing.assert_array_equal(rc.nearest_centroids(x, twice, block=64), expected)
    np.testing.assert_array_equal(rc.nearest_centroids(x, twice[::-1].copy(), block=64), len(c) - 1 - expected)


def test_many_centroids_shrink_the_block_and_keep_the_l2_nearest():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1500, 8)).astype(np.float32)
    c = rng.normal(size=(40_000, 8)).astype(np.float32)
    assert rc.assign_block(len(c)) * len(c) * 4 <= rc.ASSIGN_BYTES and rc.assign_block(len(c)) < len(x)
    expected = np.array([((c - row) ** 2).sum(1).argmin() for row in x.astype(np.float64)])
    np.testing.assert_array_equal(rc.nearest_centroids(x, c), expected)


@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_compress_decompress_against_brute_force(nbits):
    x = clustered(3000, seed=nbits)
    codec = rc.ResidualCodec.train(x[:2000], nbits, 32, niter=10)
    codes, packed = codec.compress(x)
    assert packed.shape == (len(x), DIM * nbits // 8)
    # brute force: nearest centroid, then each dimension's residual bucket by its cutoffs, decoded by its weight
    nearest = ((x[:, None, :] - codec.centroids[None]) ** 2).sum(-1).argmin(1)
    np.testing.assert_array_equal(codes, nearest)
    residual = x - codec.centroids[nearest]
    ids = np.stack([np.searchsorted(codec.cutoffs[j], residual[:, j]) for j in range(DIM)], 1)
    expected = codec.centroids[nearest] + codec.weights[np.arange(DIM), ids]
    np.testing.assert_allclose(codec.decompress(codes, packed), expected, rtol=0, atol=1e-7)
    out = torch.empty(len(x), DIM)
    codec.decompress_into(torch.from_numpy(codes), torch.from_numpy(packed), out)
    np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=1e-7)
    # error bound: an interior bucket's weight lies between its cutoffs, so the error is below the bucket's width
    err = np.abs(expected - x)
    lower = np.concatenate([np.full((DIM, 1), -np.inf), codec.cutoffs], 1)[np.arange(DIM), ids]
    upper = np.concatenate([codec.cutoffs, np.full((DIM, 1), np.inf)], 1)[np.arange(DIM), ids]
    interior = np.isfinite(lower) & np.isfinite(upper)
    assert np.all(err[interior] <= (upper - lower)[interior] + 1e-6)


def test_more_bits_less_error_and_bytes_per_token():
    x = clustered(4000, dim=128, clusters=40, seed=3)
    errors, centroid_only = {}, None
    for nbits in (1, 2, 4):
        codec = rc.ResidualCodec.train(x, nbits, 64, niter=5)
        errors[nbits] = float(((codec.decompress(*codec.compress(x)) - x) ** 2).sum(1).mean())
        # bytes per token: packed residual + centroid id
        assert codec.packed_bytes + rc.code_dtype(codec.num_centroids).itemsize == 128 * nbits // 8 + 2
        nearest = codec.centroids[rc.nearest_centroids(x, codec.centroids)]
        centroid_only = float(((x - nearest) ** 2).sum(1).mean())
    assert errors[4] < errors[2] < errors[1] < centroid_only


def test_codec_refuses_bad_parameters():
    with pytest.raises(ValueError, match="nbits=3"):
        rc.ResidualCodec.train(clustered(100), 3, 4)
    with pytest.raises(ValueError, match="dim=12 is not a multiple of 8"):
        rc.ResidualCodec.train(clustered(100, dim=12), 1, 4)
    with pytest.raises(ValueError, match="n >= num_centroids=200"):
        rc.train_centroids(clustered(100), 200)
    codec = rc.ResidualCodec.train(clustered(200), 2, 4)
    with pytest.raises(ValueError, match=r"expected \[n, 16\]"):
        codec.compress(np.zeros((3, 8)))


def test_codec_trains_on_a_float16_sample_in_place():
    """A float16 sample (what a build draws from its fp16 vectors) trains the codec a float32 copy of it trains,
    bit for bit, without a float32 copy of the sample or of its training rows (numpy's allocations traced)."""
    import tracemalloc

    half = clustered(40_000, dim=128, clusters=40, seed=5).astype(np.float16)
    wide = half.astype(np.float32)
    tracemalloc.start()
    try:
        codec = rc.ResidualCodec.train(half, 2, 64)
        exact = rc.exact_threshold(codec, half, 0.01)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    reference = rc.ResidualCodec.train(wide, 2, 64)
    for got, want in [(codec.centroids, reference.centroids), (codec.cutoffs, reference.cutoffs),
                      (codec.weights, reference.weights)]:
        np.testing.assert_array_equal(got, want)
    assert exact == rc.exact_threshold(reference, wide, 0.01)
    assert peak < half.nbytes  # a float32 copy alone would be twice the sample (the 90% training rows: 1.8x)


def test_fit_buckets_a_dimension_at_a_time_equals_all_at_once():
    rng = np.random.default_rng(7)
    residuals = (rng.normal(size=(3001, 8)) * rng.uniform(0.1, 2, 8)).astype(np.float32)
    residuals[:, 3] = 0.5  # one constant dimension: empty buckets take their midpoint quantile
    for nbits in (1, 2, 4):
        options = 1 << nbits
        cutoffs = np.quantile(residuals, np.arange(1, options) / options, axis=0).T.astype(np.float32)
        ids = rc.bucketise(residuals, cutoffs)
        counts = np.stack([np.bincount(ids[:, j], minlength=options) for j in range(8)])
        sums = np.stack([np.bincount(ids[:, j], weights=residuals[:, j].astype(np.float64), minlength=options)
                         for j in range(8)])
        midpoints = np.quantile(residuals, (np.arange(options) + 0.5) / options, axis=0).T
        weights = np.where(counts > 0, sums / np.maximum(counts, 1), midpoints).astype(np.float32)
        got_cutoffs, got_weights = rc.fit_buckets(residuals, nbits)
        np.testing.assert_array_equal(got_cutoffs, cutoffs)
        np.testing.assert_array_equal(got_weights, weights)


def test_sample_rows_keeps_float16_and_reads_a_chunk_at_a_time(monkeypatch):
    corpus = clustered(500, dim=8, seed=6).astype(np.float16)
    spec = compressed.CompressionSpec("residual2", num_centroids=4, sample=123)
    rows = np.sort(np.random.default_rng(spec.seed).choice(500, size=123, replace=False))
    monkeypatch.setattr(compressed, "CHUNK_TOKENS", 10)  # many chunks within one array, and across arrays
    for arrays in ([corpus], [corpus[:77], corpus[77:300], corpus[300:]]):
        sample = compressed.sample_rows(arrays, 500, spec)
        assert sample.dtype == np.float16
        np.testing.assert_array_equal(sample, corpus[rows])
    assert compressed.sample_rows([corpus.astype(np.float64)], 500, spec).dtype == np.float32


# -- centroid-pruned search over an in-memory store ------------------------------------------------------------------
def make_store(num_docs=120, nbits=2, num_centroids=24, seed=4, reduction="mean"):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 30, num_docs)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    x = clustered(int(offsets[-1]), seed=seed)
    codec = rc.ResidualCodec.train(x, nbits, num_centroids, niter=10)
    codes, packed = codec.compress(x)
    ivf_offsets, ivf_docs = cs.build_ivf(codes, offsets, num_centroids)
    store = cs.CompressedStore(codec, codes.astype(np.uint16), packed, offsets, ivf_offsets, ivf_docs,
                               "cosine", reduction)
    return store, codec.decompress(codes, packed), codes


def brute_force_scores(store, decompressed, q):
    """MaxSim of every document by brute force: all token cosines at once, max per document, sum or mean."""
    qn = q.numpy() / np.linalg.norm(q.numpy(), axis=1, keepdims=True)
    sims = (decompressed / np.linalg.norm(decompressed, axis=1, keepdims=True)) @ qn.T  # [tokens, n]
    best = np.maximum.reduceat(sims, store.offsets[:-1], axis=0)  # [docs, n]
    return best.sum(1) if store.reduction == "sum" else best.mean(1)


def queries(n=4, seed=5):
    return [torch.from_numpy(clustered(8, seed=seed + i)) for i in range(n)]


def test_inverted_lists_hold_each_documents_centroids():
    store, _, codes = make_store()
    for c in range(store.codec.num_centroids):
        listed = store.ivf_docs[store.ivf_offsets[c]:store.ivf_offsets[c + 1]].tolist()
        holders = [d for d in range(store.num_docs) if c in codes[store.offsets[d]:store.offsets[d + 1]]]
        assert listed == holders


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_without_pruning_search_is_exhaustive_maxsim_over_decompressed_vectors(reduction):
    store, decompressed, _ = make_store(reduction=reduction)
    centroids = torch.from_numpy(store.codec.centroids)
    params = cs.SearchParams(ncells=10**6, threshold=0.0, ndocs=None)
    for q in queries():
        ref = brute_force_scores(store, decompressed, q)
        ids, scores = cs.search_one(store, centroids, q, 15, params)
        expected = np.lexsort((np.arange(len(ref)), -ref))[:15]
        assert ids.tolist() == expected.tolist()
        np.testing.assert_allclose(scores, ref[expected], rtol=1e-5, atol=1e-6)


def with_norms(store, similarity=None, exact_share=0.0, seed=0):
    """The same coded tokens as ``store`` with their norms stored (and, with ``exact_share``, that share of the
    rows stored exactly as noisy copies of their decompressed vectors), under ``similarity``."""
    codes = store.codes.astype(np.int64)
    norms = store.codec.norms(codes, store.residuals)
    exact_rows = exact_vectors = None
    if exact_share:
        rng = np.random.default_rng(seed)
        exact_rows = np.sort(rng.choice(len(codes), int(len(codes) * exact_share), replace=False))
        exact = store.codec.decompress(codes[exact_rows], store.residuals[exact_rows])
        exact_vectors = (exact + rng.normal(0, 0.2, exact.shape)).astype(np.float16)
        norms[exact_rows] = np.linalg.norm(exact_vectors.astype(np.float32), axis=1)
    args = (store.codec, store.codes, store.residuals, store.offsets, store.ivf_offsets, store.ivf_docs,
            similarity or store.similarity, store.reduction)
    return (cs.CompressedStore(*args, exact_rows=exact_rows, exact_vectors=exact_vectors, norms=norms),
            cs.CompressedStore(*args, exact_rows=exact_rows, exact_vectors=exact_vectors))


def test_codec_norms_are_the_decompressed_vectors_norms():
    store, decompressed, codes = make_store()
    np.testing.assert_allclose(store.codec.norms(codes, store.residuals), np.linalg.norm(decompressed, axis=1),
                               rtol=1e-6)


@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_table_dot_products_equal_the_decompressed_vectors(nbits):
    store, decompressed, codes = make_store(nbits=nbits, num_docs=30)
    q = queries(1)[0]
    centroid_dots, table = store.codec.dot_tables(q)
    dots = rc.residual_dots(table, torch.from_numpy(store.residuals)) + centroid_dots[torch.from_numpy(codes)]
    np.testing.assert_allclose(dots.numpy(), decompressed @ q.numpy().T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("similarity", sorted(SIMILARITIES))
@pytest.mark.parametrize("exact_share", [0.0, 0.1])
@pytest.mark.parametrize("block_tokens", [3, 4096])
def test_scores_from_tables_equal_scores_over_decompressed_vectors(similarity, exact_share, block_tokens):
    tables, decompressing = with_norms(make_store(reduction="sum")[0], similarity, exact_share)
    docs = np.array([5, 0, 119, 42, 42, 7])
    for q in queries(3):
        got = cs.exact_scores(tables, q, docs, block_tokens)
        np.testing.assert_allclose(got, cs.exact_scores(decompressing, q, docs, block_tokens), rtol=1e-5,
                                   atol=1e-5)


def test_stored_norms_must_be_one_per_token():
    store = make_store(num_docs=5)[0]
    with pytest.raises(ValueError, match="token norms for"):
        cs.CompressedStore(store.codec, store.codes, store.residuals, store.offsets, store.ivf_offsets,
                           store.ivf_docs, norms=np.ones(len(store.codes) - 1, np.float32))


@pytest.mark.parametrize("block_tokens", [3, 7, 4096])  # blocks and chunks smaller than a document, and one
def test_exact_scores_match_brute_force_in_any_blocks(block_tokens):
    store, decompressed, _ = make_store(reduction="sum")
    ref = brute_force_scores(store, decompressed, queries(1)[0])
    docs = np.array([5, 0, 119, 42, 42, 7])  # any order, repeats allowed
    got = cs.exact_scores(store, queries(1)[0], docs, block_tokens)
    np.testing.assert_allclose(got, ref[docs], rtol=1e-5, atol=1e-6)
    assert cs.exact_scores(store, queries(1)[0], np.zeros(0, np.int64)).shape == (0,)


def reference_pipeline(store, codes, decompressed, q, k, params):
    """PLAID's stages written out document by document."""
    sims = np.asarray(torch.from_numpy(store.codec.centroids) @ torch.nn.functional.normalize(q, dim=-1).T)
    sims = sims / np.linalg.norm(store.codec.centroids, axis=1, keepdims=True)
    docs_codes = [set(codes[s:e].tolist()) for s, e in zip(store.offsets[:-1], store.offsets[1:])]
    cells = set(np.argsort(-sims, axis=0, kind="stable")[:params.ncells].ravel().tolist())
    candidates = [d for d in range(store.num_docs) if docs_codes[d] & cells]
    active = {c for c in range(len(sims)) if sims[c].max() >= params.threshold}
    if len(candidates) > params.ndocs:
        with_active = [d for d in candidates if docs_codes[d] & active]
        pruned = {d: sims[sorted(docs_codes[d] & active)].max(0).sum() for d in with_active}
        kept = sorted(pruned, key=lambda d: (-pruned[d], d))[:params.ndocs]
        kept += [d for d in candidates if d not in pruned][:params.ndocs - len(kept)]
    else:
        kept = candidates
    scored = params.scored(k)
    if len(kept) > scored:
        full = {d: sims[sorted(docs_codes[d])].max(0).sum() for d in kept}
        kept = sorted(kept, key=lambda d: (-full[d], d))[:scored]
    exact = brute_force_scores(store, decompressed, q)
    return sorted(kept, key=lambda d: (-exact[d], d))[:k], exact


@pytest.mark.parametrize("params", [cs.SearchParams(1, 0.5, 30), cs.SearchParams(2, 0.3, 20, 8),
                                    cs.SearchParams(3, 0.9, 40, 12)])
def test_pruned_search_follows_the_stages(params):
    store, decompressed, codes = make_store()
    centroids = torch.from_numpy(store.codec.centroids)
    for q in queries():
        stats = {}
        ids, scores = cs.search_one(store, centroids, q, 5, params, stats)
        expected, exact = reference_pipeline(store, codes, decompressed, q, 5, params)
        assert ids.tolist() == expected
        np.testing.assert_allclose(scores, exact[expected], rtol=1e-5, atol=1e-6)  # survivors are scored exactly
        assert stats["scored"] <= params.scored(5) and stats["pruned"] <= params.ndocs


@pytest.mark.parametrize("num_listed", [3, 400])  # the sorting and the dense branch of distinct_docs
def test_distinct_docs_is_unique_and_a_mask(num_listed):
    docs = np.random.default_rng(num_listed).integers(0, 1000, num_listed)
    candidates, member = cs.distinct_docs(docs, 1000)
    assert candidates.tolist() == np.unique(docs).tolist()
    assert np.flatnonzero(member).tolist() == candidates.tolist()


def test_stages_3_and_4_match_their_definitions():
    """The scatter-max and padded-gather interactions against sets of centroid ids, document by document."""
    store, _, codes = make_store(num_docs=60)
    scores = torch.from_numpy(np.random.default_rng(1).normal(size=(store.codec.num_centroids, 5)).astype(np.float32))
    S = scores.numpy()
    docs_codes = [sorted(set(codes[s:e].tolist())) for s, e in zip(store.offsets[:-1], store.offsets[1:])]
    candidates, member = cs.distinct_docs(np.arange(0, 60, 3), 60)
    docs, approx = cs.pruned_interaction(scores, 1.0, candidates, member, store)
    active = set(np.flatnonzero(S.max(1) >= 1.0).tolist())
    expected = {d: S[[c for c in docs_codes[d] if c in active]].max(0).sum()
                for d in candidates if active & set(docs_codes[d])}
    assert docs.tolist() == sorted(expected)
    np.testing.assert_allclose(approx, [expected[d] for d in docs], rtol=1e-6)
    full = cs.interaction(scores, candidates, store)
    np.testing.assert_allclose(full, [S[docs_codes[d]].max(0).sum() for d in candidates], rtol=1e-6)
    assert cs.interaction(scores, np.zeros(0, np.int64), store).shape == (0,)


def test_search_params_defaults_and_refusals():
    assert cs.SearchParams.for_k(100) == cs.SearchParams(2, 0.45, 1024)
    assert cs.SearchParams.for_k(2000).ndocs == 8000
    assert cs.SearchParams.for_k(10).scored(10) == 128 and cs.SearchParams.for_k(10, ndocs=256).scored(10) == 64
    with pytest.raises(ValueError, match="ndocs=0"):
        cs.SearchParams.for_k(10, ndocs=0)
    with pytest.raises(ValueError, match="threshold=nan"):
        cs.SearchParams.for_k(10, threshold=float("nan"))
    with pytest.raises(ValueError, match="nscore=5 needs pruning"):
        cs.SearchParams.for_k(10, ndocs=None, nscore=5)


# -- building from the spill ---------------------------------------------------------------------------------------
def write_spill(folder, vectors, lengths, token_ids):
    folder.mkdir(parents=True, exist_ok=True)
    vectors.astype(np.float16).tofile(folder / "vectors.f16")
    np.asarray(token_ids, dtype=np.int32).tofile(folder / "token_ids.i32")
    np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64).tofile(folder / "offsets.i64")


@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_compress_spill_writes_codes_residuals_and_lists(tmp_path, nbits):
    rng = np.random.default_rng(6)
    lengths = rng.integers(1, 40, 90)
    x = clustered(int(lengths.sum()), seed=6)
    token_ids = rng.integers(0, 30000, len(x))
    folder = tmp_path / "build"
    write_spill(folder, x, lengths, token_ids)
    spec = compressed.CompressionSpec(f"residual{nbits}", num_centroids=16, niter=8)
    info = compressed.compress_spill(folder, len(x), DIM, spec, vectors_file="vectors.f16",
                                     token_ids_file_i32="token_ids.i32", offsets_file="offsets.i64",
                                     chunk_tokens=100)  # many chunks, lists filled across chunk boundaries
    assert not (folder / "vectors.f16").exists() and not (folder / "token_ids.i32").exists()
    codec = compressed.load_codec(folder, info, DIM)
    codes = np.fromfile(folder / "codes.u16", dtype=np.uint16)
    packed = np.fromfile(folder / "residuals.u8", dtype=np.uint8).reshape(len(x), -1)
    half = x.astype(np.float16).astype(np.float32)  # the spill holds fp16 vectors
    exp_codes, exp_packed = codec.compress(half)
    np.testing.assert_array_equal(codes, exp_codes)
    np.testing.assert_array_equal(packed, exp_packed)
    offsets = np.fromfile(folder / "offsets.i64", dtype=np.int64)
    exp_ivf_offsets, exp_ivf_docs = cs.build_ivf(exp_codes, offsets, 16)
    np.testing.assert_array_equal(np.fromfile(folder / "ivf_offsets.i64", dtype=np.int64), exp_ivf_offsets)
    np.testing.assert_array_equal(np.fromfile(folder / "ivf_docs.i32", dtype=np.int32), exp_ivf_docs)
    np.testing.assert_array_equal(np.fromfile(folder / "token_ids.u16", dtype=np.uint16), token_ids)
    assert info["num_pairs"] == len(exp_ivf_docs) and info["code_dtype"] == "uint16"


def test_compress_spill_keeps_wide_token_ids(tmp_path):
    x = clustered(300)
    write_spill(tmp_path / "b", x, [100, 200], np.full(300, 70000))
    info = compressed.compress_spill(tmp_path / "b", 300, DIM, compressed.CompressionSpec("residual2", num_centroids=8),
                                     vectors_file="vectors.f16", token_ids_file_i32="token_ids.i32",
                                     offsets_file="offsets.i64")
    assert info["token_id_dtype"] == "int32"
    np.testing.assert_array_equal(np.fromfile(tmp_path / "b" / "token_ids.i32", dtype=np.int32), 70000)


def test_compression_spec_refusals():
    with pytest.raises(ValueError, match="compression='residual8'"):
        compressed.CompressionSpec("residual8")
    with pytest.raises(ValueError, match="sample=-1"):
        compressed.CompressionSpec("residual2", sample=-1)
    with pytest.raises(ValueError, match="niter=0"):
        compressed.CompressionSpec("residual2", niter=0)
    with pytest.raises(ValueError, match="num_centroids=500 but the corpus has only 300"):
        compressed.CompressionSpec("residual2", num_centroids=500).resolve(300)


# -- the artifact: building, opening, retrieving, re-ranking ---------------------------------------------------------
SUBJECTS = ["The castle of Vel Amara", "Captain Mirel of the grey fleet", "The silver dragon Ysolde",
            "Old Orrin the smith", "The river folk of Dunmere", "Queen Salasi", "The library of Kest"]
FACTS = ["was built during the third age, after the flood", "fought a long war against the hill giants",
         "guards a crown of frozen fire beneath the mountain", "forged twelve blades from fallen stars",
         "trades spices and silk along the eastern coast", "is remembered in songs about the lost city of Ombra"]
PASSAGES = [f"{s} {f}." for s in SUBJECTS for f in FACTS]  # 42 short passages
QUERIES = ["who forged blades from fallen stars", "when was the castle built",
           "what does the dragon guard under the mountain"]


@pytest.fixture(scope="module")
def colbert(tiny_bert_dir):
    import pyterrier_fandom_colbert as pfc

    torch.set_num_threads(2)
    config = pfc.ColBERTConfig(dim=16, doc_maxlen=64, query_maxlen=16)
    return pfc.ColBERT.from_pretrained(tiny_bert_dir, config=config, device="cpu", batch_size=8)


def records():
    return [{"docno": f"p{i:02d}", "text": t} for i, t in enumerate(PASSAGES)]


@pytest.fixture(scope="module")
def both(colbert, tmp_path_factory):
    """(fp16 index, residual2 index) of the same corpus."""
    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex

    folder = tmp_path_factory.mktemp("indexes")
    fp16 = ColBERTIndex(folder / "fp16").indexer(colbert, batch_size=16).index(iter(records()))
    spec = compressed.CompressionSpec("residual2", num_centroids=16, niter=10)
    small = ColBERTIndex(folder / "r2").indexer(colbert, batch_size=16, compression=spec).index(iter(records()))
    return fp16, small


def test_build_and_open_round_trip(both):
    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex

    fp16, small = both
    opened = ColBERTIndex(small.path)
    assert opened.compression == "residual2" and opened.compressed and not fp16.compressed
    assert (len(opened), opened.meta.num_tokens, opened.fingerprint) == (len(fp16), fp16.meta.num_tokens,
                                                                         fp16.fingerprint)
    assert not (opened.path / "vectors.f16").exists() and opened.codec.num_centroids == 16
    np.testing.assert_array_equal(opened.offsets, fp16.offsets)
    assert opened.docnos_of(np.arange(len(opened))).tolist() == [r["docno"] for r in records()]
    codec = opened.codec
    for i in range(len(opened)):
        vecs, ids = opened.doc_vectors(f"p{i:02d}")
        original, original_ids = fp16.doc_vectors(i)
        # exactly the codec applied to the vectors the single encoding pass wrote
        np.testing.assert_array_equal(vecs, codec.decompress(*codec.compress(original)))
        np.testing.assert_array_equal(ids, original_ids)
        assert np.mean(np.sum(unit(vecs) * unit(original), 1)) > 0.9


def brute_force_ranking(index, colbert, query):
    from pyterrier_fandom_colbert.model.scoring import maxsim

    Q, mask = colbert.encode_queries([query])
    cfg = index.config
    scores = {f"p{i:02d}": float(maxsim(Q, torch.as_tensor(index.doc_vectors(i)[0])[None], mask, None,
                                        cfg.similarity, cfg.reduction)) for i in range(len(index))}
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def test_unpruned_retriever_returns_the_exhaustive_ranking_of_the_decompressed_vectors(both, colbert):
    import pandas as pd

    _, small = both
    retriever = small.retriever(colbert, num_results=10, ncells=10**6, ndocs=None)
    res = retriever(pd.DataFrame({"qid": ["a", "b", "c"], "query": QUERIES}))
    for qid, query in zip("abc", QUERIES):
        got = res[res.qid == qid].sort_values("rank")
        expected = brute_force_ranking(small, colbert, query)[:10]
        assert got.docno.tolist() == [d for d, _ in expected]
        np.testing.assert_allclose(got.score, [s for _, s in expected], atol=1e-5)


def test_pruned_retriever_and_scorer_score_exactly(both, colbert):
    import pandas as pd

    _, small = both
    topics = pd.DataFrame({"qid": ["a", "b", "c"], "query": QUERIES, "extra": [1, 2, 3]})
    pruned = small.retriever(colbert, num_results=5, ncells=1, ndocs=12, nscore=6)
    res = pruned(topics)
    assert set(res.columns) >= {"qid", "query", "extra", "docno", "score", "rank"}
    reranked = small.scorer(colbert)(res[["qid", "query", "docno"]])
    for qid, query in zip("abc", QUERIES):
        exact = dict(brute_force_ranking(small, colbert, query))
        got = res[res.qid == qid]
        assert 0 < len(got) <= 5
        np.testing.assert_allclose(got.score, [exact[d] for d in got.docno], atol=1e-5)
        again = reranked[reranked.qid == qid]
        np.testing.assert_allclose(again.score, [exact[d] for d in again.docno], atol=1e-5)
    empty = pruned(topics.iloc[:0])
    assert len(empty) == 0 and {"docno", "score", "rank"} <= set(empty.columns)


def test_retriever_cutoff_equality_and_repr(both):
    _, small = both
    deep = small.retriever(num_results=1000, ndocs=50)
    fused = (deep % 10).compile()
    # the cut keeps the uncut search (k = 1000's cells, threshold, pruning and max(1000, 50 // 4) scored)
    assert fused.params == cs.SearchParams(4, 0.4, 50, 1000) and fused.num_results == 10
    assert fused == small.retriever(num_results=10, ncells=4, threshold=0.4, ndocs=50, nscore=1000)
    assert (deep % 2000).compile() is deep
    assert deep != small.retriever(num_results=1000, ndocs=60)
    assert "ndocs=50" in repr(deep) and "residual2" not in repr(deep)


def test_bad_parameters_are_named(both, tmp_path):
    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
    from pyterrier_fandom_colbert.model.config import ColBERTConfig

    fp16, small = both
    with pytest.raises(TypeError, match=r"faiss='ivf'.*apply only to fp16 indexes"):
        small.retriever(faiss="ivf")
    with pytest.raises(TypeError, match="refine=2 apply only to fp16"):
        small.retriever(refine=2)
    with pytest.raises(TypeError, match=r"ncells=2.*apply only to compressed indexes"):
        fp16.retriever(ncells=2)
    with pytest.raises(ValueError, match="ndocs='many'"):
        small.retriever(ndocs="many")
    with pytest.raises(ValueError, match="ncells=0"):
        small.retriever(ncells=0)
    with pytest.raises(ValueError, match="residual2-compressed and stores no fp16 vectors"):
        _ = small.vectors
    with pytest.raises(ValueError, match="compression='residual3'"):
        ColBERTIndex(tmp_path / "x").indexer(None, compression="residual3")
    with pytest.raises(ValueError, match="dim=12 is not a multiple of 8"):
        ColBERTIndex(tmp_path / "y").writer(ColBERTConfig(dim=12), "f", compression="residual1")
    spec = compressed.CompressionSpec("residual2", num_centroids=500)
    with pytest.raises(ValueError, match="num_centroids=500 but the corpus has only"), \
            ColBERTIndex(tmp_path / "z").writer(ColBERTConfig(dim=16), "f", compression=spec) as w:
        w.add("a", clustered(5), np.arange(5))
        w.add("b", clustered(5, seed=1), np.arange(5))
    assert not (tmp_path / "z").exists()  # the failed build left nothing


def test_compressed_index_replaces_an_fp16_one(tmp_path):
    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
    from pyterrier_fandom_colbert.model.config import ColBERTConfig

    for compression in ("fp16", compressed.CompressionSpec("residual4", num_centroids=4), "fp16"):
        with ColBERTIndex(tmp_path / "i").writer(ColBERTConfig(dim=16), "f", overwrite=True,
                                                 compression=compression) as w:
            for i in range(3):
                w.add(f"d{i}", clustered(7, seed=i), np.arange(7))
        assert ColBERTIndex(tmp_path / "i").compression == compressed.as_spec(compression).format


def test_verify_checks_a_compressed_index(both, tmp_path):
    import shutil

    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
    from pyterrier_fandom_colbert.storage import DamagedFileError

    _, small = both
    report = small.verify()
    assert {"codes.u16", "residuals.u8", "ivf_docs.i32", "centroids.f16", "codec.json"} <= set(report["files"])
    assert "vectors.f16" not in report["files"]
    damaged = tmp_path / "damaged"
    shutil.copytree(small.path, damaged)
    codes = np.memmap(damaged / "codes.u16", dtype=np.uint16, mode="r+")
    codes[3] = 60000  # beyond the 16 centroids
    codes.flush()
    del codes
    with pytest.raises(DamagedFileError, match=r"codes\.u16"):
        ColBERTIndex(damaged).verify()


def test_long_documents_as_windows_compress_too(colbert, tmp_path):
    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex

    long_text = " ".join(PASSAGES[:12])  # beyond doc_maxlen=64: several windows
    docs = [*records()[:10], {"docno": "long", "text": long_text}]
    spec = compressed.CompressionSpec("residual4", num_centroids=8)
    index = ColBERTIndex(tmp_path / "w").indexer(colbert, long_docs="windows", compression=spec).index(docs)
    fp16 = ColBERTIndex(tmp_path / "w16").indexer(colbert, long_docs="windows").index(docs)
    assert index.meta.num_parts == fp16.meta.num_parts > len(docs)
    np.testing.assert_array_equal(index.part_offsets, fp16.part_offsets)
    vecs, _ = index.doc_vectors("long")
    assert len(vecs) == len(fp16.doc_vectors("long")[0])


def test_ranked_frame_matches_rank_by_score():
    import pandas as pd

    from pyterrier_fandom_colbert.frames import rank_by_score, with_columns

    rng = np.random.default_rng(9)
    inp = pd.DataFrame({"qid": ["q2", "q1", "q2b", "q3"], "query": ["a", "b", "c", "d"], "extra": [1, 2, 3, 4]})
    codes = np.array([0, 1, 2, 3])
    found = [(rng.permutation(30)[:k], rng.integers(0, 4, k) / 4) for k in (12, 7, 0, 9)]  # many tied scores

    def docnos_of(ids):
        return np.array([f"doc{(7 * i) % 31}" for i in ids], dtype=object)

    counts = [len(found[c][0]) for c in codes]
    out = inp.iloc[np.repeat(np.arange(len(inp)), counts)].reset_index(drop=True)
    ids = np.concatenate([found[c][0] for c in codes])
    expected = rank_by_score(with_columns(out, {"docno": docnos_of(ids),
                                                "score": np.concatenate([found[c][1] for c in codes])}))
    pd.testing.assert_frame_equal(hits_frame(inp, *found_hits(codes, found, docnos_of)), expected)


def test_set_parameter_rebuilds_the_centroid_retriever_as_its_constructor(both, colbert):
    """PyTerrier's parameter protocol (pt.GridSearch): same retriever, output and refusals as construction."""
    import pandas as pd

    from pyterrier_fandom_colbert.index.residual.search import CentroidRetriever

    _, small = both
    queries = colbert.query_encoder()(pd.DataFrame({"qid": ["a", "b", "c"], "query": QUERIES}))
    retriever = CentroidRetriever(small, num_results=10, ncells=10**6, ndocs=None)
    before = retriever(queries)
    for param, value in (("num_results", 3), ("ncells", 1)):
        retriever = CentroidRetriever(small, num_results=10, ncells=10**6, ndocs=None)
        expected = CentroidRetriever(small, **{"num_results": 10, "ncells": 10**6, "ndocs": None, param: value})
        retriever.set_parameter(param, value)
        assert retriever == expected and repr(retriever) == repr(expected)
        assert retriever != CentroidRetriever(small, num_results=10, ncells=10**6, ndocs=None)
        after = retriever(queries)
        pd.testing.assert_frame_equal(after, expected(queries))
        if param == "num_results":  # (one cell per query vector still reaches every passage of this tiny index)
            assert len(after) == 9 < len(before)
    with pytest.raises(ValueError, match="ndocs='many'"):
        retriever.set_parameter("ndocs", "many")
    assert retriever.get_parameter("ndocs") is None


# -- writing with a known codec ------------------------------------------------------------------------------------
def test_a_writer_with_a_known_codec_codes_each_document_alone_and_copies_coded_ones(tmp_path):
    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
    from pyterrier_fandom_colbert.index.writer import IndexWriter
    from pyterrier_fandom_colbert.model.config import ColBERTConfig

    rng = np.random.default_rng(5)
    vectors = clustered(600, seed=5)
    lengths = rng.integers(1, 30, 40)
    lengths[-1] = 600 - lengths[:-1].sum()
    assert lengths[-1] > 0
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    docs = [(f"d{i}", vectors[bounds[i]:bounds[i + 1]], np.arange(bounds[i], bounds[i + 1]) % 97)
            for i in range(len(lengths))]
    config = ColBERTConfig(dim=DIM)
    trained = ColBERTIndex(tmp_path / "trained")
    with trained.writer(config, "synthetic", compression="residual2") as w:
        for docno, v, ids in docs:
            w.add(docno, v, ids)
    codec = trained.codec

    given = tmp_path / "given"
    with IndexWriter(given, config, "synthetic", compression="residual2", codec=codec) as w:
        for docno, v, ids in docs:
            w.add(docno, v, ids)
    index = ColBERTIndex(given)
    for docno, v, ids in docs:  # each document's codes: the codec's, of that document alone
        codes, packed = codec.compress(v.astype(np.float16).astype(np.float32))
        got, got_ids = index.doc_vectors(docno)
        np.testing.assert_allclose(got, codec.decompress(codes, packed), atol=1e-6)
        np.testing.assert_array_equal(got_ids, ids)
    assert (tmp_path / "given" / "codes.u16").read_bytes() == (tmp_path / "trained" / "codes.u16").read_bytes()

    # a copy made of coded rows (and one re-encoded document) is the same index, file for file
    copy = tmp_path / "copy"
    arrays = index.store.arrays
    with IndexWriter(copy, config, "synthetic", compression="residual2", codec=codec) as w:
        for i, (docno, v, ids) in enumerate(docs):
            start, end = bounds[i], bounds[i + 1]
            if i == 7:
                w.add(docno, v, ids)
            else:
                w.add_coded(docno, arrays.codes[start:end], arrays.residuals[start:end], ids)
    for name in ("codes.u16", "residuals.u8", "ivf_offsets.i64", "ivf_docs.i32", "token_ids.u16", "offsets.i64"):
        assert (copy / name).read_bytes() == (given / name).read_bytes(), name
    assert not (copy / "vectors.f16").exists()

    with pytest.raises(ValueError, match="needs a writer opened with the codec"), \
            IndexWriter(tmp_path / "x", config, "synthetic", compression="residual2") as w:
        w.add_coded("d0", arrays.codes[:2], arrays.residuals[:2], np.zeros(2))
    with pytest.raises(ValueError, match="cannot write a residual4 index"):
        IndexWriter(tmp_path / "y", config, "synthetic", compression="residual4", codec=codec)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


@pytest.mark.parametrize("which", [0, 1], ids=["fp16", "residual2"])
def test_text_searcher_answers_as_the_retriever_pipeline(both, colbert, which):
    """``index.searcher(colbert)``: the same passages and scores, best first, as ``index.retriever(colbert)`` with
    the same options, without a frame; bad queries are refused by name."""
    index = both[which]
    options = {"num_results": 7} if which else {"num_results": 7, "faiss": "exact"}
    pipeline = index.retriever(colbert, **options)
    searcher = index.searcher(colbert, **options)
    assert searcher.num_results == 7
    for query in QUERIES:
        docnos, scores = searcher.search(query)
        expected = pipeline.search(query).sort_values("rank")
        assert docnos.tolist() == expected["docno"].tolist()
        np.testing.assert_allclose(scores, expected["score"].to_numpy(), rtol=0, atol=1e-9)
        assert scores.dtype == np.float64 and np.all(np.diff(scores) <= 0)
    for bad in ("", "   ", None):
        with pytest.raises(ValueError, match="empty or non-text query"):
            searcher.search(bad)
    with pytest.raises(TypeError, match="nscore"):  # another format's option, named
        index.searcher(colbert, **({"nscore": 5} if not which else {"k_hat": 5}))
