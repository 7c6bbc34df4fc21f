"""The heap given back to the OS during long encoding loops (heap.py): the trim really releases freed memory,
and every encoding loop of a build calls it."""
from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pandas as pd
import pytest

from pyterrier_fandom_colbert import heap


def _rss_anon_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon in /proc/self/status")


@pytest.mark.skipif(not sys.platform.startswith("linux") or not heap.can_trim(), reason="needs glibc's malloc_trim")
def test_trim_returns_freed_heap_pages():
    blocks = [bytearray(64 * 1024) for _ in range(3000)]  # 188 MiB of heap chunks (under the mmap threshold)
    for block in blocks:
        block[::4096] = b"x" * len(block[::4096])  # touch every page
    keep = blocks[-1]  # the heap's top stays in use: only a trim returns the free pages below it
    del blocks
    before = _rss_anon_mb()
    assert heap.trim_heap() is True
    after = _rss_anon_mb()
    assert before - after > 100, (before, after)
    assert keep[0] == ord("x")


#: in a fresh process: frees a 20 MiB block (glibc then raises its mmap threshold to 20 MiB, unless it was fixed),
#: then touches and frees a 16 MiB one; prints the anonymous memory still held after that, in MiB
#: (after the source of :func:`_rss_anon_mb`)
_HELD_AFTER_FREE = """
import json, sys
from pyterrier_fandom_colbert import heap
if sys.argv[1] == "low":
    heap.give_back_freed_memory()
first = bytearray(20 << 20)
del first
before = _rss_anon_mb()
block = bytearray(16 << 20)
during = _rss_anon_mb()
del block
print(json.dumps({"during": during - before, "after": _rss_anon_mb() - before}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or not heap.can_trim(), reason="needs glibc's mallopt")
def test_low_memory_gives_a_freed_block_back_at_once_where_the_default_keeps_it():
    held = {}
    for mode in ("default", "low"):
        code = inspect.getsource(_rss_anon_mb) + _HELD_AFTER_FREE
        done = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        held[mode] = json.loads(done.stdout)
    for mode in held:
        assert held[mode]["during"] > 14, held  # the block's 16 MiB were resident while in use, in both
    assert held["default"]["after"] > 12, held  # kept in the heap: glibc's threshold had risen past 16 MiB
    assert held["low"]["after"] < 4, held  # its own pages, given back when freed
    with pytest.raises(ValueError, match="threshold=0"):
        heap.give_back_freed_memory(0)


def test_trimmer_counts_and_refuses_bad_settings():
    trimmer = heap.HeapTrimmer(every=10)
    assert [trimmer.add(n) for n in (9, 1, 25, 4, 1)] == [False, True, True, False, True]
    assert (trimmer.trims, trimmer.passages) == (3, 40)
    with pytest.raises(ValueError, match="every=0"):
        heap.HeapTrimmer(every=0)


@pytest.fixture
def trims(monkeypatch):
    calls = []
    monkeypatch.setattr(heap, "TRIM_EVERY", 4)
    monkeypatch.setattr(heap, "trim_heap", lambda: calls.append(1) or True)
    return calls


def test_the_indexer_trims_every_so_many_documents(small_colbert, tmp_path, trims):
    import pyterrier_fandom_colbert as pfc

    docs = pd.DataFrame({"docno": [f"d{i}" for i in range(10)],
                         "text": [f"passage {i} about dragons" for i in range(10)]})
    pfc.ColBERTIndex(tmp_path / "ix").indexer(small_colbert, batch_size=3, ann=None).index(docs)
    assert len(trims) == 3  # after 6 (passed 4) and 9 (passed 8) of the batches 3, 3, 3, 1; then once at the end


def test_a_folder_build_trims_within_a_chunk_and_when_encoding_ends(small_colbert, tmp_path, trims):
    from pyterrier_fandom_colbert.app.folder import build_folder

    docs = [{"docno": f"d{i}", "text": f"passage {i} about dragons and castles"} for i in range(10)]
    build_folder(docs, tmp_path / "folder", colbert=small_colbert)
    assert len(trims) == 3  # one chunk of 10 passages, counted as the encoder goes: past 4, past 8, then the end


def test_finish_trims_only_what_came_since_the_last_trim():
    trimmer = heap.HeapTrimmer(every=4)
    assert trimmer.finish() is False  # nothing encoded yet
    assert [trimmer.add(n) for n in (1.5, 2.5)] == [False, True]  # shares of passages count: 4.0 passes 4
    assert trimmer.finish() is False and trimmer.trims == 1
    trimmer.add(0.25)
    assert trimmer.finish() is True and trimmer.trims == 2
