"""Damage that keeps every file's size (zero-filled, bytes changed, a same-shape file copied from a sibling
artifact) in every artifact kind: the first read of the damaged data raises DamagedFileError naming the file,
and ``pfc verify`` reports it, never "intact". The artifacts are built once per module; each case damages a
copy."""
import json
import shutil

import numpy as np
import pandas as pd
import pytest

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.app.cli import main
from pyterrier_fandom_colbert.app.folder import build_folder
from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
from pyterrier_fandom_colbert.index.residual import compress as compressed
from pyterrier_fandom_colbert.lexical.tfidf import TfidfIndex
from pyterrier_fandom_colbert.sparse.index import SparseIndex
from pyterrier_fandom_colbert.storage import SEAL_KEY, DamagedFileError, NoManifestError

WORDS = ["castle", "dragon", "smith", "river", "queen", "bard", "library", "moon", "fleet", "giant", "crown", "star"]


def corpus(seed):
    """30 passages; every seed gives the same docnos and the same text lengths (so that files have one size)."""
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, 5 + i % 4)) for i in range(30)]
    return [{"docno": f"d{i:02d}", "text": t, "title": f"Page {i % 7}"} for i, t in enumerate(texts)]


def permuted(records):
    """The same docnos over the same texts in another order: every file of a TF-IDF index keeps its size."""
    order = np.random.default_rng(9).permutation(len(records))
    return [{**r, "text": records[j]["text"]} for r, j in zip(records, order)]


def toks(records):
    return [{"docno": r["docno"], "toks": {w: float(1 + r["text"].count(w)) for w in set(r["text"].split())}}
            for r in records]


@pytest.fixture(scope="module")
def built(tmp_path_factory, small_colbert):
    """kind -> (pristine folder, a same-shape sibling built from other content)."""
    root = tmp_path_factory.mktemp("matrix")
    out = {}
    spec = compressed.CompressionSpec("residual2", num_centroids=8, niter=4)
    for name, records in (("a", corpus(0)), ("b", corpus(1))):
        ColBERTIndex(root / name / "fp16").indexer(small_colbert, long_docs="truncate", ann=None).index(records)
        ColBERTIndex(root / name / "r2").indexer(small_colbert, long_docs="truncate",
                                                  compression=spec).index(records)
        SparseIndex(root / name / "splade").indexer().index(toks(records))
        build_folder(records, root / name / "pfc", colbert=small_colbert,
                     settings=pfc.app.folder.SearchSettings.of("fp16", faiss="flat"))
    TfidfIndex(root / "a" / "tfidf").indexer(store_text=True).index(corpus(0))
    TfidfIndex(root / "b" / "tfidf").indexer(store_text=True).index(permuted(corpus(0)))
    small_colbert.save_pretrained(root / "a" / "checkpoint")
    for kind in ("fp16", "r2", "splade", "pfc", "tfidf", "checkpoint"):
        out[kind] = (root / "a" / kind, root / "b" / kind)
    return out


# -- damage -----------------------------------------------------------------------------------------------------

def zero(path, sibling):
    path.write_bytes(bytes(path.stat().st_size))


def swap(path, sibling):
    assert sibling.stat().st_size == path.stat().st_size and sibling.read_bytes() != path.read_bytes()
    shutil.copyfile(sibling, path)


def three_bytes(path, sibling):
    data = bytearray(path.read_bytes())
    start = data.index(b"Page") + 5  # a title's digit and the two bytes after: still one JSON line
    data[start:start + 1] = b"9"
    data[start + 6:start + 8] = b"zz" if data[start + 6:start + 8] != b"zz" else b"yy"
    path.write_bytes(bytes(data))


def flip(path, sibling):
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 3):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path, sibling):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def swap_folder(path, sibling):
    shutil.rmtree(path)
    shutil.copytree(sibling, path)


# -- use: what a user does with each kind -----------------------------------------------------------------------

def query_frame(colbert, text="castle dragon river"):
    return colbert.query_encoder()(pd.DataFrame({"qid": ["1"], "query": [text]}))


def use_colbert(path, colbert, **options):
    index = ColBERTIndex(path)
    index.retriever(num_results=30, **options)(query_frame(colbert))


def use_residual(path, colbert):
    use_colbert(path, colbert, ncells=1)  # lists are read (not every document a candidate)


