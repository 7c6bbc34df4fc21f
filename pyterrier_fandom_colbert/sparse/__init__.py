"""Learned sparse retrieval (SPLADE) and two ways to score fewer documents, next to PISA's dynamic pruning.

* :mod:`.maths`   pure maths: SPLADE pooling, sparse rows
* :mod:`.encoder` :class:`Splade` and its query/document encoders (``query_toks``/``toks`` columns)
* :mod:`.index`   :class:`SparseIndex` (an artifact) with exact, exhaustive scoring: the reference
* :mod:`.topics`  the topic filter (k-means topic model, thresholds or top-k, topic weighting)
* :mod:`.tree`    the binary tree of max-aggregated term weights (unsorted or clustered splits, beam descent)
* :mod:`.pisa`    PISA through pyterrier-pisa (MaxScore, block-max WAND)

See docs/sparse.md.
"""
from ..lazy import lazy_attributes

_LAZY = {
    "Splade": "encoder",
    "SpladeConfig": "encoder",
    "SparseIndex": "index",
    "TopicModel": "topics",
    "TopicConfig": "topics",
    "BinaryTree": "tree",
    "TreeConfig": "tree",
    "build_pisa_index": "pisa",
    "pisa_retriever": "pisa",
}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())

__all__ = list(_LAZY)
