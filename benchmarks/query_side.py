"""Where the time of one end-to-end query goes on a compressed index: the PyTerrier pipeline
(``index.retriever(colbert, num_results=10).search(q)``) against the same encoder and centroid search called
directly (``colbert.encode_queries`` + ``residual.search.search_one``), interleaved query by query in one process
(which of the two meets a query first alternates, so that neither always finds the query's data in the caches).

    .venv/bin/python benchmarks/query_side.py --index runs/plaid_compare/ours-residual2.colbert

Topics: SciFact's train claims (the first ``--queries`` after 20 warm-up ones). Prints p50 ms of both, of
query encoding alone, and of query encoding through transformers' own forward (``model.fast_inference`` off: the
path other backbones take). colbert-ai's query encoding alone, for comparison, from its own environment:
``/tmp/peers-venv/bin/python benchmarks/plaid_peer.py encode runs/plaid_compare/checkpoint-colbert-ai
../shared/data/scifact/queries-train.jsonl.gz 200``.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_io import write_report

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, required=True, help="a compressed ColBERT index of SciFact")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", type=Path, default=DATA / "scifact")
    ap.add_argument("--out", type=Path, default=Path("runs/query_side.json"))
    ap.add_argument("--checkpoint", default=None, help="the index's encoder (default: the bundled checkpoint)")
    args = ap.parse_args(argv)
    queries_file = args.data / "queries-train.jsonl.gz"
    if not queries_file.exists():
        print(f"{queries_file} not found: skipped")
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.index.residual import search as cs

    torch.set_num_threads(args.threads)
    with gzip.open(queries_file, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f][:20 + args.queries]
    colbert = pfc.ColBERT.from_pretrained(args.checkpoint, device="cpu")
    index = pfc.ColBERTIndex(args.index)
    pipeline = index.retriever(colbert, num_results=10)
    store, params = index.store.arrays, cs.SearchParams.for_k(10)
    centroids = torch.from_numpy(store.codec.centroids)
    times = {"pipeline": [], "direct": [], "encoding": [], "encoding_transformers": []}
    fast = colbert.model.fast_inference
    with torch.inference_mode():
        for i, text in enumerate(texts):
            for first in (i % 2 == 0, i % 2 == 1):  # alternate which path meets the query first (cold caches)
                if first:
                    start = time.perf_counter()
                    pipeline.search(text)
                    piped = time.perf_counter() - start
                else:
                    start = time.perf_counter()
                    Q, mask = colbert.encode_queries([text])
                    encoded = time.perf_counter() - start
                    cs.search_one(store, centroids, Q[0][mask[0]], 10, params)
                    direct = time.perf_counter() - start
            colbert.model.fast_inference = False  # the same encoding through transformers' BertModel.forward
            start = time.perf_counter()
            colbert.encode_queries([text])
            through_transformers = time.perf_counter() - start
            colbert.model.fast_inference = fast
            if i >= 20:
                times["encoding_transformers"].append(through_transformers)
                times["pipeline"].append(piped)
                times["direct"].append(direct)
                times["encoding"].append(encoded)
    report = {f"{name}_ms_p50": round(1e3 * float(np.median(values)), 2) for name, values in times.items()}
    report.update(queries=args.queries, threads=args.threads, load_avg_1min=round(os.getloadavg()[0], 2))
    return write_report(args.out, report)


if __name__ == "__main__":
    sys.exit(main())
