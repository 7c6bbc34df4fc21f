"""PyTerrier transformers over a :class:`~pyterrier_fandom_colbert.model.colbert.ColBERT`: encoders and scorers."""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Sequence

import numpy as np
import pandas as pd
import pyterrier as pt

from .config import ColBERTConfig
from ..frames import empty_output, rank_by_score, require_columns, with_columns

if TYPE_CHECKING:  # pragma: no cover
    from .colbert import ColBERT


def check_queries(frame: pd.DataFrame) -> List[str]:
    """Query texts, refusing empty or whitespace-only ones (naming their qids)."""
    bad = [qid for qid, q in zip(frame["qid"], frame["query"]) if not isinstance(q, str) or not q.strip()]
    if bad:
        raise ValueError(f"empty or non-text query for qid(s) {bad[:5]}{' …' if len(bad) > 5 else ''}: "
                         "ColBERT needs at least one word per query")
    return frame["query"].tolist()


def check_texts(frame: pd.DataFrame, column: str = "text") -> List[str]:
    """Document texts, refusing NaN/None/non-strings (naming their docnos). Empty strings are allowed."""
    texts = frame[column].tolist()
    bad = [d for d, t in zip(frame["docno"] if "docno" in frame.columns else range(len(frame)), texts)
           if not isinstance(t, str)]
    if bad:
        raise ValueError(f"missing or non-text '{column}' for docno(s) {bad[:5]}{' …' if len(bad) > 5 else ''}; "
                         "fill or drop those rows first")
    return texts


class QueryEncoder(pt.Transformer):
    """qid, query → + ``query_embs`` (scoring query vectors ``[n, d]``, float32) and ``query_toks``."""

    def __init__(self, colbert: "ColBERT"):
        self.colbert = colbert

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["qid", "query"], self)
        return input_columns + [c for c in ("query_embs", "query_toks") if c not in input_columns]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["qid", "query"], self)
        if len(inp) == 0:
            return empty_output(inp, ["query_embs", "query_toks"])
        texts = check_queries(inp)
        unique, inverse = np.unique(np.array(texts, dtype=object), return_inverse=True)
        embs, masks = self.colbert.encode_queries(list(unique))
        ids = self.colbert.tokenizer.queries(list(unique)).input_ids
        embs, masks = embs.float().cpu().numpy(), masks.cpu().numpy()
        vecs = [embs[i][masks[i]] for i in range(len(unique))]
        toks = [self.colbert.tokenizer.tokens(ids[i][masks[i]]) for i in range(len(unique))]
        return with_columns(inp, {"query_embs": [vecs[i] for i in inverse], "query_toks": [toks[i] for i in inverse]})

    def __repr__(self) -> str:
        return f"{self.colbert!r}.query_encoder()"


class DocEncoder(pt.Transformer):
    """docno, text → + ``doc_embs`` (``[L_d, d]`` float32, scoring tokens only) and ``doc_toks``."""

    def __init__(self, colbert: "ColBERT", text_field: str = "text"):
        self.colbert = colbert
        self.text_field = text_field

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["docno", self.text_field], self)
        return input_columns + [c for c in ("doc_embs", "doc_toks") if c not in input_columns]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["docno", self.text_field], self)
        if len(inp) == 0:
            return empty_output(inp, ["doc_embs", "doc_toks"])
        texts = check_texts(inp, self.text_field)
        embs: List = [None] * len(texts)
        toks: List = [None] * len(texts)
        for batch in self.colbert.doc_batches(texts):
            for pos, vecs, ids in batch.per_document():
                embs[pos] = vecs
                toks[pos] = self.colbert.tokenizer.tokens(ids)
        return with_columns(inp, {"doc_embs": embs, "doc_toks": toks})

    def __repr__(self) -> str:
        return f"{self.colbert!r}.doc_encoder()"


class TextScorer(pt.Transformer):
    """Re-ranker: qid, query, docno, text → + score (mean MaxSim by default), rank.

    Each distinct query and text is encoded once; documents are scored batch by batch as they are
    encoded, so memory does not grow with the number of candidates.
    """

    def __init__(self, colbert: "ColBERT", text_field: str = "text"):
        self.colbert = colbert
        self.text_field = text_field

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["qid", "query", "docno", self.text_field], self)
        return input_columns + [c for c in ("score", "rank") if c not in input_columns]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        import torch

        from .scoring import maxsim

        require_columns(inp.columns, ["qid", "query", "docno", self.text_field], self)
        if len(inp) == 0:
            return empty_output(inp, ["score", "rank"])
        queries = check_queries(inp)
        texts = check_texts(inp, self.text_field)
        q_codes, q_unique = pd.factorize(pd.Series(queries))
        t_codes, t_unique = pd.factorize(pd.Series(texts))
        Q, q_mask = self.colbert.encode_queries(list(q_unique))
        rows_of_text = pd.Series(np.arange(len(inp))).groupby(t_codes).indices
        scores = np.empty(len(inp), dtype=np.float64)
        cfg = self.colbert.config
        for batch in self.colbert.doc_batches(list(t_unique)):
            local = np.concatenate([np.full(len(rows_of_text[p]), j) for j, p in enumerate(batch.positions)])
            rows = np.concatenate([rows_of_text[p] for p in batch.positions])
            qi = torch.as_tensor(q_codes[rows], device=Q.device)
            li = torch.as_tensor(local, device=batch.embs.device)
            s = maxsim(Q[qi], batch.embs[li].float(), q_mask[qi], batch.mask[li], cfg.similarity, cfg.reduction)
            scores[rows] = s.cpu().numpy()
        return rank_by_score(with_columns(inp, {"score": scores}))

    def __repr__(self) -> str:
        return f"{self.colbert!r}.text_scorer()"


class EmbeddingScorer(pt.Transformer):
    """query_embs, doc_embs → + score, rank, for frames that already carry token vectors."""

    def __init__(self, config: ColBERTConfig):
        self.config = config

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["qid", "query_embs", "doc_embs"], self)
        return input_columns + [c for c in ("score", "rank") if c not in input_columns]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["qid", "query_embs", "doc_embs"], self)
        if len(inp) == 0:
            return empty_output(inp, ["score", "rank"])
        scores = score_pairs(inp["query_embs"].tolist(), inp["doc_embs"].tolist(), self.config)
        return rank_by_score(with_columns(inp, {"score": scores}))

    def __repr__(self) -> str:
        return "EmbeddingScorer()"


def score_pairs(queries: Sequence[np.ndarray], docs: Sequence[np.ndarray], config: ColBERTConfig) -> np.ndarray:
    """MaxSim of aligned (query vectors, document vectors) pairs, each unpadded."""
    import torch

    from .scoring import maxsim

    out = np.empty(len(queries), dtype=np.float64)
    for i, (q, d) in enumerate(zip(queries, docs)):
        qt = torch.as_tensor(np.asarray(q, dtype=np.float32))[None]
        dt = torch.as_tensor(np.asarray(d, dtype=np.float32))[None]
        out[i] = float(maxsim(qt, dt, similarity=config.similarity, reduction=config.reduction)[0])
    return out
