"""Where a search folder's passages come from: a MediaWiki dump (parsed page by page, or copied from the folder
an update starts from when a page is unchanged), an ir_datasets id, or an iterable of passage dicts."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from ...progress import progress

if TYPE_CHECKING:  # pragma: no cover
    from .update import PreviousFolder

DUMP_SUFFIXES = (".xml", ".bz2", ".gz", ".7z")


@dataclass
class SourceStats:
    """Filled in while a source is read."""

    name: str = ""
    pages: int = 0
    articles: int = 0
    passages: int = 0
    skipped: Dict[str, int] = field(default_factory=dict)
    #: what a dump's size limits cut (None: nothing): pages, passages, the first as [title, size, unit]
    cut: Optional[Dict[str, Any]] = None


def is_dump(source: Union[str, Path]) -> bool:
    path = Path(source)
    return path.is_file() or path.suffix.lower() in DUMP_SUFFIXES


def open_source(source: Union[str, Path, Iterable[Dict[str, Any]]], stats: SourceStats,
                verbose: bool = False, passage_config=None, pages: Optional[List[Dict[str, Any]]] = None,
                previous: Optional["PreviousFolder"] = None) -> Tuple[Iterator[Dict[str, Any]], Optional[int], str]:
    """(passage records, their number when known beforehand, a description) of a dump file, an ir_datasets id
    (``irds:`` prefix optional) or an iterable of dicts (``docno``, ``text``, optional ``title``/``url``/
    ``section``/``page_id``). ``passage_config``: how a dump becomes passages (``data.passages.PassageConfig``;
    None: the default). A dump's pages are appended to ``pages`` (what ``pages.jsonl`` holds) as they are read;
    ``previous``: the folder an update starts from, whose unchanged pages are copied, not parsed (their records
    carry ``_old``, the passage's position there)."""
    if isinstance(source, (str, Path)) and is_dump(source):
        from ...data.dumpbytes import check_dump_file

        path = check_dump_file(source)
        return (_dump_records(path, stats, verbose, passage_config, pages if pages is not None else [], previous),
                None, str(path.resolve()))
    if isinstance(source, (str, Path)):
        return _irds_records(str(source), stats)
    stats.name = stats.name or "passages"
    return _counted(iter(source), stats), None, "records"


def page_hash(site, page) -> str:
    """What a page's passages are made from (the site's name and URLs, the page's title, namespace, redirect flag
    and wikitext), hashed: equal hashes give equal passages under one reader and passage configuration."""
    import xxhash

    return xxhash.xxh3_128_hexdigest(json.dumps([site.dbname, site.base_url, page.title, page.ns, page.redirect,
                                                 page.text], ensure_ascii=False).encode("utf-8"))


def _dump_records(path: Path, stats: SourceStats, verbose: bool, config, pages: List[Dict[str, Any]],
                  previous: Optional["PreviousFolder"] = None) -> Iterator[Dict[str, Any]]:
    from ...data.passages import DumpStats, PassageConfig, read_article
    from ...data.wikidump import iter_pages

    config = config or PassageConfig()
    dump_stats = DumpStats(min_page_words=config.min_page_words)
    total = path.stat().st_size if path.suffix.lower() == ".xml" else None
    bar = progress(total=total, desc=f"reading {path.name}", unit="B", enabled=verbose)
    if verbose and hasattr(bar, "unit_scale"):
        bar.unit_scale, bar.unit_divisor = True, 1024
    seen = 0
    reader = iter_pages(path, config.max_page_bytes)
    try:
        for site, page in reader:
            dump_stats.pages += 1
            key = page_hash(site, page)
            old = previous.pages.get(page.page_id) if previous is not None else None
            if previous is not None and old is not None and page.revid < old["rev"] and not previous.allow_older:
                raise ValueError(f"{path} is older than {previous.folder}: its page {page.title!r} (id "
                                 f"{page.page_id}) is at revision {page.revid}, the folder's at {old['rev']}; "
                                 f"update from a newer dump of the wiki, or add --force (update_folder(force="
                                 "True)) to go back to this one; nothing was written")
            if old is not None and old["hash"] == key and old["rev"] == page.revid:
                reason = old["skip"]
                if reason is None:
                    dump_stats.articles += 1
                else:
                    dump_stats.skipped[reason] += 1
                assert previous is not None
                records = previous.records(old)
                if page.cut_from:  # (cut the same way when the folder was built: counted again here)
                    dump_stats.note_cut(page.title, page.cut_from, "page bytes")
            else:
                reason, passages = read_article(site, page, config, dump_stats)
                records = [{"docno": p.doc_id, "text": p.text, "title": p.title, "url": p.url,
                            "section": p.section, "page_id": p.page_id} for p in passages]
            pages.append({"id": page.page_id, "rev": page.revid, "hash": key, "skip": reason,
                          "passages": len(records)})
            if records and not stats.name:
                stats.name = site.dbname
            for record in records:
                dump_stats.passages += 1
                stats.pages, stats.articles = dump_stats.pages, dump_stats.articles
                stats.passages = dump_stats.passages
                yield record
            bar.update(reader.bytes_read - seen)
            seen = reader.bytes_read
            bar.set_postfix(pages=dump_stats.pages, passages=dump_stats.passages, refresh=False)
    finally:
        bar.close()
    stats.pages, stats.articles, stats.passages = dump_stats.pages, dump_stats.articles, dump_stats.passages
    stats.skipped = dict(dump_stats.skipped)
    if dump_stats.cut_pages or dump_stats.cut_passages:
        stats.cut = {"pages": dump_stats.cut_pages, "passages": dump_stats.cut_passages,
                     "first": [list(t) for t in dump_stats.cut_titles]}
    if dump_stats.passages == 0:
        raise dump_stats.empty_error(path)
    if not stats.name:
        stats.name = path.name.split("_pages")[0]




def _irds_records(dataset_id: str, stats: SourceStats) -> Tuple[Iterator[Dict[str, Any]], Optional[int], str]:
    import ir_datasets

    import pyterrier_fandom_colbert  # noqa: F401  (registers the fandom-qa datasets)

    name = dataset_id.removeprefix("irds:")
    try:
        dataset = ir_datasets.load(name)
    except KeyError:
        raise ValueError(f"{dataset_id!r} is neither a dump file (.xml, .bz2, .gz, .7z) nor an ir_datasets id; "
                         "give the path of a MediaWiki export or a dataset id such as fandom-qa/sample") from None
    if not dataset.has_docs():
        raise ValueError(f"ir_datasets {name!r} has no documents to index")
    stats.name = name

    def records() -> Iterator[Dict[str, Any]]:
        for doc in dataset.docs_iter():
            text = doc.default_text() if hasattr(doc, "default_text") else getattr(doc, "text", "")
            yield {"docno": doc.doc_id, "text": text, "title": getattr(doc, "title", "") or "",
                   "url": getattr(doc, "url", "") or "", "section": getattr(doc, "section", "") or "",
                   "page_id": getattr(doc, "page_id", None)}

    try:
        total = dataset.docs_count()
    except (AttributeError, NotImplementedError, TypeError):
        total = None
    return _counted(records(), stats), total, f"irds:{name}"


def _counted(records: Iterator[Dict[str, Any]], stats: SourceStats) -> Iterator[Dict[str, Any]]:
    pages = set()
    for record in records:
        stats.passages += 1
        pages.add(record.get("page_id", record.get("title")))
        stats.pages = stats.articles = len(pages)
        yield record

