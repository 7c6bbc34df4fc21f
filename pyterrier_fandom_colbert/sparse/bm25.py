"""BM25 through pyterrier-pisa (the optional ``pisa`` extra), as a baseline and as the lexical side of
``pfc.Hybrid``:

    bm25 = build_bm25_index("indexes/bm25", dataset.get_corpus_iter()).bm25(num_results=1000)
    hybrid = pfc.Hybrid(bm25, colbert.query_encoder() >> colbert_index.retriever())

The index is pyterrier-pisa's own ``PisaIndex`` over the passages' ``text`` (its tokeniser, its stopword list and
Porter2 stemming by default; BM25 ``k1 = 0.9, b = 0.4`` as pyterrier-pisa sets them), written into a temporary
folder and moved into place only when complete. Everything else (``.bm25(k1=, b=, num_results=)``, ``.tf_idf()``,
``.qld()``) is pyterrier-pisa's.
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, Optional, Union

from ..storage import atomic_folder
from .pisa import _is_pisa_index, _pisa


def build_bm25_index(path: Union[str, Path], docs: Iterable[Dict[str, Any]], *, text_field: str = "text",
                     stemmer: str = "porter2", stops: str = "terrier", overwrite: bool = False) -> Any:
    """A pyterrier-pisa ``PisaIndex`` of ``docs`` (dicts with ``docno`` and ``text_field``), written to ``path``
    atomically; an existing index there is opened as it is unless ``overwrite``. ``stemmer`` and ``stops`` are
    pyterrier-pisa's (``"porter2"``, ``"krovetz"`` or ``"none"``; ``"terrier"`` or ``"none"``)."""
    pp = _pisa()
    path = Path(path)
    if _is_pisa_index(path) and not overwrite:
        return pp.PisaIndex(str(path), stemmer=stemmer, stops=stops)
    with atomic_folder(path, overwrite=overwrite, replaceable=_is_pisa_index, what="BM25 (PISA) index") as tmp:
        index = pp.PisaIndex(str(tmp), text_field=text_field, stemmer=stemmer, stops=stops, overwrite=True)
        index.indexer().index(docs)
    return pp.PisaIndex(str(path), text_field=text_field, stemmer=stemmer, stops=stops)


def BM25(path: Union[str, Path], docs: Optional[Iterable[Dict[str, Any]]] = None, *, num_results: int = 1000,
         k1: float = 0.9, b: float = 0.4, text_field: str = "text", stemmer: str = "porter2", stops: str = "terrier",
         overwrite: bool = False, verbose: bool = False) -> Any:
    """``pfc.BM25(path, docs)``: pyterrier-pisa's BM25 retriever (qid, query → docno, score, rank) over the PISA
    index at ``path``, built there from ``docs`` first when given (:func:`build_bm25_index`; an index already there
    is opened unless ``overwrite``). Quiet unless ``verbose``: PISA's progress lines (hundreds of them, from its
    native code too) are dropped. Without pyterrier-pisa: an error naming the install."""
    _pisa()  # the clear error first
    if docs is None:
        if not _is_pisa_index(Path(path)):
            raise FileNotFoundError(f"no BM25 (PISA) index at {path}: give the documents to build it, "
                                    "pfc.BM25(path, docs)")
        index = _pisa().PisaIndex(str(path), text_field=text_field, stemmer=stemmer, stops=stops)
    else:
        with _quiet(not verbose):
            index = build_bm25_index(path, docs, text_field=text_field, stemmer=stemmer, stops=stops,
                                     overwrite=overwrite)
    return index.bm25(k1=k1, b=b, num_results=num_results, verbose=verbose)


@contextlib.contextmanager
def _quiet(enabled: bool) -> Iterator[None]:
    """Standard output and error (Python's and the native code's file descriptors 1 and 2) dropped while on."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
            os.dup2(null.fileno(), 1)
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
