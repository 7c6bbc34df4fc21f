"""``Reader``: a PyTerrier transformer that finds the answer to each query in its retrieved passages.

    pipeline = retriever % 5 >> pt.text.get_text(dataset, "text") >> pfc.Reader()                # per passage
    qa = retriever % 5 >> pt.text.get_text(dataset, "text") >> pfc.Reader(per_query=True)         # per query

Per passage (the default), each row ``qid, query, docno, text`` gets ``answer`` (the best span's text),
``answer_start``/``answer_end`` (its character offsets; ``-1`` for a passage with no text), ``answer_score`` (the
reader's margin over "no answer") and ``answer_confidence`` (the calibrated probability that the answer is
right, :mod:`.calibration`, from the margin and the passage's rank: the ``rank`` column where the frame has
one, else its position among its query's rows). With ``per_query=True`` each query gives one row: the answer of
highest confidence among its passages as ``qanswer`` (the column pyterrier-rag's readers and measures use), the
``docno`` it comes from, its offsets, score and confidence, and ``nothing_relevant`` (confidence below the
calibration's threshold).
"""
from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from ..checks import int_in_range
from ..frames import EqualByKey, check_texts, empty_output, require_columns, usable_query_rows, with_columns
from ..params import Parameters
from ..progress import progress
from .calibration import ReaderCalibration

PASSAGE_COLUMNS = ["answer", "answer_start", "answer_end", "answer_score", "answer_confidence"]
QUERY_COLUMNS = ["qid", "query", "qanswer", "docno", "answer_start", "answer_end", "answer_score",
                 "answer_confidence", "nothing_relevant"]
#: the reader shipped with the package
DEFAULT_READER = Path(__file__).resolve().parent / "default"
PRECISIONS = ("float32", "bfloat16")


@functools.lru_cache(maxsize=4)
def _load(path: str) -> Tuple[Any, Any, Optional[ReaderCalibration]]:
    return _load_reader(path)


def _load_reader(path: str, colbert: Any = None) -> Tuple[Any, Any, Optional[ReaderCalibration]]:
    """The reader folder's model, tokenizer and calibration; over ``colbert``'s backbone and tokenizer where they
    are the reader's base's (:func:`.network.shares_base`, :func:`shares_tokenizer`), else loaded."""
    from .network import CALIBRATION_FILE, load_reader, load_tokenizer

    model = load_reader(path, shared_base=colbert.model.backbone if colbert is not None else None)
    hf = colbert.tokenizer.hf if colbert is not None else None
    tokenizer = hf if hf is not None and shares_tokenizer(hf, model.config.base) else \
        load_tokenizer(model.config.base, light=True)
    calibration_path = Path(path) / CALIBRATION_FILE
    calibration = ReaderCalibration.load_json(calibration_path) if calibration_path.is_file() else None
    return model, tokenizer, calibration


def shares_tokenizer(hf_tokenizer: Any, base: str) -> bool:
    """Whether a loaded fast tokenizer is the reader's base's: loaded from the base's folder, with no token added
    since (what ``load_tokenizer(base)`` would give)."""
    from .network import base_folder

    source = getattr(hf_tokenizer, "name_or_path", "")
    try:
        same = bool(source) and Path(source).resolve() == base_folder(base).resolve()
    except (OSError, RuntimeError, TypeError):
        return False
    return same and len(hf_tokenizer) == hf_tokenizer.vocab_size


