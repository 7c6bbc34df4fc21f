"""The on-disk cache of built neighbour indexes: ``<index folder>/faiss/<stem>.faiss`` with the build parameters
in ``<stem>.json``, for kinds with a cache file name (:meth:`AnnKind.file_stem`).

* Tied to the vectors it was built from: the JSON records the index manifest's entry (size and checksum) of
  ``vectors.f16`` (``"vectors"``) and the ``.faiss`` file's own size and checksum (``"file"``). A cache whose
  vectors entry differs (stale: copied from another index, or the vectors were rewritten) or whose file does not
  match (damaged) is rebuilt with a warning naming it; in a folder this process cannot write it is refused with
  an error naming it.
* Safe under concurrency: both files are written atomically (unique temporary names, renamed into place; the
  ``.faiss`` first, then the JSON that vouches for it), and builds of one spec are serialised by an exclusive
  ``fcntl.flock`` on ``<stem>.lock``: a process that finds no valid cache takes the lock, looks again (another
  process may have just built it) and only then builds. Valid caches are read without the lock.
"""
from __future__ import annotations

import contextlib
import os
import time
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from ...model.similarity import Similarity, get_similarity
from ...storage import (
    DamagedFileError,
    atomic_path,
    checksum_problem,
    manifest_entry,
    read_json,
    write_json,
)
from .base import AnnIndex, FaissSpec

CACHE_DIR = "faiss"
SUFFIX = ".faiss"
LOCK_SUFFIX = ".lock"


def cache_file(folder: Union[str, Path], spec: FaissSpec) -> Optional[Path]:
    """Where the index of a resolved ``spec`` is cached in the index ``folder``; ``None`` if its kind is not."""
    stem = spec.file_stem()
    return None if stem is None else Path(folder) / CACHE_DIR / f"{stem}{SUFFIX}"


def _describe(entry: Optional[Dict[str, Any]]) -> str:
    if not isinstance(entry, dict):
        return "an index without checksums"
    sums = [f"{k} {v}" for k, v in entry.items() if k != "size"]
    return f"{', '.join(sums)} ({entry.get('size')} bytes)"


def cache_problem(target: Path, content: Optional[Dict[str, Any]]) -> Optional[Tuple[Path, str]]:
    """(file, why) the cache at ``target`` (``.faiss`` and its ``.json``) cannot be used for vectors whose
    manifest entry is ``content`` (None: an index without manifest), or None when it can; ``why`` is
    ``"missing"`` when neither file exists. Hashes the ``.faiss`` file."""
    params_file = target.with_suffix(".json")
    if not target.exists() and not params_file.exists():
        return target, "missing"
    try:
        params = read_json(params_file, "FAISS cache parameters")
    except (DamagedFileError, FileNotFoundError) as err:
        return params_file, str(err)
    if not isinstance(params, dict) or not isinstance(params.get("file"), dict):
        return params_file, f"{params_file} records no size and checksum of {target.name} (older version)"
    if params.get("vectors") != content:
        return target, (f"{target} is stale: it was built from vectors.f16 with {_describe(params.get('vectors'))}, "
                        f"but the index now holds vectors.f16 with {_describe(content)}")
    try:
        problem = checksum_problem(target.parent, target.name, params["file"])
    except (StopIteration, TypeError, ValueError):
        return params_file, f"{params_file} is damaged: its entry for {target.name} is {params['file']!r}"
    return None if problem is None else (target, problem)


def cache_problems(folder: Union[str, Path], content: Optional[Dict[str, Any]]) -> List[Tuple[str, str]]:
    """``(file name inside folder, problem)`` for every damaged or stale cache in an index ``folder`` (for
    ``verify()``)."""
    cache = Path(folder) / CACHE_DIR
    if not cache.is_dir():
        return []
    out = []
    for stem in sorted({p.stem for p in cache.iterdir() if p.suffix in (SUFFIX, ".json")}):
        found = cache_problem(cache / f"{stem}{SUFFIX}", content)
        if found is not None:
            file, problem = found
            out.append((f"{CACHE_DIR}/{file.name}", f"{problem} (a FAISS cache: delete {cache}/{stem}.* and it is "
                                                    "rebuilt on next use)"))
    return out


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


@contextlib.contextmanager
def build_lock(target: Path) -> Iterator[None]:
    """An exclusive lock on ``<stem>.lock`` beside ``target``, held while the cache is checked and built.

    ``fcntl.flock`` locks are released by the kernel when the holder exits, even if it is killed, so a crashed
    build never blocks others. Without ``fcntl`` (not POSIX) builds are not serialised: they may run twice, but
    the atomic writes still never expose a partial file.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover (Windows)
        yield
        return
    lock = target.with_suffix(LOCK_SUFFIX)
    with open(lock, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def load_or_build(folder: Union[str, Path], vectors: np.ndarray, spec: FaissSpec,
                  similarity: Union[str, Similarity], verbose: bool = False, *,
                  content: Optional[Dict[str, Any]] = None) -> AnnIndex:
    """The neighbour index for a resolved ``spec``: read from ``folder/faiss/`` if a valid cache for ``content``
    (the index manifest's entry of its vectors file; None for an index without manifest) is there, else built
    (once, however many processes ask at the same time) and cached if its kind has a cache file."""
    kind = spec.ann_kind
    target = cache_file(folder, spec)
    if target is None:
        return AnnIndex(spec, kind.build(vectors, spec, similarity, verbose))
    found = cache_problem(target, content)
    if found is None:
        loaded = _read(kind, target)
        if loaded is not None:
            return AnnIndex(spec, loaded)
        found = (target, f"{target} cannot be read by FAISS")
    if not target.parent.exists() and _writable(Path(folder)):
        target.parent.mkdir(exist_ok=True)
    if not target.parent.is_dir() or not _writable(target.parent):
        file, why = found
        why = "there is none" if why == "missing" else why
        raise DamagedFileError(file, f"cannot use the FAISS cache {target}: {why}; {target.parent} is not "
                                     "writable, so it cannot be built there; build it in a writable copy of the "
                                     "index, or use faiss='flat'")
    with build_lock(target):
        found = cache_problem(target, content)  # another process may have built it while we waited
        if found is None:
            loaded = _read(kind, target)
            if loaded is not None:
                return AnnIndex(spec, loaded)
        elif found[1] != "missing":
            warnings.warn(f"rebuilding the FAISS cache: {found[1]}", stacklevel=3)
        started = time.perf_counter()
        index = kind.build(vectors, spec, similarity, verbose)
        with atomic_path(target) as tmp:
            kind.write(index, tmp)
        import faiss

        write_json(target.with_suffix(".json"), {
            "spec": spec.to_dict(), "factory": spec.factory_string(), "similarity": get_similarity(similarity).name,
            "num_tokens": int(index.ntotal), "build_seconds": round(time.perf_counter() - started, 3),
            "faiss_version": faiss.__version__, "vectors": content, "file": manifest_entry(target)})
    return AnnIndex(spec, index)


def _read(kind: Any, target: Path) -> Any:
    """The cached index, or None (with a warning) when FAISS cannot read a file that matched its checksum."""
    try:
        return kind.read(target)
    except RuntimeError as err:  # FAISS reports unreadable files as RuntimeError
        warnings.warn(f"{target} cannot be read by FAISS ({err})", stacklevel=3)
        return None
