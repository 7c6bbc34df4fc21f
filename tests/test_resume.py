"""Resumable builds (docs/app.md, "Interrupted builds resume"): a build interrupted after some chunks, during the
codec's k-means, during the final write, or killed outright (SIGKILL, in a child process) keeps the passages it
encoded beside the target; the same call encodes only the rest, says so, and makes a folder equal, file for file
and result for result, to an uninterrupted build's. A damaged chunk is named and encoded again; other passages or
``restart=True`` discard what was kept; an error (not an interruption) leaves nothing."""
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.app.folder import build_folder, load_manifest, resume, update_folder
from pyterrier_fandom_colbert.app.search import Searcher
from pyterrier_fandom_colbert.index.residual import compress as compressed
from pyterrier_fandom_colbert.storage import SEAL_KEY, DamagedFileError

SAMPLE = Path(pfc.__file__).parent / "data" / "sample" / "samplewiki_pages_current.xml"
KEEP = {1000, 1035, 1088, 1130, 1158, 1210, 1253, 1263, 1288, 1309}
CHUNK = 4
QUESTIONS = ["who founded Hollowlight Studios?", "what drops a Cinderhound?", "rusted key door"]


def small_dump(path: Path) -> Path:
    """The sample dump cut to the pages of KEEP."""
    text = SAMPLE.read_text(encoding="utf-8")
    for page in re.findall(r"  <page>\s*<title>.*?</page>\n", text, flags=re.S):
        if int(re.search(r"<id>(\d+)</id>", page).group(1)) not in KEEP:
            text = text.replace(page, "")
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(resume, "CHUNK_PASSAGES", CHUNK)


@pytest.fixture(scope="module")
def tiny_bert_dir(tiny_bert_dir, tmp_path_factory) -> str:
    """This module's own copy of the tiny checkpoint: the killed child loads it from disk while the parent's
    encoder was loaded at the module's start, and the keys of kept chunks name the encoder's fingerprint, so no
    other test may change it in between."""
    return str(shutil.copytree(tiny_bert_dir, tmp_path_factory.mktemp("resume") / "tiny-bert"))


@pytest.fixture(scope="module")
def colbert(tiny_bert_dir):
    return pfc.ColBERT.from_pretrained(tiny_bert_dir)


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    return small_dump(tmp_path_factory.mktemp("dump") / "small_pages_current.xml")


@pytest.fixture(scope="module")
def whole(tmp_path_factory, colbert, dump, tiny_bert_dir):
    """An uninterrupted build (chunks of CHUNK passages)."""
    folder = tmp_path_factory.mktemp("whole") / "wiki"
    with pytest.MonkeyPatch.context() as m:
        m.setattr(resume, "CHUNK_PASSAGES", CHUNK)
        build_folder(dump, folder, colbert=colbert, checkpoint=tiny_bert_dir)
    return folder


def files(folder: Path) -> dict:
    """Every file's bytes, but the build times the manifest and the codec record (``codec.json`` and hence its
    checksum in the ColBERT index's ``pt_meta.json``, and that file's seal) left out."""
    out = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
           if p.is_file() and p.name != "manifest.json"}
    codec = json.loads(out.pop("colbert/codec.json"))
    out["colbert/codec.json"] = {**codec, "seconds": None}
    meta = json.loads(out.pop("colbert/pt_meta.json"))
    meta["files"].pop("codec.json")
    meta.pop(SEAL_KEY)  # (the seal covers the entry just left out)
    out["colbert/pt_meta.json"] = meta
    return out


def results(folder: Path, colbert) -> list:
    searcher = Searcher(folder, colbert=colbert, warm=False)
    return [[(r["docno"], r["score"]) for r in searcher.search(q, system=s, k=5, explain=False)["results"]]
            for q in QUESTIONS for s in ("colbert", "hybrid")]


def assert_same_folder(folder: Path, whole: Path, colbert) -> None:
    got, expected = files(folder), files(whole)
    assert sorted(got) == sorted(expected)
    assert [name for name in expected if got[name] != expected[name]] == []
    manifest, reference = load_manifest(folder), load_manifest(whole)
    assert manifest.tokens == reference.tokens
    for name in ("passages.jsonl", "passages.offsets.npy", "tfidf/pt_meta.json"):
        assert manifest.files[name] == reference.files[name]
    assert results(folder, colbert) == results(whole, colbert)
    assert not resume.store_path(folder).exists()  # the kept chunks are gone once the folder is complete


