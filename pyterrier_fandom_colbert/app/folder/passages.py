"""The passage table of a search folder: ``passages.jsonl`` read one line at a time through its offsets, each
block verified on first read. The table and its offsets are read through the files the folder's integrity base
pinned when it was opened, so a folder swapped under a running server is never read at the old offsets."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional, Union

import numpy as np

from ...storage import ArtifactIntegrity, DamagedFileError
from .manifest import OFFSETS, PASSAGES, open_integrity


def checked_offsets(folder: Path, offsets: np.ndarray, size: int, remedy: str) -> np.ndarray:
    """The passage offsets if they can index a ``size``-byte table (from 0, increasing, ending at its size), else
    a DamagedFileError naming the file."""
    file = folder / OFFSETS
    if offsets.ndim != 1 or len(offsets) < 1 or offsets.dtype.kind not in "iu":
        raise DamagedFileError(file, f"{file} is damaged: it holds {offsets.dtype} {list(offsets.shape)}, not "
                                     f"passage offsets; {remedy}")
    if offsets[0] != 0 or (np.diff(offsets) <= 0).any() or offsets[-1] != size:
        raise DamagedFileError(file, f"{file} is damaged: its offsets do not run from 0 up to the size of "
                                     f"{PASSAGES} ({size} bytes); {remedy}")
    return offsets


class PassageTable:
    """Random access to ``passages.jsonl`` by passage position (thread-safe: positional reads).

    Opening it runs the folder's open checks (:func:`open_integrity`, unless ``integrity`` is given); each block
    of the table is verified the first time it is read, and a line that does not parse is a DamagedFileError
    naming the file and the passage."""

    def __init__(self, folder: Union[str, Path], integrity: Optional[ArtifactIntegrity] = None):
        folder = Path(folder)
        self.path = folder / PASSAGES
        self._owns_integrity = integrity is None  # then close() closes the files it holds open
        self.integrity = integrity or open_integrity(folder)
        self._remedy = self.integrity.remedy
        try:
            with self.integrity.pinned(OFFSETS).reopen() as f:  # the files as opened (held open: module notes)
                offsets = np.load(f, allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:
            raise DamagedFileError(folder / OFFSETS, f"{folder / OFFSETS} is damaged: not a readable .npy array "
                                                     f"({err}); {self._remedy}") from None
        self._file = self.integrity.pinned(PASSAGES)
        self.offsets = checked_offsets(folder, offsets, self._file.size, self._remedy)
        self._blocks = self.integrity.blocks(PASSAGES, self._held)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _held(self, start: int, end: int) -> str:
        first = int(np.searchsorted(self.offsets, start, side="right")) - 1
        last = int(np.searchsorted(self.offsets, end - 1, side="right")) - 1
        return f"passages {first}-{min(last, len(self) - 1)}"

    def get(self, position: int) -> Dict[str, Any]:
        if not 0 <= position < len(self):
            raise IndexError(f"passage {position} is out of range: {self.path} holds {len(self)}")
        start, end = int(self.offsets[position]), int(self.offsets[position + 1])
        if self._blocks is not None:
            self._blocks.read(start, end)
        data = self._file.pread(end - start, start)
        try:
            value = json.loads(data)
        except (ValueError, UnicodeDecodeError) as err:
            raise DamagedFileError(self.path, f"{self.path} is damaged: passage {position} (bytes {start}-{end - 1}) "
                                              f"is not a JSON line ({err}); {self._remedy}") from None
        if not isinstance(value, dict):
            raise DamagedFileError(self.path, f"{self.path} is damaged: passage {position} is not a JSON object; "
                                              f"{self._remedy}")
        return value

    def close(self) -> None:
        if self._owns_integrity:
            self.integrity.close()

