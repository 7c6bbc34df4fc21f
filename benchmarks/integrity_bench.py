"""What the integrity checks cost: building, opening and searching a ColBERT index of ~1M synthetic tokens (and
a TF-IDF index of synthetic passages), and the full ``verify()``.

    open      a fresh ColBERTIndex object to a usable retriever: metadata, the open checks (sizes, checksums of
              the small files, offsets structure), config, offsets, docnos and the vectors' memory map (the page
              cache is warm: this is the checks' CPU cost, not the disk's)
    query     ms per query of ``index.retriever(num_results=100)`` (exact 'flat' neighbours, k̂ = 50) on one query
              frame at a time, after warm-up
    verify    ``index.verify()`` on the whole index (every checksum, the NaN scan), warm page cache
    hashes    (``--hashes``) MB/s of candidate checksum algorithms over a 100 MB random file in the page cache,
              read in 1 MB blocks, best of three (why manifests use XXH3-128)

The same script runs against older code (without ``verify``) for a before/after comparison, e.g.::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/integrity_bench.py --threads 2
    PYTHONPATH=/path/to/old/checkout .venv/bin/python benchmarks/integrity_bench.py --threads 2

Each run builds its own index under ``--workdir`` (deleted afterwards) and prints JSON.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from index_bench import Synthetic, build, set_threads

from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
from pyterrier_fandom_colbert.lexical.tfidf import TfidfIndex


def open_index(path: Path):
    """What a first query needs, on a fresh object."""
    index = ColBERTIndex(path)
    retriever = index.retriever(num_results=100)
    index.config, index.offsets, index.docnos, index.vectors  # noqa: B018
    return index, retriever


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return round(1e3 * statistics.median(times), 2)


def bench_colbert(args) -> dict:
    corpus = Synthetic(num_docs=args.docs, mean_tokens=60)
    path = args.workdir / "colbert.idx"
    built = build(path, corpus)
    index, retriever = open_index(path)
    _, queries = corpus.queries(index, args.queries)
    frames = [pd.DataFrame({"qid": [f"q{i}"], "query_embs": [q.numpy()]}) for i, q in enumerate(queries)]
    for frame in frames[:3]:
        retriever(frame)
    times = []
    for frame in frames:
        t = time.perf_counter()
        retriever(frame)
        times.append(time.perf_counter() - t)
    out = {"num_docs": len(index), "num_tokens": index.meta.num_tokens, "write_s": built["write_s"],
           "write_MB_per_s": built["MB_per_s"],
           "open_ms_median": median_ms(lambda: open_index(path), args.repeats),
           "query_ms_mean": round(1e3 * float(np.mean(times)), 2),
           "query_ms_median": round(1e3 * float(np.median(times)), 2)}
    if hasattr(index, "verify"):
        size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        np.asarray(index.vectors).sum(dtype=np.float32)  # warm the page cache
        t = time.perf_counter()
        index.verify()
        seconds = time.perf_counter() - t
        out.update({"verify_s": round(seconds, 3), "verify_MB_per_s": round(size / seconds / 1e6)})
    return out


def bench_tfidf(args) -> dict:
    rng = np.random.default_rng(0)
    words = np.array([f"w{i}" for i in range(20_000)])
    freq = 1.0 / np.arange(1, len(words) + 1)
    cdf = np.cumsum(freq / freq.sum())
    docs = [{"docno": f"t{i}", "text": " ".join(words[np.searchsorted(cdf, rng.random(60))])}
            for i in range(args.tfidf_docs)]
    path = args.workdir / "tfidf.idx"
    t = time.perf_counter()
    TfidfIndex(path).indexer(store_text=True).index(docs)
    write_s = time.perf_counter() - t

    def opened():
        index = TfidfIndex(path)
        index.retriever(text=True)
        index.postings, index.docnos  # noqa: B018

    out = {"num_docs": args.tfidf_docs, "write_s": round(write_s, 2), "open_ms_median": median_ms(opened, 5)}
    index = TfidfIndex(path)
    if hasattr(index, "verify"):
        t = time.perf_counter()
        index.verify()
        out["verify_s"] = round(time.perf_counter() - t, 3)
    return out


def bench_hashes(args) -> dict:
    import hashlib

    import xxhash

    path = args.workdir / "random.bin"
    path.write_bytes(np.random.default_rng(0).bytes(100_000_000))
    candidates = {"xxh3_128": xxhash.xxh3_128, "xxh3_64": xxhash.xxh3_64, "xxh64": xxhash.xxh64,
                  "blake2b-128": lambda: hashlib.blake2b(digest_size=16), "blake2b-256": hashlib.blake2b,
                  "sha256": hashlib.sha256, "read only": None}
    out = {}
    for name, make in candidates.items():
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            h = make() if make else None
            with open(path, "rb") as f:
                while block := f.read(1 << 20):
                    if h is not None:
                        h.update(block)
            best = min(best, time.perf_counter() - t)
        out[name] = round(path.stat().st_size / best / 1e6)
    return {"MB_per_s": out}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/pfc-integrity-bench"))
    parser.add_argument("--docs", type=int, default=16_667, help="ColBERT passages (~60 tokens each: ~1M tokens)")
    parser.add_argument("--tfidf-docs", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=20, help="opens timed (median reported)")
    parser.add_argument("--hashes", action="store_true", help="only compare checksum algorithms")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        if args.hashes:
            results = bench_hashes(args)
        else:
            results = {"colbert": bench_colbert(args), "tfidf": bench_tfidf(args), "threads": args.threads}
    finally:
        shutil.rmtree(args.workdir, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
