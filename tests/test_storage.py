"""The storage layer: atomic files and folders (refusals, restore when the final rename fails), the writers that use
it (ColBERT index, TF-IDF index, checkpoint), the one config serialisation API and the one lazy-load idiom."""
import ast
import dataclasses
import os
from pathlib import Path

import numpy as np
import pyterrier as pt
import pytest

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert import storage
from pyterrier_fandom_colbert.data.passages import PassageConfig
from pyterrier_fandom_colbert.explain.relevance import ExplainOptions
from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
from pyterrier_fandom_colbert.index.layout import IndexMeta
from pyterrier_fandom_colbert.lexical.tfidf import TfidfConfig, TfidfIndex, TfidfMeta
from pyterrier_fandom_colbert.model import network
from pyterrier_fandom_colbert.storage import AtomicFolder, JsonConfig, atomic_folder, atomic_path, write_json
from pyterrier_fandom_colbert.training.selfsup import SelfSupConfig
from pyterrier_fandom_colbert.training.trainer import TrainConfig

PACKAGE = Path(pfc.__file__).resolve().parent
DOCS = [{"docno": f"d{i}", "text": text} for i, text in enumerate(
    ["dragons of the north", "the river folk", "a castle by the river", "knights and wizards"])]
CONFIG = pfc.ColBERTConfig(dim=8, query_maxlen=8, doc_maxlen=16)


def entries(folder: Path):
    return sorted(p.name for p in folder.iterdir())


def user_folder(path: Path) -> Path:
    path.mkdir()
    (path / "thesis.tex").write_text("years of work")
    return path


def fail_final_rename_once(monkeypatch):
    """os.replace fails once when it moves a finished temporary folder into place (every other call goes through)."""
    real, calls = os.replace, []

    def replace(src, dst, *args, **kwargs):
        if ".building-" in Path(src).name and not calls:
            calls.append(src)
            raise OSError(28, "No space left on device (injected)")
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    return calls


# -- storage on its own ------------------------------------------------------------------------------------------

def test_atomic_folder_restores_the_old_folder_when_the_final_rename_fails(tmp_path, monkeypatch):
    target = tmp_path / "art"
    with atomic_folder(target) as tmp:
        (tmp / "v").write_text("old")
    calls = fail_final_rename_once(monkeypatch)
    with pytest.raises(OSError, match="injected"), atomic_folder(target, overwrite=True) as tmp:
        (tmp / "v").write_text("new")
    assert len(calls) == 1
    assert (target / "v").read_text() == "old" and entries(tmp_path) == ["art"]


def test_atomic_path_leaves_the_old_file_when_the_rename_fails(tmp_path, monkeypatch):
    target = write_json(tmp_path / "a.json", {"v": 1})
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError("injected")))
    with pytest.raises(OSError, match="injected"):
        write_json(target, {"v": 2})
    assert storage.read_json(target) == {"v": 1} and entries(tmp_path) == ["a.json"]


def test_durable_writes_from_a_writer_return_the_files_checksum_and_leave_nothing_on_failure(tmp_path):
    """``write_durably_with`` streams into the file (an index build's encoded chunks: no copy of them in memory) and
    returns the checksum of what reached the file; a writer that fails leaves the old file and no temporary."""
    from pyterrier_fandom_colbert.storage.manifests import file_checksum

    target = tmp_path / "chunk.npz"
    checksum = storage.write_durably_with(target, lambda out: np.savez(out, v=np.arange(5)))
    assert checksum == file_checksum(target) and np.load(target)["v"].tolist() == [0, 1, 2, 3, 4]

    def failing(out):
        out.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        storage.write_durably_with(target, failing)
    assert np.load(target)["v"].tolist() == [0, 1, 2, 3, 4] and entries(tmp_path) == ["chunk.npz"]


def test_temporary_names_are_unique_per_writer(tmp_path):
    with atomic_path(tmp_path / "f") as a, atomic_path(tmp_path / "f") as b:
        assert a != b and a.parent == b.parent == tmp_path and a.name.startswith(".f.tmp-")
        a.write_text("a")
        b.write_text("b")
    assert (tmp_path / "f").read_text() == "a" and entries(tmp_path) == ["f"]  # b finished first, a last


def test_refusals_keep_what_is_there(tmp_path, monkeypatch):
    is_mine = lambda p: (p / "mine").exists()
    folder, file = user_folder(tmp_path / "docs"), tmp_path / "notes.txt"
    file.write_text("keep me")
    for target in (folder, file):
        with pytest.raises(FileExistsError, match="overwrite=True"):
            AtomicFolder(target)
        with pytest.raises(ValueError, match="is not a widget"):
            AtomicFolder(target, overwrite=True, replaceable=is_mine, what="widget")
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.chdir(folder)
    for target in (".", "", folder):
        with pytest.raises(ValueError, match="current or home folder"):
            AtomicFolder(target, overwrite=True, replaceable=lambda p: True)
    assert entries(tmp_path) == ["docs", "notes.txt"] and entries(folder) == ["thesis.tex"]
    assert file.read_text() == "keep me"


