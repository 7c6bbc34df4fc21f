"""Fact questions on a real fan wiki: is the answer in the top 10 of ``pfc search``, per system?

    python benchmarks/fact_questions.py                                  # the shared PokéClicker dump, whole
    python benchmarks/fact_questions.py --pages 300 --folder runs/fq300  # question pages + 300 seeded others
    python benchmarks/fact_questions.py --ceiling-only --folder runs/x   # only the answers the reader keeps

The questions (``benchmarks/fact_questions.jsonl``, one JSON object a line) were written by hand on the shared
PokéClicker wiki dump; each answer sits in an infobox, a table or a template call of its page, not in its prose.
Each line: ``qid``, ``question`` (in a fan's words), ``title`` (the page that holds the answer), ``answers``
(the answer as a reader sees it on that page; any one counts), ``kind`` (``infobox``, ``table`` or ``template``)
and ``where`` (the infobox field, table column or template that holds it).

The script builds a ``pfc`` search folder from the dump with :func:`~pyterrier_fandom_colbert.app.folder.build_folder`
(what ``pfc index DUMP FOLDER`` runs; an existing folder is reused, whatever reader built it), asks every question
through the :class:`~pyterrier_fandom_colbert.app.search.Searcher` behind ``pfc search`` for each system, and
reports per system:

- ``answer@k``: the share of questions with an answer string in the text of one of the top ``k`` passages;
- ``answer_on_page@k``: the same, counting only passages of the question's page (an answer such as "34,000" can
  also occur on another page, by chance);
- ``page@k``: the share with a passage of the question's page in the top ``k``;

and, over every indexed passage, the ceiling: ``answerable`` (an answer string occurs in some passage) and
``answerable_on_page`` (in a passage of the question's page). A reader that drops templates and tables caps
every system at that ceiling. ``--ceiling-only`` reports only the ceiling: from the folder when it exists, else
from the passages the dump reader makes (``data.passages.dump_passages``, what ``pfc index`` indexes) without
building anything (seconds instead of minutes: for trying a reader change).

Matching (:func:`contains_answer`): case-insensitive, Unicode-normalised (NFKC), runs of whitespace as one space,
thousands separators removed between digits ("2,500" = "2500"), dashes unified and spaces around them removed
("113 - 687" = "113–687"), and the answer must start and end at word boundaries ("50" does not match "2,500").

``--pages N`` restricts the build to the question pages plus N other article pages drawn with ``--seed`` (as
distractors): the raw ``<page>`` elements are copied into a smaller export beside the folder, so any reader
version reads the same pages. Skips (message, exit 0) when the dump is absent.
"""
from __future__ import annotations

import argparse
import bz2
import gzip
import json
import os
import random
import re
import sys
import time
import unicodedata
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DUMP = ROOT.parent / "shared" / "data" / "wikis" / "pokeclickerwiki_pages_current.xml.bz2"
DEFAULT_QUESTIONS = Path(__file__).resolve().parent / "fact_questions.jsonl"
KINDS = ("infobox", "table", "template")
FIELDS = ("qid", "question", "title", "answers", "kind", "where")
SYSTEMS = ("hybrid", "colbert", "tfidf")

# -- answer matching --------------------------------------------------------------------------------------------

#: a thousands separator: between a digit and a group of exactly three digits (comma, no-break or thin spaces)
_THOUSANDS = re.compile(r"(?<=\d)[,\u00a0\u202f\u2009](?=\d{3}(?!\d))")
_DASHES = re.compile(r"\s*[-\u2010-\u2015\u2212]\s*")
_SPACES = re.compile(r"\s+")


def normalise(text: str) -> str:
    """``text`` as :func:`contains_answer` compares it: thousands separators removed, NFKC, case-folded, dashes
    as ``-`` without spaces around them, whitespace runs as one space, stripped.

    >>> normalise("  Costs 1,000,000\\u00a0Poké  Dollars ")
    'costs 1000000 poké dollars'
    >>> normalise("113 \\u2013 687"), normalise("1, 234")
    ('113-687', '1, 234')
    """
    text = _THOUSANDS.sub("", text)  # before NFKC, which turns no-break spaces into plain ones
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _DASHES.sub("-", text)
    return _SPACES.sub(" ", text).strip()


