"""``ColBERT``: a loaded encoder, its tensor-level encoding methods, and factories for its PyTerrier transformers."""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..checks import positive_int
from .config import ColBERTConfig

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .encoders import DocEncoder, EmbeddingScorer, QueryEncoder, TextScorer
    from .network import ColBERTModel

#: the trained checkpoint shipped with the package (used by ``from_pretrained()`` when present)
DEFAULT_CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "default"
#: arithmetic of the forward pass on a CPU (``cpu_precision``): ``float32``; ``bfloat16`` autocast (about twice as
#: fast on CPUs with native bf16 matrix instructions, AVX512-BF16 or AMX; emulated elsewhere); ``int8``: the
#: backbone's Linear layers dynamically quantized (fast where int8 dot products are, AVX512-VNNI / AVX-VNNI).
#: Measured speed and quality: docs/app.md, "Encoding speed". ``"auto"`` is also accepted: bfloat16 on a CPU with
#: native bf16 (:func:`native_bf16`), else float32.
CPU_PRECISIONS = ("float32", "bfloat16", "int8")


#: CPU feature flags (as /proc/cpuinfo names them) of native bf16 matrix instructions: AVX512-BF16, AMX-BF16
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def bf16_is_native(flags: Iterable[str]) -> bool:
    """Whether a CPU with these feature flags (/proc/cpuinfo's ``flags``) computes bf16 matrix products natively.

    >>> bf16_is_native(["avx2", "avx512f", "avx512_bf16"]), bf16_is_native(["amx_tile", "amx_bf16"])
    (True, True)
    >>> bf16_is_native(["avx2", "avx512f", "avx512_vnni"]), bf16_is_native([])
    (False, False)
    """
    return not set(BF16_FLAGS).isdisjoint(flags)


