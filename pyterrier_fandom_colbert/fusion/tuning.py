"""Choosing fusion weights on a development set: ``tune_fusion`` scans a grid and returns the best point and the
whole curve; ``plot_fusion_curve`` draws it.

Each system runs once on the topics; every grid point then only re-fuses those result frames, so a grid of 21
points costs about one run of each system plus a second of pandas per point.
"""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from ..checks import positive_int
from ..cli_errors import require_extra
from .transformers import RRF, Fusion, LinearFusion

GridPoint = Union[float, Tuple[float, ...]]


def weight_grid(n_systems: int = 2, step: float = 0.05) -> List[Tuple[float, ...]]:
    """Weight vectors on the simplex (non-negative, summing to 1) in steps of ``step``.

    >>> weight_grid(2, 0.5)
    [(0.0, 1.0), (0.5, 0.5), (1.0, 0.0)]
    >>> len(weight_grid(3, 0.25))
    15
    """
    positive_int("n_systems", n_systems)
    if not 0 < step <= 1 or abs(round(1 / step) - 1 / step) > 1e-9:
        raise ValueError(f"step={step}: expected 1/n for a whole number n (e.g. 0.05, 0.1, 0.25)")
    n = round(1 / step)
    points = [p for p in itertools.product(range(n + 1), repeat=n_systems - 1) if sum(p) <= n]
    return sorted((*(round(c / n, 10) for c in p), round((n - sum(p)) / n, 10)) for p in points)


def _as_weights(point: GridPoint, n: int) -> Tuple[float, ...]:
    """A grid point as one weight per system: a number w is (w, 1 - w) for two systems."""
    if isinstance(point, (int, float, np.floating, np.integer)):
        if n != 2:
            raise ValueError(f"grid point {point!r} is a single number; give one weight per system for {n} systems")
        return (float(point), 1.0 - float(point))
    values = tuple(float(w) for w in point)
    if len(values) != n:
        raise ValueError(f"grid point {point!r} has {len(values)} weight(s) for {n} systems")
    return values


def fusion_factory(kind: Union[str, Callable[[GridPoint], Fusion]], systems: Sequence[pt.Transformer],
                   **options) -> Callable[[GridPoint], Fusion]:
    """Grid point -> fusion transformer: ``"linear"`` (``LinearFusion`` with the point as weights; ``options``:
    ``normalise``, ``missing``), ``"rrf"`` (``RRF`` with the point as weights; ``options``: ``k``), or a callable."""
    if callable(kind):
        return kind
    if kind == "linear":
        return lambda point: LinearFusion(systems, _as_weights(point, len(systems)), **options)
    if kind == "rrf":
        k = options.pop("k", 60)
        return lambda point: RRF(systems, k, weights=_as_weights(point, len(systems)), **options)
    raise ValueError(f"fusion={kind!r}: expected 'linear', 'rrf' or a callable grid point -> fusion transformer")


def per_query(run: pd.DataFrame, qrels: pd.DataFrame, measures: Sequence, qids: Sequence[str]) -> pd.DataFrame:
    """One row per qid of ``qids`` (in that order), one column per measure; 0 where the run has no results for a
    query (as ``pt.Experiment`` counts them)."""
    import ir_measures

    measures = [ir_measures.parse_measure(m) if isinstance(m, str) else m for m in measures]
    qids = [str(q) for q in qids]
    table = pd.DataFrame(0.0, index=pd.Index(qids, name="qid"), columns=[str(m) for m in measures])
    wanted = set(qids)
    qrels = qrels[qrels["qid"].astype(str).isin(wanted)]
    run = run[run["qid"].astype(str).isin(wanted)]
    if len(run) and len(qrels):
        for metric in ir_measures.iter_calc(measures, pt.model.to_ir_measures(qrels.astype({"qid": str})),
                                            pt.model.to_ir_measures(run.astype({"qid": str}))):
            table.loc[metric.query_id, str(metric.measure)] = metric.value
    return table


@dataclass
class FusionTuning:
    """The result of :func:`tune_fusion`: the best grid point, its value, and the curve over the grid."""

    best: GridPoint
    value: float
    metric: str
    #: one row per grid point: ``point`` (as given), ``w0 … wN`` when the points are weights, then each measure
    curve: pd.DataFrame
    make: Callable[[GridPoint], Fusion] = field(repr=False)

    def transformer(self) -> Fusion:
        """The fusion transformer at the best grid point."""
        return self.make(self.best)

    def plot(self, path: Union[str, Path], title: str = "", xlabel: Optional[str] = None) -> Path:
        return plot_fusion_curve(self.curve, self.metric, path, title=title, best=self.best, xlabel=xlabel)


