"""A served folder swapped under a running searcher: a process reads the version it opened (its files stay open
or pinned), and a replacement that fails to open leaves the previous version answering (issue 42)."""
import logging
import shutil
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from pyterrier_fandom_colbert.app.folder import build_folder

QUERIES = ("salt barges of Quellmoor", "who founded the Lanternwright guild")
SYSTEMS = ("hybrid", "colbert", "tfidf")
PATIENCE_S = 300.0  # only a hang should fail a test, never a slow (loaded, 2-core) machine


@pytest.fixture(scope="module")
def colbert(wiki_colbert):
    return wiki_colbert


def flip_bit(path: Path, byte: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[byte] ^= 1
    path.write_bytes(bytes(data))


def answers(call):
    """What the searcher answers to every query on every system (docnos, scores, titles, texts), and to a why."""
    out = {}
    for q in QUERIES:
        for system in SYSTEMS:
            response = call("search", q, system=system, k=3)
            out[q, system] = [(r["docno"], r["score"], r["title"], r["text"]) for r in response["results"]]
        out[q, "why"] = call("why", q, out[q, "hybrid"][0][0])
    return out


def test_a_swapped_in_folder_that_fails_to_open_leaves_the_previous_version_serving(tmp_path, colbert,
                                                                                     tiny_bert_dir, caplog,
                                                                                     wiki_records):
    """The issue's steps: serve A; copy A to B, rebuild B with other passages (every old one at a new offset),
    flip one bit of B's ColBERT residuals, ``mv A A_old; mv B A``. The new A cannot be opened (the log says so)
    and every request, on every system and over HTTP, answers exactly as before the swap."""
    from starlette.testclient import TestClient

    from pyterrier_fandom_colbert.app.live import ServedFolder
    from pyterrier_fandom_colbert.app.search import Searcher
    from pyterrier_fandom_colbert.app.server import create_app

    a, b = tmp_path / "A", tmp_path / "B"
    build_folder(wiki_records(), a, colbert=colbert, checkpoint=tiny_bert_dir)
    served = ServedFolder(a, Searcher(a, colbert=colbert))
    client = TestClient(create_app(served), base_url="http://127.0.0.1")
    before = answers(served.call)
    assert client.get("/api/search", params={"q": QUERIES[0], "system": "tfidf"}).status_code == 200

    shutil.copytree(a, b)
    first = ("Orlaith Quenby", "Orlaith Quenby rebuilt the Brannoch lighthouse with green glass and new lamps.")
    build_folder(wiki_records(first=[first]), b, colbert=colbert, checkpoint=tiny_bert_dir, overwrite=True)
    residuals = b / "colbert" / "residuals.u8"
    assert residuals.is_file()
    flip_bit(residuals, residuals.stat().st_size // 2)
    a.rename(tmp_path / "A_old")
    b.rename(a)

    with caplog.at_level(logging.WARNING, logger="pyterrier_fandom_colbert.app"):
        served.searcher  # noqa: B018 (notices the change: the new version opens in the background, and fails)
        served.wait()
    assert any("could not be opened; still serving the previous version" in r.getMessage()
               for r in caplog.records), caplog.text
    assert answers(served.call) == before
    for q in QUERIES:
        for system in SYSTEMS:
            response = client.get("/api/search", params={"q": q, "system": system, "k": 3})
            assert response.status_code == 200, response.text
            shown = [(r["docno"], r["score"], r["title"], r["text"]) for r in response.json()["results"]]
            assert shown == before[q, system]
    assert client.get("/api/info").json()["passages"] == len(wiki_records())


# -- pfc serve against stalled clients, foreign Host headers and bytes that are not UTF-8 ----------------------------

class Stub:
    """A searcher without a model: checks the query as the real one does and echoes it."""

    manifest = SimpleNamespace(name="stub", source="records", pages=1, articles=1, passages=1, tokens=1)

    def search(self, query, *, system=None, k=10):  # (None: the folder's default system, as Searcher.search)
        from pyterrier_fandom_colbert.app.queries import check_k, check_query, check_system

        return {"query": check_query(query), "system": check_system(system or "hybrid"), "k": check_k(k),
                "results": []}


def stub_served(tmp_path):
    from pyterrier_fandom_colbert.app.live import ServedFolder

    return ServedFolder(tmp_path, Stub())


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` within ``seconds`` (it never answers a request it has not had)."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_half_sent_requests_are_bounded_and_timed_out_while_a_client_is_answered(tmp_path):
    """20 connections each send half a request's headers to a server that lets 8 wait for at most 2 s: a normal
    client is answered; at least 12 of them are closed at once (the oldest first), and the rest at their
    deadline, not before it."""
    httpx = pytest.importorskip("httpx")
    from pyterrier_fandom_colbert.app.server import make_server

    timeout_s, bound = 2.0, 8
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    server = make_server(stub_served(tmp_path), sock=listener, header_timeout_s=timeout_s, max_waiting=bound)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    try:
        deadline = time.monotonic() + PATIENCE_S
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "the test server did not start"
            time.sleep(0.05)
        half = []
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */")  # no end of headers
            half.append((s, time.monotonic()))
        response = httpx.get(f"http://127.0.0.1:{port}/api/search", params={"q": "salt barges"}, timeout=PATIENCE_S)
        assert response.status_code == 200 and response.json()["query"] == "salt barges"
        early = [closed_within(s, 0.05 if i else timeout_s / 2) for i, (s, _) in enumerate(half)]
        assert sum(early) >= 20 - bound and all(early[:20 - bound]), early  # the oldest went first
        for s, opened in [h for h, gone in zip(half, early) if not gone]:
            assert closed_within(s, PATIENCE_S)
            assert time.monotonic() - opened >= timeout_s * 0.9  # at its deadline, not before
    finally:
        for s, _ in half:
            s.close()
        server.should_exit = True
        thread.join(timeout=PATIENCE_S)
        listener.close()
    assert not thread.is_alive()


def test_a_query_that_is_not_utf8_is_a_400_naming_the_byte(tmp_path):
    from starlette.testclient import TestClient

    from pyterrier_fandom_colbert.app.server import create_app

    client = TestClient(create_app(stub_served(tmp_path)), base_url="http://127.0.0.1")
    response = client.get("/api/search?q=caf%FF&system=tfidf")
    assert response.status_code == 400
    assert response.json()["error"] == "the query is not valid text (byte 0xFF is not UTF-8); type it again in UTF-8"
    ok = client.get("/api/search?q=caf%C3%A9&k=3")
    assert ok.status_code == 200 and ok.json()["query"] == "café" and ok.json()["k"] == 3


def test_every_address_keeps_a_host_check_and_a_warning(tmp_path, capsys, monkeypatch):
    from starlette.testclient import TestClient

    from pyterrier_fandom_colbert.app.cli import _serve
    from pyterrier_fandom_colbert.app.server import allowed_hosts, create_app, exposure_warning

    app = create_app(stub_served(tmp_path), allowed_hosts=allowed_hosts("0.0.0.0"))
    for host, status in [("evil.example", 400), ("127.0.0.1.evil.example:8000", 400), ("192.168.1.7:8000", 200),
                         ("[::1]:8000", 200), ("localhost:8000", 200), (socket.gethostname(), 200)]:
        response = TestClient(app, base_url="http://127.0.0.1").get("/api/info", headers={"host": host})
        assert response.status_code == status, host
    assert exposure_warning("127.0.0.1") is None and "every computer" in exposure_warning("0.0.0.0")
    served = []
    stub = stub_served(tmp_path)
    monkeypatch.setattr("pyterrier_fandom_colbert.app.live.ServedFolder", lambda *args, **kw: stub)
    monkeypatch.setattr("pyterrier_fandom_colbert.app.server.serve", lambda *args, **kw: served.append(args[1:3]))
    args = SimpleNamespace(folder=tmp_path, host="0.0.0.0", port=0, quiet=True, ray=None, ray_timeout=None)
    assert _serve(args) == 0 and served == [("0.0.0.0", 0)]
    err = capsys.readouterr().err
    assert err.startswith("pfc serve: warning: --host 0.0.0.0 serves this folder to every computer"), err