def contains_answer(text: str, answers: Iterable[str]) -> bool:
    """True when one of ``answers`` occurs in ``text`` after :func:`normalise`, starting and ending at word
    boundaries (no letter or digit just before or after it).

    >>> contains_answer("Tokens: 34,000; location: Hoenn", ["34000"]), contains_answer("costs 2,500", ["500"])
    (True, False)
    """
    return _occurs(normalise(text), answers)


def _occurs(haystack: str, answers: Iterable[str]) -> bool:
    """:func:`contains_answer` on an already normalised ``haystack``."""
    for answer in answers:
        needle = normalise(answer)
        if not needle:
            continue
        start = haystack.find(needle)
        while start >= 0:
            end = start + len(needle)
            before = haystack[start - 1] if start else " "
            after = haystack[end] if end < len(haystack) else " "
            if not (_is_word_char(before) and _is_word_char(needle[0])) and \
                    not (_is_word_char(after) and _is_word_char(needle[-1])):
                return True
            start = haystack.find(needle, start + 1)
    return False


def _is_word_char(ch: str) -> bool:
    return ch.isalnum()


# -- questions --------------------------------------------------------------------------------------------------

def load_questions(path: Path) -> List[Dict[str, Any]]:
    """The questions of a JSON-lines file, checked: every field present and of the right type, non-empty
    answers, ``kind`` one of :data:`KINDS`, unique ``qid``. A bad line raises ``ValueError`` naming the file,
    the line and what was expected."""
    path = Path(path)
    questions, seen = [], set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            q = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: not JSON ({err.msg})") from None
        if not isinstance(q, dict) or set(q) != set(FIELDS):
            got = sorted(q) if isinstance(q, dict) else type(q).__name__
            raise ValueError(f"{where}: expected an object with exactly the fields {list(FIELDS)}, got {got}")
        for name in ("qid", "question", "title", "kind", "where"):
            if not isinstance(q[name], str) or not q[name].strip():
                raise ValueError(f"{where}: {name}={q[name]!r}; expected non-empty text")
        if not isinstance(q["answers"], list) or not q["answers"] or \
                not all(isinstance(a, str) and normalise(a) for a in q["answers"]):
            raise ValueError(f"{where}: answers={q['answers']!r}; expected a non-empty list of non-empty strings")
        if q["kind"] not in KINDS:
            raise ValueError(f"{where}: kind={q['kind']!r}; expected one of {', '.join(KINDS)}")
        if q["qid"] in seen:
            raise ValueError(f"{where}: qid {q['qid']!r} is used twice")
        seen.add(q["qid"])
        questions.append(q)
    if not questions:
        raise ValueError(f"{path} holds no questions")
    return questions


# -- a smaller export: question pages + seeded distractors ------------------------------------------------------

def _open_dump(path: Path):
    suffix = path.suffix.lower()
    if suffix == ".bz2":
        return bz2.open(path, "rb")
    if suffix == ".gz":
        return gzip.open(path, "rb")
    if suffix == ".xml":
        return open(path, "rb")
    raise ValueError(f"{path}: --pages reads .xml, .xml.bz2 or .xml.gz exports, not {suffix}")


def _raw_pages(path: Path) -> Tuple[bytes, bytes, List[Tuple[str, bytes]]]:
    """(the export's header up to its first ``<page>``, its closing tag, [(title, raw ``<page>…</page>`` bytes)])."""
    with _open_dump(path) as f:
        data = f.read()
    first = data.find(b"<page>")
    if first < 0:
        raise ValueError(f"{path} holds no <page> element; expected a MediaWiki export")
    pages, pos = [], first
    title_re = re.compile(rb"<title>(.*?)</title>", re.S)
    while True:
        start = data.find(b"<page>", pos)
        if start < 0:
            break
        end = data.find(b"</page>", start)
        if end < 0:
            raise ValueError(f"{path}: a <page> element at byte {start} is not closed")
        end += len(b"</page>")
        raw = data[start:end]
        match = title_re.search(raw)
        title = (ET.fromstring(b"<t>" + match.group(1) + b"</t>").text or "") if match else ""
        pages.append((title, raw))
        pos = end
    return data[:first], b"</mediawiki>\n", pages


