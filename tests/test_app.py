"""The `pfc` search engine: the CLI end to end on the bundled sample wiki, the search folder's build guarantees,
the hybrid against a hand-made fusion, the JSON API over HTTP on 127.0.0.1, escaping of hostile text, and the
page in a real headless Chromium (skipped when none is installed)."""
import contextlib
import dataclasses
import itertools
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.app.cli import main
from pyterrier_fandom_colbert.app.folder import build_folder, is_search_folder, load_manifest, remove_stale_builds
from pyterrier_fandom_colbert.app.printing import format_results
from pyterrier_fandom_colbert.app.search import Searcher
from pyterrier_fandom_colbert.data.passages import dump_passages
from pyterrier_fandom_colbert.display import terminal_text

SAMPLE = Path(pfc.__file__).parent / "data" / "sample" / "samplewiki_pages_current.xml"
QUESTION = "who founded Hollowlight Studios?"
#: how long the server and browser tests wait for a start, an answer, a page or a stop: only a hang should fail
#: them, never a slow (loaded, 2-core) machine; pytest's own timeout stops a real hang
PATIENCE_S = 300.0
HOSTILE = [
    {"docno": "samplewiki-1-0", "title": "<script>window.__pwned = 1</script>Zorblax",
     "url": "javascript:window.__pwned = 3", "section": "<b onmouseover=alert(1)>Lore</b>",
     "text": "Zorblax <img src=x onerror=\"window.__pwned = 2\"> rules the moon & \"stars\" </p><script>"
             "window.__pwned = 4</script> \x1b[31mred\x1b[0m forever."},
]

# a passage longer than one ColBERT window (the indexer stores it whole, as windows): its last words are explained too
LONG = {"docno": "samplewiki-999-0", "title": "Quillmere", "url": "https://example.org/Quillmere", "section": "",
        "page_id": 999,
        "text": " ".join(f"Ferry {i} leaves the Quillmere pier at dawn with barrels of salt and rope."
                         for i in range(30)) + " The lighthouse keeper of Quillmere was Odalys Brenn."}


def sample_records():
    return [{"docno": p.doc_id, "text": p.text, "title": p.title, "url": p.url, "section": p.section,
             "page_id": p.page_id} for p in dump_passages(SAMPLE)]


# -- the CLI ------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_cli_index_then_search_json(tmp_path, tiny_bert_dir, capsys):
    folder = tmp_path / "wiki"
    assert main(["index", str(SAMPLE), str(folder), "--checkpoint", tiny_bert_dir, "--quiet"]) == 0
    summary = capsys.readouterr().out
    reference = {r["docno"]: r for r in sample_records()}
    manifest = load_manifest(folder)
    assert manifest.passages == len(reference) and f"{len(reference):,} passages" in summary
    assert manifest.articles == len({r["page_id"] for r in reference.values()})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wiki"]  # no temporary folder left beside it
    # residual2 with its worst-coded tokens also stored exactly, as recorded
    from pyterrier_fandom_colbert.app.folder import DEFAULT_EXACT_SHARE, CompressionSpec

    index = pfc.ColBERTIndex(folder / "colbert")
    assert manifest.settings.compression == CompressionSpec("residual2", exact_share=DEFAULT_EXACT_SHARE)
    assert index.meta.exact_rows > 0 and index.codec.exact_above is not None

    assert main(["search", str(folder), QUESTION, "--json", "-k", "4", "--system", "hybrid"]) == 0
    response = json.loads(capsys.readouterr().out)
    results = response["results"]
    assert [r["rank"] for r in results] == [1, 2, 3, 4]
    assert all(a["score"] >= b["score"] for a, b in itertools.pairwise(results))
    for r in results:  # each result is the indexed passage, with its page's title and URL
        source = reference[r["docno"]]
        assert (r["text"], r["title"], r["url"], r["section"]) == (source["text"], source["title"], source["url"],
                                                                    source["section"])
        start, end = r["answer"]
        words = [(w[0], w[1]) for w in r["words"]]
        assert 0 <= start < end <= len(r["text"])
        assert start in [s for s, _ in words] and end in [e for _, e in words]  # whole words

    # the same search in plain text: the answer span of each result appears «quoted»
    assert main(["search", str(folder), QUESTION, "-k", "4", "--color", "never"]) == 0
    text = capsys.readouterr().out
    for r in results:
        start, end = r["answer"]
        assert f"«{terminal_text(r['text'][start:end])}»" in text
    assert "\x1b[" not in text

    # unquoted words are one question; 10 results by default, as on the page; --read-top 0: the study's answer
    assert main(["search", str(folder), *QUESTION.split(), "--json", "--read-top", "0"]) == 0
    response = json.loads(capsys.readouterr().out)
    assert response["query"] == " ".join(QUESTION.split()) and response["answer"] is None
    assert len(response["results"]) == min(10, len(reference))
    assert main(["search", str(folder), QUESTION, "--read-top", "99"]) == 2
    assert "read_top=99" in capsys.readouterr().err

    # a bad query: a message and exit status 2, no traceback
    assert main(["search", str(folder), "   "]) == 2
    err = capsys.readouterr().err
    assert "query is empty" in err and "Traceback" not in err


def test_cli_delegates_compare_and_train(capsys):
    for command, prog in (("compare", "pfc-compare"), ("train", "pfc-train")):
        with pytest.raises(SystemExit) as stop:
            main([command, "--help"])
        assert stop.value.code == 0
        assert prog in capsys.readouterr().out


