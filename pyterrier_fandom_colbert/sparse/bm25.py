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

from pathlib import Path
from typing import Any, Dict, Iterable, Union

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
