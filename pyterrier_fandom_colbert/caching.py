"""Cache folders for pyterrier-caching keyed by a transformer's equality: ``cache_folder(root, transformer)``.

pyterrier-caching's ``RetrieverCache``, ``ScorerCache`` and ``KeyValueCache`` key their entries by the input
(the query, the (query, docno) pair) and trust the caller to keep one folder per system. :func:`cache_key` is a
digest of what makes two transformers equal here (``==``: the artifact folder, the encoder's fingerprint, every
setting), stable across processes, so ``cache_folder("cache", index.retriever(colbert))`` gives the same folder
for an equal retriever tomorrow and another folder when a setting or the checkpoint changes. docs/fusion.md,
"Caching", has the example.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Union


def _identity(transformer: Any) -> Any:
    """What determines a transformer's output, as plain values with stable reprs: its ``_key()`` where it has one
    (the package's transformers), else its repr, together with the identities of the transformers it holds."""
    key = getattr(transformer, "_key", None)
    own = key() if callable(key) else repr(transformer)
    held = []
    subtransformers = getattr(transformer, "subtransformers", None)
    if callable(subtransformers):
        for name, value in sorted(subtransformers().items()):
            items = value if isinstance(value, (list, tuple)) else [value]
            held.append((name, [_identity(t) for t in items]))
    return (type(transformer).__module__, type(transformer).__qualname__, own, held)


def cache_key(transformer: Any) -> str:
    """A 16-hex-digit digest, equal for equal transformers (the package's ``==``) and stable across processes."""
    return hashlib.sha1(repr(_identity(transformer)).encode("utf-8")).hexdigest()[:16]


def cache_folder(root: Union[str, Path], transformer: Any) -> Path:
    """``root / "<Class>-<cache_key>"``: a folder for pyterrier-caching's caches of ``transformer``, e.g.
    ``RetrieverCache(cache_folder("cache", retriever), retriever)``."""
    return Path(root) / f"{type(transformer).__name__}-{cache_key(transformer)}"
