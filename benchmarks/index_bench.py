"""Benchmarks of the ColBERT index over synthetic token vectors (so they measure the index, not an encoder).

    rerank   index-based re-ranking of 1000 candidates per query (d = 128, ~100 tokens per document)
    e2e      end-to-end retrieval on a 100,000-passage index (~60 tokens per passage): latency of exact / IVF /
             IVF-PQ FAISS candidate generation + exact MaxSim, and top-10 overlap with exhaustive MaxSim
    rss      peak resident memory while writing 1,000,000 passages: measured at 10%, 50%, 100% and after close

Synthetic vectors: a vocabulary of 30,000 random unit "word" vectors with Zipf(1) frequencies; a passage is a
bag of words (30-90 for e2e/rss, 50-150 for rerank), each occurrence ``normalise(word + s g / sqrt(d))`` (g
standard normal, from a pool of 2^18 draws; s from 0.4 for the rarest word to 2.0 for the most frequent), so
tokens cluster by word as contextual embeddings do; a query takes 8 distinct words of a random passage (its
source) plus 2 random words, cycled to 32 vectors with fresh noise. Example (2-core CPU)::

    .venv/bin/python benchmarks/index_bench.py rerank --threads 2
    .venv/bin/python benchmarks/index_bench.py e2e --threads 2
    .venv/bin/python benchmarks/index_bench.py rss --threads 2

Results are printed and written as JSON to ``<workdir>/<bench>.json``; the indexes are deleted afterwards
unless ``--keep``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np

from pyterrier_fandom_colbert import ColBERTConfig
from pyterrier_fandom_colbert.index.ann import FaissSpec, cache_file, get_kind
from pyterrier_fandom_colbert.index.artifact import ColBERTIndex


@dataclass(frozen=True)
class Synthetic:
    """Passages as bags of Zipf-distributed words: each word has a random unit vector and each occurrence is
    that vector plus contextual noise, so token vectors cluster by word as ColBERT's do. Frequent words get
    more noise (``noise_common`` for the most frequent, falling log-linearly to ``noise_rare``): like
    stopwords in ColBERT, their vectors say more about the context than about the word."""

    num_docs: int
    mean_tokens: int
    dim: int = 128
    vocab: int = 30_000
    zipf: float = 1.0
    noise_rare: float = 0.4
    noise_common: float = 2.0
    seed: int = 0
    #: noise vectors are drawn from a pool of this many (drawing fresh normals would dominate the run time)
    noise_pool: int = 1 << 18

    def words(self) -> Tuple[np.ndarray, np.ndarray]:
        """Unit vectors ``[vocab, dim]`` (word ``i`` is the ``i``-th most frequent) and each word's noise."""
        vectors = unit(np.random.default_rng(self.seed).standard_normal((self.vocab, self.dim), dtype=np.float32))
        rarity = np.log(np.arange(1, self.vocab + 1)) / np.log(self.vocab)
        noise = (self.noise_common + (self.noise_rare - self.noise_common) * rarity).astype(np.float32)
        return vectors, noise

    def draw_words(self, rng: np.random.Generator, n: int) -> np.ndarray:
        freq = 1.0 / np.arange(1, self.vocab + 1) ** self.zipf
        return np.minimum(np.searchsorted(np.cumsum(freq / freq.sum()), rng.random(n)), self.vocab - 1)

    def chunks(self, size: int = 2000) -> Iterator[List[Tuple[str, np.ndarray, np.ndarray]]]:
        """Lists of (docno, fp16 vectors, token ids = word ids), ``size`` documents at a time."""
        rng = np.random.default_rng(self.seed + 1)
        words, noise = self.words()
        pool = rng.standard_normal((self.noise_pool, self.dim), dtype=np.float32) / np.sqrt(self.dim)
        low, high = self.mean_tokens // 2, self.mean_tokens * 3 // 2
        for start in range(0, self.num_docs, size):
            n = min(size, self.num_docs - start)
            lengths = rng.integers(low, high + 1, n)
            ids = self.draw_words(rng, int(lengths.sum()))
            g = pool[rng.integers(0, self.noise_pool, len(ids))] * noise[ids, None]
            vecs = unit(words[ids] + g).astype(np.float16)
            bounds = np.concatenate([[0], np.cumsum(lengths)])
            yield [(f"doc{start + i}", vecs[bounds[i]:bounds[i + 1]], ids[bounds[i]:bounds[i + 1]])
                   for i in range(n)]

    def queries(self, index: ColBERTIndex, n: int, seed: int = 1, n_q: int = 32, matched: int = 8,
                unmatched: int = 2):
        """(source passage ids, query vectors): ``n`` queries about random passages, each ``matched`` distinct
        words of its passage plus ``unmatched`` random words, cycled to ``n_q`` vectors (as [MASK]
        augmentation repeats query words), each with fresh noise."""
        import torch

        rng = np.random.default_rng(seed)
        words, noise = self.words()
        sources = rng.integers(0, len(index), n)
        out = []
        for doc in sources:
            own = np.unique(index.doc_vectors(int(doc))[1])
            terms = np.resize(np.concatenate([rng.choice(own, min(matched, len(own)), replace=False),
                                              self.draw_words(rng, unmatched)]), n_q)
            g = rng.standard_normal((n_q, self.dim), dtype=np.float32) * (noise[terms, None] / np.sqrt(self.dim))
            out.append(torch.as_tensor(unit(words[terms] + g)))
        return sources, out


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def set_threads(n: int) -> None:
    import faiss
    import torch

    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)


