"""The ``fp16`` format of a ColBERT index, in one place: every token vector stored as float16 (``vectors.f16``).

* :mod:`.store`   :class:`~.store.Fp16Store` (the format's store) and its writer part
* :mod:`.search`  end-to-end retrieval by token neighbours and exact MaxSim (:class:`~.search.ColBERTRetriever`)

Its neighbour indexes (exact, IVF, IVF-PQ) are in ``index/ann/``; what every format shares (metadata, offsets,
docnos, writing, integrity, re-ranking from stored vectors) is in ``index/`` itself.
"""
