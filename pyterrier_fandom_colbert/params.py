"""PyTerrier's parameter protocol (``get_parameter``/``set_parameter``, as ``pt.GridSearch`` and ``pt.GridScan``
use them) for every transformer of the package, from one rule: a parameter is a constructor argument.

``set_parameter(name, value)`` rebuilds the transformer through its constructor with that one argument changed
and takes over the rebuilt object's state, so the value is validated exactly as the constructor validates it,
everything derived from it (a fusion's weights, a retriever's neighbour count, a frozen options dataclass) follows,
and the transformer's output, equality and repr all change together. A value the constructor refuses leaves the
transformer as it was.

Why not PyTerrier's default ``set_parameter`` (``setattr(self, name, value)``): it would set the one attribute
and leave whatever the constructor derived from it (checked values, frozen options, cached properties) stale, so
the transformer's output, equality and repr would disagree. Taking over the rebuilt object's whole ``__dict__``
is what makes them agree; the object keeps its identity (a pipeline that holds it sees the change, as
``pt.GridSearch`` needs). Attributes set on the object from outside its constructor do not survive a change.

The rank cutoff ``transformer % k`` keeps PyTerrier's meaning exactly: ``super().__mod__(k)``, i.e.
``transformer >> RankCutoff(k)`` (``pyterrier._ops``), fused into the transformer by PyTerrier's own
``fuse_rank_cutoff`` protocol. Only ``k`` is checked first: a positive integer, refused by name otherwise
(PyTerrier's operator lets ``% 0`` return nothing and ``% True`` keep one document per query).
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
