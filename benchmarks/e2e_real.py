"""End-to-end retrieval on real ColBERT vectors: latency and top-10 overlap with exhaustive MaxSim.

index_bench.py e2e times FAISS candidate generation on synthetic vectors, whose near-tied places 2-10 make the
overlap a harsh test; this script asks the same question of a real index and real queries (an index built by
``pipelines/evaluate.py``, e.g. SciFact with the default checkpoint)::

    .venv/bin/python pipelines/evaluate.py --data scifact --systems colbert-full     # builds the index
    .venv/bin/python benchmarks/e2e_real.py --data scifact \\
        --index runs/evaluate/cache/scifact/colbert-<fingerprint>

Settings: every FAISS kind in ``--kinds`` × ``--nprobe`` (IVF kinds) × ``--refine`` × ``--k`` × ``--k-hat``.
``overlap_at_10`` compares each top 10 with exhaustive MaxSim (every document scored); ``overlap_with_exact`` with
the ``exact`` kind (exact token neighbours) at the same k and k̂, when ``exact`` is among the kinds (list it
first). Results are printed and written as JSON to ``--out``, with wall and CPU (all threads) ms per query and the
1-minute load average before and after (the machine is shared: CPU time varies less with other jobs).
Skips (exit 0, message) when the data are absent.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_io import write_report
from evaluate import DATA, load
from index_bench import exhaustive_top, overlap, search_settings, set_threads, timed_search


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="scifact", help="topics: a pipelines/evaluate.py data name")
    ap.add_argument("--data-root", type=Path, default=DATA, help="the folder holding the data sets")
    ap.add_argument("--index", type=Path, required=True, help="ColBERT index folder over that corpus")
    ap.add_argument("--checkpoint", default=None, help="query encoder (default: the bundled checkpoint)")
    ap.add_argument("--queries", type=int, default=200, help="at most this many topics (the first ones)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kinds", nargs="+", default=["exact", "ivfpq", "ivfpq-fs"])
    ap.add_argument("--nprobe", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--k", type=int, nargs="+", default=[10, 1000])
    ap.add_argument("--refine", type=int, nargs="+", default=[1],
                    help="trained kinds: FAISS fetches refine * k̂ neighbours, the k̂ nearest by stored vectors are kept")
    ap.add_argument("--k-hat", type=int, nargs="+", default=None, help="default: ceil(k / 2)")
    ap.add_argument("--pairs", nargs="+", default=None, metavar="K:K_HAT",
                    help="(k, k̂) pairs to measure instead of every --k with every --k-hat, e.g. 1000:500 10:50")
    ap.add_argument("--out", type=Path, default=Path("runs/e2e_real.json"))
    args = ap.parse_args(argv)
    if not (args.data_root / args.data).exists() and not args.data.startswith("squad"):
        print(f"{args.data_root / args.data} is absent: nothing to measure", file=sys.stderr)
        return 0

    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.index.ann import FaissSpec

    set_threads(args.threads)
    load_before = os.getloadavg()[0]
    _, topics, qrels = load(args.data, args.data_root)
    topics = topics.iloc[:args.queries]
    index = pfc.ColBERTIndex(args.index)
    colbert = pfc.ColBERT.from_pretrained(args.checkpoint, device="cpu")
    index.check_encoder(colbert)
    Q, mask = colbert.encode_queries(topics["query"].tolist())
    queries = [Q[i][mask[i]] for i in range(len(topics))]
    relevant = [set(qrels.loc[qrels.qid == qid, "docno"]) for qid in topics.qid]
    # exhaustive MaxSim's top 10s are kept beside --out (they cost more than all the settings on a busy machine)
    truth_file = args.out.with_name(f"{args.data}-{index.meta.fingerprint}-{index.meta.num_tokens}-"
                                    f"exhaustive-top10-{len(queries)}.json")
    exhaustive_ms = exhaustive_cpu_ms = None
    if truth_file.exists():
        truth = [np.asarray(t) for t in json.loads(truth_file.read_text())]
    else:
        t, c = time.perf_counter(), time.process_time()
        truth = [exhaustive_top(index, q) for q in queries]
        exhaustive_ms = 1e3 * (time.perf_counter() - t) / len(queries)
        exhaustive_cpu_ms = 1e3 * (time.process_time() - c) / len(queries)
        truth_file.parent.mkdir(parents=True, exist_ok=True)
        truth_file.write_text(json.dumps([t.tolist() for t in truth]))
    print(f"{len(index)} passages, {index.meta.num_tokens} tokens, {len(queries)} queries; exhaustive MaxSim "
          f"{exhaustive_ms} ms/query", file=sys.stderr)

    def hits_at_10(tops):
        return round(float(np.mean([bool(set(index.docnos_of(top)) & rel) for top, rel in zip(tops, relevant)])), 3)

    if args.pairs:
        pairs = [tuple(int(x) for x in p.split(":")) for p in args.pairs]
    else:
        pairs = [(k, k_hat) for k in args.k for k_hat in (args.k_hat or [math.ceil(k / 2)])]
    rows = []
    exact_tops = {}
    for kind in args.kinds:
        spec = FaissSpec(kind)
        t = time.perf_counter()
        ann = index.ann(spec)
        build_s = round(time.perf_counter() - t, 1)
        for nprobe, refine in search_settings(kind, args.nprobe, args.refine):
            for k, k_hat in pairs:
                cpu = []
                times, tops = timed_search(index, ann, queries, k, k_hat, nprobe, refine, cpu)
                if spec.ann_kind.exact:
                    exact_tops[(k, k_hat)] = tops
                row = {"faiss": spec.kind, "nprobe": nprobe, "refine": refine, "k": k, "k_hat": k_hat,
                       "ms_per_query_mean": round(1e3 * float(np.mean(times)), 1),
                       "ms_per_query_p95": round(1e3 * float(np.percentile(times, 95)), 1),
                       "cpu_ms_per_query_mean": round(1e3 * float(np.mean(cpu)), 1),
                       "overlap_at_10": overlap(tops, truth),
                       "overlap_with_exact": overlap(tops, exact_tops[(k, k_hat)])
                       if (k, k_hat) in exact_tops else None,
                       "relevant_in_top_10": hits_at_10(tops),
                       "faiss_build_or_load_s": build_s, "top10": [top.tolist() for top in tops]}
                print({key: value for key, value in row.items() if key != "top10"}, file=sys.stderr)
                rows.append(row)
    result = {"data": args.data, "index": str(args.index), "num_docs": len(index),
              "num_tokens": index.meta.num_tokens, "queries": len(queries), "threads": args.threads,
              "exhaustive_ms_per_query": exhaustive_ms and round(exhaustive_ms, 1),
              "exhaustive_cpu_ms_per_query": exhaustive_cpu_ms and round(exhaustive_cpu_ms, 1),
              "exhaustive_relevant_in_top_10": hits_at_10(truth),
              "load_avg_1min": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
              "results": rows}
    return write_report(args.out, result)


if __name__ == "__main__":
    sys.exit(main())
