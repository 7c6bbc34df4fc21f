"""Residual compression of token vectors: a centroid id plus a few bits per dimension.

A token vector ``x`` is stored as the id ``c`` of its nearest centroid (k-means over a sample of the corpus's
vectors) and, for every dimension ``j``, the bucket ``b_j`` (``nbits`` bits) into which its residual
``x_j − centroid[c]_j`` falls. Decompression is exact and cheap: ``centroid[c]_j + weight[j, b_j]``.

The scheme follows PLAID (Santhanam et al., 2022, "PLAID: an efficient engine for late interaction retrieval")
with one change: bucket cutoffs and reconstruction weights are fitted *per dimension* (PLAID fits one set for
all dimensions), cutoffs at the residuals' quantiles (equal-mass buckets) and weights at each bucket's mean
residual (the least-squares value for those cutoffs). Storage per token is ``dim · nbits / 8`` bytes of residual
codes plus the centroid id (2 bytes up to 65,536 centroids): 34 bytes at 2 bits and ``dim = 128``.

Bits are packed little-endian within a byte: dimension ``j`` lives in byte ``j // (8 / nbits)`` at bit offset
``nbits · (j % (8 / nbits))``.

Everything here is a pure function over arrays (numpy; the bulk paths also in torch), independent of the index
files (see compress.py for those).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional, Tuple

import numpy as np

from ...checks import positive_int, real_in_range

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: bits per dimension the codec supports (whole codes per byte)
SUPPORTED_BITS = (1, 2, 4)
#: the most rows assigned to centroids per matrix product (a [block, C] float32 score matrix)
ASSIGN_BLOCK = 4096
#: the fewest rows per product, whatever the number of centroids
MIN_ASSIGN_BLOCK = 256
#: bytes of one block's score matrix: the block shrinks as the centroids grow, so the memory it takes stays flat
ASSIGN_BYTES = 64 << 20


def assign_block(num_centroids: int) -> int:
    """Rows per product in :func:`nearest_centroids` for ``num_centroids``: as many as fit a score matrix of
    :data:`ASSIGN_BYTES`, between :data:`MIN_ASSIGN_BLOCK` and :data:`ASSIGN_BLOCK`.

    >>> [assign_block(c) for c in (1024, 4096, 8192, 32768, 65536)]
    [4096, 4096, 2048, 512, 256]
    """
    return max(MIN_ASSIGN_BLOCK, min(ASSIGN_BLOCK, ASSIGN_BYTES // (4 * max(1, num_centroids))))


def check_nbits(nbits: int, dim: int) -> None:
    """Refuse bit widths the codec cannot pack, naming the value.

    >>> check_nbits(3, 128)
    Traceback (most recent call last):
    ...
    ValueError: nbits=3; expected one of (1, 2, 4) bits per dimension
    >>> check_nbits(1, 12)
    Traceback (most recent call last):
    ...
    ValueError: dim=12 is not a multiple of 8: 1-bit codes pack 8 dimensions per byte
    """
    if nbits not in SUPPORTED_BITS or isinstance(nbits, bool):
        raise ValueError(f"nbits={nbits!r}; expected one of {SUPPORTED_BITS} bits per dimension")
    per_byte = 8 // nbits
    if dim % per_byte:
        raise ValueError(f"dim={dim} is not a multiple of {per_byte}: {nbits}-bit codes pack {per_byte} dimensions "
                         "per byte")


def check_exact_share(share: Any) -> float:
    """``share`` if it is a share of tokens in ``[0, 1)``, else a ValueError naming it.

    >>> check_exact_share(0.01)
    0.01
    >>> check_exact_share(-0.5)
    Traceback (most recent call last):
    ...
    ValueError: exact_share=-0.5; expected a share of the tokens in [0, 1) (stored exactly as well as coded)
    """
    what = "a share of the tokens in [0, 1) (stored exactly as well as coded)"
    try:
        real_in_range("exact_share", share, 0.0, what=what)
    except ValueError:
        raise ValueError(f"exact_share={share!r}; expected {what}") from None
    if not share < 1:
        raise ValueError(f"exact_share={share!r}; expected {what}")
    return float(share)


def check_exact_share_of(fmt: str, share: Any) -> float:
    """:func:`check_exact_share`, and a share above 0 refused for ``fmt`` ``'fp16'``, which stores every vector
    exactly already.

    >>> check_exact_share_of("fp16", 0.01)
    Traceback (most recent call last):
    ...
    ValueError: exact_share=0.01 needs a residual format; compression='fp16' stores every vector exactly already
    """
    share = check_exact_share(share)
    if share and fmt == "fp16":
        raise ValueError(f"exact_share={share} needs a residual format; compression={fmt!r} stores every vector "
                         "exactly already")
    return share


def default_num_centroids(num_tokens: int) -> int:
    """Centroids for a corpus of ``num_tokens`` vectors: the power of two nearest ``4 · sqrt(num_tokens)``, at
    most ``num_tokens`` (every centroid needs a vector) and at most 65,536 (2-byte ids).

    >>> default_num_centroids(1_000_000), default_num_centroids(917_533), default_num_centroids(10), \
