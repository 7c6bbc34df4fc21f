"""Speed against agreement for a compressed index's centroid search, over its parameters.

    .venv/bin/python benchmarks/compressed_tradeoff.py --data wikiqa --compressed IDX_R2 --fp16 IDX_FP16

Both indexes must hold the same corpus built by the same encoder (e.g. ``plaid_compare.py``'s cached ones, or
``index.indexer(colbert, compression=...)`` twice); with ``--convert``, a missing ``--compressed`` index is written
from the fp16 one's vectors (``--compression``, default residual2; no re-encoding). For every setting in the grid
(``--ncells`` × ``--ndocs`` × ``--nscore-div``, ``nscore`` = ``ndocs / div``, default 4 as PLAID's; the default
threshold for k = 10, or ``--threshold``), each query's top 10 is compared
with exhaustive MaxSim over the decompressed vectors (what pruning loses) and with exact search over the fp16
vectors (what pruning and compression lose together), and scored by the qrels (nDCG@10, RR@10); search time
excludes query encoding. Topics: a ``pipelines/evaluate.py`` data name (``squad-selection``: the protocol's
selection part, which may choose parameters; ``wikiqa``: its dev questions); the first ``--queries``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_io import write_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))


def agree(tops, reference) -> float:
    """Mean share of each reference top 10 found in the corresponding top 10."""
    return round(float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(tops, reference)])), 4)


def quality(topics, tops, qrels, index) -> dict:
    """nDCG@10 and RR@10 of the top 10s (document ids, best first) of ``topics``."""
    import ir_measures
    import pandas as pd
    from ir_measures import RR, nDCG

    rows = [{"query_id": qid, "doc_id": docno, "score": float(10 - r)}
            for qid, top in zip(topics["qid"], tops)
            for r, docno in enumerate(index.docnos_of(np.asarray(top, dtype=np.int64)).tolist())]
    run = pd.DataFrame(rows)
    judged = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    found = ir_measures.calc_aggregate([nDCG @ 10, RR @ 10], judged, run)
    return {"ndcg10": round(float(found[nDCG @ 10]), 4), "rr10": round(float(found[RR @ 10]), 4)}


def convert(fp16, target: Path, compression: str) -> None:
    """Write ``target``: the fp16 index's documents (same docnos, same vectors) as a compressed index."""
    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex

    offsets, docnos = np.asarray(fp16.offsets), fp16.docnos_of(np.arange(len(fp16)))
    with ColBERTIndex(target).writer(fp16.config, fp16.fingerprint, compression=compression) as writer:
        for d in range(len(fp16)):
            lo, hi = int(offsets[d]), int(offsets[d + 1])
            writer.add(str(docnos[d]), np.asarray(fp16.vectors[lo:hi]), np.asarray(fp16.token_ids[lo:hi]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="wikiqa")
    ap.add_argument("--data-root", type=Path, default=None, help="the folder holding the data sets (default: "
                                                                 "pipelines/evaluate.py's)")
    ap.add_argument("--checkpoint", default=None, help="the query encoder (default: the package's checkpoint)")
    ap.add_argument("--compressed", type=Path, required=True)
    ap.add_argument("--fp16", type=Path, required=True)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ncells", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--ndocs", type=int, nargs="+", default=[256, 512, 1024])
    ap.add_argument("--nscore-div", type=int, nargs="+", default=[4])
    ap.add_argument("--threshold", type=float, default=None)
    ap.add_argument("--convert", action="store_true", help="write --compressed from --fp16 when it is missing")
    ap.add_argument("--compression", default="residual2")
    ap.add_argument("--out", type=Path, default=Path("runs/compressed_tradeoff.json"))
    args = ap.parse_args(argv)
    from evaluate import DATA, load

    root = args.data_root or DATA
    if not (root / args.data).exists() and not args.data.startswith("squad"):
        print(f"{root / args.data} is absent: nothing to measure", file=sys.stderr)
        return 0
    import torch

    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.index.fp16.search import score_docs
    from pyterrier_fandom_colbert.index.residual import search as cs
    from pyterrier_fandom_colbert.ranking import top_k

    torch.set_num_threads(args.threads)
    fp16 = pfc.ColBERTIndex(args.fp16)
    if args.convert and not (args.compressed / "pt_meta.json").exists():
        convert(fp16, args.compressed, args.compression)
    compressed = pfc.ColBERTIndex(args.compressed)
    if compressed.fingerprint != fp16.fingerprint or len(compressed) != len(fp16):
        raise SystemExit("the two indexes do not hold the same corpus from the same encoder")
    _, topics, qrels = load(args.data, root)
    topics = topics.iloc[:args.queries]
    qrels = qrels[qrels["qid"].isin(set(topics["qid"]))]
    colbert = pfc.ColBERT.from_pretrained(args.checkpoint, device="cpu")
    compressed.check_encoder(colbert)
    Q, mask = colbert.encode_queries(topics["query"].tolist())
    queries = [Q[i][mask[i]].clone() for i in range(len(topics))]
    store = compressed.store.arrays
    centroids = torch.from_numpy(store.codec.centroids)
    ids = np.arange(len(fp16))
    exact = [ids[top_k(score_docs(fp16, q, ids), ids, 10)].tolist() for q in queries]
    everything = cs.SearchParams(ncells=1 << 30, threshold=0.0, ndocs=None)
    decompressed = [cs.search_one(store, centroids, q, 10, everything)[0].tolist() for q in queries]
    rows = [{"setting": "exact fp16", **quality(topics, exact, qrels, compressed)},
            {"setting": "exhaustive over decompressed vectors", "agreement_exact_fp16": agree(decompressed, exact),
             **quality(topics, decompressed, qrels, compressed)}]
    for row in rows:
        print(row, file=sys.stderr)
    grid = [(c, n, d) for c in args.ncells for n in args.ndocs for d in args.nscore_div]
    for ncells, ndocs, div in grid:
        params = cs.SearchParams.for_k(10, ncells=ncells, threshold=args.threshold, ndocs=ndocs,
                                       nscore=max(10, ndocs // div))
        times, tops, scored = [], [], []
        for q in queries:
            stats: dict = {}
            start = time.perf_counter()
            found, _ = cs.search_one(store, centroids, q, 10, params, stats)
            times.append(time.perf_counter() - start)
            tops.append(found.tolist())
            scored.append(stats["candidates"])
        row = {"ncells": ncells, "threshold": params.threshold, "ndocs": ndocs, "nscore": params.nscore,
               "search_ms_p50": round(1e3 * float(np.median(times)), 1),
               "search_ms_mean": round(1e3 * float(np.mean(times)), 1),
               "candidates_mean": round(float(np.mean(scored)), 1),
               "agreement_decompressed": agree(tops, decompressed), "agreement_exact_fp16": agree(tops, exact),
               **quality(topics, tops, qrels, compressed)}
        print(row, file=sys.stderr)
        rows.append(row)
    report = {"data": args.data, "queries": len(queries), "threads": args.threads, "num_docs": len(fp16),
              "num_tokens": fp16.meta.num_tokens, "compression": compressed.compression,
              "num_centroids": store.codec.num_centroids, "load_avg_1min": round(os.getloadavg()[0], 2),
              "results": rows}
    return write_report(args.out, report)


if __name__ == "__main__":
    sys.exit(main())