def interrupt_after(monkeypatch, owner, name: str, calls: int):
    """Make ``owner.name`` raise KeyboardInterrupt (as Ctrl-C does) on call ``calls + 1``."""
    original = getattr(owner, name)
    seen = []

    def hooked(*args, **kwargs):
        seen.append(1)
        if len(seen) > calls:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, hooked)


def interrupted_build(source, folder: Path, colbert, checkpoint: str, chunks: int) -> None:
    """``build_folder(source, folder)`` stopped by Ctrl-C once ``chunks`` chunks of encoded passages are kept."""
    with pytest.MonkeyPatch.context() as m:
        interrupt_after(m, resume.EncodedChunks, "save", chunks)
        with pytest.raises(KeyboardInterrupt):
            build_folder(source, folder, colbert=colbert, checkpoint=checkpoint)


def pending(folder: Path) -> bool:
    """``folder`` is published with its ColBERT part pending, and shows no ColBERT part."""
    return load_manifest(folder).colbert_pending and not (folder / "colbert").exists()


def chunk_count(whole: Path) -> int:
    return -(-load_manifest(whole).passages // CHUNK)


@pytest.mark.parametrize("where", ["after two chunks", "during k-means", "during the final write"])
def test_an_interrupted_build_resumes_and_equals_an_uninterrupted_one(where, tmp_path, colbert, dump, whole,
                                                                      tiny_bert_dir, count_calls, capsys):
    folder = tmp_path / "wiki"
    total = load_manifest(whole).passages
    with pytest.MonkeyPatch.context() as m:
        if where == "after two chunks":
            interrupt_after(m, resume.EncodedChunks, "save", 2)
        elif where == "during k-means":
            interrupt_after(m, compressed.ResidualCodec, "train", 0)
        else:
            interrupt_after(m, compressed.CodedLists, "finish", 0)
        with pytest.raises(KeyboardInterrupt):
            build_folder(dump, folder, colbert=colbert, checkpoint=tiny_bert_dir, verbose=True)
    done = 2 * CHUNK if where == "after two chunks" else total
    assert f"interrupted: {done:,} of {total:,} passages encoded are kept" in capsys.readouterr().err
    assert pending(folder)  # searchable with TF-IDF; nothing half-written is ever searched
    kept = resume.store_path(folder)
    assert len(list(kept.glob("chunk-*.npz"))) == (2 if where == "after two chunks" else chunk_count(whole))

    encoded = count_calls(type(colbert), "encode_pieces")
    build_folder(dump, folder, colbert=colbert, checkpoint=tiny_bert_dir, verbose=True)
    assert f"resuming: {done:,} of {total:,} passages already encoded" in capsys.readouterr().err
    assert encoded.calls == chunk_count(whole) - done // CHUNK  # only the chunks not kept
    assert_same_folder(folder, whole, colbert)


def test_a_damaged_chunk_is_named_and_encoded_again(tmp_path, colbert, dump, whole, tiny_bert_dir, count_calls,
                                                    capsys):
    folder = tmp_path / "wiki"
    interrupted_build(dump, folder, colbert, tiny_bert_dir, 3)
    chunk = resume.store_path(folder) / "chunk-000001.npz"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x01
    chunk.write_bytes(bytes(data))
    encoded = count_calls(type(colbert), "encode_pieces")
    build_folder(dump, folder, colbert=colbert, checkpoint=tiny_bert_dir, verbose=True)
    err = capsys.readouterr().err
    assert f"{chunk} is damaged (its checksum differs from the one recorded): encoding its {CHUNK} passages again" \
        in err
    assert f"resuming: {2 * CHUNK:,} of" in err
    assert encoded.calls == chunk_count(whole) - 2
    assert_same_folder(folder, whole, colbert)


def test_a_chunk_damaged_after_the_check_is_refused_naming_it_and_encoded_by_the_next_run(tmp_path, colbert, dump,
                                                                                          whole, tiny_bert_dir):
    folder = tmp_path / "wiki"
    original = resume.EncodedChunks.passages

    def damage_then_read(self):
        path = self.path / "chunk-000000.npz"
        path.write_bytes(path.read_bytes()[:-3] + b"xyz")
        return original(self)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(resume.EncodedChunks, "passages", damage_then_read)
        with pytest.raises(pfc.storage.DamagedFileError, match=re.escape("chunk-000000.npz is damaged")):
            build_folder(dump, folder, colbert=colbert, checkpoint=tiny_bert_dir)
    assert not folder.exists() and not resume.store_path(folder).exists()  # an error leaves nothing
    build_folder(dump, folder, colbert=colbert, checkpoint=tiny_bert_dir)
    assert_same_folder(folder, whole, colbert)


def test_other_passages_or_restart_discard_what_was_kept(tmp_path, colbert, dump, whole, tiny_bert_dir, count_calls,
                                                         capsys):
    folder = tmp_path / "wiki"
    interrupted_build(dump, folder, colbert, tiny_bert_dir, 2)
    encoded = count_calls(type(colbert), "encode_pieces")
    build_folder(dump, folder, colbert=colbert, checkpoint=tiny_bert_dir, verbose=True, restart=True)
    assert f"discarding {2 * CHUNK:,} passages encoded by an earlier build" in capsys.readouterr().err
    assert encoded.calls == chunk_count(whole)
    assert_same_folder(folder, whole, colbert)

    # an edited dump: other passages, so the kept chunks (of the first dump) are not used
    other = tmp_path / "other"
    edited = tmp_path / "edited_pages_current.xml"
    edited.write_text(dump.read_text(encoding="utf-8").replace("Cinderhound", "Emberhound"), encoding="utf-8")
    interrupted_build(dump, other, colbert, tiny_bert_dir, 2)
    build_folder(edited, other, colbert=colbert, checkpoint=tiny_bert_dir, verbose=True)
    err = capsys.readouterr().err
    assert re.search(r"discarding \d+ passages encoded by an earlier build in \S+ \(passages: '[0-9a-f]+' then, "
                     r"'[0-9a-f]+' now\)", err), err  # only the passages differ, and the message names them
    texts = pfc.TfidfIndex(other / "tfidf").texts(list(range(load_manifest(other).passages)))
    assert any("Emberhound" in t for t in texts) and not any("Cinderhound" in t for t in texts)


def test_an_interrupted_update_resumes_and_equals_an_uninterrupted_one(tmp_path, colbert, dump, whole, count_calls,
                                                                       monkeypatch, capsys):
    import shutil

    monkeypatch.setattr(resume, "CHUNK_PASSAGES", 1)
    text = dump.read_text(encoding="utf-8")
    edited = tmp_path / "edited_pages_current.xml"
    changed = re.sub(r"(<id>1158</id>\s*<revision>\s*<id>)(\d+)", r"\g<1>49999", text)
    edited.write_text(changed.replace("Adults are roughly the size of a pony.",
                                      "Adults are roughly the size of a draft horse."), encoding="utf-8")
    straight, folder = tmp_path / "straight", tmp_path / "wiki"
    shutil.copytree(whole, straight)
    shutil.copytree(whole, folder)
    update_folder(edited, straight, colbert=colbert)
    encoding = load_manifest(straight).update["passages_encoded"]
    assert encoding >= 2
    with pytest.MonkeyPatch.context() as m:
        interrupt_after(m, resume.EncodedChunks, "save", 1)
        with pytest.raises(KeyboardInterrupt):
            update_folder(edited, folder, colbert=colbert)
    assert files(folder) == files(whole)  # the folder as it was
    encoded = count_calls(type(colbert), "encode_pieces")
    update_folder(edited, folder, colbert=colbert, verbose=True)
    assert f"resuming: 1 of {encoding} passages already encoded" in capsys.readouterr().err
    assert encoded.calls == encoding - 1
    assert files(folder) == files(straight)
    assert not resume.store_path(folder).exists()


KILLER = """
import os, signal, sys
import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.app.folder import build_folder, resume
resume.CHUNK_PASSAGES = {chunk}
original = resume.EncodedChunks.save
def save(self, *args, **kwargs):
    original(self, *args, **kwargs)
    if len(self.chunks) == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # as a power cut: no clean-up runs
resume.EncodedChunks.save = save
colbert = pfc.ColBERT.from_pretrained(sys.argv[3])
print("fingerprint", colbert.fingerprint(), file=sys.stderr, flush=True)
build_folder(sys.argv[1], sys.argv[2], colbert=colbert, checkpoint=sys.argv[3])
"""


@pytest.mark.slow  # a child process that loads the package and a model
def test_a_build_killed_outright_resumes(tmp_path, colbert, dump, whole, tiny_bert_dir, count_calls, capsys):
    folder = tmp_path / "wiki"
    # a clean environment and working folder: the child must load the very encoder the parent holds
    env = {name: os.environ[name] for name in ("PATH", "HOME", "TMPDIR", "LANG") if name in os.environ}
    env.update(PYTHONPATH=str(Path(pfc.__file__).parent.parent), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    child = subprocess.run([sys.executable, "-c", KILLER.format(chunk=CHUNK), str(dump), str(folder),
                            tiny_bert_dir], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert f"fingerprint {colbert.fingerprint()}" in child.stderr, child.stderr[-2000:]
    assert pending(folder)
    assert list(tmp_path.glob(".wiki.building-*"))  # the dead build's folder (removed by the next build)
    encoded = count_calls(type(colbert), "encode_pieces")
    build_folder(dump, folder, colbert=colbert, checkpoint=tiny_bert_dir, verbose=True)
    err = capsys.readouterr().err
    assert f"resuming: {3 * CHUNK:,} of" in err, err[:3000]
    assert encoded.calls == chunk_count(whole) - 3
    assert not list(tmp_path.glob(".wiki.building-*"))
    assert_same_folder(folder, whole, colbert)


def test_chunks_hold_each_passage_as_encoded(tmp_path):
    """The chunk files give back each passage's vectors, token ids and windows exactly (fp16)."""
    rng = np.random.default_rng(0)
    passages = [(rng.normal(size=(n, 8)).astype(np.float16), rng.integers(0, 500, n).astype(np.int32), parts)
                for n, parts in ((3, [3]), (7, [4, 3]), (1, [1]), (5, [2, 2, 1]), (2, [2]))]
    chunks = resume.EncodedChunks(tmp_path / "x", "key", len(passages))
    for number in chunks.missing():
        chunks.save(number, passages[number * CHUNK:(number + 1) * CHUNK], long=0)
    again = resume.EncodedChunks(tmp_path / "x", "key", len(passages))
    assert again.missing() == [] and again.passages_done() == len(passages)
    for (vectors, ids, parts), (v, i, p) in zip(passages, again.passages(), strict=True):
        assert np.array_equal(vectors, v) and np.array_equal(ids, i) and parts == p
    with pytest.raises(ValueError, match="chunk 0 holds 1 passages; expected 4"):
        again.save(0, passages[:1], long=0)



def test_a_fresh_build_writes_no_fp16_spill_and_the_index_the_spill_writes(tmp_path, colbert, dump,
                                                                          tiny_bert_dir):
    """The codec is trained from the kept chunks before the index is written: no fp16 copy of the corpus, and the
    ColBERT index that streaming the same passages into the spill path (``IndexWriter(compression=...)``) makes."""
    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
    from pyterrier_fandom_colbert.index.writer import IndexWriter

    def no_spill(*args, **kwargs):
        raise AssertionError("a fresh build wrote an fp16 spill")

    folder, kept = tmp_path / "wiki", []
    with pytest.MonkeyPatch.context() as m:
        # the chunks kept, to write the index again below
        m.setattr(resume.EncodedChunks, "discard", lambda chunks: kept.append(chunks))
        m.setattr(compressed, "compress_spill", no_spill)
        build_folder(dump, folder, colbert=colbert, checkpoint=tiny_bert_dir)
    meta = ColBERTIndex(folder / "colbert").meta
    docnos = [json.loads(line)["docno"] for line in (folder / "passages.jsonl").read_text().splitlines()]
    with IndexWriter(tmp_path / "spilled" / "colbert", colbert.config, colbert.fingerprint(), long_docs="windows",
                     stride=meta.stride, compression=load_manifest(folder).settings.compression) as writer:
        for docno, (vectors, ids, parts) in zip(docnos, kept[0].passages(), strict=True):
            writer.add(docno, vectors, ids, parts)
        writer.truncated_docs, writer.windowed_docs = meta.truncated_docs, meta.windowed_docs
    got = {name: data for name, data in files(folder).items() if name.startswith("colbert/")}
    expected = files(tmp_path / "spilled")
    assert sorted(got) == sorted(expected) and "colbert/exact_rows.u32" in got
    assert [name for name in expected if got[name] != expected[name]] == []


def test_pfc_index_passes_restart_and_says_the_folder_was_not_written(monkeypatch, tmp_path, capsys):
    from pyterrier_fandom_colbert.app import folder as folder_module
    from pyterrier_fandom_colbert.app.cli import main

    seen = {}

    def interrupted(source, folder, **options):
        seen.update(options)
        raise KeyboardInterrupt

    monkeypatch.setattr(folder_module, "build_folder", interrupted)
    assert main(["index", str(SAMPLE), str(tmp_path / "wiki"), "--restart", "--quiet"]) == 130
    assert seen["restart"] is True
    assert capsys.readouterr().err == f"pfc index: interrupted; {tmp_path / 'wiki'} was not written\n"


# -- searchable early (docs/app.md, "Searchable early") ---------------------------------------------------------
def tfidf_results(searcher, **kwargs) -> list:
    return [[(r["docno"], r["score"]) for r in searcher.search(q, k=5, explain=False, **kwargs)["results"]]
            for q in QUESTIONS]


def test_a_stopped_build_answers_tfidf_says_how_far_and_completes_under_a_live_searcher(
        tmp_path, colbert, dump, whole, tiny_bert_dir, capsys):
    from pyterrier_fandom_colbert.app.cli import main
    from pyterrier_fandom_colbert.app.folder import verify_folder
    from pyterrier_fandom_colbert.app.live import ServedFolder
    from pyterrier_fandom_colbert.app.queries import QueryError

    folder = tmp_path / "wiki"
    total = load_manifest(whole).passages
    with pytest.MonkeyPatch.context() as m:
        interrupt_after(m, resume.EncodedChunks, "save", 2)
        assert main(["index", str(dump), str(folder), "--checkpoint", tiny_bert_dir, "--quiet"]) == 130
    assert "answers TF-IDF searches" in capsys.readouterr().err
    assert pending(folder)
    served = ServedFolder(folder, Searcher(folder, colbert=colbert, warm=False))
    response = served.call("search", QUESTIONS[0], k=5, explain=False)
    notice = f"ColBERT is being built: {2 * CHUNK:,} of {total:,} passages encoded; searching with TF-IDF meanwhile"
    assert (response["system"], response["notice"]) == ("tfidf", notice)
    assert tfidf_results(served.searcher) == tfidf_results(Searcher(whole, colbert=colbert, warm=False),
                                                           system="tfidf")  # the same TF-IDF part
    for system in ("colbert", "hybrid"):
        with pytest.raises(QueryError, match=f"system='{system}' needs ColBERT.*{2 * CHUNK} of {total} passages "
                                             "encoded.*only system 'tfidf'"):
            served.call("search", QUESTIONS[0], system=system, explain=False)
    if importlib.util.find_spec("httpx"):  # (starlette's test client needs it)
        from starlette.testclient import TestClient

        from pyterrier_fandom_colbert.app.server import create_app

        page = TestClient(create_app(served)).get("/").text  # the page says so and offers TF-IDF alone
        assert notice in page and 'value="tfidf"' in page and 'value="hybrid"' not in page
    assert main(["search", str(folder), QUESTIONS[0], "--no-explain", "--read-top", "0"]) == 0
    assert notice in capsys.readouterr().out
    assert main(["search", str(folder), QUESTIONS[0], "--system", "colbert", "--no-explain"]) == 2
    assert "needs ColBERT" in capsys.readouterr().err  # one line, no traceback

    # the pending manifest is checked like any other: the files it lists, by checksum
    assert verify_folder(folder)["pending"] == f"{2 * CHUNK} of {total} passages encoded"
    assert main(["verify", str(folder)]) == 0
    assert f"search folder intact (4 files checked); ColBERT pending ({2 * CHUNK} of {total}" in \
        capsys.readouterr().out
    offsets = folder / "passages.offsets.npy"
    original = offsets.read_bytes()
    offsets.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    with pytest.raises(DamagedFileError, match=r"passages\.offsets\.npy"):
        verify_folder(folder)
    offsets.write_bytes(original)

    # the same command completes it (without --overwrite); the live searcher switches to the default system
    build_folder(dump, folder, colbert=colbert, checkpoint=tiny_bert_dir)
    served.wait()
    response = served.call("search", QUESTIONS[0], k=5, explain=False)
    assert response["system"] == "hybrid" and "notice" not in response
    assert_same_folder(folder, whole, colbert)


def test_a_new_folder_is_published_pending_then_completed_in_one_build(tmp_path, colbert, dump, whole,
                                                                       tiny_bert_dir, monkeypatch):
    from pyterrier_fandom_colbert.app.folder import build as building
    from pyterrier_fandom_colbert.app.live import ServedFolder

    folder = tmp_path / "wiki"
    seen = {}
    encode_into = building.encode_into

    def look(*args, **kwargs):  # while ColBERT is encoded, the folder is served with TF-IDF
        seen["pending"] = pending(folder)
        seen["served"] = ServedFolder(folder, Searcher(folder, colbert=colbert, warm=False))
        seen["system"] = seen["served"].call("search", QUESTIONS[0], explain=False)["system"]
        return encode_into(*args, **kwargs)

    monkeypatch.setattr(building, "encode_into", look)
    build_folder(dump, folder, colbert=colbert, checkpoint=tiny_bert_dir)
    assert (seen["pending"], seen["system"]) == (True, "tfidf")
    served = seen["served"]
    served.wait()
    assert served.call("search", QUESTIONS[0], explain=False)["system"] == "hybrid"  # no restart
    assert not list(tmp_path.glob(".wiki.*"))  # no staging folder, no kept chunks
    # the folder equals one built without publishing early (over an existing folder), manifest included
    monkeypatch.setattr(building, "encode_into", encode_into)
    replaced = tmp_path / "replaced"
    replaced.mkdir()
    (replaced / "manifest.json").write_text(json.dumps({"format": "pfc-search-folder"}))
    build_folder(dump, replaced, colbert=colbert, checkpoint=tiny_bert_dir, overwrite=True)
    assert_same_folder(folder, replaced, colbert)
    assert_same_folder(folder, whole, colbert)
    early, late = load_manifest(folder).to_dict(), load_manifest(replaced).to_dict()
    assert "colbert_pending" not in early
    for values in (early, late):
        values.pop("seconds")
        values.pop("bytes")  # (codec.json holds its build times, whose digits vary in number)
        values["files"].pop("colbert/pt_meta.json")  # (holds codec.json's checksum, which holds its build time)
    assert early == late


def test_an_error_after_the_early_publish_leaves_nothing(tmp_path, colbert, dump, tiny_bert_dir, monkeypatch):
    from pyterrier_fandom_colbert.app.folder import build as building

    def fail(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(building, "encode_into", fail)
    folder = tmp_path / "wiki"
    with pytest.raises(RuntimeError, match="disk on fire"):
        build_folder(dump, folder, colbert=colbert, checkpoint=tiny_bert_dir)
    assert sorted(tmp_path.iterdir()) == []


def test_an_update_of_a_pending_folder_is_refused_saying_how_to_complete_it(tmp_path, colbert, dump,
                                                                            tiny_bert_dir):
    folder = tmp_path / "wiki"
    interrupted_build(dump, folder, colbert, tiny_bert_dir, 1)
    with pytest.raises(ValueError, match=f"ColBERT part is not built yet.*`pfc index .*{folder}`"):
        update_folder(dump, folder, colbert=colbert)
