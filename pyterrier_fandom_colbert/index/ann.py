"""FAISS nearest-neighbour indexes over a ColBERT index's token vectors: what to build, building, caching, search.

Three kinds, chosen by the user:

``flat``   exact search, not FAISS: :class:`ExactSearch` multiplies the query vectors with the stored fp16 vectors
           a block at a time in torch (no copy of the vectors in RAM, nothing written). FAISS's own flat index
           switches to BLAS only from ~1,000 query vectors at d = 128 (faiss ≥ 1.15); a query's 32 vectors
           took its sequential kernel, 4x slower than scoring every document exactly.
``ivf``    inverted lists over k-means centroids, vectors kept as fp16 (exact distances inside the probed lists).
``ivfpq``  inverted lists with product-quantised residuals (``pq_m`` bytes per token at 8 bits): compact, and
           approximate distances; candidates are rescored exactly from the stored vectors anyway.
``ivfpq-fs`` the same with 4-bit codes searched by FAISS's SIMD "fast-scan" kernels (``pq_m / 2`` bytes per
           token): coarser distances, searched ~10x faster. CPU only (FAISS has no GPU fast-scan).

Trained kinds are cached in the index folder as ``faiss/<name>.faiss`` with their parameters in
``faiss/<name>.json`` (written to temporary files and renamed, so an interrupted build leaves no cache).
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, Optional, Tuple

import numpy as np

from ..progress import progress

if TYPE_CHECKING:  # pragma: no cover
    import faiss
    import torch

KINDS = ("flat", "ivf", "ivfpq", "ivfpq-fs")
CACHE_DIR = "faiss"
#: vectors converted to float32 at once while training/adding (bounds memory to ~32 MB at d = 128)
ADD_CHUNK = 65536
#: inverted lists probed when the user does not say (FAISS' own default, 1, misses most neighbours)
DEFAULT_NPROBE = 32


@dataclass(frozen=True)
class FaissSpec:
    """How to build the token-vector FAISS index. ``None`` fields are filled from the index size by :meth:`resolve`.

    >>> FaissSpec("ivf").resolve(num_tokens=1_000_000, dim=128)
    FaissSpec(kind='ivf', nlist=1024, pq_m=None, pq_bits=None, train_size=65536, niter=10, seed=0)
    >>> FaissSpec("ivfpq").resolve(num_tokens=2_000, dim=16).factory_string()
    'IVF32,PQ4x5'
    >>> FaissSpec("ivfpq-fs").resolve(num_tokens=2_000, dim=16).factory_string()
    'IVF32,PQ4x4fs'
    >>> FaissSpec("hnsw")
    Traceback (most recent call last):
    ...
    ValueError: faiss='hnsw' is not supported; expected one of ('flat', 'ivf', 'ivfpq', 'ivfpq-fs')
    """

    kind: str = "flat"
    #: number of inverted lists (None: the power of two nearest sqrt(tokens), at most tokens / 39)
    nlist: Optional[int] = None
    #: product-quantiser sub-vectors for ``ivfpq`` / ``ivfpq-fs`` (None: dim / 4); must divide dim
    pq_m: Optional[int] = None
    #: bits per sub-vector code for ``ivfpq`` (None: 8, fewer when there are too few tokens to train 256 centroids)
    pq_bits: Optional[int] = None
    #: token vectors sampled to train the quantisers (None: 64 per list, at most all tokens)
    train_size: Optional[int] = None
    #: k-means iterations
    niter: int = 10
    #: seed of the training sample and k-means
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"faiss={self.kind!r} is not supported; expected one of {KINDS}")
        for name in ("nlist", "pq_m", "pq_bits", "train_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name}={value}; expected a positive integer or None")
        if not self.kind.startswith("ivfpq") and self.pq_m is not None:
            raise ValueError(f"pq_m applies only to faiss='ivfpq' or 'ivfpq-fs', not {self.kind!r}")
        if self.pq_bits is not None and not (self.kind == "ivfpq" or (self.kind == "ivfpq-fs" and self.pq_bits == 4)):
            raise ValueError(f"pq_bits applies only to faiss='ivfpq' ('ivfpq-fs' codes are 4 bits), not {self.kind!r}")
        if self.kind == "flat" and (self.nlist is not None or self.train_size is not None):
            raise ValueError("nlist / train_size apply only to the trained kinds ('ivf', 'ivfpq', 'ivfpq-fs'), "
                             "not 'flat'")

    @property
    def trained(self) -> bool:
        return self.kind != "flat"

    def resolve(self, num_tokens: int, dim: int) -> "FaissSpec":
        """This spec with every ``None`` filled in for an index of ``num_tokens`` vectors of ``dim`` dimensions."""
        if not self.trained:
            return self
        nlist = self.nlist or max(1, min(2 ** round(math.log2(math.sqrt(num_tokens))), num_tokens // 39))
        train = min(num_tokens, self.train_size or 64 * nlist)
        if train < nlist:
            raise ValueError(f"nlist={nlist} needs at least {nlist} training vectors, but only {train} are used "
                             f"(index has {num_tokens} tokens); lower nlist or raise train_size")
        pq_m, pq_bits = None, None
        if self.kind.startswith("ivfpq"):
            pq_m = self.pq_m or max(1, dim // 4)
            if dim % pq_m:
                raise ValueError(f"pq_m={pq_m} must divide the vector dimension {dim}")
            pq_bits = 4 if self.kind == "ivfpq-fs" else self.pq_bits or max(1, min(8, int(math.log2(max(2, train // 39)))))
            if 2 ** pq_bits > train:
                raise ValueError(f"pq_bits={pq_bits} needs {2 ** pq_bits} training vectors, only {train} are used")
        return dataclasses.replace(self, nlist=nlist, pq_m=pq_m, pq_bits=pq_bits, train_size=train)

    def factory_string(self) -> str:
        """The ``faiss.index_factory`` description of a resolved spec."""
        if self.kind == "flat":
            return "Flat"
        if self.kind == "ivf":
            return f"IVF{self.nlist},SQfp16"
        fast_scan = "fs" if self.kind == "ivfpq-fs" else ""
        return f"IVF{self.nlist},PQ{self.pq_m}x{self.pq_bits}{fast_scan}"

    def file_stem(self) -> str:
        """Cache file name of a resolved spec: every build parameter is in it, so specs never share a file."""
        pq = f"-pq{self.pq_m}x{self.pq_bits}" if self.kind.startswith("ivfpq") else ""
        return f"{self.kind}-nlist{self.nlist}{pq}-train{self.train_size}-iter{self.niter}-seed{self.seed}"

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def metric_for(similarity: str) -> Tuple[int, bool]:
    """(FAISS metric, whether vectors are unit-normalised first) giving the same neighbours as ``similarity``.

    Cosine and negated squared L2 of unit vectors (= 2·cos − 2) both rank by the inner product of unit vectors.
    """
    import faiss

    if similarity in ("cosine", "l2_normalised"):
        return faiss.METRIC_INNER_PRODUCT, True
    if similarity == "l2":
        return faiss.METRIC_L2, False
    raise ValueError(f"similarity={similarity!r} has no FAISS metric; expected cosine, l2 or l2_normalised")


def as_search_vectors(x: np.ndarray, normalise: bool) -> np.ndarray:
    """Contiguous float32 rows, unit-normalised if asked (zero rows stay zero).

    >>> as_search_vectors(np.array([[3., 4.], [0., 0.]], dtype=np.float16), True).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    out = np.array(x, dtype=np.float32, order="C", copy=True)
    if normalise:
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
    return out


