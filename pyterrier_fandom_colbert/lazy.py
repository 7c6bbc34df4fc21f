"""Things loaded on first use: module attributes (PEP 562), so importing a package stays cheap, and the
``functools.cached_property`` values of an object reading files, which :func:`forget_cached` drops again."""
from functools import cached_property
from importlib import import_module
from typing import Any, Callable, Dict, List, Tuple


def lazy_attributes(package: str, names: Dict[str, str],
                    namespace: Dict[str, Any]) -> Tuple[Callable[[str], Any], Callable[[], List[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` where ``names`` maps a public name to its submodule."""

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(import_module(f".{names[name]}", package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> List[str]:
        return sorted(list(namespace) + list(names))

    return __getattr__, __dir__


def forget_cached(obj: Any) -> None:
    """Drop every computed ``cached_property`` of ``obj`` (closing values that have ``close``), so the next access
    reads it again: the one way the package's artifacts forget what they loaded (e.g. after a rebuild).

    >>> class Reader:
    ...     reads = 0
    ...     @cached_property
    ...     def data(self):
    ...         Reader.reads += 1
    ...         return [Reader.reads]
    >>> r = Reader()
    >>> r.data, r.data
    ([1], [1])
    >>> forget_cached(r)
    >>> r.data
    [2]
    """
    names = {name for klass in type(obj).__mro__ for name, value in vars(klass).items()
             if isinstance(value, cached_property)}
    for name in names:
        if name in obj.__dict__:
            value = obj.__dict__.pop(name)
            close = getattr(value, "close", None)
            if callable(close):
                close()
    obj.__dict__.pop("_pfc_content_key", None)  # frames.artifact_key's: the content it named is gone too
