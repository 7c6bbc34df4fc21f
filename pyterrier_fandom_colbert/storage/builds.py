"""Long builds that stop cleanly: :class:`interruptible` turns ``kill`` (SIGTERM) into the KeyboardInterrupt that
Ctrl-C raises, so the clean-up of :func:`~.files.atomic_folder` runs; a build killed outright (``kill -9``) leaves
its hidden temporary folder, which records its owner (:func:`mark_owner`) so that the next build of the same
target removes it once that process is gone (:func:`remove_stale_builds`)."""
from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Optional, Union

from .files import _remove

#: inside a temporary build folder: ``"host pid"`` of the process building it
OWNER_FILE = "build.owner"


class interruptible:
    """Within the block, SIGTERM raises KeyboardInterrupt (as Ctrl-C does) so that clean-up runs; main thread
    only (elsewhere it does nothing).

    >>> import os, signal
    >>> before = signal.getsignal(signal.SIGTERM)
    >>> try:
    ...     with interruptible():
    ...         os.kill(os.getpid(), signal.SIGTERM)
    ... except KeyboardInterrupt as err:
    ...     print(err)
    signal 15
    >>> signal.getsignal(signal.SIGTERM) is before  # the handler before is back
    True
    """

    def __enter__(self) -> "interruptible":
        # what signal.signal returns: the handler before, a Handlers value (an int) or None
        self._previous: Union[Callable[[int, Optional[FrameType]], Any], int, None] = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._raise)
        return self

    @staticmethod
    def _raise(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def mark_owner(building: Path) -> None:
    """Record this process as the builder of the temporary folder ``building`` (:data:`OWNER_FILE`)."""
    (building / OWNER_FILE).write_text(f"{socket.gethostname()} {os.getpid()}\n")


def release_owner(building: Path) -> None:
    """Remove the owner record of ``building`` (its build is complete)."""
    (building / OWNER_FILE).unlink()


def remove_stale_builds(folder: Path) -> None:
    """Delete the temporary build folders of ``folder`` (``.<name>.building-*``) left by builds on this machine
    whose process is gone; a folder without an owner record (not ours, or just being created) is left alone."""
    host = socket.gethostname()
    if not folder.parent.is_dir():
        return
    for candidate in folder.parent.glob(f".{folder.name}.building-*"):
        try:
            owner_host, pid = (candidate / OWNER_FILE).read_text().split()
        except (OSError, ValueError):
            continue  # not ours (or just being created): leave it
        if owner_host == host and not _alive(int(pid)):
            _remove(candidate)  # (read-only folders in it too)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
