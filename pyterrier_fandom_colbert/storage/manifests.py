"""Manifests: every artifact records the size, content checksum (:data:`HASH_ALGORITHM`) and block checksums
(:mod:`.blocks`) of each file it wrote (:func:`manifest_entry`, :class:`HashingFile` for files hashed while they
are streamed out). The checks over them (:func:`check_sizes`, :func:`checksum_problem`, :func:`raise_damaged`) are
used through :class:`~.integrity.ArtifactIntegrity`, the one integrity base of every artifact. A missing, resized,
altered or unparsable file raises :class:`~.errors.DamagedFileError` naming it (see docs/integrity.md).

A metadata file that holds a manifest also holds its own checksum (:data:`SEAL_KEY`, :func:`sealed`): the
checksum of its canonical JSON (sorted keys, fixed separators) less that key, so that an edit to a setting it
records (a fusion weight, a count, a format) is damage too (:func:`unsealed`, on every read).
"""
from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Dict, Iterable, List, Optional

from .blocks import BLOCK_BYTES, BLOCKS_KEY, BlockHasher, parse_blocks
from .errors import DamagedFileError, MissingFileError, PathLike
from .hashes import _HASH_CHUNK, HASH_ALGORITHM, HASH_ALGORITHMS, new_hasher

#: the key of a metadata file's checksum over its own canonical JSON (everything else in the file)
SEAL_KEY = "meta_checksum"


def canonical_json(values: Any) -> bytes:
    """The bytes a metadata file's own checksum is taken over: JSON with sorted keys and fixed separators.

    >>> canonical_json({"b": [1, 2.5], "a": "x"})
    b'{"a":"x","b":[1,2.5]}'
    """
    return json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def sealed(values: Dict[str, Any]) -> Dict[str, Any]:
    """``values`` (a metadata file's content) with its own checksum (:data:`SEAL_KEY`) added: write this.

    >>> meta = sealed({"weight": 0.2, "files": {}})
    >>> sorted(meta), unsealed(meta, "m.json") == {"weight": 0.2, "files": {}}
    (['files', 'meta_checksum', 'weight'], True)
    """
    body = json.loads(json.dumps({k: v for k, v in values.items() if k != SEAL_KEY}))  # as it will read back
    return {**body, SEAL_KEY: _seal_of(body)}


def _seal_of(body: Dict[str, Any]) -> str:
    h = new_hasher()
    h.update(canonical_json(body))
    return f"{HASH_ALGORITHM}:{h.hexdigest()}"


def unsealed(values: Any, source: PathLike, remedy: str = "rebuild it") -> Any:
    """``values`` read from the metadata file ``source``, less its own checksum, after checking it: an edit to
    anything in the file (a setting, a count, a manifest entry) raises :class:`DamagedFileError` naming the file.
    A file that records a manifest (``files``) but no checksum of its own was written by an older version and is
    refused too (``remedy`` says how to rebuild it). A file without either (metadata from before manifests) is
    returned as it is: the artifact's integrity base refuses it (:class:`~.integrity.NoManifestError`) unless it
    is opened unchecked. Anything but a JSON object is returned as it is, for the caller to refuse.

    >>> try:
    ...     unsealed({**sealed({"weight": 0.2}), "weight": 0.3}, "manifest.json")
    ... except DamagedFileError as err:
    ...     print(str(err)[:85])
    manifest.json is damaged: its content does not match its own checksum (meta_checksum)
    """
    if not isinstance(values, dict):
        return values
    if SEAL_KEY not in values:
        if values.get("files") is None:
            return values
        raise DamagedFileError(source, f"{source} records no checksum of its own content ({SEAL_KEY}): it was "
                                       "written by an older version of pyterrier-fandom-colbert (or the checksum "
                                       f"was removed), so an edit to its settings could not be found; {remedy}")
    body = {k: v for k, v in values.items() if k != SEAL_KEY}
    try:
        seal = _seal_of(body)
    except (ValueError, TypeError, RecursionError):  # NaN/inf or nesting JSON cannot write back: not ours
        seal = None
    if seal is None or values[SEAL_KEY] != seal:
        raise DamagedFileError(source, f"{source} is damaged: its content does not match its own checksum "
                                       f"({SEAL_KEY}): a setting or entry was changed after it was written; {remedy}")
    return body


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
    """``{"size": bytes, HASH_ALGORITHM: checksum, "blocks": {"bytes", "xxh3_64": [...]}}`` of a file, as a
    manifest records it (the block checksums: :mod:`.blocks`)."""
    whole, blocks, size = new_hasher(), BlockHasher(), 0
    with open(path, "rb") as f:  # one pass for both
        while block := f.read(BLOCK_BYTES):
            whole.update(block)
            blocks.update(block)
            size += len(block)
    return {"size": size, HASH_ALGORITHM: whole.hexdigest(), BLOCKS_KEY: blocks.entry()}


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
        self._file = open(self.path, "wb")  # noqa: SIM115 (a writer object: close() closes it)
        self._hash = new_hasher()
        self._blocks = BlockHasher()
        self.size = 0

    def write(self, data: Any) -> int:
        n = self._file.write(data)
        self._hash.update(data)
        self._blocks.update(data)
        self.size += n
        return n

    def close(self) -> None:
        self._file.close()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def entry(self) -> Dict[str, Any]:
        return {"size": self.size, HASH_ALGORITHM: self._hash.hexdigest(), BLOCKS_KEY: self._blocks.entry()}

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
        problem = parse_blocks(entry)
        if problem:
            raise DamagedFileError(source, f"{source} is damaged: in its manifest entry for {name!r}, {problem}")
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
    return entry_problem(path, entry, path.stat().st_size, lambda algorithm: file_checksum(path, algorithm))


def entry_problem(path: Path, entry: Dict[str, Any], size: int, checksum: Callable[[str], str]) -> Optional[str]:
    """Why a file of ``size`` bytes whose content hashes to ``checksum(algorithm)`` does not match its manifest
    ``entry`` (size, then checksum), or None when it does; ``path`` names it."""
    if size != entry["size"]:
        return f"{path} is {size} bytes but was written as {entry['size']}"
    algorithm = next(a for a in HASH_ALGORITHMS if isinstance(entry.get(a), str))
    found = checksum(algorithm)
    if found != entry[algorithm]:
        return (f"{path} does not match its {algorithm} checksum (written {entry[algorithm]}, now {found}): its "
                "content changed after it was written")
    return None


def raise_damaged(folder: PathLike, problems: List[Any], *, what: str, remedy: str = "rebuild it") -> None:
    """Raise one :class:`DamagedFileError` for ``[(file name, description)]`` (nothing when the list is empty)."""
    if not problems:
        return
    first = Path(folder) / problems[0][0]
    listed = "; ".join(p for _, p in problems)
    cls = MissingFileError if all(p.endswith("is missing") for _, p in problems) else DamagedFileError
    raise cls(first, f"the {what} at {folder} is damaged: {listed}; {remedy}")
