"""The on-disk cache of built neighbour indexes: ``<index folder>/faiss/<stem>.faiss`` with the build parameters
in ``<stem>.json``, for kinds with a cache file name (:meth:`AnnKind.file_stem`). Both are written atomically
(unique temporary names, renamed into place), so an interrupted build leaves no cache and concurrent builds of
the same spec never read each other's half-written file.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional, Union

import numpy as np

from ...model.similarity import Similarity, get_similarity
from ...storage import atomic_path, write_json
from .base import AnnIndex, FaissSpec

CACHE_DIR = "faiss"
SUFFIX = ".faiss"


def cache_file(folder: Union[str, Path], spec: FaissSpec) -> Optional[Path]:
    """Where the index of a resolved ``spec`` is cached in the index ``folder``; ``None`` if its kind is not."""
    stem = spec.file_stem()
    return None if stem is None else Path(folder) / CACHE_DIR / f"{stem}{SUFFIX}"


def load_or_build(folder: Union[str, Path], vectors: np.ndarray, spec: FaissSpec,
                  similarity: Union[str, Similarity], verbose: bool = False) -> AnnIndex:
    """The neighbour index for a resolved ``spec``: read from ``folder/faiss/`` if cached there, else built (and
    cached if its kind has a cache file)."""
    kind = spec.ann_kind
    target = cache_file(folder, spec)
    if target is not None and target.exists():
        return AnnIndex(spec, kind.read(target))
    started = time.perf_counter()
    index = kind.build(vectors, spec, similarity, verbose)
    if target is not None:
        import faiss

        params = {"spec": spec.to_dict(), "factory": spec.factory_string(),
                  "similarity": get_similarity(similarity).name, "num_tokens": int(index.ntotal),
                  "build_seconds": round(time.perf_counter() - started, 3), "faiss_version": faiss.__version__}
        write_json(target.with_suffix(".json"), params)
        with atomic_path(target) as tmp:
            kind.write(index, tmp)
    return AnnIndex(spec, index)