# -- the hybrid's fusion ------------------------------------------------------------------------------------------

def _fixed_run(rows):
    import pyterrier as pt

    frame = pd.DataFrame(rows, columns=["qid", "docno", "score"])
    frame["rank"] = frame.groupby("qid")["score"].rank(ascending=False, method="first").astype(int) - 1
    return pt.Transformer.from_df(frame)


def test_hybrid_system_is_pfc_hybrid_with_the_folders_settings():
    from pyterrier_fandom_colbert.app.fusion_settings import FusionSettings, hybrid_system

    a = _fixed_run([("1", "x", 9.0), ("1", "y", 5.0), ("1", "z", 1.0), ("2", "x", 2.0)])
    b = _fixed_run([("1", "z", 0.9), ("1", "w", 0.7), ("1", "y", 0.5), ("2", "w", 0.3)])
    queries = pd.DataFrame({"qid": ["1", "2", "3"], "query": ["one", "two", "three"], "extra": [1, 2, 3]})
    hybrid = hybrid_system(a, b, FusionSettings(weight=0.25))
    assert isinstance(hybrid, pfc.Hybrid) and hybrid.weight == 0.25 and hybrid.normalise == "zscore"
    got = hybrid(queries)
    scores = {(q, d): s for q, d, s in zip(got["qid"], got["docno"], got["score"])}
    # query 1: z-scores (population std) a = x +c, y 0, z -c; b = z +c, w 0, y -c, c = sqrt(3/2); a document one
    # system did not return gets that system's lowest z (-c); query 2: one result each, z 0
    c = np.sqrt(1.5)
    assert scores == pytest.approx({("1", "x"): 0.25 * c - 0.75 * c, ("1", "y"): -0.75 * c,
                                    ("1", "z"): -0.25 * c + 0.75 * c, ("1", "w"): -0.25 * c,
                                    ("2", "x"): 0.0, ("2", "w"): 0.0})
    assert got[got["qid"] == "1"].sort_values("rank")["docno"].tolist() == ["z", "w", "x", "y"]
    assert sorted(got["extra"].tolist()) == [1] * 4 + [2] * 2  # query columns kept; query 3 matched nothing
    reference = pfc.Hybrid(a, b, weight=0.25)(queries)  # the package's fusion, called directly
    pd.testing.assert_frame_equal(got.sort_values(["qid", "docno"]).reset_index(drop=True),
                                  reference.sort_values(["qid", "docno"]).reset_index(drop=True))
    shallow = hybrid_system(a, b, FusionSettings(depth=1))(queries)  # top 1 of each system
    assert set(zip(shallow["qid"], shallow["docno"])) == {("1", "x"), ("1", "z"), ("2", "x"), ("2", "w")}
    minmax = hybrid_system(a, b, FusionSettings(weight=0.5, normalise="minmax"))(queries)
    assert dict(zip(minmax[minmax["qid"] == "1"]["docno"], minmax[minmax["qid"] == "1"]["score"])) == \
        pytest.approx({"x": 0.5, "y": 0.25, "z": 0.5, "w": 0.25})
    empty = hybrid_system(a, b, FusionSettings())(queries.iloc[:0])
    assert len(empty) == 0 and {"docno", "score", "rank", "extra"} <= set(empty.columns)
    settings = FusionSettings()
    assert hybrid_system(a, b, settings) == hybrid_system(a, b, settings)
    assert hybrid_system(a, b, settings) != hybrid_system(b, a, settings)


@pytest.mark.parametrize("bad, message", [({"weight": -0.1}, "weight=-0.1"), ({"normalise": "rank"}, "normalise"),
                                          ({"depth": 0}, "depth=0")])
def test_fusion_settings_refuse_bad_values(bad, message):
    from pyterrier_fandom_colbert.app.fusion_settings import FusionSettings

    with pytest.raises(ValueError, match=message):
        FusionSettings(**bad)


def test_a_folder_with_the_former_fusion_settings_is_refused_with_the_rebuild_command(tmp_path):
    from pyterrier_fandom_colbert.app.folder import FORMAT, MANIFEST, VERSION, Manifest

    manifest = Manifest(source="irds:fandom-qa/sample", name="sample", checkpoint=None, fingerprint="f", pages=1,
                        articles=1, passages=1, tokens=1, seconds={}, bytes=1).to_dict()
    assert manifest["settings"]["fusion"] == {"weight": 0.2, "normalise": "zscore", "depth": 100}
    assert (manifest["format"], manifest["version"]) == (FORMAT, VERSION)
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / MANIFEST).write_text(json.dumps(manifest))
    assert load_manifest(tmp_path / "new").settings.fusion.weight == 0.2
    manifest["settings"]["fusion"] = {"method": "linear", "weights": [0.5, 0.5], "rrf_k": 60.0, "depth": 100}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ValueError) as err:
        load_manifest(tmp_path / "old")
    message = str(err.value)
    assert "former rule (linear, weights [0.5, 0.5])" in message and "pfc.Hybrid" in message
    assert f"pfc index irds:fandom-qa/sample {tmp_path / 'old'} --overwrite" in message


# -- building a folder ---------------------------------------------------------------------------------------------

