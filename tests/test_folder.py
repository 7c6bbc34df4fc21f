"""Search folders on disk: the compressed ColBERT index they hold (no fp16 copy, no neighbour index, no lock files),
the refusal of older folders, and ``pfc index --update``: a dump edited three ways (a page changed, one added, one
deleted) gives, by update, the folder a fresh build of the edited dump with the same codec gives, parsing and
encoding only the pages that changed; an update that fails leaves the folder as it was."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.app.cli import main
from pyterrier_fandom_colbert.app.folder import (
    COLBERT_DIR,
    MANIFEST,
    build_folder,
    load_manifest,
    update_folder,
)
from pyterrier_fandom_colbert.app.search import Searcher
from pyterrier_fandom_colbert.data import passages as passages_module
from pyterrier_fandom_colbert.data.passages import dump_passages

SAMPLE = Path(pfc.__file__).parent / "data" / "sample" / "samplewiki_pages_current.xml"
QUESTIONS = ["who founded Hollowlight Studios?", "what drops a Cinderhound?", "where is the Glimmerfen?",
             "rusted key door", "size of an adult Cinderhound"]
CHANGED, DELETED, ADDED = 1158, 1253, 2001
NEW_PAGE = f"""  <page>
    <title>Glimmerfen</title>
    <ns>0</ns>
    <id>{ADDED}</id>
    <revision>
      <id>49001</id>
      <text bytes="1" xml:space="preserve">The '''Glimmerfen''' is a marsh south of [[Saltmere]]
where reeds glow faintly at night.
Travellers cross it on plank roads kept by the Tidewardens, who charge a toll of two copper lanterns.

== History ==
The fen formed after the Sundering flooded the lowland farms. Old Man Pell claims to have mapped every channel,
but his map shows a lake where the largest island stands today, and nobody has trusted it since.</text>
    </revision>
  </page>
