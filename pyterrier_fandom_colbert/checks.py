"""Parameter checks written once: counts (numbers of results, batch sizes, iterations, window strides) are whole
numbers in a range, and real settings (weights, thresholds, bandwidths) finite numbers in a range, each refused by
name otherwise. A count is a Python or numpy integer, never a bool (``True`` is not a batch size), a float (even
``2.0``: a configuration that computes one has a bug) or a string; a real setting is an int or float (numpy's
too), never a bool or a string."""
from __future__ import annotations

import math
import operator
from typing import Any, Literal, Optional, overload

import numpy as np


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


def _as_real(value: Any) -> Optional[float]:
    """``value`` as a float when it is a real number (``int``, ``float``, numpy integers and floats), else None:
    never a bool, a string, a complex number or a 0-d array."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    return float(value)


@overload
def real_in_range(name: str, value: Any, least: Optional[float] = ..., most: Optional[float] = ..., *,
                  above: bool = ..., none: Literal[False] = ..., what: str = ...) -> float: ...
@overload
def real_in_range(name: str, value: Any, least: Optional[float] = ..., most: Optional[float] = ..., *,
                  above: bool = ..., none: bool, what: str = ...) -> Optional[float]: ...
def real_in_range(name: str, value: Any, least: Optional[float] = None, most: Optional[float] = None, *,
                  above: bool = False, none: bool = False, what: str = "") -> Optional[float]:
    """``value`` as a float when it is a finite real number from ``least`` to ``most`` (either bound None: no
    bound; ``above=True``: strictly above ``least``), or None when it is None and ``none=True``; else a ValueError
    naming ``name``, the value and what was expected (``what`` adds a reason). Bools and strings are refused
    (``True`` is not a weight, ``"0.5"`` is a typo in a configuration), and so are NaN and infinities.

    >>> real_in_range("beta", 0.5, 0.0), real_in_range("threshold", -2), real_in_range("k", 60, 0.0)
    (0.5, -2.0, 60.0)
    >>> real_in_range("weight", True, 0.0, 1.0, what="the lexical share")
    Traceback (most recent call last):
    ...
    ValueError: weight=True; expected a number from 0.0 to 1.0 (the lexical share)
    >>> real_in_range("lam", 0, 0.0, above=True)
    Traceback (most recent call last):
    ...
    ValueError: lam=0; expected a number > 0.0
    >>> real_in_range("threshold", float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: threshold=nan; expected a finite number
    """
    if value is None and none:
        return None
    number = _as_real(value)
    low_ok = number is not None and (least is None or (number > least if above else number >= least))
    if number is None or not math.isfinite(number) or not low_ok or (most is not None and number > most):
        if least is not None and most is not None:
            expected = f"a number from {least} to {most}" if not above else f"a number > {least} and ≤ {most}"
        elif least is not None:
            expected = f"a number {'>' if above else '≥'} {least}"
        elif most is not None:
            expected = f"a number ≤ {most}"
        else:
            expected = "a finite number"
        raise ValueError(f"{name}={value!r}; expected {expected}{' or None' if none else ''}"
                         f"{f' ({what})' if what else ''}")
    return number
