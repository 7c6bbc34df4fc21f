"""npids docno lookups, written and opened around two npids (0.1.3) faults: a one-string block that is written
but unreadable, and integer inverses that lose the docnos of later blocks."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, List

from .errors import DamagedFileError, MissingFileError, PathLike


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


def build_docno_inverse(path: PathLike) -> bool:
    """Write the docno → id half of an npids lookup whose forward half was built with ``build_inv=False``.

    npids (0.1.3) picks a forward codec per block of docnos and an inverse to match, and some of its integer
    inverses silently lose docnos (``-1`` on lookup): those of later blocks when there are several, and numbered
    docnos with leading zeros (``d08`` … ``d15``) in a single block. So npids' own choice is written to a trial
    copy and kept only if every docno looks up to its own id; otherwise the lookup gets npids' hash inverse,
    which stores every docno.

    Returns True when npids' own inverse was kept: then every docno looked up to its own id, so no docno occurs
    twice; False (the hash inverse) leaves that to :func:`docno_mismatches`.
    """
    import os
    import shutil

    import npids
    from npids import codecs
    from npids.builder import InvLookupBuilder
    from npids.utils import FileManager

    path = Path(path)
    with npids.Lookup(path) as lookup:
        several = len(lookup.fwd.codecs) > 1
    if not several:
        trial = path.with_name(path.name + ".inverse-trial")
        shutil.copyfile(path, trial)
        try:
            InvLookupBuilder.build(trial)
            if not docno_mismatches(trial, limit=1):
                os.replace(trial, path)
                return True
        finally:
            trial.unlink(missing_ok=True)
    with npids.Lookup(path) as lookup, FileManager(path, "a") as writer:
        codecs.inv["hash"].build(lookup.fwd, writer)
    return False


def docno_mismatches(path: PathLike, limit: int, chunk: int = 1 << 16) -> List[str]:
    """Up to ``limit`` docnos of the npids lookup at ``path`` that do not look up to their own id: a docno that
    occurs twice (its inverse holds one of its ids), or one an inexact inverse lost."""
    import npids
    import numpy as np

    found: List[str] = []
    with npids.Lookup(path) as lookup:
        count = len(lookup)
        for start in range(0, count, chunk):
            ids = np.arange(start, min(start + chunk, count))
            docnos = lookup.fwd[ids]
            found.extend(str(d) for d in docnos[np.asarray(lookup.inv[docnos]) != ids])
            if len(found) >= limit:
                break
    return found[:limit]


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
