"""Build the bundled sample's study-format QA file from its wiki export and questions.

    python datasets/build_sample_qa.py            # writes pyterrier_fandom_colbert/data/sample/samplewiki_qa.json
    python datasets/build_sample_qa.py --check    # exit 1 if the file on disk differs from a fresh build

Each question of ``questions.tsv`` (``title<TAB>question<TAB>answer``; the answer is a verbatim span of the page's
prose) is attached to the one passage of its page that contains the answer. A question whose answer is in no
passage, or in several, is an error: all are reported and nothing is written; with ``--skip-unresolved`` such
questions are left out instead (and listed on stderr). Negatives are questions of other
pages of the same split (train/dev/test as ``fandom-qa/sample`` splits them), drawn with a fixed seed, one per
positive question. Each page also carries ``sections`` (parallel to ``text``) and ``answers`` (parallel to
``positive``: ``{"text", "start"}`` with ``start`` a character offset into the passage).

``extra_judgements.tsv`` (``title<TAB>question<TAB>evidence``) corrects the judgements: a question of
``questions.tsv`` that another passage answers too, judged by reading that passage (its infobox facts, say). The
passage is the one of page ``title`` that holds the verbatim ``evidence``; pages with such passages carry
``also_positive`` (parallel to ``text``: the questions each passage answers besides its own), which the reader
turns into further relevance judgements of the same query. A judgement whose passage is the question's own (the
reader put the evidence and the answer span in one passage, as reader version 4 does when a page's facts open
its lead passage) is implied: it adds nothing and is counted as such.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import random
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Optional

from pyterrier_fandom_colbert.data.irds import SAMPLE_DIR
from pyterrier_fandom_colbert.data.passages import DumpStats, PassageConfig, dump_passages
from pyterrier_fandom_colbert.data.qa_formats import SPLIT_SEED, page_splits


def read_questions(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        if reader.fieldnames != ["title", "question", "answer"]:
            raise SystemExit(f"{path}: header must be title<TAB>question<TAB>answer, got {reader.fieldnames}")
        rows = list(reader)
    for i, row in enumerate(rows, 2):
        if any(not (row[k] or "").strip() for k in ("title", "question", "answer")):
            raise SystemExit(f"{path}: line {i} has an empty field: {row}")
    return rows


def read_extra_judgements(path: Path) -> list[dict]:
    """Rows of ``extra_judgements.tsv`` (none when the file is absent)."""
    if not path.exists():
        return []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        if reader.fieldnames != ["title", "question", "evidence"]:
            raise SystemExit(f"{path}: header must be title<TAB>question<TAB>evidence, got {reader.fieldnames}")
        return list(reader)


def add_extra_judgements(pages: dict, rows: list[dict], implied: Optional[list] = None) -> list[str]:
    """Attach each extra judgement to the one passage of its page holding its evidence; the problems found.
    A judgement of the question's own passage is implied: appended to ``implied`` (when given), not added."""
    asked = {q for page in pages.values() for qs in page["positive"] for q in qs}
    errors = []
    for row in rows:
        page = pages.get(row["title"])
        hits = [] if page is None else [n for n, text in enumerate(page["text"]) if row["evidence"] in text]
        if row["question"] not in asked:
            errors.append(f"extra judgement for {row['question']!r}: no such question in questions.tsv")
        elif len(hits) != 1:
            where = "no such page" if page is None else ("in no passage" if not hits else f"in passages {hits}")
            errors.append(f"{row['title']!r}: evidence {row['evidence']!r} of {row['question']!r}: {where}")
        elif row["question"] in page["positive"][hits[0]]:
            if implied is not None:
                implied.append(row["question"])
        else:
            page.setdefault("also_positive", [[] for _ in page["text"]])[hits[0]].append(row["question"])
    return errors