def _chunks(vectors: np.ndarray, normalise: bool, verbose: bool, desc: str) -> Iterator[np.ndarray]:
    bar = progress(total=len(vectors), desc=desc, unit="tok", enabled=verbose)
    try:
        for start in range(0, len(vectors), ADD_CHUNK):
            block = as_search_vectors(vectors[start:start + ADD_CHUNK], normalise)
            yield block
            bar.update(len(block))
    finally:
        bar.close()


class ExactSearch:
    """Exact nearest stored tokens by the model's similarity: the ``flat`` kind, with FAISS's call shape
    (``search(queries, k) -> (similarities, row ids)``, ``ntotal``).

    ``vectors [T, d]`` (e.g. the fp16 memory map) are read ``block_rows`` at a time into a reused float32
    buffer; each block's best ``k`` are merged into the running best. Ties may come in any order.

    >>> flat = ExactSearch(np.array([[1., 0.], [0., 1.], [0.6, 0.8]], dtype=np.float16), "cosine", block_rows=2)
    >>> sims, ids = flat.search(np.array([[0., 1.]], dtype=np.float32), 2)
    >>> ids.tolist(), sims.astype(np.float64).round(3).tolist()
    ([[1, 2]], [[1.0, 0.8]])
    """

    def __init__(self, vectors: np.ndarray, similarity: str, block_rows: int = 65536):
        metric_for(similarity)  # a similarity FAISS kinds would accept too
        self.vectors, self.similarity, self.block_rows = vectors, similarity, block_rows

    @property
    def ntotal(self) -> int:
        return len(self.vectors)

    def search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        import torch

        from ..model.scoring import similarity_matrix

        q = torch.as_tensor(np.ascontiguousarray(queries, dtype=np.float32))
        best = torch.empty(len(q), 0)
        best_ids = torch.empty(len(q), 0, dtype=torch.long)
        rows = min(self.block_rows, self.ntotal)
        raw = torch.from_numpy(np.empty((rows, self.vectors.shape[1]), dtype=self.vectors.dtype))
        block = torch.empty(raw.shape, dtype=torch.float32)
        for start in range(0, self.ntotal, rows):
            n = min(rows, self.ntotal - start)
            raw.numpy()[:n] = self.vectors[start:start + n]
            block[:n].copy_(raw[:n])
            sims = similarity_matrix(q, block[:n], self.similarity)
            values, ids = sims.topk(min(k, n), dim=1)
            best, where = torch.cat([best, values], 1).topk(min(k, best.shape[1] + values.shape[1]), dim=1)
            best_ids = torch.cat([best_ids, ids + start], 1).gather(1, where)
        return best.numpy(), best_ids.numpy()


