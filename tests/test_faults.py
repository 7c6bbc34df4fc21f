"""Damaged artifacts on disk: every file of a ColBERT index, a TF-IDF index and a checkpoint is truncated,
extended, overwritten (flipped bytes, zeros), deleted or (JSON) replaced by garbage, and the damage must be
refused with an error naming that file: on open when it is cheap to see (sizes, small files, structure), and by
``verify()`` always. Also the specific cases that used to pass silently (NaN vectors, edited offsets, a shortened
lexicon, truncated passages, a NaN projection)."""
import json
import shutil
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert import storage
from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
from pyterrier_fandom_colbert.lexical.tfidf import TfidfIndex
from pyterrier_fandom_colbert.model import network
from pyterrier_fandom_colbert.storage import DamagedFileError, MissingFileError

DIM = 8
NUM_DOCS = 24


# -- corruptions ------------------------------------------------------------------------------------------------

def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def append(path):
    with open(path, "ab") as f:
        f.write(b"\x00junk")


def flip(path):
    """XOR 0xFF over a few bytes in the middle (the size stays)."""
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    for i in range(mid, min(mid + 4, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def zero(path):
    path.write_bytes(bytes(path.stat().st_size))


def delete(path):
    path.unlink()


def garbage(path):
    path.write_text("{not json", encoding="utf-8")


SIZE_CHANGING = {"truncate", "append", "delete", "garbage"}
CORRUPTIONS = {"truncate": truncate, "append": append, "flip": flip, "zero": zero, "delete": delete}
JSON_CORRUPTIONS = {**CORRUPTIONS, "garbage": garbage}


def cases(files, cheap):
    """(file, corruption name, detected on open?) for every file: size changes and cheap files on open."""
    out = []
    for name in files:
        for how in (JSON_CORRUPTIONS if name.endswith(".json") else CORRUPTIONS):
            out.append(pytest.param(name, how, how in SIZE_CHANGING or name in cheap, id=f"{name}-{how}"))
    return out


def assert_names(err, folder, name):
    """The error names the damaged file (its path inside ``folder``)."""
    assert str(folder / name) in str(err), str(err)


# -- a ColBERT index of synthetic vectors -------------------------------------------------------------------------

def synthetic_docs(seed=0):
    rng = np.random.default_rng(seed)
    for i in range(NUM_DOCS):
        n = int(rng.integers(2, 7))
        vecs = rng.standard_normal((n, DIM)).astype(np.float32)
        yield f"d{i:02d}", vecs / np.linalg.norm(vecs, axis=1, keepdims=True), rng.integers(1000, 2000, n)


@pytest.fixture(scope="module")
def pristine_colbert_index(tmp_path_factory):
    path = tmp_path_factory.mktemp("colbert") / "idx"
    with ColBERTIndex(path).writer(pfc.ColBERTConfig(dim=DIM), fingerprint="synthetic") as w:
        for docno, vecs, ids in synthetic_docs():
            w.add(docno, vecs, ids)
    return path


@pytest.fixture
def colbert_index(pristine_colbert_index, tmp_path):
    path = tmp_path / "idx"
    shutil.copytree(pristine_colbert_index, path)
    return path


def queries(n=3, seed=1):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"qid": [f"q{i}" for i in range(n)],
                         "query_embs": [rng.standard_normal((4, DIM)).astype(np.float32) for _ in range(n)]})


def use_colbert_index(path, unchecked=False):
    """Open the index as a user would: a retriever and a re-ranker over every document."""
    index = ColBERTIndex(path, unchecked=unchecked)
    found = index.retriever(num_results=NUM_DOCS)(queries())
    frame = queries(1).merge(pd.DataFrame({"docno": [f"d{i:02d}" for i in range(NUM_DOCS)]}), how="cross")
    reranked = index.scorer()(frame)
    return found, reranked


COLBERT_FILES = ["pt_meta.json", "colbert_config.json", "vectors.f16", "token_ids.i32", "offsets.i64",
                 "docnos.npids"]