def build(path: Path, corpus: Synthetic) -> Dict[str, float]:
    """Write ``corpus`` through the index writer; returns timing and size figures."""
    config = ColBERTConfig(dim=corpus.dim)
    generating = writing = 0.0
    index = ColBERTIndex(path)
    t = time.perf_counter()
    with index.writer(config, fingerprint="synthetic", overwrite=True) as writer:
        chunks = corpus.chunks()
        while True:
            t0 = time.perf_counter()
            chunk = next(chunks, None)
            t1 = time.perf_counter()
            generating += t1 - t0
            if chunk is None:
                break
            for docno, vecs, ids in chunk:
                writer.add(docno, vecs, ids)
            writing += time.perf_counter() - t1
        t0 = time.perf_counter()
    writing += time.perf_counter() - t0  # close(): docno lookup, duplicate check, rename
    total = time.perf_counter() - t
    index = ColBERTIndex(path)
    stored = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    return {"num_docs": len(index), "num_tokens": index.meta.num_tokens, "write_s": round(writing, 2),
            "generate_s": round(generating, 2), "wall_s": round(total, 2),
            "docs_per_s": round(len(index) / writing), "tokens_per_s": round(index.meta.num_tokens / writing),
            "MB_per_s": round(stored / writing / 1e6, 1), "bytes_per_token": round(stored / index.meta.num_tokens, 1)}


def cpu_gflops() -> float:
    """Float32 matmul speed right now: shared machines vary, so figures carry this calibration."""
    import torch

    a = torch.randn(1024, 1024)
    a @ a
    t = time.perf_counter()
    for _ in range(10):
        a @ a
    return round(10 * 2 * 1024 ** 3 / (time.perf_counter() - t) / 1e9, 1)


def report(name: str, results: Dict, workdir: Path) -> None:
    print(json.dumps(results, indent=2))
    (workdir / f"{name}.json").write_text(json.dumps(results, indent=2))


def bench_rerank(args) -> Dict:
    """ms per query to score 1000 random candidates from stored vectors (docno lookup included)."""
    import torch

    from pyterrier_fandom_colbert.index.fp16.search import score_docs

    corpus = Synthetic(num_docs=args.docs or 20_000, mean_tokens=100)
    path = args.workdir / "rerank.idx"
    built = build(path, corpus)
    index = ColBERTIndex(path)
    queries = [q.to(args.device) for q in corpus.queries(index, args.queries)[1]]
    rng = np.random.default_rng(2)
    candidates = [index.docnos_of(rng.choice(len(index), 1000, replace=False)) for _ in queries]
    np.asarray(index.vectors).sum(dtype=np.float32)  # warm the page cache: the index is 0.5 GB
    for q, docnos in zip(queries[:10], candidates[:10]):  # warm-up (first-touch memory is slow in VMs)
        score_docs(index, q, np.unique(index.doc_ids(docnos)))
    times = []
    for q, docnos in zip(queries, candidates):
        t = time.perf_counter()
        ids, where = np.unique(index.doc_ids(docnos), return_inverse=True)
        score_docs(index, q, ids)[where]
        if q.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return {"corpus": asdict(corpus), "build": built, "device": args.device, "threads": args.threads,
            "candidates_per_query": 1000, "queries": len(times),
            "ms_per_query_mean": round(1e3 * float(np.mean(times)), 2),
            "ms_per_query_p95": round(1e3 * float(np.percentile(times, 95)), 2)}


def exhaustive_top(index: ColBERTIndex, q, k: int = 10) -> np.ndarray:
    from pyterrier_fandom_colbert.index.fp16.search import score_docs, top_k

    ids = np.arange(len(index))
    return ids[top_k(score_docs(index, q, ids), ids, k)]


