"""Integrity checks of a ColBERT index folder, over the manifest helpers of :mod:`~pyterrier_fandom_colbert.storage`.

Two levels, for every storage format:

* :func:`check_on_open` (cheap, once per opened index): every file's size against the manifest and against the
  sizes the metadata implies (the store's :meth:`~.store.IndexStore.layout`), and the checksums of the
  store's small files (:attr:`~.store.IndexStore.CHECKED_ON_OPEN`); :func:`checked_offsets` adds the
  offsets' structure when they are first read. The large files (vectors, codes, residuals, inverted lists, token
  ids) are then verified block by block as they are read (the index's
  :class:`~pyterrier_fandom_colbert.storage.ArtifactIntegrity`; :func:`rows_held` names the documents of a
  damaged block).
* :func:`verify` (``index.verify()``): every file's checksum, the offsets' structure, the config and docno lookup,
  the store's own content checks (:meth:`~.store.IndexStore.problems`: finite vectors, centroid ids in
  range, ...), and each cached FAISS index.

Both raise :class:`~pyterrier_fandom_colbert.storage.DamagedFileError` naming every damaged file. The format
enters only through the store passed in; what is generic to artifacts (manifests, sizes, checksums) is in
``storage``.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

import numpy as np

from ..model.config import CONFIG_FILE, ColBERTConfig
from ..storage import ArtifactIntegrity, DamagedFileError, open_npids, raise_damaged
from .layout import (
    DOCNOS_FILE,
    META_FILE,
    OFFSETS_FILE,
    REMEDY,
    VECTORS_FILE,
    IndexMeta,
    check_offsets,
    required_files,
)

if TYPE_CHECKING:  # pragma: no cover
    from .store import IndexStore, Layout, Problem

WHAT = "ColBERT index"


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


def integrity_of(folder: Path, meta: IndexMeta, unchecked: bool = False) -> ArtifactIntegrity:
    """The index's integrity base (refusing an index without manifest unless ``unchecked``, and a manifest that
    lacks a file every index of its format has: :func:`~.layout.required_files`)."""
    return ArtifactIntegrity(folder, meta.files, what=WHAT, remedy=REMEDY, source=folder / META_FILE,
                             unchecked=unchecked, required=required_files(meta))


def check_on_open(integrity: ArtifactIntegrity, meta: IndexMeta, store: "IndexStore") -> None:
    """The cheap checks: sizes of all files, checksums of the store's small ones; never reads the vectors."""
    integrity.check_open(store.CHECKED_ON_OPEN)
    layout = store.layout(meta)  # (a compressed index's from codec.json, whose checksum was just checked)
    integrity.require(layout)
    raise_damaged(integrity.folder, size_problems(integrity.folder, meta, layout), what=WHAT, remedy=REMEDY)


def rows_held(offsets: Callable[[], np.ndarray], docnos_of: Callable[[np.ndarray], np.ndarray],
              row_bytes: int) -> Callable[[int, int], str]:
    """``locate(first_byte, end_byte)`` for a block of a ``row_bytes``-wide token array: the token rows and the
    documents (docnos, the first five) whose vectors they hold."""
    def locate(start: int, end: int) -> str:
        first, last = start // row_bytes, (end - 1) // row_bytes
        docs = np.unique(np.searchsorted(offsets(), np.array([first, last]), side="right") - 1)
        docs = np.arange(int(docs[0]), int(docs[-1]) + 1)
        shown = docnos_of(docs[:5]).tolist()
        return (f"token rows {first}-{last}, the vectors of {len(docs)} document(s): {shown}"
                f"{' …' if len(docs) > 5 else ''}")
    return locate


def checked_offsets(offsets: np.ndarray, num_tokens: int, folder: Path) -> np.ndarray:
    """``offsets`` if they map documents to ``num_tokens`` rows (:func:`~.layout.check_offsets`), else a
    DamagedFileError naming ``offsets.i64``."""
    problem = check_offsets(offsets, num_tokens)
    if problem:
        file = folder / OFFSETS_FILE
        raise DamagedFileError(file, f"{file} is damaged: {problem}; {REMEDY}")
    return offsets


def verify(folder: Path, meta: IndexMeta, store: "IndexStore", unchecked: bool = False) -> Dict[str, Any]:
    """Full content check of the index in ``folder`` (``meta`` read afresh, ``store`` its format); returns
    ``{"files", "bytes", "seconds"}`` or raises naming each damaged file (see the module docstring). An index
    without manifest is refused (:class:`~pyterrier_fandom_colbert.storage.NoManifestError`); with
    ``unchecked=True`` its structure and content are still checked, after a warning that its file contents
    cannot be."""
    started = time.perf_counter()
    integrity = integrity_of(folder, meta, unchecked)
    problems = integrity.problems()
    layout = store.layout(meta)
    if not problems:  # (a damaged codec.json may give a wrong layout: reported as it is)
        integrity.require(layout)
    problems += size_problems(folder, meta, layout)
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
    return integrity.summary(started)