def cpu_flags(path: Union[str, Path] = "/proc/cpuinfo") -> Optional[List[str]]:
    """The feature flags of this machine's first CPU in ``path`` (Linux x86's /proc/cpuinfo); None where there is no
    such file or line (other systems)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                name, sep, value = line.partition(":")
                if sep and name.strip() == "flags":
                    return value.split()
    except OSError:
        return None
    return None


def native_bf16() -> bool:
    """Whether this CPU has bf16 matrix instructions (AVX512-BF16 or AMX), which make bfloat16 encoding fast:
    :func:`bf16_is_native` of /proc/cpuinfo's flags, or where there are none, torch's own capability query."""
    flags = cpu_flags()
    if flags is not None:
        return bf16_is_native(flags)
    import torch

    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(bool(check()) for check in checks if check is not None)


def query_precision(passages: str) -> str:
    """The ``cpu_precision`` to encode queries in for passages encoded in ``passages`` (a search folder's recorded
    ``precision``: ``float32``, ``bfloat16``, ``int8``, or e.g. ``cuda bfloat16``): ``"auto"`` (bfloat16 on a CPU
    with native bf16, else float32) for bfloat16 passages, where bf16 queries were measured faster with the same
    top 10 (docs/app.md, "Query latency"); else ``"float32"`` (int8 is less accurate, and float32 passages keep
    float32 queries).

    >>> query_precision("bfloat16"), query_precision("cuda bfloat16"), query_precision("int8")
    ('auto', 'auto', 'float32')
    """
    return "auto" if passages.split()[-1:] == ["bfloat16"] else "float32"


@dataclass
class DocBatch:
    """One encoded batch of documents: ``positions`` index into the texts given to :meth:`ColBERT.doc_batches`."""

    positions: np.ndarray          # [b] where these documents were in the input
    embs: "torch.Tensor"           # [b, L, d] (float32 on CPU, or the device's dtype)
    mask: "torch.Tensor"           # [b, L] True = the token scores (not padding, not skipped punctuation)
    input_ids: np.ndarray          # [b, L]
    offsets: Optional[List[np.ndarray]] = None

    def per_document(self) -> Iterator[Tuple[int, np.ndarray, np.ndarray]]:
        """(position, vectors [n, d] float32, token ids [n]) of each document, scoring tokens only."""
        embs = self.embs.float().cpu().numpy()
        mask = self.mask.cpu().numpy()
        for row, pos in enumerate(self.positions):
            keep = mask[row]
            yield int(pos), embs[row][keep], self.input_ids[row][keep]


def check_device(device: "torch.device", asked: Optional[str]) -> None:
    """A clear error for a device this torch cannot use (``device="cuda"`` on a CPU-only build), naming it and
    what is available."""
    import torch

    if device.type != "cuda":
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0 or (device.index is not None and device.index >= count):
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        available = ["cpu", *(f"cuda:{i}" for i in range(count))]
        raise ValueError(f"device={asked!r}, but this torch {torch.__version__} ({build}) sees "
                         f"{count} CUDA device(s); available: {', '.join(available)}")


@dataclass
class EncodeStats:
    """The documents a :class:`ColBERT` has encoded, counted by the encoder itself as it works
    (``colbert.encode_stats``): the hook to measure encoding by, whichever public method (``encode_pieces``,
    ``doc_batches``, ``piece_batches``, ``encode_docs``, the transformers) the work went through. Queries are not
    counted. Cumulative since the encoder was made; ``colbert.encode_stats.copy()`` before some work and
    ``colbert.encode_stats - before`` after it give that work's share.

    ``texts``: documents encoded (a long text read as several windows counts once); ``sequences``: model inputs
    (one per text, or per window); ``batches``: forward passes; ``forward_seconds``: wall time in them (on a GPU the
    time to queue them, as the device runs asynchronously; the results are waited for when they are read).

    >>> EncodeStats(texts=3, sequences=5, batches=1, forward_seconds=0.5) - EncodeStats(texts=1, sequences=2)
    EncodeStats(texts=2, sequences=3, batches=1, forward_seconds=0.5)
    """

    texts: int = 0
    sequences: int = 0
    batches: int = 0
    forward_seconds: float = 0.0

    def copy(self) -> "EncodeStats":
        return replace(self)

    def __sub__(self, other: "EncodeStats") -> "EncodeStats":
        return EncodeStats(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})


class ColBERT:
    """A ColBERT encoder: ``query_encoder()``, ``doc_encoder()``, ``text_scorer()``, ``scorer()``.

    Explanations: ``pfc.Explainer(colbert)`` (the explain part builds on the model, not the other way round).

    ``device``: ``None`` picks CUDA when available, else CPU. On CUDA, encoding runs under autocast
    (``amp_dtype``, bfloat16 by default); on CPU in ``cpu_precision`` (:data:`CPU_PRECISIONS`; float32 by default:
    fp16 weights are several times slower there; ``"auto"``: bfloat16 where the CPU has native bf16, else float32).
    ``cpu_precision`` is an encoding setting, not part of the weights: the fingerprint (which an index checks
    against its queries' encoder) stays that of the weights.
    """

    def __init__(self, model, tokenizer, *, device: Optional[str] = None, batch_size: int = 64,
                 verbose: bool = False, amp_dtype: Optional[str] = "bfloat16", cpu_precision: str = "float32"):
        import torch

        positive_int("batch_size", batch_size, what="texts per batch")
        if cpu_precision not in (*CPU_PRECISIONS, "auto"):
            raise ValueError(f"cpu_precision={cpu_precision!r}; expected one of {CPU_PRECISIONS} or 'auto'")
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if cpu_precision == "auto":
            cpu_precision = "bfloat16" if self.device.type == "cpu" and native_bf16() else "float32"
        if cpu_precision != "float32" and self.device.type != "cpu":
            raise ValueError(f"cpu_precision={cpu_precision!r} sets the arithmetic of encoding on a CPU, but the "
                             f"device is {self.device}; there amp_dtype sets it")
        check_device(self.device, device)  # after the settings' own checks, before the model moves there
        self.cpu_precision = cpu_precision
        self._int8_model: Optional["ColBERTModel"] = None  # the int8 inference copy, made on first use
        #: the bfloat16 inference copy and the versions of the weights it was made from (:meth:`_bf16`)
        self._bf16_model: Optional[Tuple["ColBERTModel", List["torch.nn.Parameter"], Tuple[int, ...]]] = None
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.verbose = verbose
        self.amp_dtype = getattr(torch, amp_dtype) if amp_dtype else None
        self._fingerprint: Optional[str] = None
        #: what this encoder has encoded, counted as it works (:class:`EncodeStats`)
        self.encode_stats = EncodeStats()

    # -- loading and saving --------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: Optional[Union[str, Path]] = None, *, config: Optional[ColBERTConfig] = None,
                        seed: int = 0, unchecked: bool = False, inference_only: bool = False,
                        query_maxlen: Optional[int] = None, doc_maxlen: Optional[int] = None,
                        **kwargs) -> "ColBERT":
        """Load a checkpoint folder, or start a fresh ColBERT from a backbone folder (or hub id, if online).

        Checkpoints may be this package's, colbert-ai's (ColBERTv2) or PyLate's (see ``formats``). With no
        ``path``: the package's trained default checkpoint if it is installed, else a fresh model over the
        bundled all-MiniLM-L6-v2 backbone. ``config`` only applies to fresh models. This package's checkpoints
        are checked against their ``manifest.json`` as they load; one without a manifest (saved before manifests
        existed) is refused unless ``unchecked=True`` (then loaded with a warning). ``inference_only=True``
        reads a BERT backbone of this package's checkpoints without transformers' model classes (about 2 s less
        CPU to load; same vectors and fingerprint), for a model that is only used to encode, never trained or
        saved (:mod:`.light_bert`). ``query_maxlen`` / ``doc_maxlen`` (word pieces per query / per document
        window) set those of the config, for a checkpoint too (its vectors, and so its fingerprint, change with
        them).
        """
        from dataclasses import replace

        from . import formats
        from . import network as m

        given = (("query_maxlen", query_maxlen), ("doc_maxlen", doc_maxlen))
        lengths: Dict[str, Any] = {name: value for name, value in given if value is not None}
        for name, value in lengths.items():
            positive_int(name, value, what="word pieces")

        if path is None and DEFAULT_CHECKPOINT.exists() and config is None:
            path = DEFAULT_CHECKPOINT
        source = formats.resolve(path) if path is not None else None
        kind = formats.detect(source) if source is not None else None
        if source is not None and kind is not None:  # kind is None without a source
            if config is not None:
                raise ValueError(f"{path} is a {kind} checkpoint with its own settings; config= applies only "
                                 "to fresh models built over a backbone")
            if kind == "pfc" and (unchecked or inference_only):
                net, tok = m.load(source, unchecked=unchecked, light=inference_only)
            else:
                net, tok = formats.load(source, kind)
        else:
            if path is not None and Path(path).exists() and not (Path(path) / "config.json").exists():
                raise FileNotFoundError(f"{path} is neither a ColBERT checkpoint (no colbert_config.json) nor a "
                                        "transformers model folder (no config.json)")
            net, tok = m.build(str(path) if path is not None else None,
                               replace(config or ColBERTConfig(), **lengths), seed=seed)
        if lengths and net.config != replace(net.config, **lengths):  # a checkpoint's own config
            net.config = replace(net.config, **lengths)
            m.check_positions(net.backbone, net.config)
            tok = type(tok)(tok.hf, net.config)
        return cls(net, tok, **kwargs)

    def save_pretrained(self, folder: Union[str, Path], dtype: Optional[str] = None, format: str = "pfc") -> Path:
        """Write a checkpoint folder that :meth:`from_pretrained` loads (``dtype='float16'`` halves it);
        ``format="colbert-ai"`` or ``"pylate"`` writes one those libraries load (an error names any setting
        they cannot represent)."""
        import torch

        from . import formats

        return formats.save(self.model, self.tokenizer, folder, format, dtype=getattr(torch, dtype) if dtype else None)

    @staticmethod
    def verify(folder: Union[str, Path], unchecked: bool = False) -> dict:
        """Full content check of a checkpoint folder (every file's checksum, every weight finite), naming any
        damaged file; see :func:`~pyterrier_fandom_colbert.model.network.verify_checkpoint`."""
        from . import network as m

        return m.verify_checkpoint(folder, unchecked)

    @property
    def config(self) -> ColBERTConfig:
        return self.model.config

    def fingerprint(self) -> str:
        """Identity of config + weights; an index built by one encoder refuses queries from another."""
        from . import network as m

        if self._fingerprint is None:
            self._fingerprint = m.fingerprint(self.model)
        return self._fingerprint

    def weights_changed(self) -> None:
        """Say that the weights were modified in place (training does): the fingerprint is computed afresh."""
        self._fingerprint = None
        self._int8_model = None
        self._bf16_model = None

    def encoding_key(self) -> Tuple[str, str]:
        """What decides the vectors this encoder computes (for transformer equality and caching): the weights'
        fingerprint and the CPU precision."""
        return self.fingerprint(), self.cpu_precision

    # -- tensors -------------------------------------------------------------------------------------------
    def _forward(self, batch, on_layer: Optional[Callable[[], None]] = None) -> "torch.Tensor":
        """Token vectors ``[B, L, dim]`` of a tokenised batch; ``on_layer()`` after each encoder layer."""
        import torch

        ids = torch.as_tensor(batch.input_ids, device=self.device)
        attn = torch.as_tensor(batch.attention_mask, device=self.device)
        if self.device.type == "cpu" and self.cpu_precision == "bfloat16":
            model = self._bf16()
            with torch.inference_mode():
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    hidden = model.hidden(ids, attn, on_layer)
                return model.head(hidden.float())  # the projection and normalisation in float32
        model = self.model
        if self.cpu_precision == "int8":
            from .network import int8_copy

            if self._int8_model is None:
                self._int8_model = int8_copy(self.model)
            model = self._int8_model
        with torch.inference_mode(), torch.autocast(self.device.type, dtype=self.amp_dtype,
                                                    enabled=self.device.type == "cuda" and self.amp_dtype is not None):
            return model(ids, attn, on_layer)

    def _bf16(self) -> "ColBERTModel":
        """The model with its backbone's Linear weights kept in bfloat16 (:func:`~.network.bf16_copy`: the same
        vectors under autocast, without rounding every weight again per forward pass), made on first use and again
        when those weights have changed in place (training)."""
        from .network import bf16_copy, bf16_linears

        if self._bf16_model is not None:
            copy, sources, versions = self._bf16_model
            if tuple(p._version for p in sources) == versions:
                return copy
        sources = bf16_linears(self.model)
        self._bf16_model = (bf16_copy(self.model), sources, tuple(p._version for p in sources))
        return self._bf16_model[0]

    def encode_queries(self, texts: Sequence[str], with_ids: bool = False) -> Tuple:
        """Query vectors ``[B, N_q, d]`` and their score mask ``[B, N_q]`` (False for unscored [MASK]s); with
        ``with_ids``, also the token ids ``[B, N_q]`` (a numpy array) they were computed from."""
        import torch

        embs, masks, ids = [], [], []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer.queries(texts[start:start + self.batch_size])
            embs.append(self._forward(batch).float())
            masks.append(torch.as_tensor(batch.score_mask, device=self.device))
            ids.append(np.asarray(batch.input_ids))
        if not embs:
            n = self.config.query_maxlen
            empty = (torch.zeros(0, n, self.config.dim, device=self.device),
                     torch.zeros(0, n, dtype=torch.bool, device=self.device))
            return (*empty, np.zeros((0, n), dtype=np.int64)) if with_ids else empty
        out = (torch.cat(embs), torch.cat(masks))
        return (*out, np.concatenate(ids)) if with_ids else out

    def doc_batches(self, texts: Sequence[str], offsets: bool = False, chunk: int = 8) -> Iterator[DocBatch]:
        """Encode documents in length-bucketed batches (``chunk`` batches are tokenised and sorted at once).

        Memory is bounded by a few chunks of ``chunk * batch_size`` texts. The next chunk is tokenised in
        a background thread, and each batch is handed out only after the next one has been queued on the
        device, so on a GPU neither tokenisation nor the consumer's work leaves it idle.
        """
        span = max(1, chunk) * self.batch_size
        return self._encode_chunks(self._tokenised_chunks(texts, span, offsets), len(texts), offsets)

    def piece_batches(self, pieces: Sequence[Sequence[int]], chunk: int = 8) -> Iterator[DocBatch]:
        """:meth:`doc_batches` for texts already split into word pieces (no special tokens), e.g. windows of a
        long text (``tokenizer.document_pieces`` and ``tokenization.windows``); longer ones are cut to
        ``doc_maxlen - 3`` pieces as texts are."""
        span = max(1, chunk) * self.batch_size
        cut = self.tokenizer.max_doc_pieces
        chunks = ((start, [list(p[:cut]) for p in pieces[start:start + span]], None)
                  for start in range(0, len(pieces), span))
        return self._encode_chunks(chunks, len(pieces), False)

    def encode_pieces(self, pieces: Sequence[Sequence[int]], stride: Optional[int] = None,
                      done: Optional[Callable[[float], None]] = None, dtype: Any = np.float32
                      ) -> List[Tuple[np.ndarray, np.ndarray, List[int]]]:
        """``(vectors [n, d] dtype, token ids [n], rows per window)`` of each text given as word pieces
        (``tokenizer.document_pieces``), in input order, scoring tokens only.

        ``dtype`` (float32 by default; float16 where the vectors are stored in fp16) is applied to each window's
        vectors as its model batch ends: the same values as converting the float32 result, without holding a
        float32 copy of every text of the call (an index build's chunk: docs/results.md, "Build memory: a chunk's
        end").

        ``stride=None``: a text's first ``doc_maxlen - 3`` pieces, one window. A stride: the whole text, as windows
        of ``doc_maxlen - 3`` pieces starting every ``stride`` pieces (:func:`~.tokenization.windows`), each
        encoded on its own as ``[CLS] [D] … [SEP]``, their rows back to back. All the windows are length-bucketed
        at once, so hold a bounded number of texts per call. ``done(x)`` is called as the work goes, after each
        encoder layer of each model batch, with the number of texts' worth of work that layer did (a fraction: a
        text of three windows counts a third per window); the calls add up to ``len(pieces)``, so a progress bar
        fed by them moves several times per batch (:class:`~pyterrier_fandom_colbert.progress.Ticker`). A window
        whose pieces repeat another's in the same call is encoded once (``encode_stats.sequences`` counts it once),
        and each gets those vectors.
        """
        from .tokenization import windows

        size = self.tokenizer.max_doc_pieces
        spans = [windows(len(p), size, stride) if stride is not None else [(0, len(p))] for p in pieces]
        cut = self.tokenizer.max_doc_pieces
        parts = [list(p[a:b][:cut]) for p, w in zip(pieces, spans) for a, b in w]
        # a window whose pieces repeat an earlier one's (boilerplate, copied paragraphs) is encoded once: its
        # vectors depend on its pieces alone
        first: Dict[Tuple[int, ...], int] = {}
        slot = np.array([first.setdefault(tuple(p), len(first)) for p in parts], dtype=np.int64)
        unique = [parts[i] for i in np.unique(slot, return_index=True)[1]]
        bounds = np.cumsum([0] + [len(w) for w in spans])
        counts = np.array([len(w) for w in spans], dtype=np.int64)
        weights = np.repeat(1.0 / np.maximum(counts, 1), counts)  # each window's share of its text
        # every slot is filled by the batches below (each distinct window is in one batch)
        encoded: List[Tuple[np.ndarray, np.ndarray]] = [None] * len(unique)  # type: ignore[list-item]
        chunks = [(0, unique, None)]  # all the distinct windows length-sorted at once
        shares = np.bincount(slot, weights=weights, minlength=len(unique))  # a repeat's share goes to its first
        for batch in self._encode_chunks(chunks, len(unique), False, step=done, weights=shares):
            for pos, vecs, ids in batch.per_document():
                encoded[pos] = (vecs.astype(dtype, copy=False), ids)
        used = np.zeros(len(unique), dtype=bool)
        windows_out: List[Tuple[np.ndarray, np.ndarray]] = []
        for j in slot:  # a repeat gets its own copy of the vectors
            windows_out.append(encoded[j] if not used[j] else (encoded[j][0].copy(), encoded[j][1].copy()))
            used[j] = True
        out = []
        for start, end in itertools.pairwise(bounds):
            own = windows_out[start:end]
            out.append((np.concatenate([v for v, _ in own]) if len(own) > 1 else own[0][0],
                        np.concatenate([i for _, i in own]) if len(own) > 1 else own[0][1],
                        [len(v) for v, _ in own]))
        self.encode_stats.texts += len(pieces)  # the windows were counted as sequences
        return out

    def _encode_chunks(self, chunks, total: int, offsets: bool, step: Optional[Callable[[float], None]] = None,
                       weights: Optional[np.ndarray] = None) -> Iterator[DocBatch]:
        """Encode ``(start, content ids, offsets)`` chunks in length-sorted batches (see :meth:`doc_batches`).

        The bar (``verbose``) moves after every encoder layer, by the layer's share of the batch's documents, so
        it updates several times per batch however long a batch takes. ``step(x)``, when given, is called at the
        same moments with the layer's share of the batch's ``weights`` (one per text; None: 1 each), and the
        calls of one batch add up to its weight. Each batch is counted in ``encode_stats`` (as texts too when
        ``weights`` is None: each sequence a text; else the caller counts its texts)."""
        import torch

        from ..progress import Ticker, progress

        bar = progress(total=total, desc="encoding documents", unit="doc", enabled=self.verbose)
        ticker = Ticker(bar)
        layers = max(1, self.model.num_layers())
        pending: Optional[DocBatch] = None
        encoded = 0
        try:
            for start, content, offs in chunks:
                order = np.argsort([len(c) for c in content], kind="stable")
                for b in range(0, len(order), self.batch_size):
                    sel = order[b:b + self.batch_size]
                    packed = self.tokenizer.pack_documents([content[i] for i in sel],
                                                           [offs[i] for i in sel] if offsets else None)
                    weight = float(len(sel) if weights is None else weights[sel + start].sum())
                    reported = [0.0]

                    def on_layer(n: int = len(sel), weight: float = weight, reported: List[float] = reported):
                        ticker.add(n / layers)
                        if step is not None and reported[0] < weight:
                            share = min(weight / layers, weight - reported[0])
                            reported[0] += share
                            step(share)

                    began = time.perf_counter()
                    embs = self._forward(packed, on_layer)
                    stats = self.encode_stats
                    stats.forward_seconds += time.perf_counter() - began
                    stats.batches += 1
                    stats.sequences += len(sel)
                    stats.texts += len(sel) if weights is None else 0
                    if step is not None and weight - reported[0] > 1e-9:  # a backbone whose layers are not seen
                        step(weight - reported[0])
                    encoded += len(sel)
                    ticker.settle(encoded)
                    mask = torch.as_tensor(packed.score_mask, device=self.device)
                    if pending is not None:
                        yield pending
                    pending = DocBatch(sel + start, embs, mask, packed.input_ids, packed.offsets)
            if pending is not None:
                yield pending
        finally:
            bar.close()

    def _tokenised_chunks(self, texts: Sequence[str], span: int, offsets: bool):
        """(start, content ids, offsets) per chunk of ``span`` texts; chunk i+1 is tokenised while i is used."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=1) as pool:
            future, at = None, 0
            for start in range(0, len(texts), span):
                following = pool.submit(self.tokenizer.document_content, list(texts[start:start + span]), offsets)
                if future is not None:
                    yield (at, *future.result())
                future, at = following, start
            if future is not None:
                yield (at, *future.result())

    def encode_docs(self, texts: Sequence[str]) -> List[np.ndarray]:
        """Per document, its scoring token vectors ``[n, d]`` as float32 arrays, in input order."""
        out: List[Optional[np.ndarray]] = [None] * len(texts)
        for batch in self.doc_batches(texts):
            for pos, vecs, _ in batch.per_document():
                out[pos] = vecs
        return out  # type: ignore[return-value]  # every position filled: the batches cover each text

    # -- PyTerrier transformers ----------------------------------------------------------------------------
    def query_encoder(self, *, strict: bool = False, batch_size: Optional[int] = None,
                      verbose: Optional[bool] = None) -> "QueryEncoder":
        """qid, query → + query_embs (``[N_q, d]`` float32), query_toks. Empty or non-text queries get no rows and
        one warning naming their qids (``strict=True``: an error). ``batch_size`` (queries per forward pass) and
        ``verbose`` (a progress bar): None, the model's."""
        from .encoders import QueryEncoder

        return QueryEncoder(self, strict=strict, batch_size=batch_size, verbose=verbose)

    def doc_encoder(self) -> "DocEncoder":
        """docno, text → + doc_embs (``[L_d, d]`` float32), doc_toks."""
        from .encoders import DocEncoder

        return DocEncoder(self)

    def text_scorer(self, *, strict: bool = False, long_docs: str = "windows", stride: Optional[int] = None,
                    text_field: str = "text", batch_size: Optional[int] = None,
                    verbose: Optional[bool] = None) -> "TextScorer":
        """qid, query, docno, text → + score, rank (MaxSim of freshly encoded texts). Empty or non-text queries get
        no rows and one warning (``strict=True``: an error). Long texts are read whole as overlapping windows
        (``long_docs="windows"``, ``stride`` pieces apart, default two thirds of a window), as the indexer stores
        them, or truncated (``long_docs="truncate"``). ``text_field``: the passage column; ``batch_size`` (texts
        per forward pass) and ``verbose`` (progress bars): None, the model's. Use it for documents that are not in
        an index; for indexed ones ``index.scorer()`` gives the same scores from stored vectors, far faster."""
        from .encoders import TextScorer

        return TextScorer(self, text_field, strict=strict, long_docs=long_docs, stride=stride, batch_size=batch_size,
                          verbose=verbose)

    def scorer(self) -> "EmbeddingScorer":
        """query_embs, doc_embs → + score, rank (for frames already encoded)."""
        from .encoders import EmbeddingScorer

        return EmbeddingScorer(self.config)

    def __getstate__(self) -> Dict[str, Any]:
        """Pickled and copied without the inference copies (derived from the weights, made again on first use; the
        bf16 copy's packed weights cannot be pickled)."""
        return {**self.__dict__, "_int8_model": None, "_bf16_model": None}

    def __repr__(self) -> str:
        precision = f", cpu_precision={self.cpu_precision!r}" if self.cpu_precision != "float32" else ""
        return (f"ColBERT(dim={self.config.dim}, similarity={self.config.similarity!r}, device={self.device.type!r}"
                f"{precision})")
