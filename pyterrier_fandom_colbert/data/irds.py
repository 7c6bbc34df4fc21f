"""ir_datasets registration: FANDOM-QA wiki corpora, the study's QA release formats, SQuAD-format files, the sample.

Registered on ``import pyterrier_fandom_colbert`` (hence by PyTerrier's ``pyterrier.modules`` entry point), so
``pt.get_dataset('irds:fandom-qa/sample/test')`` works. Registration reads no file; everything loads on first use.

* ``fandom-qa/<wiki>`` (dc, elderscrolls, harrypotter, marvel, starwars, witcher): passages of a Fandom dump. The
  dump comes from ``$FANDOM_QA_DUMP_<WIKI>``, else ``<ir_datasets home>/fandom-qa/<wiki>/<dbname>_pages_current.xml
  [.7z|.bz2|.gz]``, else it is downloaded from Fandom's S3 bucket into that folder. The passages are built once
  into ``<home>/fandom-qa/<wiki>/passages-<key>/`` (key: config + dump), written to a temporary folder and renamed.
* ``fandom-qa/sample[/train|/dev|/test]``: the bundled fictional wiki and its questions (``data/sample/``).
* :func:`qa_json_dataset` / :func:`register_qa_release`: a ``<wiki>_qa.json`` release, split 80/10/10 by page;
  :func:`tsv_release_dataset`: one split folder of the ``passages.tsv``/``queries.tsv``/``triples.tsv``/``wiki.json``
  layout; :func:`squad_dataset` / :func:`register_squad`: any SQuAD-format JSON file.
"""
import functools
import hashlib
import http.client
import json
import logging
import os
import urllib.parse
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional, cast

import ir_datasets
from ir_datasets.formats import BaseDocPairs, BaseDocs, BaseQrels, BaseQueries, GenericDocPair, GenericQrel
from ir_datasets.indices import Docstore, PickleLz4FullStore
from ir_datasets.indices.lz4_pickle import Lz4PickleLookup

from ..storage import atomic_folder, atomic_path, write_json
from .passages import READER_VERSION, DumpStats, Passage, PassageConfig, dump_passages
from .qa_formats import SPLITS, QAQuery, QARelease, SquadDoc, page_splits, read_qa_json, read_squad, read_tsv_release

__all__ = [
    "SAMPLE_DIR",
    "SPLITS",
    "WIKIS",
    "DumpUnavailableError",
    "QAQuery",
    "SquadDoc",
    "dump_url",
    "fandom_dataset",
    "page_splits",
    "qa_json_dataset",
    "register",
    "register_fandom_wiki",
    "register_qa_release",
    "register_squad",
    "squad_dataset",
    "tsv_release_dataset",
]

#: study wiki -> Fandom database name (``marvel`` is the Marvel Database, ``enmarveldatabase``)
WIKIS = {"dc": "dc", "elderscrolls": "elderscrolls", "harrypotter": "harrypotter", "marvel": "enmarveldatabase",
         "starwars": "starwars", "witcher": "witcher"}
SAMPLE_DIR = Path(__file__).resolve().parent / "sample"
logger = logging.getLogger(__name__)
_DUMP_SUFFIXES = (".xml.7z", ".xml.bz2", ".xml.gz", ".xml")


class DumpUnavailableError(OSError):
    """The dump is neither on disk nor downloadable."""


def dump_url(dbname: str) -> str:
    """Fandom's published dump of a wiki (S3 bucket, ``<first letter>/<first two letters>/``).

    >>> dump_url("starwars")
    'https://s3.amazonaws.com/wikia_xml_dumps/s/st/starwars_pages_current.xml.7z'
    """
    return f"https://s3.amazonaws.com/wikia_xml_dumps/{dbname[0]}/{dbname[:2]}/{dbname}_pages_current.xml.7z"


# ----------------------------------------------------------------------------------------------- QA collections

class _Source:
    """Loads a collection once, on first use, for a dataset and all its split subsets."""

    def __init__(self, loader: Callable[[], QARelease], description: str):
        self._loader, self.description = loader, description

    @functools.cached_property
    def data(self) -> QARelease:
        return self._loader()

    @functools.cached_property
    def docstore(self):
        return _MemoryDocstore(self.data.docs)

    def in_split(self, query_id: str, split: Optional[str]) -> bool:
        return split is None or cast(dict, self.data.page_split)[self.data.query_page[query_id]] == split


