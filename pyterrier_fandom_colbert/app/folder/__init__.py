"""A search folder: everything ``pfc search`` and ``pfc serve`` need for one wiki, built by ``pfc index``.

Layout::

    manifest.json       what was indexed, by which encoder, counts, sizes, build time, the search settings, and
                        ``files``: size, checksum and block checksums of passages.jsonl, passages.offsets.npy and
                        the two indexes' pt_meta.json (which hold their own manifests)
    passages.jsonl      one line per passage, in index order: docno, title, url, section, page_id
    passages.offsets.npy   [passages + 1] int64 byte offsets into passages.jsonl (a passage's line is read alone)
    pages.jsonl         (built from a dump) one line per page of the dump, in dump order: page id, revision id, a
                        hash of what its passages are made from, why it was left out (or null), its passages
    tfidf/              TfidfIndex with the passage text stored (store_text=True)
    colbert/            ColBERTIndex of the same passages in the same order, by the manifest's encoder: residual
                        codes (``residual2`` by default: a centroid id and 2 bits per dimension per token, searched
                        by its centroids, no neighbour index) or fp16 vectors with an IVF neighbour index

Opening a folder (:func:`open_integrity`, done by :class:`PassageTable`) checks every file's size and the
checksums of the offsets and of both indexes' ``pt_meta.json`` (so an index folder swapped in from another
search folder is refused, naming it); each block of ``passages.jsonl`` is verified the first time the process
reads it; :func:`verify_folder` checks every checksum and line.

:func:`build_folder` streams the source once into the TF-IDF index and the passage table (pages are parsed,
split and indexed as they are read), then encodes the passages read back from the TF-IDF text store into the
ColBERT index. Everything is written into a hidden temporary folder beside the target and renamed into place
when complete (:func:`~pyterrier_fandom_colbert.storage.atomic_folder`): a failed build leaves nothing behind,
and a build killed outright (``kill -9``) leaves a temporary folder that the next build of the same target
removes. A new folder is published as soon as its TF-IDF part is written, its manifest marking ColBERT pending
(searched with TF-IDF only), and completed by renaming the ColBERT part in and replacing the manifest
(:func:`.build.build`); the encoded passages are kept (:mod:`.resume`), so an interrupted build resumes.

:func:`update_folder` (``pfc index --update DUMP FOLDER``) makes the folder of a newer dump of the same wiki:
pages whose id, revision and hash are unchanged keep their passages, text and ColBERT codes (copied, not parsed
or encoded again); new and changed pages are parsed and encoded; pages gone from the dump are dropped. The
residual codec is the folder's own, so the result is exactly what :func:`build_folder` makes of the new dump
with ``codec_from=`` the old folder (what the tests compare), not a fresh build that trains a new codec. It is
written and swapped in like a build: a crash leaves the old folder as it was.

One module per job: :mod:`.manifest` (file names, :class:`SearchSettings`: a ``CompressionSpec`` and the
format's retriever options, :class:`Manifest`, opening),
:mod:`.passages` (:class:`PassageTable`), :mod:`.sources` (dumps, ir_datasets ids, records), :mod:`.build`
(:func:`build_folder` in its steps), :mod:`.assemble` (the ColBERT index of a build that reuses a codec),
:mod:`.update` (:func:`update_folder`), :mod:`.verify` (:func:`verify_folder`); every public name is importable
from here. SIGTERM handling and the removal of stale temporary folders are the storage base's
(:mod:`~pyterrier_fandom_colbert.storage.builds`).
"""
from ...index.fp16.options import Fp16Options
from ...index.residual.compress import DEFAULT_EXACT_SHARE, CompressionSpec
from ...index.residual.options import ResidualOptions
from ...storage import remove_stale_builds
from .build import ADVISE_REBUILD, ANN_MIN_TOKENS, BuildReport, build_folder, folder_bytes
from .manifest import (
    CHECKED_ON_OPEN,
    COLBERT_DIR,
    COLBERT_META,
    FOLDER_FILES,
    FORMAT,
    MANIFEST,
    OFFSETS,
    PAGES,
    PASSAGES,
    TFIDF_DIR,
    TFIDF_META,
    VERSION,
    Manifest,
    SearchSettings,
    is_search_folder,
    load_manifest,
    open_integrity,
)
from .passages import PassageTable, checked_offsets
from .sources import DUMP_SUFFIXES, SourceStats, open_source, page_hash
from .update import update_folder
from .verify import verify_folder

__all__ = [
    "ADVISE_REBUILD",
    "ANN_MIN_TOKENS",
    "CHECKED_ON_OPEN",
    "COLBERT_DIR",
    "COLBERT_META",
    "DEFAULT_EXACT_SHARE",
    "DUMP_SUFFIXES",
    "FOLDER_FILES",
    "FORMAT",
    "MANIFEST",
    "OFFSETS",
    "PAGES",
    "PASSAGES",
    "TFIDF_DIR",
    "TFIDF_META",
    "VERSION",
    "BuildReport",
    "CompressionSpec",
    "Fp16Options",
    "Manifest",
    "PassageTable",
    "ResidualOptions",
    "SearchSettings",
    "SourceStats",
    "build_folder",
    "checked_offsets",
    "folder_bytes",
    "is_search_folder",
    "load_manifest",
    "open_integrity",
    "open_source",
    "page_hash",
    "remove_stale_builds",
    "update_folder",
    "verify_folder",
]
