"""Parsing of QA collections into memory: the study's ``<wiki>_qa.json`` and TSV release layouts, SQuAD files.

Each reader returns a :class:`QARelease` (docs, queries, qrels, docpairs and the page of each query and doc);
:mod:`pyterrier_fandom_colbert.data.irds` wraps these as ir_datasets Datasets. :func:`page_splits` assigns whole pages
to train/dev/test. The formats are described in ``docs/data.md`` ("The study's QA release formats").
"""
# no `from __future__ import annotations`: PyTerrier reads the doc class field types (str) at run time

import csv
import json
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Optional

from ir_datasets.formats import GenericDocPair, GenericQrel, GenericQuery

from ..storage.files import read_input_json
from .passages import Passage

__all__ = [
    "SPLITS",
    "SPLIT_FRACTIONS",
    "SPLIT_SEED",
    "QAQuery",
    "QARelease",
    "SquadDoc",
    "page_splits",
    "read_qa_json",
    "read_squad",
    "read_tsv_release",
]

_log = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")
SPLIT_FRACTIONS = (0.8, 0.1, 0.1)
SPLIT_SEED = 42


class QAQuery(NamedTuple):
    """A question with its gold answers: texts and character offsets into the relevant passage."""
    query_id: str
    text: str
    answers: tuple
    answer_starts: tuple

    def default_text(self) -> str:
        return self.text


class SquadDoc(NamedTuple):
    doc_id: str
    text: str
    title: str

    def default_text(self) -> str:
        return self.text


def page_splits(page_ids, seed: int = SPLIT_SEED, fractions=SPLIT_FRACTIONS) -> dict:
    """Assign whole pages to train/dev/test: a seeded shuffle of the sorted ids, cut 80/10/10 (rounded).

    >>> s = page_splits(range(20)); [sum(v == k for v in s.values()) for k in SPLITS]
    [16, 2, 2]
    """
    ids = sorted(set(page_ids), key=lambda p: (isinstance(p, str), p))
    random.Random(seed).shuffle(ids)
    n_dev, n_test = (int(len(ids) * f + 0.5) for f in fractions[1:])
    n_train = len(ids) - n_dev - n_test
    return {p: SPLITS[0] if i < n_train else SPLITS[1] if i < n_train + n_dev else SPLITS[2]
            for i, p in enumerate(ids)}


@dataclass
class QARelease:
    """A parsed QA collection; ``query_page``/``doc_page`` and ``page_split`` drive the split subsets."""
    docs: list
    queries: list
    qrels: list
    docpairs: list = field(default_factory=list)
    query_page: dict = field(default_factory=dict)
    doc_page: dict = field(default_factory=dict)
    page_split: Optional[dict] = None


def _question_pairs(query_of: dict, negatives: list, query_doc: dict) -> list:
    """Docpairs (question, its passage, the passage of a negative question); unresolvable negatives are logged."""
    pairs, missing = [], 0
    for qid, neg_text in negatives:
        neg = query_of.get(neg_text)
        if neg is None:
            missing += 1
            continue
        pairs.append(GenericDocPair(qid, query_doc[qid], query_doc[neg]))
    if missing:
        _log.info("%d negative questions match no unique positive question; their docpairs are left out", missing)
    return pairs


def _also_positive(pages: list, wiki: str, unique: dict, path: Path) -> list:
    """The further judgements of the pages' ``also_positive`` lists (see :func:`read_qa_json`)."""
    qrels = []
    for page in pages:
        also = page.get("also_positive")
        if also is None:
            continue
        if len(also) != len(page["text"]):
            raise ValueError(f"{path}: page id={page.get('id')!r}: also_positive must be parallel to text "
                             f"({len(page['text'])} passages), got {len(also)} lists")
        for n, questions in enumerate(also):
            for question in questions:
                if question not in unique:
                    raise ValueError(f"{path}: page id={page.get('id')!r}, passage {n}: also_positive names "
                                     f"{question!r}, which is not the question of exactly one passage")
                qrels.append(GenericQrel(unique[question], f"{wiki}-{page['id']}-{n}", 1))
    return qrels