def test_interrupted_build_leaves_nothing(tmp_path, tiny_bert_dir):
    def records():
        yield from sample_records()[:20]
        raise RuntimeError("disk on fire")

    colbert = pfc.ColBERT.from_pretrained(tiny_bert_dir)
    with pytest.raises(RuntimeError, match="disk on fire"):
        build_folder(records(), tmp_path / "wiki", colbert=colbert, checkpoint=tiny_bert_dir)
    assert list(tmp_path.iterdir()) == []


def test_stale_build_of_a_dead_process_is_removed(tmp_path):
    # the kernel's pid limit: a pid no process can have (the pid of an exited process may be given to a new one)
    dead = int(Path("/proc/sys/kernel/pid_max").read_text())
    stale, foreign, live = (tmp_path / ".wiki.building-aaaa", tmp_path / ".wiki.building-bbbb",
                            tmp_path / ".wiki.building-cccc")
    for folder in (stale, foreign, live):
        folder.mkdir()
    (stale / "build.owner").write_text(f"{socket.gethostname()} {dead}\n")
    (live / "build.owner").write_text(f"{socket.gethostname()} {os.getpid()}\n")
    remove_stale_builds(tmp_path / "wiki")
    assert sorted(p.name for p in tmp_path.iterdir()) == [foreign.name, live.name]


def test_overwrite_only_replaces_a_search_folder(tmp_path, tiny_bert_dir):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "diary.txt").write_text("keep me")
    colbert = pfc.ColBERT.from_pretrained(tiny_bert_dir)
    with pytest.raises(ValueError, match="not a search folder"):
        build_folder(sample_records()[:5], mine, colbert=colbert, checkpoint=tiny_bert_dir, overwrite=True)
    assert (mine / "diary.txt").read_text() == "keep me" and not is_search_folder(mine)


def test_a_build_killed_while_checksumming_is_removed_by_the_next_build(tmp_path, tiny_bert_dir, monkeypatch):
    """kill -9 while the manifest's checksums are computed: the temporary folder must still name its owner, so that
    the next build of the target removes it once that process is gone (before, the owner record was gone by then)."""
    from pyterrier_fandom_colbert.app.folder import build as build_module

    dead = int(Path("/proc/sys/kernel/pid_max").read_text())
    killed = tmp_path / ".wiki.building-killed000"
    real = build_module.build_manifest

    def checksumming(folder, names):  # a snapshot of the folder as a kill at this moment leaves it
        if not killed.exists():  # (the first manifest: a new folder is published pending, then completed)
            shutil.copytree(folder, killed)
            host, _ = (killed / "build.owner").read_text().split()
            (killed / "build.owner").write_text(f"{host} {dead}\n")
        return real(folder, names)

    monkeypatch.setattr(build_module, "build_manifest", checksumming)
    report = build_folder(sample_records()[:5], tmp_path / "wiki", colbert=pfc.ColBERT.from_pretrained(tiny_bert_dir),
                          checkpoint=tiny_bert_dir)
    assert not (tmp_path / "wiki" / "build.owner").exists()
    assert "build.owner" not in report.manifest.files
    assert killed.is_dir()
    remove_stale_builds(tmp_path / "wiki")  # what the next build of the target does first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wiki"]


def test_a_ray_build_that_lost_shards_says_nothing_was_kept(tmp_path, tiny_bert_dir, monkeypatch):
    """The Ray writer's death: the sharded build's own message promises a resumable work folder, which pfc index
    deletes with its temporary folder; the error it shows says so, and nothing is left behind."""
    from pyterrier_fandom_colbert.app.sharded import RayBuild, ShardsLostError
    from pyterrier_fandom_colbert.distributed import build as ray_build

    class DyingWriters:
        def __init__(self, path, *args, **kwargs):
            self.path = Path(path)

        def index(self, passages):
            work = self.path.parent / f".{self.path.name}.sharded-build"
            work.mkdir()
            raise ray_build.LostShardsError("shards [1] ... run the same build again", lost={1: "RayActorError: x"},
                                            work=work)

    monkeypatch.setattr(ray_build, "ShardedIndexer", DyingWriters)
    with pytest.raises(ShardsLostError, match=r"lost shards \[1\].*nothing was written to the search folder.*afresh"):
        build_folder(sample_records()[:5], tmp_path / "wiki", colbert=pfc.ColBERT.from_pretrained(tiny_bert_dir),
                     ray=RayBuild(shards=2))
    assert list(tmp_path.iterdir()) == []


def cli_error(capsys, argv) -> str:
    """The one stderr line of a refused ``pfc`` command (exit status 2, no traceback)."""
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