default_num_centroids(10**10)
    (4096, 4096, 10, 65536)
    """
    positive_int("num_tokens", num_tokens, what="a codec needs at least one vector to train on")
    nearest = 2 ** round(math.log2(4 * math.sqrt(num_tokens)))
    return int(max(1, min(nearest, num_tokens, 1 << 16)))


def code_dtype(num_centroids: int) -> np.dtype:
    """Smallest unsigned dtype holding centroid ids below ``num_centroids``.

    >>> code_dtype(65536), code_dtype(65537)
    (dtype('uint16'), dtype('int32'))
    """
    return np.dtype(np.uint16) if num_centroids <= 1 << 16 else np.dtype(np.int32)


def train_centroids(sample: np.ndarray, num_centroids: int, *, niter: int = 4, seed: int = 0,
                    spherical: bool = True, rows: Optional[np.ndarray] = None) -> np.ndarray:
    """k-means centroids ``[num_centroids, d]`` float32 of ``sample [n, d]`` (unit length when ``spherical``),
    rounded to float16 precision, which is how they are stored. ``rows`` (ascending): train on those rows of
    ``sample`` only, as if on ``sample[rows]``; the sample (float16 or float32) is read block by block as float32,
    never copied whole.

    Lloyd's rounds as FAISS's k-means runs them: a seeded start at ``num_centroids`` distinct sample rows, then
    ``niter`` rounds of assignment to the nearest centroid and update to the mean (:func:`update_centroids`),
    normalised when ``spherical``. The assignment is :func:`nearest_centroids`, the index's own: on a 2-core CPU
    it runs 3.5x faster than FAISS's flat search, which FAISS's k-means spends nearly all its time in.

    >>> rng = np.random.default_rng(0)
    >>> blobs = np.concatenate([rng.normal(m, 0.01, (50, 2)) for m in ([1, 0], [0, 1])]).astype(np.float32)
    >>> sorted(np.abs(train_centroids(blobs, 2, niter=10)).astype(np.float64).round(2).tolist())
    [[0.0, 1.0], [1.0, 0.0]]
    >>> np.array_equal(train_centroids(blobs, 2, rows=np.arange(0, 100, 3)), train_centroids(blobs[::3], 2))
    True
    """
    view = SampleRows(sample, rows)
    if len(view.shape) != 2 or len(view) < num_centroids:
        raise ValueError(f"sample of shape {view.shape}; expected [n, d] with n >= num_centroids={num_centroids}")
    positive_int("num_centroids", num_centroids, what="centroids to train")
    rng = np.random.default_rng(seed)
    centroids = view.take(np.sort(rng.choice(len(view), num_centroids, replace=False)))
    for _ in range(niter):
        centroids = update_centroids(view, nearest_centroids(view, centroids), centroids)
        if spherical:
            centroids /= np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), np.float32(1e-12))
    return centroids.astype(np.float16).astype(np.float32)


def as_float32(block: np.ndarray) -> np.ndarray:
    """``block`` as float32 (no copy if it is already); float16 through torch, whose conversion is vectorised
    (numpy's took 16x as long over k-means blocks). The same values either way.

    >>> as_float32(np.array([[0.5, -2.0]], dtype=np.float16)).tolist()
    [[0.5, -2.0]]
    """
    block = np.asarray(block)
    if block.dtype != np.float16:
        return np.asarray(block, dtype=np.float32)
    import torch

    block = np.ascontiguousarray(block)
    if not block.flags.writeable:  # (torch shares the memory, and warns of a read-only array)
        block = block.copy()
    return torch.from_numpy(block).float().numpy()


class SampleRows:
    """Rows ``rows`` (ascending; None: all) of ``array [n, d]``, read as float32 a slice at a time:
    ``SampleRows(a, r)[i:j]`` is ``a[r[i:j]]``. What k-means reads its sample through, so that training on part
    of a float16 sample copies neither the part nor the whole to float32.

    >>> a = np.arange(8, dtype=np.float16).reshape(4, 2)
    >>> view = SampleRows(a, np.array([1, 3]))
    >>> len(view), view.shape, view[1:].tolist(), view.take(np.array([0])).dtype
    (2, (2, 2), [[6.0, 7.0]], dtype('float32'))
    """

    def __init__(self, array: np.ndarray, rows: Optional[np.ndarray] = None):
        self.array = array
        self.rows = rows

    def __len__(self) -> int:
        return len(self.array) if self.rows is None else len(self.rows)

    @property
    def shape(self) -> Tuple[int, ...]:
        return (len(self), *self.array.shape[1:])

    def __getitem__(self, part: slice) -> np.ndarray:
        return as_float32(self.array[part] if self.rows is None else self.array[self.rows[part]])

    def take(self, index: np.ndarray) -> np.ndarray:
        """Rows ``index`` of the view, float32."""
        return as_float32(self.array[index if self.rows is None else self.rows[index]])


#: how far apart the two halves of a split cluster start (FAISS's ``EPS`` of the same rule)
SPLIT_EPS = 1.0 / 1024


def update_centroids(sample: Any, assign: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """The mean of each centroid's rows of ``sample [n, d]`` (an array or :class:`SampleRows`, read a block at a
    time; ``assign [n]``: the centroid of each row). A
    centroid left with no row takes half of the largest cluster, as in FAISS: a copy of its centroid, the two
    moved apart by a factor ``1 ± SPLIT_EPS`` (alternating signs by dimension), its rows counted half each for
    further splits in the same round.

    >>> x = np.array([[0., 0.], [2., 0.], [0., 4.]], np.float32)
    >>> update_centroids(x, np.array([0, 0, 2]), np.zeros((3, 2), np.float32)).tolist()   # centroid 1: empty
    [[0.9990234375, 0.0], [1.0009765625, 0.0], [0.0, 4.0]]
    """
    import torch

    k, d = previous.shape
    counts = np.bincount(assign, minlength=k)
    sums = torch.zeros(k, d, dtype=torch.float32)
    index = torch.from_numpy(np.asarray(assign, dtype=np.int64))
    for start in range(0, len(sample), ASSIGN_BLOCK):  # in order, a block at a time: the sums of one index_add_
        block = as_float32(sample[start:start + ASSIGN_BLOCK])
        sums.index_add_(0, index[start:start + len(block)], torch.from_numpy(block))
    centroids = np.asarray(previous, dtype=np.float32).copy()
    full = counts > 0
    centroids[full] = sums.numpy()[full] / counts[full, None].astype(np.float32)
    factor = np.where(np.arange(d) % 2 == 0, SPLIT_EPS, -SPLIT_EPS).astype(np.float32)
    for empty in np.flatnonzero(~full):
        largest = int(np.argmax(counts))
        centroids[empty] = centroids[largest] * (1 + factor)
        centroids[largest] = centroids[largest] * (1 - factor)
        counts[empty] = counts[largest] // 2
        counts[largest] -= counts[empty]
    return centroids


def nearest_centroids(vectors: Any, centroids: np.ndarray, block: Optional[int] = None) -> np.ndarray:
    """Id (int64) of the nearest centroid in L2 distance of every row of ``vectors [n, d]`` (an array or
    :class:`SampleRows`, read a block at a time): the argmax of
    ``x·c − |c|²/2`` (the argmax of ``x·c`` for unit centroids), ``block`` rows per matrix product (default
    :func:`assign_block`: the score matrix stays within :data:`ASSIGN_BYTES`). Ties go to the lower id; the ids
    do not depend on ``block``.

    >>> nearest_centroids(np.array([[1., 0.], [0.1, 0.9], [0.6, -0.8]]), np.array([[1., 0.], [0., 1.]])).tolist()
    [0, 1, 0]
    >>> nearest_centroids(np.array([[0., 1.], [1., 1.]]), np.array([[1., 0.], [0., 1.], [0., 1.]]), block=1).tolist()
    [1, 0]
    """
    import torch

    c = torch.as_tensor(np.asarray(centroids, dtype=np.float32))
    block = block or assign_block(len(c))
    c_t = c.T.contiguous()
    neg_half_norms = -0.5 * (c * c).sum(1)
    out = np.empty(len(vectors), dtype=np.int64)
    # one score buffer for all blocks: a fresh [block, C] matrix per block costs page faults that rival the matmul
    buffer = torch.empty(min(block, len(vectors)), len(c), dtype=torch.float32)
    for start in range(0, len(vectors), block):
        x = torch.as_tensor(as_float32(vectors[start:start + block]))
        scores = buffer[:len(x)]
        torch.addmm(neg_half_norms, x, c_t, out=scores)  # x·c − |c|²/2 in one pass
        # numpy's argmax (the first of equal maxima, as torch's) is 3x faster than torch's over [4096, 8192]
        np.argmax(scores.numpy(), axis=1, out=out[start:start + len(x)])
    return out


def fit_buckets(residuals: np.ndarray, nbits: int) -> Tuple[np.ndarray, np.ndarray]:
    """Per-dimension bucket ``cutoffs [d, 2^nbits − 1]`` (quantiles ``1/K … (K−1)/K`` of each dimension's
    residuals, ``K = 2^nbits``) and reconstruction ``weights [d, K]`` (each bucket's mean residual; the midpoint
    quantile ``(i + ½)/K`` for a bucket no residual fell into). Both float32.

    >>> cutoffs, weights = fit_buckets(np.array([[-3.], [-1.], [1.], [3.]]), 1)
    >>> cutoffs.tolist(), weights.tolist()
    ([[0.0]], [[-2.0, 2.0]])
    """
    residuals = np.asarray(residuals, dtype=np.float32)
    if residuals.ndim != 2 or len(residuals) == 0:
        raise ValueError(f"residuals of shape {residuals.shape}; expected a non-empty [n, d] array")
    options = 1 << nbits
    dim = residuals.shape[1]
    cutoffs = np.empty((dim, options - 1), dtype=np.float32)
    weights = np.empty((dim, options), dtype=np.float32)
    # a dimension at a time: the temporaries are a column's, whatever the sample
    for j in range(dim):
        column = np.ascontiguousarray(residuals[:, j])
        cutoffs[j] = np.quantile(column, np.arange(1, options) / options)
        ids = bucketise(column[:, None], cutoffs[j:j + 1])[:, 0]
        counts = np.bincount(ids, minlength=options)
        sums = np.bincount(ids, weights=column.astype(np.float64), minlength=options)
        midpoints = np.quantile(column, (np.arange(options) + 0.5) / options)
        weights[j] = np.where(counts > 0, sums / np.maximum(counts, 1), midpoints)
    return cutoffs, weights


def bucketise(residuals: np.ndarray, cutoffs: np.ndarray) -> np.ndarray:
    """Bucket id (uint8) of every residual: the number of its dimension's cutoffs it exceeds.

    >>> bucketise(np.array([[-0.5, 0.5], [0.2, 3.0]]), np.array([[0.0], [1.0]])).tolist()
    [[0, 0], [1, 1]]
    """
    residuals = np.asarray(residuals)
    ids = np.zeros(residuals.shape, dtype=np.uint8)
    for j in range(cutoffs.shape[1]):
        ids += residuals > cutoffs[:, j]
    return ids


def pack_bits(ids: np.ndarray, nbits: int) -> np.ndarray:
    """Pack bucket ids ``[n, d]`` (each below ``2^nbits``) into ``[n, d · nbits / 8]`` bytes.

    >>> pack_bits(np.array([[1, 2, 3, 0]], dtype=np.uint8), 2).tolist()  # 1 + 2·4 + 3·16 + 0·64
    [[57]]
    """
    ids = np.asarray(ids, dtype=np.uint8)
    check_nbits(nbits, ids.shape[1])
    per_byte = 8 // nbits
    grouped = ids.reshape(len(ids), -1, per_byte)
    packed = np.zeros(grouped.shape[:2], dtype=np.uint8)
    for m in range(per_byte):
        packed |= grouped[:, :, m] << np.uint8(m * nbits)
    return packed


def unpack_bits(packed: np.ndarray, nbits: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: bucket ids ``[n, d]`` uint8 from ``[n, d · nbits / 8]`` bytes.

    >>> unpack_bits(np.array([[57]], dtype=np.uint8), 2).tolist()
    [[1, 2, 3, 0]]
    """
    packed = np.asarray(packed, dtype=np.uint8)
    per_byte = 8 // nbits
    shifts = (np.arange(per_byte) * nbits).astype(np.uint8)
    ids = (packed[:, :, None] >> shifts) & np.uint8((1 << nbits) - 1)
    return ids.reshape(len(packed), -1)