def use_tfidf(path, colbert):
    TfidfIndex(path).retriever(num_results=30, text=True)(pd.DataFrame({"qid": ["1"], "query": ["castle dragon"]}))


def use_splade(path, colbert):
    SparseIndex(path).retriever(num_results=30)(pd.DataFrame({"qid": ["1"], "query_toks": [{"castle": 1.0}]}))


def use_checkpoint(path, colbert):
    pfc.ColBERT.from_pretrained(path)


def use_pfc(path, colbert):
    from pyterrier_fandom_colbert.app.search import Searcher

    Searcher(path, colbert=colbert, warm=False).search("castle dragon", system="hybrid", k=30, explain=False)


USE = {"fp16": use_colbert, "r2": use_residual, "tfidf": use_tfidf, "splade": use_splade,
       "checkpoint": use_checkpoint, "pfc": use_pfc}

CASES = [
    ("fp16", "vectors.f16", zero), ("fp16", "vectors.f16", swap),
    ("r2", "codes.u16", zero), ("r2", "residuals.u8", zero), ("r2", "ivf_docs.i32", zero),
    ("r2", "codes.u16", swap), ("r2", "residuals.u8", swap), ("r2", "token_norms.f32", zero),
    ("r2", "token_norms.f32", swap),
    ("tfidf", "text.bin", zero), ("tfidf", "text.bin", swap), ("tfidf", "tf.npz", swap),
    ("splade", "lexicon.txt", zero), ("splade", "lexicon.txt", truncate), ("splade", "weights.npz", flip),
    ("checkpoint", "projection.safetensors", flip), ("checkpoint", "backbone/model.safetensors", flip),
    ("pfc", "passages.jsonl", three_bytes), ("pfc", "passages.jsonl", zero), ("pfc", "passages.offsets.npy", flip),
    ("pfc", "tfidf", swap_folder), ("pfc", "colbert/vectors.f16", zero), ("pfc", "tfidf/text.bin", zero),
]


@pytest.mark.parametrize("kind, name, damage", [pytest.param(*c, id=f"{c[0]}-{c[1]}-{c[2].__name__}")
                                                for c in CASES])
def test_damage_is_refused_when_read_and_reported_by_verify(built, small_colbert, tmp_path, capsys, kind, name,
                                                            damage):
    pristine, sibling = built[kind]
    path = tmp_path / kind
    shutil.copytree(pristine, path)
    USE[kind](path, small_colbert)  # the undamaged copy works
    damage(path / name, sibling / name)
    named = path / (name if damage is not swap_folder else "tfidf/pt_meta.json")
    with pytest.raises(DamagedFileError) as err:
        USE[kind](path, small_colbert)
    assert str(named) in str(err.value), str(err.value)
    capsys.readouterr()
    assert main(["verify", str(path), "--quiet"]) == 2
    out = capsys.readouterr()
    assert "intact" not in out.out and str(named) in out.err and "Traceback" not in out.err


def test_a_damaged_block_names_its_documents_and_untouched_blocks_are_not_read(tmp_path):
    """A 3-block vectors file: reading documents of the first block verifies that block only; the damaged last
    block is refused naming its documents (docnos) when they are scored."""
    dim, rows_per_doc = 8, 700
    path = tmp_path / "idx"
    rng = np.random.default_rng(0)
    with ColBERTIndex(path).writer(pfc.ColBERTConfig(dim=dim), fingerprint="synthetic") as w:
        for i in range(200):
            w.add(f"doc{i:03d}", rng.standard_normal((rows_per_doc, dim)).astype(np.float32), np.arange(rows_per_doc))
    entry = json.loads((path / "pt_meta.json").read_text())["files"]["vectors.f16"]
    assert len(entry["blocks"]["xxh3_64"]) == 3  # 200 * 700 rows * 16 bytes = 2.24 MB in 1 MiB blocks
    with open(path / "vectors.f16", "r+b") as f:  # zero 100 rows inside the last block
        f.seek(2_200_000)
        f.write(bytes(1600))
    index = ColBERTIndex(path)
    q = np.ones((2, dim), dtype=np.float32)
    frame = pd.DataFrame({"qid": ["q"], "query_embs": [q], "docno": ["doc000"]})
    first = index.scorer()(frame)
    assert len(first) == 1 and index.store.vector_blocks.done.tolist() == [True, False, False]
    damaged_doc = 2_200_000 // 16 // rows_per_doc  # document 196, in the block of rows 131072-139999
    with pytest.raises(DamagedFileError) as err:
        index.scorer()(frame.assign(docno=f"doc{damaged_doc:03d}"))
    first_doc = 131072 // rows_per_doc  # 187: the block holds documents 187-199
    assert err.value.path == path / "vectors.f16"
    assert "bytes 2097152-2239999" in str(err.value) and "token rows 131072-139999" in str(err.value)
    assert f"{200 - first_doc} document(s): ['doc{first_doc:03d}'" in str(err.value)