def test_pfc_index_names_what_is_wrong_with_its_paths_and_options(tmp_path, capsys):
    (tmp_path / "a-file").write_text("x")
    assert "is a folder, not a dump file" in cli_error(capsys, ["index", str(tmp_path), str(tmp_path / "w")])
    line = cli_error(capsys, ["index", str(SAMPLE), str(tmp_path / "a-file" / "deeper" / "wiki")])
    assert f"{tmp_path / 'a-file'} is a file, not a folder" in line
    assert "--shards apply to a Ray build; add --ray" in cli_error(capsys, ["index", str(SAMPLE), str(tmp_path / "w"),
                                                                           "--shards", "4"])
    assert "--force applies to --update" in cli_error(capsys, ["index", str(SAMPLE), str(tmp_path / "w"), "--force"])
    started = time.perf_counter()
    assert "999.1.1.1 is not an IP address" in cli_error(capsys, ["index", str(SAMPLE), str(tmp_path / "w"), "--ray",
                                                                  "999.1.1.1:6379"])
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    line = cli_error(capsys, ["index", str(SAMPLE), str(tmp_path / "w"), "--ray", f"127.0.0.1:{port}"])
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}" in line
    assert time.perf_counter() - started < 15  # (ray.init would retry for minutes)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_a_newer_folder_or_reader_asks_for_a_newer_package(tmp_path):
    from pyterrier_fandom_colbert.app.folder import MANIFEST, VERSION
    from pyterrier_fandom_colbert.data.passages import READER_VERSION

    folder = tmp_path / "wiki"
    folder.mkdir()
    values = {"source": "/data/x_pages_current.xml", "name": "x", "format": "pfc-search-folder"}
    (folder / MANIFEST).write_text(json.dumps({**values, "version": VERSION + 1}))
    with pytest.raises(ValueError, match=rf"version {VERSION + 1} search folder, newer than.*upgrade"):
        load_manifest(folder)
    (folder / MANIFEST).write_text(json.dumps({**values, "version": VERSION, "reader": READER_VERSION + 1}))
    with pytest.raises(ValueError, match=rf"newer dump reader \(version {READER_VERSION + 1}; this package's is "
                                         rf"{READER_VERSION}\): upgrade"):
        load_manifest(folder)


# -- searching -----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def folder(tmp_path_factory, tiny_bert_dir):
    """The sample wiki's passages plus a hostile one, indexed with the tiny random BERT."""
    out = tmp_path_factory.mktemp("app") / "wiki"
    build_folder(sample_records() + HOSTILE + [LONG], out, colbert=pfc.ColBERT.from_pretrained(tiny_bert_dir),
                 checkpoint=tiny_bert_dir)
    return out


@pytest.fixture(scope="module")
def searcher(folder):
    """The study's short answers and confidence (no reader)."""
    return Searcher(folder, reader=None)


@pytest.fixture(scope="module")
def reading_searcher(folder, searcher, tiny_reader_dir):
    """The reader's answers: a random reader over the tiny BERT, reading the top 3 results."""
    return Searcher(folder, colbert=searcher.colbert, warm=False, reader=tiny_reader_dir, read_top=3)


@pytest.mark.parametrize("argv, expected", [
    ([], "auto"),  # the default: bfloat16 where native, resolved by the encoder and recorded in the manifest
    (["--precision", "float32"], "float32"),
    (["--ray"], "float32"),  # a Ray build's workers encode in float32, so that is what auto records
    (["--ray", "--precision", "bfloat16"], "bfloat16"),
])
def test_cli_index_encodes_in_auto_precision_by_default(tmp_path, monkeypatch, argv, expected, capsys):
    from pyterrier_fandom_colbert.app import folder as folder_module

    given = {}

    class Report:
        def summary(self):
            return "built"

    def build(source, folder, **kwargs):
        given.update(kwargs)
        return Report()

    monkeypatch.setattr(folder_module, "build_folder", build)
    assert main(["index", str(SAMPLE), str(tmp_path / "wiki"), "--quiet", *argv]) == 0
    assert given["cpu_precision"] == expected and capsys.readouterr().out == "built\n"


@pytest.mark.parametrize("recorded, native, expected", [
    ("bfloat16", True, "bfloat16"), ("bfloat16", False, "float32"), ("float32", True, "float32"),
])
def test_searcher_encodes_queries_in_the_folders_precision_where_native(folder, recorded, native, expected,
                                                                        monkeypatch):
    import dataclasses

    from pyterrier_fandom_colbert.model import colbert as colbert_module

    monkeypatch.setattr(colbert_module, "native_bf16", lambda: native)
    searcher = Searcher(folder, reader=None, warm=False)
    searcher.manifest = dataclasses.replace(searcher.manifest, precision=recorded)
    assert searcher.colbert.cpu_precision == expected


def test_pt_get_text_reads_a_folders_passages_from_its_tfidf_index(folder):
    """A search folder keeps its passages' text in its TF-IDF index: PyTerrier's text source for the folder."""
    import pyterrier as pt

    from pyterrier_fandom_colbert.app.folder import PassageTable

    table = PassageTable(folder)
    docnos = [table.get(i)["docno"] for i in range(len(table))][::-1]
    table.close()
    given = {r["docno"]: r["text"] for r in sample_records() + HOSTILE + [LONG]}
    assert set(docnos) == set(given)
    out = pt.text.get_text(pfc.TfidfIndex(folder / "tfidf"), "text")(pd.DataFrame({"qid": "q", "docno": docnos}))
    assert out["text"].tolist() == [given[d] for d in docnos]


def test_hybrid_is_pfc_hybrid_of_both_systems(searcher):
    import pyterrier as pt

    from pyterrier_fandom_colbert.fusion import DEFAULT_WEIGHT

    frame = pd.DataFrame({"qid": ["q"], "query": [QUESTION]})
    fusion = searcher.manifest.settings.fusion
    assert (fusion.weight, fusion.normalise, fusion.depth) == (DEFAULT_WEIGHT, "zscore", 100)
    runs = [pt.Transformer.from_df(run[run["rank"] < fusion.depth])  # each system's top 100
            for run in (searcher.pipelines[name](frame) for name in ("tfidf", "colbert"))]
    expected = pfc.Hybrid(*runs, weight=fusion.weight)(frame).sort_values("rank").head(10)
    got = searcher.search(QUESTION, system="hybrid", k=10, explain=False)["results"]
    assert [r["docno"] for r in got] == expected["docno"].tolist()
    assert np.allclose([r["score"] for r in got], expected["score"], atol=1e-4)


