"""A served folder swapped under a running searcher: a process reads the version it opened (its files stay open
or pinned), and a replacement that fails to open leaves the previous version answering (issue 42)."""
import logging
import shutil
from pathlib import Path

import pytest

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.app.folder import build_folder

QUERIES = ("salt barges of Quellmoor", "who founded the Lanternwright guild")
SYSTEMS = ("hybrid", "colbert", "tfidf")


def records(texts_first=()):
    """A small wiki of invented facts; ``texts_first``: passages put before them (so every old passage moves)."""
    facts = [("Brannoch", "Brannoch is a river port where the salt barges of Quellmoor unload every spring."),
             ("Ysolde Varrin", "Ysolde Varrin founded the Lanternwright guild and drew the first tide charts."),
             ("Tide charts", "The tide charts of Quellmoor were drawn by hand on vellum for forty years."),
             ("Salt barges", "Salt barges carry grey salt from the marsh pans to the river port of Brannoch."),
             ("Lanternwright guild", "The Lanternwright guild keeps the harbour lamps burning through the winter."),
             ("Quellmoor", "Quellmoor is a marsh county known for its salt pans, herons and slow canals.")]
    facts = list(texts_first) + facts
    return [{"docno": f"w-{i}", "text": text, "title": title, "url": f"https://example.org/{i}", "section": "",
             "page_id": i} for i, (title, text) in enumerate(facts)]


@pytest.fixture(scope="module")
def colbert(tiny_bert_dir):
    return pfc.ColBERT.from_pretrained(tiny_bert_dir)


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
                                                                                     tiny_bert_dir, caplog):
    """The issue's steps: serve A; copy A to B, rebuild B with other passages (every old one at a new offset),
    flip one bit of B's ColBERT residuals, ``mv A A_old; mv B A``. The new A cannot be opened (the log says so)
    and every request, on every system and over HTTP, answers exactly as before the swap."""
    from starlette.testclient import TestClient

    from pyterrier_fandom_colbert.app.live import ServedFolder
    from pyterrier_fandom_colbert.app.search import Searcher
    from pyterrier_fandom_colbert.app.server import create_app

    a, b = tmp_path / "A", tmp_path / "B"
    build_folder(records(), a, colbert=colbert, checkpoint=tiny_bert_dir)
    served = ServedFolder(a, Searcher(a, colbert=colbert))
    client = TestClient(create_app(served), base_url="http://127.0.0.1")
    before = answers(served.call)
    assert client.get("/api/search", params={"q": QUERIES[0], "system": "tfidf"}).status_code == 200

    shutil.copytree(a, b)
    first = ("Orlaith Quenby", "Orlaith Quenby rebuilt the Brannoch lighthouse with green glass and new lamps.")
    build_folder(records([first]), b, colbert=colbert, checkpoint=tiny_bert_dir, overwrite=True)
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
    assert client.get("/api/info").json()["passages"] == len(records())
