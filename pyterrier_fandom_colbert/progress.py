"""Progress bars that appear only when asked for (``verbose=True``)."""
from __future__ import annotations

import time
from typing import Any, Callable, Iterator, Tuple


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


#: seconds between redraws at most (tqdm redraws on an update once this much time has passed)
MIN_INTERVAL = 0.5


def progress(*, total: Any = None, desc: str = "", unit: str = "it", enabled: bool = False):
    """A tqdm bar when ``enabled``, otherwise an object with the same ``update``/``close`` that prints nothing.

    The bar redraws on every update at least :data:`MIN_INTERVAL` s after the last redraw (``miniters=1``: tqdm's
    adaptive skipping of updates, which can hide progress for long stretches after a fast start, is off), so a
    loop that updates it after each unit of work (a model batch, a query) shows its progress as it goes."""
    if not enabled:
        return _Silent()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, mininterval=MIN_INTERVAL, miniters=1)


class Ticker:
    """Moves a bar that counts whole units (documents) by fractions of a unit as work is done in parts.

    A model batch of 64 documents takes seconds on a CPU; the encoder reports each of its layers as a fraction
    of the batch's documents (:meth:`add`), and the bar moves as soon as the running total passes a whole unit,
    so it updates every layer rather than every batch. :meth:`settle` puts the bar on an exact count (when a batch
    is complete), so rounding never accumulates.

    >>> class Bar:
    ...     n = 0
    ...     def update(self, k): self.n += k
    >>> bar = Bar(); t = Ticker(bar)
    >>> for _ in range(6): t.add(64 / 6)
    >>> bar.n, t.settle(64), bar.n
    (64, None, 64)
    >>> t.add(0.4); t.add(0.4); bar.n
    64
    >>> t.add(0.4); bar.n
    65
    """

    def __init__(self, bar: Any):
        self.bar = bar
        self.done = 0.0
        self.shown = 0

    def add(self, amount: float) -> None:
        self.done += amount
        whole = int(self.done + 1e-6)  # 6 x 64/6 is 63.99999… in floating point
        if whole > self.shown:
            self.bar.update(whole - self.shown)
            self.shown = whole

    def settle(self, count: int) -> None:
        self.done = float(count)
        if count != self.shown:
            self.bar.update(count - self.shown)
            self.shown = count


def paced_ranges(total: int, size: int, *, enabled: bool = True, target: float = MIN_INTERVAL,
                 clock: Callable[[], float] = time.perf_counter) -> Iterator[Tuple[int, int]]:
    """``(start, stop)`` ranges covering ``range(total)`` in order, at most ``size`` long, for a loop that updates
    a progress bar after each. When ``enabled`` (the bar is shown), a range whose work took longer than ``target``
    seconds (timed between this generator's yields, i.e. the caller's work on it) makes the following ranges
    proportionally shorter (never below 1), so the bar moves about every ``target`` seconds however slow one item
    is; without a bar the ranges are all ``size`` long. The caller's results must not depend on how the items
    are grouped.

    >>> list(paced_ranges(5, 2, enabled=False))
    [(0, 2), (2, 4), (4, 5)]
    >>> ticks = iter([0.0, 2.0, 2.0, 2.5, 2.5, 3.0, 3.0, 3.5, 3.5, 4.0])  # the first range takes 2 s, then 0.5 s
    >>> list(paced_ranges(8, 4, target=0.5, clock=lambda: next(ticks)))
    [(0, 4), (4, 5), (5, 6), (6, 7), (7, 8)]
    """
    step, start = size, 0
    while start < total:
        stop = min(total, start + step)
        began = clock() if enabled else 0.0
        yield start, stop
        if enabled:
            took = clock() - began
            if took > target:
                step = max(1, int((stop - start) * target / took))
        start = stop
