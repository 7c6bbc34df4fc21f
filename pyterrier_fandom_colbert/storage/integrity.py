"""One integrity base for every artifact folder (ColBERT indexes, TF-IDF and learned-sparse indexes, checkpoints,
``pfc`` search folders): :class:`ArtifactIntegrity` over the folder's manifest.

* **open** (:meth:`ArtifactIntegrity.check_open`): every manifest file exists with its recorded size, and the
  small files the artifact reads whole are checked whole (their checksums);
* **read** (:meth:`ArtifactIntegrity.blocks`): a large file's blocks are verified the first time this process
  reads them (:class:`~.blocks.BlockCheck`, one bit per block: steady-state reads cost nothing); a file read
  whole when first loaded (a postings archive, a weights file) is checked whole then
  (:meth:`ArtifactIntegrity.check_whole`, once per process);
* **verify** (:meth:`ArtifactIntegrity.problems`): every file's whole checksum, the full scan.

Opening also pins every manifest file (:meth:`ArtifactIntegrity.pinned`, a :class:`~.blocks.PinnedFile` each):
the checks and the artifact's readers read the files as they were when it was opened, so a folder swapped or
renamed under a running process never mixes two versions.

A folder whose metadata records no manifest (``files``) is refused when opened (:class:`NoManifestError`): an
artifact that cannot be checked is not read silently. ``unchecked=True`` opens it anyway, with a warning, and
then nothing is checked. Every artifact kind declares the files its manifest must list (``required``, a function
of its settings; :meth:`ArtifactIntegrity.require` for those known only once a small file is checked): a
manifest that lists none of its files, or lacks one of them, is damage (:class:`IncompleteManifestError`), so
that no check can be switched off by editing the manifest. Damage raises :class:`~.errors.DamagedFileError`
naming the file (and, for a block, the bytes and what they hold), the artifact and how to rebuild it.
"""
from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from .blocks import BlockCheck, Locate, PinnedFile
from .errors import DamagedFileError, MissingFileError, PathLike
from .manifests import check_sizes, checksum_problem, entry_problem, raise_damaged

#: (file name, what is wrong with it)
Problem = Tuple[str, str]


class NoManifestError(DamagedFileError):
    """An artifact's metadata records no file manifest, so its files cannot be checked as they are read: it is
    refused unless opened with ``unchecked=True``. :attr:`path` is the metadata file."""


class IncompleteManifestError(DamagedFileError):
    """An artifact's manifest lists no files, or lacks one the artifact must have: the files it leaves out would be
    read unchecked, so the artifact is refused as damaged. :attr:`path` is the metadata file."""


