"""IVF with product-quantised residuals.

``ivfpq``     ``pq_m`` bytes per token at 8 bits: compact, approximate distances; candidates are rescored
              exactly from the stored vectors anyway.
``ivfpq-fs``  the same with 4-bit codes searched by FAISS's SIMD "fast-scan" kernels (``pq_m / 2`` bytes per
              token): coarser distances, searched ~10x faster. CPU only (FAISS has no GPU fast-scan).
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, cast

from .base import FaissSpec, register_kind
from .ivf import Ivf

if TYPE_CHECKING:  # pragma: no cover
    import faiss


class IvfPq(Ivf):
    """``IVF{nlist},PQ{pq_m}x{pq_bits}``: ``pq_m`` defaults to dim / 4 and ``pq_bits`` to 8 (fewer when there are
    too few training vectors for 256 centroids per sub-quantiser)."""

    name = "ivfpq"
    options = Ivf.options | {"pq_m", "pq_bits"}

    def resolve(self, spec: FaissSpec, num_tokens: int, dim: int) -> FaissSpec:
        spec = super().resolve(spec, num_tokens, dim)
        pq_m = spec.pq_m or max(1, dim // 4)
        if dim % pq_m:
            raise ValueError(f"pq_m={pq_m} must divide the vector dimension {dim}")
        pq_bits = self.pq_bits(spec)
        if 2 ** pq_bits > spec.train_size:
            raise ValueError(f"pq_bits={pq_bits} needs {2 ** pq_bits} training vectors, only {spec.train_size} "
                             "are used")
        return dataclasses.replace(spec, pq_m=pq_m, pq_bits=pq_bits)

    def pq_bits(self, spec: FaissSpec) -> int:
        """Bits per code for a spec whose ``train_size`` is resolved."""
        if spec.pq_bits:
            return spec.pq_bits
        if spec.train_size is None:
            raise ValueError(f"{spec!r}: pq_bits needs the training sample size (train_size) resolved first")
        return max(1, min(8, int(math.log2(max(2, spec.train_size // 39)))))

    def factory_string(self, spec: FaissSpec) -> str:
        return f"IVF{spec.nlist},PQ{spec.pq_m}x{spec.pq_bits}"

    def stem_extra(self, spec: FaissSpec) -> str:
        return f"-pq{spec.pq_m}x{spec.pq_bits}"

    def configure_training(self, index: "faiss.Index", spec: FaissSpec) -> None:
        ivfpq = cast("faiss.IndexIVFPQ", index)  # the factory string of this kind builds one
        ivfpq.pq.cp.niter, ivfpq.pq.cp.seed = spec.niter, spec.seed
        # on by default; slows training ~10x and is never used here (an attribute faiss's stubs lack)
        ivfpq.do_polysemous_training = False  # type: ignore[attr-defined]


class IvfPqFastScan(IvfPq):
    """``IVF{nlist},PQ{pq_m}x4fs``: 4-bit codes only, no GPU."""

    name = "ivfpq-fs"
    gpu = False

    def check(self, spec: FaissSpec) -> None:
        if spec.pq_bits not in (None, 4):
            raise ValueError(f"pq_bits={spec.pq_bits}; faiss={self.name!r} codes are 4 bits (use 'ivfpq' for others)")

    def pq_bits(self, spec: FaissSpec) -> int:
        return 4

    def factory_string(self, spec: FaissSpec) -> str:
        return super().factory_string(spec) + "fs"

    def configure_training(self, index: "faiss.Index", spec: FaissSpec) -> None:
        fast_scan = cast("faiss.IndexIVFPQFastScan", index)  # the factory string of this kind builds one
        fast_scan.pq.cp.niter, fast_scan.pq.cp.seed = spec.niter, spec.seed


register_kind(IvfPq())
register_kind(IvfPqFastScan())
