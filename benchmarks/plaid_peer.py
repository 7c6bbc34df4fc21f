"""colbert-ai's side of plaid_compare.py: run inside the separate environment that script makes.

    python plaid_peer.py build CHECKPOINT COLLECTION_TSV ROOT NAME NBITS OUT_JSON
    python plaid_peer.py serve ROOT NAME          (JSON lines on stdin → JSON lines on the original stdout)
    python plaid_peer.py encode CHECKPOINT QUERIES_JSONL_GZ COUNT   (query encoding alone, p50 ms)

``build`` indexes the passages of COLLECTION_TSV (colbert-ai's ``pid<TAB>text`` lines, pids 0, 1, ...) with
colbert-ai's ``Indexer`` (PLAID, ``nbits`` residual bits), in this process (``avoid_fork_if_possible``), timing
colbert-ai's own passage encoder (``CollectionEncoder.encode_passages``) separately from the rest, counting the
passages it encodes, and writing the figures and the process's peak RSS to OUT_JSON.

``serve`` loads a ``Searcher`` and answers requests, one JSON object per line:
``{"cmd": "search", "query": ..., "k": 10}`` → top-k passage ids, end-to-end time (``Searcher.search``) and
search-only time (``Searcher.dense_search`` on the query vectors encoded beforehand); ``{"cmd": "exhaustive",
...}`` → the top k by MaxSim over every passage's decompressed vectors (``ranker.rank`` with all passage ids);
``{"cmd": "rss"}``; ``{"cmd": "quit"}``. colbert-ai prints progress to stdout, so the replies go to a duplicate
of the original stdout and everything else to stderr.

Only colbert-ai's public classes are used; nothing of this repository is imported here.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time


def peak_rss_mb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, children) / 1024, 1)


def _threads() -> int:
    import torch

    threads = int(os.environ.get("PLAID_THREADS", "2"))
    torch.set_num_threads(threads)
    return threads


def _no_skiplist_patch() -> None:
    """colbert-ai 0.2.x sets ``ColBERT.skiplist`` only when ``mask_punctuation`` is on, and reads it always: a
    checkpoint that keeps punctuation (as this package's default) needs an empty class-level default."""
    from colbert.modeling.colbert import ColBERT

    if not hasattr(ColBERT, "skiplist"):
        ColBERT.skiplist = {}


def build(checkpoint: str, collection_tsv: str, root: str, name: str, nbits: int, out: str) -> int:
    threads = _threads()
    _no_skiplist_patch()
    from colbert import Indexer
    from colbert.indexing.collection_encoder import CollectionEncoder
    from colbert.infra import ColBERTConfig, Run, RunConfig

    with open(collection_tsv, encoding="utf-8") as f:
        num_passages = sum(1 for _ in f)
    encoding = {"seconds": 0.0, "passages": 0, "calls": 0}
    original = CollectionEncoder.encode_passages

    def timed(self, passages):
        start = time.perf_counter()
        try:
            return original(self, passages)
        finally:
            encoding["seconds"] += time.perf_counter() - start
            encoding["passages"] += len(passages)
            encoding["calls"] += 1

    CollectionEncoder.encode_passages = timed
    started = time.perf_counter()
    with Run().context(RunConfig(nranks=1, experiment="plaid", root=root, avoid_fork_if_possible=True)):
        config = ColBERTConfig(nbits=nbits, root=root, avoid_fork_if_possible=True)
        Indexer(checkpoint=checkpoint, config=config).index(name=name, collection=collection_tsv, overwrite=True)
    total = time.perf_counter() - started
    result = {"build_seconds": round(total, 3), "encode_seconds": round(encoding["seconds"], 3),
              "after_encoding_seconds": round(total - encoding["seconds"], 3),
              "passages_encoded": encoding["passages"], "encode_calls": encoding["calls"],
              "num_passages": num_passages, "encoding_passes": round(encoding["passages"] / num_passages, 3),
              "peak_rss_mb": peak_rss_mb(), "threads": threads}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    return 0


def serve(root: str, name: str) -> int:
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # colbert-ai's prints go to stderr from here on
    threads = _threads()
    _no_skiplist_patch()
    import torch
    from colbert import Searcher
    from colbert.infra import ColBERTConfig, Run, RunConfig

    with Run().context(RunConfig(nranks=1, experiment="plaid", root=root)):
        searcher = Searcher(index=name, config=ColBERTConfig(root=root))
    num_passages = len(searcher.ranker.doclens)
    all_pids = list(range(num_passages))
    replies.write(json.dumps({"ready": True, "num_passages": num_passages, "threads": threads}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        cmd = request.get("cmd")
        if cmd == "quit":
            break
        if cmd == "rss":
            reply = {"peak_rss_mb": peak_rss_mb()}
        elif cmd == "search":
            k = int(request.get("k", 10))
            with torch.inference_mode():
                start = time.perf_counter()
                pids, _, _ = searcher.search(request["query"], k=k)
                e2e = time.perf_counter() - start
                Q = searcher.encode(request["query"])
                start = time.perf_counter()
                pids_again, _, _ = searcher.dense_search(Q, k=k)
                search_only = time.perf_counter() - start
            reply = {"ids": [int(p) for p in pids], "e2e_ms": 1e3 * e2e, "search_ms": 1e3 * search_only,
                     "same": [int(p) for p in pids_again] == [int(p) for p in pids]}
        elif cmd == "exhaustive":
            k = int(request.get("k", 10))
            with torch.inference_mode():
                Q = searcher.encode(request["query"])
                pids, _ = searcher.ranker.rank(searcher.config, Q, pids=all_pids)
            reply = {"ids": [int(p) for p in pids[:k]]}
        else:
            reply = {"error": f"unknown command {cmd!r}"}
        replies.write(json.dumps(reply) + "\n")
    return 0


def encode(checkpoint: str, queries_jsonl_gz: str, count: str) -> int:
    """p50 ms of colbert-ai's ``Checkpoint.queryFromText`` for one query at a time (after 20 warm-up queries)."""
    import gzip

    _threads()
    _no_skiplist_patch()
    import numpy as np
    import torch
    from colbert.infra import ColBERTConfig
    from colbert.modeling.checkpoint import Checkpoint

    ck = Checkpoint(checkpoint, colbert_config=ColBERTConfig())
    with gzip.open(queries_jsonl_gz, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f][:20 + int(count)]
    times = []
    with torch.inference_mode():
        for i, text in enumerate(texts):
            start = time.perf_counter()
            ck.queryFromText([text])
            if i >= 20:
                times.append(time.perf_counter() - start)
    print(json.dumps({"colbert_ai_query_encoding_ms_p50": round(1e3 * float(np.median(times)), 2),
                      "queries": len(times)}))
    return 0


def main() -> int:
    mode = sys.argv[1]
    if mode == "encode":
        return encode(*sys.argv[2:5])
    if mode == "build":
        checkpoint, collection_tsv, root, name, nbits, out = sys.argv[2:8]
        return build(checkpoint, collection_tsv, root, name, int(nbits), out)
    if mode == "serve":
        return serve(*sys.argv[2:4])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