class ArtifactIntegrity:
    """The checks of one artifact folder in this process (see the module docstring).

    ``files``: the manifest (``{name: {"size", checksum, "blocks"}}``) or None when the metadata ``source``
    records none (refused unless ``unchecked``); ``what``: the artifact, as errors name it ("ColBERT index");
    ``remedy``: how to rebuild it; ``required``: the files the manifest must list (refused when one is missing,
    or when it lists none).
    """

    def __init__(self, folder: PathLike, files: Optional[Dict[str, Dict[str, Any]]], *, what: str, remedy: str,
                 source: PathLike, unchecked: bool = False, required: Iterable[str] = ()):
        self.folder, self.what, self.remedy, self.source = Path(folder), what, remedy, Path(source)
        if files is None:
            if not unchecked:
                raise NoManifestError(self.source, f"{self.source} records no file manifest (sizes and checksums), "
                                                   f"so the {what} at {self.folder} cannot be checked as it is "
                                                   f"read; {remedy}, or open it with unchecked=True to read it "
                                                   "without any checks")
            warnings.warn(f"the {what} at {self.folder} is opened unchecked: {self.source} records no checksums, so "
                          f"damaged files would be read without error; {remedy} to add them", stacklevel=3)
        self.files = files
        self.require(required)
        self._whole: set = set()
        self._blocks: Dict[str, BlockCheck] = {}
        self._pinned: Dict[str, PinnedFile] = {}
        self._lock = threading.RLock()  # blocks() pins its file while holding it

    @property
    def checked(self) -> bool:
        """Whether the artifact has a manifest (False: opened with ``unchecked=True``; nothing is checked)."""
        return self.files is not None

    def require(self, names: Iterable[str]) -> None:
        """Refuse a manifest that lists no files, or does not list every one of ``names`` (files this artifact must
        have), naming what is missing (:class:`IncompleteManifestError`). Nothing for an unchecked artifact."""
        if self.files is None:
            return
        missing = sorted(set(n for n in names if n not in self.files))
        if self.files and not missing:
            return
        lacks = f"lacks the entries of {missing}" if missing else "lists no files at all"
        raise IncompleteManifestError(self.source, f"{self.source} is damaged: its file manifest {lacks}, so those "
                                                   f"files would be read unchecked; the {self.what} at "
                                                   f"{self.folder} is refused; {self.remedy}")

    def damaged(self, path: PathLike, message: str) -> DamagedFileError:
        """The error for damage found in ``path``: ``message``, the artifact and the remedy."""
        return DamagedFileError(path, f"{message}: the {self.what} at {self.folder} is damaged; {self.remedy}")

    # -- open ----------------------------------------------------------------------------------------------
    def check_open(self, whole: Iterable[str] = ()) -> None:
        """Every manifest file present with its recorded size (a ``stat`` each), and the checksums of the
        files ``whole`` (small ones, read whole on open)."""
        if self.files is None:
            return
        check_sizes(self.folder, self.files, self.what, self.remedy)
        for name, entry in self.files.items():  # pinned now: later reads see these very files
            file = self.pinned(name)
            if file.size != entry["size"]:  # replaced between the size check and the pin
                raise self.damaged(file.path, f"{file.path} is {file.size} bytes but was written as "
                                              f"{entry['size']}: it was replaced while the {self.what} was opened")
        self.check_whole(whole)

    def pinned(self, name: str) -> PinnedFile:
        """File ``name`` held open (opened on the first call, normally by :meth:`check_open`): read it through
        this, not by its path, so that every read sees the version opened. A missing file raises
        :class:`~.errors.MissingFileError` naming it."""
        file = self._pinned.get(name)
        if file is None:
            with self._lock:
                file = self._pinned.get(name)
                if file is None:
                    path = self.folder / name
                    try:
                        file = PinnedFile(path)
                    except FileNotFoundError:
                        raise MissingFileError(path, f"{path} is missing: the {self.what} at {self.folder} is "
                                                     f"incomplete; {self.remedy}") from None
                    except IsADirectoryError:
                        raise self.damaged(path, f"{path} is not a regular file") from None
                    self._pinned[name] = file
        return file

    def check_whole(self, names: Iterable[str]) -> None:
        """The whole checksums of ``names`` (those in the manifest and not yet checked in this process)."""
        if self.files is None:
            return
        todo = [n for n in names if n in self.files and n not in self._whole]
        if not todo:
            return
        problems = [(n, p) for n in todo if (p := self._checksum_problem(n)) is not None]
        raise_damaged(self.folder, problems, what=self.what, remedy=self.remedy)
        with self._lock:
            self._whole.update(todo)
            for name in todo:  # checked whole: its blocks need no check either
                if name in self._blocks:
                    self._blocks[name].done[:] = True
                    self._blocks[name].complete = True

    def close(self) -> None:
        """Close the files held open (they close on their own when this object is garbage collected)."""
        for file in list(self._pinned.values()):
            file.close()

    def _pinned_or_none(self, name: str) -> Optional[PinnedFile]:
        try:
            return self.pinned(name)
        except DamagedFileError:  # missing or not a file: the block check says so when it is read
            return None

    def _checksum_problem(self, name: str) -> Optional[str]:
        """Why file ``name`` does not match its whole checksum: the pinned file when there is one (the version
        the readers read), else the file at its path."""
        file = self._pinned.get(name)
        entry = (self.files or {}).get(name, {})
        if file is None:
            return checksum_problem(self.folder, name, entry)

        return entry_problem(file.path, entry, file.stat()[0], file.checksum)

    # -- reads ---------------------------------------------------------------------------------------------
    def blocks(self, name: str, locate: Optional[Locate] = None) -> Optional[BlockCheck]:
        """The block check of file ``name`` (made once; ``locate`` says what a byte range holds, for errors), or
        None when nothing is checked (unchecked artifact, or a file outside the manifest)."""
        if self.files is None or name not in self.files:
            return None
        check = self._blocks.get(name)
        if check is None:
            with self._lock:
                check = self._blocks.get(name)
                if check is None:
                    check = BlockCheck(self.folder / name, self.files[name], damaged=self._block_error,
                                       locate=locate, file=self._pinned_or_none(name))
                    if name in self._whole:
                        check.done[:] = True
                        check.complete = True
                    self._blocks[name] = check
        return check

    def read(self, name: str, start: int, end: int) -> None:
        """Bytes ``start:end`` of ``name`` are about to be read (see :meth:`~.blocks.BlockCheck.read`)."""
        check = self.blocks(name)
        if check is not None:
            check.read(start, end)

    def _block_error(self, path: Path, message: str) -> DamagedFileError:
        return DamagedFileError(path, f"{message}; the {self.what} at {self.folder} is damaged; {self.remedy}")

    # -- verify --------------------------------------------------------------------------------------------
    def problems(self) -> List[Problem]:
        """``(name, why)`` of every manifest file that does not match its size and whole checksum: the full scan
        (nothing for an unchecked artifact, which was warned about when opened)."""
        if self.files is None:
            return []
        return [(name, p) for name in self.files if (p := checksum_problem(self.folder, name, self.files[name]))]

    def summary(self, started: float) -> Dict[str, Any]:
        """What ``verify()`` returns: ``{"files", "bytes", "seconds"}``."""
        import time

        files = self.files or {}
        return {"files": sorted(files), "bytes": sum(e["size"] for e in files.values()),
                "seconds": round(time.perf_counter() - started, 3)}
