"""Long documents: truncation at ``doc_maxlen`` against overlapping windows (``long_docs="windows"``), on
SciFact (BEIR abstracts, 91% longer than 180 tokens) with the default checkpoint, or on the bundled sample.

    python benchmarks/long_docs.py --data scifact --truncated runs/scifact/colbert-<fingerprint>
    python benchmarks/long_docs.py --data sample

Builds (or reuses, under ``--workdir``) a truncated index and a windowed one, and runs the end-to-end retriever
with its default settings (``num_results=--k``) on each, reporting nDCG@10, R@100, RR@10 and ms/query:

  truncate              the truncated index (each text's first window only)
  windows: union        the windowed index as stored: a document's score is MaxSim over the tokens of all its
                        windows (each query token takes its best match anywhere in the document)
  windows: max-window   the same candidates, each scored as its best window's MaxSim (computed here; the
                        package scores documents by union)

The SciFact questions are the 809 train claims with judgements, used as a benchmark here (nothing is tuned on
them). Build times are recorded beside the indexes (``<index>.build.json``) on the first run.
Skips (exit 0, message) when the data are absent.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
from evaluate import DATA, load


def sample_data():
    """The bundled sample wiki's passages and questions (data/sample)."""
    import pandas as pd
    import pyterrier as pt

    import pyterrier_fandom_colbert  # noqa: F401  (registers the irds datasets)

    dataset = pt.get_dataset("irds:fandom-qa/sample/test")
    docs = [{"docno": d["docno"], "text": d["text"]} for d in dataset.get_corpus_iter(verbose=False)]
    topics = dataset.get_topics("text")[["qid", "query"]]
    qrels = pd.DataFrame(dataset.get_qrels())[["qid", "docno", "label"]]
    return docs, topics, qrels


def build(path: Path, docs, colbert, **options):
    """The index at ``path``, built (and its build time recorded beside it) unless it exists."""
    import pyterrier_fandom_colbert as pfc

    index = pfc.ColBERTIndex(path)
    record = path.parent / f"{path.name}.build.json"
    if not index.built():
        started = time.perf_counter()
        index.indexer(colbert, verbose=True, **options).index(docs)
        seconds = time.perf_counter() - started
        record.write_text(json.dumps({"seconds": round(seconds, 1), "docs_per_s": round(len(docs) / seconds, 2),
                                      "parts_per_s": round(index.meta.num_parts / seconds, 2)}))
    built = json.loads(record.read_text()) if record.exists() else {}
    return index, built


