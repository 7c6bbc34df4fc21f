"""npids docno lookups, written and opened around two npids (0.1.3) faults: a one-string block that is written
but unreadable, and integer inverses that lose the docnos of later blocks."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

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


def build_docno_inverse(path: PathLike) -> None:
    """Write the docno → id half of an npids lookup whose forward half was built with ``build_inv=False``.

    npids (0.1.3) picks a forward codec per block of docnos and an inverse to match, and some of its integer
    inverses silently lose docnos (``-1`` on lookup): those of later blocks when there are several, and numbered
    docnos with leading zeros (``d08`` … ``d15``) in a single block. So npids' own choice is written to a trial
    copy and kept only if every docno looks up to its own id; otherwise the lookup gets npids' hash inverse,
    which stores every docno.
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
            if inverse_is_exact(trial):
                os.replace(trial, path)
                return
        finally:
            trial.unlink(missing_ok=True)
    with npids.Lookup(path) as lookup, FileManager(path, "a") as writer:
        codecs.inv["hash"].build(lookup.fwd, writer)


def inverse_is_exact(path: PathLike, chunk: int = 1 << 16) -> bool:
    """True when every docno of the npids lookup at ``path`` looks up to its own id."""
    import npids
    import numpy as np

    with npids.Lookup(path) as lookup:
        count = len(lookup)
        for start in range(0, count, chunk):
            ids = np.arange(start, min(start + chunk, count))
            if not np.array_equal(np.asarray(lookup.inv[list(lookup.fwd[ids])]), ids):
                return False
    return True


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