def tune_fusion(systems: Sequence[pt.Transformer], topics: pd.DataFrame, qrels: pd.DataFrame,
                metric="RR@10", grid: Optional[Sequence[GridPoint]] = None, *,
                fusion: Union[str, Callable[[GridPoint], Fusion]] = "linear", measures: Sequence = (),
                outputs: Optional[Sequence[pd.DataFrame]] = None, verbose: bool = False, **options) -> FusionTuning:
    """Pick the fusion setting that maximises ``metric`` on ``topics``/``qrels`` (a development set, never the
    one you report on).

    ``grid``: points to try; for the built-in ``fusion="linear"`` / ``"rrf"`` each is one weight per system, or a
    number w meaning (w, 1 - w) for two systems (default: ``weight_grid(len(systems), 0.05)``). ``fusion`` may also
    be a callable mapping a grid point to a fusion transformer over ``systems`` (e.g. ``lambda w: Hybrid(a, b,
    weight=w)``). ``options`` go to the built-in fusions (``normalise=``, ``missing=``, ``k=``). ``measures``:
    further measures to record on the curve. ``outputs``: the systems' result frames for ``topics`` if already
    computed. Ties go to the first best point of the grid.
    """
    import ir_measures

    systems = list(systems)
    make = fusion_factory(fusion, systems, **options)
    if grid is None:
        grid = weight_grid(len(systems), 0.05)
    grid = list(grid)
    if not grid:
        raise ValueError("tune_fusion: the grid is empty")
    if len(topics) == 0:
        raise ValueError("tune_fusion: no topics to tune on")
    objective = ir_measures.parse_measure(metric) if isinstance(metric, str) else metric
    all_measures = [objective] + [ir_measures.parse_measure(m) if isinstance(m, str) else m for m in measures
                                  if str(m) != str(objective)]
    if outputs is None:
        outputs = [system(topics) for system in systems]
    qids = pd.unique(topics["qid"].astype(str))
    rows: List[Dict] = []
    from ..progress import progress

    bar = progress(total=len(grid), desc="fusion grid", unit="point", enabled=verbose)
    for point in grid:
        run = make(point).fuse(topics, outputs)
        values = per_query(run, qrels, all_measures, qids).mean(axis=0)
        row: Dict = {"point": point}
        if not isinstance(point, (int, float, np.floating, np.integer)) or len(systems) == 2:
            with contextlib.suppress(TypeError, ValueError):
                row.update({f"w{j}": w for j, w in enumerate(_as_weights(point, len(systems)))})
        row.update(values.to_dict())
        rows.append(row)
        bar.update()
    bar.close()
    curve = pd.DataFrame(rows)
    best_row = int(np.argmax(curve[str(objective)].to_numpy()))
    return FusionTuning(grid[best_row], float(curve[str(objective)].iloc[best_row]), str(objective), curve, make)


def plot_fusion_curve(curve: pd.DataFrame, metric: str, path: Union[str, Path], *, title: str = "",
                      x: Optional[str] = None, best: Optional[GridPoint] = None, xlabel: Optional[str] = None) -> Path:
    """Line plot of ``metric`` (and the curve's other measures, dashed) against the grid: against ``x`` (default
    ``w0``, the first system's weight, when present, else the grid index); a dotted line marks ``best``. Writes
    ``path`` (PNG, PDF, … by suffix)."""
    matplotlib = require_extra("matplotlib", "plot", "plotting a fusion curve")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..storage import atomic_path

    if x is None:
        x = "w0" if "w0" in curve.columns else None
    xs = curve[x].to_numpy() if x else np.arange(len(curve))
    skip = {"point", x} | {c for c in curve.columns if isinstance(c, str) and c[:1] == "w" and c[1:].isdigit()}
    fig, ax = plt.subplots(figsize=(6, 4))
    for column in [c for c in curve.columns if c not in skip]:
        style = "-" if column == metric else "--"
        ax.plot(xs, curve[column], style, marker="o", markersize=3, label=column)
    if best is not None:
        at = [i for i, p in enumerate(curve["point"]) if p == best]
        if at:
            ax.axvline(xs[at[0]], color="grey", linewidth=0.8, linestyle=":")
    default_label = "weight of the first system (w0)" if x == "w0" else (x or "grid point")
    ax.set(xlabel=xlabel or default_label, ylabel="value", title=title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or "png", dpi=150)
    plt.close(fig)
    return path
