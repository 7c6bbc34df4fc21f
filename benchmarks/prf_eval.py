"""ColBERT-PRF against ColBERT end to end (docs/prf.md): the paper's settings and a small grid chosen on a
selection split, re-ranking and re-retrieving.

    python benchmarks/prf_eval.py --threads 2 --data squad wikiqa scifact --max-queries 400

Each set's ColBERT end-to-end run (top --k with the --faiss kind and --k-hat; the index cached under --out as
``pipelines/evaluate.py`` caches it, built when missing) is computed for the questions kept. ColBERT-PRF
(``index.prf()``, k 24 clusters) then

* re-ranks that run, once per fb_docs in --fb-docs with fb_embs 20: every grid point beta x fb_embs comes from it
  (``index.prf.rescore``: a shorter expansion is a prefix of a longer one);
* re-retrieves (``index.prf(retriever=index.retriever(...))``, the same search as ColBERT's) with the paper's
  settings and with the (fb_docs, fb_embs) the re-ranking grid chose on the selection questions; beta is
  rescored on those runs (it does not change which documents the expanded query finds).

Grid: beta in {0.05, 0.1, 0.25, 0.5, 1} x fb_embs in {5, 10, 20} x fb_docs in --fb-docs (default 1, 2, 3, 5), one
point chosen by nDCG@10 on the *selection* questions, reported on the *report* questions: SQuAD's protocol parts;
on SciFact and WikiQA the questions split in two halves by a seeded shuffle (--seed). Also shown, not tuned: the
paper's settings with the expansion weighed against 32 query vectors, as in pyterrier_colbert, whose queries are
padded to 32 vectors with [MASK] (the default checkpoint scores only the query's own 11-18 tokens, so the same beta
weighs the expansion two to three times more there); from the same run.
``--max-queries N``: a seeded sample of N questions per set. ``--max-docs N``: a seeded subset of N documents
holding every document judged for the kept questions (a smaller, easier corpus; said in the output). Prints
nDCG@10, AP@100 and R@100 with paired t-test p-values against ColBERT, and writes them to <out>/prf-<data>.csv.
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


def prf_runs(base, colbert_run, sel, qrels, args):
    """({label: run}, {stage: seconds}, chosen re-rank label, chosen re-retrieve label or None)."""
    from pyterrier_fandom_colbert.index.prf import rescore

    runs, timing = {"ColBERT": colbert_run}, {}
    reranked = {}
    for fb_docs in args.fb_docs:
        prf = base.replace(fb_docs=fb_docs, fb_embs=max(FB_EMBS), beta=1.0, verbose=args.verbose)
        print(f"re-ranking, fb_docs={fb_docs}", flush=True)
        start = time.perf_counter()
        reranked[fb_docs] = prf(colbert_run)
        timing[f"re-rank fb_docs={fb_docs}"] = time.perf_counter() - start
        for beta in BETAS:
            for fb_embs in FB_EMBS:
                runs[label("re-rank", fb_docs, fb_embs, beta)] = rescore(reranked[fb_docs], beta, fb_embs)
    if PAPER[0] in reranked:
        runs[PADDED] = padded_query(reranked[PAPER[0]], PAPER[2], PAPER[1])
    selection = {lab: ndcg10(run, sel, qrels) for lab, run in runs.items() if lab.startswith("PRF re-rank fb_")}
    chosen = max(selection, key=lambda lab: selection[lab])
    if args.no_retrieve:
        return runs, timing, chosen, None
    chosen_docs, chosen_embs = (int(part.split("=")[1]) for part in chosen.split()[2:4])
    retriever = base.index.retriever(num_results=args.k, faiss=args.faiss, k_hat=args.k_hat)
    for fb_docs, fb_embs in dict.fromkeys([PAPER[:2], (chosen_docs, chosen_embs)]):
        prf = base.replace(fb_docs=fb_docs, fb_embs=fb_embs, beta=1.0, retriever=retriever, verbose=args.verbose)
        start = time.perf_counter()
        retrieved = prf(colbert_run)
        timing[f"re-retrieve fb_docs={fb_docs} fb_embs={fb_embs}"] = time.perf_counter() - start
        for beta in BETAS:
            lab = label("re-retrieve", fb_docs, fb_embs, beta)
            runs[lab] = rescore(retrieved, beta, fb_embs)
            selection[lab] = ndcg10(runs[lab], sel, qrels)
    chosen_retrieve = max((lab for lab in selection if lab.startswith("PRF re-retrieve")),
                          key=lambda lab: selection[lab])
    return runs, timing, chosen, chosen_retrieve


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
    runs, timing, chosen, chosen_retrieve = prf_runs(singles["colbert-prf"], colbert_run, sel, qrels, args)
    print(f"load average (1, 5, 15 min) after the runs: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"\n{name}: {corpus}; {len(sel)} selection / {len(rep)} report questions ({split}); ColBERT end to "
          f"end {1000 * colbert_seconds / len(topics):.0f} ms/query (0 when cached); PRF: " +
          ", ".join(f"{k} {1000 * v / len(topics):.0f} ms/query" for k, v in timing.items()))
    print(f"chosen on the selection questions (nDCG@10): re-rank {chosen}" +
          (f"; re-retrieve {chosen_retrieve}" if chosen_retrieve else ""))
    shown = ["ColBERT", label("re-rank", *PAPER), PADDED, chosen, label("re-retrieve", *PAPER), chosen_retrieve]
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
    out["corpus"] = corpus
    args.out.mkdir(parents=True, exist_ok=True)
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