def passage_ranks(frame: pd.DataFrame) -> np.ndarray:
    """Each row's 0-based rank among its query's rows: the ``rank`` column where there is one (PyTerrier's,
    0-based), else the row's position among its query's rows in frame order.

    >>> passage_ranks(pd.DataFrame({"qid": ["a", "b", "a"], "docno": ["x", "y", "z"]})).tolist()
    [0, 0, 1]
    >>> passage_ranks(pd.DataFrame({"qid": ["a", "a"], "rank": [4, 2]})).tolist()
    [4, 2]
    """
    if "rank" in frame.columns:
        ranks = pd.to_numeric(frame["rank"], errors="coerce").to_numpy(dtype=np.float64)
        good = np.isfinite(ranks) & (ranks >= 0) & (ranks == np.floor(ranks))
        if not good.all():
            bad = frame["rank"].tolist()[int(np.flatnonzero(~good)[0])]
            raise ValueError(f"rank column: {bad!r} is not a rank (expected whole numbers >= 0, 0 for a query's "
                             "first result)")
        return ranks.astype(np.int64)
    return frame.groupby("qid", sort=False).cumcount().to_numpy(dtype=np.int64)


class Reader(EqualByKey, Parameters, pt.Transformer):
    """qid, query, docno, text → + answer span per passage, or one ``qanswer`` row per query (module notes).

    ``reader``: a reader folder (default: the one shipped with the package); ``batch_size``: windows per
    forward pass; ``precision``: ``"float32"`` or ``"bfloat16"`` (faster on CPUs with native bf16);
    ``calibration``: the confidence map (default: the reader folder's ``calibration.json``); ``colbert``: a loaded
    :class:`~pyterrier_fandom_colbert.ColBERT` whose backbone and tokenizer the reader uses instead of loading its
    base again, where they are that base (bit-identical lower layers, :func:`.network.shares_base`; ``shared``
    says whether they were), with the same answers.
    Rows of empty queries are left out with a warning (``strict=True``: an error), as by every retriever.
    """

    def __init__(self, reader: Union[str, Path, None] = None, *, per_query: bool = False, text_field: str = "text",
                 batch_size: int = 16, precision: str = "float32",
                 calibration: Optional[ReaderCalibration] = None, verbose: bool = False, strict: bool = False,
                 colbert: Any = None):
        self.reader = Path(reader).resolve() if reader is not None else DEFAULT_READER
        if not (self.reader / "reader_config.json").is_file():
            raise FileNotFoundError(f"reader={str(reader)!r}: {self.reader} is not a reader folder "
                                    "(reader_config.json not found)")
        self.per_query = bool(per_query)
        self.text_field = text_field
        self.batch_size = int_in_range("batch_size", batch_size, 1)
        if precision not in PRECISIONS:
            raise ValueError(f"precision={precision!r}; expected one of {PRECISIONS}")
        self.precision = precision
        if calibration is not None and not isinstance(calibration, ReaderCalibration):
            raise TypeError(f"calibration={calibration!r}; expected an ReaderCalibration or None")
        self._calibration = calibration
        self.verbose = verbose
        self.strict = strict
        self.colbert = colbert
        self._over_colbert: Optional[Tuple[Any, Any, Optional[ReaderCalibration]]] = None  # loaded with colbert

    def _key(self):
        return (str(self.reader), self.per_query, self.text_field, self.precision, self._calibration, self.strict)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"reader": None if self.reader == DEFAULT_READER else self.reader, "per_query": self.per_query,
                "text_field": self.text_field, "batch_size": self.batch_size, "precision": self.precision,
                "calibration": self._calibration, "verbose": self.verbose, "strict": self.strict,
                "colbert": self.colbert}

    def __repr__(self) -> str:
        where = "default" if self.reader == DEFAULT_READER else str(self.reader)
        return f"Reader({where!r}, per_query={self.per_query})"

    def _loaded(self) -> Tuple[Any, Any, Optional[ReaderCalibration]]:
        """The model, tokenizer and calibration (loaded on first use; shared by readers of the same folder, or
        this reader's own when it was given a ColBERT, which the loaded model may hold on to)."""
        if self.colbert is None:
            return _load(str(self.reader))
        if self._over_colbert is None:
            self._over_colbert = _load_reader(str(self.reader), self.colbert)
        return self._over_colbert

    @property
    def shared(self) -> bool:
        """Whether the reader runs its lower layers on ``colbert``'s backbone (loaded now when it was not)."""
        return bool(self._loaded()[0].shared)

    @property
    def calibration(self) -> Optional[ReaderCalibration]:
        return self._calibration if self._calibration is not None else self._loaded()[2]

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["qid", "query", "docno", self.text_field], self)
        if self.per_query:
            return list(QUERY_COLUMNS)
        return list(input_columns) + [c for c in PASSAGE_COLUMNS if c not in input_columns]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["qid", "query", "docno", self.text_field], self)
        inp = usable_query_rows(inp, strict=self.strict, context=self)
        if len(inp) == 0:
            if self.per_query:
                return pd.DataFrame({c: [] for c in QUERY_COLUMNS})
            return empty_output(inp, PASSAGE_COLUMNS)
        texts = check_texts(inp, self.text_field)
        spans, confidence = self.read(inp["query"].tolist(), texts, passage_ranks(inp))
        answers = [t[s:e] if s >= 0 else "" for t, s, e in zip(texts, spans.start, spans.end)]
        out = with_columns(inp, {"answer": answers, "answer_start": spans.start, "answer_end": spans.end,
                                 "answer_score": spans.margin, "answer_confidence": confidence})
        return self._per_query(out) if self.per_query else out

    def read(self, queries: List[str], texts: List[str],
             ranks: Optional[np.ndarray] = None) -> Tuple[Any, np.ndarray]:
        """The reader's spans (:class:`.reading.ReadSpans`) and confidences for aligned queries and texts, each text
        at ``ranks`` (0-based) among its question's results (None: each its question's first)."""
        import torch

        from .reading import read_pairs

        model, tokenizer, _ = self._loaded()
        amp = torch.bfloat16 if self.precision == "bfloat16" else None
        bar = progress(total=len(texts), desc="reading", unit="passage", enabled=self.verbose)
        try:
            spans = read_pairs(model, tokenizer, queries, texts, batch_size=self.batch_size, amp_dtype=amp,
                               on_batch=bar.update)
        finally:
            bar.close()
        return spans, self.confidence(spans.margin, ranks)

    def confidence(self, margin: np.ndarray, ranks: Optional[np.ndarray] = None) -> np.ndarray:
        """Calibrated probabilities for reader margins of passages at ``ranks`` (0-based; None: each its question's
        first); NaN (with a warning) for an uncalibrated reader."""
        calibration = self.calibration
        margin = np.asarray(margin, dtype=np.float64)
        if calibration is None:
            warnings.warn(f"the reader at {self.reader} has no calibration.json: answer_confidence is NaN; fit "
                          "one with benchmarks/reader_eval.py or pass calibration=", stacklevel=3)
            return np.full(len(margin), np.nan)
        out = calibration.probability(np.where(np.isfinite(margin), margin, -1e9), ranks)
        return np.where(np.isfinite(margin), out, 0.0)

    def _per_query(self, rows: pd.DataFrame) -> pd.DataFrame:
        threshold = self.calibration.threshold if self.calibration is not None else np.nan
        order = rows.assign(_rank=np.arange(len(rows)), _conf=rows["answer_confidence"].fillna(-1.0),
                            _score=rows["answer_score"])
        order = order.sort_values(["qid", "_conf", "_score", "_rank"], ascending=[True, False, False, True],
                                  kind="stable")
        best = order.drop_duplicates("qid", keep="first").sort_values("_rank")
        return pd.DataFrame({
            "qid": best["qid"].to_numpy(), "query": best["query"].to_numpy(),
            "qanswer": best["answer"].to_numpy(), "docno": best["docno"].to_numpy(),
            "answer_start": best["answer_start"].to_numpy(), "answer_end": best["answer_end"].to_numpy(),
            "answer_score": best["answer_score"].to_numpy(), "answer_confidence": best["answer_confidence"].to_numpy(),
            "nothing_relevant": ~(best["answer_confidence"].to_numpy() >= threshold)})