COLBERT_CHEAP = {"pt_meta.json", "colbert_config.json", "offsets.i64", "docnos.npids"}


def test_a_fresh_colbert_index_records_and_passes_its_manifest(colbert_index):
    meta = json.loads((colbert_index / "pt_meta.json").read_text())
    assert sorted(meta["files"]) == sorted(COLBERT_FILES[1:])
    for name, entry in meta["files"].items():  # streamed files were hashed as written: same as reading back
        assert entry == storage.manifest_entry(colbert_index / name)
    report = ColBERTIndex(colbert_index).verify()
    assert report["files"] == sorted(COLBERT_FILES[1:])
    assert report["bytes"] == sum((colbert_index / n).stat().st_size for n in COLBERT_FILES[1:])
    found, reranked = use_colbert_index(colbert_index)
    assert np.isfinite(found["score"]).all() and len(reranked) == NUM_DOCS


@pytest.mark.parametrize("name, how, on_open", cases(COLBERT_FILES, COLBERT_CHEAP))
def test_colbert_index_file_damage_is_named(colbert_index, name, how, on_open):
    JSON_CORRUPTIONS[how](colbert_index / name)
    if name == "pt_meta.json" and how == "delete":  # no metadata: not an index at all
        with pytest.raises(FileNotFoundError, match=r"pt_meta\.json not found"):
            ColBERTIndex(colbert_index).verify()
        return
    with pytest.raises((DamagedFileError, MissingFileError)) as err:
        ColBERTIndex(colbert_index).verify()
    assert_names(err.value, colbert_index, name)
    if on_open:
        with pytest.raises((DamagedFileError, MissingFileError)) as err:
            use_colbert_index(colbert_index)
        assert_names(err.value, colbert_index, name)


