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
    scifact   (``--scifact``) the cost of checking data as it is read, on real vectors: the first ``--docs``
              SciFact passages encoded once with the default checkpoint into an fp16 and a residual2 index
              (the residual2 one written from the fp16 vectors), each opened with its checks (sizes, small files'
              checksums, and every block verified on its first read) and, as the baseline, a copy without manifest
              opened ``unchecked=True`` (no checks at all: what reading costs without them). Interleaved in one
              process, ``--rounds`` times: open (median of ``--repeats`` fresh opens to a usable retriever), first
              query on a fresh index object (its blocks not yet verified), steady-state p50 over ``--queries``
              train claims after every claim ran once. fp16 retrieves with ``--faiss`` (default exact), residual2
              by centroid search with its defaults.

The same script runs against older code (without ``verify``) for a before/after comparison, e.g.::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/integrity_bench.py --threads 2
    PYTHONPATH=/path/to/old/checkout .venv/bin/python benchmarks/integrity_bench.py --threads 2
    .venv/bin/python benchmarks/integrity_bench.py --scifact /path/to/data/scifact --docs 2000 --queries 50

Each run builds its own index under ``--workdir`` (deleted afterwards) and prints JSON.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from index_bench import Synthetic, build, set_threads

from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
from pyterrier_fandom_colbert.lexical.tfidf import TfidfIndex

#: the shared data root, beside the repository's folder (absent: the SciFact part skips)
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def query_times(retriever, frames) -> list:
    """Seconds each one-query frame of ``frames`` takes through ``retriever``, in order."""
    times = []
    for frame in frames:
        t = time.perf_counter()
        retriever(frame)
        times.append(time.perf_counter() - t)
    return times


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
    times = query_times(retriever, frames)
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


def load_scifact(root: Path, num_docs: int, num_queries: int):
    """The first ``num_docs`` passages (title. text) and ``num_queries`` train claims of SciFact under ``root``."""
    import gzip

    with gzip.open(root / "corpus.jsonl.gz", "rt") as f:
        docs = []
        for line in f:
            d = json.loads(line)
            docs.append({"docno": d["_id"], "text": (d.get("title", "") + ". " + d["text"]).strip(". ")})
            if len(docs) == num_docs:
                break
    with gzip.open(root / "queries-train.jsonl.gz", "rt") as f:
        queries = [json.loads(line) for _, line in zip(range(num_queries), f)]
    return docs, pd.DataFrame({"qid": [q["_id"] for q in queries], "query": [q["text"] for q in queries]})


def unchecked_copy(path: Path) -> Path:
    """A copy of an index without the manifest in its pt_meta.json: opened ``unchecked=True``, nothing is checked."""
    copy = path.with_name(path.name + "-unchecked")
    shutil.copytree(path, copy)
    meta = json.loads((copy / "pt_meta.json").read_text())
    del meta["files"]
    meta.pop("meta_checksum", None)  # (the seal covers the manifest just removed: an unchecked index has neither)
    (copy / "pt_meta.json").write_text(json.dumps(meta))
    return copy


def bench_scifact(args) -> dict:
    import warnings

    import pyterrier_fandom_colbert as pfc

    root = args.scifact
    if not (root / "corpus.jsonl.gz").is_file():
        return {"skipped": f"no SciFact corpus at {root}"}
    docs, topics = load_scifact(root, args.docs, args.queries)
    colbert = pfc.ColBERT.from_pretrained(args.checkpoint, device="cpu")
    t = time.perf_counter()
    fp16 = ColBERTIndex(args.workdir / "fp16").indexer(colbert, ann=None).index(docs)
    encode_s = time.perf_counter() - t
    with ColBERTIndex(args.workdir / "residual2").writer(colbert.config, colbert.fingerprint(),
                                                         compression="residual2") as writer:
        for d in range(len(fp16)):
            vectors, token_ids = fp16.doc_vectors(d)
            writer.add(str(fp16.docnos_of(np.array([d]))[0]), vectors, token_ids)
    frames = [colbert.query_encoder()(topics.iloc[[i]]) for i in range(len(topics))]
    options = {"fp16": {"faiss": args.faiss}, "residual2": {}}
    paths = {(fmt, mode): (args.workdir / fmt if mode == "checked" else unchecked_copy(args.workdir / fmt))
             for fmt in options for mode in ("checked", "unchecked")}

    def open_retriever(fmt: str, mode: str):
        index = ColBERTIndex(paths[fmt, mode], unchecked=mode == "unchecked")
        retriever = index.retriever(num_results=10, **options[fmt])
        index.offsets, index.docnos  # noqa: B018
        return index, retriever

    samples: dict = {key: {"open_ms": [], "first_query_ms": [], "p50_ms": []} for key in paths}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the unchecked copies warn on every open)
        for _ in range(args.rounds):
            for key in paths:
                samples[key]["open_ms"].append(median_ms(lambda key=key: open_retriever(*key), args.repeats))
                _, retriever = open_retriever(*key)
                t = time.perf_counter()
                retriever(frames[0])
                samples[key]["first_query_ms"].append(1e3 * (time.perf_counter() - t))
                for frame in frames[1:]:
                    retriever(frame)
                times = query_times(retriever, frames)
                samples[key]["p50_ms"].append(1e3 * float(np.median(times)))
    checks = check_cost(paths, options, frames, args.repeats)
    out: dict = {"docs": len(docs), "tokens": fp16.meta.num_tokens, "queries": len(frames),
                 "encode_s": round(encode_s, 1), "fp16_faiss": args.faiss, "rounds": args.rounds}
    for fmt in options:
        row = {}
        for mode in ("unchecked", "checked"):
            for measure, values in samples[fmt, mode].items():
                row[f"{measure}_{mode}"] = round(float(np.median(values)), 2)
        row["steady_overhead_pct"] = round(100 * (row["p50_ms_checked"] / row["p50_ms_unchecked"] - 1), 1)
        files = [f for f in paths[fmt, "checked"].rglob("*") if f.is_file()]
        row["files_MB"] = round(sum(f.stat().st_size for f in files) / 1e6, 1)
        out[fmt] = {**row, **checks[fmt]}
    return out