def test_an_empty_folder_counts_as_absent(tmp_path):
    (tmp_path / "new").mkdir()
    with atomic_folder(tmp_path / "new", replaceable=lambda p: False) as tmp:
        (tmp / "x").write_text("1")
    assert entries(tmp_path / "new") == ["x"]


def test_created_files_and_folders_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        with atomic_folder(tmp_path / "f") as tmp:
            storage.write_text(tmp / "a.txt", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "f" / "a.txt").stat().st_mode & 0o777 == 0o644


def test_read_json_names_the_damaged_or_missing_file(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"bad\.json is damaged"):
        storage.read_json(tmp_path / "bad.json")
    with pytest.raises(FileNotFoundError, match=r"gone\.json not found"):
        storage.read_json(tmp_path / "gone.json")


# -- every configuration dataclass speaks JsonConfig -------------------------------------------------------------

CONFIGS = [pfc.ColBERTConfig(dim=64), IndexMeta(num_docs=2, num_tokens=5, dim=8, fingerprint="abc"),
           TfidfConfig(b=0.5), TfidfMeta(TfidfConfig(stemmer=None), 2, 3, 4, 4, "text"), PassageConfig(),
           ExplainOptions(bandwidth=2.5), TrainConfig(lr=1e-4), SelfSupConfig(max_passages=10)]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: type(c).__name__)
def test_config_round_trips_and_refuses_unknown_fields(config, tmp_path):
    cls = type(config)
    assert isinstance(config, JsonConfig) and cls.__dataclass_params__.frozen
    path = config.save_json(tmp_path / "c.json")
    assert cls.load_json(path) == config and cls.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match=rf"unknown {cls.__name__} field\(s\) \['colour'\]"):
        cls.from_dict({**config.to_dict(), "colour": "red"})
    write_json(path, {**config.to_dict(), "colour": "red"})
    with pytest.raises(ValueError, match=r"c\.json: unknown"):
        cls.load_json(path)
    path.write_text('{"truncated": ')
    with pytest.raises(ValueError, match=r"c\.json is damaged"):
        cls.load_json(path)


def test_persisted_dataclasses_all_use_json_config():
    """A class of the package with its own to_dict/from_dict/to_json builds on JsonConfig."""
    own = []
    for file in PACKAGE.rglob("*.py"):
        rel = file.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name != "JsonConfig":
                methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
                bases = {getattr(b, "id", getattr(b, "attr", None)) for b in node.bases}
                if methods & {"to_dict", "from_dict", "to_json", "from_json"} and "JsonConfig" not in bases:
                    own.append(f"{rel}:{node.name}")
    assert [o for o in own if not o.startswith("index/ann.py:")] == []  # ann.py: FAISS kinds, rewritten separately


# -- the package writes only through storage -----------------------------------------------------------------------

def test_no_hand_rolled_temp_and_rename_outside_storage():
    patterns = ("os.replace(", ".rename(", "mkdtemp(", "mkstemp(", '".tmp"', ".tmp-", '".old"', "tmp.replace(")
    found = []
    for file in PACKAGE.rglob("*.py"):
        rel = file.relative_to(PACKAGE).as_posix()
        if rel.startswith("storage/") or rel == "index/ann.py":  # ann.py: FAISS kinds, rewritten separately
            continue
        code = [line for line in file.read_text(encoding="utf-8").splitlines()
                if not line.lstrip().startswith(">>>")]  # doctests may make scratch folders
        found += [f"{rel}: {p}" for p in patterns for line in code if p in line]
    assert found == []