def decode_table(weights: np.ndarray, nbits: int) -> np.ndarray:
    """``[d · nbits / 8, 256, 8 / nbits]`` float32: entry ``[k, byte, m]`` is the weight that ``byte``, found at
    position ``k`` of a packed row, decodes to for dimension ``k · 8/nbits + m``. One gather per byte then
    decodes a whole row.

    >>> decode_table(np.array([[-1., 1.]] * 8), 1)[0, 0b00000101].tolist()
    [1.0, -1.0, 1.0, -1.0, -1.0, -1.0, -1.0, -1.0]
    """
    dim = weights.shape[0]
    per_byte = 8 // nbits
    all_bytes = np.arange(256, dtype=np.uint8)[:, None]
    ids = unpack_bits(all_bytes, nbits)  # [256, per_byte]: the bucket of each slot of every byte value
    slots = weights.reshape(dim // per_byte, per_byte, -1)  # [B, per_byte, K]
    table = slots[:, np.arange(per_byte)[None, :], ids]  # [B, 256, per_byte]
    return np.ascontiguousarray(table, dtype=np.float32)


class ResidualCodec:
    """Centroids ``[C, d]``, per-dimension bucket ``cutoffs [d, K−1]`` and ``weights [d, K]`` (``K = 2^nbits``):
    compresses vectors to (centroid id, packed residual bits) and decompresses them exactly.

    >>> codec = ResidualCodec(np.eye(2, 4), cutoffs=np.tile([-0.1, 0., 0.1], (4, 1)),
    ...                       weights=np.tile([-0.15, -0.05, 0.05, 0.15], (4, 1)), nbits=2)
    >>> codes, packed = codec.compress(np.array([[0.9, 0.12, 0., -0.3]]))
    >>> codes.tolist(), packed.tolist()  # buckets [0, 3, 1, 0]: 0 + 3·4 + 1·16 + 0·64
    ([0], [[28]])
    >>> codec.decompress(codes, packed).astype(np.float64).round(2).tolist()
    [[0.85, 0.15, -0.05, -0.15]]

    ``exact_above``, when set, is the reconstruction error (:meth:`errors`) beyond which an index written with this
    codec also stores a token's vector exactly (its "exact outliers"; :func:`exact_threshold`); None: none are.
    """

    def __init__(self, centroids: np.ndarray, cutoffs: np.ndarray, weights: np.ndarray, nbits: int,
                 exact_above: Optional[float] = None):
        self.centroids = np.ascontiguousarray(centroids, dtype=np.float32)
        self.cutoffs = np.ascontiguousarray(cutoffs, dtype=np.float32)
        self.weights = np.ascontiguousarray(weights, dtype=np.float32)
        self.nbits = nbits
        self.dim = self.centroids.shape[1]
        options = 1 << nbits
        if self.cutoffs.shape != (self.dim, options - 1) or self.weights.shape != (self.dim, options):
            raise ValueError(f"cutoffs {self.cutoffs.shape} and weights {self.weights.shape} do not fit {nbits}-bit "
                             f"codes of dimension {self.dim}: expected ({self.dim}, {options - 1}) and "
                             f"({self.dim}, {options})")
        if exact_above is not None and not (isinstance(exact_above, (int, float)) and math.isfinite(exact_above)
                                            and exact_above >= 0):
            raise ValueError(f"exact_above={exact_above!r}; expected a finite reconstruction error >= 0 or None")
        self.exact_above = None if exact_above is None else float(exact_above)
        self._tables: dict = {}

    @property
    def num_centroids(self) -> int:
        return len(self.centroids)

    @property
    def packed_bytes(self) -> int:
        """Bytes of residual codes per vector."""
        return self.dim * self.nbits // 8

    @classmethod
    def train(cls, sample: np.ndarray, nbits: int, num_centroids: Optional[int] = None, *, niter: int = 4,
              seed: int = 0, spherical: bool = True, heldout: float = 0.1) -> "ResidualCodec":
        """Centroids from k-means over ``1 − heldout`` of ``sample [n, d]`` (float16 or float32; read in place,
        a block at a time), then bucket cutoffs and weights from the residuals of the held-out rows (all rows when
        that leaves fewer than 2 for either part)."""
        sample = np.asarray(sample)
        if sample.ndim != 2:
            raise ValueError(f"sample of shape {sample.shape}; expected [n, d]")
        check_nbits(nbits, sample.shape[1])
        num_centroids = num_centroids or default_num_centroids(len(sample))
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(sample))
        held = int(len(sample) * heldout)
        if held < 2 or len(sample) - held < num_centroids:
            train_rows, bucket_rows = order, order
        else:
            train_rows, bucket_rows = order[held:], order[:held]
        centroids = train_centroids(sample, num_centroids, niter=niter, seed=seed, spherical=spherical,
                                    rows=np.sort(train_rows))
        residuals = SampleRows(sample).take(np.sort(bucket_rows))
        codes = nearest_centroids(residuals, centroids)  # one call: its score buffer is made once
        for start in range(0, len(residuals), ASSIGN_BLOCK):  # in place: the held-out rows are the one copy
            residuals[start:start + ASSIGN_BLOCK] -= centroids[codes[start:start + ASSIGN_BLOCK]]
        cutoffs, weights = fit_buckets(residuals, nbits)
        return cls(centroids, cutoffs, weights, nbits)

    def compress(self, vectors: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """(centroid ids ``[n]`` int64, packed residual codes ``[n, packed_bytes]`` uint8) of ``vectors [n, d]``."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"vectors of shape {vectors.shape}; expected [n, {self.dim}]")
        check_nbits(self.nbits, self.dim)
        codes = nearest_centroids(vectors, self.centroids)
        residuals = vectors - self.centroids[codes]
        return codes, pack_bits(bucketise(residuals, self.cutoffs), self.nbits)

    def decompress(self, codes: np.ndarray, packed: np.ndarray) -> np.ndarray:
        """Vectors ``[n, d]`` float32: ``centroid[code] + weight[j, bucket_j]`` for every dimension ``j``."""
        ids = unpack_bits(packed, self.nbits)
        return self.centroids[np.asarray(codes, dtype=np.int64)] + self.weights[np.arange(self.dim), ids]

    def errors(self, vectors: np.ndarray, codes: np.ndarray, packed: np.ndarray) -> np.ndarray:
        """Reconstruction error ``[n]`` float32 of each of ``vectors [n, d]`` coded as ``(codes, packed)``: the L2
        norm of the vector minus its decompressed form (row by row, so the same whatever the batch)."""
        vectors = np.asarray(vectors, dtype=np.float32)
        return np.linalg.norm(self.decompress(codes, packed) - vectors, axis=1)

    def exact_mask(self, vectors: np.ndarray, codes: np.ndarray, packed: np.ndarray) -> np.ndarray:
        """Which of ``vectors`` an index stores exactly as well (error above :attr:`exact_above`; none if unset)."""
        if self.exact_above is None:
            return np.zeros(len(codes), dtype=bool)
        return self.errors(vectors, codes, packed) > self.exact_above

    def decompress_into(self, codes: "torch.Tensor", packed: "torch.Tensor", out: "torch.Tensor",
                        scratch: Optional["torch.Tensor"] = None) -> "torch.Tensor":
        """:meth:`decompress` in torch, into ``out [n, d]`` float32 (CPU), with one table gather per packed
        byte: the fast path of scoring. ``scratch``, float32 with at least ``n · d`` elements, receives the gathered
        residuals (a block-sized buffer reused across calls saves an allocation per call)."""
        import torch

        table, centroids, shift = self._torch_tables()
        nbytes = packed.shape[1]
        rows = packed.to(torch.int32).add_(shift[:nbytes])  # [n, B]: the row of each byte in the flattened table
        torch.index_select(centroids, 0, codes.long(), out=out)
        gathered = None if scratch is None else scratch.view(-1)[:out.numel()].view(-1, table.shape[1])
        out.view(-1).add_(torch.index_select(table, 0, rows.view(-1), out=gathered).view(-1))
        return out

    def norms(self, codes: np.ndarray, packed: np.ndarray) -> np.ndarray:
        """The L2 norm ``[n]`` float32 of each decompressed vector, as :meth:`decompress_into` rebuilds it (what an
        index stores per token, so that exact scoring can take dot products from tables, :meth:`dot_table`)."""
        import torch

        codes_t = torch.from_numpy(np.asarray(codes, dtype=np.int64))
        packed_t = torch.from_numpy(np.ascontiguousarray(packed, dtype=np.uint8))
        out = torch.empty(len(codes_t), self.dim)
        self.decompress_into(codes_t, packed_t, out)
        return torch.linalg.vector_norm(out, dim=-1).numpy()

    def dot_tables(self, q: "torch.Tensor") -> Tuple["torch.Tensor", "torch.Tensor"]:
        """The dot products with ``q [n, d]`` that scoring looks up instead of decompressing: the centroids'
        ``[C, n]`` and the residual bytes' (:meth:`dot_table`). ``centroid_dots[code] + residual_dots(table,
        packed)`` is a coded token's dot product with ``q``."""
        return self._torch_tables()[1] @ q.float().T, self.dot_table(q)

    def dot_table(self, q: "torch.Tensor") -> "torch.Tensor":
        """``[packed_bytes · 256, n]`` float32: row ``k · 256 + byte`` holds the dot products of the residual
        weights that ``byte``, found at position ``k`` of a packed row, decodes to with each of ``q [n, d]``'s
        vectors. The sum of a packed row's ``packed_bytes`` rows is its residual's dot product with ``q``
        (:func:`residual_dots`), with no vector decompressed.

        >>> import torch
        >>> codec = ResidualCodec(np.zeros((1, 8)), np.tile([0.], (8, 1)), np.tile([-1., 1.], (8, 1)), nbits=1)
        >>> packed = np.array([[0b00000101]], dtype=np.uint8)  # residual [1, -1, 1, -1, -1, -1, -1, -1]
        >>> q = torch.arange(1., 9.)[None]  # [1, 2, ..., 8]: 1 - 2 + 3 - 4 - 5 - 6 - 7 - 8
        >>> residual_dots(codec.dot_table(q), torch.from_numpy(packed)).tolist()
        [[-28.0]]
        """
        import torch

        table = self._torch_tables()[0]  # [B · 256, per_byte]
        per_byte = table.shape[1]
        nbytes = self.dim // per_byte
        slots = q.float().reshape(q.shape[0], nbytes, per_byte)  # [n, B, per_byte]
        return torch.einsum("bkm,nbm->bkn", table.view(nbytes, 256, per_byte), slots).reshape(nbytes * 256, -1)

    def _torch_tables(self) -> Tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]:
        import torch

        if "torch" not in self._tables:
            table = torch.from_numpy(decode_table(self.weights, self.nbits))
            shift = (torch.arange(table.shape[0]) * 256).to(torch.int32)
            self._tables["torch"] = (table.reshape(-1, table.shape[-1]), torch.from_numpy(self.centroids), shift)
        return self._tables["torch"]

    def __repr__(self) -> str:
        exact = "" if self.exact_above is None else f", exact_above={self.exact_above:.4g}"
        return f"ResidualCodec(num_centroids={self.num_centroids}, dim={self.dim}, nbits={self.nbits}{exact})"