def hundred(fn) -> None:
    for _ in range(100):
        fn()


def fp16_check(index, docs) -> None:
    index.store.check_docs(docs)


def residual_check(index, docs) -> None:
    guard = index.store.arrays.guard
    guard.docs(docs, True)
    guard.lists(np.arange(index.codec.num_centroids))


def check_cost(paths: dict, options: dict, frames: list, repeats: int) -> dict:
    """What the read checks cost a query once the data read is verified, timed alone (so that it is not lost in
    the noise of whole queries on a busy machine): µs per call of the check made before the candidates are
    scored, over every document of the index (the largest candidate set), with the file's "every block verified"
    flag (``complete``: what steady state costs) and, forced off, the per-block bitmap look-up (what a read costs
    while other blocks of the file are still unverified)."""
    import warnings

    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fmt in options:
            index = ColBERTIndex(paths[fmt, "checked"])
            retriever = index.retriever(num_results=10, **options[fmt])
            for frame in frames:
                retriever(frame)
            docs = np.arange(len(index))
            check = partial(fp16_check if fmt == "fp16" else residual_check, index, docs)
            if fmt == "fp16":
                blocks = [index.store.vector_blocks]
            else:
                guard = index.store.arrays.guard
                blocks = [guard.codes, guard.residuals, guard.ivf_docs]
            for b in blocks:
                b.all()  # (every block verified, as after enough queries)
            complete = median_ms(partial(hundred, check), repeats) * 10  # µs per call
            for b in blocks:
                b.complete = False
            bitmap = median_ms(partial(hundred, check), repeats) * 10
            for b in blocks:
                b.complete = True
            out[fmt] = {"check_us_complete": round(complete, 2), "check_us_bitmap": round(bitmap, 1),
                        "check_docs": len(docs)}
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/pfc-integrity-bench"))
    parser.add_argument("--docs", type=int, default=16_667, help="ColBERT passages (~60 tokens each: ~1M tokens)")
    parser.add_argument("--tfidf-docs", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=20, help="opens timed (median reported)")
    parser.add_argument("--hashes", action="store_true", help="only compare checksum algorithms")
    parser.add_argument("--scifact", type=Path, nargs="?", const=DATA / "scifact", default=None,
                        help="only the SciFact read-check comparison (SciFact folder; default: the shared data's)")
    parser.add_argument("--rounds", type=int, default=3, help="SciFact: interleaved rounds (median reported)")
    parser.add_argument("--faiss", default="exact", help="SciFact: the fp16 retriever's neighbour search")
    parser.add_argument("--checkpoint", default=None, help="SciFact: the encoder (default: the package's checkpoint)")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        if args.scifact is not None:
            if args.docs == parser.get_default("docs"):
                args.docs = 2_000
            if args.queries == parser.get_default("queries"):
                args.queries = 50
            results = {"scifact": bench_scifact(args), "threads": args.threads}
        elif args.hashes:
            results = bench_hashes(args)
        else:
            results = {"colbert": bench_colbert(args), "tfidf": bench_tfidf(args), "threads": args.threads}
    finally:
        shutil.rmtree(args.workdir, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