class _SliceableIter:
    """List iterator that also supports ``it[start:stop]`` as ir_datasets' docs_iter does."""

    def __init__(self, items, start=0, stop=None):
        self._items, self._i, self._stop = items, start, len(items) if stop is None else stop

    def __iter__(self):
        return self

    def __next__(self):
        if self._i >= self._stop:
            raise StopIteration
        self._i += 1
        return self._items[self._i - 1]

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(self._stop - self._i)
            if step != 1:
                raise ValueError(f"step {step} is not supported")
            return _SliceableIter(self._items, self._i + start, self._i + max(stop, start))
        return self._items[self._i + range(self._stop - self._i)[key]]


class _MemoryDocstore(Docstore):
    """Docstore over an in-memory list (lookup by ``doc_id``)."""

    def __init__(self, docs: list):
        super().__init__(type(docs[0]) if docs else Passage, "doc_id")
        self._by_id = {d.doc_id: d for d in docs}

    def get_many_iter(self, doc_ids):
        return (self._by_id[d] for d in doc_ids if d in self._by_id)


class _Docs(BaseDocs):
    def __init__(self, source: _Source):
        self._source = source

    def docs_iter(self):
        return _SliceableIter(self._source.data.docs)

    def docs_count(self):
        return len(self._source.data.docs)

    def docs_cls(self):
        return type(self._source.data.docs[0])

    def docs_store(self, field="doc_id"):
        return self._source.docstore

    def docs_lang(self):
        return "en"


class _Queries(BaseQueries):
    def __init__(self, source: _Source, split: Optional[str]):
        self._source, self._split = source, split

    def queries_iter(self):
        return (q for q in self._source.data.queries if self._source.in_split(q.query_id, self._split))

    def queries_cls(self):
        return type(self._source.data.queries[0])

    def queries_lang(self):
        return "en"


class _Qrels(BaseQrels):
    def __init__(self, source: _Source, split: Optional[str]):
        self._source, self._split = source, split

    def qrels_iter(self):
        return (q for q in self._source.data.qrels if self._source.in_split(q.query_id, self._split))

    def qrels_cls(self):
        return GenericQrel

    def qrels_defs(self):
        return {1: "the passage answers the question"}


class _DocPairs(BaseDocPairs):
    """Pairs whose question and negative passage both belong to the split."""

    def __init__(self, source: _Source, split: Optional[str]):
        self._source, self._split = source, split

    def docpairs_iter(self):
        d, split = self._source.data, self._split
        return (p for p in d.docpairs if self._source.in_split(p.query_id, split) and
                (split is None or d.page_split[d.doc_page[p.doc_id_b]] == split))

    def docpairs_cls(self):
        return GenericDocPair


def _dataset(source: _Source, split: Optional[str] = None, docs: Optional[_Docs] = None) -> ir_datasets.Dataset:
    return ir_datasets.Dataset(docs or _Docs(source), _Queries(source, split), _Qrels(source, split),
                               _DocPairs(source, split))


def qa_json_dataset(path, wiki: Optional[str] = None, split: Optional[str] = None):
    """An ir_datasets Dataset over a study-format ``<wiki>_qa.json`` (whole, or one page-level split).

    Docnos are ``f"{wiki}-{page_id}-{n}"``; query ids ``f"{docno}-{j}"`` for the j-th question of passage n; one
    qrel per question; docpairs (question, its passage, the passage of the paired negative question). The corpus
    is the whole file for every split; queries, qrels and docpairs keep only the split's pages.
    """
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} or None, got {split!r}")
    return _dataset(_qa_json_source(path, wiki), split)


def _qa_json_source(path, wiki=None) -> _Source:
    path = Path(path)
    wiki = wiki or path.name.split("_qa.json")[0]
    return _Source(lambda: read_qa_json(path, wiki), str(path))


def tsv_release_dataset(folder, wiki: str = ""):
    """One split folder of the study's TSV release: ``passages.tsv`` (PID, passage, WID), ``queries.tsv`` (QID,
    query), ``triples.tsv`` (QID+, QID-, PID), ``wiki.json`` (WID -> revid, url, title, PIDs). Qrels are the
    (QID+, PID) pairs of the triples; docpairs (QID+, PID, passage of QID-) where QID- is some triple's QID+."""
    folder = Path(folder)
    return _dataset(_Source(lambda: read_tsv_release(folder, wiki), str(folder)))


def squad_dataset(path):
    """An ir_datasets Dataset over a SQuAD-format JSON file: one doc per paragraph (docno ``f"{article}-{para}"``,
    indices in file order), queries carry ``answers`` and ``answer_starts``, one qrel per answerable question."""
    path = Path(path)
    return _dataset(_Source(lambda: read_squad(path), str(path)))


