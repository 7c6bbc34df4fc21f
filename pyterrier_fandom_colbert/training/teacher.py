"""Distillation teachers: scores that the KL loss (:func:`.losses.kl_distillation`) pulls ColBERT towards.

- :class:`BiEncoderTeacher`: the starting backbone as a sentence encoder (its cosine).
- :class:`HybridTeacher`: the package's hybrid (``pfc.Hybrid``: per-query z-scores of TF-IDF and of a ColBERT,
  weighted) over the training corpus, fused once before training (:func:`fused_scores`, pure) and looked up
  by text during it. Its files in the run folder (``hybrid_teacher.npy`` and ``hybrid_teacher.json``, which
  records the settings, the matrix's checksum and each system's mean per-question score spread) let a resumed
  run use the same teacher.

Temperature: the student's logits are ``N_q · S`` (mean MaxSim); the teacher's ColBERT part is
``(1 - w) · (S - mean) / std``, so ``T = (1 - w) / (N_q · neural_row_std)`` makes the teacher's ColBERT part
exactly as sharp as the student's own scores (the hybrid then moves it by its lexical part only).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import torch

_log = logging.getLogger(__name__)

HYBRID_MATRIX_FILE = "hybrid_teacher.npy"
HYBRID_META_FILE = "hybrid_teacher.json"
#: the hybrid teacher holds a dense [questions, passages] matrix (and a few float64 copies while fusing): a
#: collection of QA articles (SQuAD's 20 training articles: 5,258 x 922 = 4.8M cells) fits, a whole wiki does not
MAX_HYBRID_CELLS = 50_000_000


class BiEncoderTeacher:
    """The backbone as a frozen sentence encoder (mean-pooled, normalised; all-MiniLM-L6-v2's own use): its
    cosine scores are the distillation targets."""

    def __init__(self, colbert):
        import copy

        self.net = copy.deepcopy(colbert.model.backbone).eval().requires_grad_(False)
        self.hf, self.device = colbert.tokenizer.hf, colbert.device

    @torch.no_grad()
    def _embed(self, texts: List[str], max_length: int) -> torch.Tensor:
        enc = self.hf(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        enc = {n: t.to(self.device) for n, t in enc.items() if n in ("input_ids", "attention_mask")}
        hidden = self.net(**enc).last_hidden_state.float()
        mask = enc["attention_mask"].unsqueeze(-1).float()
        return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp_min(1), dim=-1)

    def __call__(self, queries: List[str], docs: List[str]) -> torch.Tensor:
        return self._embed(queries, 64) @ self._embed(docs, 256).T


def fused_scores(lexical: np.ndarray, neural: np.ndarray, weight: float) -> np.ndarray:
    """``weight · z(lexical) + (1 - weight) · z(neural)`` per row, as ``pfc.Hybrid`` fuses two result lists.

    Rows are queries, columns documents; ``nan`` marks a document the system did not return for that query.
    Each system's scores are standardised over the documents it returned (population std; all equal: 0), and
    a document it did not return gets that system's lowest z of the row (:func:`..fusion.maths.fill_missing`,
    ``missing="min"``).

    >>> lexical = np.array([[2.0, 0.0, np.nan]])          # z: 1, -1, missing -> -1
    >>> neural = np.array([[0.5, 0.7, 0.6]])              # z: -1.2247, 1.2247, 0
    >>> fused_scores(lexical, neural, 0.5).round(4).tolist()
    [[-0.1124, 0.1124, -0.5]]
    """
    from ..fusion import maths as S

    if lexical.shape != neural.shape or lexical.ndim != 2:
        raise ValueError(f"score matrices of shapes {lexical.shape} and {neural.shape}: expected the same "
                         "[queries, documents] shape")
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight={weight!r}: expected the lexical share, in [0, 1]")
    n_rows, n_cols = lexical.shape
    rows = np.repeat(np.arange(n_rows), n_cols)
    columns = []
    for matrix in (lexical, neural):
        flat = np.asarray(matrix, dtype=np.float64).reshape(-1)
        present = ~np.isnan(flat)
        z = np.full(flat.shape, np.nan)
        z[present] = S.zscore(flat[present], rows[present], n_rows)
        columns.append(z)
    filled = S.fill_missing(np.stack(columns, axis=1), rows, n_rows, "min")
    return S.weighted_sum(filled, [weight, 1.0 - weight]).reshape(n_rows, n_cols)


def top_only(scores: np.ndarray, depth: int) -> np.ndarray:
    """Each row's ``depth`` highest scores kept, the rest ``nan`` (a system that returns ``depth`` results).

    >>> top_only(np.array([[0.1, 0.9, 0.5]]), 2).tolist()
    [[nan, 0.9, 0.5]]
    """
    scores = np.asarray(scores, dtype=np.float64)
    if depth >= scores.shape[1]:
        return scores.copy()
    out = np.full(scores.shape, np.nan)
    keep = np.argpartition(-scores, depth - 1, axis=1)[:, :depth]
    rows = np.arange(scores.shape[0])[:, None]
    out[rows, keep] = scores[rows, keep]
    return out


class HybridTeacher:
    """Fused hybrid scores of every (training question, training passage), looked up by text.

    ``matrix[i, j]`` is the teacher score of ``query_texts[i]`` and ``doc_texts[j]``; equal texts have equal
    scores (both systems score texts), so a text maps to any of its rows or columns."""

    def __init__(self, matrix: np.ndarray, query_texts: Sequence[str], doc_texts: Sequence[str], device="cpu"):
        if matrix.shape != (len(query_texts), len(doc_texts)):
            raise ValueError(f"teacher matrix of shape {matrix.shape} for {len(query_texts)} queries and "
                             f"{len(doc_texts)} documents")
        self.matrix = torch.as_tensor(np.asarray(matrix, dtype=np.float32))
        self.rows = {t: i for i, t in enumerate(query_texts)}
        self.columns = {t: j for j, t in enumerate(doc_texts)}
        self.device = torch.device(device)

    def __call__(self, queries: List[str], docs: List[str]) -> torch.Tensor:
        try:
            rows = torch.as_tensor([self.rows[q] for q in queries])
            cols = torch.as_tensor([self.columns[d] for d in docs])
        except KeyError as err:
            raise KeyError(f"the hybrid teacher has no score for the text {str(err)[:80]}…: it covers the training "
                           "questions and passages it was built from") from None
        return self.matrix[rows][:, cols].to(self.device)

    @classmethod
    def build(cls, data, colbert, folder: Union[str, Path], weight: float, depth: int = 1000,
              checkpoint: Optional[str] = None, verbose: bool = False) -> "HybridTeacher":
        """The teacher over ``data`` (a :class:`.data.QAData`): read from ``folder`` when it holds one made with
        the same settings, else computed (TF-IDF over ``folder/tfidf``, ``colbert``'s exhaustive MaxSim, each
        cut to its top ``depth``, fused by :func:`fused_scores`) and written there."""
        from ..storage import (
            HASH_ALGORITHM,
            DamagedFileError,
            HashingFile,
            atomic_path,
            file_checksum,
            read_json,
            write_json,
        )

        folder = Path(folder)
        qids, docnos = sorted(data.qrels), list(data.docnos)
        query_texts, doc_texts = [data.queries[q] for q in qids], [data.docs[d] for d in docnos]
        if len(qids) * len(docnos) > MAX_HYBRID_CELLS:
            raise ValueError(f"the hybrid teacher scores every training question against every training passage: "
                             f"{len(qids):,} x {len(docnos):,} is more than {MAX_HYBRID_CELLS:,} pairs; train on fewer "
                             "questions (--limit) or use the biencoder teacher")
        settings = {"checkpoint": checkpoint, "weight": weight, "depth": depth, "queries": len(qids),
                    "documents": len(docnos)}
        meta_path, matrix_path = folder / HYBRID_META_FILE, folder / HYBRID_MATRIX_FILE
        if meta_path.exists():
            meta = read_json(meta_path, "hybrid teacher description")
            saved = {k: meta.get(k) for k in settings}
            if saved != settings:
                raise ValueError(f"{meta_path} describes a teacher made with {saved}; this run asks for {settings}: "
                                 "use another run folder")
            if not matrix_path.exists() or file_checksum(matrix_path) != meta.get("checksum"):
                raise DamagedFileError(matrix_path, f"{matrix_path} is missing or damaged (its checksum differs from "
                                                    f"{meta_path}); delete both to compute the teacher again")
            return cls(np.load(matrix_path), query_texts, doc_texts, colbert.device)
        lexical = tfidf_score_matrix(data, qids, docnos, folder / "tfidf", depth, verbose)
        if verbose:
            _log.info("hybrid teacher: ColBERT MaxSim of %d questions against %d passages", len(qids), len(docnos))
        from .evaluation import exhaustive_scores

        neural = top_only(exhaustive_scores(colbert, query_texts, doc_texts).numpy(), depth)
        matrix = fused_scores(lexical, neural, weight).astype(np.float32)
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(matrix_path) as tmp, HashingFile(tmp) as f:   # checksummed as written, not read back
            np.save(f, matrix)
        written = f.entry()
        spread = {"lexical_row_std": _mean_row_std(lexical), "neural_row_std": _mean_row_std(neural)}
        if verbose:
            _log.info("hybrid teacher: mean per-question std of the raw scores: TF-IDF %.4f, ColBERT %.4f",
                      spread["lexical_row_std"], spread["neural_row_std"])
        write_json(meta_path, {**settings, **spread, "checksum": written[HASH_ALGORITHM], "bytes": written["size"]})
        return cls(matrix, query_texts, doc_texts, colbert.device)


def _mean_row_std(scores: np.ndarray) -> float:
    """Mean over rows of the population std of each row's returned (non-``nan``) scores.

    >>> _mean_row_std(np.array([[1.0, 3.0, np.nan], [2.0, 2.0, 2.0]]))
    0.5
    """
    with np.errstate(invalid="ignore"):
        return float(np.nanmean(np.nanstd(scores, axis=1)))


def tfidf_score_matrix(data, qids: Sequence[str], docnos: Sequence[str], index_dir: Union[str, Path], depth: int,
                       verbose: bool = False) -> np.ndarray:
    """``[len(qids), len(docnos)]`` TF-IDF scores of each question's top ``depth`` passages, ``nan`` elsewhere
    (:func:`.data.tfidf_results`: the index at ``index_dir`` is built from ``data.corpus()`` if not there yet)."""
    from .examples import tfidf_results

    res = tfidf_results(data, index_dir, qids, depth, verbose)
    row: Dict[str, int] = {q: i for i, q in enumerate(qids)}
    col: Dict[str, int] = {d: j for j, d in enumerate(docnos)}
    out = np.full((len(qids), len(docnos)), np.nan)
    out[res["qid"].map(row).to_numpy(), res["docno"].map(col).to_numpy()] = res["score"].to_numpy(dtype=np.float64)
    return out
