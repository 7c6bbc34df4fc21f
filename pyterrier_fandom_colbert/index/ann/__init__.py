"""Nearest stored tokens for end-to-end retrieval: one module per kind, chosen by the user with ``faiss=``.

``exact`` (exact.py; ``flat`` is accepted for it), ``ivf`` (ivf.py), ``ivfpq`` and ``ivfpq-fs`` (ivfpq.py). Each
kind is a small :class:`~.base.AnnKind` registered in :data:`~.base.KINDS`; a new kind is one module defining and
registering one, added to the import line below. Built indexes are cached by cache.py.
"""
from . import exact, ivf, ivfpq  # noqa: F401  (importing a kind's module registers it)
from .base import (
    KINDS,
    AnnIndex,
    AnnKind,
    FaissSpec,
    as_search_vectors,
    get_kind,
    kinds_accepting,
    metric_for,
    refine,
    register_kind,
    search,
    to_gpu_if_available,
)
from .cache import CACHE_DIR, cache_file, load_or_build
from .exact import ExactSearch
from .ivf import DEFAULT_NPROBE

__all__ = ["CACHE_DIR", "DEFAULT_NPROBE", "KINDS", "AnnIndex", "AnnKind", "ExactSearch", "FaissSpec",
           "as_search_vectors", "cache_file", "get_kind", "kinds_accepting", "load_or_build", "metric_for", "refine",
           "register_kind", "search", "to_gpu_if_available"]
