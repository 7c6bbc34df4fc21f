"""The ColBERT index of a build that does not train its codec (an update, or ``codec_from=``): passages kept
from the folder before are copied, the others encoded, and every passage written in index order."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Tuple

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .manifest import SearchSettings
    from .update import PreviousFolder


def assemble(index, colbert, tfidf, reuse: np.ndarray, settings: "SearchSettings", codec,
             previous: Optional["PreviousFolder"],
             encoded: Iterator[Tuple[np.ndarray, np.ndarray, List[int]]]) -> None:
    """Write the ColBERT index of a build that does not train its codec: every passage, in order, goes to the
    index writer, copied from ``previous`` (its codes, or its fp16 vectors) or, for the passages not found there
    (``reuse`` -1), taken in order from ``encoded`` (their fp16 vectors, token ids and rows per window, encoded
    beforehand: :mod:`.resume`) and compressed by ``codec``, one passage at a time, whatever the build: so a
    passage's codes never depend on which others were encoded with it."""
    from ...index.formats import ResidualStore
    from ...index.writer import IndexWriter
    from ...model.tokenization import check_long_docs

    count = len(reuse)
    stride = check_long_docs("windows", None, colbert.tokenizer.max_doc_pieces, colbert.config.doc_maxlen)
    old = previous.index if previous is not None else None
    if old is not None and (old.meta.long_docs, old.meta.stride) != ("windows", stride):
        raise ValueError(f"{old.path} stores long passages as {old.meta.long_docs} (stride {old.meta.stride}), not "
                         f"as this build would (windows, stride {stride}); rebuild the folder")
    docnos = docnos_of(tfidf, np.arange(count))
    writer = IndexWriter(index.path, colbert.config, colbert.fingerprint(), long_docs="windows", stride=stride,
                         compression=settings.compression, codec=codec)
    with writer:
        windowed = 0
        fresh = iter(encoded)
        for position, docno in enumerate(docnos):
            if reuse[position] < 0:
                vectors, ids, parts = next(fresh)
                windowed += len(parts) > 1
                writer.add(str(docno), vectors, ids, parts)
                continue
            source, doc = old, int(reuse[position])
            assert source is not None
            start, end = int(source.offsets[doc]), int(source.offsets[doc + 1])
            parts = parts_of(source, doc)
            windowed += len(parts) > 1
            ids = np.asarray(source.token_ids[start:end])
            if codec is not None:
                store = source.store
                assert isinstance(store, ResidualStore)
                arrays = store.arrays
                writer.add_coded(str(docno), np.asarray(arrays.codes[start:end]),
                                 np.asarray(arrays.residuals[start:end]), ids, parts,
                                 exact=arrays.exact_between(start, end) if codec.exact_above is not None else None)
            else:
                writer.add(str(docno), np.asarray(source.vectors[start:end]), ids, parts)
        writer.truncated_docs, writer.windowed_docs = 0, windowed
    index._forget()


def parts_of(index, doc: int) -> List[int]:
    """Rows of each window of document ``doc`` of ``index``."""
    parts = index.part_offsets
    start, end = index.offsets[doc], index.offsets[doc + 1]
    first, last = np.searchsorted(parts, [start, end])
    return np.diff(np.asarray(parts[first:last + 1])).astype(int).tolist()




def docnos_of(tfidf, positions: np.ndarray, block: int = 4096) -> Iterator[str]:
    """The docnos at ``positions`` of the TF-IDF index, read ``block`` at a time: all of a large wiki's docnos as one
    numpy array of fixed-width strings would take the longest docno's width for every passage."""
    positions = np.asarray(positions, dtype=np.int64)
    for start in range(0, len(positions), block):
        yield from (str(docno) for docno in tfidf.docnos.fwd[positions[start:start + block]])


def stored_passages(tfidf, count: int, positions: Optional[np.ndarray] = None,
                     chunk: int = 1024) -> Iterator[Dict[str, str]]:
    """``docno``/``text`` records read back from the TF-IDF text store, in index order (the ColBERT indexer's
    bar, which moves every model batch, shows the progress); ``positions``: only those."""
    positions = np.arange(count) if positions is None else np.asarray(positions, dtype=np.int64)
    for start in range(0, len(positions), chunk):
        ids = positions[start:start + chunk]
        for docno, text in zip(docnos_of(tfidf, ids, chunk), tfidf.texts(ids)):
            yield {"docno": docno, "text": text}


