"""Dev-set evaluation during training (exhaustive MaxSim of every dev question against every dev passage), and
the same exhaustive ranking as a source of ColBERT-mined hard negatives.

Small corpora only (the dev split of a QA collection); full-scale evaluation is ``pipelines/evaluate.py``.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np
import torch

from .examples import QAData
from .losses import pairwise_scores


def ranking_metrics(top: np.ndarray, docnos: Sequence[str], qids: Sequence[str], qrels: Mapping[str, Sequence[str]],
                    k: Optional[int] = None) -> Dict[str, float]:
    """RR@k, R@1 and R@k from the top document indices per query (``top [nq, ≤k]``, best first).

    >>> ranking_metrics(np.array([[1, 0], [0, 1]]), ["a", "b"], ["q1", "q2"], {"q1": ["a"], "q2": ["c"]})
    {'RR@2': 0.25, 'R@1': 0.0, 'R@2': 0.5}
    """
    k = k or top.shape[1]
    rr, r1, rk = [], [], []
    for qid, row in zip(qids, top):
        rel = set(qrels[qid])
        hits = [docnos[i] in rel for i in row]
        rr.append(next((1.0 / (r + 1) for r, h in enumerate(hits) if h), 0.0))
        r1.append(sum(hits[:1]) / len(rel))
        rk.append(sum(hits) / len(rel))
    return {f"RR@{k}": float(np.mean(rr)), "R@1": float(np.mean(r1)), f"R@{k}": float(np.mean(rk))}


def exhaustive_scores(colbert, queries: Sequence[str], docs: Sequence[str], query_chunk: int = 64) -> torch.Tensor:
    """MaxSim of every query against every document, ``[len(queries), len(docs)]`` on the CPU (small corpora)."""
    was_training = colbert.model.training
    colbert.model.eval()
    try:
        q, qm = colbert.encode_queries(list(queries))
        scores = torch.full((len(queries), len(docs)), float("-inf"))
        for batch in colbert.doc_batches(list(docs)):
            pos = torch.as_tensor(batch.positions)
            for a in range(0, len(queries), query_chunk):
                s = pairwise_scores(q[a:a + query_chunk], qm[a:a + query_chunk], batch.embs.float(), batch.mask,
                                    colbert.config.similarity, colbert.config.reduction)
                scores[a:a + query_chunk, pos] = s.cpu()
        return scores
    finally:
        colbert.model.train(was_training)


def exhaustive_top(colbert, queries: Sequence[str], docs: Sequence[str], k: int, query_chunk: int = 64
                   ) -> np.ndarray:
    """Indices ``[len(queries), min(k, len(docs))]`` of each query's best documents by exhaustive MaxSim (small
    corpora: every query is scored against every document), best first."""
    scores = exhaustive_scores(colbert, queries, docs, query_chunk)
    return scores.topk(min(k, len(docs)), dim=1).indices.numpy()


def evaluate(colbert, dev: QAData, k: int = 10, query_chunk: int = 64) -> Dict[str, float]:
    """Exhaustive MaxSim of every dev question against every dev passage (small corpora) → RR@k, R@1, R@k."""
    qids = sorted(dev.qrels)
    docnos = list(dev.docnos)
    top = exhaustive_top(colbert, [dev.queries[x] for x in qids], [dev.docs[d] for d in docnos], k, query_chunk)
    return ranking_metrics(top, docnos, qids, dev.qrels, k)


def colbert_rankings(colbert, data: QAData, depth: int = 10) -> Dict[str, List[str]]:
    """Each training question's ``depth + (its number of answers)`` best passages of ``data``'s corpus by this
    ColBERT (exhaustive MaxSim): the pool that ``negative_source="colbert"`` samples hard negatives from."""
    qids = sorted(data.qrels)
    docnos = list(data.docnos)
    most = max(len(v) for v in data.qrels.values())
    top = exhaustive_top(colbert, [data.queries[q] for q in qids], [data.docs[d] for d in docnos], depth + most)
    return {q: [docnos[i] for i in row] for q, row in zip(qids, top)}
