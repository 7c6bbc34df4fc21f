"""A residual index written without the fp16 spill (``IndexWriter(codec=TrainedCodec.train(...))``, what a fresh
``pfc index`` does from its kept encoded passages) is the index the spill path writes (``IndexWriter(compression=
...)``, :func:`compress_spill`), file for file: the same training sample, codec, codes, residuals, exact outliers and
inverted lists, coded in the same chunks."""
import json

import numpy as np
import pytest

from pyterrier_fandom_colbert.index.residual import compress as compressed
from pyterrier_fandom_colbert.index.residual.compress import CHUNK_TOKENS, CompressionSpec, TrainedCodec, sample_rows
from pyterrier_fandom_colbert.index.writer import IndexWriter
from pyterrier_fandom_colbert.model.config import ColBERTConfig
from pyterrier_fandom_colbert.storage import SEAL_KEY

DIM = 8
SPEC = CompressionSpec("residual2", num_centroids=32, exact_share=0.02)


def corpus(lengths, seed=0):
    """(docno, fp16 vectors, token ids, parts) of documents of the given lengths: clustered unit vectors."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(12, DIM))
    x = centres[rng.integers(0, 12, sum(lengths))] + 0.4 * rng.normal(size=(sum(lengths), DIM))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float16)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    return [(f"d{i}", x[bounds[i]:bounds[i + 1]], np.arange(bounds[i], bounds[i + 1]) % 1000,
             [n] if n < 300 else [n // 2, n - n // 2]) for i, n in enumerate(lengths)]


def index_files(folder):
    """Every file's bytes, the build times left out (codec.json's ``seconds``, and so its entry in pt_meta.json's
    manifest and the manifest's seal)."""
    out = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
    codec = json.loads(out.pop("codec.json"))
    assert set(codec["seconds"]) == {"train", "quantise", "lists"}
    out["codec.json"] = {**codec, "seconds": None}
    meta = json.loads(out.pop("pt_meta.json"))
    meta["files"].pop("codec.json")
    meta.pop(SEAL_KEY, None)
    out["pt_meta.json"] = meta
    return out


def write(folder, docs, codec=None):
    with IndexWriter(folder, ColBERTConfig(dim=DIM), "synthetic", long_docs="windows", stride=100,
                     compression=SPEC, codec=codec) as writer:
        for docno, vectors, ids, parts in docs:
            writer.add(docno, vectors, ids, parts)
        writer.truncated_docs, writer.windowed_docs = 0, sum(len(p) > 1 for *_, p in docs)


def test_the_trained_codec_writes_the_spills_index_file_for_file_in_the_same_chunks(tmp_path, monkeypatch):
    # several chunks of CHUNK_TOKENS rows, one document longer than a chunk (coded alone) among them
    lengths = [int(n) for n in np.random.default_rng(1).integers(1, 400, 300)]
    lengths[150] = CHUNK_TOKENS + 7
    docs = corpus(lengths)
    coded = []
    compress = compressed.ResidualCodec.compress
    monkeypatch.setattr(compressed.ResidualCodec, "compress", lambda codec, v: coded.append(len(v)) or
                        compress(codec, v))
    write(tmp_path / "spill", docs)
    spill_calls, coded[:] = list(coded), []
    trained = TrainedCodec.train((v for _, v, _, _ in docs), sum(lengths), SPEC)
    write(tmp_path / "trained", docs, trained)

    assert coded == spill_calls and len(coded) >= 3 and CHUNK_TOKENS + 7 in coded  # the same chunks
    got, expected = index_files(tmp_path / "trained"), index_files(tmp_path / "spill")
    assert sorted(got) == sorted(expected) and "vectors.f16" not in got and "exact_rows.u32" in got
    assert [name for name in expected if got[name] != expected[name]] == []
    assert got["codec.json"]["sample"] == trained.sample == 65536 and "codec" not in got["codec.json"]


