"""`pfc` under bad input and faults: refusals before anything heavy is loaded, queries that show nothing, text
that must not reach a terminal raw, one-line errors (disk full, read-only places, bad numbers), a failing query
that must not fail the others of its batch, and a server that keeps answering while its folder is rebuilt."""
import dataclasses
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import unicodedata
from pathlib import Path

import pytest

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.app.cli import main
from pyterrier_fandom_colbert.app.folder import build_folder
from pyterrier_fandom_colbert.app.queries import QueryError, check_query
from pyterrier_fandom_colbert.display import BIDI_CONTROLS, json_text

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = Path(pfc.__file__).parent / "data" / "sample" / "samplewiki_pages_current.xml"
HEAVY = ("torch", "transformers", "pyterrier", "faiss", "pandas")
#: how long the server tests wait for a start, an answer or a stop: only a hang should fail them, never a slow
#: (loaded, 2-core) machine; pytest's own timeout stops a real hang
PATIENCE_S = 300.0


def one_line(capsys, status: int, prog: str = "pfc") -> str:
    err = capsys.readouterr().err
    assert status == 2, err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith(f"{prog}") and ": error: " in lines[0], err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def colbert(wiki_colbert):
    return wiki_colbert


@pytest.fixture(scope="module")
def folder(tmp_path_factory, colbert, tiny_bert_dir, wiki_records):
    out = tmp_path_factory.mktemp("serve") / "wiki"
    build_folder(wiki_records(), out, colbert=colbert, checkpoint=tiny_bert_dir)
    return out


# -- refusals before anything heavy ----------------------------------------------------------------------------------

REFUSALS = """
import json, os, sys, time
from pathlib import Path
HEAVY = sys.argv[2].split(",")
from pyterrier_fandom_colbert.app.cli import main
tmp = Path(sys.argv[1])
(tmp / "old").mkdir()
(tmp / "old" / "manifest.json").write_text(json.dumps({"format": "pfc-search-folder", "version": 1}))
(tmp / "mine").mkdir()
(tmp / "mine" / "notes.txt").write_text("keep")
cases = [
    ["index", str(tmp / "missing.xml.bz2"), str(tmp / "new")],
    ["index", str(tmp / "dump.xml"), str(tmp / "old")],
    ["index", str(tmp / "dump.xml"), str(tmp / "mine"), "--overwrite"],
    ["index", str(tmp / "dump.xml"), str(tmp / "new"), "--threads", "0"],
    ["index", str(tmp / "dump.xml"), str(tmp / "new"), "--checkpoint", str(tmp / "no-model")],
    ["search", str(tmp / "old"), "   "],
    ["search", str(tmp / "old"), "who?", "-k", "0"],
    ["search", str(tmp / "old"), "\\u200f\\u00ad\\u2060"],
    ["search", str(tmp / "old"), "caf\\udcff"],
    ["search", str(tmp / "nowhere"), "who?"],
    ["serve", str(tmp / "nowhere")],
]
(tmp / "dump.xml").write_text("<mediawiki/>")
out = []
for argv in cases:
    started = time.process_time()
    status = main(argv)
    out.append([status, time.process_time() - started])
heavy = sorted(m for m in HEAVY if m in sys.modules)
print(json.dumps({"results": out, "heavy": heavy}))
"""


