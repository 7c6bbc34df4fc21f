"""The full check of a search folder's own files (``pfc verify``; its indexes are verified apart)."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, Union

import numpy as np

from ...storage import ArtifactIntegrity, DamagedFileError, raise_damaged
from .manifest import MANIFEST, OFFSETS, PASSAGES, load_manifest, remedy_of, required_files
from .passages import checked_offsets
from .resume import pending_progress


def verify_folder(folder: Union[str, Path]) -> Dict[str, Any]:
    """Full check of a search folder's own files (the indexes are verified apart): every checksum of its
    manifest, the passage offsets, and every line of the passage table parsing as a JSON object. Raises
    DamagedFileError naming each damaged file; returns ``{"files", "bytes", "seconds"}``, and ``"pending"``: how far
    its ColBERT part is built when the manifest says it is being built (its manifest lists the other files)."""
    started = time.perf_counter()
    folder = Path(folder)
    manifest = load_manifest(folder)
    remedy = remedy_of(folder, manifest)
    integrity = ArtifactIntegrity(folder, manifest.files, what="search folder", remedy=remedy,
                                  source=folder / MANIFEST, required=required_files(manifest))
    problems = integrity.problems()
    bad = {name for name, _ in problems}
    if not {PASSAGES, OFFSETS} & bad:
        try:
            offsets = checked_offsets(folder, np.load(folder / OFFSETS, allow_pickle=False),
                                      (folder / PASSAGES).stat().st_size, remedy)
            if len(offsets) - 1 != manifest.passages:
                problems.append((OFFSETS, f"{folder / OFFSETS} indexes {len(offsets) - 1} passages but "
                                          f"{MANIFEST} records {manifest.passages}"))
            with open(folder / PASSAGES, "rb") as table:
                for position, line in enumerate(table):
                    try:
                        if not isinstance(json.loads(line), dict):
                            raise ValueError("not a JSON object")
                    except ValueError as err:
                        problems.append((PASSAGES, f"{folder / PASSAGES}: passage {position} is not a JSON object "
                                                   f"({err})"))
                        break
        except (DamagedFileError, ValueError, OSError) as err:
            problems.append((OFFSETS, str(err)))
    raise_damaged(folder, problems, what="search folder", remedy=remedy)
    summary = integrity.summary(started)
    if manifest.colbert_pending:
        summary["pending"] = pending_progress(folder, manifest.passages)
    return summary