def max_window(index, retriever, q, k: int):
    """The top ``k`` (document ids, scores) when a windowed document scores as its best window: the retriever's
    own candidates (same neighbour search and k̂), each candidate's windows scored exactly, the maximum kept."""
    from pyterrier_fandom_colbert.index.fp16.search import docs_of_rows, score_docs, token_neighbours
    from pyterrier_fandom_colbert.ranking import top_k

    hits = token_neighbours(index, index.ann(retriever.spec), [q], retriever.k_hat, retriever.nprobe,
                            retriever.refine)
    docs = np.unique(docs_of_rows(index.offsets, hits[hits >= 0]))
    parts = index.part_offsets
    first = np.searchsorted(parts, np.asarray(index.offsets)[docs])
    last = np.searchsorted(parts, np.asarray(index.offsets)[docs + 1])
    part_ids = np.concatenate([np.arange(a, b) for a, b in zip(first, last)])
    index.store.check_docs(docs)  # the candidates' rows verified here: the view's parts lie within them
    view = SimpleNamespace(offsets=parts, vector_tensor=index.vector_tensor, config=index.config,
                           store=SimpleNamespace(check_docs=lambda part_ids: None))
    scores = np.maximum.reduceat(score_docs(view, q, part_ids), np.cumsum(np.r_[0, last - first])[:-1])
    best = top_k(scores, docs, k)
    return docs[best], scores[best]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="scifact", help="'sample' or a pipelines/evaluate.py data name")
    ap.add_argument("--data-root", type=Path, default=DATA, help="the folder holding the data sets")
    ap.add_argument("--checkpoint", default=None, help="ColBERT checkpoint (default: the package's)")
    ap.add_argument("--truncated", type=Path, default=None, help="an existing truncated index of that corpus")
    ap.add_argument("--workdir", type=Path, default=Path("runs/long_docs"))
    ap.add_argument("--stride", type=int, default=None, help="word pieces between windows (default: the indexer's)")
    ap.add_argument("--queries", type=int, default=None, help="at most this many topics (default: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--k", type=int, default=1000, help="results per query (num_results)")
    ap.add_argument("--build-only", action="store_true")
    args = ap.parse_args(argv)

    if args.data != "sample" and not (args.data_root / args.data).exists():
        print(f"{args.data_root / args.data} is absent: nothing to measure", file=sys.stderr)
        return 0
    import pandas as pd
    import torch
    from ir_measures import RR, R, calc_aggregate, nDCG

    import pyterrier_fandom_colbert as pfc

    torch.set_num_threads(args.threads)
    try:
        import faiss

        faiss.omp_set_num_threads(args.threads)
    except ImportError:  # pragma: no cover
        pass
    docs, topics, qrels = sample_data() if args.data == "sample" else load(args.data, args.data_root)
    topics = topics.iloc[:args.queries] if args.queries else topics
    colbert = pfc.ColBERT.from_pretrained(args.checkpoint, device="cpu")
    pieces = colbert.tokenizer.document_pieces([d["text"] for d in docs])
    lengths = np.array([len(p) for p in pieces])
    window = colbert.tokenizer.max_doc_pieces
    folder = args.workdir / args.data
    truncated, truncated_build = build(args.truncated or folder / f"truncate-{colbert.fingerprint()}", docs, colbert)
    windowed, windowed_build = build(folder / f"windows-{args.stride or 'default'}-{colbert.fingerprint()}", docs,
                                     colbert, long_docs="windows", stride=args.stride)
    if args.build_only:
        return 0

    encoded = colbert.query_encoder()(topics[["qid", "query"]])
    measures = [nDCG @ 10, R @ 100, RR @ 10]

    def evaluate(run):
        return {str(m): round(float(v), 4) for m, v in calc_aggregate(measures, qrels.rename(
            columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"}), run.rename(
            columns={"qid": "query_id", "docno": "doc_id"})).items()}

    results = {}
    for name, index in (("truncate", truncated), ("windows: union", windowed)):
        stage = index.retriever(num_results=args.k)
        stage(encoded.iloc[:3])  # warm up (and load or build the neighbour index)
        t = time.perf_counter()
        run = stage(encoded)
        ms = 1e3 * (time.perf_counter() - t) / len(encoded)
        results[name] = {"retriever": repr(stage), "ms_per_query": round(ms, 1),
                         **evaluate(run[["qid", "docno", "score"]])}
        print(name, results[name], file=sys.stderr)
        if index is windowed:
            t = time.perf_counter()
            best = [max_window(windowed, stage, torch.from_numpy(q), args.k) for q in encoded["query_embs"]]
            ms = 1e3 * (time.perf_counter() - t) / len(encoded)
            run = pd.concat([pd.DataFrame({"qid": qid, "docno": windowed.docnos_of(ids), "score": scores})
                             for qid, (ids, scores) in zip(encoded["qid"], best)], ignore_index=True)
            results["windows: max-window"] = {"ms_per_query": round(ms, 1), **evaluate(run)}
            print("max-window", results["windows: max-window"], file=sys.stderr)

    result = {
        "data": args.data, "queries": len(encoded), "docs": len(docs), "threads": args.threads,
        "doc_maxlen": colbert.config.doc_maxlen, "window_pieces": window, "stride": windowed.meta.stride,
        "pieces_mean": round(float(lengths.mean()), 1), "pieces_median": float(np.median(lengths)),
        "longer_than_a_window": round(float((lengths > window).mean()), 4),
        "truncated_index": {"path": str(truncated.path), "tokens": truncated.meta.num_tokens,
                            "truncated_docs": truncated.meta.truncated_docs, "build": truncated_build},
        "windowed_index": {"path": str(windowed.path), "tokens": windowed.meta.num_tokens,
                           "parts": windowed.meta.num_parts, "windowed_docs": windowed.meta.windowed_docs,
                           "build": windowed_build},
        "k": args.k, "results": results,
    }
    out = folder / "result.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