def read_qa_json(path: Path, wiki: str) -> QARelease:
    """A study-format ``<wiki>_qa.json``: docnos ``f"{wiki}-{page_id}-{n}"``, query ids ``f"{docno}-{j}"``,
    :class:`QAQuery` when every page has ``answers``; pages split by :func:`page_splits`. A page's optional
    ``also_positive`` (parallel to ``text``) names questions of other passages that a passage answers too: each
    adds a relevance judgement of that question's query for this passage (the bundled sample's corrections)."""
    with open(path, encoding="utf-8") as f:
        pages = json.load(f)
    if not isinstance(pages, list):
        raise ValueError(f"{path}: expected a JSON list of pages, got {type(pages).__name__}")
    has_answers = bool(pages) and all("answers" in p for p in pages)
    docs, queries, qrels, query_page, doc_page, query_doc = [], [], [], {}, {}, {}
    by_text: dict = {}
    negatives, seen_pages = [], set()
    for page in pages:
        pid = page.get("id")
        lengths = {k: len(page.get(k, ())) for k in ("text", "positive", "negative") + (("answers",) * has_answers)}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"{path}: page id={pid!r}: text/positive/negative must be parallel lists, got {lengths}")
        if pid in seen_pages:
            raise ValueError(f"{path}: page id={pid!r} appears twice")
        seen_pages.add(pid)
        sections = page.get("sections") or [""] * len(page["text"])
        for n, text in enumerate(page["text"]):
            docno = f"{wiki}-{pid}-{n}"
            docs.append(Passage(docno, text, page["title"], wiki, page["url"], sections[n], int(pid),
                                int(page["revid"])))
            doc_page[docno] = pid
            for j, question in enumerate(page["positive"][n]):
                qid = f"{docno}-{j}"
                if has_answers:
                    ans = page["answers"][n][j]
                    queries.append(QAQuery(qid, question, (ans["text"],), (int(ans["start"]),)))
                else:
                    queries.append(GenericQuery(qid, question))
                qrels.append(GenericQrel(qid, docno, 1))
                query_page[qid], query_doc[qid] = pid, docno
                by_text.setdefault(question, []).append(qid)
                if j < len(page["negative"][n]):
                    negatives.append((qid, page["negative"][n][j]))
    unique = {text: qids[0] for text, qids in by_text.items() if len(qids) == 1}
    qrels += _also_positive(pages, wiki, unique, path)
    return QARelease(docs, queries, qrels, _question_pairs(unique, negatives, query_doc), query_page, doc_page,
                  page_splits(doc_page.values()))


def _read_tsv(path: Path, columns: int) -> list:
    """Rows of a headerless (or ``PID``/``QID``-headed) TSV file, checked for their column count."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    if rows and rows[0] and rows[0][0].strip().lower() in ("pid", "qid", "qid+"):
        rows = rows[1:]
    for i, row in enumerate(rows, 1):
        if len(row) != columns:
            raise ValueError(f"{path}: row {i} has {len(row)} columns, expected {columns}: {row!r}")
    return rows


def read_tsv_release(folder: Path, wiki: str) -> QARelease:
    """One split folder of the TSV layout (``passages.tsv``, ``queries.tsv``, ``triples.tsv``, ``wiki.json``)."""
    with open(folder / "wiki.json", encoding="utf-8") as f:
        pages = json.load(f)
    docs, doc_page = [], {}
    for pid, text, wid in _read_tsv(folder / "passages.tsv", 3):
        page = pages.get(wid)
        if page is None:
            raise ValueError(f"{folder / 'passages.tsv'}: passage {pid} names page {wid!r}, absent from wiki.json")
        docs.append(Passage(pid, text, page.get("title", ""), wiki, page.get("url", ""), "", int(wid),
                            int(page.get("revid", 0))))
        doc_page[pid] = wid
    queries = [GenericQuery(qid, text) for qid, text in _read_tsv(folder / "queries.tsv", 2)]
    known = {d.doc_id for d in docs}
    qrel_pairs: dict = {}
    query_doc: dict = {}
    triples = _read_tsv(folder / "triples.tsv", 3)
    for pos, _neg, pid in triples:
        if pid not in known:
            raise ValueError(f"{folder / 'triples.tsv'}: passage {pid} is not in passages.tsv")
        qrel_pairs[(pos, pid)] = None
        query_doc.setdefault(pos, pid)
    pairs = [GenericDocPair(pos, pid, query_doc[neg]) for pos, neg, pid in triples if neg in query_doc]
    qrels = [GenericQrel(q, d, 1) for q, d in qrel_pairs]
    return QARelease(docs, queries, qrels, pairs, {q: doc_page[d] for q, d in query_doc.items()}, doc_page)


def read_squad(path: Path) -> QARelease:
    """A SQuAD-format JSON file (``.json``, or ``.json.bz2`` as the full SQuAD training set is kept): one
    :class:`SquadDoc` per paragraph, answerable questions as :class:`QAQuery`."""
    data = read_input_json(path, "SQuAD JSON file")
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ValueError(f"{path}: not SQuAD format (expected an object with a 'data' list of articles)")
    docs, queries, qrels, seen = [], [], [], set()
    for a, article in enumerate(data["data"]):
        for p, para in enumerate(article["paragraphs"]):
            docno, context = f"{a}-{p}", para["context"]
            docs.append(SquadDoc(docno, context, article.get("title", "")))
            for qa in para["qas"]:
                if qa.get("is_impossible"):
                    continue  # SQuAD 2.0 unanswerable question: no passage answers it
                qid = str(qa["id"])
                if qid in seen:
                    raise ValueError(f"{path}: question id {qid!r} appears twice")
                seen.add(qid)
                for ans in qa["answers"]:
                    start = int(ans["answer_start"])
                    if context[start:start + len(ans["text"])] != ans["text"]:
                        raise ValueError(f"{path}: question {qid!r}: answer {ans['text']!r} is not at character "
                                         f"{start} of paragraph {docno}")
                queries.append(QAQuery(qid, qa["question"], tuple(x["text"] for x in qa["answers"]),
                                       tuple(int(x["answer_start"]) for x in qa["answers"])))
                qrels.append(GenericQrel(qid, docno, 1))
    return QARelease(docs, queries, qrels)
