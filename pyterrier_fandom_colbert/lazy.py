"""Module attributes imported on first use, so importing a package stays cheap (PEP 562)."""
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