def build(vectors: np.ndarray, spec: FaissSpec, similarity: str, verbose: bool = False) -> "faiss.Index":
    """A FAISS index over ``vectors [T, d]`` (any float dtype, e.g. a fp16 memmap) for a *resolved* ``spec``.

    Row ``i`` of ``vectors`` gets FAISS id ``i``. Only one chunk of vectors is converted to float32 at a time
    (plus the training sample for trained kinds).
    """
    import faiss

    metric, normalise = metric_for(similarity)
    index = faiss.index_factory(vectors.shape[1], spec.factory_string(), metric)
    if spec.trained:
        rng = np.random.default_rng(spec.seed)
        rows = np.sort(rng.choice(len(vectors), size=spec.train_size, replace=False))
        index.cp.niter, index.cp.seed, index.cp.verbose = spec.niter, spec.seed, verbose
        if spec.kind.startswith("ivfpq"):
            index.pq.cp.niter, index.pq.cp.seed = spec.niter, spec.seed
        if spec.kind == "ivfpq":
            index.do_polysemous_training = False  # on by default; slows training ~10x and is never used here
        index.train(as_search_vectors(vectors[rows], normalise))
    for block in _chunks(vectors, normalise, verbose, f"adding tokens to FAISS {spec.factory_string()}"):
        index.add(block)
    return index