def test_results_carry_a_short_answer_inside_the_highlight_and_a_calibrated_confidence(searcher):
    from pyterrier_fandom_colbert.explain.answer import MAX_ANSWER_WORDS

    response = searcher.search(QUESTION, system="colbert", k=5)
    assert response["nothing_relevant"] == searcher.calibration.nothing_relevant(
        [r["confidence"] for r in response["results"]])
    for r in response["results"]:
        start, end = r["short_answer"]
        assert r["answer"][0] <= start < end <= r["answer"][1]  # inside the long highlight
        inside = [w for w in r["words"] if start <= w[0] and w[1] <= end]
        assert 1 <= len(inside) <= MAX_ANSWER_WORDS
        assert inside[0][0] == start and inside[-1][1] == end  # whole words
        # the similarity is the ColBERT score (MaxSim over the stored vectors) per scoring query vector
        per_vector = r["score"] if searcher.colbert.config.reduction == "mean" else r["score"] / len(r["query_tokens"])
        assert r["similarity"] == pytest.approx(per_vector, abs=2e-3)
        best = max(other["similarity"] for other in response["results"])
        assert r["confidence"] == pytest.approx(searcher.calibration.confidence(r["similarity"], best), abs=1e-3)


def test_nothing_relevant_follows_the_calibration_threshold(folder, searcher):
    from pyterrier_fandom_colbert.app.search import NOTHING_RELEVANT
    from pyterrier_fandom_colbert.explain.answer import AnswerCalibration

    best = max(r["similarity"] for r in searcher.search(QUESTION, k=3)["results"])
    for threshold, nothing in ((0.6, True), (0.4, False)):
        # the best result's confidence is exactly 0.5 under this calibration
        calibration = AnswerCalibration(intercept=-10.0 * best, slope=10.0, threshold=threshold)
        other = Searcher(folder, colbert=searcher.colbert, warm=False, calibration=calibration, reader=None)
        response = other.search(QUESTION, k=3)
        assert response["nothing_relevant"] is nothing
        assert len(response["results"]) == 3  # the results are still there
        assert max(r["confidence"] for r in response["results"]) == pytest.approx(0.5, abs=2e-3)
        assert (NOTHING_RELEVANT in format_results(response)) is nothing
        assert other.search(QUESTION, k=3, explain=False)["nothing_relevant"] is None
    plain = format_results(response)  # the last: answered; each result's short answer on its own line
    for r in response["results"]:
        start, end = r["short_answer"]
        assert f"answer: {terminal_text(r['text'][start:end])}  confidence {r['confidence']:.0%}" in plain


def test_the_reader_answers_the_top_results_and_the_best_answer_leads(reading_searcher):
    import pyterrier_fandom_colbert as pfc

    response = reading_searcher.search(QUESTION, system="colbert", k=5)
    results = response["results"]
    read = [r for r in results if r["rank"] <= 3]
    assert all(r["short_answer"] is None and r["confidence"] is None for r in results if r["rank"] > 3)
    frame = pd.DataFrame({"qid": "q", "query": QUESTION, "docno": [r["docno"] for r in read],
                          "text": [r["text"] for r in read]})
    expected = pfc.Reader(reading_searcher.reader_path)(frame)  # the same reader as a PyTerrier stage
    assert reading_searcher.reader.shared and not expected.empty  # over the encoder's backbone, not a second copy
    for r, (_, row) in zip(read, expected.iterrows()):
        assert r["answer_score"] == round(float(row["answer_score"]), 3)
        start, end = r["short_answer"]
        assert start <= row["answer_start"] and row["answer_end"] <= end  # widened to whole words only
        assert r["confidence"] == pytest.approx(row["answer_confidence"], abs=1e-3)
        assert r["kde_answer"] is None or r["answer"][0] <= r["kde_answer"][0]  # the study's span is kept
    best = max(read, key=lambda r: (r["confidence"], r["answer_score"], -r["rank"]))  # the most confident
    answer = response["answer"]
    assert (answer["rank"], answer["confidence"]) == (best["rank"], best["confidence"])
    assert answer["text"] == best["text"][answer["span"][0]:answer["span"][1]]
    calibration = reading_searcher.reader.calibration
    assert all(r["confidence"] == pytest.approx(float(calibration.probability(
        np.array([r["answer_score"]]), np.array([r["rank"] - 1]))[0]), abs=2e-3) for r in read)
    best_similarity = max(r["similarity"] for r in results)
    no_match = not any(reading_searcher.calibration.confidence(r["similarity"], best_similarity)
                       >= reading_searcher.calibration.threshold for r in results)
    assert response["nothing_relevant"] == (answer["confidence"] < calibration.threshold or no_match)
    text = format_results(response)
    if not response["nothing_relevant"]:
        shown = f"answer: {terminal_text(answer['text'])}  {answer['confidence']:.0%} sure"
        assert text.splitlines()[2].startswith(shown)


