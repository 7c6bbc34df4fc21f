"""The errors of damaged and missing artifact files, and the path type every storage function takes."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Union

PathLike = Union[str, "os.PathLike[str]"]


class DamagedFileError(ValueError):
    """A file of an artifact (index, checkpoint, cache) is damaged: wrong size or content, or it does not parse.
    :attr:`path` is the file; the message names it and its folder."""

    def __init__(self, path: PathLike, message: str):
        super().__init__(message)
        self.path = Path(path)

    def __reduce__(self):  # picklable (errors cross process boundaries in multiprocessing)
        return (type(self), (self.path, str(self)))


class MissingFileError(DamagedFileError, FileNotFoundError):
    """A file an artifact needs is missing (also a ``FileNotFoundError``)."""