def exact_threshold(codec: ResidualCodec, sample: np.ndarray, share: float) -> Optional[float]:
    """The reconstruction error above which ``share`` of ``sample [n, d]`` (the codec's training sample) falls:
    the ``1 − share`` quantile of their :meth:`~ResidualCodec.errors` (None for ``share`` 0: nothing stored
    exactly). Tokens coded worse than it are an index's exact outliers.

    >>> codec = ResidualCodec(np.eye(2, 4), np.tile([-0.1, 0., 0.1], (4, 1)), np.tile([-0.15, -0.05, 0.05, 0.15],
    ...                       (4, 1)), nbits=2)
    >>> sample = np.array([[1., 0, 0, 0], [1., 0, 0, 0.5], [0, 1., 0.9, 0]])  # errors 0.1, √0.13, √0.57
    >>> round(exact_threshold(codec, sample, 0.5), 4)  # the median
    0.3606
    """
    if share == 0:
        return None
    blocks = (as_float32(sample[s:s + ASSIGN_BLOCK]) for s in range(0, len(sample), ASSIGN_BLOCK))
    errors = np.concatenate([codec.errors(block, *codec.compress(block)) for block in blocks])
    return float(np.quantile(errors, 1 - share))


def residual_dots(table: "torch.Tensor", packed: "torch.Tensor") -> "torch.Tensor":
    """``[T, n]``: the dot products of ``T`` packed residual rows (``[T, B]`` uint8) with the query vectors of
    ``table`` (:meth:`ResidualCodec.dot_table`): one table row summed per byte (``embedding_bag``)."""
    import torch

    shift = torch.arange(packed.shape[1], dtype=torch.int32).mul_(256)
    return torch.nn.functional.embedding_bag(packed.to(torch.int32).add_(shift), table, mode="sum")