def test_the_index_reader_does_not_import_the_writer():
    tree = ast.parse((PACKAGE / "index" / "artifact.py").read_text(encoding="utf-8"))
    top_level = {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
    assert "writer" not in top_level and "layout" in top_level
    writer = ast.parse((PACKAGE / "index" / "writer.py").read_text(encoding="utf-8"))
    assert "layout" in {node.module for node in writer.body if isinstance(node, ast.ImportFrom)}


# -- the writers: what overwrite=True may replace, and what survives a failed final rename -------------------------

def colbert_index(path, overwrite=False, docs=4):
    with ColBERTIndex(path).writer(CONFIG, "synthetic", overwrite=overwrite) as w:
        for i in range(docs):
            w.add(f"d{i}", np.full((2, 8), i, dtype=np.float32), np.array([101, 102]))
    return ColBERTIndex(path)


def tfidf_index(path, overwrite=False, docs=4):
    return TfidfIndex.build(path, DOCS[:docs], overwrite=overwrite)


@pytest.fixture(scope="module")
def tiny_colbert(tiny_bert_dir):
    return pfc.ColBERT.from_pretrained(tiny_bert_dir, config=CONFIG, device="cpu")


@pytest.fixture(params=["colbert-index", "tfidf-index", "checkpoint"])
def writer(request):
    """(write(path, overwrite), size of what is at path): one artifact writer each."""
    if request.param == "colbert-index":
        return (lambda path, overwrite=False, n=4: colbert_index(path, overwrite, n),
                lambda path: len(ColBERTIndex(path)))
    if request.param == "tfidf-index":
        return (lambda path, overwrite=False, n=4: tfidf_index(path, overwrite, n),
                lambda path: TfidfIndex(path).meta.num_docs)
    colbert = request.getfixturevalue("tiny_colbert")

    def save(path, overwrite=False, n=4):  # checkpoints are always replaced: n marks which one is there
        colbert.save_pretrained(path)
        (Path(path) / "backbone" / "marker").write_text(str(n))

    return save, lambda path: int((Path(path) / "backbone" / "marker").read_text())


@pytest.mark.parametrize("target", ["user-folder", "file", ".", ""])
def test_writers_never_replace_what_is_not_theirs(writer, target, tmp_path, monkeypatch):
    write, _ = writer
    home = user_folder(tmp_path / "home")
    monkeypatch.chdir(home)
    if target == "user-folder":
        path = user_folder(tmp_path / "mine")
    elif target == "file":
        path = tmp_path / "mine"
        path.write_text("keep me")
    else:
        path = target
    before = entries(tmp_path)
    with pytest.raises(ValueError, match=r"is not a|current or home folder"):
        write(path, overwrite=True)
    assert entries(tmp_path) == before and entries(home) == ["thesis.tex"]
    assert target != "file" or (tmp_path / "mine").read_text() == "keep me"


def test_writers_keep_the_old_artifact_when_the_final_rename_fails(writer, tmp_path, monkeypatch):
    write, size = writer
    path = tmp_path / "art"
    write(path, n=4)
    calls = fail_final_rename_once(monkeypatch)
    with pytest.raises(OSError, match="injected"):
        write(path, overwrite=True, n=2)
    assert len(calls) == 1 and size(path) == 4 and entries(tmp_path) == ["art"]
    write(path, overwrite=True, n=2)
    assert size(path) == 2 and entries(tmp_path) == ["art"]


def test_one_index_kind_never_replaces_the_other(tmp_path):
    colbert_index(tmp_path / "c")
    tfidf_index(tmp_path / "t")
    with pytest.raises(ValueError, match="is not a TF-IDF index"):
        tfidf_index(tmp_path / "c", overwrite=True)
    with pytest.raises(ValueError, match="is not a ColBERT index"):
        colbert_index(tmp_path / "t", overwrite=True)
    assert len(ColBERTIndex(tmp_path / "c")) == 4 and TfidfIndex(tmp_path / "t").meta.num_docs == 4


def test_checkpoint_over_an_existing_file_is_refused_before_writing(tiny_colbert, tmp_path):
    (tmp_path / "ckpt").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="is not a ColBERT checkpoint folder"):
        tiny_colbert.save_pretrained(tmp_path / "ckpt")
    assert entries(tmp_path) == ["ckpt"] and not network.is_checkpoint(tmp_path / "ckpt")


# -- one lazy-load idiom and one meta type for both artifacts -------------------------------------------------------

@pytest.mark.parametrize("build, meta_type", [(colbert_index, IndexMeta), (tfidf_index, TfidfMeta)])
def test_artifacts_load_lazily_and_forget(build, meta_type, tmp_path):
    build(tmp_path / "a", docs=4)
    index = pt.Artifact.load(str(tmp_path / "a"))
    meta = index.meta
    assert isinstance(meta, meta_type) and index.meta is meta and meta.num_docs == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        meta.num_docs = 3
    build(tmp_path / "a", overwrite=True, docs=3)
    assert index.meta.num_docs == 4  # read once, kept
    index._forget()
    assert index.meta.num_docs == 3 and index.docnos.fwd[2] == "d2"


# -- docno lookups of mixed forms -------------------------------------------------------------------------------
#: npids starts a new codec block when a docno does not fit the first block's (zero-padded numbers, then a longer
#: number); its integer inverses then lose the later docnos
MIXED_DOCNOS = [f"{i:04d}" for i in range(300)] + ["123456789012345", "123456789012346", "123456789012347"]