# ----------------------------------------------------------------------------------------------- dump corpora

def _download(url: str, target: Path, verbose: bool = False) -> None:
    """Stream ``url`` to ``target`` via a temporary file; checks Content-Length and S3's ``x-amz-meta-md5``."""
    try:
        with atomic_path(target) as tmp:
            _stream(url, tmp, target.name, verbose)
    except DumpUnavailableError:
        raise
    except (OSError, http.client.HTTPException) as err:  # urllib's URLError/HTTPError are OSErrors
        raise DumpUnavailableError(f"could not download {url}: {err}") from err


def _stream(url: str, out_path: Path, name: str, verbose: bool) -> None:
    request = urllib.request.Request(url, headers={"User-Agent": "pyterrier-fandom-colbert"})
    with urllib.request.urlopen(request, timeout=60) as response, open(out_path, "wb") as out:
        expected = response.headers.get("Content-Length")
        md5_expected = response.headers.get("x-amz-meta-md5")
        md5, size = hashlib.md5(), 0
        bar = None
        if verbose:
            from tqdm.auto import tqdm
            bar = tqdm(total=int(expected) if expected else None, unit="B", unit_scale=True, desc=name)
        while chunk := response.read(1 << 20):
            out.write(chunk)
            md5.update(chunk)
            size += len(chunk)
            if bar:
                bar.update(len(chunk))
        if bar:
            bar.close()
    if expected is not None and size != int(expected):
        raise DumpUnavailableError(f"{url}: download ended after {size} of {expected} bytes")
    if md5_expected and md5.hexdigest() != md5_expected.strip().lower():
        raise DumpUnavailableError(f"{url}: MD5 {md5.hexdigest()} does not match x-amz-meta-md5 {md5_expected}")