def test_bad_input_is_refused_before_any_model_or_heavy_library_loads(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", REFUSALS, str(tmp_path), ",".join(HEAVY)], capture_output=True,
                          text=True, env=env, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    lines = done.stderr.strip().split("\n")
    assert [status for status, _ in report["results"]] == [2] * len(lines) == [2] * 11, done.stderr
    assert report["heavy"] == []  # no torch, transformers, PyTerrier, FAISS or pandas was imported
    expected = ["dump not found", "already exists; add --overwrite to replace it", "is not a search folder",
                "--threads=0", "--checkpoint", "query is empty", "k=0 is out of range", "query shows nothing",
                "byte 0xFF is not UTF-8", "is not a search folder (no manifest.json)",
                "is not a search folder (no manifest.json)"]
    for line, words in zip(lines, expected):
        assert ": error: " in line and words in line, line
    assert "overwrite=True" not in done.stderr and "Traceback" not in done.stderr


# -- what a query is -------------------------------------------------------------------------------------------------

def _format_characters():
    """Every format character (Cf) of the BMP and the tag block, found by category (the reference)."""
    ranges = [range(0x10000), range(0xE0000, 0xE0080)]
    return [chr(c) for r in ranges for c in r if unicodedata.category(chr(c)) == "Cf"]


def test_a_query_of_invisible_characters_is_refused_by_category():
    invisible = [*_format_characters(), "\ufe0f", "\ufe00", "\U000e0100", "\u180b"]  # + variation selectors
    assert {"\u200e", "\u200f", "\u061c", "\u00ad", "\U000e0041", "\u2060", "\ufeff"} <= set(invisible)
    for ch in invisible:
        with pytest.raises(QueryError, match="shows nothing"):
            check_query(f" {ch}{ch} \u3000")
    for text in ("\u05e9\u05dc\u05d5\u05dd", "\U0001f600", "a\u200e", "\u0627\u0644\u062d\u0631\u0628"):
        assert check_query(text) == text  # anything visible is a query
    with pytest.raises(QueryError, match="control characters"):
        check_query("a\x85b")  # a C1 control


def test_invalid_utf8_on_the_command_line_is_refused_not_written_into_json(folder, capsys):
    argv_query = os.fsdecode(b"caf\xe9 \xff")  # what Python makes of Latin-1 bytes on a UTF-8 command line
    line = one_line(capsys, main(["search", str(folder), argv_query, "--json"]))
    assert "not valid text" in line and "0xE9" in line
    assert capsys.readouterr().out == ""


def test_json_output_escapes_what_would_not_show_and_round_trips():
    value = {"title": "abc\u202edef\u2067x\u2069", "text": "caf\u00e9 \u200d\U0001f600 \x85 \u2028 \U000e0041"}
    text = json_text(value, indent=1)
    assert json.loads(text) == value
    assert not any(ch in BIDI_CONTROLS or ch in "\x85\u2028\U000e0041" for ch in text)
    assert "caf\u00e9" in text and "\u200d\U0001f600" in text  # readable text and emoji sequences stay as they are


def test_terminal_results_leave_out_bidi_controls_and_count_one_result():
    from pyterrier_fandom_colbert.app.printing import format_results

    response = {"query": "tide\u202e", "system": "tfidf", "took_ms": 3.0, "results": [
        {"rank": 1, "docno": "d", "score": 1.0, "title": "\u202eTitle\u2066", "url": "https://example.org/\u200f",
         "section": "S\u061c", "text": "charts\u2067 by hand\u200e", "answer": [0, 6], "words": []}]}
    for color in (False, True):
        out = format_results(response, color)
        assert not any(ch in BIDI_CONTROLS for ch in out)
        assert "1 result for 'tide'" in out and "1 results" not in out
        assert "Title" in out and "charts by hand" in out.replace("«", "").replace("»", "").replace(
            "\x1b[1;30;43m", "").replace("\x1b[0m", "")


# -- one-line errors -------------------------------------------------------------------------------------------------

def test_disk_full_during_index_is_one_line_and_leaves_nothing(tmp_path, tiny_bert_dir, capsys, monkeypatch):
    import numpy as np

    calls = []

    def full(path, *args, **kwargs):
        calls.append(path)
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(np, "save", full)
    target = tmp_path / "out" / "wiki"
    target.parent.mkdir()
    line = one_line(capsys, main(["index", str(SAMPLE), str(target), "--checkpoint", tiny_bert_dir, "--quiet"]))
    assert calls, "the build wrote nothing through numpy.save: choose another write to fail"
    assert "no space left on device" in line and f"nothing was written to {target}" in line
    assert list(target.parent.iterdir()) == []  # neither the folder nor a temporary one


def test_disk_full_while_building_a_neighbour_cache_is_one_line(tmp_path, colbert, capsys, monkeypatch,
                                                                 wiki_records):
    from pyterrier_fandom_colbert.index.ann.base import AnnKind

    index_dir = tmp_path / "idx"
    pfc.ColBERTIndex(index_dir).indexer(colbert).index(
        [{"docno": r["docno"], "text": r["text"]} for r in wiki_records()])

    def full(self, index, path):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(AnnKind, "write", full)
    line = one_line(capsys, main(["build-ann", str(index_dir), "--faiss", "ivf", "--nlist", "2", "--quiet"]))
    assert "No space left on device" in line and "nothing was left half-written" in line
    assert not list(index_dir.glob("faiss/*.faiss*"))  # no cache file, complete or partial


def test_faiss_write_failure_becomes_an_oserror_naming_the_file(tmp_path, monkeypatch):
    import faiss
    import numpy as np

    from pyterrier_fandom_colbert.index.ann.base import AnnKind

    def failing(index, path):  # FAISS's own wording for a full disk
        raise RuntimeError(f"Error in void faiss::write_index(...): Error: 'ret == (size * 4)' failed: write error "
                           f"in {path}: 65491 != 512000 (No space left on device)")

    monkeypatch.setattr(faiss, "write_index", failing)
    flat = faiss.IndexFlatIP(4)
    flat.add(np.ones((2, 4), dtype=np.float32))
    with pytest.raises(OSError) as caught:
        AnnKind.write(None, flat, tmp_path / "x.faiss")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(tmp_path / "x.faiss")


def test_read_only_parent_is_one_line(tmp_path, tiny_bert_dir, capsys, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    if os.geteuid() != 0:  # chmod restricts everyone but root
        locked.chmod(0o555)
        try:
            line = one_line(capsys, main(["index", str(SAMPLE), str(locked / "wiki"), "--checkpoint", tiny_bert_dir]))
        finally:
            locked.chmod(0o755)
        assert "read-only" in line
    else:  # root writes anywhere: the folder cannot be created, as on a read-only mount
        def refuse(self, *args, **kwargs):
            raise PermissionError(errno.EROFS, "Read-only file system", str(self))

        monkeypatch.setattr(Path, "mkdir", refuse)
        line = one_line(capsys, main(["index", str(SAMPLE), str(locked / "wiki"), "--checkpoint", tiny_bert_dir,
                                      "--quiet"]))
        monkeypatch.undo()
        assert "read-only file system" in line and "nothing was written" in line
    assert list(locked.iterdir()) == []


@pytest.mark.parametrize("content, name, words", [
    ("hello", "notes.txt", "neither a SQuAD-format .json file nor an ir_datasets id"),
    ("{nope", "broken.json", "not a SQuAD-format .json file"),
    ('{"a": 1}', "other.json", "not SQuAD format"),
    (None, "a-folder", "is a folder"),
])
def test_train_with_something_that_is_not_a_dataset_is_one_line(tmp_path, capsys, content, name, words):
    from pyterrier_fandom_colbert.training.cli import main as train

    path = tmp_path / name
    if content is None:
        path.mkdir()
    else:
        path.write_text(content)
    line = one_line(capsys, train(["--dataset", str(path), "--out", str(tmp_path / "run")]), "pfc-train")
    assert words in line and str(path) in line


# -- a batch with a failing query ------------------------------------------------------------------------------------

def test_a_failing_query_does_not_fail_the_others_of_its_batch(folder, colbert, tmp_path, wiki_records):
    import shutil

    from pyterrier_fandom_colbert.app.batching import Job
    from pyterrier_fandom_colbert.app.search import Searcher

    copy = tmp_path / "wiki"
    shutil.copytree(folder, copy)
    searcher = Searcher(copy, colbert=colbert, warm=False)
    asks = [("who founded the Lanternwright guild?", "hybrid", 2), ("Brannoch river port", "tfidf", 1),
            ("herons and canals", "colbert", 1)]
    before = [searcher.search(q, system=s, k=k) for q, s, k in asks]
    shown = {r["docno"] for b in before for r in b["results"]}
    # damage the passage-table line of a passage the other queries do not show, then ask for it
    bad = next(r for r in wiki_records() if r["docno"] not in shown)
    assert searcher.search(bad["text"], system="tfidf", k=1)["results"][0]["docno"] == bad["docno"]
    table = copy / "passages.jsonl"
    data = table.read_bytes()
    start = data.index(json.dumps(bad["docno"]).encode())
    end = data.index(b"\n", start)
    table.write_bytes(data[:start] + b"\xff" * (end - start) + data[end:])  # same length: offsets still fit
    asks.append((bad["text"], "tfidf", 1))
    jobs = [Job(q, s, k, True) for q, s, k in asks]
    with searcher._batcher.lock:
        searcher._run(jobs)
    assert all(job.done for job in jobs)
    assert jobs[-1].error is not None and jobs[-1].results == []
    for job, alone in zip(jobs[:-1], before):
        assert job.error is None and job.results
        assert [r["docno"] for r in job.results] == [r["docno"] for r in alone["results"]]
        assert [r["words"] for r in job.results] == [r["words"] for r in alone["results"]]


# -- the server ------------------------------------------------------------------------------------------------------

class Running:
    """An in-process server on a free port of 127.0.0.1."""

    def __init__(self, served):
        from pyterrier_fandom_colbert.app.server import make_server

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.server = make_server(served, sock=self.sock)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + PATIENCE_S
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the test server did not start"
            time.sleep(0.05)
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=PATIENCE_S)
        self.sock.close()
        assert not self.thread.is_alive(), "the test server did not stop"  # none is left running into later tests


def test_info_names_the_dump_by_file_name_only(folder):
    from pyterrier_fandom_colbert.app.folder import load_manifest
    from pyterrier_fandom_colbert.app.server import folder_info

    manifest = dataclasses.replace(load_manifest(folder), source=str(folder.parent / "dumps" / "w_pages.xml.bz2"))
    info = folder_info(manifest)
    assert info["source"] == "w_pages.xml.bz2" and str(folder.parent) not in json.dumps(info)
    assert folder_info(dataclasses.replace(manifest, source="irds:fandom-qa/sample"))["source"] == \
        "irds:fandom-qa/sample"


def test_invisible_query_is_a_400_with_a_message(folder, colbert):
    httpx = pytest.importorskip("httpx")
    from pyterrier_fandom_colbert.app.search import Searcher

    with Running(Searcher(folder, colbert=colbert, warm=False)) as url:
        for query in ("\u200e\u200f", "\u00ad \u061c", "\U000e0041\ufe0f"):
            response = httpx.get(url + "/api/search", params={"q": query}, timeout=PATIENCE_S)
            assert response.status_code == 400 and "shows nothing" in response.json()["error"]


def test_rebuilding_a_served_folder_never_fails_a_request(tmp_path, colbert, tiny_bert_dir, wiki_records):
    """Requests keep coming while the folder is rebuilt in place (``overwrite=True``) with one more page: every
    answer is a 200, and the new page is found once the new version is served. Each asker has answered whole rounds
    before the rebuild starts and after the new version is served (handshakes, not sleeps: a slow machine asks
    fewer times, never too few)."""
    httpx = pytest.importorskip("httpx")
    from pyterrier_fandom_colbert.app.live import ServedFolder
    from pyterrier_fandom_colbert.app.search import Searcher

    target = tmp_path / "wiki"
    build_folder(wiki_records(), target, colbert=colbert, checkpoint=tiny_bert_dir)
    served = ServedFolder(target, Searcher(target, colbert=colbert))
    new = {"docno": "w-99", "text": "Orlaith Quenby rebuilt the Brannoch lighthouse with green glass.",
           "title": "Orlaith Quenby", "url": "https://example.org/99", "section": "", "page_id": 99}
    queries = ("Orlaith Quenby lighthouse", "salt barges of Quellmoor")
    statuses, errors, rounds = [], [], [0] * len(queries)  # rounds: whole rounds each asker has had answered
    stop, changed = threading.Event(), threading.Condition()

    def ask(n, url, query):
        try:
            with httpx.Client(base_url=url, timeout=PATIENCE_S) as client:
                while not stop.is_set():
                    for system in ("hybrid", "tfidf", "colbert"):
                        statuses.append(client.get("/api/search", params={"q": query, "system": system, "k": 3})
                                        .status_code)
                    statuses.append(client.get("/api/info").status_code)
                    with changed:
                        rounds[n] += 1
                        changed.notify_all()
        except BaseException as err:  # the test fails on it, and stops waiting for this asker
            errors.append(err)
            with changed:
                changed.notify_all()

    def more_rounds(count):
        """Wait until every asker has had ``count`` more whole rounds answered than now."""
        with changed:
            wanted = [r + count for r in rounds]
            assert changed.wait_for(lambda: errors or all(r >= w for r, w in zip(rounds, wanted)),
                                    timeout=PATIENCE_S), f"the askers did not get answers: {rounds}"
        assert not errors, errors

    with Running(served) as url:
        askers = [threading.Thread(target=ask, args=(n, url, q)) for n, q in enumerate(queries)]
        for thread in askers:
            thread.start()
        try:
            more_rounds(1)  # requests are coming before the rebuild starts
            build_folder(wiki_records(extra=[new]), target, colbert=colbert, checkpoint=tiny_bert_dir, overwrite=True)
            deadline = time.monotonic() + PATIENCE_S
            while time.monotonic() < deadline:
                info = httpx.get(url + "/api/info", timeout=PATIENCE_S).json()
                if info["passages"] == len(wiki_records()) + 1:
                    break
                time.sleep(0.1)
            top = httpx.get(url + "/api/search", params={"q": "Orlaith Quenby lighthouse", "system": "tfidf",
                                                         "k": 1}, timeout=PATIENCE_S).json()["results"]
            more_rounds(2)  # and a whole round after the new version is served (the first may have begun before)
        finally:
            stop.set()
            for thread in askers:
                thread.join(timeout=PATIENCE_S)
    assert not errors and not any(thread.is_alive() for thread in askers), errors
    assert info["passages"] == len(wiki_records()) + 1
    assert top[0]["docno"] == "w-99"
    assert len(statuses) >= 3 * 4 * len(queries) and set(statuses) == {200}, statuses


def test_a_busy_port_fails_before_serving_or_loading(folder, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line(capsys, main(["serve", str(folder), "--port", str(port)]))
    assert f"127.0.0.1:{port} is in use" in line and "--port" in line


def test_a_bad_ray_timeout_is_refused_before_loading(folder, capsys):
    line = one_line(capsys, main(["serve", str(folder), "--ray", "--ray-timeout", "0"]))
    assert "--ray-timeout 0; expected a positive number of seconds" in line
    line = one_line(capsys, main(["serve", str(folder), "--ray", "--ray-timeout", "nan"]))
    assert "--ray-timeout nan" in line
    line = one_line(capsys, main(["serve", str(folder), "--ray-timeout", "5"]))
    assert "give --ray too" in line


def _answers(process: subprocess.Popen, port: int) -> int:
    """The status of ``GET /api/info`` from the server ``process`` serves on ``port``, once it listens (a refused
    connection is tried again while the process runs, for at most PATIENCE_S)."""
    import http.client

    deadline = time.monotonic() + PATIENCE_S
    while True:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PATIENCE_S)  # no proxy in between
        try:
            connection.request("GET", "/api/info")
            return connection.getresponse().status
        except ConnectionRefusedError:
            assert process.poll() is None and time.monotonic() < deadline, "the server never listened"
            time.sleep(0.05)
        finally:
            connection.close()


@pytest.mark.slow
def test_ctrl_c_stops_the_server_without_a_traceback(folder):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    process = subprocess.Popen([sys.executable, "-m", "pyterrier_fandom_colbert.app", "serve", str(folder), "--port",
                                "0"], stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        seen = []
        deadline = time.monotonic() + PATIENCE_S
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            seen.append(line)
            if "serving" in line or not line:
                break
        assert "serving" in seen[-1] and "http://127.0.0.1:" in seen[-1], seen
        # "serving" is printed before uvicorn starts; Ctrl-C is uvicorn's to handle once it answers a request
        port = int(seen[-1].split("http://127.0.0.1:")[1].split("/")[0])
        assert _answers(process, port) == 200
        process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=PATIENCE_S)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, rest
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest
    assert rest.strip().endswith("pfc serve: stopped")
