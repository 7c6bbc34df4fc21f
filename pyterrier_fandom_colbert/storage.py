"""Writing files and folders so that a failure never leaves a half-written artifact behind, and small frozen
configuration dataclasses that travel as JSON.

* :func:`atomic_path` yields a unique temporary path beside the target; the target appears (``os.replace``) only
  when the block succeeds, and the temporary file is removed when it fails. Concurrent writers of the same
  target never share a temporary name: the last complete write wins, and no reader sees a partial file.
* :func:`atomic_folder` (and :class:`AtomicFolder`, for writers that stream over many calls) does the same for a
  whole folder. An existing target is moved aside, the new folder renamed into place, and the old one deleted
  only afterwards; if the rename fails, the old folder is put back. ``overwrite=True`` replaces only what the
  writer's ``replaceable`` check (e.g. :func:`is_artifact_folder`) accepts, never the current or home folder.
* :class:`JsonConfig` is the one serialisation API of the package's configuration dataclasses:
  ``to_dict``/``from_dict`` (unknown fields are refused by name) and ``save_json``/``load_json`` (errors name the
  file).
* Manifests: every artifact records the size and content checksum (:data:`HASH_ALGORITHM`) of each file it
  wrote (:func:`manifest_entry`, :class:`HashingFile` for files hashed while they are streamed out); readers
  compare sizes on open (:func:`check_sizes`), checksums of their small files on open and of every file in
  ``verify()`` (:func:`check_checksums`). A missing, resized, altered or unparsable file raises
  :class:`DamagedFileError` naming it (see docs/index.md, "Checksums and verify()").

Created files and folders follow the user's umask.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import uuid
import warnings
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Type, TypeVar, Union

PathLike = Union[str, "os.PathLike[str]"]
#: PyTerrier's artifact metadata file (type, format, package hint) in every artifact folder
ARTIFACT_META_FILE = "pt_meta.json"
C = TypeVar("C", bound="JsonConfig")


def _sibling(path: Path, tag: str) -> Path:
    """A hidden, unique name beside ``path`` (``.name.tag-1a2b3c4d``)."""
    return path.with_name(f".{path.name}.{tag}-{uuid.uuid4().hex[:12]}")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


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
    if old is not None:
        _remove(old)


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


def read_artifact_meta(folder: PathLike, artifact_type: str, artifact_format: str) -> Dict[str, Any]:
    """The ``pt_meta.json`` of an artifact folder as a dict, refusing an artifact of another type or format."""
    values = read_json(Path(folder) / ARTIFACT_META_FILE, f"{artifact_type}.{artifact_format} artifact metadata")
    kind = (values.get("type"), values.get("format")) if isinstance(values, dict) else (None, None)
    if kind != (artifact_type, artifact_format):
        raise ValueError(f"{folder} holds a {kind[0]}.{kind[1]} artifact, not a {artifact_type}.{artifact_format} "
                         "one")
    return values


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
    except (OSError, ValueError):
        return False
    return isinstance(values, dict) and (values.get("type"), values.get("format")) == (artifact_type, artifact_format)


class JsonConfig:
    """Mixin for frozen dataclasses: one way to turn settings into JSON and back.

    >>> @dataclasses.dataclass(frozen=True)
    ... class Settings(JsonConfig):
    ...     k: int = 10
    >>> Settings.from_dict({"k": 3})
    Settings(k=3)
    >>> Settings.from_dict({"k": 3, "kk": 4})
    Traceback (most recent call last):
    ...
    ValueError: unknown Settings field(s) ['kk']; known fields are ['k']
    """

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def settings_digest(self) -> str:
        """A short hash of the settings (their sorted JSON): a cache name that changes whenever they do.

        >>> @dataclasses.dataclass(frozen=True)
        ... class Settings(JsonConfig):
        ...     k: int = 10
        >>> Settings().settings_digest() == Settings(k=10).settings_digest() != Settings(k=11).settings_digest()
        True
        """
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls: Type[C], values: Dict[str, Any], source: Optional[PathLike] = None) -> C:
        where = f"{source}: " if source is not None else ""
        if not isinstance(values, dict):
            raise ValueError(f"{where}expected a JSON object of {cls.__name__} settings, got {type(values).__name__}")
        known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"{where}unknown {cls.__name__} field(s) {unknown}; known fields are {sorted(known)}")
        try:
            return cls(**values)
        except (TypeError, ValueError) as err:
            if source is None:
                raise
            raise ValueError(f"{where}{err}") from None

    def save_json(self, path: PathLike) -> Path:
        return write_json(path, self.to_dict())

    @classmethod
    def load_json(cls: Type[C], path: PathLike) -> C:
        return cls.from_dict(read_json(path, f"{cls.__name__} file"), source=path)


# -- damaged files, checksums and manifests ----------------------------------------------------------------------

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


#: the content checksum recorded for artifact files: XXH3-128 from xxhash, 13-19x the speed of
#: hashlib's blake2b (docs/index.md, "Checksums and verify()"); not cryptographic: it detects damage, not tampering
HASH_ALGORITHM = "xxh3_128"
#: algorithms a manifest may name (older or other writers); new manifests use HASH_ALGORITHM
HASH_ALGORITHMS = ("xxh3_128", "blake2b")
_HASH_CHUNK = 1 << 22


def new_hasher(algorithm: str = HASH_ALGORITHM) -> Any:
    """A streaming hash object (``update``, ``hexdigest``) for a manifest algorithm name."""
    if algorithm == "xxh3_128":
        import xxhash

        return xxhash.xxh3_128()
    if algorithm == "blake2b":
        return hashlib.blake2b(digest_size=16)
    raise ValueError(f"unknown checksum algorithm {algorithm!r}; expected one of {HASH_ALGORITHMS}")


def file_checksum(path: PathLike, algorithm: str = HASH_ALGORITHM) -> str:
    """Hex checksum of a file's content, read in 4 MB blocks.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "x.bin"
    >>> _ = path.write_bytes(b"abc")
    >>> file_checksum(path), file_checksum(path, "blake2b")
    ('06b05ab6733a618578af5f94892f3950', 'cf4ab791c62b8d2b2109c90275287816')
    """
    h = new_hasher(algorithm)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size <= _HASH_CHUNK:  # small files (the ones hashed on every open): one read, no big buffer
            h.update(f.read())
            return h.hexdigest()
        buffer = bytearray(_HASH_CHUNK)
        view = memoryview(buffer)
        while True:
            n = f.readinto(buffer)
            if not n:
                break
            h.update(view[:n])
    return h.hexdigest()


def manifest_entry(path: PathLike) -> Dict[str, Any]:
    """``{"size": bytes, HASH_ALGORITHM: checksum}`` of a file, as a manifest records it."""
    return {"size": Path(path).stat().st_size, HASH_ALGORITHM: file_checksum(path)}


class HashingFile:
    """A binary file opened for writing that checksums what is written, so a large file streamed out (vectors,
    passages) need not be read back for its manifest entry.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "x.bin"
    >>> with HashingFile(path) as f:
    ...     _ = f.write(b"ab"); _ = f.write(b"c")
    >>> f.entry() == manifest_entry(path)
    True
    """

    def __init__(self, path: PathLike):
        self.path = Path(path)
        self._file = open(self.path, "wb")
        self._hash = new_hasher()
        self.size = 0

    def write(self, data: Any) -> int:
        n = self._file.write(data)
        self._hash.update(data)
        self.size += n
        return n

    def close(self) -> None:
        self._file.close()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def entry(self) -> Dict[str, Any]:
        return {"size": self.size, HASH_ALGORITHM: self._hash.hexdigest()}

    def __enter__(self) -> "HashingFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def folder_files(folder: PathLike, exclude: Iterable[str] = ()) -> List[str]:
    """Relative POSIX paths of every regular file under ``folder`` (recursively), sorted, less ``exclude``."""
    folder = Path(folder)
    skip = set(exclude)
    names = (p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    return sorted(n for n in names if n not in skip)


def build_manifest(folder: PathLike, names: Iterable[str],
                   known: Optional[Dict[str, Dict[str, Any]]] = None) -> Dict[str, Dict[str, Any]]:
    """Manifest (``{name: {"size", HASH_ALGORITHM}}``) of files under ``folder``; ``known`` entries (from
    :class:`HashingFile`) are used as they are, the other files are read and hashed."""
    known = known or {}
    return {name: dict(known[name]) if name in known else manifest_entry(Path(folder) / name) for name in names}


def parse_manifest(files: Any, source: PathLike) -> Dict[str, Dict[str, Any]]:
    """A manifest read from JSON, checked: relative file names inside the folder, integer sizes, a checksum of a
    known algorithm. ``source`` (the JSON file) is named in errors."""
    if not isinstance(files, dict):
        raise DamagedFileError(source, f"{source} is damaged: its file manifest is not a JSON object")
    for name, entry in files.items():
        pure = PurePosixPath(name)
        if not name or pure.is_absolute() or ".." in pure.parts or "\\" in name:
            raise DamagedFileError(source, f"{source} is damaged: its manifest names {name!r}, not a file inside "
                                           "the folder")
        if (not isinstance(entry, dict) or not isinstance(entry.get("size"), int) or entry["size"] < 0
                or not any(isinstance(entry.get(a), str) for a in HASH_ALGORITHMS)):
            raise DamagedFileError(source, f"{source} is damaged: its manifest entry for {name!r} is {entry!r}; "
                                           f"expected {{'size': bytes, one of {HASH_ALGORITHMS}: checksum}}")
    return files


def check_sizes(folder: PathLike, files: Dict[str, Dict[str, Any]], what: str,
                remedy: str = "rebuild it") -> None:
    """Every manifest file exists with its recorded size (a ``stat`` each: cheap enough for every open)."""
    folder = Path(folder)
    for name, entry in files.items():
        path = folder / name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise MissingFileError(path, f"{path} is missing: the {what} at {folder} is incomplete; "
                                         f"{remedy}") from None
        if not path.is_file():
            raise DamagedFileError(path, f"{path} is not a regular file: the {what} at {folder} is damaged; "
                                         f"{remedy}")
        if size != entry["size"]:
            raise DamagedFileError(path, f"{path} is {size} bytes but was written as {entry['size']}: the file was "
                                         f"truncated, extended or replaced, so the {what} at {folder} is damaged; "
                                         f"{remedy}")


def checksum_problem(folder: PathLike, name: str, entry: Dict[str, Any]) -> Optional[str]:
    """Why ``folder/name`` does not match its manifest ``entry`` (missing, size, checksum), or None when it does."""
    path = Path(folder) / name
    if not path.is_file():
        return f"{path} is missing"
    size = path.stat().st_size
    if size != entry["size"]:
        return f"{path} is {size} bytes but was written as {entry['size']}"
    algorithm = next(a for a in HASH_ALGORITHMS if isinstance(entry.get(a), str))
    found = file_checksum(path, algorithm)
    if found != entry[algorithm]:
        return (f"{path} does not match its {algorithm} checksum (written {entry[algorithm]}, now {found}): its "
                "content changed after it was written")
    return None


def manifest_problems(folder: PathLike, files: Optional[Dict[str, Dict[str, Any]]], meta_file: PathLike,
                      still_checked: str) -> List[Tuple[str, str]]:
    """``(name, why)`` for every file of the manifest ``files`` that does not match it (:func:`checksum_problem`):
    the checksum part of an artifact's ``verify()``. An artifact written before checksums were recorded
    (``files`` None) gets a warning, naming ``meta_file`` and what ``verify()`` ``still_checked``, and no
    problems."""
    if files is None:
        warnings.warn(f"{meta_file} records no checksums (the index was written by an older version): only "
                      f"{still_checked} were checked; rebuild it to add them", stacklevel=3)
        return []
    return [(name, p) for name in files if (p := checksum_problem(folder, name, files[name]))]


def check_checksums(folder: PathLike, files: Dict[str, Dict[str, Any]], names: Optional[Iterable[str]] = None, *,
                    what: str, remedy: str = "rebuild it") -> None:
    """Hash the manifest files ``names`` (default: all) and raise :class:`DamagedFileError` naming every file
    that differs from its entry (the first is :attr:`DamagedFileError.path`)."""
    chosen = list(files) if names is None else [n for n in names if n in files]
    problems = [(name, p) for name in chosen if (p := checksum_problem(folder, name, files[name])) is not None]
    raise_damaged(folder, problems, what=what, remedy=remedy)


def raise_damaged(folder: PathLike, problems: List[Any], *, what: str, remedy: str = "rebuild it") -> None:
    """Raise one :class:`DamagedFileError` for ``[(file name, description)]`` (nothing when the list is empty)."""
    if not problems:
        return
    first = Path(folder) / problems[0][0]
    listed = "; ".join(p for _, p in problems)
    cls = MissingFileError if all(p.endswith("is missing") for _, p in problems) else DamagedFileError
    raise cls(first, f"the {what} at {folder} is damaged: {listed}; {remedy}")


@contextmanager
def docno_lookup_builder(path: PathLike) -> Iterator[Any]:
    """Build the forward half of an npids docno lookup at ``path``: ``with docno_lookup_builder(p) as b:
    b.add(docno)``, then :func:`build_docno_inverse`. Closed (written) only when the block ends without an error.

    npids (0.1.3) stores each block of docnos (a new one starts where a docno does not fit the last) with the
    smallest codec that fits it; a block whose docnos are all one string (a single docno: a one-document corpus,
    or a last docno unlike the ones before it) gets its fixed-bytes codec with zero bytes per docno, written but
    unreadable (ZeroDivisionError on opening). Here such a block keeps one byte per docno (its shared prefix one
    byte shorter), so any sequence of docnos reads back.
    """
    from npids.builder import FwdLookupBuilder
    from npids.codecs.fwd_fixedbytes import FwdFixedBytes

    class _Builder(FwdLookupBuilder):
        def _commit(self):
            fixed = self.seeded_formats.get(FwdFixedBytes.NAME) if self.seeds else None
            if fixed is not None and fixed.prefix and fixed.size() == 0:
                fixed.prefix = fixed.prefix[:-1]
            super()._commit()

    builder = _Builder(path)
    yield builder
    builder.close()


def build_docno_inverse(path: PathLike) -> None:
    """Write the docno → id half of an npids lookup whose forward half was built with ``build_inv=False``.

    npids (0.1.3) picks a forward codec per block of docnos, starting a new block when a docno does not fit the
    current one (numbers, then a longer or non-numeric docno). Its integer inverses assume one codec: for a
    lookup of several blocks they silently lose the later docnos (``LookupError`` on lookup). Such a lookup gets
    npids' hash inverse, which stores every docno; a one-block lookup gets npids' own choice.
    """
    import npids
    from npids import codecs
    from npids.builder import InvLookupBuilder
    from npids.utils import FileManager

    with npids.Lookup(path) as lookup:
        if len(lookup.fwd.codecs) > 1:
            with FileManager(path, "a") as writer:
                codecs.inv["hash"].build(lookup.fwd, writer)
            return
    InvLookupBuilder.build(path)


def open_npids(path: PathLike, num_docs: int, what: str) -> Any:
    """Open an npids docno lookup that should hold ``num_docs`` docnos; a file npids cannot read, or one of
    another length, raises :class:`DamagedFileError` naming it."""
    import npids

    path = Path(path)
    if not path.is_file():
        raise MissingFileError(path, f"{path} is missing: the {what} at {path.parent} has no docno lookup; "
                                     "rebuild it")
    try:
        lookup = npids.Lookup(path)
        count = len(lookup)
        if count:
            lookup.fwd[[0, count - 1]]  # decode the first and last docno: a damaged codec fails here
    except Exception as err:  # npids raises JSON, struct, Unicode and index errors on damaged files
        raise DamagedFileError(path, f"{path} is damaged: the docno lookup of the {what} at {path.parent} cannot "
                                     f"be read ({type(err).__name__}: {err}); rebuild it") from None
    if count != num_docs:
        lookup.close()
        raise DamagedFileError(path, f"{path} holds {count} docnos but the {what} at {path.parent} has {num_docs} "
                                     "documents; rebuild it")
    return lookup
