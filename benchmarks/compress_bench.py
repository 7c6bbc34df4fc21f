"""Build time after encoding of the compressed formats: real token vectors through the index writer.

    .venv/bin/python benchmarks/compress_bench.py --source runs/plaid_compare/ours-fp16.colbert --tokens 1000000

The vectors of an existing fp16 index (``--source``; its documents cycled until ``--tokens`` vectors, each pass
with fresh docnos) are written through ``IndexWriter(compression=...)``, as the indexer writes what the encoder
produces: ``add`` per document (the fp16 spill), then ``close`` (codec training on a sample, quantisation in
chunks, inverted lists, docno lookup). Both are timed, with the codec's own split (train / quantise / lists), the
resident memory before and after, and the machine's load. Encoding is not part of it. Results as JSON to stdout
and ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_io import write_report


def rss_mb():
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(status["VmRSS"].split()[0]) / 1024, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, required=True, help="an fp16 ColBERT index folder (real vectors)")
    ap.add_argument("--tokens", type=int, default=1_000_000)
    ap.add_argument("--compression", nargs="+", default=["residual2"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("runs/compress_bench.json"))
    args = ap.parse_args(argv)
    if not (args.source / "pt_meta.json").exists():
        print(f"{args.source} holds no index: nothing to measure", file=sys.stderr)
        return 0

    import faiss
    import torch

    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    source = ColBERTIndex(args.source)
    vectors, offsets, token_ids = source.vectors, np.asarray(source.offsets), source.token_ids
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="compress_bench."))
    results = []
    for compression in args.compression:
        target = workdir / f"{compression}.colbert"
        load_before = os.getloadavg()[0]
        rss_before = rss_mb()
        written, doc, rounds = 0, 0, 0
        t = time.perf_counter()
        with ColBERTIndex(target).writer(source.config, "bench", overwrite=True, compression=compression) as writer:
            while written < args.tokens:
                lo, hi = int(offsets[doc]), int(offsets[doc + 1])
                n = min(hi - lo, args.tokens - written)
                writer.add(f"{rounds}-{doc}", np.asarray(vectors[lo:lo + n]), np.asarray(token_ids[lo:lo + n]))
                written += n
                doc += 1
                if doc == len(source):
                    doc, rounds = 0, rounds + 1
            adding = time.perf_counter() - t
            t = time.perf_counter()
        closing = time.perf_counter() - t
        built = ColBERTIndex(target)
        size = sum(p.stat().st_size for p in target.iterdir() if p.is_file())
        row = {"compression": compression, "tokens": written, "documents": len(built), "add_seconds": round(adding, 1),
               "close_seconds": round(closing, 1), "after_encoding_seconds": round(adding + closing, 1),
               "codec_seconds": built.codec_info["seconds"], "num_centroids": built.codec_info["num_centroids"],
               "bytes_per_token": round(size / written, 2), "rss_mb_before": [round(x) for x in rss_before],
               "rss_mb_after": [round(x) for x in rss_mb()],
               "load_avg_1min": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}}
        print(json.dumps(row), file=sys.stderr)
        results.append(row)
    report = {"source": str(args.source), "threads": args.threads, "results": results}
    return write_report(args.out, report)


if __name__ == "__main__":
    sys.exit(main())
