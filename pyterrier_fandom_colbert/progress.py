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


def progress(*, total: Any = None, desc: str = "", unit: str = "it", enabled: bool = False):
    """A tqdm bar when ``enabled``, otherwise an object with the same ``update``/``close`` that prints nothing."""
    if not enabled:
        return _Silent()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit)
