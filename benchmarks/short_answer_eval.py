"""Short answers, confidence and "nothing relevant" of ``pfc search``, measured on SQuAD (docs/explain.md).

    python benchmarks/short_answer_eval.py --fit --threads 2   # selection part: penalty, calibration, threshold
    python benchmarks/short_answer_eval.py --threads 2          # report part and unanswerable questions: figures

Everything goes through the ``Searcher`` behind ``pfc search`` (hybrid, 10 results, explained) over ``pfc``
search folders built under ``--out`` (reused when they exist; ``benchmarks/app_fusion.py`` builds the first):

* ``folder-squad``: all 1,393 paragraphs of the SQuAD train and dev files (the evaluation protocol's corpus,
  ``pipelines/evaluate.py``);
* ``folder-squad-dev``: the 338 dev paragraphs only, so that no passage answers a *selection* question (their
  articles are train articles): unanswerable questions for fitting.

``--fit`` (the protocol's *selection* questions only; never the report part): for every result that is the gold
paragraph, the short answer at each ``--penalties`` value (the share that overlaps a gold answer, the mean length
in words); then a logistic calibration of "this passage answers the question" (label: it is the gold paragraph)
on every result's mean MaxSim and its gap to the question's best-matching result, over the selection questions
against ``folder-squad`` (answerable) and against ``folder-squad-dev`` (unanswerable), half and half;
then the threshold: the highest confidence threshold whose false "nothing relevant" rate on the answerable
selection questions stays within ``--max-false-nothing``. Prints the :class:`AnswerCalibration` to ship.

Without ``--fit`` (the shipped ``CALIBRATION``): on the *report* questions against ``folder-squad``, the share of
short answers that overlap a gold answer (in the gold paragraph when it is among the results, and the first
result's), their mean length in words, the false "nothing relevant" rate, and the calibration's reliability
(mean confidence against the observed rate, per confidence bin); on questions no passage answers (SciFact's 809
train claims and WikiQA's 126 dev questions, against ``folder-squad``), the "nothing relevant" rate. A SciFact
claim or WikiQA question can touch a SQuAD article's topic; none was checked by hand.

Responses are cached under ``<out>/answers/`` (delete to recompute). Skips (exit 0) when the data are absent.
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import itertools
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "pipelines"))

import evaluate as ev  # noqa: E402  (pipelines/evaluate.py: data loading, threads)


def squad_questions(root: Path) -> Tuple[List[Dict[str, Any]], Dict[str, List[Dict[str, Any]]]]:
    """(every paragraph as a passage record, {part: questions}) for the protocol's selection and report parts; a
    question: qid, query, gold docno, gold character spans."""
    from pyterrier_fandom_colbert.data.irds import squad_dataset
    from pyterrier_fandom_colbert.data.protocol import squad_protocol

    folder = root / "squad-v1.1-split"
    split = squad_protocol(folder / "train-v1.1.json", folder / "dev-v1.1.json")
    docs: List[Dict[str, Any]] = []
    parts: Dict[str, List[Dict[str, Any]]] = {"selection": [], "report": []}
    for prefix, part in (("train", "selection"), ("dev", "report")):
        ds = squad_dataset(folder / f"{prefix}-v1.1.json")
        titles = {}
        for d in ds.docs_iter():
            docs.append({"docno": f"{prefix}-{d.doc_id}", "text": d.text, "title": d.title, "file": prefix})
            titles[d.doc_id] = d.title
        gold = {r.query_id: r.doc_id for r in ds.qrels_iter()}
        wanted = set(getattr(split, part))
        for q in ds.queries_iter():
            if q.query_id in gold and titles[gold[q.query_id]] in wanted:
                spans = sorted({(s, s + len(t)) for t, s in zip(q.answers, q.answer_starts)})
                parts[part].append({"qid": q.query_id, "query": q.text, "docno": f"{prefix}-{gold[q.query_id]}",
                                    "gold": spans})
    return docs, parts


def other_questions(root: Path, name: str) -> List[Dict[str, Any]]:
    """SciFact's train claims or WikiQA's dev questions (with judgements), as unanswerable questions."""
    _, parts = ev.load_beir(name, root)
    topics, _ = parts["all"]
    return [{"qid": f"{name}-{q}", "query": text} for q, text in zip(topics["qid"], topics["query"])]


def ensure_folder(folder: Path, records: Sequence[Dict[str, Any]], quiet: bool, checkpoint=None) -> None:
    from pyterrier_fandom_colbert.app.folder import build_folder, is_search_folder

    if not is_search_folder(folder):
        started = time.perf_counter()
        build_folder([{"docno": r["docno"], "text": r["text"], "title": r["title"]} for r in records], folder,
                     checkpoint=checkpoint, verbose=not quiet)
        print(f"built {folder} in {time.perf_counter() - started:.0f} s", flush=True)


def answers(searcher, questions: Sequence[Dict[str, Any]], cache: Path, k: int = 10) -> Dict[str, Dict]:
    """qid → the searcher's response (hybrid, k results, explained), asked from 16 threads (the searcher batches
    concurrent queries); cached in ``cache`` (gzipped JSON)."""
    if cache.exists():
        with gzip.open(cache, "rt") as f:
            return json.load(f)
    started = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(lambda q: searcher.search(q["query"], k=k), questions))
    out = {q["qid"]: r for q, r in zip(questions, responses)}
    from pyterrier_fandom_colbert.storage import atomic_path

    with atomic_path(cache) as tmp, gzip.open(tmp, "wt") as f:  # a killed run leaves no half-written cache
        json.dump(out, f)
    print(f"{len(questions)} questions answered in {time.perf_counter() - started:.0f} s -> {cache}", flush=True)
    return out


def _overlaps(span, gold) -> bool:
    return span is not None and any(span[0] < g1 and g0 < span[1] for g0, g1 in gold)


def short_span(result: Dict[str, Any], penalty: float, max_words: int, skip_matched: bool):
    """(character span, words) of a result's short answer at ``penalty``, recomputed from its words' KDE."""
    import numpy as np

    from pyterrier_fandom_colbert.explain.answer import short_answer_words

    words, answer = result["words"], result.get("answer")
    if not answer:
        return None, 0
    inside = [i for i, w in enumerate(words) if answer[0] <= w[0] and w[1] <= answer[1]]
    matched = np.array([bool(w[5]) for w in words], dtype=bool) if skip_matched else None
    span = short_answer_words(np.array([w[4] for w in words], dtype=float), max_words, penalty,
                              within=(inside[0], inside[-1] + 1), matched=matched) if inside else None
    if span is None:
        return None, 0
    return (words[span[0]][0], words[span[1] - 1][1]), span[1] - span[0]


def span_table(responses, questions, penalties: Sequence[float], max_words: int,
               skips: Sequence[bool] = (False, True)) -> List[Dict[str, Any]]:
    """Per penalty and way of counting the question's own words: over results that are the gold paragraph, the
    share of short answers overlapping a gold answer and their mean length in words; and the same for the first
    result of every question."""
    rows = []
    for skip, penalty in itertools.product(skips, penalties):
        gold_hits, gold_lengths, first_hits, first_lengths, chance, region, region_words = [], [], [], [], [], [], []
        for q in questions:
            results = responses[q["qid"]]["results"]
            for r in results:
                if r["docno"] == q["docno"]:
                    span, n = short_span(r, penalty, max_words, skip)
                    gold_hits.append(_overlaps(span, q["gold"]))
                    gold_lengths.append(n)
                    answer = r.get("answer")
                    region.append(_overlaps(answer, q["gold"]))
                    region_words.append(sum(answer[0] <= w[0] and w[1] <= answer[1] for w in r["words"])
                                        if answer else 0)
                    if n:  # a window of as many words anywhere in the passage: the exact average over placements
                        w = r["words"]
                        chance.append(sum(_overlaps((w[i][0], w[i + n - 1][1]), q["gold"])
                                          for i in range(len(w) - n + 1)) / (len(w) - n + 1))
            if results:
                span, n = short_span(results[0], penalty, max_words, skip)
                first_hits.append(results[0]["docno"] == q["docno"] and _overlaps(span, q["gold"]))
                first_lengths.append(n)
        rows.append({"question words skipped": skip, "penalty": penalty, "gold passage found": len(gold_hits),
                     "overlap (gold passage)": _mean(gold_hits), "words (gold passage)": _mean(gold_lengths),
                     "same length, anywhere": _mean(chance), "KDE region overlaps": _mean(region),
                     "KDE region words": _mean(region_words),
                     "overlap (first result)": _mean(first_hits), "words (first result)": _mean(first_lengths)})
    return rows


def _sample(questions: List[Dict[str, Any]], n: int) -> List[Dict[str, Any]]:
    """``n`` of ``questions`` drawn with seed 0, in their order."""
    import numpy as np

    picked = np.random.default_rng(0).permutation(len(questions))[:n]
    return [questions[i] for i in sorted(picked)]


def _mean(values) -> float:
    return round(float(sum(values)) / len(values), 4) if len(values) else float("nan")


def features(responses, questions, answerable: bool):
    """Over every result: ([its mean MaxSim, its gap to the question's best], is it the gold paragraph)."""
    x, y = [], []
    for q in questions:
        results = responses[q["qid"]]["results"]
        best = max((r["similarity"] for r in results), default=0.0)
        for r in results:
            x.append([r["similarity"], r["similarity"] - best])
            y.append(int(answerable and r["docno"] == q["docno"]))
    return x, y


def confidences(calibration, results) -> List[float]:
    """Each result's confidence given the question's best-matching result (as the ``Searcher`` computes it)."""
    best = max((r["similarity"] for r in results), default=float("nan"))
    return [calibration.confidence(r["similarity"], best) for r in results]


def top_confidences(responses, questions, calibration) -> List[float]:
    """Per question: the highest confidence among its results under ``calibration``."""
    return [max(confidences(calibration, responses[q["qid"]]["results"]), default=0.0) for q in questions]


def reliability(responses, questions, calibration, bins=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0001)) -> List[Dict[str, Any]]:
    """Per confidence bin of the results: how many, their mean confidence, the share that is the gold paragraph."""
    rows = []
    pairs = [(c, r["docno"] == q["docno"]) for q in questions
             for r, c in zip(responses[q["qid"]]["results"], confidences(calibration, responses[q["qid"]]["results"]))]
    for lo, hi in itertools.pairwise(bins):
        inside = [(c, g) for c, g in pairs if lo <= c < hi]
        rows.append({"confidence": f"{lo:.1f}-{min(hi, 1):.1f}", "results": len(inside),
                     "mean confidence": _mean([c for c, _ in inside]), "gold share": _mean([g for _, g in inside])})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", action="store_true", help="fit on the selection part (else: report the figures)")
    ap.add_argument("--out", type=Path, default=Path("runs/app_quality"))
    ap.add_argument("--penalties", type=float, nargs="+", default=[0.0, 0.5, 1.0, 1.5, 2.0, 3.0])
    ap.add_argument("--max-false-nothing", type=float, default=0.05,
                    help="--fit: the highest false 'nothing relevant' rate allowed on answerable questions")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--data-root", type=Path, default=ev.DATA)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--checkpoint", default=None, help="the folders' ColBERT checkpoint (default: the package's)")
    ap.add_argument("--sample", type=int, default=0, metavar="N",
                    help="ask N questions of each set (drawn with seed 0); default: all")
    args = ap.parse_args(argv)
    if not ev.data_folder(args.data_root, "squad").exists():
        print(f"skipped: {ev.data_folder(args.data_root, 'squad')} not found")
        return 0

    import numpy as np
    import pandas as pd

    from pyterrier_fandom_colbert.app.search import Searcher
    from pyterrier_fandom_colbert.explain.answer import CALIBRATION, AnswerCalibration, fit_logistic

    ev.set_threads(args.threads)
    docs, parts = squad_questions(args.data_root)
    if args.sample:
        parts = {part: _sample(questions, args.sample) for part, questions in parts.items()}
    full = args.out / "folder-squad"
    ensure_folder(full, docs, args.quiet, args.checkpoint)
    searcher = Searcher(full, warm=False)
    cal = CALIBRATION
    if args.fit:
        selection = parts["selection"]
        dev_only = args.out / "folder-squad-dev"
        ensure_folder(dev_only, [d for d in docs if d["file"] == "dev"], args.quiet, args.checkpoint)
        n = len(selection)
        on_full = answers(searcher, selection, args.out / "answers" / f"selection{n}-full.json.gz")
        on_dev = answers(Searcher(dev_only, warm=False, colbert=searcher.colbert), selection,
                         args.out / "answers" / f"selection{n}-devonly.json.gz")
        print(f"\nshort answers, selection part ({len(selection)} questions; at most {cal.max_words} words)")
        print(pd.DataFrame(span_table(on_full, selection, args.penalties, cal.max_words)).to_string(index=False))
        x1, y1 = features(on_full, selection, True)
        x0, y0 = features(on_dev, selection, False)
        intercept, slope, gap_slope = fit_logistic(np.array(x1 + x0), np.array(y1 + y0))
        fitted = AnswerCalibration(intercept=round(intercept, 4), slope=round(slope, 4),
                                   gap_slope=round(max(gap_slope, 0.0), 4), threshold=0.5)
        answerable = np.array(top_confidences(on_full, selection, fitted))
        unanswerable = np.array(top_confidences(on_dev, selection, fitted))
        print(f"\ncalibration: {len(x1) + len(x0)} results ({sum(y1)} gold), intercept {intercept:.4f}, slope "
              f"{slope:.4f}, gap slope {gap_slope:.4f}")
        grid = np.round(np.arange(0.02, 0.99, 0.02), 2)
        table = pd.DataFrame({"threshold": grid,
                              "false nothing (answerable)": [(answerable < t).mean() for t in grid],
                              "nothing (unanswerable)": [(unanswerable < t).mean() for t in grid]})
        print(table.round(4).to_string(index=False))
        allowed = table[table["false nothing (answerable)"] <= args.max_false_nothing]
        threshold = float(allowed["threshold"].max()) if len(allowed) else float(grid[0])
        print(f"\nthreshold (false nothing <= {args.max_false_nothing:.0%} on the selection part): {threshold}")
        print("reliability on the selection part (every result, answerable and unanswerable questions):")
        fitted = dataclasses.replace(fitted, threshold=threshold)
        both = {**on_full, **{f"{k}-unanswerable": v for k, v in on_dev.items()}}
        pooled = selection + [{**q, "qid": f"{q['qid']}-unanswerable", "docno": None} for q in selection]
        print(pd.DataFrame(reliability(both, pooled, fitted)).to_string(index=False))
        print(f"AnswerCalibration(intercept={intercept:.4f}, slope={slope:.4f}, gap_slope={gap_slope:.4f}, "
              f"threshold={threshold}, "
              "penalty=..., max_words=..., skip_matched=...)  (penalty and skip_matched from the table above)")
        return 0

    report = parts["report"]
    on_full = answers(searcher, report, args.out / "answers" / f"report{len(report)}-full.json.gz")
    print(f"\nshort answers, report part ({len(report)} questions; shipped penalty {cal.penalty}, at most "
          f"{cal.max_words} words)")
    print(pd.DataFrame(span_table(on_full, report, [cal.penalty], cal.max_words, [cal.skip_matched]))
          .to_string(index=False))
    answerable = np.array(top_confidences(on_full, report, cal))
    print(f"\nfalse 'nothing relevant' on the report questions: {(answerable < cal.threshold).mean():.4f} "
          f"(threshold {cal.threshold})")
    print("reliability of the confidence (report part, every result):")
    print(pd.DataFrame(reliability(on_full, report, cal)).to_string(index=False))
    for name in ("scifact", "wikiqa"):
        if not ev.data_folder(args.data_root, name).exists():
            print(f"{name}: not found, skipped")
            continue
        questions = other_questions(args.data_root, name)
        questions = _sample(questions, args.sample) if args.sample else questions
        responses = answers(searcher, questions, args.out / "answers" / f"{name}{len(questions)}-on-squad.json.gz")
        rate = float((np.array(top_confidences(responses, questions, cal)) < cal.threshold).mean())
        print(f"'nothing relevant' on {len(questions)} {name} questions against the SQuAD passages: {rate:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
