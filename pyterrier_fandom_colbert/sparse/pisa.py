"""PISA (through the ``pyterrier-pisa`` package) as the dynamic-pruning engine for learned-sparse ``toks``.

    pisa = build_pisa_index("indexes/splade-pisa", index.get_corpus_iter())   # or any docno + toks dicts
    retr = splade.query_encoder() >> pisa_retriever(pisa, algorithm="maxscore")

PISA stores each weight as the integer ``int(weight · scale)`` (scale 100 by default, so weights under 0.01
vanish) and scores a query as Σ_t (query weight · scale) · stored integer: the ranking of the exact dot product
up to that quantisation. Its query algorithms skip documents that cannot enter the top k: ``maxscore``,
``block_max_wand`` (block-max WAND), ``block_max_maxscore``, ``wand``; ``ranked_or`` scores every matching
document (exhaustive, for comparison). An optional extra: ``pip install 'pyterrier-fandom-colbert[pisa]'``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterable, Union

import pyterrier as pt

from ..checks import positive_int, real_in_range
from ..cli_errors import require_extra
from ..storage import atomic_folder

ALGORITHMS = ("maxscore", "block_max_wand", "block_max_maxscore", "wand", "ranked_or")


def _pisa():
    return require_extra("pyterrier_pisa", "pisa", "PISA")


def pisa_available() -> bool:
    try:
        _pisa()
    except ModuleNotFoundError:
        return False
    return True


def build_pisa_index(path: Union[str, Path], docs: Iterable[Dict[str, Any]], *, field: str = "toks",
                     scale: float = 100.0, overwrite: bool = False):
    """A PISA index of ``docs`` (dicts with docno and a ``field`` dict of term → weight); returns the PisaIndex.

    The folder appears only once PISA has finished writing it.
    """
    pp = _pisa()
    path = Path(path)
    with atomic_folder(path, overwrite=overwrite, replaceable=_is_pisa_index, what="PISA index") as tmp:
        index = pp.PisaIndex(str(tmp), stemmer="none", overwrite=True)
        index.toks_indexer(field, scale=scale).index(docs)
    return pp.PisaIndex(str(path), stemmer="none")


def _is_pisa_index(path: Path) -> bool:
    return (path / "pt_meta.json").is_file() and (path / "fwd.terms").is_file()


def pisa_retriever(index: Union[str, Path, Any], num_results: int = 1000, *, algorithm: str = "maxscore",
                   threads: int = 1, scale: float = 100.0) -> pt.Transformer:
    """qid, query_toks → + docno, score, rank (PISA's ``quantized`` dot-product scorer, pyterrier-pisa's
    transformer)."""
    num_results = positive_int("num_results", num_results)
    threads = positive_int("threads", threads)
    scale = real_in_range("scale", scale, 0.0, above=True, what="query weights are multiplied by it")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r}; expected one of {ALGORITHMS}")
    pp = _pisa()
    if not isinstance(index, pp.PisaIndex):
        if not _is_pisa_index(Path(index)):
            raise FileNotFoundError(f"no PISA index at {index}; build one with build_pisa_index(path, docs)")
        index = pp.PisaIndex(str(index), stemmer="none")
    return index.quantized(num_results=num_results, query_algorithm=algorithm, threads=threads, toks_scale=scale)