def build(xml: Path, questions: Path, seed: int = SPLIT_SEED, config: PassageConfig = PassageConfig(),
          skip_unresolved: bool = False, extra: Optional[Path] = None, implied: Optional[list] = None):
    """Returns ``(pages, errors, skipped, stats)``; ``pages`` is the study-format list, empty when there are
    errors; ``skipped`` lists the questions left out under ``skip_unresolved``; ``implied`` (when given) gets the
    questions whose extra judgement is their own passage."""
    stats = DumpStats()
    pages: dict = {}
    for p in dump_passages(xml, config, stats):
        page = pages.setdefault(p.title, {"id": p.page_id, "revid": p.revid, "url": p.url, "title": p.title,
                                          "text": [], "sections": []})
        page["text"].append(p.text)
        page["sections"].append(p.section)
    for page in pages.values():
        page["positive"] = [[] for _ in page["text"]]
        page["answers"] = [[] for _ in page["text"]]

    errors, skipped = [], []
    rows = read_questions(questions)
    for question, count in Counter(r["question"] for r in rows).items():
        if count > 1:
            errors.append(f"question asked {count} times: {question!r}")
    for row in rows:
        page = pages.get(row["title"])
        if page is None:
            errors.append(f"{row['title']!r}: no such article page (redirect, other namespace or stub?) "
                          f"for question {row['question']!r}")
            continue
        hits = [n for n, text in enumerate(page["text"]) if row["answer"] in text]
        if len(hits) != 1:
            where = "in no passage" if not hits else f"in passages {hits}"
            (skipped if skip_unresolved else errors).append(
                f"{row['title']!r}: answer {row['answer']!r} of {row['question']!r} found {where}")
            continue
        n = hits[0]
        page["positive"][n].append(row["question"])
        page["answers"][n].append({"text": row["answer"], "start": page["text"][n].index(row["answer"])})
    if errors:
        return [], errors, skipped, stats
    errors = add_extra_judgements(pages, read_extra_judgements(extra), implied) if extra is not None else []
    if errors:
        return [], errors, skipped, stats

    split_of = page_splits(p["id"] for p in pages.values())
    pool = defaultdict(list)  # split -> [(page id, question)]
    for page in pages.values():
        pool[split_of[page["id"]]].extend((page["id"], q) for qs in page["positive"] for q in qs)
    rng = random.Random(seed)
    for page in pages.values():
        others = [q for pid, q in pool[split_of[page["id"]]] if pid != page["id"]]
        page["negative"] = []
        for qs in page["positive"]:
            if len(qs) > len(others):
                errors.append(f"{page['title']!r}: {len(qs)} negatives needed, only {len(others)} questions on "
                              f"other pages of split {split_of[page['id']]!r}")
                qs = []
            page["negative"].append(rng.sample(others, len(qs)))
    keys = ("id", "revid", "url", "title", "text", "sections", "positive", "negative", "answers", "also_positive")
    return ([{k: page[k] for k in keys if k in page} for page in pages.values()] if not errors else []), errors, \
        skipped, stats


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--xml", type=Path, default=SAMPLE_DIR / "samplewiki_pages_current.xml")
    parser.add_argument("--questions", type=Path, default=SAMPLE_DIR / "questions.tsv")
    parser.add_argument("--extra", type=Path, default=SAMPLE_DIR / "extra_judgements.tsv",
                        help="further passages that answer a question, judged by reading them")
    parser.add_argument("--out", type=Path, default=SAMPLE_DIR / "samplewiki_qa.json")
    parser.add_argument("--seed", type=int, default=SPLIT_SEED)
    parser.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    parser.add_argument("--skip-unresolved", action="store_true",
                        help="leave out questions whose answer is in no passage or in several (listed on stderr)")
    args = parser.parse_args(argv)

    implied: list = []
    pages, errors, skipped, stats = build(args.xml, args.questions, args.seed, skip_unresolved=args.skip_unresolved,
                                          extra=args.extra, implied=implied)
    if skipped:
        print(f"{len(skipped)} question(s) left out (--skip-unresolved):", *skipped, sep="\n  ", file=sys.stderr)
    if errors:
        print(f"{len(errors)} problem(s), nothing written:", *errors, sep="\n  ", file=sys.stderr)
        return 1
    text = json.dumps(pages, ensure_ascii=False, indent=1) + "\n"
    split_of = page_splits(p["id"] for p in pages)
    per_split = Counter()
    for page in pages:
        s = split_of[page["id"]]
        per_split[s, "pages"] += 1
        per_split[s, "passages"] += len(page["text"])
        per_split[s, "questions"] += sum(map(len, page["positive"]))
    print(f"pages read {stats.pages}, articles {stats.articles}, skipped {dict(stats.skipped)}; "
          f"passages {stats.passages}, questions {sum(per_split[s, 'questions'] for s in ('train', 'dev', 'test'))}, "
          f"extra judgements {sum(len(qs) for page in pages for qs in page.get('also_positive', []))} "
          f"(and {len(implied)} implied: the question's own passage)")
    for s in ("train", "dev", "test"):
        print(f"  {s}: {per_split[s, 'pages']} pages, {per_split[s, 'passages']} passages, "
              f"{per_split[s, 'questions']} questions")
    if args.check:
        same = args.out.exists() and args.out.read_text(encoding="utf-8") == text
        print(f"{args.out} is {'up to date' if same else 'OUT OF DATE'}")
        return 0 if same else 1
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
