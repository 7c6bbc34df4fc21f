"""The postings of a TF-IDF index being written, kept on disk as they are made (:class:`PostingsSpill`)."""
from __future__ import annotations

from array import array
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import scipy.sparse as sp


class PostingsSpill:
    """The postings of an index being written (term ids and counts, document after document), kept in two files
    of its folder as they are made: memory holds at most :attr:`BUFFER` postings, whatever the corpus (8 bytes a
    posting held in memory were most of a large build's memory). :meth:`save_matrix` writes ``tf.npz`` from the
    files and deletes them.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> spill = PostingsSpill(folder, buffer=2)
    >>> [spill.add([0, 3], [2, 1]), spill.add([], []), spill.add([1], [5])]   # postings so far, per document
    [2, 2, 3]
    >>> spill.close(); spill.save_matrix(folder / "tf.npz", np.array([0, 2, 2, 3]), 4)
    >>> sp.load_npz(folder / "tf.npz").toarray().tolist(), sorted(p.name for p in folder.iterdir())
    ([[2, 0, 0, 1], [0, 0, 0, 0], [0, 5, 0, 0]], ['tf.npz'])
    """

    BUFFER = 1 << 20
    TERMS_FILE, COUNTS_FILE = "postings-terms.i32.tmp", "postings-counts.i32.tmp"

    def __init__(self, folder: Path, buffer: Optional[int] = None):
        self.folder = Path(folder)
        self.buffer = buffer or self.BUFFER
        self.terms, self.counts = array("i"), array("i")
        self.count = 0
        self._files = [open(self.folder / name, "wb")  # noqa: SIM115 (close() closes them; the writer calls it)
                       for name in (self.TERMS_FILE, self.COUNTS_FILE)]

    def add(self, terms: Sequence[int], counts: Sequence[int]) -> int:
        """Append one document's postings (ascending term ids, their counts); returns the postings so far."""
        self.terms.extend(terms)
        self.counts.extend(counts)
        self.count += len(terms)
        if len(self.terms) >= self.buffer:
            self._flush()
        return self.count

    def _flush(self) -> None:
        for values, out in zip((self.terms, self.counts), self._files):
            values.tofile(out)
            del values[:]

    def close(self) -> None:
        if not self._files[0].closed:
            self._flush()
        for out in self._files:
            out.close()

    def save_matrix(self, path: Path, indptr: np.ndarray, num_terms: int) -> None:
        """Write the document × term CSR matrix (int32 counts) to ``path`` (``scipy.sparse.save_npz``,
        uncompressed), read from the files through memory maps; then delete the files."""
        spilled = [self.folder / name for name in (self.TERMS_FILE, self.COUNTS_FILE)]
        terms, counts = (np.memmap(f, dtype=np.int32, mode="r") if self.count else np.zeros(0, np.int32)
                         for f in spilled)
        matrix = sp.csr_matrix((counts, terms, indptr), shape=(len(indptr) - 1, num_terms))
        sp.save_npz(path, matrix, compressed=False)
        del matrix, terms, counts
        for f in spilled:
            f.unlink()
