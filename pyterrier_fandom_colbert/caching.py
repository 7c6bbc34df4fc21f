"""Cache folders for pyterrier-caching keyed by a transformer's identity: ``cache_folder(root, transformer)``, and
:class:`RetrieverCache`, pyterrier-caching's with its lost-key bug worked around.

pyterrier-caching's ``RetrieverCache``, ``ScorerCache`` and ``KeyValueCache`` key their entries by the input
(the query, the (query, docno) pair) and trust the caller to keep one folder per system. :func:`cache_key` is a
digest of what makes two transformers equal here (``==``: the artifact's resolved folder *and the digest of its
content*, the encoder's fingerprint, every setting), stable across processes, so ``cache_folder("cache",
index.retriever(colbert))`` gives the same folder for an equal retriever tomorrow (also through a relative path or
a symbolic link) and another folder when a setting, the checkpoint, or the index's content changes (an index
rebuilt in place). docs/fusion.md, "Caching", has the example.

pyterrier-caching 0.5.8's ``RetrieverCache`` stores a query's results under a key that has lost its trailing zero
bytes when its sha256 ends in one (``groupby`` over the keys turns them into numpy ``bytes_``, which strips them),
so about one query in 256 is recomputed on every run. ``pfc.RetrieverCache`` is that class reading such entries
back (docs/experiments/fusion.md, "The RetrieverCache key bug", has the report and its reproduction).
"""
from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any, List, Tuple, Union


def _held(transformer: Any) -> List[Tuple[str, List[Any]]]:
    """The transformers ``transformer`` holds, by name: its ``subtransformers()`` (the package's fusions), or the
    stages of PyTerrier's operators (``>>``, ``+``, ``**``, ``|``: ``_transformers``), or a ``RankCutoff``'s."""
    subtransformers = getattr(transformer, "subtransformers", None)
    if callable(subtransformers):
        found = subtransformers().items()
    else:
        stages = getattr(transformer, "_transformers", None)
        found = [("stages", list(stages))] if isinstance(stages, (list, tuple)) else []
    return [(name, list(value) if isinstance(value, (list, tuple)) else [value]) for name, value in sorted(found)]


def _identity(transformer: Any) -> Any:
    """What determines a transformer's output, as plain values with stable reprs: its ``_key()`` where it has one
    (the package's transformers: resolved artifact folder and content digest, settings), else its repr with the
    reprs of the transformers it holds replaced by their identities (so a pipeline's stages are keyed by content,
    not by the path string that their reprs show)."""
    key = getattr(transformer, "_key", None)
    held = _held(transformer)
    if callable(key):
        own: Any = key()
    else:
        own = repr(transformer)
        for name, items in held:
            for i, t in enumerate(items):
                own = own.replace(repr(t), f"<{name}[{i}]>", 1)
    return (type(transformer).__module__, type(transformer).__qualname__, own,
            [(name, [_identity(t) for t in items]) for name, items in held])


def cache_key(transformer: Any) -> str:
    """A 16-hex-digit digest, equal for equal transformers (the package's ``==``) and stable across processes."""
    return hashlib.sha1(repr(_identity(transformer)).encode("utf-8")).hexdigest()[:16]


def cache_folder(root: Union[str, Path], transformer: Any) -> Path:
    """``root / "<Class>-<cache_key>"``: a folder for pyterrier-caching's caches of ``transformer``, e.g.
    ``pfc.RetrieverCache(cache_folder("cache", retriever), retriever)``."""
    return Path(root) / f"{type(transformer).__name__}-{cache_key(transformer)}"


class ZeroSafeKeys:
    """A ``RetrieverCache``'s open dbm file, looked up so that an entry stored under its key less the trailing zero
    bytes (pyterrier-caching 0.5.8's ``groupby`` strips them) is found. No false hit: every key is 32 bytes, so
    two keys with the same stripped form are the same key."""

    def __init__(self, file: Any):
        self.file = file

    def _stored(self, key: Any) -> Any:
        if key in self.file:
            return key
        if isinstance(key, bytes) and key.endswith(b"\0"):
            short = key.rstrip(b"\0")
            if short in self.file:
                return short
        return None

    def __contains__(self, key: Any) -> bool:
        return self._stored(key) is not None

    def __getitem__(self, key: Any) -> Any:
        stored = self._stored(key)
        if stored is None:
            raise KeyError(key)
        return self.file[stored]

    def __getattr__(self, name: str) -> Any:  # close, keys, …
        return getattr(self.file, name)


@cache
def _retriever_cache_class() -> type:
    try:
        from pyterrier_caching import RetrieverCache as Base
    except ImportError as e:
        raise ImportError("pfc.RetrieverCache needs pyterrier-caching: pip install pyterrier-caching (or this "
                          "package's [caching] extra)") from e

    class RetrieverCache(Base):
        """pyterrier-caching's ``RetrieverCache`` (same folder format, same arguments) that finds the entries its
        0.5.8 release stores under a key missing its trailing zero bytes, so no query is recomputed on a second run
        (its own caches' entries included)."""

        def _ensure_built(self, on: Any) -> None:
            super()._ensure_built(on)
            file: Any = getattr(self, "file", None)
            if file is not None and not isinstance(file, ZeroSafeKeys):
                self.file = ZeroSafeKeys(file)

    RetrieverCache.__module__ = __name__
    return RetrieverCache


def __getattr__(name: str) -> Any:
    if name == "RetrieverCache":
        return _retriever_cache_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
