"""TF-IDF first stage on SQuAD v1.1 (split by article): build time, query latency, effectiveness, next to BM25.

    python benchmarks/tfidf_bench.py                     # reads <data folder>/squad-v1.1-split
    python benchmarks/tfidf_bench.py --copies 50         # timings only, over 50 renamed copies of the corpus

Corpus: every train and dev paragraph (docno = article title + "/" + paragraph index); queries: the dev
questions, each judged relevant to the one paragraph it was asked about. BM25 comes from ``bm25s``
(a benchmark-only dependency: ``pip install bm25s``), with the same Porter stemmer, as a sanity check.
Exits with a message (status 0) when the data is absent.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

SQUAD = Path(__file__).resolve().parents[2] / "shared" / "data" / "squad-v1.1-split"


def load_squad(folder: Path):
    """(docs, topics, qrels): corpus = train + dev paragraphs; topics and qrels = dev questions."""
    import pandas as pd

    docs, topics, qrels = [], [], []
    for split in ("train", "dev"):
        for article in json.loads((folder / f"{split}-v1.1.json").read_text())["data"]:
            for i, para in enumerate(article["paragraphs"]):
                docno = f"{article['title']}/{i}"
                docs.append({"docno": docno, "text": para["context"]})
                if split == "dev":
                    for qa in para["qas"]:
                        topics.append({"qid": qa["id"], "query": qa["question"]})
                        qrels.append({"qid": qa["id"], "docno": docno, "label": 1})
    return docs, pd.DataFrame(topics), pd.DataFrame(qrels)


def bm25_run(docs, topics, k: int):
    """BM25 (bm25s, Lucene variant, k1 1.2, b 0.75, its English stopwords, Porter stems) as a result frame."""
    import bm25s
    import numpy as np
    import pandas as pd
    import Stemmer

    stemmer = Stemmer.Stemmer("porter")
    t0 = time.perf_counter()
    retriever = bm25s.BM25(k1=1.2, b=0.75)
    retriever.index(bm25s.tokenize([d["text"] for d in docs], stemmer=stemmer, show_progress=False),
                    show_progress=False)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    tokens = bm25s.tokenize(topics["query"].tolist(), stemmer=stemmer, show_progress=False)
    ids, scores = retriever.retrieve(tokens, k=min(k, len(docs)), show_progress=False, n_threads=1)
    query_s = time.perf_counter() - t0
    docnos = np.array([d["docno"] for d in docs], dtype=object)
    run = pd.DataFrame({"qid": np.repeat(topics["qid"].to_numpy(), ids.shape[1]), "docno": docnos[ids.ravel()],
                        "score": scores.ravel().astype("float64"),
                        "rank": np.tile(np.arange(ids.shape[1]), len(topics))})
    return run[run["score"] > 0], build_s, query_s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=SQUAD, help="folder with train-v1.1.json and dev-v1.1.json")
    ap.add_argument("--k", type=int, default=1000, help="results per query")
    ap.add_argument("--single", type=int, default=200, help="queries timed one at a time")
    ap.add_argument("--copies", type=int, default=1, help="index this many copies of the corpus (timings only)")
    args = ap.parse_args(argv)
    if not (args.data / "dev-v1.1.json").exists():
        print(f"SQuAD data not found under {args.data}; nothing to benchmark")
        return 0

    import pandas as pd
    import pyterrier as pt
    from ir_measures import RR, R

    from pyterrier_fandom_colbert.lexical.tfidf import TfidfIndex

    docs, topics, qrels = load_squad(args.data)
    docs = [{"docno": f"{d['docno']}#{c}" if c else d["docno"], "text": d["text"]}
            for c in range(args.copies) for d in docs]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        index = TfidfIndex.build(Path(tmp) / "tfidf", iter(docs))
        index_s = time.perf_counter() - t0
        size_mb = sum(f.stat().st_size for f in index.path.iterdir()) / 1e6
        retriever = index.retriever(num_results=args.k)
        retriever(topics.head(1))  # load the postings once
        t0 = time.perf_counter()
        tfidf_run = retriever(topics)
        batch_s = time.perf_counter() - t0
        single = [topics.iloc[[i]] for i in range(min(args.single, len(topics)))]
        t0 = time.perf_counter()
        for frame in single:
            retriever(frame)
        single_ms = (time.perf_counter() - t0) / len(single) * 1000
        bm25, bm25_build_s, bm25_query_s = bm25_run(docs, topics, args.k)

    print(f"corpus: {len(docs)} paragraphs; queries: {len(topics)} dev questions; k = {args.k}")
    print(f"TF-IDF index build: {index_s:.2f} s ({len(docs) / index_s:.0f} docs/s), {size_mb:.1f} MB on disk")
    print(f"TF-IDF query latency: {batch_s / len(topics) * 1000:.2f} ms/query batched, "
          f"{single_ms:.2f} ms/query one at a time ({len(single)} queries)")
    print(f"BM25 (bm25s) index build: {bm25_build_s:.2f} s; batched queries: "
          f"{bm25_query_s / len(topics) * 1000:.2f} ms/query")
    if args.copies == 1:  # copies are duplicates of the judged paragraphs: effectiveness would mislead
        metrics = [RR @ 10, R @ 1, R @ 10, R @ 50]
        table = pt.Experiment([tfidf_run, bm25], topics, qrels, eval_metrics=metrics,
                              names=["TF-IDF", "BM25 (bm25s)"])
        with pd.option_context("display.float_format", "{:.4f}".format, "display.width", 120):
            print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