def test_entries_without_block_checksums_are_checked_whole_on_first_read(built, small_colbert, tmp_path):
    """A manifest written before block checksums (size and XXH3-128 only) still guards every read: the file is
    checked whole the first time it is read."""
    path = tmp_path / "fp16"
    shutil.copytree(built["fp16"][0], path)
    rewrite(path / "pt_meta.json", lambda meta: [entry.pop("blocks") for entry in meta["files"].values()])
    use_colbert(path, small_colbert)
    zero(path / "vectors.f16", None)
    with pytest.raises(DamagedFileError, match=r"vectors\.f16 is damaged: its content does not match the xxh3_128"):
        use_colbert(path, small_colbert)


@pytest.mark.parametrize("kind", ["splade", "pfc"])
def test_a_manifest_without_files_is_refused_unless_opened_unchecked(built, small_colbert, tmp_path, kind):
    path = tmp_path / kind
    shutil.copytree(built[kind][0], path)
    meta_file = path / ("pt_meta.json" if kind == "splade" else "manifest.json")
    meta = json.loads(meta_file.read_text())
    del meta["files"], meta[SEAL_KEY]  # as a version before manifests wrote it
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(NoManifestError, match="records no file manifest") as err:
        USE[kind](path, small_colbert)
    assert err.value.path == meta_file
    if kind == "splade":
        with pytest.warns(UserWarning, match="opened unchecked"):
            found = SparseIndex(path, unchecked=True).retriever(num_results=5)(
                pd.DataFrame({"qid": ["1"], "query_toks": [{"castle": 1.0}]}))
        assert len(found) == 5 and found["docno"].str.startswith("d").all()


def test_a_version_1_search_folder_is_refused_with_the_rebuild_command(built, tmp_path):
    path = tmp_path / "pfc"
    shutil.copytree(built["pfc"][0], path)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.pop("files")
    (path / "manifest.json").write_text(json.dumps({**manifest, "version": 1}))
    with pytest.raises(ValueError, match=r"version 1 search folder.*every file's checksums.*--overwrite"):
        pfc.app.folder.load_manifest(path)


def test_a_damaged_index_inside_a_search_folder_names_the_pfc_rebuild(built, small_colbert, tmp_path, capsys):
    """Issue 42: the ColBERT index of a search folder, damaged, recommended the library call
    (index.indexer(colbert, overwrite=True)); at the command line the folder's `pfc index ... --overwrite` is the
    way to rebuild it."""
    path = tmp_path / "pfc"
    shutil.copytree(built["pfc"][0], path)
    zero(path / "colbert" / "vectors.f16", None)
    import argparse

    from pyterrier_fandom_colbert.app.cli import error_line

    capsys.readouterr()
    assert main(["verify", str(path)]) == 2
    verify = capsys.readouterr().err
    with pytest.raises(DamagedFileError) as err:  # (pfc search would load the package's checkpoint: a searcher here)
        use_pfc(path, small_colbert)
    assert "index.indexer(" in str(err.value)  # the library's own message
    search = error_line(err.value, argparse.Namespace(command="search", folder=path))
    for line in (verify, search):
        assert "vectors.f16" in line and f"`pfc index SOURCE {path} --overwrite`" in line, line
        assert "index.indexer(" not in line, line


# -- manifests that would switch the checks off (issue 42) ------------------------------------------------------

#: the metadata file holding each kind's manifest
META = {"fp16": "pt_meta.json", "r2": "pt_meta.json", "tfidf": "pt_meta.json", "splade": "pt_meta.json",
        "checkpoint": "manifest.json", "pfc": "manifest.json"}


def rewrite(meta_file, change):
    """Apply ``change(values)`` to a metadata file and write it back as a forger would, its own checksum
    recomputed (a checksum finds damage, not tampering): only the rule under test can refuse it."""
    from pyterrier_fandom_colbert.storage import sealed

    values = json.loads(meta_file.read_text())
    change(values)
    meta_file.write_text(json.dumps(sealed(values) if SEAL_KEY in values else values))


