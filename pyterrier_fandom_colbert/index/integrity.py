"""Integrity checks of a ColBERT index folder, over the manifest helpers of :mod:`~pyterrier_fandom_colbert.storage`.

Two levels, for every storage format:

* :func:`check_on_open` (cheap, once per opened index): every file's size against the manifest and against the
  sizes the metadata implies (the store's :meth:`~.stores.base.IndexStore.layout`), and the checksums of the
  store's small files (:attr:`~.stores.base.IndexStore.CHECKED_ON_OPEN`); :func:`checked_offsets` adds the
  offsets' structure when they are first read.
* :func:`verify` (``index.verify()``): every file's checksum, the offsets' structure, the config and docno lookup,
  the store's own content checks (:meth:`~.stores.base.IndexStore.problems`: finite vectors, centroid ids in
  range, ...), and each cached FAISS index.

Both raise :class:`~pyterrier_fandom_colbert.storage.DamagedFileError` naming every damaged file. The format
enters only through the store passed in; what is generic to artifacts (manifests, sizes, checksums) is in
``storage``.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import numpy as np

from ..model.config import CONFIG_FILE, ColBERTConfig
from ..storage import (
    DamagedFileError,
    check_checksums,
    check_sizes,
    manifest_problems,
    open_npids,
    raise_damaged,
)
from .layout import DOCNOS_FILE, META_FILE, OFFSETS_FILE, VECTORS_FILE, IndexMeta, check_offsets

if TYPE_CHECKING:  # pragma: no cover
    from .stores.base import IndexStore, Layout, Problem

WHAT = "ColBERT index"
REMEDY = "rebuild the index (index.indexer(colbert, overwrite=True))"


def size_problem(folder: Path, meta: IndexMeta, layout: "Layout", name: str) -> Optional[str]:
    """Why file ``name`` does not have the size ``layout`` gives it (None when it does)."""
    dtype, shape = layout[name]
    file = folder / name
    expected = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if not file.is_file():
        return f"{file} is missing"
    if file.stat().st_size != expected:
        return (f"{file} is {file.stat().st_size} bytes, but {META_FILE} (num_docs={meta.num_docs}, "
                f"num_tokens={meta.num_tokens}, dim={meta.dim}) needs {expected}")
    return None


def size_problems(folder: Path, meta: IndexMeta, layout: "Layout") -> List["Problem"]:
    """:func:`size_problem` of every file of ``layout``."""
    return [(name, p) for name in layout if (p := size_problem(folder, meta, layout, name))]


def check_on_open(folder: Path, meta: IndexMeta, store: "IndexStore") -> None:
    """The cheap checks: sizes of all files, checksums of the store's small ones; never reads the vectors."""
    if meta.files is not None:
        check_sizes(folder, meta.files, WHAT, REMEDY)
        check_checksums(folder, meta.files, store.CHECKED_ON_OPEN, what=WHAT, remedy=REMEDY)
    raise_damaged(folder, size_problems(folder, meta, store.layout(meta)), what=WHAT, remedy=REMEDY)


def checked_offsets(offsets: np.ndarray, num_tokens: int, folder: Path) -> np.ndarray:
    """``offsets`` if they map documents to ``num_tokens`` rows (:func:`~.layout.check_offsets`), else a
    DamagedFileError naming ``offsets.i64``."""
    problem = check_offsets(offsets, num_tokens)
    if problem:
        file = folder / OFFSETS_FILE
        raise DamagedFileError(file, f"{file} is damaged: {problem}; {REMEDY}")
    return offsets


def verify(folder: Path, meta: IndexMeta, store: "IndexStore") -> Dict[str, Any]:
    """Full content check of the index in ``folder`` (``meta`` read afresh, ``store`` its format); returns
    ``{"files", "bytes", "seconds"}`` or raises naming each damaged file (see the module docstring). An index
    written before checksums were recorded has no manifest: its structure and content are still checked, with a
    warning that its file contents cannot be."""
    started = time.perf_counter()
    problems = manifest_problems(folder, meta.files, folder / META_FILE, "its sizes, structure and vectors")
    problems += size_problems(folder, meta, store.layout(meta))
    offsets = None
    if not any(name == OFFSETS_FILE for name, _ in problems):
        offsets = np.fromfile(folder / OFFSETS_FILE, dtype=np.int64)
        problem = check_offsets(offsets, meta.num_tokens)
        if problem:
            problems.append((OFFSETS_FILE, f"{folder / OFFSETS_FILE}: {problem}"))
            offsets = None
    try:
        ColBERTConfig.load(folder)
    except ValueError as err:
        problems.append((CONFIG_FILE, str(err)))
    docnos = None
    try:
        docnos = open_npids(folder / DOCNOS_FILE, meta.num_docs, WHAT)
    except DamagedFileError as err:
        problems.append((DOCNOS_FILE, str(err)))
    problems += store.problems(meta, problems, offsets, docnos)
    if docnos is not None:
        docnos.close()
    from .ann.cache import cache_problems

    problems += cache_problems(folder, None if meta.files is None else meta.files.get(VECTORS_FILE))
    raise_damaged(folder, problems, what=WHAT, remedy=REMEDY)
    files = meta.files or {}
    return {"files": sorted(files), "bytes": sum(e["size"] for e in files.values()),
            "seconds": round(time.perf_counter() - started, 3)}
