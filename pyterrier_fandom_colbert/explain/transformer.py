"""``Explainer``: a PyTerrier transformer that adds, to each retrieved passage, why it matched the query.

Append it to any pipeline whose output has ``qid, query, docno, text``::

    pipeline = index.retriever(colbert) % 10 >> pt.text.get_text(dataset, "text") >> pfc.Explainer(colbert)

The maths is in :mod:`pyterrier_fandom_colbert.explain.relevance`; this module only encodes (or looks up) token
vectors and turns per-passage explanations into columns. Columns added (one value per row; arrays are numpy):

=====================  =========================================================================================
``expl_query_tokens``  list of the N_q scoring query tokens (rows of ``expl_sim``; no [MASK]s when
                       ``score_query_masks=False``)
``expl_tokens``        list of the L passage tokens: ``[CLS] [D] … [SEP]``
``expl_offsets``       ``[L, 2]`` int64 character span of each token in the text (``(0, 0)`` for specials)
``expl_words``         ``[L]`` int64 word index of each token, -1 for ``[CLS]``/``[D]``/``[SEP]``
``expl_sim``           ``[N_q, L]`` float32 token similarities (NaN for tokens that do not score)
``r_abs``              ``[L]`` int64: query vectors that have the token among their top-k̃
``r_acc``              ``[L]`` float64: sum of those similarities
``kde``                ``[L]`` float64: Gaussian kernel density of the matched positions (specials excluded)
``word_spans``         ``[W, 2]`` int64 character spans of the words (word pieces merged)
``word_r_abs``         ``[W]`` int64, sum over the word's pieces
``word_r_acc``         ``[W]`` float64, sum over the word's pieces
``word_kde``           ``[W]`` float64, mean over the word's pieces
``answer_tokens``      ``(start, end)`` token span (end exclusive) of the highest-density region, or None
``answer_span``        ``(start, end)`` its character offsets in the text (``text[start:end]``), or None
``token_sim``          (with ``query_token=``) ``[L]`` similarity of each token to that query token
``word_token_sim``     (with ``query_token=``) ``[W]`` its maximum over each word's pieces
=====================  =========================================================================================
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from ..frames import (
    EqualByKey,
    artifact_key,
    check_texts,
    empty_output,
    require_columns,
    usable_query_rows,
    with_columns,
)
from ..model.encoders import query_tensors
from ..params import Parameters
from ..progress import progress
from .relevance import ExplainOptions, explain_passage, rows_to_layout, select_query_token, word_scores

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..index.artifact import ColBERTIndex
    from ..model.colbert import ColBERT

EXPLANATION_COLUMNS = ["expl_query_tokens", "expl_tokens", "expl_offsets", "expl_words", "expl_sim", "r_abs",
                       "r_acc", "kde", "word_spans", "word_r_abs", "word_r_acc", "word_kde", "answer_tokens",
                       "answer_span"]
TOKEN_VIEW_COLUMNS = ["token_sim", "word_token_sim"]


@dataclass
class _Passage:
    """One passage: its layout ``[CLS] [D] … [SEP]`` (ids, character offsets, text) and the stored rows (vectors)
    that score, each the vector of one layout position; a text read as windows has several rows for the
    positions that windows share."""

    vectors: "torch.Tensor"   # [R, d] scoring rows
    positions: np.ndarray     # [R] layout position of each row
    ids: np.ndarray           # [L] layout token ids
    offsets: np.ndarray       # [L, 2]
    text: str


class Explainer(EqualByKey, Parameters, pt.Transformer):
    """qid, query, docno, text → + per-token and per-word relevance (R_abs, R_acc, KDE) and the answer span.

    ``k_tilde``: matches per query vector; ``bandwidth``: "scott", "silverman" or a number of tokens;
    ``span_threshold``: the answer span is where the density is at least this fraction of its peak;
    ``max_span``: at most this many word pieces (the densest part of that run; None: no limit).
    ``index``: a :class:`~pyterrier_fandom_colbert.index.artifact.ColBERTIndex` (or its path) built by the same encoder:
    passage vectors are read from it instead of re-encoding the text (the text is still needed for character
    offsets, and must tokenise to the stored token ids). Query vectors and tokens are taken from the
    ``query_embs``/``query_toks`` columns when an earlier stage (``colbert.query_encoder()``, e.g. inside
    ``index.retriever(colbert)``) added them, so queries are not encoded twice.
    ``query_token`` (a position in ``expl_query_tokens`` or a
    token string such as ``"when"``) adds the single-token view columns.

    Texts longer than one document (``doc_maxlen - 3`` word pieces) are explained whole, as the indexer and
    ``colbert.text_scorer()`` read them: ``long_docs="windows"`` (the default without an index; ``stride`` as
    theirs) encodes overlapping windows and lays them over one token layout of the whole text, each position
    taking its best window's similarity, so the explanation's MaxSim is the score; ``long_docs="truncate"``
    explains the first ``doc_maxlen`` tokens. With an ``index``, its own setting applies (``long_docs``/``stride``
    may be left out, or must agree with it).
    Rows of empty or non-text queries are left out with one warning naming their qids, as by every retriever and
    scorer; ``strict=True`` refuses them instead.
    """

    def __init__(self, colbert: "ColBERT", k_tilde: int = 2, bandwidth: Union[str, float] = "scott",
                 index: Union["ColBERTIndex", str, Path, None] = None, *, span_threshold: float = 0.5,
                 max_span: Optional[int] = ExplainOptions.max_span,
                 query_token: Union[int, str, None] = None, text_field: str = "text", verbose: bool = False,
                 strict: bool = False, long_docs: Optional[str] = None, stride: Optional[int] = None):
        from ..model.tokenization import check_long_docs

        self.colbert = colbert
        self.strict = strict
        self.options = ExplainOptions(k_tilde=k_tilde, bandwidth=bandwidth, span_threshold=span_threshold,
                                      max_span=max_span)
        if isinstance(index, (str, Path)):
            from ..index.artifact import ColBERTIndex

            index = ColBERTIndex(index)
        self.index = index
        window, maxlen = colbert.tokenizer.max_doc_pieces, colbert.config.doc_maxlen
        if index is not None:
            own_mode, own_stride = index.meta.long_docs, index.meta.stride
            if (long_docs is not None and long_docs != own_mode) or \
                    (stride is not None and own_mode == "windows" and stride != own_stride):
                raise ValueError(f"long_docs={long_docs!r}, stride={stride!r} disagree with the index at "
                                 f"{index.path} (long_docs={own_mode!r}, stride={own_stride!r}), whose vectors "
                                 "are explained; leave them out to follow the index")
            long_docs, stride = own_mode, (own_stride if own_mode == "windows" else stride)
        self.long_docs = "windows" if long_docs is None else long_docs
        self.stride = check_long_docs(self.long_docs, stride, window, maxlen)
        if query_token is not None and (isinstance(query_token, bool)
                                        or not isinstance(query_token, (int, np.integer, str))):
            raise ValueError(f"query_token={query_token!r}; expected a query token position (int) or string")
        self.query_token = query_token
        self.text_field = text_field
        self.verbose = verbose

    def _key(self):
        index = artifact_key(self.index) if self.index is not None else None
        return (self.colbert.fingerprint(), self.options, index, self.query_token, self.text_field, self.strict,
                self.long_docs, self.stride)

    def _constructor_args(self) -> Dict[str, Any]:
        from ..model.tokenization import default_stride

        if self.index is not None:  # the index's own long_docs and stride apply
            long_docs, stride = None, None
        else:  # the default stride as None, so that switching to long_docs="truncate" needs no second change
            long_docs = self.long_docs
            stride = None if self.stride == default_stride(self.colbert.tokenizer.max_doc_pieces) else self.stride
        return {"colbert": self.colbert, "k_tilde": self.options.k_tilde, "bandwidth": self.options.bandwidth,
                "index": self.index, "span_threshold": self.options.span_threshold,
                "max_span": self.options.max_span,
                "query_token": self.query_token, "text_field": self.text_field, "verbose": self.verbose,
                "strict": self.strict, "long_docs": long_docs, "stride": stride}

    @property
    def output_columns(self) -> List[str]:
        return EXPLANATION_COLUMNS + (TOKEN_VIEW_COLUMNS if self.query_token is not None else [])

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["qid", "query", "docno", self.text_field], self)
        return list(input_columns) + [c for c in self.output_columns if c not in input_columns]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["qid", "query", "docno", self.text_field], self)
        inp = usable_query_rows(inp, strict=self.strict, context=self)
        if len(inp) == 0:
            return empty_output(inp, self.output_columns)
        queries = inp["query"].tolist()
        texts = check_texts(inp, self.text_field)
        q_codes, encoded = self._queries(inp, queries)
        qids = inp["qid"].tolist()
        values: Dict[str, List] = {c: [None] * len(inp) for c in self.output_columns}
        passages = (self._from_index(self.index, inp["docno"].tolist(), texts) if self.index is not None
                    else self._encode(texts))
        bar = progress(total=len(inp), desc="explaining", unit="row", enabled=self.verbose)
        try:
            for rows, passage in passages:
                tokens = self.colbert.tokenizer.tokens(passage.ids)
                for row in rows:
                    q_vectors, q_tokens = encoded[q_codes[row]]
                    self._explain_row(values, row, qids[row], q_vectors, q_tokens, passage, tokens)
                bar.update(len(rows))
        finally:
            bar.close()
        return with_columns(inp, dict(values))

    # -- one row -------------------------------------------------------------------------------------------
    def _explain_row(self, values: Dict[str, List], row: int, qid, q_vectors: "torch.Tensor",
                     q_tokens: List[str], passage: _Passage, tokens: List[str]) -> None:
        from ..model.scoring import similarity_matrix

        sim_rows = similarity_matrix(q_vectors, passage.vectors.to(q_vectors.device), self.colbert.config.similarity)
        sim, d_mask = rows_to_layout(sim_rows.cpu().numpy(), passage.positions, len(passage.ids))
        e = explain_passage(sim, d_mask, passage.text, passage.offsets, self.options)
        shown = np.where(d_mask[None, :], sim, np.nan).astype(np.float32)
        out = {"expl_query_tokens": list(q_tokens), "expl_tokens": list(tokens), "expl_offsets": passage.offsets,
               "expl_words": e.word_of_token, "expl_sim": shown, "r_abs": e.r_abs, "r_acc": e.r_acc, "kde": e.kde,
               "word_spans": e.word_spans, "word_r_abs": e.word_r_abs, "word_r_acc": e.word_r_acc,
               "word_kde": e.word_kde, "answer_tokens": e.answer_tokens, "answer_span": e.answer_span}
        if self.query_token is not None:
            try:
                which = select_query_token(q_tokens, self.query_token)
            except ValueError as err:
                raise ValueError(f"qid {qid!r}: {err}") from None
            out["token_sim"] = shown[which]
            out["word_token_sim"] = word_scores(shown[which], e.word_of_token, len(e.word_spans), "max")
        for name, value in out.items():
            values[name][row] = value

    # -- vectors -------------------------------------------------------------------------------------------
    def _queries(self, inp: pd.DataFrame, queries: List[str]) -> Tuple[np.ndarray,
                                                                         List[Tuple["torch.Tensor", List[str]]]]:
        """(query of each row, [(scoring query vectors [N_q, d], their token strings)]): from the query_embs and
        query_toks columns when present, else encoded here (each distinct text once)."""
        if "query_embs" in inp.columns and "query_toks" in inp.columns:
            codes, vectors = query_tensors(inp, self.colbert.config.dim, self)
            first = pd.Series(np.arange(len(inp))).groupby(codes).first().to_numpy()
            toks = inp["query_toks"].to_numpy()[first]
            for qid, v, tk in zip(inp["qid"].to_numpy()[first], vectors, toks):
                if len(tk) != len(v):
                    raise ValueError(f"qid {qid!r}: query_toks has {len(tk)} tokens but query_embs {len(v)} vectors")
            return codes, [(v.to(self.colbert.device), list(tk)) for v, tk in zip(vectors, toks)]
        codes, unique = pd.factorize(pd.Series(queries))
        return codes, self._encode_queries(list(unique))

    def _encode_queries(self, texts: List[str]) -> List[Tuple["torch.Tensor", List[str]]]:
        """(scoring query vectors [N_q, d], their token strings) per query text."""
        Q, q_mask = self.colbert.encode_queries(texts)
        ids = self.colbert.tokenizer.queries(texts).input_ids
        mask = q_mask.cpu().numpy()
        return [(Q[i][q_mask[i]], self.colbert.tokenizer.tokens(ids[i][mask[i]])) for i in range(len(texts))]

    def _layouts(self, texts: Sequence[str]) -> Iterator[Tuple[int, np.ndarray, np.ndarray, np.ndarray,
                                                                 np.ndarray, List]]:
        """``(i, layout ids [L], offsets [L, 2], row positions [R], row token ids [R], pieces)`` of each text: the
        text's pieces as this explainer reads them (whole as windows, or its first window) and the scoring rows
        those windows give, in the order the encoder and the index keep them."""
        from ..model.tokenization import windows

        tokenizer = self.colbert.tokenizer
        size = tokenizer.max_doc_pieces
        pieces, offsets = tokenizer.whole_document_content(texts, offsets=True)
        for i, (p, offs) in enumerate(zip(pieces, offsets)):
            spans = windows(len(p), size, self.stride) if self.stride is not None else [(0, min(len(p), size))]
            n = spans[-1][1]
            layout = tokenizer.pack_documents([p[:n]], [np.asarray(offs[:n], dtype=np.int64).reshape(-1, 2)])
            positions, row_ids = tokenizer.window_rows(p, spans)
            yield i, layout.input_ids[0], layout.offsets[0], positions, row_ids, p

    def _encode(self, texts: List[str]) -> Iterator[Tuple[np.ndarray, _Passage]]:
        """(rows, passage) for each distinct text, encoded by the ColBERT model."""
        import torch

        codes, unique = pd.factorize(pd.Series(texts))
        rows_of = pd.Series(np.arange(len(texts))).groupby(codes).indices
        span = self.colbert.batch_size
        for start in range(0, len(unique), span):
            chunk = list(unique[start:start + span])
            layouts = list(self._layouts(chunk))
            encoded = self.colbert.encode_pieces([p for *_, p in layouts], self.stride)
            for (i, ids, offs, positions, row_ids, _), (vectors, stored_ids, _) in zip(layouts, encoded):
                if not np.array_equal(np.asarray(stored_ids, dtype=np.int64), row_ids):
                    raise RuntimeError(f"the encoder's {len(stored_ids)} scoring tokens differ from the "
                                       f"{len(row_ids)} of the explanation's layout for text {start + i}; "
                                       "please report this")
                yield rows_of[start + i], _Passage(torch.from_numpy(np.asarray(vectors, dtype=np.float32)),
                                                   positions, ids, offs, chunk[i])

    def _from_index(self, index: "ColBERTIndex", docnos: Sequence,
                    texts: List[str]) -> Iterator[Tuple[np.ndarray, _Passage]]:
        """(rows, passage) for each distinct (docno, text), vectors read from ``index`` (this transformer's)."""
        import torch

        index.check_encoder(self.colbert)
        rows_of: Dict[Tuple[str, str], List[int]] = {}
        for row, key in enumerate(zip(docnos, texts)):
            rows_of.setdefault(key, []).append(row)
        keys = list(rows_of)
        doc_ids = index.doc_ids([str(d) for d, _ in keys])
        span = self.colbert.batch_size
        how = f"as windows {self.stride} pieces apart" if self.stride is not None else "truncated"
        for start in range(0, len(keys), span):
            chunk = keys[start:start + span]
            for i, ids, offs, positions, row_ids, _ in self._layouts([t for _, t in chunk]):
                docno, text = chunk[i]
                stored, stored_ids = index.doc_vectors(int(doc_ids[start + i]))
                if not np.array_equal(stored_ids.astype(np.int64), row_ids):
                    raise ValueError(f"docno {docno!r}: its text tokenises ({how}, as the index at {index.path} "
                                     f"stores texts) to {len(row_ids)} scoring tokens that differ from the "
                                     f"{len(stored_ids)} token ids stored there; give the text that was indexed")
                yield np.array(rows_of[(docno, text)]), _Passage(torch.from_numpy(np.asarray(stored, np.float32)),
                                                                 positions, ids, offs, text)

    def __repr__(self) -> str:
        o = self.options
        extra = f", index={self.index!r}" if self.index is not None else ""
        extra += ", strict=True" if self.strict else ""
        if self.index is None:
            extra += f", stride={self.stride}" if self.stride is not None else ", long_docs='truncate'"
        return (f"Explainer({self.colbert!r}, k_tilde={o.k_tilde}, bandwidth={o.bandwidth!r}, "
                f"span_threshold={o.span_threshold}{extra})")