"""


#: the sample wiki's pages the tests keep (articles, and a template and a talk page, which are left out)
KEEP = {1000, 1035, 1088, 1130, CHANGED, 1210, DELETED, 1263, 1288, 1309}


def small_dump(path: Path) -> Path:
    """The sample dump cut to the pages of KEEP (fast to parse and encode)."""
    text = SAMPLE.read_text(encoding="utf-8")
    pages = re.findall(r"  <page>\s*<title>.*?</page>\n", text, flags=re.S)
    dropped = [page for page in pages if int(re.search(r"<id>(\d+)</id>", page).group(1)) not in KEEP]
    for page in dropped:
        text = text.replace(page, "")
    assert len(pages) - len(dropped) == len(KEEP)
    path.write_text(text, encoding="utf-8")
    return path


def edited_dump(tmp_path: Path) -> Path:
    """The small dump with one page changed (new text, new revision), one deleted and one added."""
    text = small_dump(tmp_path / "small.xml").read_text(encoding="utf-8")
    (tmp_path / "small.xml").unlink()
    changed = text.replace("Adults are roughly the size of a pony.",
                           "Adults are roughly the size of a draft horse and hunt in packs of seven.")
    changed = changed.replace("<id>48286</id>", "<id>48999</id>")
    assert changed != text
    without = re.sub(r"  <page>\s*<title>Rusted Key</title>.*?</page>\n", "", changed, flags=re.S)
    assert without != changed
    path = tmp_path / "edited_pages_current.xml"
    path.write_text(without.replace("</mediawiki>", NEW_PAGE + "</mediawiki>"), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def colbert(tiny_bert_dir):
    return pfc.ColBERT.from_pretrained(tiny_bert_dir)


@pytest.fixture(scope="module")
def sample_folder(tmp_path_factory, colbert, tiny_bert_dir):
    folder = tmp_path_factory.mktemp("folder") / "wiki"
    build_folder(small_dump(folder.parent / "small_pages_current.xml"), folder, colbert=colbert,
                 checkpoint=tiny_bert_dir)
    return folder


def test_a_folder_holds_a_residual_index_and_nothing_search_does_not_read(sample_folder):
    manifest = load_manifest(sample_folder)
    index = pfc.ColBERTIndex(sample_folder / COLBERT_DIR)
    assert index.compression == manifest.settings.compression.format == "residual2"
    files = {p.relative_to(sample_folder).as_posix() for p in sample_folder.rglob("*") if p.is_file()}
    assert not [f for f in files if f.endswith((".lock", ".faiss", ".f16.spill", "pairs.spill"))
                or f.rsplit("/", 1)[-1] == "vectors.f16"]  # (exact_vectors.f16: the exact outliers, read)
    assert not (sample_folder / COLBERT_DIR / "faiss").exists()
    # the pages of the dump, in order, with the passages each gave
    pages = [json.loads(line) for line in (sample_folder / "pages.jsonl").read_text().splitlines()]
    assert sum(p["passages"] for p in pages) == manifest.passages
    assert len(pages) == manifest.pages and sum(p["skip"] is None for p in pages) == manifest.articles
    assert manifest.codec == {"trained_on": manifest.passages, "encoded_since": 0}


def test_an_older_folder_is_refused_with_the_command_that_rebuilds_it(sample_folder, tmp_path):
    import shutil

    old = tmp_path / "old"
    shutil.copytree(sample_folder, old)
    values = json.loads((old / MANIFEST).read_text())
    values["version"] = 1
    (old / MANIFEST).write_text(json.dumps(values))
    with pytest.raises(ValueError, match=re.escape(f"pfc index {values['source']} {old} --overwrite")):
        load_manifest(old)


def results(folder: Path, colbert) -> list:
    searcher = Searcher(folder, colbert=colbert, warm=False)
    return [[(r["docno"], r["score"]) for r in searcher.search(q, system=system, k=10, explain=False)["results"]]
            for q in QUESTIONS for system in ("tfidf", "colbert", "hybrid")]


def test_update_equals_a_fresh_build_of_the_edited_dump_with_the_same_codec(sample_folder, tmp_path, colbert,
                                                                           tiny_bert_dir, count_calls):
    import shutil

    dump = edited_dump(tmp_path)
    folder = tmp_path / "wiki"
    shutil.copytree(sample_folder, folder)
    fresh = build_folder(dump, tmp_path / "fresh", colbert=colbert, checkpoint=tiny_bert_dir,
                         codec_from=sample_folder).manifest

    parsed = count_calls(passages_module, "read_article")
    encoded = count_calls(type(colbert), "encode_pieces")
    report = update_folder(dump, folder, colbert=colbert)
    assert parsed.calls == 2  # the changed page and the added one; nothing else is parsed
    new_passages = [p for p in dump_passages(dump) if p.page_id in (CHANGED, ADDED)]
    assert report.manifest.update == {"pages_reused": fresh.pages - 2, "pages_parsed": 2, "pages_removed": 1,
                                      "passages_reused": fresh.passages - len(new_passages),
                                      "passages_encoded": len(new_passages),
                                      "passages_removed": load_manifest(sample_folder).passages
                                      - (fresh.passages - len(new_passages))}
    assert encoded.calls >= 1
    assert report.manifest.codec == {"trained_on": load_manifest(sample_folder).passages,
                                     "encoded_since": len(new_passages)}

    updated = load_manifest(folder)
    for name in ("pages", "articles", "passages", "tokens", "skipped", "settings", "fingerprint", "source"):
        assert getattr(updated, name) == getattr(fresh, name), name
    for name in ("passages.jsonl", "pages.jsonl", "passages.offsets.npy"):
        assert (folder / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes(), name
    for name in ("codes.u16", "residuals.u8", "ivf_offsets.i64", "ivf_docs.i32", "token_ids.u16", "offsets.i64",
                 "parts.i64", "centroids.f16"):
        assert (folder / COLBERT_DIR / name).read_bytes() == (tmp_path / "fresh" / COLBERT_DIR / name).read_bytes(), \
            name
    assert results(folder, colbert) == results(tmp_path / "fresh", colbert)
    # and the edits are there: the new page is found, the deleted one is gone, the change is searchable
    docnos = {json.loads(line)["docno"] for line in (folder / "passages.jsonl").read_text().splitlines()}
    assert f"samplewiki-{ADDED}-0" in docnos and not any(d.startswith(f"samplewiki-{DELETED}-") for d in docnos)
    texts = pfc.TfidfIndex(folder / "tfidf").texts(list(range(updated.passages)))
    assert any("draft horse" in t for t in texts) and not any("size of a pony" in t for t in texts)


def test_a_failed_update_leaves_the_folder_as_it_was(sample_folder, tmp_path, colbert, monkeypatch):
    import shutil

    from pyterrier_fandom_colbert.index.writer import IndexWriter

    folder = tmp_path / "wiki"
    shutil.copytree(sample_folder, folder)
    before = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    def broken(self, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(IndexWriter, "add_coded", broken)
    with pytest.raises(OSError, match="disk full"):
        update_folder(edited_dump(tmp_path), folder, colbert=colbert)
    after = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edited_pages_current.xml", "wiki"]


@pytest.mark.parametrize("damaged", ["colbert/residuals.u8", "pages.jsonl"])
def test_an_update_refuses_a_damaged_folder_naming_the_file(sample_folder, tmp_path, colbert, damaged):
    import shutil

    folder = tmp_path / "wiki"
    shutil.copytree(sample_folder, folder)
    data = bytearray((folder / damaged).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / damaged).write_bytes(bytes(data))
    with pytest.raises(pfc.storage.DamagedFileError, match=damaged.split("/")[-1]):
        update_folder(edited_dump(tmp_path), folder, colbert=colbert)
    assert (folder / damaged).read_bytes() == bytes(data)  # refused before anything was written


def test_pfc_index_low_memory_is_set_before_the_build_and_refused_with_ray(monkeypatch, tmp_path, capsys):
    from pyterrier_fandom_colbert import heap
    from pyterrier_fandom_colbert.app import folder as folder_module

    calls = []
    monkeypatch.setattr(heap, "give_back_freed_memory", lambda: calls.append("low-memory"))

    def build_folder(*args, **kwargs):  # (stands in for the build: mallopt in a test worker would stay set)
        calls.append("build")
        raise ValueError("not built in this test")

    monkeypatch.setattr(folder_module, "build_folder", build_folder)
    assert main(["index", str(SAMPLE), str(tmp_path / "w"), "--low-memory", "--quiet"]) == 2
    assert calls == ["low-memory", "build"]
    calls.clear()
    assert main(["index", str(SAMPLE), str(tmp_path / "w"), "--quiet"]) == 2
    assert calls == ["build"]
    calls.clear()
    capsys.readouterr()
    assert main(["index", str(SAMPLE), str(tmp_path / "w"), "--low-memory", "--ray", "--quiet"]) == 2
    assert "--low-memory applies to a build's own process; with --ray" in capsys.readouterr().err
    assert calls == []


def test_update_refuses_what_it_cannot_do(sample_folder, tmp_path, colbert, tiny_bert_dir, capsys):
    records = [{"docno": "a", "text": "the lantern order keeps the flame"}]
    built = tmp_path / "records"
    build_folder(records, built, colbert=colbert, checkpoint=tiny_bert_dir)
    with pytest.raises(ValueError, match="not built from a dump file"):
        update_folder(SAMPLE, built, colbert=colbert)
    with pytest.raises(FileNotFoundError, match="dump not found"):
        update_folder(tmp_path / "missing.xml", sample_folder, colbert=colbert)
    assert main(["index", str(SAMPLE), str(sample_folder), "--update", "--overwrite", "--quiet"]) == 2
    assert "--update keeps the folder's own settings; leave out --overwrite" in capsys.readouterr().err
    assert main(["index", str(SAMPLE), str(tmp_path / "x"), "--faiss", "ivf", "--quiet"]) == 2
    assert "faiss='ivf' applies only to compression 'fp16'" in capsys.readouterr().err
    # a Ray build writes residual shards: an fp16 folder through Ray is refused, not built as another format
    assert main(["index", str(SAMPLE), str(tmp_path / "x"), "--ray", "--compression", "fp16", "--quiet"]) == 2
    assert "a Ray build writes a sharded index of residual codes; leave out --compression fp16" \
        in capsys.readouterr().err
    from pyterrier_fandom_colbert.app.folder import SearchSettings
    from pyterrier_fandom_colbert.app.sharded import RayBuild

    with pytest.raises(ValueError, match="a Ray build writes a sharded index of residual codes"):
        build_folder(records, tmp_path / "y", colbert=colbert, settings=SearchSettings(compression="fp16"),
                     ray=RayBuild())
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_update_refuses_another_wiki_an_older_dump_and_a_folder_without_its_pages(sample_folder, tmp_path, colbert,
                                                                                 capsys):
    """Issue 42: --update took any dump. Another wiki (siteinfo dbname or article URLs) is refused before anything
    is read, an older dump (a page at an earlier revision than the folder's) with nothing written; --force goes
    on. A folder without pages.jsonl is damaged, not "not built from a dump"."""
    import shutil

    small = small_dump(tmp_path / "small.xml").read_text(encoding="utf-8")
    other = tmp_path / "other_pages_current.xml"
    other.write_text(small.replace("<dbname>samplewiki</dbname>", "<dbname>otherwiki</dbname>"), encoding="utf-8")
    with pytest.raises(ValueError, match=r"database 'otherwiki'.*built from a dump of 'samplewiki'.*--force"):
        update_folder(other, sample_folder, colbert=colbert)
    moved = tmp_path / "moved_pages_current.xml"
    base = re.search(r"<base>(.*?)</base>", small).group(1)
    moved.write_text(small.replace(base, "https://elsewhere.example.org/wiki/Main_Page"), encoding="utf-8")
    with pytest.raises(ValueError, match=r"articles under https://elsewhere.example.org/wiki/.*--force"):
        update_folder(moved, sample_folder, colbert=colbert)
    assert main(["index", str(other), str(sample_folder), "--update", "--quiet"]) == 2
    assert "database 'otherwiki'" in capsys.readouterr().err
    folder = tmp_path / "wiki"
    shutil.copytree(sample_folder, folder)
    before = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    older = tmp_path / "older_pages_current.xml"
    older.write_text(small.replace("<id>48286</id>", "<id>48000</id>"), encoding="utf-8")
    with pytest.raises(ValueError, match=r"older than .*wiki: its page .* is at revision 48000, the folder's at "
                                         r"48286.*--force.*nothing was written"):
        update_folder(older, folder, colbert=colbert)
    assert {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["small.xml", "other_pages_current.xml", "moved_pages_current.xml", "older_pages_current.xml", "wiki"])
    report = update_folder(older, folder, colbert=colbert, force=True)  # the page at 48000 parsed again
    assert report.manifest.update["pages_parsed"] == 1 and report.manifest.update["pages_reused"] == len(KEEP) - 1
    (folder / "pages.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match=r"pages.jsonl \(the page records .*\) is missing; rebuild it with"):
        update_folder(older, folder, colbert=colbert)


def test_search_settings_give_each_format_its_own_retriever_options(tmp_path):
    from pyterrier_fandom_colbert.app.folder import (
        CompressionSpec,
        Fp16Options,
        Manifest,
        ResidualOptions,
        SearchSettings,
    )

    assert SearchSettings().retriever == ResidualOptions() and SearchSettings().retriever.to_retriever_kwargs() == {}
    assert SearchSettings.of(ndocs=4096, nscore=1024).retriever.to_retriever_kwargs() == {"ndocs": 4096,
                                                                                        "nscore": 1024}
    assert SearchSettings.of("fp16", k_hat=32).retriever.to_retriever_kwargs() == {"k_hat": 32, "faiss": "ivf",
                                                                                  "refine": 1}
    with pytest.raises(ValueError, match="compression='residual3'"):
        SearchSettings.of("residual3")
    with pytest.raises(ValueError, match="nscore=0; expected a positive integer"):
        SearchSettings.of(nscore=0)
    # the retriever's own checks: a kind that refuses refine, a kind that does not exist
    with pytest.raises(ValueError, match=r"refine=4; above 1 applies only to faiss in"):
        SearchSettings.of("fp16", faiss="flat", refine=4)
    with pytest.raises(ValueError, match=r"faiss='hnsw' is not supported"):
        SearchSettings.of("fp16", faiss="hnsw")
    # another format's options are refused, naming them, not ignored
    with pytest.raises(ValueError, match=r"^faiss='flat' applies only to compression 'fp16': a residual2 index .*"
                                         r"\(its retriever options: ndocs, nscore\)$"):
        SearchSettings.of(faiss="flat")
    with pytest.raises(ValueError, match=r"^ndocs=512 applies only to a residual compression: an fp16 index"):
        SearchSettings.of("fp16", ndocs=512)
    with pytest.raises(ValueError, match=r"k_hat=64, faiss='ivf', refine=1 apply only to compression 'fp16'"):
        SearchSettings(compression=CompressionSpec("residual1"), retriever=Fp16Options())
    # the new shape round-trips through JSON, and its bytes are the objects' own
    for settings in (SearchSettings(), SearchSettings.of(ndocs=512), SearchSettings.of("fp16", faiss="flat"),
                     SearchSettings.of("residual4", exact_share=0.0, nscore=7),
                     SearchSettings(compression=CompressionSpec("residual2", num_centroids=64, exact_share=0.05))):
        values = json.loads(json.dumps(settings.to_dict()))
        assert values["compression"] == settings.compression.to_dict() and "exact_share" not in values
        assert values["retriever"] == settings.retriever.to_dict()
        assert SearchSettings.from_dict(values) == settings
    assert json.dumps(SearchSettings().to_dict(), sort_keys=True) == NEW_DEFAULT
    # bad values in a manifest name the field and the file
    manifest = {"source": "records", "name": "x", "checkpoint": None, "fingerprint": "f", "pages": 1, "articles": 1,
                "passages": 1, "tokens": 3, "seconds": {"total": 1.0}, "bytes": 10, "settings": None}
    where = tmp_path / "manifest.json"
    for settings, message in [
            ({"compression": {"format": "residual2"}, "retriever": {"faiss": "flat"}},
             "faiss='flat' applies only to compression 'fp16'"),
            ({"compression": {"format": "fp16"}, "retriever": {"k_hat": 0}}, "k_hat=0; expected a positive"),
            ({"compression": {"format": "residual2", "exact_share": 2.0}}, "exact_share=2.0; expected a share"),
            ({"compression": "fp16", "k_hat": -1}, "k_hat=-1; expected a positive"),
            ({"compression": "residual3"}, "compression='residual3'; expected one of"),
            ({"compression": {"format": "fp16"}, "retriever": {"k_hat": 8, "lam": 2}},
             r"unknown Fp16Options field\(s\) \['lam'\]")]:
        with pytest.raises(ValueError, match=f"^{re.escape(str(where))}: {message}"):
            Manifest.from_dict({**manifest, "settings": settings}, source=where)


def test_an_fp16_folder_updates_to_what_a_fresh_build_makes(tmp_path, colbert, tiny_bert_dir):
    from pyterrier_fandom_colbert.app.folder import SearchSettings

    settings = SearchSettings(compression="fp16")
    (tmp_path / "first").mkdir()
    folder = tmp_path / "wiki"
    build_folder(small_dump(tmp_path / "first" / "small.xml"), folder, colbert=colbert, checkpoint=tiny_bert_dir,
                 settings=settings)
    dump = edited_dump(tmp_path)
    report = update_folder(dump, folder, colbert=colbert)
    assert report.manifest.update["pages_parsed"] == 2 and report.manifest.codec is None
    # a plain fresh build encodes in batches, whose padding changes the vectors' last bits: equal up to that
    build_folder(dump, tmp_path / "fresh", colbert=colbert, checkpoint=tiny_bert_dir, settings=settings)
    for name in ("token_ids.i32", "offsets.i64", "parts.i64"):
        assert (folder / COLBERT_DIR / name).read_bytes() == (tmp_path / "fresh" / COLBERT_DIR / name).read_bytes()
    mine, theirs = (np.fromfile(f / COLBERT_DIR / "vectors.f16", dtype=np.float16).astype(np.float32)
                    for f in (folder, tmp_path / "fresh"))
    np.testing.assert_allclose(mine, theirs, atol=2e-3)
    assert not list(folder.rglob("*.lock"))
    for got, expected in zip(results(folder, colbert), results(tmp_path / "fresh", colbert)):
        assert [d for d, _ in got] == [d for d, _ in expected]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], atol=2e-3)


#: ``settings`` of manifests written before ``SearchSettings`` held a ``CompressionSpec`` and retriever options:
#: flat, as ``SearchSettings().to_dict()`` wrote them (residual2 built from Python before the one exact_share
#: default, fp16, and residual2 by ``pfc index`` or ``build_folder()`` since), with what each reads as
FLAT_SETTINGS = [
    ('{"compression": "residual2", "faiss": "ivf", "fusion": {"depth": 100, "normalise": "zscore", "weight": 0.2}, '
     '"k_hat": 64, "k_tilde": 2, "ndocs": null, "nscore": null, "refine": 1}', ("residual2", 0.0)),
    ('{"compression": "fp16", "faiss": "ivf", "fusion": {"depth": 100, "normalise": "zscore", "weight": 0.2}, '
     '"k_hat": 64, "k_tilde": 2, "ndocs": null, "nscore": null, "refine": 1}', ("fp16", None)),
    ('{"compression": "residual2", "exact_share": 0.01, "faiss": "ivf", "fusion": {"depth": 100, "normalise": '
     '"zscore", "weight": 0.2}, "k_hat": 64, "k_tilde": 2, "ndocs": null, "nscore": null, "refine": 1}',
     ("residual2", None)),
]
#: ``SearchSettings().to_dict()`` now: the compression spec and the retriever options, each as its own object
NEW_DEFAULT = ('{"compression": {"exact_share": 0.01, "format": "residual2", "niter": 4, "num_centroids": null, '
               '"sample": null, "seed": 0}, "fusion": {"depth": 100, "normalise": "zscore", "weight": 0.2}, '
               '"k_tilde": 2, "retriever": {"ndocs": null, "nscore": null}}')


def test_exact_share_has_one_default_and_flat_manifests_read_as_built(tmp_path):
    from pyterrier_fandom_colbert.app.folder import DEFAULT_EXACT_SHARE, Manifest, SearchSettings

    # build_folder() and `pfc index` (which passes the share it resolves) build with the same settings
    assert SearchSettings() == SearchSettings.of("residual2", exact_share=DEFAULT_EXACT_SHARE)
    assert SearchSettings().compression.exact_share == DEFAULT_EXACT_SHARE > 0
    assert SearchSettings.of("fp16") == SearchSettings.of("fp16", exact_share=0.0) == SearchSettings(compression="fp16")
    with pytest.raises(ValueError, match=r"exact_share=0.01 needs a residual format"):
        SearchSettings.of("fp16", exact_share=0.01)
    with pytest.raises(ValueError, match=r"exact_share=1.5; expected a share"):
        SearchSettings.of(exact_share=1.5)
    for text, (fmt, share) in FLAT_SETTINGS:
        values = json.loads(text)
        expected = SearchSettings.of(fmt, exact_share=share)  # the format's default options, as built
        assert SearchSettings.from_dict(values) == expected
        manifest = {"source": "records", "name": "x", "checkpoint": None, "fingerprint": "f", "pages": 1,
                    "articles": 1, "passages": 1, "tokens": 3, "seconds": {"total": 1.0}, "bytes": 10,
                    "settings": values, "skipped": {}, "format": "pfc-search-folder", "version": 3, "reader": None,
                    "files": None, "precision": "float32", "passage_config": None, "codec": None, "update": None}
        assert Manifest.from_dict(manifest).settings == expected
        assert Manifest.from_dict(manifest).to_dict()["settings"] == expected.to_dict()  # written in the new shape
    # main's `SearchSettings().to_dict()` reads as today's default
    assert SearchSettings.from_dict(json.loads(FLAT_SETTINGS[2][0])) == SearchSettings()
    # the other format's options, which a flat manifest always carried and its search never read, are dropped
    flat = {**json.loads(FLAT_SETTINGS[0][0]), "faiss": "flat", "refine": 4}
    assert SearchSettings.from_dict(flat) == SearchSettings.of(exact_share=0.0)


def test_a_folder_with_a_sealed_flat_manifest_opens_verifies_and_searches_as_before(sample_folder, tmp_path,
                                                                                   colbert):
    """A folder built before the settings' new shape: its sealed manifest with flat settings is read, verified
    and searched as the same folder with the new shape."""
    import shutil

    from pyterrier_fandom_colbert.app.folder import verify_folder
    from pyterrier_fandom_colbert.storage import read_json, sealed, write_json

    folder = tmp_path / "old"
    shutil.copytree(sample_folder, folder)
    values = read_json(folder / "manifest.json")
    assert values["settings"]["compression"] == {"exact_share": 0.01, "format": "residual2", "niter": 4,
                                                 "num_centroids": None, "sample": None, "seed": 0}
    values["settings"] = json.loads(FLAT_SETTINGS[2][0])
    write_json(folder / "manifest.json", sealed(values))
    assert load_manifest(folder) == load_manifest(sample_folder)
    assert verify_folder(folder)["files"] == verify_folder(sample_folder)["files"]
    assert main(["verify", str(folder)]) == 0
    assert results(folder, colbert) == results(sample_folder, colbert)


def test_a_folder_with_exact_outliers_updates_to_what_a_build_with_its_codec_makes(tmp_path, colbert, tiny_bert_dir,
                                                                                  capsys):
    from pyterrier_fandom_colbert.app.folder import SearchSettings

    settings = SearchSettings.of(exact_share=0.05)
    (tmp_path / "first").mkdir()
    folder = tmp_path / "wiki"
    build_folder(small_dump(tmp_path / "first" / "small.xml"), folder, colbert=colbert, checkpoint=tiny_bert_dir,
                 settings=settings)
    before = pfc.ColBERTIndex(folder / COLBERT_DIR)
    assert before.meta.exact_rows > 0 and before.codec.exact_above is not None
    dump = edited_dump(tmp_path)
    report = update_folder(dump, folder, colbert=colbert)
    assert report.manifest.settings.compression.exact_share == 0.05  # kept, as every setting
    fresh = tmp_path / "fresh"
    build_folder(dump, fresh, colbert=colbert, checkpoint=tiny_bert_dir, settings=settings,
                 codec_from=tmp_path / "wiki")
    after = pfc.ColBERTIndex(folder / COLBERT_DIR)
    assert after.meta.exact_rows == pfc.ColBERTIndex(fresh / COLBERT_DIR).meta.exact_rows > 0
    for name in ("codes.u16", "residuals.u8", "exact_rows.u32", "offsets.i64"):
        assert (folder / COLBERT_DIR / name).read_bytes() == (fresh / COLBERT_DIR / name).read_bytes(), name
    # the kept pages' exact vectors are those of the first build, whose batches padded them differently (the
    # fp16 folders' test above): equal up to their last bits, as the scores
    mine, theirs = (np.fromfile(f / COLBERT_DIR / "exact_vectors.f16", dtype=np.float16).astype(np.float32)
                    for f in (folder, fresh))
    np.testing.assert_allclose(mine, theirs, atol=2e-3)
    for got, expected in zip(results(folder, colbert), results(fresh, colbert)):
        assert [d for d, _ in got] == [d for d, _ in expected]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], atol=2e-3)
    with pytest.raises(ValueError, match=r"its codec stores exact outliers, but exact_share=0\.0"):
        build_folder(dump, tmp_path / "other", colbert=colbert, codec_from=folder,
                     settings=SearchSettings.of(exact_share=0.0))
    # pfc index: --exact-share checked before any model loads; fp16 has none to store
    assert main(["index", str(SAMPLE), str(tmp_path / "x"), "--exact-share", "1.5", "--quiet"]) == 2
    assert "exact_share=1.5; expected a share of the tokens in [0, 1)" in capsys.readouterr().err
    assert main(["index", str(SAMPLE), str(tmp_path / "x"), "--exact-share", "0.01", "--compression", "fp16",
                 "--quiet"]) == 2
    # (the rule SearchSettings applies from Python too: one home, one message)
    assert "exact_share=0.01 needs a residual format; compression='fp16'" in capsys.readouterr().err
    assert main(["index", str(SAMPLE), str(folder), "--update", "--exact-share", "0.02", "--quiet"]) == 2
    assert "leave out --exact-share" in capsys.readouterr().err