def _is_article(raw: bytes) -> bool:
    """A main-namespace page that is not a redirect nor a translated subpage (``Title/de``)."""
    ns = re.search(rb"<ns>(\d+)</ns>", raw)
    title = re.search(rb"<title>(.*?)</title>", raw, re.S)
    text = re.search(rb"<text[^>]*>(.*?)</text>", raw, re.S)
    return (ns is not None and ns.group(1) == b"0" and b"<redirect" not in raw
            and not (title and b"/" in title.group(1))
            and not (text and text.group(1).lstrip().upper().startswith(b"#REDIRECT")))


def write_subset(dump: Path, out: Path, titles: Set[str], distractors: int, seed: int) -> Dict[str, Any]:
    """Write to ``out`` (``.xml``) an export with the pages titled ``titles`` plus ``distractors`` other article
    pages drawn with ``seed``, in dump order; return what it holds. A title not in the dump raises ValueError."""
    header, footer, pages = _raw_pages(dump)
    present = {title for title, _ in pages}
    missing = sorted(titles - present)
    if missing:
        raise ValueError(f"{dump} has no page titled {missing[:5]}; the questions name pages of another wiki?")
    others = sorted({title for title, raw in pages if title not in titles and _is_article(raw)})
    chosen = set(random.Random(seed).sample(others, min(distractors, len(others))))
    keep = titles | chosen
    tmp = out.with_name(out.name + ".partial")
    with open(tmp, "wb") as f:
        f.write(header)
        for title, raw in pages:
            if title in keep:
                f.write(raw + b"\n")
        f.write(footer)
    os.replace(tmp, out)
    return {"question_pages": len(titles), "distractor_pages": len(chosen), "seed": seed}


# -- running ----------------------------------------------------------------------------------------------------

def source_for(dump: Path, folder: Path, questions: Sequence[Dict[str, Any]], pages: Optional[int],
               seed: int) -> Tuple[Path, Optional[Dict[str, Any]]]:
    """The export to read: ``dump`` itself, or with ``pages`` a subset written beside ``folder`` (and what it
    holds)."""
    if pages is None:
        return dump, None
    folder.parent.mkdir(parents=True, exist_ok=True)
    source = folder.with_name(folder.name + ".pages.xml")
    return source, write_subset(dump, source, {q["title"] for q in questions}, pages, seed)


def ensure_folder(dump: Path, folder: Path, questions: Sequence[Dict[str, Any]], pages: Optional[int], seed: int,
                  checkpoint: Optional[str], verbose: bool) -> Dict[str, Any]:
    """Reuse ``folder`` when it is a search folder, else build it (from a subset export with ``pages``)."""
    from pyterrier_fandom_colbert.app.folder import build_folder, is_search_folder, load_manifest

    if is_search_folder(folder):
        manifest = load_manifest(folder)
        print(f"reusing {folder} ({manifest.passages:,} passages of {manifest.articles:,} articles from "
              f"{manifest.source}; built in {manifest.seconds.get('total', 0):.0f} s)", file=sys.stderr)
        return {"reused": True, "manifest": manifest.to_dict()}
    source, subset = source_for(dump, folder, questions, pages, seed)
    started = time.perf_counter()
    report = build_folder(source, folder, checkpoint=checkpoint, verbose=verbose)
    print(report.summary(), file=sys.stderr)
    return {"reused": False, "subset": subset, "build_seconds": round(time.perf_counter() - started, 1),
            "manifest": report.manifest.to_dict()}


