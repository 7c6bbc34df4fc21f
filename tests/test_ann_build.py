"""The retriever's default neighbour search and building neighbour indexes ahead of time: ``index.build_ann``,
``indexer(ann=...)``, the ``build-ann`` command, and the error for a folder that cannot be written."""
import numpy as np
import pandas as pd
import pytest
import torch

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.app.cli import main as pfc_cli
from pyterrier_fandom_colbert.index import ann
from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
from pyterrier_fandom_colbert.index.build_ann import main as index_cli
from pyterrier_fandom_colbert.index.fp16 import search as retrieval

DIM = 16
PASSAGES = ["The castle of Vel Amara was built after the flood.", "Old Orrin the smith forged twelve blades.",
            "The silver dragon guards a crown beneath the mountain.", "River folk trade spices along the coast."]


@pytest.fixture()
def index(tmp_path):
    """100 synthetic documents of 20 clustered unit vectors (2,000 tokens)."""
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((40, DIM))
    with ColBERTIndex(tmp_path / "idx").writer(pfc.ColBERTConfig(dim=DIM), fingerprint="synthetic") as writer:
        for d in range(100):
            v = centres[rng.integers(0, 40, 20)] + 0.3 * rng.standard_normal((20, DIM))
            writer.add(f"d{d}", v / np.linalg.norm(v, axis=1, keepdims=True), np.arange(20))
    return ColBERTIndex(tmp_path / "idx")


def queries(index, n=5):
    """Query vectors near a few stored tokens, as the query encoder's column holds them."""
    rng = np.random.default_rng(4)
    embs = [np.asarray(index.vectors[rng.integers(0, index.meta.num_tokens, 6)], np.float32) + 0.05 for _ in range(n)]
    return pd.DataFrame({"qid": [f"q{i}" for i in range(n)], "query_embs": embs})


def test_the_default_is_exact_on_small_indexes_and_the_chosen_ann_above(index, monkeypatch):
    small = index.retriever(num_results=10)
    assert small.spec == ann.FaissSpec("exact") and small.nprobe is None and small.refine == 1
    assert "faiss='exact'" in repr(small)
    assert index.build_ann() is None and not (index.path / "faiss").exists()  # exact: nothing to build
    with pytest.raises(ValueError, match=r"nprobe=4 tunes an approximate search.*exact search"):
        index.retriever(nprobe=4)
    monkeypatch.setattr(retrieval, "EXACT_BELOW_TOKENS", 1000)  # this index now counts as large
    large = index.retriever(num_results=10)
    spec, nprobe, refine = retrieval.default_search(index.meta.num_tokens)
    assert (large.spec, large.nprobe, large.refine) == (spec, nprobe, refine)
    assert spec.kind == retrieval.DEFAULT_ANN and spec.kind != "exact"
    assert large == index.retriever(num_results=10, faiss=retrieval.DEFAULT_ANN, nprobe=nprobe, refine=refine)
    assert index.retriever(num_results=10, nprobe=2).nprobe == 2  # the default kind, tuned


def test_build_ann_writes_the_index_before_any_query(index, monkeypatch):
    target = index.build_ann("ivfpq", verbose=False)
    spec = ann.FaissSpec("ivfpq").resolve(index.meta.num_tokens, DIM)
    assert target == ann.cache_file(index.path, spec) and target.exists()
    assert target.with_suffix(".json").exists()
    # later handles and queries read it: building again would fail
    monkeypatch.setattr(type(spec.ann_kind), "build", lambda *a, **k: pytest.fail("rebuilt despite build_ann"))
    assert ColBERTIndex(index.path).build_ann("ivfpq") == target
    res = ColBERTIndex(index.path).retriever(num_results=5, faiss="ivfpq")(queries(index))
    assert len(res) == 25


def test_a_folder_that_cannot_be_written_says_how_to_build_the_index(index, monkeypatch):
    import tempfile

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    monkeypatch.setattr(type(ann.KINDS["ivf"]), "build", lambda *a, **k: pytest.fail("trained before the check"))
    retriever = index.retriever(num_results=5, faiss="ivf")
    with pytest.raises(PermissionError, match=r"no 'ivf' neighbour index at .*cannot be written .*"
                                              r"build_ann\(faiss='ivf'\).*build-ann .* --faiss ivf.*faiss='exact'"):
        retriever(queries(index))
    # exact search needs nothing written, and an index built beforehand is only read
    assert len(index.retriever(num_results=5, faiss="exact")(queries(index))) == 25
    monkeypatch.undo()
    index.build_ann("ivf")
    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    assert len(ColBERTIndex(index.path).retriever(num_results=5, faiss="ivf")(queries(index))) == 25


@pytest.mark.parametrize("cli", ["pfc", "python -m"])
def test_the_build_ann_command(index, capsys, cli):
    """``pfc build-ann`` and its older name ``python -m pyterrier_fandom_colbert.index build-ann`` do the same."""
    run = pfc_cli if cli == "pfc" else index_cli
    assert run(["build-ann", str(index.path), "--faiss", "ivf", "--nlist", "8", "--quiet"]) == 0
    spec = ann.FaissSpec("ivf", nlist=8).resolve(index.meta.num_tokens, DIM)
    target = ann.cache_file(index.path, spec)
    assert target.exists() and str(target) in capsys.readouterr().out
    assert target.stat().st_size > 0 and ann.cache_file(index.path, spec) == target
    assert run(["build-ann", str(index.path), "--quiet"]) == 0  # the default here is exact search
    assert "nothing written" in capsys.readouterr().out
    assert run(["build-ann", str(index.path / "missing")]) == 2
    assert "no ColBERT index at" in capsys.readouterr().err
    assert run(["build-ann", str(index.path), "--faiss", "hnsw"]) == 2
    assert "faiss='hnsw' is not supported" in capsys.readouterr().err
    if cli == "pfc":  # options of a kind without the kind: an error naming them
        assert run(["build-ann", str(index.path), "--nlist", "8"]) == 2
        assert "--nlist need --faiss KIND" in capsys.readouterr().err
    else:
        with pytest.raises(SystemExit):
            run(["build-ann", str(index.path), "--nlist", "8"])
        assert "--nlist need --faiss KIND" in capsys.readouterr().err


def test_the_indexer_builds_the_asked_neighbour_index(tiny_bert_dir, tmp_path, monkeypatch):
    torch.set_num_threads(2)
    colbert = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(dim=DIM, doc_maxlen=32),
                                          device="cpu")
    docs = [{"docno": f"d{i}", "text": t} for i, t in enumerate(PASSAGES * 3)]
    index = ColBERTIndex(tmp_path / "a").indexer(colbert, ann="ivf").index(docs)
    spec = ann.FaissSpec("ivf").resolve(index.meta.num_tokens, DIM)
    assert ann.cache_file(index.path, spec).exists()
    plain = ColBERTIndex(tmp_path / "b").indexer(colbert, ann=None).index(docs)
    assert not (plain.path / "faiss").exists()
    monkeypatch.setattr(retrieval, "EXACT_BELOW_TOKENS", 10)  # "default" builds what the default retriever uses
    default = ColBERTIndex(tmp_path / "c").indexer(colbert).index(docs)
    spec, _, _ = retrieval.default_search(default.meta.num_tokens)
    assert ann.cache_file(default.path, spec.resolve(default.meta.num_tokens, DIM)).exists()
    with pytest.raises(ValueError, match="faiss='hnsw' is not supported"):  # refused before any encoding
        ColBERTIndex(tmp_path / "d").indexer(colbert, ann="hnsw")
