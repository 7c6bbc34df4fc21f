"""pyterrier-fandom-colbert: ColBERT late-interaction retrieval, TF-IDF and FANDOM-QA for PyTerrier.

Importing the package is cheap (torch, transformers and faiss load on first use) and registers the
``fandom-qa/...`` datasets with ir_datasets, so ``pt.get_dataset('irds:fandom-qa/sample/test')`` works.
"""
from .data.irds import register as _register_datasets
from .lazy import lazy_attributes
from .model.config import ColBERTConfig

__version__ = "0.1.0"

# public name -> module that defines it (imported on first access)
_LAZY = {
    "ColBERT": "model.colbert",
    "TfidfIndex": "lexical.tfidf",
    "TfidfConfig": "lexical.tfidf",
    "ColBERTIndex": "index.artifact",
    "ShardedColBERTIndex": "index.sharded.artifact",
    "ShardedIndexer": "distributed.build",
    "RayShardedRetriever": "distributed.search",
    "FaissSpec": "index.ann",
    "Explainer": "explain.transformer",
    "Reader": "reader.transformer",
    "Splade": "sparse.encoder",
    "SparseIndex": "sparse.index",
    "LinearFusion": "fusion",
    "RRF": "fusion",
    "Hybrid": "fusion",
    "Normalise": "fusion",
    "tune_fusion": "fusion",
    "Experiment": "fusion",
    "share_inputs": "fusion",
    "cache_folder": "caching",
    "RetrieverCache": "caching",
    "BM25": "sparse.bm25",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())


_register_datasets()

__all__ = ["ColBERTConfig", "__version__", *_LAZY]
