"""ColBERT-PRF against ColBERT end to end (docs/prf.md): the paper's settings and a small grid chosen on a
selection split, re-ranking and re-retrieving.

    python benchmarks/prf_eval.py --threads 2 --data squad wikiqa scifact --max-queries 400

Each set's ColBERT end-to-end run (top --k with the --faiss kind and --k-hat; the index cached under --out as
``pipelines/evaluate.py`` caches it, built when missing) is computed for the questions kept. ColBERT-PRF
(``index.prf()``, k 24 clusters) then

* re-ranks that run with fb_embs 20 for every fb_docs in --fb-docs in one similarity pass (:func:`rerank_fb_docs`,
  the same runs as one ``index.prf(fb_docs=...)`` each): every grid point beta x fb_embs comes from them
  (``index.prf.rescore``: a shorter expansion is a prefix of a longer one);
* re-retrieves (``index.prf(retriever=index.retriever(...))``, the same search as ColBERT's) with the paper's
  settings and with the (fb_docs, fb_embs) the re-ranking grid chose on the selection questions; beta is
  rescored on those runs (it does not change which documents the expanded query finds).

Grid: beta in {0.05, 0.1, 0.25, 0.5, 1} x fb_embs in {5, 10, 20} x fb_docs in --fb-docs (default 1, 2, 3, 5), one
point chosen by nDCG@10 on the *selection* questions (ties: fewest fb_docs, then smallest beta, then fewest
fb_embs), reported on the *report* questions: SQuAD's protocol parts;
on SciFact and WikiQA the questions split in two halves by a seeded shuffle (--seed). Also shown, not tuned: the
paper's settings with the expansion weighed against 32 query vectors, as in pyterrier_colbert, whose queries are
padded to 32 vectors with [MASK] (the default checkpoint scores only the query's own 11-18 tokens, so the same beta
weighs the expansion two to three times more there); from the same run. ``--small-betas``: a second re-ranking
point is chosen, on the selection questions too, from the grid with beta 0.01 and 0.02 added.
``--max-queries N``: a seeded sample of N questions per set. ``--max-docs N``: a seeded subset of N documents
holding every document judged for the kept questions (a smaller, easier corpus; said in the output). Prints
nDCG@10, AP@100 and R@100 with paired t-test p-values against ColBERT, and writes them to <out>/prf-<data>.csv
(every run measured, its top 100, to <out>/prf-runs-<data>.pkl).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))

BETAS = (0.05, 0.1, 0.25, 0.5, 1.0)
#: --small-betas adds these to the re-ranking grid, chosen on the selection questions apart from the grid of BETAS
#: (docs/experiments/prf.md says why: earlier choices sat at the grid's smallest β)
SMALL_BETAS = (0.01, 0.02)
DEPTH = 100  # rows kept per query of every run measured (the deepest cut-off of the measures)
FB_EMBS = (5, 10, 20)
PADDED_QUERY = 32  # pyterrier_colbert's query length ([MASK]-padded)
PAPER = (3, 10, 1.0)  # fb_docs, fb_embs, beta


def halves(topics, seed: int):
    """(selection, report) halves of ``topics`` by a seeded shuffle."""
    order = np.random.default_rng(seed).permutation(len(topics))
    mid = len(topics) // 2
    return topics.iloc[np.sort(order[:mid])], topics.iloc[np.sort(order[mid:])]


def doc_subset(docs, qrels, qids, size: int, seed: int):
    """``size`` documents: every one judged for ``qids``, the rest a seeded sample of the others."""
    judged = set(qrels[qrels["qid"].isin(set(qids))]["docno"])
    others = [i for i, d in enumerate(docs) if d["docno"] not in judged]
    keep = set(np.random.default_rng(seed).choice(others, max(0, size - len(judged)), replace=False).tolist())
    return [d for i, d in enumerate(docs) if d["docno"] in judged or i in keep]


def padded_query(run, beta: float, fb_embs: int):
    """A PRF run (mean reduction) scored with the expansion weighed against a query of PADDED_QUERY vectors, as
    pyterrier_colbert's (``Σ_i M_i + β Σ_f σ_f E_f`` with 32 query vectors): ``β`` scaled by ``n / 32`` per query,
    the ranking of ``Σ_i M_i / n + β Σ_f σ_f E_f / 32``."""
    from pyterrier_fandom_colbert.index.prf import rescore

    n = np.array([len(e) for e in run["query_embs"]], dtype=np.float64)
    scaled = run.assign(prf_maxsim=[np.asarray(m) * k / PADDED_QUERY for m, k in zip(run["prf_maxsim"], n)])
    return rescore(scaled, beta, fb_embs)


def rerank_fb_docs(prf, run, fb_docs_values):
    """``{fb_docs: prf.replace(fb_docs=fb_docs)(run)}`` for every value, with one pass over each query's documents
    for all of them: the expansions of every fb_docs (their feedback documents' k-means) are scored together
    with the query's vectors (a MaxSim column is the same whatever other columns it is computed with), so a grid
    over fb_docs costs one similarity pass instead of one per value. ``prf`` re-ranks (no retriever)."""
    import pandas as pd

    from pyterrier_fandom_colbert.frames import rank_by_score, with_columns
    from pyterrier_fandom_colbert.index.prf import PRF_COLUMNS, expansion_scale, prf_scores
    from pyterrier_fandom_colbert.model.encoders import query_tensors

    if prf.retriever is not None:
        raise ValueError(f"prf={prf!r} re-retrieves; rerank_fb_docs only re-ranks")
    values = list(dict.fromkeys(fb_docs_values))
    if len(run) == 0:
        return {f: prf.replace(fb_docs=f)(run) for f in values}
    inp = run.reset_index(drop=True)
    index, config = prf.index, prf.index.config
    similarity = getattr(config.similarity, "name", config.similarity)
    doc_ids = index.doc_ids(inp["docno"].tolist())
    codes, queries = query_tensors(inp, index.meta.dim, prf)
    rows_of_query = pd.Series(np.arange(len(inp))).groupby(codes).indices
    ranks = inp["rank"].to_numpy()
    scores = {f: np.empty(len(inp), dtype=np.float64) for f in values}
    new = {f: {c: [None] * len(inp) for c in PRF_COLUMNS} for f in values}
    for j, q in enumerate(queries):
        rows = rows_of_query[j]
        ordered = rows[np.argsort(ranks[rows], kind="stable")]
        best = np.asarray(list(dict.fromkeys(doc_ids[ordered].tolist())), dtype=np.int64)
        feedback = {f: prf.expansions(best[:f]) for f in values}
        docs, where = np.unique(doc_ids[rows], return_inverse=True)
        q = q.numpy()
        both = prf.maxima(np.concatenate([q, *(feedback[f][0] for f in values)]), docs)
        query_part, start = both[:, :len(q)], len(q)
        for f in values:
            embs, toks, weights = feedback[f]
            expansion_part = both[:, start:start + len(embs)] * expansion_scale(embs, similarity)
            start += len(embs)
            total = prf_scores(query_part, expansion_part, weights, prf.settings.beta, config.reduction)
            plain = prf_scores(query_part, expansion_part, weights, 0.0, config.reduction)
            scores[f][rows] = total[where]
            for r, d in zip(rows, where):
                new[f]["prf_embs"][r], new[f]["prf_toks"][r], new[f]["prf_weights"][r] = embs, toks, weights
                new[f]["prf_maxsim"][r] = expansion_part[d]
                new[f]["prf_query_score"][r] = plain[d]
    return {f: rank_by_score(with_columns(inp, {"score": scores[f], **new[f]})) for f in values}


def label(mode: str, fb_docs: int, fb_embs: int, beta: float) -> str:
    return f"PRF {mode} fb_docs={fb_docs} fb_embs={fb_embs} beta={beta:g}"


def load_set(name: str, args, ev):
    """(docs, selection topics, report topics, qrels, split description, corpus description, cache folder)."""
    import pandas as pd

    if name == "squad":
        docs, parts, _ = ev.load_squad(args.data_root)
        (sel, sel_qrels), (rep, rep_qrels) = parts["selection"], parts["report"]
        qrels = pd.concat([sel_qrels, rep_qrels])
        if args.max_queries:
            sel = sel.sample(min(len(sel), args.max_queries // 2), random_state=args.seed)
            rep = rep.sample(min(len(rep), args.max_queries - len(sel)), random_state=args.seed)
        split = "SQuAD protocol: selection part / report part"
    else:
        docs, parts = ev.load_beir(name, args.data_root)
        topics, qrels = parts["all"]
        if args.max_queries and args.max_queries < len(topics):
            topics = topics.sample(args.max_queries, random_state=args.seed).sort_index()
        sel, rep = halves(topics, args.seed)
        split = f"two halves of the questions by a shuffle with seed {args.seed}"
    corpus = f"all {len(docs):,} documents"
    cache = args.out / "cache" / name
    if args.max_docs and args.max_docs < len(docs):
        qids = list(sel["qid"]) + list(rep["qid"])
        docs = doc_subset(docs, qrels, qids, args.max_docs, args.seed)
        corpus = (f"a seeded subset of {len(docs):,} documents (every one judged for the kept questions, the "
                  f"rest sampled with seed {args.seed})")
        cache = args.out / "cache" / f"{name}-docs{args.max_docs}-q{len(qids)}-seed{args.seed}"
    return docs, sel, rep, qrels, split, corpus, cache


def ndcg10(run, topics, qrels) -> float:
    import pyterrier as pt
    from ir_measures import nDCG

    return float(pt.Experiment([pt.Transformer.from_df(run)], topics, qrels, [nDCG @ 10])["nDCG@10"].iloc[0])


def top(run, depth: int = DEPTH):
    """``run``'s ``depth`` best rows per query (its ``rank`` from 0), columns qid, docno, score, rank: what
    nDCG@10, AP@100 and R@100 read, so the grid's many runs stay small."""
    return run[run["rank"] < depth][["qid", "docno", "score", "rank"]].reset_index(drop=True)


def beta_of(lab: str) -> float:
    """The β of a grid label (:func:`label`)."""
    return float(lab.rsplit("beta=", 1)[1])


def prf_runs(base, colbert_run, sel, qrels, args):
    """({label: run (top DEPTH)}, {stage: seconds}, chosen re-rank label (β in BETAS), chosen re-rank label over
    the grid with SMALL_BETAS too (None without --small-betas), chosen re-retrieve label or None)."""
    from pyterrier_fandom_colbert.index.prf import rescore

    runs, timing = {"ColBERT": top(colbert_run)}, {}
    betas = tuple(sorted(SMALL_BETAS + BETAS)) if args.small_betas else BETAS
    print(f"re-ranking, fb_docs in {args.fb_docs} in one pass", flush=True)
    start = time.perf_counter()
    reranked = rerank_fb_docs(base.replace(fb_embs=max(FB_EMBS), beta=1.0), colbert_run, args.fb_docs)
    timing[f"re-rank fb_docs={'/'.join(map(str, reranked))}"] = time.perf_counter() - start
    for fb_docs in reranked:
        for beta in betas:
            for fb_embs in FB_EMBS:
                runs[label("re-rank", fb_docs, fb_embs, beta)] = top(rescore(reranked[fb_docs], beta, fb_embs))
    if PAPER[0] in reranked:
        runs[PADDED] = top(padded_query(reranked[PAPER[0]], PAPER[2], PAPER[1]))
    del reranked
    selection = {lab: ndcg10(run, sel, qrels) for lab, run in runs.items() if lab.startswith("PRF re-rank fb_")}
    # ties go to the first grid point: fewest feedback documents, then smallest β, then fewest embeddings
    chosen = max((lab for lab in selection if beta_of(lab) in BETAS), key=lambda lab: selection[lab])
    chosen_small = max(selection, key=lambda lab: selection[lab]) if args.small_betas else None
    if args.no_retrieve:
        return runs, timing, chosen, chosen_small, None
    chosen_docs, chosen_embs = (int(part.split("=")[1]) for part in chosen.split()[2:4])
    retriever = base.index.retriever(num_results=args.k, faiss=args.faiss, k_hat=args.k_hat)
    for fb_docs, fb_embs in dict.fromkeys([PAPER[:2], (chosen_docs, chosen_embs)]):
        prf = base.replace(fb_docs=fb_docs, fb_embs=fb_embs, beta=1.0, retriever=retriever, verbose=args.verbose)
        start = time.perf_counter()
        retrieved = prf(colbert_run)
        timing[f"re-retrieve fb_docs={fb_docs} fb_embs={fb_embs}"] = time.perf_counter() - start
        for beta in BETAS:
            lab = label("re-retrieve", fb_docs, fb_embs, beta)
            runs[lab] = top(rescore(retrieved, beta, fb_embs))
            selection[lab] = ndcg10(runs[lab], sel, qrels)
    chosen_retrieve = max((lab for lab in selection if lab.startswith("PRF re-retrieve")),
                          key=lambda lab: selection[lab])
    return runs, timing, chosen, chosen_small, chosen_retrieve


PADDED = "PRF re-rank, paper's settings, expansion weighed against 32 query vectors"


def evaluate_set(name: str, args, ev) -> None:
    import pandas as pd
    import pyterrier as pt
    from ir_measures import AP, R, nDCG

    docs, sel, rep, qrels, split, corpus, cache = load_set(name, args, ev)
    topics = pd.concat([sel, rep])
    singles = ev.single_systems(docs, ["colbert-full"], args.k, args.checkpoint, cache, None, args.faiss,
                                args.k_hat, args.verbose, args.long_docs)
    key = ev.colbert_key(singles["colbert-fingerprint"], args.k, args.faiss, args.k_hat, args.long_docs)
    start = time.perf_counter()
    colbert_run = ev.cached_run(singles["colbert-full"], topics, cache, key)
    colbert_seconds = time.perf_counter() - start
    runs, timing, chosen, chosen_small, chosen_retrieve = prf_runs(singles["colbert-prf"], colbert_run, sel,
                                                                   qrels, args)
    args.out.mkdir(parents=True, exist_ok=True)
    pd.to_pickle(runs, args.out / f"prf-runs-{name}.pkl")  # every measured run (top DEPTH), to look into
    print(f"load average (1, 5, 15 min) after the runs: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"\n{name}: {corpus}; {len(sel)} selection / {len(rep)} report questions ({split}); ColBERT end to "
          f"end {1000 * colbert_seconds / len(topics):.0f} ms/query (0 when cached); PRF: " +
          ", ".join(f"{k} {1000 * v / len(topics):.0f} ms/query" for k, v in timing.items()))
    print(f"chosen on the selection questions (nDCG@10): re-rank {chosen}" +
          (f"; with the small betas {chosen_small}" if chosen_small else "") +
          (f"; re-retrieve {chosen_retrieve}" if chosen_retrieve else ""))
    shown = ["ColBERT", label("re-rank", *PAPER), PADDED, chosen, chosen_small, label("re-retrieve", *PAPER),
             chosen_retrieve]
    shown = [lab for lab in dict.fromkeys(shown) if lab in runs]
    metrics = [nDCG @ 10, AP @ 100, R @ 100]
    rows = []
    for part_name, part in (("selection", sel), ("report", rep), ("all", topics)):
        table = pt.Experiment([pt.Transformer.from_df(r) for r in runs.values()], part, qrels, metrics,
                              names=list(runs), baseline=0)
        table.insert(0, "questions", part_name)
        rows.append(table)
        print(f"{part_name} questions ({len(part)}):")
        print(table[table["name"].isin(shown)].drop(columns=["questions"])
              .to_string(index=False, float_format="{:.4f}".format))
    out = pd.concat(rows, ignore_index=True)
    out["chosen_on_selection"] = out["name"].isin([chosen, chosen_retrieve])
    out["chosen_with_small_betas"] = out["name"] == chosen_small
    out["corpus"] = corpus
    out.to_csv(args.out / f"prf-{name}.csv", index=False)
    print("every grid point, nDCG@10 on selection / report questions:")
    both = rows[0][["name", "nDCG@10"]].merge(rows[1][["name", "nDCG@10"]], on="name", suffixes=(" sel", " rep"))
    print(both.to_string(index=False, float_format="{:.4f}".format))


def main(argv=None) -> int:
    import evaluate as ev

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ev.add_run_arguments(ap, data=("squad", "wikiqa", "scifact"))
    ap.add_argument("--max-queries", type=int, default=None, help="a seeded sample of this many questions per set")
    ap.add_argument("--max-docs", type=int, default=None,
                    help="a seeded subset of this many documents (every judged one of the kept questions kept)")
    ap.add_argument("--fb-docs", type=int, nargs="+", default=[1, 2, 3, 5], help="feedback documents of the grid")
    ap.add_argument("--no-retrieve", action="store_true", help="re-ranking only")
    ap.add_argument("--small-betas", action="store_true",
                    help=f"also choose a re-ranking point from a grid with beta {SMALL_BETAS} added")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    ev.set_threads(args.threads)
    for name in args.data:
        if not ev.data_folder(args.data_root, name).exists():
            print(f"{name}: not found under {args.data_root}, skipped")
            continue
        evaluate_set(name, args, ev)
    return 0


if __name__ == "__main__":
    sys.exit(main())
