"""A search folder that stays searchable while it is rebuilt or updated under a running server.

:class:`ServedFolder` holds the folder's :class:`~.search.Searcher` and, on every request, looks at the folder's
``manifest.json`` (one ``stat``: device, inode, modification time and size). ``pfc index`` writes a folder into
a temporary folder and renames it into place only when complete, so a manifest that changed means a complete new
version: a new :class:`Searcher` is opened in the background (reusing the loaded encoder when the folder's
encoder fingerprint is the same) while the old one keeps answering, and the new one replaces it in one
assignment once it is ready. A request that fails on the old searcher after its files were replaced is answered
again by the new one, so a rebuild never shows as an error. A new version that cannot be opened (a damaged or
foreign folder) is logged and the old searcher keeps serving; each version is tried once.
"""
from __future__ import annotations

import functools
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, Tuple, Union

from ..distributed.cluster import SHARD_TIMEOUT_S
from .folder import MANIFEST, load_manifest
from .queries import QueryError
from .search import Searcher

LOG = logging.getLogger("pyterrier_fandom_colbert.app")
Version = Optional[Tuple[int, int, int, int]]


def folder_version(folder: Union[str, Path]) -> Version:
    """(device, inode, mtime in ns, size) of the folder's manifest; None while there is none (mid-rename)."""
    try:
        st = os.stat(Path(folder) / MANIFEST)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def reopen(folder: Path, previous: Optional[Searcher], ray: Optional[str] = None,
           ray_timeout_s: float = SHARD_TIMEOUT_S) -> Searcher:
    """A :class:`Searcher` of ``folder``, reusing ``previous``'s encoder when the folder records the same one
    (``ray``, ``ray_timeout_s``: the cluster whose shard actors search a sharded ColBERT part and how long they
    may take, as for :class:`Searcher`)."""
    colbert = None
    if previous is not None and load_manifest(folder).fingerprint == previous.manifest.fingerprint:
        colbert = previous.colbert
    return Searcher(folder, colbert=colbert, ray=ray, ray_timeout_s=ray_timeout_s)


class ServedFolder:
    """The current :class:`Searcher` of ``folder``, replaced by a new one when the folder is rebuilt (module
    notes). ``searcher``: one already open (else it is opened here); ``opener(folder, previous)`` opens a new
    version (default :func:`reopen`, with ``ray`` and ``ray_timeout_s`` passed on)."""

    def __init__(self, folder: Union[str, Path], searcher: Optional[Searcher] = None, *,
                 opener: Optional[Callable[[Path, Optional[Searcher]], Searcher]] = None, ray: Optional[str] = None,
                 ray_timeout_s: float = SHARD_TIMEOUT_S):
        self.folder = Path(folder)
        if opener is None:
            opener = functools.partial(reopen, ray=ray, ray_timeout_s=ray_timeout_s)
        self._opener = opener
        self._version = folder_version(self.folder)
        self._searcher = searcher if searcher is not None else opener(self.folder, None)
        self._tried: Version = self._version  # the newest version opened or tried
        self._lock = threading.Lock()
        self._loader: Optional[threading.Thread] = None

    @property
    def searcher(self) -> Searcher:
        """The newest complete searcher (a changed folder starts opening its new version in the background)."""
        self._look()
        return self._searcher

    def _look(self) -> None:
        version = folder_version(self.folder)
        if version is None or version == self._tried:
            return
        with self._lock:
            if version == self._tried or (self._loader is not None and self._loader.is_alive()):
                return
            self._tried = version
            self._loader = threading.Thread(target=self._load, args=(version,), name="pfc-reload", daemon=True)
            self._loader.start()

    def _load(self, version: Version) -> None:
        started = time.perf_counter()
        try:
            searcher = self._opener(self.folder, self._searcher)
        except Exception:  # the old searcher keeps serving; the log says why
            LOG.exception("%s changed but could not be opened; still serving the previous version", self.folder)
            return
        self._searcher, self._version = searcher, version
        LOG.warning("%s changed: now serving the new version (opened in %.1f s)", self.folder,
                    time.perf_counter() - started)
        self._look()  # it changed again while this version was opening

    def wait(self, timeout: float = 120.0) -> None:
        """Wait until the folder's current version is the one served (or has failed to open), at most ``timeout``
        seconds (a folder in the middle of being renamed into place has no manifest for a moment)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._look()
            loader = self._loader
            if loader is not None and loader.is_alive():
                loader.join(max(0.0, deadline - time.monotonic()))
                continue
            if folder_version(self.folder) is not None and self._tried == folder_version(self.folder):
                return
            time.sleep(0.05)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``searcher.<method>(...)``; when it fails after the folder was replaced, once more on the new version.
        A refused query (:class:`QueryError`) is an answer, not a failure."""
        searcher = self.searcher
        try:
            return getattr(searcher, method)(*args, **kwargs)
        except QueryError:
            raise
        except Exception:
            if folder_version(self.folder) == self._version and self._searcher is searcher:
                raise  # the folder did not change: a real failure
            self.wait()
            if self._searcher is searcher:
                raise
            LOG.info("a request failed on the replaced version of %s; answered by the new one", self.folder)
            return getattr(self._searcher, method)(*args, **kwargs)