@pytest.mark.parametrize("fill", ["nan", "zeros", "noise"])
def test_vectors_overwritten_at_the_same_size(colbert_index, fill):
    """0xFF bytes are NaN in float16; zeros and noise are finite but wrong: verify() names vectors.f16 for all
    three, and so does the first read of the vectors (their block checksums). Opened unchecked (no manifest),
    retrieval still never returns a NaN score (it refuses, naming the file and documents)."""
    path = colbert_index / "vectors.f16"
    size = path.stat().st_size
    data = {"nan": b"\xff" * size, "zeros": bytes(size),
            "noise": np.random.default_rng(3).standard_normal(size // 2).astype(np.float16).tobytes()}[fill]
    path.write_bytes(data)
    with pytest.raises(DamagedFileError) as err:
        ColBERTIndex(colbert_index).verify()
    assert err.value.path == path
    if fill == "nan":
        assert "NaN or inf" in str(err.value) and "'d00'" in str(err.value)
    with pytest.raises(DamagedFileError, match="do not match the xxh3_64 checksum") as err:
        use_colbert_index(colbert_index)
    assert err.value.path == path and "'d00'" in str(err.value)
    without_manifest(colbert_index)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (opened unchecked)
        try:
            found, reranked = use_colbert_index(colbert_index, unchecked=True)
        except DamagedFileError as refused:
            assert fill == "nan" and refused.path == path and "score NaN or inf" in str(refused)
        else:
            assert fill != "nan"
            assert np.isfinite(found["score"]).all() and np.isfinite(reranked["score"]).all()


def test_one_nan_document_is_named_by_the_scorer_and_verify(colbert_index):
    index = ColBERTIndex(colbert_index)
    start = int(index.offsets[5])
    with open(colbert_index / "vectors.f16", "r+b") as f:  # one value of document d05 becomes NaN
        f.seek(start * DIM * 2)
        f.write(b"\xff\xff")
    frame = queries(1).assign(docno="d05")
    with pytest.raises(DamagedFileError, match=r"vectors\.f16 is damaged: bytes 0-\d+ \(block 0 of 1\)"):
        ColBERTIndex(colbert_index).scorer()(frame)  # its block's checksum, before any score
    with pytest.raises(DamagedFileError, match=r"1 token vectors with NaN or inf values \(documents \['d05'\]\)"):
        ColBERTIndex(colbert_index).verify()
    without_manifest(colbert_index)  # unchecked, the scores are the last line of defence
    with pytest.warns(UserWarning, match="opened unchecked"):
        unchecked = ColBERTIndex(colbert_index, unchecked=True)
        with pytest.raises(DamagedFileError, match=r"\['d05'\] score NaN or inf.*vectors\.f16"):
            unchecked.scorer()(frame)
    assert unchecked.scorer()(queries(1).assign(docno="d04"))["score"].notna().all()


def test_non_finite_query_vectors_are_refused_by_qid(colbert_index):
    frame = queries(2)
    frame.at[1, "query_embs"] = np.full((4, DIM), np.nan, dtype=np.float32)
    with pytest.raises(ValueError, match="qid 'q1' hold NaN or inf"):
        ColBERTIndex(colbert_index).retriever()(frame)
    with pytest.raises(ValueError, match="qid 'q1' hold NaN or inf"):
        ColBERTIndex(colbert_index).scorer()(frame.assign(docno="d01"))


def edit_offsets(path, edit):
    offsets = np.fromfile(path / "offsets.i64", dtype=np.int64)
    edit(offsets)
    offsets.tofile(path / "offsets.i64")


def without_manifest(path):
    """The index as an older version wrote it: no "files" in pt_meta.json."""
    meta = json.loads((path / "pt_meta.json").read_text())
    del meta["files"], meta[storage.SEAL_KEY]  # (nor the checksum of its own content)
    (path / "pt_meta.json").write_text(json.dumps(meta))


def shift_inner(offsets):
    offsets[1:-1] += 1  # still increasing, still from 0 to num_tokens: every document boundary moves


def swap_two(offsets):
    offsets[3], offsets[4] = offsets[4], offsets[3]


def last_too_small(offsets):
    offsets[-1] -= 1


@pytest.mark.parametrize("legacy", [False, True], ids=["manifest", "no-manifest"])
@pytest.mark.parametrize("edit", [shift_inner, swap_two, last_too_small])
def test_edited_offsets_are_refused_on_open(colbert_index, edit, legacy):
    if legacy and edit is shift_inner:
        pytest.skip("a consistent edit is seen only through the checksum")
    edit_offsets(colbert_index, edit)
    if legacy:
        without_manifest(colbert_index)
    with pytest.raises(DamagedFileError) as err, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (opened unchecked)
        ColBERTIndex(colbert_index, unchecked=legacy).retriever()
    assert err.value.path == colbert_index / "offsets.i64"
    if edit is swap_two:
        assert "strictly increase" in str(err.value) or "checksum" in str(err.value)


def test_opening_reads_neither_vectors_nor_token_ids(colbert_index, monkeypatch):
    """The fast path: only small files are hashed on open; verify() hashes them all."""
    hashed = []
    real = storage.manifests.file_checksum
    monkeypatch.setattr(storage.manifests, "file_checksum",
                        lambda path, *a: hashed.append(path.name) or real(path, *a))
    whole = storage.integrity.ArtifactIntegrity._checksum_problem  # (opened files are hashed through their pins)
    monkeypatch.setattr(storage.integrity.ArtifactIntegrity, "_checksum_problem",
                        lambda self, name: hashed.append(name) or whole(self, name))
    index = ColBERTIndex(colbert_index)
    index.retriever()
    index.docnos  # noqa: B018
    assert sorted(hashed) == ["colbert_config.json", "docnos.npids", "offsets.i64"]
    hashed.clear()
    index.verify()
    assert sorted(hashed) == sorted(COLBERT_FILES[1:])


def test_an_index_without_manifest_is_refused_unless_opened_unchecked(colbert_index):
    expected, _ = use_colbert_index(colbert_index)
    without_manifest(colbert_index)
    for attempt in (use_colbert_index, lambda path: ColBERTIndex(path).verify()):
        with pytest.raises(storage.NoManifestError, match=r"records no file manifest.*unchecked=True") as err:
            attempt(colbert_index)
        assert err.value.path == colbert_index / "pt_meta.json"
    with pytest.warns(UserWarning, match="opened unchecked: .* records no checksums"):
        found, _ = use_colbert_index(colbert_index, unchecked=True)
    pd.testing.assert_frame_equal(found, expected)
    with pytest.warns(UserWarning, match="records no checksums"):
        assert ColBERTIndex(colbert_index, unchecked=True).verify()["files"] == []


# -- a TF-IDF index with stored passages ------------------------------------------------------------------------

WORDS = ["castle", "dragon", "smith", "river", "queen", "bard", "library", "moon", "fleet", "giant", "crown", "star",
         "merchant", "song", "city"]


@pytest.fixture(scope="module")
def pristine_tfidf_index(tmp_path_factory):
    rng = np.random.default_rng(0)
    docs = [{"docno": f"t{i:02d}", "text": " ".join(rng.choice(WORDS, 6)) + f" café number{i}"} for i in range(20)]
    path = tmp_path_factory.mktemp("tfidf") / "idx"
    TfidfIndex(path).indexer(store_text=True).index(docs)
    return path


@pytest.fixture
def tfidf_index(pristine_tfidf_index, tmp_path):
    path = tmp_path / "idx"
    shutil.copytree(pristine_tfidf_index, path)
    return path


TOPICS = pd.DataFrame({"qid": ["1", "2"], "query": ["dragon castle", "café queen song"]})


def use_tfidf_index(path):
    return TfidfIndex(path).retriever(text=True)(TOPICS)


TFIDF_FILES = ["pt_meta.json", "tf.npz", "doclens.npy", "lexicon.txt", "docnos.npids", "text.bin",
               "text_offsets.npy"]
TFIDF_CHEAP = {"pt_meta.json", "lexicon.txt", "doclens.npy", "docnos.npids", "text_offsets.npy"}


def test_a_fresh_tfidf_index_records_and_passes_its_manifest(tfidf_index):
    meta = json.loads((tfidf_index / "pt_meta.json").read_text())
    assert sorted(meta["files"]) == sorted(TFIDF_FILES[1:])
    assert meta["files"]["text.bin"] == storage.manifest_entry(tfidf_index / "text.bin")
    assert TfidfIndex(tfidf_index).verify()["files"] == sorted(TFIDF_FILES[1:])
    assert (use_tfidf_index(tfidf_index)["text"].str.len() > 0).all()


@pytest.mark.parametrize("name, how, on_open", cases(TFIDF_FILES, TFIDF_CHEAP))
def test_tfidf_index_file_damage_is_named(tfidf_index, name, how, on_open):
    JSON_CORRUPTIONS[how](tfidf_index / name)
    if name == "pt_meta.json" and how == "delete":
        with pytest.raises(FileNotFoundError, match=r"pt_meta\.json not found"):
            TfidfIndex(tfidf_index).verify()
        return
    with pytest.raises((DamagedFileError, MissingFileError)) as err:
        TfidfIndex(tfidf_index).verify()
    assert_names(err.value, tfidf_index, name)
    if on_open:
        with pytest.raises((DamagedFileError, MissingFileError)) as err:
            use_tfidf_index(tfidf_index)
        assert_names(err.value, tfidf_index, name)


def delete_line(path, which):
    lines = path.read_text(encoding="utf-8").split("\n")
    del lines[which]
    path.write_text("\n".join(lines), encoding="utf-8")


def cut_line(path, which):
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[which] = lines[which][:-1]
    path.write_text("\n".join(lines), encoding="utf-8")


@pytest.mark.parametrize("legacy", [False, True], ids=["manifest", "no-manifest"])
@pytest.mark.parametrize("edit", ["delete-line", "truncate-line", "cut-file"])
def test_damaged_lexicon_is_refused_on_open(tfidf_index, edit, legacy):
    lexicon = tfidf_index / "lexicon.txt"
    if edit == "delete-line":
        delete_line(lexicon, 2)
    elif edit == "truncate-line":
        cut_line(lexicon, 2)
    else:
        lexicon.write_bytes(lexicon.read_bytes()[:-3])
    if legacy:
        if edit == "truncate-line":
            pytest.skip("as many distinct terms, one shorter: only the manifest's size and checksum see it")
        without_manifest(tfidf_index)
    with pytest.raises(DamagedFileError) as err, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (opened unchecked)
        TfidfIndex(tfidf_index, unchecked=legacy).retriever()
    assert err.value.path == lexicon


@pytest.mark.parametrize("legacy", [False, True], ids=["manifest", "no-manifest"])
def test_truncated_passages_are_refused_on_open(tfidf_index, legacy):
    text = tfidf_index / "text.bin"
    text.write_bytes(text.read_bytes()[:-40])
    if legacy:
        without_manifest(tfidf_index)
    with pytest.raises(DamagedFileError) as err, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (opened unchecked)
        TfidfIndex(tfidf_index, unchecked=legacy).retriever(text=True)
    assert err.value.path == text and ("truncated" in str(err.value))


def test_a_tfidf_index_without_manifest_is_refused_unless_opened_unchecked(tfidf_index):
    expected = use_tfidf_index(tfidf_index)
    without_manifest(tfidf_index)
    with pytest.raises(storage.NoManifestError, match="unchecked=True") as err:
        use_tfidf_index(tfidf_index)
    assert err.value.path == tfidf_index / "pt_meta.json"
    with pytest.warns(UserWarning, match="opened unchecked"):
        found = TfidfIndex(tfidf_index, unchecked=True).retriever(text=True)(TOPICS)
    pd.testing.assert_frame_equal(found, expected)
    with pytest.warns(UserWarning, match="records no checksums"):
        TfidfIndex(tfidf_index, unchecked=True).verify()


# -- a checkpoint ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pristine_checkpoint(tiny_bert_dir, tmp_path_factory):
    colbert = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(dim=8, doc_maxlen=32,
                                                                                  query_maxlen=8), device="cpu")
    return colbert.save_pretrained(tmp_path_factory.mktemp("ckpt") / "ckpt")


@pytest.fixture
def checkpoint(pristine_checkpoint, tmp_path):
    path = tmp_path / "ckpt"
    shutil.copytree(pristine_checkpoint, path)
    return path


CHECKPOINT_FILES = ["manifest.json", "colbert_config.json", "projection.safetensors", "backbone/config.json",
                    "backbone/model.safetensors", "backbone/tokenizer.json", "backbone/tokenizer_config.json"]
CHECKPOINT_CHEAP = set(CHECKPOINT_FILES) - {"backbone/model.safetensors"}


def test_a_saved_checkpoint_records_every_file(checkpoint):
    files = json.loads((checkpoint / "manifest.json").read_text())["files"]
    assert sorted(files) == storage.folder_files(checkpoint, exclude=["manifest.json"])
    assert set(CHECKPOINT_FILES) - {"manifest.json"} <= set(files)
    assert pfc.ColBERT.verify(checkpoint)["files"] == sorted(files)


@pytest.mark.parametrize("name, how, on_open", cases(CHECKPOINT_FILES, CHECKPOINT_CHEAP))
def test_checkpoint_file_damage_is_named(checkpoint, name, how, on_open):
    JSON_CORRUPTIONS[how](checkpoint / name)
    if name == "colbert_config.json" and how == "delete":  # no config: not a checkpoint
        with pytest.raises(MissingFileError, match=r"colbert_config\.json not found"):
            network.verify_checkpoint(checkpoint)
        return
    with pytest.raises((DamagedFileError, MissingFileError)) as err:  # (no manifest.json: NoManifestError)
        network.verify_checkpoint(checkpoint)
    assert_names(err.value, checkpoint, name)
    if on_open:
        with pytest.raises((DamagedFileError, MissingFileError)) as err:
            network.load(checkpoint)
        assert_names(err.value, checkpoint, name)


def write_projection(folder, change):
    from safetensors.torch import load_file, save_file

    state = load_file(str(folder / "projection.safetensors"))
    change(state["weight"])
    save_file(state, str(folder / "projection.safetensors"))


@pytest.mark.parametrize("legacy", [False, True], ids=["manifest", "no-manifest"])
def test_one_nan_in_the_projection_is_refused_at_load(checkpoint, legacy):
    write_projection(checkpoint, lambda w: w.view(-1).__setitem__(7, float("nan")))
    if legacy:
        (checkpoint / "manifest.json").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (opened unchecked)
        with pytest.raises(DamagedFileError) as err:
            pfc.ColBERT.from_pretrained(checkpoint, unchecked=legacy)
        assert err.value.path == checkpoint / "projection.safetensors"
        if legacy:
            assert "tensor 'weight'" in str(err.value) and "1 NaN/inf value(s)" in str(err.value)
        with pytest.raises(DamagedFileError, match=r"projection\.safetensors"):
            network.verify_checkpoint(checkpoint, unchecked=legacy)


def test_a_model_with_nan_weights_is_not_saved(pristine_checkpoint, tmp_path):
    colbert = pfc.ColBERT.from_pretrained(pristine_checkpoint)
    with torch.no_grad():
        colbert.model.projection.weight[0, 0] = float("inf")
    with pytest.raises(ValueError, match=r"tensor 'projection\.weight' .* holds 1 NaN/inf"):
        colbert.save_pretrained(tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("legacy", [False, True], ids=["manifest", "no-manifest"])
@pytest.mark.parametrize("missing, message", [
    (["backbone/config.json"], r"backbone/config\.json is missing"),
    (["backbone/tokenizer.json"], r"backbone/tokenizer\.json is missing: .* has no tokenizer"),
])
def test_missing_backbone_files_are_named(checkpoint, missing, message, legacy):
    for name in missing:
        (checkpoint / name).unlink()
    if legacy:
        (checkpoint / "manifest.json").unlink()
    with pytest.raises(MissingFileError, match=message), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (opened unchecked)
        pfc.ColBERT.from_pretrained(checkpoint, unchecked=legacy)


# -- FAISS caches -------------------------------------------------------------------------------------------------

ANN = {"kind": "ivf", "nlist": 4}


@pytest.fixture(scope="module")
def pristine_ann_index(tmp_path_factory):
    """An index of 300 synthetic documents (~1,200 vectors) with a cached IVF index."""
    rng = np.random.default_rng(5)
    path = tmp_path_factory.mktemp("ann") / "idx"
    with ColBERTIndex(path).writer(pfc.ColBERTConfig(dim=DIM), fingerprint="synthetic") as w:
        for i in range(300):
            vecs = rng.standard_normal((int(rng.integers(2, 7)), DIM)).astype(np.float32)
            w.add(f"a{i:03d}", vecs, np.arange(len(vecs)))
    ColBERTIndex(path).ann(pfc.FaissSpec(ANN["kind"], nlist=ANN["nlist"]))
    return path


@pytest.fixture
def ann_index(pristine_ann_index, tmp_path):
    path = tmp_path / "idx"
    shutil.copytree(pristine_ann_index, path)
    return path


@pytest.fixture(scope="module")
def ann_expected(pristine_ann_index):
    return ann_results(pristine_ann_index)


def ann_results(path):
    spec = pfc.FaissSpec(ANN["kind"], nlist=ANN["nlist"])
    return ColBERTIndex(path).retriever(num_results=10, faiss=spec, nprobe=2)(queries(3))


def cache_stem(path):
    spec = pfc.FaissSpec(ANN["kind"], nlist=ANN["nlist"]).resolve(ColBERTIndex(path).meta.num_tokens, DIM)
    return spec.file_stem()


def test_the_faiss_cache_records_its_file_and_the_vectors_it_was_built_from(ann_index):
    stem = cache_stem(ann_index)
    params = json.loads((ann_index / "faiss" / f"{stem}.json").read_text())
    manifest = json.loads((ann_index / "pt_meta.json").read_text())["files"]
    assert params["vectors"] == manifest["vectors.f16"]
    assert params["file"] == storage.manifest_entry(ann_index / "faiss" / f"{stem}.faiss")
    ColBERTIndex(ann_index).verify()


@pytest.mark.parametrize("suffix", [".faiss", ".json"])
@pytest.mark.parametrize("how", list(JSON_CORRUPTIONS))
def test_a_damaged_faiss_cache_is_named_by_verify_and_rebuilt_on_use(ann_index, ann_expected, suffix, how):
    if how == "garbage" and suffix == ".faiss":
        pytest.skip("JSON garbage applies to the .json file")
    name = f"faiss/{cache_stem(ann_index)}{suffix}"
    JSON_CORRUPTIONS[how](ann_index / name)
    with pytest.raises(DamagedFileError, match="FAISS cache") as err:
        ColBERTIndex(ann_index).verify()
    assert str(ann_index / "faiss") in str(err.value) and err.value.path.parent == ann_index / "faiss"
    with pytest.warns(UserWarning, match="rebuilding the FAISS cache") as warned:
        found = ann_results(ann_index)
    assert "faiss/" in str(warned[0].message)
    pd.testing.assert_frame_equal(found, ann_expected)  # the same seed and vectors: the same index again
    ColBERTIndex(ann_index).verify()


def test_a_stale_faiss_cache_is_rebuilt_or_refused_when_read_only(ann_index, pristine_colbert_index, tmp_path,
                                                                  monkeypatch):
    """A cache copied from another index (other vectors of the same size) is never used."""
    other = tmp_path / "other"
    shutil.copytree(ann_index, other)
    vectors = other / "vectors.f16"
    data = np.fromfile(vectors, dtype=np.float16)
    data[::2] = -data[::2]  # other vectors, same size
    data.tofile(vectors)
    meta = json.loads((other / "pt_meta.json").read_text())
    meta["files"]["vectors.f16"] = storage.manifest_entry(vectors)  # a consistent index, with the old cache
    (other / "pt_meta.json").write_text(json.dumps(storage.sealed(meta)))
    stale = other / "faiss" / f"{cache_stem(other)}.faiss"
    with pytest.raises(DamagedFileError, match="is stale"):
        ColBERTIndex(other).verify()
    from pyterrier_fandom_colbert.index.ann import cache

    monkeypatch.setattr(cache, "_writable", lambda folder: False)
    with pytest.raises(DamagedFileError, match=r"is stale.*not writable") as err:
        ann_results(other)
    assert err.value.path == stale
    monkeypatch.undo()
    with pytest.warns(UserWarning, match="is stale"):
        rebuilt = ann_results(other)
    fresh = tmp_path / "fresh"
    shutil.copytree(other, fresh)
    shutil.rmtree(fresh / "faiss")
    pd.testing.assert_frame_equal(rebuilt, ann_results(fresh))
    ColBERTIndex(other).verify()


@pytest.mark.slow
def test_three_processes_on_a_cold_cache_build_it_once(ann_index, tmp_path, monkeypatch):
    import importlib
    import multiprocessing
    from pathlib import Path

    shutil.rmtree(ann_index / "faiss")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))  # spawned processes import the worker
    worker = importlib.import_module("faults_worker")
    log = tmp_path / "builds.log"
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(3)
        with context.Pool(3) as pool:
            results = pool.starmap(worker.build_ann, [(ann_index, ANN["kind"], ANN["nlist"], log, barrier)] * 3)
    assert len(log.read_text().split()) == 1  # built once; the other two waited and read the cache
    assert results[0] == results[1] == results[2]
    stem = cache_stem(ann_index)
    assert sorted(p.name for p in (ann_index / "faiss").iterdir()) == [f"{stem}.faiss", f"{stem}.json",
                                                                       f"{stem}.lock"]
    ColBERTIndex(ann_index).verify()
