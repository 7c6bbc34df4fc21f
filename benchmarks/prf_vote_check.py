"""How much it matters that ColBERT-PRF votes a centroid's token among the feedback documents' vectors rather than
among the whole index's, as pyterrier_colbert does (docs/prf.md).

    python benchmarks/prf_vote_check.py --threads 2 --data wikiqa --out runs/prf

For each question of the set, on the ColBERT run and index that ``benchmarks/prf_eval.py`` cached under --out
(all questions, all documents), the feedback documents' centroids are computed once (``index.prf()``'s k-means,
--fb-docs, k 24, seed 42) and each centroid's token is voted twice: among the feedback documents' vectors (this
package) and among its ``nn_tokens`` nearest vectors of the whole index, found exactly (pyterrier_colbert asks its
FAISS IVFPQ index, an approximation of the same); both skip the tokens held by every document. Prints the share
of centroids named the same token, and of the --fb-embs expansion embeddings chosen by both; then re-ranks the
run with each vote's expansions (β 1 and 0.1) and prints nDCG@10 on the report and on all questions.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> int:
    import evaluate as ev
    import pandas as pd
    import prf_eval as pe

    from pyterrier_fandom_colbert.index.prf import (
        _doc_rows,
        _similarities,
        choose_expansions,
        kmeans,
        nearest_token_ids,
    )

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ev.add_run_arguments(ap, data=("wikiqa", "scifact", "squad"))
    ap.add_argument("--max-queries", type=int, default=None)
    ap.add_argument("--max-docs", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fb-docs", type=int, default=3)
    ap.add_argument("--fb-embs", type=int, default=10)
    args = ap.parse_args(argv)
    ev.set_threads(args.threads)
    args.verbose = False
    for name in args.data:
        docs, sel, rep, qrels, _, corpus, cache = pe.load_set(name, args, ev)
        topics = pd.concat([sel, rep])
        singles = ev.single_systems(docs, ["colbert-full"], args.k, args.checkpoint, cache, None, args.faiss,
                                    args.k_hat, False, args.long_docs)
        key = ev.colbert_key(singles["colbert-fingerprint"], args.k, args.faiss, args.k_hat, args.long_docs)
        run = ev.cached_run(singles["colbert-full"], topics, cache, key)
        prf = singles["colbert-prf"]
        index, s = prf.index, prf.settings
        similarity = index.config.similarity
        everything = np.asarray(index.store.rows(0, int(index.offsets[-1])), dtype=np.float32)
        all_tokens = np.asarray(index.token_ids, dtype=np.int64)
        same_token = same_chosen = total_centroids = total_chosen = 0
        scorers = {beta: prf.replace(beta=beta) for beta in (1.0, 0.1)}
        scored = {f"{vote} vote, beta={beta:g}": [] for vote in ("feedback", "index") for beta in (1.0, 0.1)}
        for _, rows in run.groupby("qid"):
            best = rows.sort_values("rank")["docno"].tolist()[:args.fb_docs]
            vectors, tokens, _ = _doc_rows(index, index.doc_ids(best))
            centroids = kmeans(vectors, s.k, s.seed)
            local = nearest_token_ids(_similarities(vectors, centroids, similarity).T, tokens, s.nn_tokens,
                                      prf.structural_tokens)
            sims = _similarities(everything, centroids, similarity).T  # [k, all tokens]
            near = np.argpartition(-sims, s.nn_tokens, axis=1)[:, :s.nn_tokens]
            glob = np.array([nearest_token_ids(sims[c, near[c]][None], all_tokens[near[c]], s.nn_tokens,
                                               prf.structural_tokens)[0] for c in range(len(centroids))])
            same_token += int((local == glob).sum())
            total_centroids += len(centroids)
            a = set(choose_expansions(local, prf.token_idf, args.fb_embs).tolist())
            b = set(choose_expansions(glob, prf.token_idf, args.fb_embs).tolist())
            same_chosen += len(a & b)
            total_chosen += max(len(a), len(b))
            doc_ids = index.doc_ids(rows["docno"].tolist())
            q = np.asarray(rows["query_embs"].iloc[0], dtype=np.float32)
            for vote, token_of in (("feedback", local), ("index", glob)):
                chosen = choose_expansions(token_of, prf.token_idf, args.fb_embs)
                embs, weights = centroids[chosen], prf.token_idf[token_of[chosen]]
                for beta in (1.0, 0.1):
                    total, _, _ = scorers[beta]._score(q, embs, weights, doc_ids)
                    scored[f"{vote} vote, beta={beta:g}"].append(rows[["qid", "docno"]].assign(score=total))
        print(f"{name}: {corpus}, {len(topics)} questions, fb_docs {args.fb_docs}: the same token for "
              f"{same_token / total_centroids:.1%} of {total_centroids} centroids; {same_chosen / total_chosen:.1%} "
              f"of the {args.fb_embs} expansion embeddings chosen by both votes")
        import pyterrier as pt
        from ir_measures import nDCG

        systems = {"ColBERT": run[["qid", "docno", "score"]]}
        systems.update({lab: pd.concat(parts, ignore_index=True) for lab, parts in scored.items()})
        for part_name, part in (("report", rep), ("all", topics)):
            table = pt.Experiment([pt.Transformer.from_df(r) for r in systems.values()], part, qrels, [nDCG @ 10],
                                  names=list(systems), baseline=0)
            print(f"{part_name} questions ({len(part)}), fb_docs {args.fb_docs}, fb_embs {args.fb_embs}:")
            print(table.to_string(index=False, float_format="{:.4f}".format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