def test_the_readers_threshold_decides_nothing_relevant(folder, searcher, tiny_reader_dir, tmp_path):
    import shutil

    from pyterrier_fandom_colbert.app.search import NOTHING_RELEVANT
    from pyterrier_fandom_colbert.reader.calibration import ReaderCalibration
    from pyterrier_fandom_colbert.reader.network import set_calibration

    # the reader's threshold, and the folder's relevance rule (no result matches well enough): either says nothing
    matches = dataclasses.replace(searcher.calibration, intercept=50.0)   # every result relevant
    no_match = dataclasses.replace(searcher.calibration, intercept=-50.0)  # none
    for threshold, relevance, nothing in ((1.0, matches, True), (0.0, matches, False), (0.0, no_match, True)):
        reader = tmp_path / f"reader-{threshold}"
        if not reader.exists():
            shutil.copytree(tiny_reader_dir, reader)
            set_calibration(reader, ReaderCalibration(slope=0.5, threshold=threshold))
        response = Searcher(folder, colbert=searcher.colbert, warm=False, reader=reader,
                            calibration=relevance).search(QUESTION, k=4)
        assert response["nothing_relevant"] is nothing and len(response["results"]) == 4
        assert response["answer"] is not None  # the answer is kept; the page and terminal say nothing relevant
        assert (NOTHING_RELEVANT in format_results(response)) is nothing


def test_each_system_returns_its_own_ranking(searcher):
    frame = pd.DataFrame({"qid": ["q"], "query": [QUESTION]})
    for name in ("tfidf", "colbert"):
        expected = searcher.pipelines[name](frame).sort_values("rank")["docno"].tolist()[:5]
        assert [r["docno"] for r in searcher.search(QUESTION, system=name, k=5)["results"]] == expected


def test_a_batch_answers_each_query_as_it_would_alone(searcher):
    from pyterrier_fandom_colbert.app.batching import Job

    asks = [(QUESTION, "hybrid", 3), ("when was Emberfall released?", "hybrid", 5), (QUESTION, "tfidf", 2),
            ("Zorblax moon", "colbert", 4), (QUESTION, "hybrid", 3)]
    jobs = [Job(q, system, k, True) for q, system, k in asks]
    with searcher._batcher.lock:
        searcher._run(jobs)
    for job, (q, system, k) in zip(jobs, asks):
        alone = searcher.search(q, system=system, k=k)["results"]
        assert job.done and job.error is None
        assert [r["docno"] for r in job.results] == [r["docno"] for r in alone]
        assert [r["words"] for r in job.results] == [r["words"] for r in alone]
        assert np.allclose([r["score"] for r in job.results], [r["score"] for r in alone])


def test_why_gives_each_query_token_a_row_of_word_similarities(searcher):
    top = searcher.search(QUESTION, k=1)["results"][0]
    view = searcher.why(QUESTION, top["docno"])
    assert view["query_tokens"] == top["query_tokens"]
    assert view["words"] == [w[:2] for w in top["words"]]
    sims = np.array(view["token_sim"])
    assert sims.shape == (len(view["query_tokens"]), len(view["words"]))
    assert np.all(sims <= 1.0001) and np.all(sims >= -1.0001)  # cosine similarities


def test_a_passage_longer_than_a_window_is_explained_to_its_last_word(searcher):
    """The folder's ColBERT index keeps long passages whole; the explanation reads its stored windows and covers
    every word, the last sentence's included (it once refused such passages)."""
    assert searcher.index.meta.windowed_docs >= 1
    results = searcher.search("who was the lighthouse keeper of Quillmere", system="tfidf", k=3)["results"]
    (found,) = [r for r in results if r["docno"] == LONG["docno"]]
    words = [found["text"][s:e] for s, e, *_ in found["words"]]
    assert words == found["text"].replace(".", " .").split() and words[-3:] == ["Odalys", "Brenn", "."]
    assert len(searcher.colbert.tokenizer.document_pieces([LONG["text"]])[0]) > \
        searcher.colbert.tokenizer.max_doc_pieces


def test_terminal_output_strips_control_characters(searcher):
    response = searcher.search("Zorblax moon", system="tfidf", k=1)
    assert response["results"][0]["docno"] == HOSTILE[0]["docno"]
    for color in (False, True):
        text = format_results(response, color)
        assert "\x1b[31m" not in text and "red" in text


# -- the HTTP API --------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _serving(searcher):
    """``pfc serve`` of ``searcher`` on a free port of 127.0.0.1, in a thread: yields its base URL."""
    from pyterrier_fandom_colbert.app.server import make_server

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    srv = make_server(searcher, sock=sock)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + PATIENCE_S
    while not srv.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        srv.should_exit = True
        thread.join(timeout=PATIENCE_S)
        sock.close()
        assert not thread.is_alive(), "the test server did not stop"  # none is left running into later tests


@pytest.fixture(scope="module")
def server(searcher):
    with _serving(searcher) as url:
        yield url


@pytest.fixture(scope="module")
def http(server):
    httpx = pytest.importorskip("httpx")
    with httpx.Client(base_url=server, timeout=PATIENCE_S) as client:
        yield client


def test_api_search_matches_the_searcher(http, searcher):
    response = http.get("/api/search", params={"q": QUESTION, "system": "colbert", "k": 3})
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    body = response.json()
    direct = searcher.search(QUESTION, system="colbert", k=3)
    assert [r["docno"] for r in body["results"]] == [r["docno"] for r in direct["results"]]
    assert body["results"][0]["words"] == direct["results"][0]["words"]
    assert "default-src 'self'" in response.headers["content-security-policy"]


