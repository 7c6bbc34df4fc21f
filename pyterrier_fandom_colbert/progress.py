"""Progress bars that appear only when asked for (``verbose=True``)."""
from __future__ import annotations

from typing import Any


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