def folder_passages(folder: Path) -> Iterator[Tuple[str, str]]:
    """(page title, text) of every passage of a search folder, in index order (no model loaded)."""
    from pyterrier_fandom_colbert.app.folder import TFIDF_DIR, PassageTable
    from pyterrier_fandom_colbert.lexical.tfidf import TfidfIndex

    table, tfidf = PassageTable(folder), TfidfIndex(folder / TFIDF_DIR)
    try:
        count, chunk = len(table), 1024
        for start in range(0, count, chunk):
            positions = list(range(start, min(start + chunk, count)))
            for position, text in zip(positions, tfidf.texts(positions)):
                yield table.get(position).get("title") or "", text
    finally:
        table.close()


def reader_passages(source: Path) -> Iterator[Tuple[str, str]]:
    """(page title, text) of every passage the dump reader makes of ``source`` (what ``pfc index`` would index),
    without building anything."""
    from pyterrier_fandom_colbert.data.passages import dump_passages

    for passage in dump_passages(source):
        yield passage.title, passage.text


def _same_page(a: str, b: str) -> bool:
    return normalise(a) == normalise(b)


def ceiling(passages: Iterable[Tuple[str, str]], questions: Sequence[Dict[str, Any]]) -> Dict[str, Dict[str, bool]]:
    """Per qid: is an answer in some passage (``anywhere``), in a passage of its page (``on_page``)?
    ``passages``: (page title, text) pairs."""
    found = {q["qid"]: {"anywhere": False, "on_page": False} for q in questions}
    for title, text in passages:
        text = normalise(text)
        for q in questions:
            hit = found[q["qid"]]
            if hit["on_page"]:
                continue
            if _occurs(text, q["answers"]):
                hit["anywhere"] = True
                hit["on_page"] = _same_page(title, q["title"])
    return found


def ask(searcher, questions: Sequence[Dict[str, Any]], system: str, k: int) -> Dict[str, Dict[str, Any]]:
    """Per qid: answer in the top k, answer in a top-k passage of its page, its page in the top k, its rank."""
    out = {}
    for q in questions:
        results = searcher.search(q["question"], system=system, k=k, explain=False)["results"]
        answer_ranks = [r["rank"] for r in results if contains_answer(r["text"], q["answers"])]
        page_ranks = [r["rank"] for r in results if _same_page(r["title"], q["title"])]
        on_page = [r["rank"] for r in results
                   if _same_page(r["title"], q["title"]) and contains_answer(r["text"], q["answers"])]
        out[q["qid"]] = {"answer": bool(answer_ranks), "answer_on_page": bool(on_page), "page": bool(page_ranks),
                         "first_answer_rank": answer_ranks[0] if answer_ranks else None}
    return out


def _share(values: Iterable[bool]) -> float:
    values = list(values)
    return round(sum(values) / len(values), 3) if values else 0.0


def summarise(questions, per_system: Dict[str, Dict[str, Dict[str, Any]]], ceil: Dict[str, Dict[str, bool]],
              k: int) -> Dict[str, Any]:
    """Shares per system (all questions and per kind) and the ceiling."""
    groups = {"all": [q["qid"] for q in questions]}
    for kind in KINDS:
        groups[kind] = [q["qid"] for q in questions if q["kind"] == kind]
    summary: Dict[str, Any] = {"questions": {name: len(ids) for name, ids in groups.items()},
                               "ceiling": {name: {"answerable": _share(ceil[i]["anywhere"] for i in ids),
                                                  "answerable_on_page": _share(ceil[i]["on_page"] for i in ids)}
                                           for name, ids in groups.items() if ids}}
    for system, hits in per_system.items():
        summary[system] = {name: {f"answer@{k}": _share(hits[i]["answer"] for i in ids),
                                  f"answer_on_page@{k}": _share(hits[i]["answer_on_page"] for i in ids),
                                  f"page@{k}": _share(hits[i]["page"] for i in ids)}
                           for name, ids in groups.items() if ids}
    return summary


