"""What every benchmark script does at its end: check that the work it reports was done, write its report as JSON
(parent folders made) and print it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Mapping, Tuple


def write_report(out: Path, report: Dict[str, Any]) -> int:
    """Write ``report`` to ``out`` (indented JSON), print it, and return 0 (the script's exit status)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2)
    out.write_text(text)
    print(text)
    return 0


def require_work(counts: Mapping[str, Tuple[float, float]]) -> None:
    """Stop the script (exit status 1, a message naming each figure) unless every ``name: (reported, expected)``
    matches: a timer that measured nothing (0 passages encoded for a corpus of 5,183) must not print a figure.

    >>> require_work({"passages encoded": (5, 5)})
    >>> require_work({"passages encoded": (0, 5183), "seconds": (1, 1)})
    Traceback (most recent call last):
    SystemExit: benchmark measured the wrong work: passages encoded 0, expected 5183
    """
    wrong = [f"{name} {reported}, expected {expected}" for name, (reported, expected) in counts.items()
             if reported != expected]
    if wrong:
        raise SystemExit("benchmark measured the wrong work: " + "; ".join(wrong))
