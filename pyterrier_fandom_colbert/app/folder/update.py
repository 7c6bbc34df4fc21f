"""Updating a search folder from a newer dump of its wiki (``pfc index --update``): the folder before
(:class:`PreviousFolder`, checked whole first) lends its unchanged pages' passages, text and ColBERT codes."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Dict, List, Union

from ...data.dumpbytes import check_dump_file
from ...storage import MissingFileError, remove_stale_builds
from .build import BuildReport, build
from .manifest import COLBERT_DIR, PAGES, PASSAGES, TFIDF_DIR, load_manifest, remedy_of
from .passages import PassageTable
from .sources import is_dump
from .verify import verify_folder


def update_folder(dump: Union[str, Path], folder: Union[str, Path], *, colbert=None, batch_size: int = 64,
                  verbose: bool = False, restart: bool = False, force: bool = False) -> BuildReport:
    """Bring a search folder built from a dump up to date with a newer dump of the same wiki (``pfc index
    --update``): pages new or changed since (by page id, revision id and :func:`page_hash`) are parsed and
    encoded, unchanged pages keep their passages and ColBERT codes, pages gone are dropped. The folder's encoder,
    passage settings, search settings and residual codec are kept, so the result equals
    ``build_folder(dump, codec_from=<the folder before>)`` with the folder's settings. Written beside the folder
    and swapped in when complete, as a build is.

    The codec was trained on the corpus of the build that made it; after large changes (the manifest's
    ``codec.encoded_since`` near the number of passages) a full rebuild trains one that fits the new text.
    ``batch_size``: passages per forward pass of the encoder loaded here (in the folder's recorded precision).
    An interrupted update resumes as a build does (``restart``: it encodes everything again).

    A dump of another wiki (its ``<siteinfo>`` database name or article URLs differ from the folder's) is refused
    before anything is read, and an older dump (a page at an earlier revision than the folder holds) once that
    page is read, nothing written; ``force=True`` (``pfc index --update --force``) updates from it anyway."""
    from ...data.passages import PassageConfig
    from ...model.colbert import ColBERT

    folder = Path(folder)
    if not (isinstance(dump, (str, Path)) and is_dump(dump)):
        raise ValueError(f"{dump!r} is not a dump file (.xml, .bz2, .gz, .7z); an update reads a newer dump of the "
                         "folder's wiki")
    check_dump_file(dump)
    manifest = load_manifest(folder)
    if manifest.colbert_pending:
        raise ValueError(f"{folder}'s ColBERT part is not built yet (its build is running or was interrupted): "
                         f"complete it with `pfc index {manifest.source} {folder}` before updating it")
    if manifest.reader is None or manifest.passage_config is None:
        raise ValueError(f"{folder} was not built from a dump file (source {manifest.source}); only such a folder "
                         "can be updated: build it again with `pfc index SOURCE FOLDER --overwrite`")
    if not (folder / PAGES).is_file():
        raise MissingFileError(folder / PAGES, f"{folder} is damaged: {folder / PAGES} (the page records an update "
                               f"compares the dump with) is missing; {remedy_of(folder, manifest)}")
    if not force:
        check_same_wiki(dump, folder, manifest.name)
    remove_stale_builds(folder)
    if colbert is None:
        colbert = ColBERT.from_pretrained(manifest.checkpoint, batch_size=batch_size,
                                          cpu_precision=manifest.precision.removeprefix("cpu "))
    if colbert.fingerprint() != manifest.fingerprint:
        raise ValueError(f"the encoder (fingerprint {colbert.fingerprint()}) is not the one that built {folder} "
                         f"({manifest.fingerprint}); an update must encode with the folder's own encoder")
    previous = PreviousFolder(folder)
    previous.allow_older = force
    try:
        codec = previous.index.codec if previous.index.compressed else None
        return build(dump, folder, checkpoint=manifest.checkpoint, colbert=colbert, settings=manifest.settings,
                     overwrite=True, verbose=verbose,
                     passage_config=PassageConfig.from_dict(manifest.passage_config), codec=codec,
                     previous=previous, before=manifest, restart=restart)
    finally:
        previous.close()


def check_same_wiki(dump: Union[str, Path], folder: Path, name: str) -> None:
    """Refuse a dump whose ``<siteinfo>`` names another wiki than the one ``folder`` (manifest name ``name``) was
    built from: another database name, or article URLs (``<base>``) that the folder's passages do not have."""
    from ...data.exports import read_siteinfo

    site = read_siteinfo(dump)
    if site is None:
        return  # no <siteinfo>: the reader refuses the dump itself
    first_url, line = "", ""
    with contextlib.suppress(OSError), open(folder / PASSAGES, encoding="utf-8", errors="replace") as table:
        line = table.readline()
    with contextlib.suppress(ValueError, AttributeError):  # (damage is named by the whole-folder check that follows)
        first_url = str(json.loads(line).get("url") or "") if line.strip() else ""
    other = (f"database {site.dbname!r}" if site.dbname != name else
             f"articles under {site.base_url}" if site.base_url and first_url and
             not first_url.startswith(site.base_url) else None)
    if other is not None:
        raise ValueError(f"{dump} is a dump of {site.sitename!r} ({other}), but {folder} was built from a dump of "
                         f"{name!r}" + (f" (articles such as {first_url})" if site.dbname == name else "") +
                         f"; an update reads a newer dump of the same wiki: build a folder of its own with "
                         f"`pfc index {dump} NEW_FOLDER`, or add --force (update_folder(force=True)) to update "
                         "from it anyway")


class PreviousFolder:
    """The folder an update starts from: its pages by id (with the position of their first passage), its passage
    table, text store and ColBERT index."""

    def __init__(self, folder: Path):
        from ...index.artifact import ColBERTIndex
        from ...lexical.tfidf import TfidfIndex

        self.folder = folder
        #: whether a dump may hold a page at an earlier revision than this folder (``update_folder(force=True)``)
        self.allow_older = False
        # everything an update copies from is checked whole first (its page records, passage table and ColBERT
        # codes are read directly, not through the block checks of a search): damage is refused, never copied
        verify_folder(folder)
        self.index = ColBERTIndex(folder / COLBERT_DIR)
        self.index.verify()
        self.pages: Dict[int, Dict[str, Any]] = {}
        position = 0
        with open(folder / PAGES, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                try:
                    page = json.loads(line)
                    entry = {"hash": str(page["hash"]), "rev": int(page["rev"]), "skip": page["skip"],
                             "start": position, "count": int(page["passages"])}
                    page_id = int(page["id"])
                except (ValueError, KeyError, TypeError) as err:
                    raise ValueError(f"{folder / PAGES} line {number} is not a page record ({err}); rebuild the "
                                     f"folder with `pfc index DUMP {folder} --overwrite`") from None
                self.pages.setdefault(page_id, entry)
                position += entry["count"]
        self.table = PassageTable(folder)
        self.tfidf = TfidfIndex(folder / TFIDF_DIR)
        self.tfidf.verify()  # its passages' text is copied too: verified whole, never re-signed unchecked
        if position != len(self.table) or len(self.index) != len(self.table):
            raise ValueError(f"{folder} is damaged: {PAGES} lists {position:,} passages, {PASSAGES} holds "
                             f"{len(self.table):,} and the ColBERT index {len(self.index):,}; rebuild it with "
                             f"`pfc index DUMP {folder} --overwrite`")

    def records(self, page: Dict[str, Any]) -> List[Dict[str, Any]]:
        positions = list(range(page["start"], page["start"] + page["count"]))
        texts = self.tfidf.texts(positions) if positions else []
        out = []
        for position, text in zip(positions, texts):
            meta = self.table.get(position)
            out.append({"docno": meta["docno"], "text": text, "title": meta.get("title") or "",
                        "url": meta.get("url") or "", "section": meta.get("section") or "",
                        "page_id": meta.get("page_id"), "_old": position})
        return out

    def close(self) -> None:
        self.table.close()