def test_docno_inverse_of_a_lookup_of_several_blocks_finds_every_docno(tmp_path):
    import npids

    path = tmp_path / "docnos.npids"
    npids.Lookup.build(MIXED_DOCNOS, path, build_inv=False, return_self=False)
    storage.build_docno_inverse(path)
    with npids.Lookup(path) as lookup:
        assert len(lookup.fwd.codecs) > 1  # the case this guards: several blocks
        assert [int(lookup.inv[d]) for d in MIXED_DOCNOS] == list(range(len(MIXED_DOCNOS)))


def test_indexes_find_docnos_of_mixed_forms(tmp_path):
    docs = [{"docno": d, "text": f"passage {d} about topic{i}"} for i, d in enumerate(MIXED_DOCNOS)]
    tfidf = TfidfIndex(tmp_path / "t.tfidf")
    tfidf.indexer().index(docs)
    res = tfidf.retriever(num_results=1)(pt.new.queries(["topic301", "topic302"], qid=["a", "b"]))
    assert res.sort_values("qid").docno.tolist() == MIXED_DOCNOS[301:]
    rng = np.random.default_rng(0)
    config = pfc.ColBERTConfig(dim=8)
    index = ColBERTIndex(tmp_path / "c.idx")
    with index.writer(config, "fp") as w:
        for d in MIXED_DOCNOS:
            w.add(d, rng.normal(size=(3, 8)).astype(np.float32), np.arange(3))
    index = ColBERTIndex(tmp_path / "c.idx")
    assert index.doc_ids(MIXED_DOCNOS[-3:]).tolist() == [300, 301, 302]
    assert index.docnos_of(np.array([300, 302])).tolist() == [MIXED_DOCNOS[300], MIXED_DOCNOS[302]]


@pytest.mark.parametrize("docnos", [
    ["only"],                                                     # one document
    ["5"],
    [f"d-{i:04d}" for i in range(300)] + ["zzz"],                 # a last docno that starts a block of its own
    [f"wiki-{1000 + i}-0" for i in range(300)] + ["wiki-999-0"],
    [str(i) for i in range(600)] + ["x", "y"],
    [f"d{i:02d}" for i in range(8, 16)],                          # numbers with a leading zero, one block: npids'
    ["d07", "d08"],                                               # integer inverse loses every docno of these
])
def test_docno_lookups_read_back_whatever_blocks_npids_makes(tmp_path, docnos):
    import npids

    path = tmp_path / "docnos.npids"
    with storage.docno_lookup_builder(path) as builder:
        for docno in docnos:
            builder.add(docno)
    storage.build_docno_inverse(path)
    with npids.Lookup(path) as lookup:
        assert list(lookup.fwd[np.arange(len(docnos))]) == docnos
        assert list(lookup.inv[docnos]) == list(range(len(docnos)))


def test_folders_left_aside_are_removed_by_the_next_swap_read_only_ones_too(tmp_path, monkeypatch):
    """``.NAME.old-*`` folders that a writer killed outright (or one that could not delete a read-only folder)
    left beside the target go at the next swap of that target; none while the target is missing (a writer
    between its two renames holds the only copy aside). Permissions are enforced here as for a user who is not
    root (root may delete in a read-only folder)."""
    import shutil

    real_unlink, real_rmdir = os.unlink, os.rmdir

    def enforced(real):
        def call(path, *, dir_fd=None):
            parent = os.fstat(dir_fd).st_mode if dir_fd is not None else os.stat(os.path.dirname(path) or ".").st_mode
            if not parent & 0o200:
                raise PermissionError(13, "Permission denied", path)
            return real(path, dir_fd=dir_fd)
        return call

    monkeypatch.setattr(os, "unlink", enforced(real_unlink))
    monkeypatch.setattr(os, "rmdir", enforced(real_rmdir))
    target = tmp_path / "idx"
    with atomic_folder(target) as tmp:
        (tmp / "a.txt").write_text("one")
    left = tmp_path / ".idx.old-0123456789ab"
    (left / "sub").mkdir(parents=True)
    (left / "sub" / "b.txt").write_text("two")
    for folder in (left / "sub", left):
        folder.chmod(0o555)
    shutil.rmtree(left, ignore_errors=True)  # what the swap did before: nothing goes
    assert (left / "sub" / "b.txt").exists()
    assert storage.remove_leftovers(tmp_path / "missing") == []
    with atomic_folder(target, overwrite=True) as tmp:
        (tmp / "c.txt").write_text("three")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"] and (target / "c.txt").read_text() == "three"
    # with the target missing, what is aside is the only copy: kept
    (tmp_path / ".gone.old-0123456789ab").mkdir()
    assert storage.remove_leftovers(tmp_path / "gone") == [] and (tmp_path / ".gone.old-0123456789ab").is_dir()
