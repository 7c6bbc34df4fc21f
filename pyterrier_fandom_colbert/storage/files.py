"""Writing files and folders so that a failure never leaves a half-written artifact behind, reading JSON with
errors that name the file, and the PyTerrier artifact metadata (``pt_meta.json``) writers check before replacing
a folder.

* :func:`atomic_path` yields a unique temporary path beside the target; the target appears (``os.replace``) only
  when the block succeeds, and the temporary file is removed when it fails. Concurrent writers of the same
  target never share a temporary name: the last complete write wins, and no reader sees a partial file.
* :func:`atomic_folder` (and :class:`AtomicFolder`, for writers that stream over many calls) does the same for a
  whole folder. An existing target is moved aside, the new folder renamed into place, and the old one deleted
  only afterwards; if the rename fails, the old folder is put back. ``overwrite=True`` replaces only what the
  writer's ``replaceable`` check (e.g. :func:`is_artifact_folder`) accepts, never the current or home folder.

Created files and folders follow the user's umask.
"""
from __future__ import annotations

import bz2
import contextlib
import glob
import json
import logging
import os
import shutil
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, Iterator, List, Optional

from .errors import DamagedFileError, MissingFileError, PathLike
from .manifests import file_checksum, sealed, unsealed

logger = logging.getLogger(__name__)

#: PyTerrier's artifact metadata file (type, format, package hint) in every artifact folder
ARTIFACT_META_FILE = "pt_meta.json"


def _sibling(path: Path, tag: str) -> Path:
    """A hidden, unique name beside ``path`` (``.name.tag-1a2b3c4d``)."""
    return path.with_name(f".{path.name}.{tag}-{uuid.uuid4().hex[:12]}")


def _writable_then_retry(func, path, _exc) -> None:
    """``shutil.rmtree``'s error handler: a folder whose owner removed its write permission (``chmod -R a-w``) is
    made writable again and the removal retried; anything else is left (removal is best effort)."""
    try:
        parent = os.path.dirname(path) or "."
        os.chmod(parent, os.stat(parent).st_mode | 0o700)
        if func is os.rmdir or (os.path.isdir(path) and not os.path.islink(path)):
            os.chmod(path, os.stat(path).st_mode | 0o700)
            _remove(Path(path))
        else:
            func(path)
    except OSError:
        pass


def _remove(path: Path) -> bool:
    """Delete a file or a folder tree, read-only folders included (best effort); whether it is gone."""
    if path.is_dir() and not path.is_symlink():
        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=_writable_then_retry)
        else:
            shutil.rmtree(path, onerror=_writable_then_retry)
    else:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
    return not (path.exists() or path.is_symlink())


def remove_leftovers(target: PathLike) -> List[Path]:
    """Delete what earlier writers of ``target`` left beside it once ``target`` is in place: the folders that
    :func:`atomic_folder` moves aside (``.NAME.old-*``) and deletes after the swap, left when a writer was killed
    outright (``kill -9``) while deleting or could not delete them. Returns those still there (not deletable).
    Nothing is deleted while ``target`` is missing: a writer between its two renames holds the only copy aside."""
    target = Path(target)
    left = []
    for old in sorted(target.parent.glob(f".{glob.escape(target.name)}.old-*")):
        if not (target.exists() or target.is_symlink()):
            break
        if not _remove(old):
            left.append(old)
    return left


@contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yield a temporary path to write; it replaces ``path`` when the block succeeds.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "numbers.txt"
    >>> with atomic_path(target) as tmp:
    ...     _ = tmp.write_text("1 2 3")
    >>> target.read_text()
    '1 2 3'
    >>> try:
    ...     with atomic_path(target) as tmp:
    ...         _ = tmp.write_text("half")
    ...         raise RuntimeError("disk full")
    ... except RuntimeError:
    ...     pass
    >>> target.read_text(), sorted(p.name for p in target.parent.iterdir())
    ('1 2 3', ['numbers.txt'])
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(path, "tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            _remove(tmp)


def read_term_lines(path: PathLike, expected: int, damaged: Callable[[str], Exception],
                    meta_name: str = ARTIFACT_META_FILE, data: Optional[bytes] = None) -> List[str]:
    """The terms of a lexicon file (UTF-8, one term per line, every line ending in a newline), which must be
    ``expected`` many (as ``meta_name`` records); anything else raises ``damaged(why)``. ``data``: the file's
    bytes, already read (through a file held open); else it is read from ``path``."""
    try:
        text = (Path(path).read_bytes() if data is None else data).decode("utf-8")
    except UnicodeDecodeError as err:
        raise damaged(f"not UTF-8 text ({err})") from None
    terms = text.split("\n")
    if terms[-1] != "":
        raise damaged("its last line is cut off (no final newline)")
    terms.pop()
    if len(terms) != expected:
        raise damaged(f"it lists {len(terms)} terms but {meta_name} records {expected}")
    return terms


def move_into(source: PathLike, target: PathLike) -> Path:
    """Move the finished file or folder ``source`` to ``target`` (a path inside a folder being built, on the same
    file system: one rename, so it is never half there); returns ``target``."""
    os.replace(source, target)
    return Path(target)


def write_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that after a crash or power cut it is either absent, as before, or whole:
    a temporary file, flushed to disk, renamed over ``path``, and the folder's entry flushed too."""
    _write_durably(path, lambda out: out.write(data), checksum=False)


def write_durably_with(path: Path, write: Callable[[BinaryIO], Any]) -> str:
    """:func:`write_durably` of what ``write(out)`` writes into ``out`` (a binary file), so that large content
    need not be held whole in memory first; returns the written file's checksum (:func:`.manifests.file_checksum`),
    read back from the temporary file before it is renamed into place."""
    return str(_write_durably(path, write, checksum=True))


def _write_durably(path: Path, write: Callable[[BinaryIO], Any], checksum: bool) -> Optional[str]:
    """The durable write of both, reading the file back for its checksum only when asked."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        digest = file_checksum(tmp) if checksum else None
    _sync_folder(Path(path).parent)
    return digest


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(path: PathLike, value: Any) -> Path:
    """Write ``value`` as indented JSON to ``path`` atomically."""
    return write_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def read_json(path: PathLike, what: str = "JSON file") -> Any:
    """Parse a JSON file; a missing or damaged file raises an error that names it (:class:`MissingFileError`,
    :class:`DamagedFileError`)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MissingFileError(path, f"{path} not found: the {what} is missing") from None
    except IsADirectoryError:
        raise DamagedFileError(path, f"{path} is damaged: the {what} is a folder, not a file") from None
    try:
        return json.loads(data.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DamagedFileError(path, f"{path} is damaged: the {what} is not valid JSON ({err})") from None
    except RecursionError:
        raise DamagedFileError(path, f"{path} is damaged: the {what} nests too deeply to be one this package "
                                     "wrote") from None


def read_input_json(path: PathLike, what: str = "JSON file") -> Any:
    """Parse a JSON file a user gives (not one this package wrote), plain or bz2-compressed (``.bz2``); a file
    that cannot be read or parsed raises a ``ValueError`` that names it.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.json.bz2").write_bytes(bz2.compress(b'{"data": []}'))
    >>> read_input_json(folder / "a.json.bz2")
    {'data': []}
    >>> _ = (folder / "b.json").write_text("{")
    >>> read_input_json(folder / "b.json", "SQuAD JSON file")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: .../b.json: not a readable SQuAD JSON file (JSONDecodeError: ...)
    """
    path = Path(path)
    opener: Any = bz2.open if path.suffix == ".bz2" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError, EOFError) as err:
        raise ValueError(f"{path}: not a readable {what} ({type(err).__name__}: {err})") from None


@contextmanager
def atomic_folder(target: PathLike, *, overwrite: bool = False,
                  replaceable: Optional[Callable[[Path], bool]] = None, what: str = "folder") -> Iterator[Path]:
    """Yield a fresh temporary folder beside ``target``; when the block succeeds it becomes ``target``.

    An existing ``target`` (other than an empty folder) is an error unless ``overwrite``; then
    ``replaceable(target)`` (when given) must say it is a ``what`` this writer may delete, so that a folder of
    someone's own files is never replaced. The current or home folder is never replaced. The old folder is renamed
    aside first and deleted only after the new one is in place; if that rename fails it is restored. On failure
    inside the block the temporary folder is deleted and ``target`` is left as it was.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "idx"
    >>> with atomic_folder(target) as tmp:
    ...     _ = (tmp / "a.txt").write_text("one")
    >>> with atomic_folder(target, overwrite=True) as tmp:
    ...     _ = (tmp / "b.txt").write_text("two")
    >>> sorted(p.name for p in target.iterdir()), sorted(p.name for p in target.parent.iterdir())
    (['b.txt'], ['idx'])
    """
    folder = AtomicFolder(target, overwrite=overwrite, replaceable=replaceable, what=what)
    try:
        yield folder.path
    except BaseException:
        folder.discard()
        raise
    folder.commit()


class AtomicFolder:
    """:func:`atomic_folder` for writers that outlive one ``with`` block (e.g. a streaming index writer).

    The checks run and the temporary folder :attr:`path` is created on construction; :meth:`commit` puts it in
    place of ``target``; :meth:`discard` deletes it (``target`` untouched). Either may be called more than once.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "idx"
    >>> building = AtomicFolder(target)
    >>> _ = (building.path / "a.txt").write_text("one")
    >>> target.exists(), building.commit() == target, (target / "a.txt").read_text()
    (False, True, 'one')
    """

    def __init__(self, target: PathLike, *, overwrite: bool = False,
                 replaceable: Optional[Callable[[Path], bool]] = None, what: str = "folder"):
        self.target = Path(target)
        self.overwrite, self.replaceable, self.what = overwrite, replaceable, what
        check_target(self.target, overwrite=overwrite, replaceable=replaceable, what=what)
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.path = _sibling(self.target, "building")
        self.path.mkdir()

    def commit(self) -> Path:
        """Move the temporary folder to ``target`` (re-checking ``target``, which may have appeared meanwhile)."""
        try:
            check_target(self.target, overwrite=self.overwrite, replaceable=self.replaceable, what=self.what)
            _swap_into_place(self.path, self.target)
        finally:
            self.discard()
        return self.target

    def discard(self) -> None:
        """Delete the temporary folder."""
        if self.path.exists() or self.path.is_symlink():
            _remove(self.path)

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


def _swap_into_place(tmp: Path, target: Path) -> None:
    """Rename ``tmp`` to ``target``; an existing ``target`` is moved aside first, put back if the rename fails, and
    deleted only once the new one is in place."""
    old = None
    if target.exists() or target.is_symlink():
        old = _sibling(target, "old")
        os.replace(target, old)
    try:
        os.replace(tmp, target)
    except BaseException:
        if old is not None:
            os.replace(old, target)
        raise
    for left in remove_leftovers(target):  # (this swap's old folder, and any an earlier writer left)
        logger.warning("could not delete %s (the folder %s replaced): delete it yourself", left, target)


def _is_empty_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and next(path.iterdir(), None) is None


def check_target(target: Path, *, overwrite: bool, replaceable: Optional[Callable[[Path], bool]] = None,
                 what: str = "folder") -> None:
    """Refuse to write over ``target`` unless ``overwrite`` and ``replaceable(target)`` allow it.

    An empty folder counts as absent; the current and home folders (``"."``, ``""``) are always refused.
    """
    target = Path(target)
    if not (target.exists() or target.is_symlink()):
        return
    if str(target) in ("", ".") or target.resolve() in (Path.cwd().resolve(), Path.home().resolve()):
        raise ValueError(f"refusing to write a {what} to {str(target)!r}: that is the current or home folder; name "
                         f"a new folder for the {what} instead")
    if _is_empty_folder(target):
        return
    if not overwrite:
        raise FileExistsError(f"{target} already exists; pass overwrite=True to replace it")
    if replaceable is not None and not replaceable(target):
        raise ValueError(f"{target} exists but is not a {what}; overwrite=True only replaces a {what}, so move or "
                         "delete it yourself")


def read_artifact_meta(folder: PathLike, artifact_type: str, artifact_format: str,
                       remedy: str = "rebuild it") -> Dict[str, Any]:
    """The ``pt_meta.json`` of an artifact folder as a dict (less its own checksum, which is checked:
    :func:`~.manifests.unsealed`), refusing an artifact of another type or format."""
    source = Path(folder) / ARTIFACT_META_FILE
    values = read_json(source, f"{artifact_type}.{artifact_format} artifact metadata")
    kind = (values.get("type"), values.get("format")) if isinstance(values, dict) else (None, None)
    if kind != (artifact_type, artifact_format):
        raise ValueError(f"{folder} holds a {kind[0]}.{kind[1]} artifact, not a {artifact_type}.{artifact_format} "
                         "one")
    return unsealed(values, source, remedy)


def write_artifact_meta(path: PathLike, values: Dict[str, Any]) -> Path:
    """Write an artifact's metadata (``pt_meta.json``, a folder's ``manifest.json``) with the checksum of its own
    content (:func:`~.manifests.sealed`), atomically."""
    return write_json(path, sealed(values))


def is_artifact_folder(folder: PathLike, artifact_type: str, artifact_format: str) -> bool:
    """Whether ``folder`` is a PyTerrier artifact of that type and format (its ``pt_meta.json`` says so).

    Writers pass this (with :func:`functools.partial`) as ``replaceable``: ``overwrite=True`` then replaces only an
    artifact of their own kind.
    """
    meta = Path(folder) / ARTIFACT_META_FILE
    if not Path(folder).is_dir() or Path(folder).is_symlink() or not meta.is_file():
        return False
    try:
        values = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(values, dict) and (values.get("type"), values.get("format")) == (artifact_type, artifact_format)


def artifact_path(artifact: Any) -> Path:
    """The folder of a ``pt.Artifact`` as a plain ``Path``.

    ``pt.Artifact.path`` is typed ``Path | _NoPath`` (an artifact may exist only in memory); every artifact of this
    package lives in a folder, so its code narrows the type here once instead of at every use.

    >>> import pyterrier as pt
    >>> artifact_path(pt.Artifact("/tmp/idx"))
    PosixPath('/tmp/idx')
    """
    path = artifact.path
    if not isinstance(path, Path):
        raise TypeError(f"{type(artifact).__name__} has no folder (path={path!r}); this package's artifacts live "
                        "in a folder: open it with a path")
    return path
