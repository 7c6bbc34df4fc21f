"""What every benchmark script does at its end: write its report as JSON (parent folders made) and print it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict


def write_report(out: Path, report: Dict[str, Any]) -> int:
    """Write ``report`` to ``out`` (indented JSON), print it, and return 0 (the script's exit status)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2)
    out.write_text(text)
    print(text)
    return 0
