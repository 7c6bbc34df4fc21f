"""Self-supervised training pairs from an unlabeled wiki corpus, to adapt a model to one's own Fandom wiki.

From passages with ``title``, ``section`` and ``text`` (the ``fandom-qa/<wiki>`` corpora, or any dicts/records
with those fields) two kinds of (query, passage) pairs are made:

* **heading pairs**: the query is ``"<page title> <section heading>"`` and every passage under that heading is
  relevant to it (the heading prefix the passage builder writes, ``"Heading. "``, is cut from the passage so the
  answer is not given away);
* **held-out sentence pairs**: one sentence of a passage (seeded choice) is the query and the passage *without
  that sentence* is its relevant document (the inverse-cloze task), for passages of at least
  ``min_sentences`` sentences.

The result is a :class:`~pyterrier_fandom_colbert.training.examples.QAData`, so every training form (QPP, QQP,
in-batch negatives) applies to it unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from ..storage import JsonConfig
from .examples import QAData


@dataclass(frozen=True)
class SelfSupConfig(JsonConfig):
    """Which pairs to make; saved with the run's training settings."""
    headings: bool = True
    sentences: bool = True
    #: a passage needs at least this many sentences to give one away (the rest must still say something)
    min_sentences: int = 3
    #: held-out sentences shorter than this many words are not used as queries
    min_query_words: int = 4
    seed: int = 0
    #: stop after this many passages (None: the whole corpus)
    max_passages: Optional[int] = None

    def __post_init__(self) -> None:
        if not (self.headings or self.sentences):
            raise ValueError("SelfSupConfig: enable headings, sentences or both")
        if self.min_sentences < 2:
            raise ValueError(f"min_sentences={self.min_sentences}; at least 2 (one to hold out, one to keep)")


def _field(doc: Any, name: str) -> str:
    value = doc.get(name, "") if isinstance(doc, dict) else getattr(doc, name, "")
    return value if isinstance(value, str) else ""


def strip_heading(text: str, section: str) -> str:
    """The passage without the ``"Heading. "`` prefix the passage builder may have written.

    >>> strip_heading("Trivia. Orrin was left-handed.", "Trivia")
    'Orrin was left-handed.'
    >>> strip_heading("Orrin was left-handed.", "Trivia")
    'Orrin was left-handed.'
    """
    for prefix in (f"{section}. ", f"{section}: ", f"{section} "):
        if section and text.startswith(prefix):
            return text[len(prefix):]
    return text


def hold_out_sentence(sentences: List[str], pick: int) -> Tuple[str, str]:
    """(the held-out sentence, the passage rebuilt from the others).

    >>> hold_out_sentence(["A b.", "C d.", "E f."], 1)
    ('C d.', 'A b. E f.')
    """
    rest = sentences[:pick] + sentences[pick + 1:]
    return sentences[pick], " ".join(rest)


def selfsup_collection(passages: Iterable[Any], config: SelfSupConfig = SelfSupConfig()) -> QAData:
    """Heading and held-out-sentence pairs from passages (dicts or records with docno/doc_id, text, title,
    section). Docnos of rewritten passages are ``"<docno>#h"`` (heading stripped) and ``"<docno>#s<k>"``
    (sentence k held out); heading queries are ``"h:<title>\\x1f<section>"``, sentence queries ``"s:<docno>"``."""
    from ..data.passages import split_sentences

    rng = np.random.default_rng(config.seed)
    queries: Dict[str, str] = {}
    qrels: Dict[str, List[str]] = {}
    docs: Dict[str, str] = {}
    for n, doc in enumerate(passages):
        if config.max_passages is not None and n >= config.max_passages:
            break
        docno = _field(doc, "docno") or _field(doc, "doc_id")
        if not docno:
            raise ValueError(f"passage {n} has no docno/doc_id")
        title, section = _field(doc, "title").strip(), _field(doc, "section").strip()
        body = strip_heading(_field(doc, "text").strip(), section)
        if not body:
            continue
        if config.headings and title:
            qid = f"h:{title}\x1f{section}"
            queries[qid] = f"{title} {section}".strip()
            docs[f"{docno}#h"] = body
            qrels.setdefault(qid, []).append(f"{docno}#h")
        if config.sentences:
            sentences = split_sentences(body)
            usable = [i for i, s in enumerate(sentences) if len(s.split()) >= config.min_query_words]
            if len(sentences) >= config.min_sentences and usable:
                pick = usable[int(rng.integers(len(usable)))]
                query, rest = hold_out_sentence(sentences, pick)
                qid = f"s:{docno}"
                queries[qid] = query
                docs[f"{docno}#s{pick}"] = rest
                qrels[qid] = [f"{docno}#s{pick}"]
    if not qrels:
        raise ValueError("no self-supervised pairs: the passages have no titles/sections and no passage has "
                         f"{config.min_sentences}+ sentences")
    return QAData(queries, {q: tuple(d) for q, d in qrels.items()}, docs)


#: file name endings of MediaWiki dumps (:func:`..data.wikidump.iter_pages` reads them by their first bytes)
DUMP_SUFFIXES = (".xml", ".bz2", ".gz", ".7z")


def looks_like_dump(source: str) -> bool:
    """Whether ``source`` names a dump file (it exists as a file, or ends like one) rather than an ir_datasets id."""
    from pathlib import Path

    path = Path(source)
    return path.is_file() or path.name.lower().endswith(DUMP_SUFFIXES)


def selfsup_from_source(source: str, config: SelfSupConfig = SelfSupConfig()) -> QAData:
    """:func:`selfsup_collection` over a MediaWiki/Fandom dump file (cut into passages as ``fandom-qa/<wiki>``
    corpora are, :func:`..data.passages.dump_passages`) or over the docs of an ir_datasets corpus."""
    if not looks_like_dump(source):
        return selfsup_from_irds(source, config)
    from pathlib import Path

    from ..data.passages import dump_passages

    if not Path(source).is_file():
        raise FileNotFoundError(f"{source}: no such dump file")
    return selfsup_collection(dump_passages(source), config)


def selfsup_from_irds(dataset_id: str, config: SelfSupConfig = SelfSupConfig()) -> QAData:
    """:func:`selfsup_collection` over the docs of an ir_datasets corpus (e.g. ``fandom-qa/witcher``)."""
    import ir_datasets

    import pyterrier_fandom_colbert  # noqa: F401  (registers fandom-qa/...)

    ds = ir_datasets.load(dataset_id)
    if not ds.has_docs():
        raise ValueError(f"{dataset_id!r} has no docs to build self-supervised pairs from")
    return selfsup_collection(ds.docs_iter(), config)
