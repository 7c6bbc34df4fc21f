"""Writing files and folders so that a failure never leaves a half-written artifact behind, and small frozen
configuration dataclasses that travel as JSON.

* :func:`atomic_path` yields a unique temporary path beside the target; the target appears (``os.replace``) only
  when the block succeeds, and the temporary file is removed when it fails. Concurrent writers of the same
  target never share a temporary name: the last complete write wins, and no reader sees a partial file.
* :func:`atomic_folder` (and :class:`AtomicFolder`, for writers that stream over many calls) does the same for a
  whole folder. An existing target is moved aside, the new folder renamed into place, and the old one deleted
  only afterwards; if the rename fails, the old folder is put back. ``overwrite=True`` replaces only what the
  writer's ``replaceable`` check (e.g. :func:`is_artifact_folder`) accepts, never the current or home folder.
* :class:`JsonConfig` (:mod:`.config`) is the one serialisation API of the package's configuration dataclasses:
  ``to_dict``/``from_dict`` (unknown fields are refused by name) and ``save_json``/``load_json`` (errors name the
  file).
* Manifests: every artifact records the size, content checksum (:data:`HASH_ALGORITHM`) and per-block
  checksums (:mod:`.blocks`, XXH3-64 per MiB) of each file it wrote (:func:`manifest_entry`, :class:`HashingFile`
  for files hashed while they are streamed out). :class:`ArtifactIntegrity` (:mod:`.integrity`) is the one
  integrity base of every artifact: sizes and small files' checksums on open, each block of a large file
  verified the first time the process reads it, every checksum in ``verify()``. A missing, resized, altered or
  unparsable file raises :class:`DamagedFileError` naming it; a folder without a manifest is refused
  (:class:`NoManifestError`) unless opened ``unchecked=True``; a manifest that lacks a file its artifact must have
  is refused (:class:`IncompleteManifestError`), and a metadata file is sealed by a checksum of its own content
  (:func:`sealed`, :func:`unsealed`) (see docs/integrity.md).

Created files and folders follow the user's umask.

One module per concern, every name importable from here as before: :mod:`.files` (atomic writes, JSON, artifact
metadata), :mod:`.config` (:class:`JsonConfig`), :mod:`.errors` (:class:`DamagedFileError`,
:class:`MissingFileError`), :mod:`.manifests` (sizes and checksums), :mod:`.blocks` (block checksums),
:mod:`.integrity` (the artifact integrity base), :mod:`.docnos` (npids docno lookups), :mod:`.builds` (SIGTERM
as Ctrl-C during a build, removal of the temporary folders of builds killed outright).
"""
from .blocks import BLOCK_ALGORITHM, BLOCK_BYTES, BlockCheck, BlockHasher, block_sums
from .builds import OWNER_FILE, interruptible, mark_owner, release_owner, remove_stale_builds
from .config import JsonConfig
from .docnos import build_docno_inverse, docno_lookup_builder, docno_mismatches, open_npids
from .errors import DamagedFileError, MissingFileError, PathLike
from .files import (
    ARTIFACT_META_FILE,
    AtomicFolder,
    artifact_path,
    atomic_folder,
    atomic_path,
    check_target,
    is_artifact_folder,
    move_into,
    read_artifact_meta,
    read_json,
    read_term_lines,
    remove_leftovers,
    write_artifact_meta,
    write_durably,
    write_durably_with,
    write_json,
    write_text,
)
from .integrity import ArtifactIntegrity, IncompleteManifestError, NoManifestError
from .manifests import (
    HASH_ALGORITHM,
    HASH_ALGORITHMS,
    SEAL_KEY,
    HashingFile,
    build_manifest,
    check_sizes,
    checksum_problem,
    file_checksum,
    folder_files,
    manifest_entry,
    new_hasher,
    parse_manifest,
    raise_damaged,
    sealed,
    unsealed,
)

__all__ = [
    "ARTIFACT_META_FILE",
    "BLOCK_ALGORITHM",
    "BLOCK_BYTES",
    "HASH_ALGORITHM",
    "HASH_ALGORITHMS",
    "OWNER_FILE",
    "SEAL_KEY",
    "ArtifactIntegrity",
    "AtomicFolder",
    "BlockCheck",
    "BlockHasher",
    "DamagedFileError",
    "HashingFile",
    "IncompleteManifestError",
    "JsonConfig",
    "MissingFileError",
    "NoManifestError",
    "PathLike",
    "artifact_path",
    "atomic_folder",
    "atomic_path",
    "block_sums",
    "build_docno_inverse",
    "build_manifest",
    "check_sizes",
    "check_target",
    "checksum_problem",
    "docno_lookup_builder",
    "docno_mismatches",
    "file_checksum",
    "folder_files",
    "interruptible",
    "is_artifact_folder",
    "manifest_entry",
    "mark_owner",
    "move_into",
    "new_hasher",
    "open_npids",
    "parse_manifest",
    "raise_damaged",
    "read_artifact_meta",
    "read_json",
    "read_term_lines",
    "release_owner",
    "remove_leftovers",
    "remove_stale_builds",
    "sealed",
    "unsealed",
    "write_artifact_meta",
    "write_durably",
    "write_durably_with",
    "write_json",
    "write_text",
]