def bench_e2e(args) -> Dict:
    """Latency and top-10 agreement with exhaustive MaxSim for exact / IVF / IVF-PQ candidate generation."""
    corpus = Synthetic(num_docs=args.docs or 100_000, mean_tokens=60)
    path = args.workdir / "e2e.idx"
    reused = args.reuse and (path / "pt_meta.json").exists()
    built = {"reused": str(path)} if reused else build(path, corpus)
    index = ColBERTIndex(path)
    sources, queries = corpus.queries(index, args.queries)
    queries = [q.to(args.device) for q in queries]
    t = time.perf_counter()
    truth = [exhaustive_top(index, q) for q in queries]
    exhaustive_ms = 1e3 * (time.perf_counter() - t) / len(queries)
    print(f"exhaustive MaxSim: {exhaustive_ms:.0f} ms/query", file=sys.stderr)
    rows = []
    flat_top: Dict[Tuple[int, int], List[np.ndarray]] = {}
    settings = [(kind, nprobe, refine) for kind in args.kinds
                for nprobe, refine in search_settings(kind, args.nprobe, args.refine)]
    neighbours = [(k, k_hat) for k in args.k for k_hat in (args.k_hat or [math.ceil(k / args.lam)])]
    for kind, nprobe, refine in settings:
        spec = FaissSpec(kind)
        t = time.perf_counter()
        ann = index.ann(spec)
        build_s = time.perf_counter() - t
        resolved = spec.resolve(index.meta.num_tokens, index.meta.dim)
        cache = cache_file(path, resolved)
        for k, k_hat in neighbours:
            times, tops = timed_search(index, ann, queries, k, k_hat, nprobe, refine)
            neighbour_ms, candidates = neighbour_search(index, ann, queries, k_hat, nprobe, refine)
            flat_top.setdefault((k, k_hat), tops)  # the first kind's (flat, unless --kinds says otherwise)
            row = {"faiss": resolved.factory_string(), "nprobe": nprobe, "refine": refine, "k": k,
                   "k_hat": k_hat,
                   "ms_per_query_mean": round(1e3 * float(np.mean(times)), 1),
                   "ms_per_query_p95": round(1e3 * float(np.percentile(times, 95)), 1),
                   "neighbour_ms_mean": round(neighbour_ms, 1), "candidates_mean": round(candidates),
                   "overlap_at_10": overlap(tops, truth),
                   "overlap_at_10_with_flat": overlap(tops, flat_top[(k, k_hat)]),
                   "source_in_top_10": round(float(np.mean([s in top for s, top in zip(sources, tops)])), 3),
                   "faiss_build_or_load_s": round(build_s, 1),
                   "faiss_bytes_per_token": round(cache.stat().st_size / index.meta.num_tokens, 1)
                   if cache is not None and cache.exists() else None}
            print(row, file=sys.stderr)
            rows.append(row)
            build_s = 0.0
    return {"corpus": asdict(corpus), "build": built, "device": args.device, "threads": args.threads,
            "queries": len(queries), "exhaustive_ms_per_query": round(exhaustive_ms),
            "exhaustive_source_in_top_10": round(float(np.mean([s in top for s, top in zip(sources, truth)])), 3),
            "results": rows}


def timed_search(index: ColBERTIndex, ann, queries, k: int, k_hat: int, nprobe,
                 refine: int = 1, cpu: Optional[List[float]] = None) -> Tuple[List[float], List[np.ndarray]]:
    """End-to-end search of each query alone, after three warm-up queries: (seconds, top-10 ids) per query; the
    process's CPU seconds per query (all threads) are appended to ``cpu`` when given (on a machine shared with
    other jobs they vary less than wall time)."""
    from pyterrier_fandom_colbert.index.fp16.search import search

    search(index, ann, queries[:3], k, k_hat, nprobe, refine)
    times, tops = [], []
    for q in queries:
        t, c = time.perf_counter(), time.process_time()
        (ids, _), = search(index, ann, [q], k, k_hat, nprobe, refine)
        times.append(time.perf_counter() - t)
        if cpu is not None:
            cpu.append(time.process_time() - c)
        tops.append(ids[:10])
    return times, tops


def search_settings(kind: str, nprobes: List[int], refines: List[int]) -> List[Tuple]:
    """(nprobe, refine) pairs to measure for a FAISS kind: only the values it accepts (one pair for ``exact``)."""
    options = get_kind(kind).options
    return [(nprobe, refine) for nprobe in (nprobes if "nprobe" in options else [None])
            for refine in (refines if "refine" in options else [1])]


