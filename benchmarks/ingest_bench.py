"""Dump -> passages throughput and passage statistics.

    python benchmarks/ingest_bench.py                       # the shared PokéClicker dump, all formats
    python benchmarks/ingest_bench.py --dump X.xml.7z --formats 7z --memory

The dump is re-encoded into each requested format in a temporary folder (``xml``, ``bz2``, ``gz``, ``7z``), then
read twice: XML only (``iter_pages``) and the full pipeline (``dump_passages``: cleaning + splitting). Throughput
is megabytes of *uncompressed* XML per second, of wall-clock time and (for the full pipeline) of the process's
CPU time (``time.process_time``), which varies less on a machine shared with other jobs. ``--memory`` adds a
third pass under tracemalloc (slower) and reports the peak of Python allocations, to show that memory does not
grow with the dump.
"""
from __future__ import annotations

import argparse
import bz2
import gzip
import shutil
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from pyterrier_fandom_colbert.data.passages import DumpStats, PassageConfig, dump_passages
from pyterrier_fandom_colbert.data.wikidump import iter_pages, xml_chunks

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DUMP = ROOT.parent / "shared" / "data" / "wikis" / "pokeclickerwiki_pages_current.xml.bz2"


def reencode(dump: Path, folder: Path, formats: list[str]) -> dict:
    xml = folder / "dump.xml"
    with open(xml, "wb") as out:
        for chunk in xml_chunks(dump):
            out.write(chunk)
    files = {"xml": xml}
    data = xml.read_bytes()
    if "bz2" in formats:
        files["bz2"] = folder / "dump.xml.bz2"
        files["bz2"].write_bytes(bz2.compress(data))
    if "gz" in formats:
        files["gz"] = folder / "dump.xml.gz"
        files["gz"].write_bytes(gzip.compress(data))
    if "7z" in formats:
        import py7zr
        files["7z"] = folder / "dump.xml.7z"
        with py7zr.SevenZipFile(files["7z"], "w") as z:
            z.write(xml, "dump_pages_current.xml")
    return {f: files[f] for f in formats}


def percentile(values: list[int], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", type=Path, default=DEFAULT_DUMP)
    parser.add_argument("--formats", default="xml,bz2,gz,7z")
    parser.add_argument("--memory", action="store_true", help="also measure the tracemalloc peak (slow)")
    args = parser.parse_args(argv)
    if not args.dump.exists():
        raise SystemExit(f"dump not found: {args.dump}")
    formats = args.formats.split(",")
    config = PassageConfig()
    folder = Path(tempfile.mkdtemp(prefix="ingest-bench-"))
    try:
        files = reencode(args.dump, folder, formats)
        rows, words = [], None
        for fmt, path in files.items():
            t0 = time.perf_counter()
            pages = iter_pages(path)
            n_pages = sum(1 for _ in pages)
            t_read = time.perf_counter() - t0
            stats = DumpStats()
            t0, c0 = time.perf_counter(), time.process_time()
            passages = list(dump_passages(path, config, stats))
            t_full, c_full = time.perf_counter() - t0, time.process_time() - c0
            words = words or [len(p.text.split()) for p in passages]
            peak = ""
            if args.memory:
                tracemalloc.start()
                for _ in dump_passages(path, config):
                    pass
                peak = f"{tracemalloc.get_traced_memory()[1] / 2**20:.1f}"
                tracemalloc.stop()
            mb = stats.bytes_read / 1e6
            rows.append((fmt, path.stat().st_size / 1e6, mb, n_pages, t_read, mb / t_read, t_full, mb / t_full,
                         mb / c_full, peak))
        print(f"dump: {args.dump.name}; config: {config.to_json()}")
        print(f"pages read {stats.pages}; articles {stats.articles}; skipped {dict(stats.skipped)}; "
              f"passages {stats.passages}")
        print(f"words per passage: min {min(words)}, median {statistics.median(words):.0f}, "
              f"p90 {percentile(words, 0.9)}, max {max(words)}, mean {statistics.mean(words):.1f}\n")
        print("| format | file MB | XML MB | pages | read s | read MB/s | passages s | passages MB/s | "
              "passages MB/s of CPU time |" + (" tracemalloc peak MiB |" if args.memory else ""))
        print("|---|---|---|---|---|---|---|---|---|" + ("---|" if args.memory else ""))
        for fmt, size, mb, n, tr, rr, tf, rf, rc, peak in rows:
            print(f"| {fmt} | {size:.2f} | {mb:.2f} | {n} | {tr:.2f} | {rr:.1f} | {tf:.2f} | {rf:.1f} | {rc:.1f} |"
                  + (f" {peak} |" if args.memory else ""))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