@pytest.mark.parametrize("params, message", [
    ({"q": ""}, "empty"),
    ({"q": "x" * 501}, "limit is 500"),
    ({"q": "bad\x00query"}, "control characters"),
    ({"q": "ok", "system": "bm25"}, "not known"),
    ({"q": "ok", "k": "0"}, "out of range"),
    ({"q": "ok", "k": "ten"}, "whole number"),
    ({"q": "ok", "k": "51"}, "out of range"),
])
def test_api_refuses_bad_queries_with_400(http, params, message):
    response = http.get("/api/search", params=params)
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_api_errors_for_unknown_things(http):
    assert http.get("/api/why", params={"q": "ok", "docno": "no-such-passage"}).status_code == 404
    assert http.get("/api/why", params={"q": "ok"}).status_code == 400
    assert http.get("/api/nothing").status_code == 404
    assert http.get("/api/info", headers={"Host": "evil.example"}).status_code == 400  # DNS rebinding


def test_page_escapes_the_query(http):
    hostile = '"><script>alert(1)</script>'
    page = http.get("/", params={"q": hostile}).text
    assert "<script>alert(1)" not in page
    assert 'value="&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in page
    assert 'src="/static/app.js"' in page and "https://" not in page  # nothing from elsewhere
    assert http.get("/static/app.js").status_code == 200 and http.get("/static/style.css").status_code == 200


def test_hostile_passage_travels_as_data(http):
    body = http.get("/api/search", params={"q": "Zorblax moon", "system": "tfidf", "k": 1}).json()
    top = body["results"][0]
    assert top["docno"] == HOSTILE[0]["docno"]
    assert top["text"] == HOSTILE[0]["text"] and top["title"] == HOSTILE[0]["title"]
    assert top["url"] == ""  # javascript: URLs are dropped


def test_concurrent_requests_get_the_sequential_answers(http, server):
    import httpx

    queries = [QUESTION, "when was Emberfall released?", "Zorblax moon", "the lantern boss"] * 2
    expected = {q: [r["docno"] for r in http.get("/api/search", params={"q": q}).json()["results"]]
                for q in set(queries)}

    def ask(query):
        with httpx.Client(base_url=server, timeout=PATIENCE_S) as client:
            response = client.get("/api/search", params={"q": query})
        return query, response.status_code, [r["docno"] for r in response.json()["results"]]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, queries))
    assert all(status == 200 and docnos == expected[q] for q, status, docnos in answers)


# -- a real browser ------------------------------------------------------------------------------------------------

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--remote-debugging-port=0",
                  "--window-size=900,1200"]


def chromium_path():
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


class ProtocolError(RuntimeError):
    """An error answer of the DevTools protocol."""


#: the protocol's answers to an evaluation while a page is being replaced (the old page's JavaScript context is
#: gone, the new one's is not there yet): a page still loading, not a failure
BETWEEN_PAGES = ("Execution context was destroyed", "Cannot find default execution context",
                 "Inspected target navigated or closed")


class DevTools:
    """A minimal Chrome DevTools protocol client over one page's websocket."""

    def __init__(self, url: str):
        from websockets.sync.client import connect

        self._stack = ExitStack()
        self.ws = self._stack.enter_context(connect(url, max_size=None, open_timeout=PATIENCE_S))
        self.next_id = 0

    def call(self, method: str, timeout: float = PATIENCE_S, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise ProtocolError(f"{method}: {message['error']}")
                return message.get("result", {})

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = PATIENCE_S):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = self.js(expression)
            except ProtocolError as err:
                if not any(words in str(err) for words in BETWEEN_PAGES):
                    raise
                value = None
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"waited {timeout} s for {expression}")

    def type_and_submit(self, text: str):
        self.js("document.getElementById('q').value = ''; document.getElementById('q').focus()")
        self.call("Input.insertText", text=text)
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13,
                      **({"text": "\r"} if kind == "keyDown" else {}))

    def close(self):
        self._stack.close()


@pytest.fixture(scope="module")
def browser(server, tmp_path_factory):
    binary = chromium_path()
    if binary is None:
        pytest.skip("no Chromium installed (Debian: apt-get install chromium); the browser test needs one")
    pytest.importorskip("websockets", reason="the browser test drives Chromium with the websockets package")
    import httpx

    profile = tmp_path_factory.mktemp("chromium-profile")
    process = subprocess.Popen([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"  # "port\n/devtools/browser/<id>", written once listening
        deadline = time.monotonic() + PATIENCE_S
        while len(lines := (port_file.read_text().split() if port_file.exists() else [])) < 2:  # whole, not begun
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"Chromium did not start (exit status {process.poll()})")
            time.sleep(0.1)
        port = int(lines[0])
        targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=PATIENCE_S).json()
        page = next(t for t in targets if t["type"] == "page")
        tools = DevTools(page["webSocketDebuggerUrl"])
        yield tools
        tools.close()
    finally:
        process.terminate()
        try:
            process.wait(timeout=PATIENCE_S)
        except subprocess.TimeoutExpired:
            process.kill()


def _open(browser, url):
    browser.call("Page.enable")
    # the page shown until now is marked, so that its (complete) state is never taken for the new page's
    browser.js("document.documentElement.dataset.left = 'yes'")
    browser.call("Page.navigate", url=url)
    browser.wait_for("!!document.documentElement && !document.documentElement.dataset.left && "
                     "document.readyState === 'complete' && !!document.getElementById('q')")


