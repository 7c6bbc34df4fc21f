"""The residual formats ``residual1``, ``residual2``, ``residual4`` of a ColBERT index, in one place: each token
stored as a centroid id plus a packed residual of 1, 2 or 4 bits per dimension (PLAID's scheme).

* :mod:`.codec`     the codec: centroids, bucket cutoffs and weights; packing and decoding
* :mod:`.compress`  :class:`~.compress.CompressionSpec`, the formats' files, building them from an fp16 spill
* :mod:`.store`     :class:`~.store.ResidualStore` (the formats' store) and its writer part
* :mod:`.search`    PLAID-style centroid-pruned search over the codes (:class:`~.search.CentroidRetriever`)

What every format shares (metadata, offsets, docnos, writing, integrity) is in ``index/`` itself.
"""
