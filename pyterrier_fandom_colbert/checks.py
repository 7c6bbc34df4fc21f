"""Parameter checks written once: counts (numbers of results, batch sizes, iterations, window strides) are whole
numbers in a range, refused by name otherwise. A count is a Python or numpy integer, never a bool (``True`` is
not a batch size), a float (even ``2.0``: a configuration that computes one has a bug) or a string."""
from __future__ import annotations

import operator
from typing import Any, Literal, Optional, overload


def _as_int(value: Any) -> Optional[int]:
    """``value`` as an int when it is an integer (``int``, numpy integers: anything with ``__index__``), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


@overload
def int_in_range(name: str, value: Any, least: int = ..., most: Optional[int] = ..., *,
                 none: Literal[False] = ..., what: str = ...) -> int: ...
@overload
def int_in_range(name: str, value: Any, least: int = ..., most: Optional[int] = ..., *, none: bool,
                 what: str = ...) -> Optional[int]: ...
def int_in_range(name: str, value: Any, least: int = 1, most: Optional[int] = None, *, none: bool = False,
                 what: str = "") -> Optional[int]:
    """``value`` as an int when it is an integer from ``least`` to ``most`` (no upper bound when None), or None
    when it is None and ``none=True``; else a ValueError naming ``name``, the value and what was expected
    (``what`` adds a reason).

    >>> int_in_range("stride", 3, 1, 8)
    3
    >>> int_in_range("depth", None, 0, none=True) is None
    True
    >>> int_in_range("stride", 9, 1, 8, what="doc_maxlen=10 leaves 8 word pieces")
    Traceback (most recent call last):
    ...
    ValueError: stride=9; expected an integer from 1 to 8 (doc_maxlen=10 leaves 8 word pieces)
    >>> int_in_range("freeze_layers", -1, 0)
    Traceback (most recent call last):
    ...
    ValueError: freeze_layers=-1; expected an integer ≥ 0
    """
    if value is None and none:
        return None
    number = _as_int(value)
    if number is None or number < least or (most is not None and number > most):
        if most is not None:
            expected = f"an integer from {least} to {most}"
        else:
            expected = "a positive integer" if least == 1 else f"an integer ≥ {least}"
        raise ValueError(f"{name}={value!r}; expected {expected}{' or None' if none else ''}"
                         f"{f' ({what})' if what else ''}")
    return number


@overload
def positive_int(name: str, value: Any, *, none: Literal[False] = ..., what: str = ...) -> int: ...
@overload
def positive_int(name: str, value: Any, *, none: bool, what: str = ...) -> Optional[int]: ...
def positive_int(name: str, value: Any, *, none: bool = False, what: str = "") -> Optional[int]:
    """``value`` as an int when it is an integer ≥ 1 (or None when ``none=True``), else a ValueError naming it.

    >>> positive_int("num_results", 10), positive_int("k", None, none=True)
    (10, None)
    >>> positive_int("batch_size", True)
    Traceback (most recent call last):
    ...
    ValueError: batch_size=True; expected a positive integer
    >>> positive_int("num_results", "5", none=True, what="None keeps every document")
    Traceback (most recent call last):
    ...
    ValueError: num_results='5'; expected a positive integer or None (None keeps every document)
    """
    return int_in_range(name, value, 1, none=none, what=what)
