"""The storage formats of a ColBERT index, one folder each with a store behind :class:`~.store.IndexStore`:
``fp16`` (:mod:`.fp16`) and ``residual1|2|4`` (:mod:`.residual`). The index picks its store once from
``pt_meta.json``'s ``format`` (:func:`store_class`); a new format is one folder whose ``store.py`` defines a store,
added to :data:`STORES` and to ``layout.FORMATS`` (and to the ``pt.Artifact`` entry points in pyproject.toml).
"""
from __future__ import annotations

import inspect
from functools import cache
from typing import Any, Dict, Mapping, Tuple, Type

from .fp16.store import Fp16Store
from .residual.store import ResidualStore
from .store import IndexStore, StoreWriter

#: store class by format name
STORES: Dict[str, Type[IndexStore]] = {fmt: store for store in (Fp16Store, ResidualStore) for fmt in store.FORMATS}


def store_class(fmt: str) -> Type[IndexStore]:
    """The store of format ``fmt``; a ValueError names the known formats."""
    if fmt not in STORES:
        raise ValueError(f"format={fmt!r}: not a ColBERT index format; expected one of {tuple(STORES)}")
    return STORES[fmt]


@cache
def retriever_parameters(store: Type[IndexStore]) -> Tuple[str, ...]:
    """The keyword parameters of ``store``'s retriever factory, in order (read once per class)."""
    return tuple(name for name in inspect.signature(store.retriever).parameters if name != "self")


def check_retriever_options(store: IndexStore, options: Mapping[str, Any]) -> None:
    """Refuse ``options`` that ``store``'s retriever does not take with a TypeError naming each, the formats
    that take it, and what this index takes instead (what Python's own error for an unknown keyword lacks)."""
    own = retriever_parameters(type(store))
    wrong = [name for name in options if name not in own]
    if not wrong:
        return
    owners = {kind: [name for name in wrong if name in retriever_parameters(other)]
              for kind, other in {s.KIND: s for s in STORES.values() if not isinstance(store, s)}.items()}
    parts = [f"{', '.join(f'{n}={options[n]!r}' for n in names)} apply only to {kind}"
             for kind, names in owners.items() if names]
    unknown = [name for name in wrong if not any(name in names for names in owners.values())]
    if unknown:
        parts.append(f"{', '.join(f'{n}={options[n]!r}' for n in unknown)} "
                     f"{'is not a parameter' if len(unknown) == 1 else 'are not parameters'} of any retriever")
    raise TypeError(f"{'; '.join(parts)}; the index at {store.path} {store.describe()} "
                    f"({', '.join(own)})")


__all__ = ["STORES", "Fp16Store", "IndexStore", "ResidualStore", "StoreWriter", "check_retriever_options",
           "retriever_parameters", "store_class"]
