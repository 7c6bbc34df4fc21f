"""``TfidfIndex.text_loader()``: PyTerrier's standard text loader over the passages a TF-IDF index stores
(``store_text=True``), so ``pt.text.get_text(tfidf_index, "text")`` adds them to a result frame, as it does for a
Terrier index, an ir_datasets dataset or a pyterrier-dr/pyterrier-pisa index."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from ..frames import EqualByKey, artifact_key, empty_output, require_columns, with_columns
from ..params import Parameters
from ..progress import progress

if TYPE_CHECKING:
    from .tfidf import TfidfIndex

#: passages read per batch (one bar step)
BATCH = 4096


def stored_fields(index: "TfidfIndex", fields: Union[str, List[str], Tuple[str, ...]]) -> Tuple[str, ...]:
    """The fields ``fields`` asks for ("*": all), checked against what ``index`` stores (one text field)."""
    stored = index.meta.text_field
    if stored is None:
        raise ValueError(f"the TF-IDF index at {index.path} stores no text; build it with "
                         "indexer(store_text=True) to load passages from it")
    if isinstance(fields, str):
        fields = (stored,) if fields == "*" else (fields,)
    fields = tuple(fields)
    unknown = [f for f in fields if f != stored]
    if unknown or not fields:
        raise ValueError(f"fields={list(fields)!r}: the TF-IDF index at {index.path} stores the field {stored!r} "
                         "only (ask for it, or '*')")
    return fields


class TfidfTextLoader(EqualByKey, Parameters, pt.Transformer):
    """docno → + the stored passage (column named as the indexed field, e.g. ``text``); other columns kept.

    A docno the index does not hold is an error naming it. Made by ``tfidf_index.text_loader()``, which
    ``pt.text.get_text(tfidf_index, ...)`` calls.
    """

    def __init__(self, index: "TfidfIndex", fields: Union[str, List[str], Tuple[str, ...]] = "*", *,
                 verbose: bool = False):
        self.fields = stored_fields(index, fields)
        self.index, self.verbose = index, verbose

    def _key(self) -> Tuple[Any, ...]:
        return (artifact_key(self.index), self.fields)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"index": self.index, "fields": self.fields, "verbose": self.verbose}

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["docno"], self)
        return list(input_columns) + [f for f in self.fields if f not in input_columns]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["docno"], self)
        if len(inp) == 0:
            return empty_output(inp, list(self.fields))
        codes, unique = pd.factorize(inp["docno"].astype(str))
        ids = np.asarray(self.index.docnos.inv[np.asarray(unique, dtype=str)], dtype=np.int64)
        missing = unique[ids < 0]
        if len(missing):
            raise ValueError(f"{len(missing)} docno(s) are not in the TF-IDF index at {self.index.path}, e.g. "
                             f"{list(missing[:5])}")
        texts: List[str] = []
        bar = progress(total=len(ids), desc="loading text", unit="doc", enabled=self.verbose)
        try:
            for start in range(0, len(ids), BATCH):
                texts.extend(self.index.texts(ids[start:start + BATCH]))
                bar.update(len(ids[start:start + BATCH]))
        finally:
            bar.close()
        column = np.asarray(texts, dtype=object)[codes]
        return with_columns(inp, {f: column for f in self.fields})

    def __repr__(self) -> str:
        return f"{self.index!r}.text_loader()"