def load_or_build(folder: Path, vectors: np.ndarray, spec: FaissSpec, similarity: str,
                  verbose: bool = False) -> "faiss.Index":
    """The index for a resolved ``spec``: read from ``folder/faiss/`` if cached there, else built (and cached
    if the kind is trained)."""
    import faiss

    if not spec.trained:
        return ExactSearch(vectors, similarity)
    cache = Path(folder) / CACHE_DIR
    target = cache / f"{spec.file_stem()}.faiss"
    if target.exists():
        return faiss.read_index(str(target))
    started = time.perf_counter()
    index = build(vectors, spec, similarity, verbose)
    params = {"spec": spec.to_dict(), "factory": spec.factory_string(), "similarity": similarity,
              "num_tokens": int(index.ntotal), "build_seconds": round(time.perf_counter() - started, 3),
              "faiss_version": faiss.__version__}
    cache.mkdir(exist_ok=True)
    _write_atomic(cache / f"{spec.file_stem()}.json", lambda p: p.write_text(json.dumps(params, indent=2)))
    _write_atomic(target, lambda p: faiss.write_index(index, str(p)))
    return index


def _write_atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def to_gpu_if_available(index: "faiss.Index") -> "faiss.Index":
    """A copy of ``index`` on GPU 0 when FAISS was built with GPU support and sees a GPU; else ``index`` itself."""
    import faiss

    if (isinstance(index, (ExactSearch, faiss.IndexIVFPQFastScan)) or not hasattr(faiss, "StandardGpuResources")
            or faiss.get_num_gpus() == 0):
        return index
    resources = faiss.StandardGpuResources()
    gpu_index = faiss.index_cpu_to_gpu(resources, 0, index)
    gpu_index.referenced_resources = resources  # keep the resources alive as long as the index
    return gpu_index


def search(index: "faiss.Index", queries: np.ndarray, k: int, nprobe: Optional[int] = None) -> np.ndarray:
    """Row ids ``[n, k]`` (int64; -1 where fewer than ``k`` exist) of each query vector's ``k`` nearest tokens.

    ``queries`` must already be prepared with :func:`as_search_vectors`.
    """
    import faiss

    if nprobe is None:
        _, ids = index.search(queries, k)
    else:
        _, ids = index.search(queries, k, params=faiss.SearchParametersIVF(nprobe=nprobe))
    return ids


def refine(vectors: "torch.Tensor", queries: np.ndarray, ids: np.ndarray, k: int, similarity: str) -> np.ndarray:
    """Of each query vector's candidate rows ``ids [n, K]`` (-1: none), the ``k`` most similar by the exact
    ``similarity`` to the stored ``vectors`` (e.g. the fp16 memory map as a tensor): ``[n, min(k, K)]``, -1 where
    fewer than ``k`` candidates exist, in no particular order. FAISS's compressed distances then only need to
    put the true neighbours somewhere in a longer list.

    >>> import torch
    >>> stored = torch.tensor([[1., 0.], [0.6, 0.8], [0., 1.]], dtype=torch.float16)
    >>> sorted(refine(stored, np.array([[0., 1.]], dtype=np.float32), np.array([[0, 2, -1, 1]]), 2, "cosine")[0].tolist())
    [1, 2]
    >>> refine(stored, np.array([[1., 0.]], dtype=np.float32), np.array([[2, -1, -1]]), 2, "cosine").tolist()
    [[2, -1]]
    """
    import torch

    from ..model.scoring import similarity_matrix

    ids = torch.as_tensor(ids, dtype=torch.long)
    k = min(k, ids.shape[1])
    if k == ids.shape[1]:
        return ids.numpy()
    rows = vectors.index_select(0, ids.clamp_min(0).reshape(-1)).view(*ids.shape, -1).float()  # [n, K, d]
    sims = similarity_matrix(torch.as_tensor(queries).unsqueeze(1), rows, similarity).squeeze(1)  # [n, K]
    sims.masked_fill_(ids < 0, float("-inf"))
    best, where = sims.topk(k, dim=1)
    return ids.gather(1, where).masked_fill_(best == float("-inf"), -1).numpy()