def refused_by_verify(path, capsys, named):
    """``pfc verify`` exits 2 with one error line naming ``named``, never "intact" nor a traceback."""
    capsys.readouterr()
    assert main(["verify", str(path), "--quiet"]) == 2
    out = capsys.readouterr()
    assert "intact" not in out.out and str(named) in out.err and "Traceback" not in out.err
    assert len(out.err.strip().splitlines()) == 1, out.err


@pytest.mark.parametrize("kind", list(META))
def test_an_emptied_file_manifest_is_refused_on_open_and_by_verify(built, small_colbert, tmp_path, capsys, kind):
    from pyterrier_fandom_colbert.storage import IncompleteManifestError

    path = tmp_path / kind
    shutil.copytree(built[kind][0], path)
    rewrite(path / META[kind], lambda values: values.update(files={}))
    with pytest.raises(IncompleteManifestError, match="its file manifest lacks the entries of") as err:
        USE[kind](path, small_colbert)
    assert err.value.path == path / META[kind]
    refused_by_verify(path, capsys, path / META[kind])


@pytest.mark.parametrize("kind", list(META))
def test_each_entry_dropped_from_the_manifest_in_turn_is_refused(built, small_colbert, tmp_path, capsys, kind):
    """Every file these artifacts hold is one their kind must have: dropping any one entry (the others intact)
    is refused naming it, when opened and by verify."""
    from pyterrier_fandom_colbert.storage import IncompleteManifestError

    path = tmp_path / kind
    shutil.copytree(built[kind][0], path)
    meta_file = path / META[kind]
    pristine = meta_file.read_bytes()
    names = sorted(json.loads(pristine)["files"])
    assert len(names) >= 3
    for name in names:
        meta_file.write_bytes(pristine)
        rewrite(meta_file, lambda values, dropped=name: values["files"].pop(dropped))
        with pytest.raises(IncompleteManifestError, match=f"lacks the entries of \\['{name}'\\]"):
            USE[kind](path, small_colbert)
        refused_by_verify(path, capsys, meta_file)


SETTINGS = [("pfc", "manifest.json", ("settings", "fusion", "weight"), 0.3),
            ("pfc", "manifest.json", ("settings", "fusion", "depth"), 300),
            ("pfc", "manifest.json", ("settings", "k_tilde"), 3),
            ("pfc", "manifest.json", ("settings", "retriever", "k_hat"), 32),
            ("fp16", "pt_meta.json", ("fingerprint",), "0" * 16),
            ("r2", "pt_meta.json", ("fingerprint",), "0" * 16),
            ("tfidf", "pt_meta.json", ("config", "k1"), 1.5),
            ("splade", "pt_meta.json", ("field",), "other_toks"),
            ("checkpoint", "colbert_config.json", ("query_maxlen",), 9)]


@pytest.mark.parametrize("kind, file, keys, value", [pytest.param(*c, id=f"{c[0]}-{'.'.join(c[2])}")
                                                     for c in SETTINGS])
def test_an_edited_setting_is_damage_on_open_and_for_verify(built, small_colbert, tmp_path, capsys, kind, file,
                                                            keys, value):
    path = tmp_path / kind
    shutil.copytree(built[kind][0], path)
    values = json.loads((path / file).read_text())
    inner = values
    for key in keys[:-1]:
        inner = inner[key]
    assert inner[keys[-1]] != value
    inner[keys[-1]] = value  # one value changed, written as an editor would, nothing else
    (path / file).write_text(json.dumps(values, indent=2))
    with pytest.raises(DamagedFileError) as err:
        USE[kind](path, small_colbert)
    assert err.value.path == path / file, str(err.value)
    if file != "colbert_config.json":  # (a file of the manifest: its own checksum there)
        assert "does not match its own checksum" in str(err.value)
    refused_by_verify(path, capsys, path / file)


@pytest.mark.parametrize("kind", ["pfc", "tfidf", "fp16"])
def test_a_manifest_without_its_own_checksum_is_refused_with_the_rebuild(built, small_colbert, tmp_path, kind):
    path = tmp_path / kind
    shutil.copytree(built[kind][0], path)
    values = json.loads((path / META[kind]).read_text())
    del values[SEAL_KEY]  # as a version before the checksum wrote it
    (path / META[kind]).write_text(json.dumps(values))
    rebuild = "--overwrite" if kind == "pfc" else "overwrite=True"
    with pytest.raises(DamagedFileError, match=f"written by an older version.*{rebuild}") as err:
        USE[kind](path, small_colbert)
    assert err.value.path == path / META[kind]