class _DumpCorpus:
    """The passages of one wiki dump, built once into the ir_datasets home (see the module docstring)."""

    def __init__(self, name: str, dbname: str, url: str, config: PassageConfig, verbose: bool = False):
        self.name, self.dbname, self.url, self.config, self.verbose = name, dbname, url, config, verbose

    @property
    def env_var(self) -> str:
        return "FANDOM_QA_DUMP_" + "".join(c if c.isalnum() else "_" for c in self.name).upper()

    def folder(self) -> Path:
        return ir_datasets.util.home_path() / "fandom-qa" / self.name

    def dump_path(self) -> Path:
        """The local dump: ``$FANDOM_QA_DUMP_<WIKI>``, else a file in :meth:`folder`, else downloaded there."""
        if os.environ.get(self.env_var):
            path = Path(os.environ[self.env_var]).expanduser()
            if not path.is_file():
                raise DumpUnavailableError(f"{self.env_var}={path} names no file; point it at the wiki's "
                                           f"{self.dbname}_pages_current.xml.7z (or .bz2, .gz, .xml), or unset it")
            return path
        folder = self.folder()
        target = folder / Path(urllib.parse.urlparse(self.url).path).name
        for path in [target] + [folder / f"{self.dbname}_pages_current{suffix}" for suffix in _DUMP_SUFFIXES]:
            if path.is_file():
                return path
        try:
            _download(self.url, target, self.verbose)
        except DumpUnavailableError as err:
            raise DumpUnavailableError(f"{err}. Put the dump at {target} or set {self.env_var}=/path/to/dump") \
                from err
        return target

    @functools.cached_property
    def store(self):
        dump = self.dump_path()
        st = dump.stat()
        source = {"dump": str(dump.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        key = hashlib.sha1(json.dumps([self.config.to_dict(), source, READER_VERSION],
                                      sort_keys=True).encode()).hexdigest()[:12]
        final = self.folder() / f"passages-{key}"
        if not final.is_dir():
            self._warn_outdated()
            self._build(dump, final, source)

        def never():
            raise RuntimeError(f"passage store {final} is incomplete; delete the folder to rebuild it")
        return PickleLz4FullStore(str(final), never, Passage, "doc_id", ["doc_id"])

    def _warn_outdated(self) -> None:
        """Name the passage stores of this wiki made by an older dump reader: they are not used any more."""
        for old in sorted(self.folder().glob("passages-*/config.json")):
            try:
                reader = json.loads(old.read_text()).get("reader", 1)
            except (OSError, ValueError, AttributeError):
                continue
            if reader != READER_VERSION:
                logger.warning("%s was built by dump reader version %s (now %s) and is not used: the passages of "
                               "fandom-qa/%s are rebuilt; delete the old folder to free its space", old.parent,
                               reader, READER_VERSION, self.name)

    def _build(self, dump: Path, final: Path, source: dict) -> None:
        stats = DumpStats()
        try:
            with atomic_folder(final, what="passage store") as tmp:
                lookup = Lz4PickleLookup(str(tmp), Passage, "doc_id", ["doc_id"])
                with lookup.transaction() as trans:
                    for passage in dump_passages(dump, self.config, stats, verbose=self.verbose):
                        trans.add(passage)
                lookup.close()
                if stats.passages == 0:
                    raise stats.empty_error(dump)
                write_json(tmp / "config.json", {"config": self.config.to_dict(), "source": source,
                                                 "reader": READER_VERSION,
                                                 "stats": {**asdict(stats), "skipped": dict(stats.skipped),
                                                           "guarded": dict(stats.guarded)}})
        except OSError:
            if not final.is_dir():  # anything but another process having finished first
                raise


class _DumpDocs(BaseDocs):
    def __init__(self, corpus: _DumpCorpus):
        self.corpus = corpus

    def docs_iter(self):
        return iter(self.corpus.store)  # sliceable, as pyterrier's get_corpus_iter(start=, count=) needs

    def docs_count(self):
        return self.corpus.store.count()

    def docs_cls(self):
        return Passage

    def docs_store(self, field="doc_id"):
        return self.corpus.store

    def docs_lang(self):
        return "en"


def fandom_dataset(wiki: str, dbname: Optional[str] = None, url: Optional[str] = None,
                   config: PassageConfig = PassageConfig(), verbose: bool = False):
    """An ir_datasets Dataset (docs only) of the passages of a Fandom wiki's dump; see the module docstring."""
    dbname = dbname or WIKIS.get(wiki, wiki)
    return ir_datasets.Dataset(_DumpDocs(_DumpCorpus(wiki, dbname, url or dump_url(dbname), config, verbose)))


# ----------------------------------------------------------------------------------------------- registration

def _registered_key(name: str):
    """What ``name`` was registered for by this module (kept on the dataset, so it survives module reloads);
    None when the name is free, ``...`` when something else holds it."""
    if name not in set(ir_datasets.registry):
        return None
    return getattr(ir_datasets.registry[name], "_pfc_key", ...)


def _register(name: str, key, make: Callable) -> None:
    """Register ``make()`` as ``name``; registering the same thing again is a no-op, anything else an error."""
    existing = _registered_key(name)
    if existing == key:
        return
    if existing is not None:
        raise ValueError(f"dataset name {name!r} is already registered, for {existing!r}; now asked for {key!r}")
    dataset = make()
    dataset._pfc_key = key
    ir_datasets.registry.register(name, dataset)


def register_fandom_wiki(wiki: str, dbname: Optional[str] = None, url: Optional[str] = None,
                         config: PassageConfig = PassageConfig(), prefix: str = "fandom-qa") -> str:
    """Register ``<prefix>/<wiki>`` (passages of the wiki's dump); returns the name."""
    name = f"{prefix}/{wiki}"
    _register(name, ("fandom", dbname, url, config), lambda: fandom_dataset(wiki, dbname, url, config))
    return name


def register_qa_release(name: str, path, wiki: Optional[str] = None) -> None:
    """Register ``name`` and ``name/train|dev|test`` over a ``<wiki>_qa.json`` (subsets share the corpus)."""
    key = ("qa-json", str(Path(path).resolve()), wiki)
    if _registered_key(name) == key:
        return
    source = _qa_json_source(path, wiki)
    docs = _Docs(source)  # one docs handler: ir_datasets sees the subsets as sharing the corpus
    _register(name, key, lambda: _dataset(source, None, docs))
    for split in SPLITS:
        _register(f"{name}/{split}", key, lambda split=split: _dataset(source, split, docs))


def register_squad(name: str, path) -> None:
    """Register a SQuAD-format JSON file as ``name``: ``pt.get_dataset(f'irds:{name}')``."""
    _register(name, ("squad", str(Path(path).resolve())), lambda: squad_dataset(path))


def register() -> None:
    """Register ``fandom-qa/<wiki>`` for the study's wikis and ``fandom-qa/sample[/split]``. Idempotent."""
    for wiki in WIKIS:
        register_fandom_wiki(wiki)
    register_qa_release("fandom-qa/sample", SAMPLE_DIR / "samplewiki_qa.json", wiki="samplewiki")
