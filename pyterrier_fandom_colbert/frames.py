"""Small DataFrame helpers shared by the transformers: column checks with actionable errors, ranking."""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence

import pandas as pd
import pyterrier as pt

#: how to obtain a column a transformer needs, shown when it is missing
COLUMN_HINTS: Dict[str, str] = {
    "text": "add the passage text first, e.g. `retriever >> pt.text.get_text(dataset, 'text') >> scorer`, "
            "or ask the first stage for text (TfidfIndex.retriever(text=True))",
    "query": "use a query frame with columns qid and query (e.g. dataset.get_topics())",
    "query_embs": "encode queries first: `colbert.query_encoder() >> ...`",
    "doc_embs": "encode documents first: `... >> colbert.doc_encoder() >> ...`",
}


def require_columns(columns: Iterable[str], required: Sequence[str], context: Optional[pt.Transformer] = None) -> None:
    """Raise PyTerrier's InputValidationError naming the missing columns and how to add them."""
    columns = list(columns)
    try:
        pt.validate.columns(columns, includes=list(required), context=context)
    except pt.validate.InputValidationError as err:
        missing = [c for c in required if c not in columns]
        hints = "; ".join(f"'{c}': {COLUMN_HINTS[c]}" for c in missing if c in COLUMN_HINTS)
        message = f"{context or 'transformer'} needs column(s) {missing}, but the input has {columns}."
        if hints:
            message += f" To add them: {hints}."
        raise pt.validate.InputValidationError(message, err.modes) from None


def with_columns(inp: pd.DataFrame, new: Dict[str, object]) -> pd.DataFrame:
    """A copy of ``inp`` with the given columns set (replacing same-named ones), other columns kept."""
    out = inp.copy()
    for name, values in new.items():
        out[name] = values
    return out


def empty_output(inp: pd.DataFrame, new_columns: List[str]) -> pd.DataFrame:
    """The empty frame a transformer returns for empty input: input columns plus its declared outputs."""
    out = inp.copy()
    for col in new_columns:
        if col not in out.columns:
            out[col] = pd.Series(dtype="float64" if col == "score" else ("int64" if col == "rank" else object))
    return out


def rank_by_score(frame: pd.DataFrame) -> pd.DataFrame:
    """Group by qid (in order of first appearance), sort by score descending (docno breaks ties), set ``rank``
    from 0."""
    order = pd.Series(pd.factorize(frame["qid"])[0], index=frame.index, name="_qorder")
    keys = ["_qorder", "score"] + (["docno"] if "docno" in frame.columns else [])
    out = frame.assign(_qorder=order).sort_values(keys, ascending=[True, False] + [True] * (len(keys) - 2),
                                                   kind="stable")
    out = out.drop(columns="_qorder").reset_index(drop=True)
    out["rank"] = out.groupby("qid", sort=False).cumcount().astype("int64")
    return out
