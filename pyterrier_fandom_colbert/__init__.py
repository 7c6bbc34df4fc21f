"""pyterrier-fandom-colbert: ColBERT late-interaction retrieval, TF-IDF and FANDOM-QA for PyTerrier.

Importing the package is cheap (torch, transformers and faiss load on first use) and registers the
``fandom-qa/...`` datasets with ir_datasets, so ``pt.get_dataset('irds:fandom-qa/sample/test')`` works.
"""
from importlib import import_module
from typing import Any

from .config import ColBERTConfig

__version__ = "0.1.0"

# public name -> module that defines it (imported on first access)
_LAZY = {
    "ColBERT": "colbert",
    "TfidfIndex": "tfidf",
    "ColBERTIndex": "index",
    "Explainer": "explainer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))


def _register_datasets() -> None:
    try:
        from .irds import register
    except ModuleNotFoundError as err:  # only while the datasets module is not there at all
        if err.name != f"{__name__}.irds":
            raise
        return
    register()


_register_datasets()

__all__ = ["ColBERTConfig", "__version__", *_LAZY]
