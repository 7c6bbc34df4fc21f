"""The residual-compressed index formats (``residual1``, ``residual2``, ``residual4``; files listed in layout.py):
how they are specified, and building them from a spill of fp16 vectors.

Building (:func:`compress_spill`) starts from the writer's temporary folder, whose ``vectors.f16`` was written
by the single encoding pass: a sample of rows trains the codec, the vectors are quantised ``chunk_tokens`` rows
at a time (whole documents), the (centroid, document) pairs are spilled and then scattered into the inverted
lists, and the vector spill is deleted. Memory is bounded by the chunk and the training sample, not by the corpus.
A corpus that can be read twice (a search folder's kept encoded passages) skips the spill: the same sample trains
the same codec first (:class:`TrainedCodec`), and a writer given it codes the documents as they come, in the same
chunks (:class:`CodedLists` with ``chunk_tokens``): the same files.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import numpy as np

from ...checks import positive_int
from ...progress import progress
from ...storage import JsonConfig, write_json
from ..layout import (
    CENTROIDS_FILE,
    CODEC_FILE,
    CUTOFFS_FILE,
    EXACT_VECTORS_FILE,
    FORMATS,
    IVF_DOCS_FILE,
    IVF_OFFSETS_FILE,
    RESIDUALS_FILE,
    TOKEN_NORMS_FILE,
    WEIGHTS_FILE,
)
from .codec import (
    ResidualCodec,
    as_float32,
    check_exact_share_of,
    check_nbits,
    code_dtype,
    default_num_centroids,
    exact_threshold,
)

_PAIRS_SPILL = "pairs.spill"
_EXACT_ROWS_SPILL = "exact_rows.spill"
#: the share of tokens a search folder's residual index also stores exactly unless told otherwise
#: (``CompressionSpec.of(fmt)``, ``pfc index --exact-share``): the 1% the codec reconstructs worst, which gives the
#: PokéClicker fact questions back what 2-bit codes lose (docs/app.md)
DEFAULT_EXACT_SHARE = 0.01
#: token rows quantised per chunk while building (whole documents; ~32 MB of float32 at d = 128)
CHUNK_TOKENS = 65536


def nbits_of(fmt: str) -> int:
    """Bits per dimension of a compressed format name; a ValueError names the supported formats.

    >>> nbits_of("residual2")
    2
    >>> nbits_of("residual3")
    Traceback (most recent call last):
    ...
    ValueError: compression='residual3'; expected one of ('fp16', 'residual1', 'residual2', 'residual4')
    """
    if fmt not in FORMATS or fmt == "fp16":
        raise ValueError(f"compression={fmt!r}; expected one of {FORMATS}")
    return int(fmt[len("residual"):])


def codes_file(dtype: np.dtype) -> str:
    return "codes.u16" if np.dtype(dtype) == np.uint16 else "codes.i32"


def token_ids_file(dtype: np.dtype) -> str:
    return "token_ids.u16" if np.dtype(dtype) == np.uint16 else "token_ids.i32"


def exact_rows_file(dtype: np.dtype) -> str:
    return "exact_rows.u32" if np.dtype(dtype) == np.uint32 else "exact_rows.i64"


def exact_row_dtype(num_tokens: int) -> np.dtype:
    """The dtype of an index's exact-outlier row ids: uint32 when every row id fits, else int64.

    >>> exact_row_dtype(2**32), exact_row_dtype(2**32 + 1)
    (dtype('uint32'), dtype('int64'))
    """
    return np.dtype(np.uint32) if num_tokens <= 1 << 32 else np.dtype(np.int64)


def compressed_files(info: Dict[str, Any]) -> List[str]:
    """The files a compressed index stores besides ``offsets.i64``, ``docnos.npids``, ``colbert_config.json`` (and
    ``parts.i64``), given its ``codec.json``.

    >>> compressed_files({"code_dtype": "uint16", "token_id_dtype": "int32"})[:2]
    ['codec.json', 'centroids.f16']
    """
    names = [CODEC_FILE, CENTROIDS_FILE, CUTOFFS_FILE, WEIGHTS_FILE, codes_file(np.dtype(info["code_dtype"])),
             RESIDUALS_FILE, IVF_OFFSETS_FILE, IVF_DOCS_FILE, token_ids_file(np.dtype(info["token_id_dtype"]))]
    if "exact_rows" in info:
        names += [exact_rows_file(np.dtype(info["exact_row_dtype"])), EXACT_VECTORS_FILE]
    if info.get("token_norms"):
        names.append(TOKEN_NORMS_FILE)
    return names


def array_layout(info: Dict[str, Any], num_tokens: int, num_docs: int, dim: int) -> Dict[str, Tuple[Any, Tuple]]:
    """(dtype, shape) of each array file of a compressed index, as its ``codec.json`` and sizes imply."""
    nbits, centroids = int(info["nbits"]), int(info["num_centroids"])
    code, token_id = np.dtype(info["code_dtype"]), np.dtype(info["token_id_dtype"])
    layout: Dict[str, Tuple[Any, Tuple]] = {
        CENTROIDS_FILE: (np.float16, (centroids, dim)), CUTOFFS_FILE: (np.float32, (dim, (1 << nbits) - 1)),
        WEIGHTS_FILE: (np.float32, (dim, 1 << nbits)), codes_file(code): (code, (num_tokens,)),
        RESIDUALS_FILE: (np.uint8, (num_tokens, dim * nbits // 8)),
        IVF_OFFSETS_FILE: (np.int64, (centroids + 1,)), IVF_DOCS_FILE: (np.int32, (int(info["num_pairs"]),)),
        token_ids_file(token_id): (token_id, (num_tokens,))}
    if "exact_rows" in info:
        rows, row_dtype = int(info["exact_rows"]), np.dtype(info["exact_row_dtype"])
        layout[exact_rows_file(row_dtype)] = (row_dtype, (rows,))
        layout[EXACT_VECTORS_FILE] = (np.float16, (rows, dim))
    if info.get("token_norms"):
        layout[TOKEN_NORMS_FILE] = (np.float32, (num_tokens,))
    return layout


@dataclass(frozen=True)
class CompressionSpec(JsonConfig):
    """How an index is stored: ``format`` ``'fp16'`` or ``'residual1'``/``'residual2'``/``'residual4'`` (bits per
    dimension), and for the residual formats the codec's training: ``num_centroids`` (default: the power of two
    nearest ``4·sqrt(num_tokens)``), ``sample`` token vectors for k-means (default ``32 · num_centroids``, at
    least 65,536), ``niter`` k-means iterations, ``seed``, and ``exact_share``: the share of the training sample
    whose reconstruction error (L2) sets the codec's ``exact_above`` threshold; every token coded worse than it is
    also stored exactly (fp16) beside its codes and read instead of them (0, the default: none; docs/residual.md,
    "Exact outliers").

    >>> CompressionSpec("residual2").nbits, CompressionSpec("fp16").compressed
    (2, False)
    >>> CompressionSpec("residual2", num_centroids=0)
    Traceback (most recent call last):
    ...
    ValueError: num_centroids=0; expected a positive integer or None (centroids; None: the default)
    >>> CompressionSpec("residual2", exact_share=1.0)
    Traceback (most recent call last):
    ...
    ValueError: exact_share=1.0; expected a share of the tokens in [0, 1) (stored exactly as well as coded)
    """

    # a spec without exact outliers reads (and digests) as before they existed
    OMITTED_AT_DEFAULT = ("exact_share",)

    format: str = "fp16"
    num_centroids: Optional[int] = None
    sample: Optional[int] = None
    niter: int = 4
    seed: int = 0
    exact_share: float = 0.0

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"compression={self.format!r}; expected one of {FORMATS}")
        positive_int("num_centroids", self.num_centroids, none=True, what="centroids; None: the default")
        positive_int("sample", self.sample, none=True, what="token vectors; None: the default")
        positive_int("niter", self.niter, what="k-means iterations")
        if self.num_centroids is not None and self.num_centroids > 1 << 31:
            raise ValueError(f"num_centroids={self.num_centroids} is beyond int32 centroid ids")
        check_exact_share_of(self.format, self.exact_share)

    @classmethod
    def of(cls, fmt: str, exact_share: Optional[float] = None) -> "CompressionSpec":
        """The spec of format ``fmt`` with its default exact share (``exact_share`` None): :data:`DEFAULT_EXACT_SHARE`
        for a residual format, 0 for fp16 (which stores every vector exactly). A spec made directly stores none
        unless told (its field's default 0 keeps the indexes and digests written before exact outliers existed).

        >>> CompressionSpec.of("residual2").exact_share, CompressionSpec.of("fp16").exact_share
        (0.01, 0.0)
        >>> CompressionSpec.of("residual4", 0.0) == CompressionSpec("residual4")
        True
        """
        if exact_share is None:
            exact_share = 0.0 if fmt == "fp16" else DEFAULT_EXACT_SHARE
        return cls(fmt, exact_share=exact_share)

    def train_codec(self, sample: np.ndarray, num_centroids: int) -> ResidualCodec:
        """A codec trained on ``sample [n, d]`` (float32) with this spec's settings, its ``exact_above`` set from
        ``exact_share`` of the same sample (:func:`~.codec.exact_threshold`)."""
        codec = ResidualCodec.train(sample, self.nbits, num_centroids, niter=self.niter, seed=self.seed)
        codec.exact_above = exact_threshold(codec, sample, self.exact_share)
        return codec

    @property
    def compressed(self) -> bool:
        return self.format != "fp16"

    @property
    def nbits(self) -> int:
        return nbits_of(self.format)

    def resolve(self, num_tokens: int) -> Tuple[int, int]:
        """(centroids, sample size) for a corpus of ``num_tokens`` vectors; refuses more centroids than tokens.

        >>> CompressionSpec("residual2").resolve(1_000_000)
        (4096, 131072)
        >>> CompressionSpec("residual2", num_centroids=64).resolve(50)
        Traceback (most recent call last):
        ...
        ValueError: num_centroids=64 but the corpus has only 50 token vectors; give fewer centroids
        """
        centroids = self.num_centroids or default_num_centroids(num_tokens)
        if centroids > num_tokens:
            raise ValueError(f"num_centroids={centroids} but the corpus has only {num_tokens} token vectors; give "
                             "fewer centroids")
        sample = self.sample or max(32 * centroids, 65536)
        return centroids, min(max(sample, centroids), num_tokens)


def as_spec(compression: Any) -> CompressionSpec:
    """A :class:`CompressionSpec` from a spec or a format name."""
    if isinstance(compression, CompressionSpec):
        return compression
    if isinstance(compression, str):
        return CompressionSpec(compression)
    raise ValueError(f"compression={compression!r}; expected a format name {FORMATS} or a CompressionSpec")


def doc_chunks(offsets: np.ndarray, chunk_tokens: int) -> Iterator[Tuple[int, int]]:
    """``(first_doc, end_doc)`` ranges of whole documents holding about ``chunk_tokens`` rows each (a longer
    document gets a chunk of its own).

    >>> list(doc_chunks(np.array([0, 3, 5, 9, 10]), 5))
    [(0, 2), (2, 4)]
    """
    num_docs = len(offsets) - 1
    start = 0
    while start < num_docs:
        end = int(np.searchsorted(offsets, offsets[start] + chunk_tokens, side="right")) - 1
        end = min(max(end, start + 1), num_docs)
        yield start, end
        start = end


#: the codec's training sample while the codec trains, in the scratch folder a build gives :meth:`TrainedCodec.train`
SAMPLE_FILE = "codec-sample.tmp"


def sample_rows(arrays: Iterable[np.ndarray], num_tokens: int, spec: CompressionSpec, *,
                into: Optional[Path] = None) -> np.ndarray:
    """The codec's training sample (in corpus order) of a corpus of ``num_tokens`` vectors read in order as
    ``arrays`` (``[n_i, d]`` each, e.g. one per document, or the whole corpus as one): ``spec.resolve``'s sample
    size of rows drawn without replacement with ``spec.seed``. Only the sample is held, never the corpus, and in
    float16 if the arrays are (half the memory of float32, the same values), else float32; the arrays' rows must
    add up to ``num_tokens``. ``into``: a file to hold the sample, memory-mapped (pages the kernel may write out
    and reclaim, so the process's own memory does not grow with the sample); None: in memory.

    >>> spec = CompressionSpec("residual2", num_centroids=2, sample=3)
    >>> corpus = np.arange(12, dtype=np.float16).reshape(6, 2)
    >>> sample_rows([corpus[:1], corpus[1:4], corpus[4:]], 6, spec).tolist()
    [[6.0, 7.0], [8.0, 9.0], [10.0, 11.0]]
    >>> np.array_equal(sample_rows([corpus], 6, spec), sample_rows(iter(corpus[:, None]), 6, spec))
    True
    >>> sample_rows([corpus[:4]], 6, spec)
    Traceback (most recent call last):
    ...
    ValueError: the arrays hold 4 token vectors, not the 6 the sample was drawn from
    """
    _, size = spec.resolve(num_tokens)
    rows = np.sort(np.random.default_rng(spec.seed).choice(num_tokens, size=size, replace=False))
    sample: Optional[np.ndarray] = None
    start = 0
    for array in arrays:
        end = start + len(array)
        lo, hi = np.searchsorted(rows, [start, min(end, num_tokens)])
        if sample is None:
            shape, dtype = (size, array.shape[1]), np.float16 if array.dtype == np.float16 else np.float32
            sample = np.empty(shape, dtype) if into is None else np.memmap(into, dtype=dtype, mode="w+", shape=shape)
        for a in range(lo, hi, CHUNK_TOKENS):  # a chunk at a time: one array may be the whole corpus's memory map
            b = min(hi, a + CHUNK_TOKENS)
            sample[a:b] = array[rows[a:b] - start]
        start = end
    if start != num_tokens or sample is None:
        raise ValueError(f"the arrays hold {start} token vectors, not the {num_tokens} the sample was drawn from")
    return sample


@dataclass(frozen=True, eq=False)
class TrainedCodec:
    """A codec trained on a corpus's sample (:meth:`train`: what :func:`compress_spill` trains on the same corpus)
    and what ``codec.json`` records of it: the sample size and the training seconds. An ``IndexWriter`` given one
    writes the index :func:`compress_spill` writes, without the fp16 spill."""

    codec: ResidualCodec
    sample: int
    seconds: float

    @classmethod
    def train(cls, arrays: Iterable[np.ndarray], num_tokens: int, spec: CompressionSpec, *,
              scratch: Optional[Path] = None) -> "TrainedCodec":
        """The codec of ``spec`` trained on :func:`sample_rows` of the corpus ``arrays`` (``num_tokens`` rows).
        ``scratch``: a folder of the build's own where the sample is kept in a memory-mapped file
        (:data:`SAMPLE_FILE`, deleted when the codec is trained, or fails to be) rather than in memory, so that a
        build's memory stays flat as the corpus, and with it the sample, grows (k-means reads the sample a block
        at a time); the same codec either way."""
        started = time.perf_counter()
        num_centroids, size = spec.resolve(num_tokens)
        into = None if scratch is None else Path(scratch) / SAMPLE_FILE
        try:
            codec = spec.train_codec(sample_rows(arrays, num_tokens, spec, into=into), num_centroids)
        finally:
            if into is not None:
                into.unlink(missing_ok=True)
        return cls(codec, size, round(time.perf_counter() - started, 3))


def compress_spill(folder: Path, num_tokens: int, dim: int, spec: CompressionSpec, *, vectors_file: str,
                   token_ids_file_i32: str, offsets_file: str, verbose: bool = False,
                   chunk_tokens: int = CHUNK_TOKENS) -> Dict[str, Any]:
    """Replace the fp16 spill ``folder/vectors_file`` (``[num_tokens, dim]``) by the compressed files; returns the
    codec description written to ``codec.json``. (A writer given a codec trained beforehand, e.g. one shared by
    the shards of a sharded index, codes each document as it arrives instead: :class:`CodedLists`.)"""
    nbits = spec.nbits
    check_nbits(nbits, dim)
    folder = Path(folder)
    vectors = np.memmap(folder / vectors_file, dtype=np.float16, mode="r", shape=(num_tokens, dim))
    offsets = np.fromfile(folder / offsets_file, dtype=np.int64)
    trained = TrainedCodec.train([vectors], num_tokens, spec, scratch=folder)
    started = time.perf_counter()

    lists = CodedLists(folder, trained.codec)
    bar = progress(total=num_tokens, desc=f"compressing ({spec.format})", unit="tok", enabled=verbose)
    try:
        for first, end in doc_chunks(offsets, chunk_tokens):
            lo, hi = int(offsets[first]), int(offsets[end])
            lists.add_vectors(np.repeat(np.arange(first, end), np.diff(offsets[first:end + 1])), vectors[lo:hi])
            bar.update(hi - lo)
    except BaseException:
        lists.close()
        raise
    finally:
        bar.close()
    del vectors
    (folder / vectors_file).unlink()
    return lists.finish(spec, num_tokens, token_ids_file_i32, chunk_tokens, sample=trained.sample,
                        seconds={"train": trained.seconds, "quantise": round(time.perf_counter() - started, 3)})


class CodedLists:
    """The coded files of a compressed index being written with a known ``codec``: each document's centroid ids and
    packed residuals are appended as the document arrives (:meth:`add_vectors` compresses a document's vectors,
    :meth:`add` takes codes made earlier, e.g. copied from another index with the same codec), the (centroid,
    document) pairs are spilled, and :meth:`finish` scatters them into the inverted lists and writes the codec.
    With a codec that has an ``exact_above`` threshold, the rows coded worse than it are also appended, exactly
    (fp16), to the exact outliers' files. Every row's norm, as scoring sees the row, goes to ``token_norms.f32``.

    Documents must arrive in document-id order (the inverted lists come out ascending).

    ``chunk_tokens``: the documents given one at a time to :meth:`add_vectors` are held and coded together, whole
    documents of at most ``chunk_tokens`` rows at a time (one longer alone): the chunks :func:`doc_chunks` makes of
    the same documents, so the same calls (and files) as :func:`compress_spill`'s, and fewer, larger products.
    """

    def __init__(self, folder: Path, codec: ResidualCodec, chunk_tokens: Optional[int] = None):
        self.folder = Path(folder)
        self.codec = codec
        self.chunk_tokens = chunk_tokens
        self._held: List[Tuple[int, np.ndarray]] = []  # (document id, fp16 vectors) not coded yet
        self._held_rows = 0
        #: seconds spent coding vectors (add_vectors)
        self.seconds = 0.0
        self.code_dtype = code_dtype(codec.num_centroids)
        self.counts = np.zeros(codec.num_centroids, dtype=np.int64)
        self.num_tokens = 0
        self.num_exact = 0
        self._codes = open(self.folder / codes_file(self.code_dtype), "wb")  # noqa: SIM115 (close/finish close them)
        self._residuals = open(self.folder / RESIDUALS_FILE, "wb")  # noqa: SIM115
        self._pairs = open(self.folder / _PAIRS_SPILL, "wb")  # noqa: SIM115
        self._norms = open(self.folder / TOKEN_NORMS_FILE, "wb")  # noqa: SIM115
        self._exact_rows = self._exact_vectors = None
        if codec.exact_above is not None:
            self._exact_rows = open(self.folder / _EXACT_ROWS_SPILL, "wb")  # noqa: SIM115
            self._exact_vectors = open(self.folder / EXACT_VECTORS_FILE, "wb")  # noqa: SIM115

    def add_vectors(self, doc_id: Union[int, np.ndarray], vectors: np.ndarray) -> None:
        """Compress vectors ``[n, d]`` (fp16 values) with the codec and append them: one document's (``doc_id``
        an int) or whole documents' (``doc_id``: the document of each row, ascending)."""
        if self.chunk_tokens is not None and np.ndim(doc_id) == 0:
            if self._held and self._held_rows + len(vectors) > self.chunk_tokens:
                self.flush()
            self._held.append((int(doc_id), np.array(vectors)))  # (a copy: the caller may reuse its array)
            self._held_rows += len(vectors)
            return
        self.flush()
        started = time.perf_counter()
        self._code(doc_id, vectors)
        self.seconds += time.perf_counter() - started

    def flush(self) -> None:
        """Code the documents held (``chunk_tokens``), if any."""
        if not self._held:
            return
        held, self._held, self._held_rows = self._held, [], 0
        started = time.perf_counter()
        self._code(np.repeat([doc for doc, _ in held], [len(v) for _, v in held]),
                   np.concatenate([v for _, v in held]))
        self.seconds += time.perf_counter() - started

    def _code(self, doc_id: Union[int, np.ndarray], vectors: np.ndarray) -> None:
        vectors = np.asarray(vectors)
        as_float = as_float32(vectors)  # (fp16 through torch: half numpy's time over a chunk)
        codes, packed = self.codec.compress(as_float)
        doc_of_row = np.full(len(codes), doc_id, dtype=np.int64) if np.ndim(doc_id) == 0 else np.asarray(doc_id)
        exact = None
        if self.codec.exact_above is not None:
            rows = np.flatnonzero(self.codec.exact_mask(as_float, codes, packed))
            exact = (rows, vectors[rows])
        self.add(codes, packed, doc_of_row, exact)

    def add(self, codes: np.ndarray, packed: np.ndarray, doc_of_row: np.ndarray,
            exact: Optional[Tuple[np.ndarray, np.ndarray]] = None) -> None:
        """Append coded rows (centroid ids ``[n]``, packed residuals ``[n, packed_bytes]``) of the documents
        ``doc_of_row [n]`` (ascending, after every document added before); ``exact``: with a codec that stores
        exact outliers, which of these rows are (ascending positions among them) and their vectors."""
        codes = np.asarray(codes)
        packed = np.asarray(packed, dtype=np.uint8)
        if packed.shape != (len(codes), self.codec.packed_bytes):
            raise ValueError(f"packed residuals of shape {packed.shape}; expected ({len(codes)}, "
                             f"{self.codec.packed_bytes}) for this codec")
        if len(codes) and (int(codes.min()) < 0 or int(codes.max()) >= self.codec.num_centroids):
            raise ValueError(f"centroid ids outside 0..{self.codec.num_centroids - 1}: the codes were not made by "
                             "this codec")
        rows, vectors = self._check_exact(exact, len(codes))
        self.flush()  # (the documents held come first)
        self._codes.write(codes.astype(self.code_dtype).tobytes())
        self._residuals.write(packed.tobytes())
        norms = self.codec.norms(codes, packed)
        if len(rows):  # an exact outlier is scored as stored
            norms[rows] = np.linalg.norm(vectors.astype(np.float32), axis=1)
        self._norms.write(norms.astype(np.float32).tobytes())
        from .arrays import doc_code_pairs

        cents, docs = doc_code_pairs(codes, doc_of_row)
        self.counts += np.bincount(cents, minlength=self.codec.num_centroids)
        self._pairs.write(np.stack([cents, docs], 1).astype(np.int32).tobytes())
        if self._exact_rows is not None and self._exact_vectors is not None:
            self._exact_rows.write((rows + self.num_tokens).astype(np.int64).tobytes())
            self._exact_vectors.write(vectors.tobytes())
            self.num_exact += len(rows)
        self.num_tokens += len(codes)

    def _check_exact(self, exact: Optional[Tuple[np.ndarray, np.ndarray]], n: int) -> Tuple[np.ndarray, np.ndarray]:
        """The exact rows (int64, ascending, in ``0..n-1``) and vectors (fp16 ``[k, d]``) given for ``n`` rows."""
        if self.codec.exact_above is None:
            if exact is not None and len(exact[0]):
                raise ValueError("exact outlier rows given, but the codec stores none (no exact_above)")
            return np.zeros(0, np.int64), np.zeros((0, self.codec.dim), np.float16)
        if exact is None:
            raise ValueError(f"codes of a codec that stores exact outliers (exact_above={self.codec.exact_above:.4g}) "
                             "need their exact rows and vectors (exact=(rows, vectors))")
        rows = np.asarray(exact[0], dtype=np.int64)
        vectors = np.ascontiguousarray(exact[1], dtype=np.float16)
        if vectors.shape != (len(rows), self.codec.dim) or (len(rows) and (
                rows[0] < 0 or rows[-1] >= n or (np.diff(rows) <= 0).any())):
            raise ValueError(f"exact outliers: rows {rows[:5].tolist()}... and vectors of shape {vectors.shape}; "
                             f"expected ascending rows in 0..{n - 1} and vectors [{len(rows)}, {self.codec.dim}]")
        return rows, vectors

    def close(self) -> None:
        for f in (self._codes, self._residuals, self._pairs, self._norms, self._exact_rows, self._exact_vectors):
            if f is not None:
                f.close()

    def finish(self, spec: CompressionSpec, num_tokens: int, token_ids_file_i32: str, chunk_tokens: int = CHUNK_TOKENS,
               *, sample: Optional[int] = None, seconds: Optional[Dict[str, float]] = None,
               extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """Write the inverted lists, the narrowed token ids, the exact outliers' row ids, the codec and
        ``codec.json`` (returned)."""
        started = time.perf_counter()
        self.flush()
        self.close()
        if self.num_tokens != num_tokens:
            raise ValueError(f"{self.num_tokens} coded token rows for an index of {num_tokens} tokens")
        folder, codec = self.folder, self.codec
        num_pairs = int(self.counts.sum())
        ivf_offsets = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        ivf_offsets.tofile(folder / IVF_OFFSETS_FILE)
        _fill_lists(folder / _PAIRS_SPILL, folder / IVF_DOCS_FILE, ivf_offsets, num_pairs, chunk_tokens)
        (folder / _PAIRS_SPILL).unlink()
        id_dtype = _narrow_token_ids(folder, token_ids_file_i32, num_tokens, chunk_tokens)
        exact: Dict[str, Any] = {}
        if codec.exact_above is not None:
            row_dtype = exact_row_dtype(num_tokens)
            rows = np.fromfile(folder / _EXACT_ROWS_SPILL, dtype=np.int64)
            rows.astype(row_dtype).tofile(folder / exact_rows_file(row_dtype))
            (folder / _EXACT_ROWS_SPILL).unlink()
            exact = {"exact_above": codec.exact_above, "exact_rows": self.num_exact,
                     "exact_row_dtype": row_dtype.name}

        codec.centroids.astype(np.float16).tofile(folder / CENTROIDS_FILE)
        codec.cutoffs.tofile(folder / CUTOFFS_FILE)
        codec.weights.tofile(folder / WEIGHTS_FILE)
        seconds = dict(seconds or {})
        seconds["lists"] = round(time.perf_counter() - started, 3)
        info = {"spec": spec.to_dict(), "nbits": codec.nbits, "num_centroids": codec.num_centroids,
                "sample": sample, "code_dtype": self.code_dtype.name, "token_id_dtype": id_dtype.name,
                "num_pairs": num_pairs, "token_norms": True, "seconds": seconds, **exact, **(extra or {})}
        write_json(folder / CODEC_FILE, info)
        return info


def _fill_lists(pairs_file: Path, out_file: Path, ivf_offsets: np.ndarray, num_pairs: int, chunk: int) -> None:
    """Scatter the spilled (centroid, document) pairs, ``chunk`` at a time, into their lists.

    The writer spilled each chunk's pairs sorted by centroid then document, and later chunks hold later
    documents; a read block, sorted the same way, can only split one centroid's pairs of one writer chunk between
    two blocks, earlier documents first. So every list comes out ascending.
    """
    out = np.memmap(out_file, dtype=np.int32, mode="w+", shape=(num_pairs,))
    pairs = np.memmap(pairs_file, dtype=np.int32, mode="r", shape=(num_pairs, 2))
    cursor = ivf_offsets[:-1].copy()
    for start in range(0, num_pairs, chunk):
        block = np.asarray(pairs[start:start + chunk])
        order = np.lexsort((block[:, 1], block[:, 0]))
        cents, docs = block[order, 0], block[order, 1]
        firsts = np.flatnonzero(np.concatenate([[True], cents[1:] != cents[:-1]]))
        sizes = np.diff(np.append(firsts, len(cents)))
        rank = np.arange(len(cents)) - np.repeat(firsts, sizes)
        out[cursor[cents] + rank] = docs
        cursor[cents[firsts]] += sizes
    out.flush()
    del out


def _narrow_token_ids(folder: Path, name_i32: str, num_tokens: int, chunk: int) -> np.dtype:
    """Rewrite the int32 token ids as uint16 when every id fits; returns the dtype kept."""
    ids = np.memmap(folder / name_i32, dtype=np.int32, mode="r", shape=(num_tokens,))
    fits = all(int(ids[s:s + chunk].min()) >= 0 and int(ids[s:s + chunk].max()) < 1 << 16
               for s in range(0, num_tokens, chunk))
    if not fits:
        return np.dtype(np.int32)
    with open(folder / token_ids_file(np.dtype(np.uint16)), "wb") as out:
        for s in range(0, num_tokens, chunk):
            out.write(np.asarray(ids[s:s + chunk]).astype(np.uint16).tobytes())
    del ids
    (folder / name_i32).unlink()
    return np.dtype(np.uint16)


def load_codec(folder: Path, info: Dict[str, Any], dim: int) -> ResidualCodec:
    """The codec stored in an index folder (``info``: its ``codec.json``)."""
    nbits, num_centroids = int(info["nbits"]), int(info["num_centroids"])
    options = 1 << nbits
    centroids = _read(folder / CENTROIDS_FILE, np.float16, (num_centroids, dim)).astype(np.float32)
    cutoffs = _read(folder / CUTOFFS_FILE, np.float32, (dim, options - 1))
    weights = _read(folder / WEIGHTS_FILE, np.float32, (dim, options))
    return ResidualCodec(centroids, cutoffs, weights, nbits, exact_above=info.get("exact_above"))


def _read(path: Path, dtype: Any, shape: Tuple[int, ...]) -> np.ndarray:
    expected = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if not path.exists() or path.stat().st_size != expected:
        raise ValueError(f"{path} is missing or not {expected} bytes: the compressed index at {path.parent} is "
                         "corrupt")
    return np.fromfile(path, dtype=dtype).reshape(shape)