def nested(path, sibling):
    path.write_text("[" * 100_000 + "]" * 100_000)


def foreign(path, sibling):
    path.write_text(json.dumps({"format": "someone-elses-tool", "files": {}}))


def a_folder(path, sibling):
    path.unlink()
    path.mkdir()


def missing(path, sibling):
    path.unlink()


@pytest.mark.parametrize("damage", [missing, foreign, a_folder, nested])
def test_verify_fails_when_the_folder_manifest_is_missing_foreign_a_folder_or_nested(built, tmp_path, capsys,
                                                                                      damage):
    path = tmp_path / "pfc"
    shutil.copytree(built["pfc"][0], path)
    assert main(["verify", str(path), "--quiet"]) == 0  # (the copy as built passes)
    damage(path / "manifest.json", None)
    refused_by_verify(path, capsys, path)


def test_a_pickle_checkpoint_is_refused_in_one_line(tmp_path):
    import datetime

    import torch

    from pyterrier_fandom_colbert.model.formats.base import load_torch_weights

    tensors, pickled = tmp_path / "pytorch_model.bin", tmp_path / "payload.bin"
    torch.save({"w": torch.ones(2)}, tensors)
    torch.save({"w": torch.ones(2), "when": datetime.date(2026, 11, 27)}, pickled)  # a global beyond tensors
    assert load_torch_weights(tensors)["w"].tolist() == [1.0, 1.0]
    with pytest.raises(DamagedFileError, match="is refused: it is a pickle that does not hold tensors alone") as err:
        load_torch_weights(pickled)
    assert err.value.path == pickled and "\n" not in str(err.value)
    pickled.write_bytes(b"not a torch file at all")
    with pytest.raises(DamagedFileError, match=r"payload\.bin") as err:
        load_torch_weights(pickled)
    assert "\n" not in str(err.value)


# -- --update never signs what it did not verify ------------------------------------------------------------------

SAMPLE = pfc.app.folder.__file__.rsplit("/app/", 1)[0] + "/data/sample/samplewiki_pages_current.xml"


def tiny_dump(path, keep):
    """The sample dump cut to the pages whose ids are in ``keep``."""
    import re

    with open(SAMPLE, encoding="utf-8") as f:
        text = f.read()
    for page in re.findall(r"  <page>\s*<title>.*?</page>\n", text, flags=re.S):
        if int(re.search(r"<id>(\d+)</id>", page).group(1)) not in keep:
            text = text.replace(page, "")
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def dump_folder(tmp_path_factory, small_colbert):
    root = tmp_path_factory.mktemp("dumpfolder")
    build_folder(tiny_dump(root / "tiny_pages_current.xml", {1000, 1035, 1088}), root / "wiki",
                 colbert=small_colbert, settings=pfc.app.folder.SearchSettings.of("fp16", faiss="flat"))
    return root / "wiki"


def forge_passages(folder, sibling):
    """The issue's case: ``files`` emptied (checksum recomputed), then a passage's title forged in place."""
    rewrite(folder / "manifest.json", lambda values: values.update(files={}))
    data = (folder / "passages.jsonl").read_bytes()
    start = data.index(b'"title": "') + 10
    (folder / "passages.jsonl").write_bytes(data[:start] + b"X" + data[start + 1:])


def forge_text(folder, sibling):
    flip(folder / "tfidf" / "text.bin", None)


@pytest.mark.parametrize("forge, named", [(forge_passages, "manifest.json"), (forge_text, "tfidf/text.bin")])
def test_an_update_over_a_forged_folder_is_refused_and_signs_nothing(dump_folder, small_colbert, tmp_path, forge,
                                                                     named):
    from pyterrier_fandom_colbert.app.folder import update_folder

    folder = tmp_path / "wiki"
    shutil.copytree(dump_folder, folder)
    forge(folder, None)
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    with pytest.raises(DamagedFileError) as err:
        update_folder(tiny_dump(tmp_path / "newer_pages_current.xml", {1000, 1035, 1088, 1130}), folder,
                      colbert=small_colbert)
    assert err.value.path == folder / named, str(err.value)
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
