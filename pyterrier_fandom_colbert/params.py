"""PyTerrier's parameter protocol (``get_parameter``/``set_parameter``, as ``pt.GridSearch`` and ``pt.GridScan``
use them) for every transformer of the package, from one rule: a parameter is a constructor argument.

``set_parameter(name, value)`` rebuilds the transformer through its constructor with that one argument changed
and takes over the rebuilt object's state, so the value is validated exactly as the constructor validates it,
everything derived from it (a fusion's weights, a retriever's neighbour count, a frozen options dataclass) follows,
and the transformer's output, equality and repr all change together. A value the constructor refuses leaves the
transformer as it was.

The rank cutoff ``transformer % k`` is checked the same way: ``k`` is a positive integer, refused by name
otherwise (PyTerrier's own operator lets ``% 0`` return nothing and ``% True`` keep one document per query).
"""
from __future__ import annotations

from typing import Any, Dict, TypeVar

T = TypeVar("T", bound="Parameters")


class Parameters:
    """Mixin: ``get_parameter``/``set_parameter``/``replace`` from :meth:`_constructor_args`, and a checked rank
    cutoff ``%``. Put it before ``pt.Transformer`` in the bases."""

    def _constructor_args(self) -> Dict[str, Any]:
        """Every constructor argument, by name, with the value that rebuilds this transformer as it is."""
        raise NotImplementedError

    def _check_name(self, name: str) -> Dict[str, Any]:
        args = self._constructor_args()
        if name not in args:
            raise ValueError(f"{type(self).__name__} has no parameter {name!r}; its parameters are "
                             f"{', '.join(sorted(args))}")
        return args

    def get_parameter(self, name: str) -> Any:
        """The current value of the constructor argument ``name``."""
        return self._check_name(name)[name]

    def replace(self: T, **changes: Any) -> T:
        """A new transformer like this one with some constructor arguments changed (validated as by the
        constructor); this one is left unchanged."""
        args = dict(self._constructor_args())
        for name in changes:
            self._check_name(name)
        args.update(changes)
        return type(self)(**args)

    def set_parameter(self, name: str, value: Any) -> "Parameters":
        """Change the constructor argument ``name`` to ``value`` in place (``pt.GridSearch`` calls this)."""
        rebuilt = self.replace(**{name: value})
        state = vars(self)
        state.clear()
        state.update(vars(rebuilt))
        return self

    def __mod__(self, k: Any) -> Any:
        """``self % k``: the top ``k`` per query (PyTerrier's rank cutoff), ``k`` a positive integer."""
        from .checks import positive_int

        k = positive_int("k", k, what="the rank cutoff % k keeps the top k results per query")
        return super().__mod__(k)  # type: ignore[misc]