def test_held_documents_are_coded_before_rows_copied_after_them(tmp_path):
    """A writer holding documents for its chunk codes them before appending coded rows (``add_coded``): the
    index a writer coding each document alone makes."""
    docs = corpus([5, 9, 3, 12, 4], seed=2)
    spec = CompressionSpec("residual2", num_centroids=4, exact_share=0.1)
    codec = TrainedCodec.train((v for _, v, _, _ in docs), 33, spec)
    made = {}
    for name, given in (("alone", codec.codec), ("held", codec)):
        with IndexWriter(tmp_path / name, ColBERTConfig(dim=DIM), "synthetic", compression=spec,
                         codec=given) as writer:
            for i, (docno, vectors, ids, _) in enumerate(docs):
                if i == 2:
                    codes, packed = codec.codec.compress(vectors.astype(np.float32))
                    rows = np.flatnonzero(codec.codec.exact_mask(vectors.astype(np.float32), codes, packed))
                    writer.add_coded(docno, codes, packed, ids, exact=(rows, vectors[rows]))
                else:
                    writer.add(docno, vectors, ids)
        made[name] = {p.name: p.read_bytes() for p in (tmp_path / name).iterdir()
                      if p.name not in ("codec.json", "pt_meta.json")}
    assert made["held"] == made["alone"] and "exact_vectors.f16" in made["held"]


@pytest.mark.parametrize("split", [[1] * 40, [40], [7, 0, 13, 20], [39, 1]])
def test_sample_rows_draws_the_spills_rows_however_the_corpus_is_split(split):
    corpus_rows = np.random.default_rng(4).normal(size=(40, DIM)).astype(np.float16)
    spec = CompressionSpec("residual1", num_centroids=3, sample=11, seed=9)
    bounds = np.concatenate([[0], np.cumsum(split)])
    parts = (corpus_rows[bounds[i]:bounds[i + 1]] for i in range(len(split)))
    rows = np.sort(np.random.default_rng(9).choice(40, size=11, replace=False))  # compress_spill's draw, by hand
    got = sample_rows(parts, 40, spec)
    assert got.dtype == np.float16 and np.array_equal(got, corpus_rows[rows])  # (fp16 vectors: an fp16 sample)


def test_sample_rows_refuses_a_corpus_of_another_size():
    spec = CompressionSpec("residual1", num_centroids=3, sample=11)
    with pytest.raises(ValueError, match="hold 45 token vectors, not the 40"):
        sample_rows([np.zeros((40, DIM)), np.zeros((5, DIM))], 40, spec)


def test_a_scratch_folder_holds_the_sample_in_a_file_while_the_codec_trains(tmp_path, monkeypatch):
    """With ``scratch`` the sample is a memory-mapped file there (not the process's memory), the codec the same as
    from memory; the file is gone after training, and after a failed training."""
    docs = corpus([int(n) for n in np.random.default_rng(5).integers(1, 60, 200)], seed=5)
    total = sum(len(v) for _, v, _, _ in docs)
    in_memory = TrainedCodec.train((v for _, v, _, _ in docs), total, SPEC)
    seen = []
    train_codec = CompressionSpec.train_codec

    def watch(spec, sample, num_centroids):
        seen.append((type(sample), sample.dtype, (tmp_path / compressed.SAMPLE_FILE).stat().st_size))
        return train_codec(spec, sample, num_centroids)

    monkeypatch.setattr(CompressionSpec, "train_codec", watch)
    on_disk = TrainedCodec.train((v for _, v, _, _ in docs), total, SPEC, scratch=tmp_path)
    assert seen == [(np.memmap, np.float16, in_memory.sample * DIM * 2)]
    assert on_disk.sample == in_memory.sample
    for name in ("centroids", "cutoffs", "weights"):
        np.testing.assert_array_equal(getattr(on_disk.codec, name), getattr(in_memory.codec, name))
    assert on_disk.codec.exact_above == in_memory.codec.exact_above
    assert list(tmp_path.iterdir()) == []

    monkeypatch.setattr(CompressionSpec, "train_codec", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        TrainedCodec.train((v for _, v, _, _ in docs), total, SPEC, scratch=tmp_path)
    assert list(tmp_path.iterdir()) == []