def test_browser_search_shows_cards_with_highlights(browser, server, searcher):
    _open(browser, server + "/")
    browser.type_and_submit(QUESTION)
    count = browser.wait_for("document.querySelectorAll('#results .card').length")
    expected = searcher.search(QUESTION, k=10)["results"]
    assert count == len(expected)
    titles = browser.js("[...document.querySelectorAll('#results .card .title')].map(a => a.textContent)")
    assert titles == [r["title"] for r in expected]
    answers = browser.js("[...document.querySelectorAll('#results .card')].map(c => "
                         "(c.querySelector('.passage mark.answer') || {}).textContent || null)")
    assert answers == [r["text"][r["answer"][0]:r["answer"][1]] if r["answer"] else None for r in expected]
    assert browser.js("document.querySelectorAll('#results .card .passage .m').length") > 0
    assert "q=who+founded" in browser.js("location.search")  # the query is in the URL

    # "why?" opens the R_abs view; a query token button asks /api/why and shades by that token
    browser.js("document.querySelector('#results .card .why summary').click()")
    browser.wait_for("document.querySelectorAll('#results .card .why .shaded span').length")
    browser.js("document.querySelector('#results .card .why .tok:nth-child(3)').click()")
    browser.wait_for("document.querySelector('#results .card .why .legend').textContent.includes('Single-token')")


def test_browser_shows_hostile_text_as_text(browser, server):
    _open(browser, server + "/?q=Zorblax+moon&system=tfidf")  # a linked query runs on load
    browser.wait_for("document.querySelectorAll('#results .card').length")
    card = browser.js("(() => { const c = document.querySelector('#results .card'); return {title: "
                      "c.querySelector('.title').textContent, href: c.querySelector('.title').getAttribute('href'), "
                      "text: c.querySelector('.passage').textContent, "
                      "elements: c.querySelectorAll('script, img, b, p.passage *:not(span):not(mark)').length}; })()")
    assert card["title"] == HOSTILE[0]["title"] and card["href"] is None and card["elements"] == 0
    assert "<script>" in card["text"] and "<img src=x" in card["text"]
    assert browser.js("typeof window.__pwned") == "undefined"


def test_browser_says_plainly_when_nothing_seems_to_answer(browser, server, folder, searcher):
    from pyterrier_fandom_colbert.app.search import NOTHING_RELEVANT
    from pyterrier_fandom_colbert.explain.answer import AnswerCalibration

    _open(browser, server + "/?q=" + QUESTION.replace(" ", "+"))
    browser.wait_for("document.querySelectorAll('#results .card').length")
    expected = searcher.search(QUESTION, k=10)
    assert browser.js("document.getElementById('nothing').hidden") is not expected["nothing_relevant"]
    shorts = browser.js("[...document.querySelectorAll('#results .card')].map(c => "
                        "(c.querySelector('.passage mark.answer mark.short') || {}).textContent || null)")
    assert shorts == [r["text"][r["short_answer"][0]:r["short_answer"][1]] for r in expected["results"]]

    never = AnswerCalibration(intercept=-50.0, slope=1.0, threshold=0.99)  # no passage reaches the threshold
    with _serving(Searcher(folder, colbert=searcher.colbert, warm=False, calibration=never, reader=None)) as other:
        _open(browser, other + "/?q=" + QUESTION.replace(" ", "+"))
        shown = browser.wait_for("!document.getElementById('nothing').hidden && "
                                 "document.getElementById('nothing').textContent")
        assert " ".join(shown.split()).startswith(NOTHING_RELEVANT)
        assert browser.js("document.querySelectorAll('#results .card').length") == 10  # results still below


def test_browser_leads_with_the_readers_answer(browser, reading_searcher):
    expected = reading_searcher.search(QUESTION, k=10)
    with _serving(reading_searcher) as url:
        _open(browser, url + "/?q=" + QUESTION.replace(" ", "+"))
        browser.wait_for("document.querySelectorAll('#results .card').length")
        best = browser.js("(() => { const b = document.getElementById('best'); return {hidden: b.hidden, "
                          "text: b.querySelector('.text').textContent, sure: b.querySelector('.sure').textContent};"
                          " })()")
        shorts = browser.js("[...document.querySelectorAll('#results .card')].map(c => "
                            "(c.querySelector('.passage mark.short') || {}).textContent || null)")
    answer = expected["answer"]
    assert best["hidden"] is bool(expected["nothing_relevant"])
    if not expected["nothing_relevant"]:
        assert best["text"] == answer["text"] and best["sure"] == f"{round(100 * answer['confidence'])}% sure"
    assert shorts == [r["text"][r["short_answer"][0]:r["short_answer"][1]] if r["short_answer"] else None
                      for r in expected["results"]]


def test_browser_shows_a_clear_message_for_a_bad_query(browser, server):
    _open(browser, server + "/?q=" + "x" * 600)
    message = browser.wait_for("!document.getElementById('error').hidden && "
                               "document.getElementById('error').textContent")
    assert "limit is 500" in message
    assert browser.js("document.querySelectorAll('#results .card').length") == 0


def test_folder_default_weight_is_the_fusions_default():
    import pyterrier as pt

    from pyterrier_fandom_colbert.app import fusion_settings as hybrid
    from pyterrier_fandom_colbert.fusion import DEFAULT_WEIGHT, Hybrid

    assert hybrid.DEFAULT_WEIGHT == DEFAULT_WEIGHT == hybrid.FusionSettings().weight
    assert Hybrid(pt.Transformer.identity(), pt.Transformer.identity()).weight == DEFAULT_WEIGHT