def neighbour_search(index: ColBERTIndex, ann, queries, k_hat: int, nprobe, refine: int) -> Tuple[float, float]:
    """The candidate-generation part alone, each query by itself: (mean ms, mean candidate passages) per query."""
    from pyterrier_fandom_colbert.index.fp16.search import docs_of_rows, token_neighbours

    times, counts = [], []
    for q in queries:
        t = time.perf_counter()
        hits = token_neighbours(index, ann, [q], k_hat, nprobe, refine)
        times.append(time.perf_counter() - t)
        counts.append(len(np.unique(docs_of_rows(index.offsets, hits[hits >= 0]))))
    return 1e3 * float(np.mean(times)), float(np.mean(counts))


def overlap(tops: List[np.ndarray], reference: List[np.ndarray]) -> float:
    """Mean fraction of each reference top-10 found in the corresponding top-10."""
    return round(float(np.mean([len(set(a.tolist()) & set(b.tolist())) / len(b) for a, b in zip(tops, reference)])), 4)


def rss_mb() -> Tuple[float, float]:
    """(current, peak) resident set size in MB, from /proc (Linux)."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


def bench_rss(args) -> Dict:
    """Resident memory while writing a large synthetic corpus: it must not grow with the corpus."""
    corpus = Synthetic(num_docs=args.docs or 1_000_000, mean_tokens=args.tokens, dim=128)
    path = args.workdir / "rss.idx"
    marks = [(int(corpus.num_docs * f), f"{int(f * 100)}%") for f in (0.1, 0.5, 1.0)]
    points = {"start": rss_mb()}
    t = time.perf_counter()
    with ColBERTIndex(path).writer(ColBERTConfig(dim=128), "synthetic", overwrite=True) as writer:
        for chunk in corpus.chunks():
            for docno, vecs, ids in chunk:
                writer.add(docno, vecs, ids)
            while marks and writer.num_docs >= marks[0][0]:
                points[marks.pop(0)[1]] = rss_mb()
    points["after close"] = rss_mb()
    elapsed = time.perf_counter() - t
    index = ColBERTIndex(path)
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    return {"corpus": asdict(corpus), "num_tokens": index.meta.num_tokens, "index_GB": round(size / 1e9, 2),
            "seconds": round(elapsed, 1), "rss_MB": {k: {"current": round(c), "peak": round(p)}
                                                    for k, (c, p) in points.items()}}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bench", choices=["rerank", "e2e", "rss"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="torch device for exact scoring (cpu or cuda)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/pfc-index-bench"))
    parser.add_argument("--docs", type=int, default=None, help="corpus size (default per benchmark)")
    parser.add_argument("--tokens", type=int, default=60, help="rss: mean tokens per passage")
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--k", type=int, nargs="+", default=[10, 100, 1000], help="e2e: num_results values")
    parser.add_argument("--lam", type=float, default=2, help="e2e: k̂ = ceil(k / lam) unless --k-hat is given")
    parser.add_argument("--k-hat", type=int, nargs="+", default=None, help="e2e: token neighbours per vector")
    parser.add_argument("--kinds", nargs="+", default=["exact", "ivf", "ivfpq"], help="e2e: FAISS kinds")
    parser.add_argument("--reuse", action="store_true", help="e2e: reuse a kept index in --workdir")
    parser.add_argument("--nprobe", type=int, nargs="+", default=[16, 64], help="e2e: IVF lists probed")
    parser.add_argument("--block-tokens", type=int, default=None,
                        help="padded token rows scored per block (default: retrieval.BLOCK_TOKENS for the device)")
    parser.add_argument("--refine", type=int, nargs="+", default=[1],
                        help="e2e: FAISS fetches refine * k̂ neighbours, the k̂ nearest by stored vectors are kept")
    parser.add_argument("--keep", action="store_true", help="keep the benchmark indexes")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    if args.block_tokens:
        from pyterrier_fandom_colbert.index.fp16 import search as retrieval

        retrieval.BLOCK_TOKENS[args.device.split(":")[0]] = args.block_tokens
    args.workdir.mkdir(parents=True, exist_ok=True)
    bench = {"rerank": bench_rerank, "e2e": bench_e2e, "rss": bench_rss}[args.bench]
    load_before, gflops_before = os.getloadavg()[0], cpu_gflops()
    try:
        results = bench(args)
        # other processes on the machine distort timings: keep the load and a matmul probe with the figures
        results["load_avg_1min"] = {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}
        results["matmul_gflops"] = {"before": gflops_before, "after": cpu_gflops()}
        results["block_tokens"] = args.block_tokens
        report(args.bench, results, args.workdir)
    finally:
        if not args.keep:
            shutil.rmtree(args.workdir / f"{args.bench}.idx", ignore_errors=True)


if __name__ == "__main__":
    main()