def table(summary: Dict[str, Any], systems: Sequence[str], k: int) -> str:
    """The summary as a Markdown table: one row per system and the ceiling, shares as counts out of n."""
    n = summary["questions"]
    kinds = [name for name in ("all", *KINDS) if n.get(name)]

    def cell(share: float, name: str) -> str:
        return f"{round(share * n[name])}/{n[name]}"

    head = ["system", "measure"] + [f"{name} (n={n[name]})" for name in kinds]
    rows = [head, ["---"] * len(head)]
    for system in systems:
        for measure in (f"answer@{k}", f"answer_on_page@{k}", f"page@{k}"):
            rows.append([system, measure] + [cell(summary[system][name][measure], name) for name in kinds])
    for measure in ("answerable", "answerable_on_page"):
        rows.append(["(indexed text)", measure] + [cell(summary["ceiling"][name][measure], name) for name in kinds])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", type=Path, default=DEFAULT_DUMP, help="MediaWiki export the questions were written on")
    ap.add_argument("--folder", type=Path, default=ROOT / "runs" / "fact_questions" / "pokeclicker",
                    help="pfc search folder to build (reused when it exists: delete it to rebuild with a new reader)")
    ap.add_argument("--questions", type=Path, default=DEFAULT_QUESTIONS)
    ap.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    ap.add_argument("-k", "--k", type=int, default=10, help="results per question (default 10)")
    ap.add_argument("--pages", type=int, default=None, metavar="N",
                    help="build from the question pages plus N other article pages drawn with --seed (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint", default=None, help="ColBERT checkpoint (default: the package's)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--ceiling-only", action="store_true", help="only count the answers present in the index")
    ap.add_argument("--json", type=Path, default=None, help="also write the report (per question too) as JSON")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    args = ap.parse_args(argv)
    if args.pages is not None and args.pages < 0:
        ap.error(f"--pages {args.pages}: expected 0 or more distractor pages")
    if not 1 <= args.k <= 50:
        ap.error(f"--k {args.k}: expected 1 to 50 (pfc search's limit)")
    if not args.dump.is_file() and not args.folder.is_dir():
        print(f"{args.dump} is absent: nothing to measure", file=sys.stderr)
        return 0
    questions = load_questions(args.questions)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as pfc does: sleeping, not spinning, OpenMP threads
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    from pyterrier_fandom_colbert.app.folder import is_search_folder

    if args.ceiling_only and not is_search_folder(args.folder):
        source, subset = source_for(args.dump, args.folder, questions, args.pages, args.seed)
        print(f"no search folder at {args.folder}: counting the answers in the passages the reader makes of "
              f"{source} (nothing built)", file=sys.stderr)
        build: Dict[str, Any] = {"built": False, "source": str(source), "subset": subset}
        ceil = ceiling(reader_passages(source), questions)
    else:
        build = ensure_folder(args.dump, args.folder, questions, args.pages, args.seed, args.checkpoint,
                              verbose=not args.quiet)
        ceil = ceiling(folder_passages(args.folder), questions)
    systems = [] if args.ceiling_only else list(args.systems)
    per_system, seconds = {}, {}
    if systems:
        from pyterrier_fandom_colbert.app.search import Searcher

        searcher = Searcher(args.folder, warm=False)
        for system in systems:
            started = time.perf_counter()
            per_system[system] = ask(searcher, questions, system, args.k)
            seconds[system] = round(time.perf_counter() - started, 1)
    summary = summarise(questions, per_system, ceil, args.k)
    print(table(summary, systems, args.k))
    missing = [q["qid"] for q in questions if not ceil[q["qid"]]["on_page"]]
    print(f"\nnot in the indexed text of their page ({len(missing)}): {' '.join(missing)}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"dump": str(args.dump), "folder": str(args.folder), "questions_file": str(args.questions),
                  "k": args.k, "build": build, "search_seconds": seconds, "summary": summary,
                  "per_question": {q["qid"]: {"kind": q["kind"], "ceiling": ceil[q["qid"]],
                                              **{s: per_system[s][q["qid"]] for s in systems}}
                                   for q in questions}}
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
