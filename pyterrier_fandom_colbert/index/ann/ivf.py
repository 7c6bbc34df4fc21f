"""``ivf``: inverted lists over k-means centroids, vectors kept as fp16 (exact distances inside the lists probed).

The base of the IVF kinds (see ivfpq.py): ``nlist`` lists trained on a sample of ``train_size`` vectors,
``nprobe`` of them visited per query vector, cached in the index folder as ``faiss/<stem>.faiss``.
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Optional, cast

import numpy as np

from .base import AnnKind, FaissSpec, as_search_vectors, register_kind

if TYPE_CHECKING:  # pragma: no cover
    import faiss

#: inverted lists probed when the user does not say (FAISS' own default, 1, misses most neighbours)
DEFAULT_NPROBE = 32


class Ivf(AnnKind):
    """``IVF{nlist},SQfp16``."""

    name = "ivf"
    options = frozenset({"nlist", "train_size", "nprobe", "refine"})
    gpu = True
    default_nprobe = DEFAULT_NPROBE

    def resolve(self, spec: FaissSpec, num_tokens: int, dim: int) -> FaissSpec:
        nlist = spec.nlist or max(1, min(2 ** round(math.log2(math.sqrt(num_tokens))), num_tokens // 39))
        train = min(num_tokens, spec.train_size or 64 * nlist)
        if train < nlist:
            raise ValueError(f"nlist={nlist} needs at least {nlist} training vectors, but only {train} are used "
                             f"(index has {num_tokens} tokens); lower nlist or raise train_size")
        return dataclasses.replace(spec, nlist=nlist, train_size=train)

    def factory_string(self, spec: FaissSpec) -> str:
        return f"IVF{spec.nlist},SQfp16"

    def file_stem(self, spec: FaissSpec) -> Optional[str]:
        return (f"{self.name}-nlist{spec.nlist}{self.stem_extra(spec)}-train{spec.train_size}-iter{spec.niter}"
                f"-seed{spec.seed}")

    def stem_extra(self, spec: FaissSpec) -> str:
        """Build parameters of subclasses, in the cache file name after ``nlist``."""
        return ""

    def train(self, index: "faiss.Index", vectors: np.ndarray, spec: FaissSpec, normalise: bool,
              verbose: bool) -> None:
        rng = np.random.default_rng(spec.seed)
        rows = np.sort(rng.choice(len(vectors), size=spec.train_size, replace=False))
        ivf = cast("faiss.IndexIVF", index)  # the factory string of an IVF kind builds one
        ivf.cp.niter, ivf.cp.seed, ivf.cp.verbose = spec.niter, spec.seed, verbose
        self.configure_training(index, spec)
        index.train(as_search_vectors(vectors[rows], normalise))

    def configure_training(self, index: "faiss.Index", spec: FaissSpec) -> None:
        """Training settings of subclasses beyond the coarse k-means."""

    def search(self, index: "faiss.Index", queries: np.ndarray, k: int, nprobe: Optional[int] = None) -> np.ndarray:
        import faiss

        if nprobe is None:
            _, ids = index.search(queries, k)
        else:
            params = faiss.SearchParametersIVF()
            params.nprobe = nprobe
            _, ids = index.search(queries, k, params=params)
        return ids


register_kind(Ivf())
