"""The reader's answers measured on SQuAD and the PokéClicker fact questions, beside the study's KDE short answer.

    python benchmarks/reader_eval.py build --threads 2                  # the SQuAD folders (reused when present)
    python benchmarks/reader_eval.py gold --part report --threads 2     # reader alone on the gold paragraph
    python benchmarks/reader_eval.py fit --threads 2                    # selection part: calibration, threshold
    python benchmarks/reader_eval.py e2e --threads 2                    # report part end to end, calibration
    python benchmarks/reader_eval.py facts --threads 2 --pages 100      # PokéClicker fact questions
    python benchmarks/reader_eval.py speed --threads 2                  # what the reader adds per question

* ``gold``: each question of a part (``selection``: the protocol's 4 selection articles of the SQuAD train file;
  ``report``: the 1,512 dev questions; ``selection-facts``: 600 made-up "key: value" questions built from the
  selection articles, ``training/fact_lines.py``) read from its gold paragraph: exact match and F1 (official
  normalisation, best over the gold answers); with ``--kde`` also the study's KDE short answer over the same paragraph.
* ``fit`` (selection questions only): the logistic calibration of "the shown answer is right" (exact match) on the
  reader's margin and the passage's rank (``--features``; fitted on each question's answer of largest margin,
  folder of all 1,393 protocol paragraphs), and the threshold: the highest whose false "nothing relevant" on those
  answerable questions (the threshold or the folder's relevance rule) stays within ``--max-false-nothing``;
  the unanswerable side is the same questions asked of the dev-only folder (no passage of their articles).
  Writes ``calibration.json`` into the reader folder (``--write``).
* ``e2e`` (report questions): the first answer shown (the response's ``answer``) and the first result's KDE short
  answer, EM and F1; expected calibration error (10 bins) and a reliability plot (``--plot``); false "nothing
  relevant"; "nothing relevant" for SciFact's 809 claims and WikiQA's 126 questions asked of the SQuAD folder.
* ``facts``: the PokéClicker fact questions (``fact_questions.py``): the first answer shown contains a gold answer,
  against the first result's KDE short answer.
* ``speed``: per question, p50/p90 of ``Searcher.search`` with the reader minus without it (interleaved).

Responses are cached under ``--out/answers`` keyed by the reader's weights checksum. Skips (exit 0) when the data
are absent.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "pipelines"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import evaluate as ev  # noqa: E402  (pipelines/evaluate.py: data loading, threads)
import short_answer_eval as sae  # noqa: E402  (the SQuAD protocol's questions and folders)


def reader_digest(reader: Path, calibrated: bool = True) -> str:
    """The reader's weights checksum, and its calibration's where it has one and ``calibrated`` (a response's answer
    and "nothing relevant" depend on it; the results' spans and margins do not)."""
    from pyterrier_fandom_colbert.reader.network import CALIBRATION_FILE
    from pyterrier_fandom_colbert.storage import file_checksum

    calibration = reader / CALIBRATION_FILE
    return file_checksum(reader / "reader.safetensors")[:12] + \
        (f"-{file_checksum(calibration)[:6]}" if calibrated and calibration.is_file() else "")


def gold_texts(question: Dict[str, Any], text_of: Dict[str, str]) -> List[str]:
    text = text_of[question["docno"]]
    return [text[s:e] for s, e in question["gold"]]


def scores(prediction: Optional[str], golds: Sequence[str]) -> Dict[str, float]:
    from pyterrier_fandom_colbert.reader.metrics import best_over, exact_match, f1_score

    prediction = prediction or ""
    return {"em": best_over(exact_match, prediction, golds), "f1": best_over(f1_score, prediction, golds)}


def mean_scores(rows: List[Dict[str, float]]) -> Dict[str, float]:
    return {k: round(100 * statistics.fmean(r[k] for r in rows), 2) for k in ("em", "f1")} if rows else {}


def build(args, docs) -> Dict[str, Path]:
    from pyterrier_fandom_colbert.app.folder import build_folder, is_search_folder

    folders = {"full": args.out / "folder-squad", "dev": args.out / "folder-squad-dev"}
    for name, folder in folders.items():
        if is_search_folder(folder):
            continue
        records = [{"docno": d["docno"], "text": d["text"], "title": d["title"]} for d in docs
                   if name == "full" or d["file"] == "dev"]
        started = time.perf_counter()
        build_folder(records, folder, verbose=not args.quiet, cpu_precision=args.precision,
                     checkpoint=args.checkpoint)
        print(f"built {folder} ({len(records)} passages, {args.precision}) in {time.perf_counter() - started:.0f} s",
              flush=True)
    return folders


def responses(searcher, questions, cache: Path, k: int = 10) -> Dict[str, Dict[str, Any]]:
    """qid → the searcher's response (hybrid, k results, explained, read); cached (short_answer_eval's)."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    return sae.answers(searcher, questions, cache, k)


def shown(response: Dict[str, Any]) -> Optional[str]:
    answer = response.get("answer")
    return answer["text"] if answer else None


def kde_first(response: Dict[str, Any]) -> Optional[str]:
    results = response["results"]
    if not results or not results[0].get("kde_answer"):
        return None
    s, e = results[0]["kde_answer"]
    return results[0]["text"][s:e]


def margin_of(response: Dict[str, Any]) -> float:
    answer = response.get("answer")
    if not answer:
        return float("-inf")
    return next(r["answer_score"] for r in response["results"] if r["rank"] == answer["rank"])


def cmd_gold(args, docs, parts) -> Dict[str, Any]:
    import pandas as pd

    import pyterrier_fandom_colbert as pfc

    text_of = {d["docno"]: d["text"] for d in docs}
    if args.part == "selection-facts":
        parts = {**parts, args.part: fact_line_part(parts["selection"], text_of, docs)}
    questions = parts[args.part][:args.limit] if args.limit else parts[args.part]
    frame = pd.DataFrame({"qid": [q["qid"] for q in questions], "query": [q["query"] for q in questions],
                          "docno": [q["docno"] for q in questions],
                          "text": [text_of[q["docno"]] for q in questions]})
    started = time.perf_counter()
    read = pfc.Reader(args.reader, precision=args.reader_precision, verbose=not args.quiet)(frame)
    seconds = time.perf_counter() - started
    rows = [scores(a, gold_texts(q, text_of)) for a, q in zip(read["answer"], questions)]
    out: Dict[str, Any] = {"part": args.part, "questions": len(questions), "reader": mean_scores(rows),
                           "reader_seconds_per_question": round(seconds / len(questions), 4)}
    if args.kde:
        from pyterrier_fandom_colbert.app.search import Searcher

        searcher = Searcher(build(args, docs)["full"], warm=False)
        kde = []
        for q in questions:
            position = searcher._positions([q["docno"]])
            ranked = pd.DataFrame({"qid": ["0"], "query": [q["query"]], "docno": [q["docno"]], "rank": [0],
                                   "score": [0.0], "text": [text_of[q["docno"]]]})
            row = searcher.explainer(ranked).to_dict("records")[0]
            result = searcher._result(row, int(position[0]), True)
            span = result["short_answer"] if searcher.reader_path is None else result.get("kde_answer")
            kde.append(scores(text_of[q["docno"]][span[0]:span[1]] if span else "", gold_texts(q, text_of)))
        out["kde"] = mean_scores(kde)
    return out


def fact_line_part(selection: List[Dict[str, Any]], text_of: Dict[str, str], docs: List[Dict[str, Any]],
                   n: int = 600, seed: int = 1000) -> List[Dict[str, Any]]:
    """Made-up "key: value" questions (``training/fact_lines.py``) from the selection part's articles, which no
    reader trained on: a selection signal for facts passages and table rows (their passages join ``text_of``)."""
    from pyterrier_fandom_colbert.reader.squad import SquadQuestion
    from pyterrier_fandom_colbert.training.fact_lines import fact_line_questions

    title_of = {d["docno"]: d["title"] for d in docs}
    base = [SquadQuestion(q["qid"], title_of[q["docno"]], 0, text_of[q["docno"]], q["query"],
                          tuple((text_of[q["docno"]][s:e], s) for s, e in q["gold"])) for q in selection]
    out = []
    for i, q in enumerate(fact_line_questions(base, n, seed=seed)):
        docno = f"facts-{q.title}-{q.paragraph}"
        text_of[docno] = q.context
        out.append({"qid": f"facts-{i}", "query": q.question, "docno": docno,
                    "gold": [(s, s + len(t)) for t, s in q.answers]})
    return out


def shown_under(response: Dict[str, Any], calibration) -> Optional[Dict[str, Any]]:
    """The answer ``Searcher.search`` would show in ``response`` under ``calibration``: its read results'
    confidences recomputed, then its own rule (``best_answer``); None when nothing was read."""
    import numpy as np

    from pyterrier_fandom_colbert.app.search import best_answer, read_results

    read = read_results(response["results"])
    if not read:
        return None
    p = calibration.probability(np.array([r["answer_score"] for r in read], dtype=np.float64),
                                np.array([r["rank"] - 1 for r in read]))
    return best_answer([{**r, "confidence": round(float(c), 3)} for r, c in zip(read, p)])


def fit_confidence(X: Any, y: Any, features: List[str]) -> Any:
    """``(ReaderCalibration without a threshold, features used)``: the logistic of ``y`` (1: the answer is right)
    on ``X [n, 2]`` (margin, 0-based rank) of each question's answer of largest margin, on ``features``
    (``["margin"]`` or ``["margin", "rank"]``; the rank is dropped when its weight comes out positive). Refuses
    (``SystemExit``, saying why) when the answers are all right or all wrong, or the margin does not raise the
    chance of being right: no confidence can be fitted on them.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0); X = np.stack([rng.normal(4, 4, 4000), rng.integers(0, 3, 4000)], 1)
    >>> y = rng.random(4000) < 1 / (1 + np.exp(-(0.3 * X[:, 0] - 0.8 * X[:, 1] - 1)))
    >>> cal, used = fit_confidence(X, y, ["margin", "rank"]); round(cal.slope, 1), round(cal.rank_slope, 1), used
    (0.3, -0.8, ['margin', 'rank'])
    >>> fit_confidence(X, np.zeros(4000), ["margin"])
    Traceback (most recent call last):
    ...
    SystemExit: fit: the 4000 answers shown are all wrong: nothing to fit a confidence on (a reader that is never \
right needs training, not calibration)
    """
    import numpy as np

    from pyterrier_fandom_colbert.reader.calibration import ReaderCalibration, fit_logistic_features

    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(y) == 0 or y.min() == y.max():
        what = "no answer was shown" if len(y) == 0 else f"the {len(y)} answers shown are all " + \
            ("right" if len(y) and y[0] else "wrong")
        raise SystemExit(f"fit: {what}: nothing to fit a confidence on (a reader that is never right needs "
                         "training, not calibration)")
    w, intercept = fit_logistic_features(X[:, :len(features)], y)
    if len(features) > 1 and w[1] > 0:  # a lower rank would raise the confidence: the margin alone
        features = ["margin"]
        w, intercept = fit_logistic_features(X[:, :1], y)
    if not round(float(w[0]), 4) > 0:
        raise SystemExit(f"fit: the fitted weight of the reader's margin is {w[0]:.4g}: a larger margin is not more "
                         f"often right on these {len(y)} questions, so no confidence is fitted")
    return ReaderCalibration(slope=round(float(w[0]), 4), intercept=round(intercept, 4),
                             rank_slope=round(float(w[1]), 4) if len(features) > 1 else 0.0), features


def choose_threshold(p_answerable: Any, gate: Any, max_false_nothing: float) -> float:
    """The highest threshold (0.01 to 0.98) whose false "nothing relevant" on answerable questions (confidence
    ``p_answerable`` below it, or the relevance rule, ``gate``, says nothing) stays within ``max_false_nothing``;
    0.01 when none does.

    >>> import numpy as np
    >>> choose_threshold(np.array([0.1, 0.5, 0.9, 0.95]), np.array([False, False, False, True]), 0.5)
    0.5
    """
    import numpy as np

    grid = np.round(np.arange(0.01, 0.99, 0.01), 2)
    p, gate = np.asarray(p_answerable), np.asarray(gate, dtype=bool)
    allowed = [t for t in grid if ((p < t) | gate).mean() <= max_false_nothing]
    return float(max(allowed)) if allowed else float(grid[0])


def cmd_fit(args, docs, parts) -> Dict[str, Any]:
    """The reader's calibration on the selection questions: a logistic of "the shown answer is right" (exact match)
    on its margin and its passage's rank, fitted on the answer of largest margin; then the threshold, the highest
    whose false "nothing relevant" (together with the search folder's relevance rule, as ``pfc search`` says it)
    stays within ``--max-false-nothing``."""
    import numpy as np

    from pyterrier_fandom_colbert.app.search import Searcher, read_results

    folders = build(args, docs)
    text_of = {d["docno"]: d["text"] for d in docs}
    selection = parts["selection"]
    digest = reader_digest(args.reader, calibrated=False)  # fit reads the margins only
    full = Searcher(folders["full"], warm=False, reader=args.reader, read_top=args.read_top)
    dev = Searcher(folders["dev"], warm=False, colbert=full.colbert, reader=args.reader, read_top=args.read_top)
    on_full = responses(full, selection, args.out / "answers" / f"sel-full-{digest}-top{args.read_top}.json.gz")
    on_dev = responses(dev, selection, args.out / "answers" / f"sel-dev-{digest}-top{args.read_top}.json.gz")
    read = {q["qid"]: read_results(on_full[q["qid"]]["results"]) for q in selection}
    largest = [(max(read[q["qid"]], key=lambda r: (r["answer_score"], -r["rank"])), q) for q in selection
               if read[q["qid"]]]
    X = np.array([[r["answer_score"], r["rank"] - 1] for r, _ in largest], dtype=np.float64).reshape(-1, 2)
    y = np.array([scores(r["text"][r["short_answer"][0]:r["short_answer"][1]], gold_texts(q, text_of))["em"]
                  for r, q in largest])
    fitted, features = fit_confidence(X, y, args.features.split("+"))
    # the answers pfc search would show under the fitted map (the threshold decides "nothing relevant" only)
    shown = [shown_under(on_full[q["qid"]], fitted) for q in selection]
    p_ans = np.array([a["confidence"] if a else 0.0 for a in shown])
    p_unans = np.array([a["confidence"] if a else 0.0 for a in (shown_under(on_dev[q["qid"]], fitted)
                                                                 for q in selection)])
    # the folder's relevance rule (no result matches well enough), which pfc search applies besides the threshold
    gate_ans = np.array([full.calibration.nothing_relevant(full.relevance(on_full[q["qid"]]["results"]))
                         for q in selection])
    gate_unans = np.array([dev.calibration.nothing_relevant(dev.relevance(on_dev[q["qid"]]["results"]))
                           for q in selection])
    threshold = choose_threshold(p_ans, gate_ans, args.max_false_nothing)
    fitted = dataclasses.replace(fitted, threshold=threshold,
                                 fitted_on=f"SQuAD protocol selection part ({len(selection)} questions, "
                                           f"top {args.read_top} results read; features: {'+'.join(features)}; "
                                           "threshold with the search folder's relevance rule)",
                                 command=f"python benchmarks/reader_eval.py fit --features {'+'.join(features)} "
                                         f"--max-false-nothing {args.max_false_nothing} --write")
    shown_right = [scores((a or {}).get("text"), gold_texts(q, text_of))["em"] for a, q in zip(shown, selection)]
    out = {"questions": len(selection), "calibration": fitted.to_dict(),
           "selection_em_of_shown": round(100 * float(np.mean(shown_right)), 2),
           "false_nothing_selection": round(float(((p_ans < threshold) | gate_ans).mean()), 4),
           "false_nothing_selection_relevance_rule_alone": round(float(gate_ans.mean()), 4),
           "nothing_on_dev_only_folder": round(float(((p_unans < threshold) | gate_unans).mean()), 4)}
    if args.write:
        from pyterrier_fandom_colbert.reader.network import set_calibration

        set_calibration(args.reader, fitted)
        out["written"] = str(args.reader / "calibration.json")
    return out


def cmd_e2e(args, docs, parts) -> Dict[str, Any]:
    import numpy as np

    from pyterrier_fandom_colbert.app.search import Searcher
    from pyterrier_fandom_colbert.reader.calibration import expected_calibration_error, reliability

    folders = build(args, docs)
    text_of = {d["docno"]: d["text"] for d in docs}
    report = parts["report"][:args.limit] if args.limit else parts["report"]
    digest = reader_digest(args.reader)
    searcher = Searcher(folders["full"], warm=False, reader=args.reader, read_top=args.read_top)
    calibration = searcher.reader.calibration
    got = responses(searcher, report, args.out / "answers" / f"rep{len(report)}-full-{digest}-top{args.read_top}"
                                                            ".json.gz")
    reader_rows = [scores(shown(got[q["qid"]]), gold_texts(q, text_of)) for q in report]
    kde_rows = [scores(kde_first(got[q["qid"]]), gold_texts(q, text_of)) for q in report]
    confidence = np.array([(got[q["qid"]]["answer"] or {}).get("confidence", 0.0) for q in report])
    right = np.array([r["em"] for r in reader_rows])
    out: Dict[str, Any] = {"questions": len(report), "read_top": args.read_top,
                           "first_answer": mean_scores(reader_rows),
                           "kde_first_result": mean_scores(kde_rows),
                           "ece_10_bins": round(expected_calibration_error(confidence, right), 4),
                           "false_nothing": round(float(np.mean([bool(got[q["qid"]]["nothing_relevant"])
                                                                 for q in report])), 4),
                           "reliability": reliability(confidence, right)}
    if args.plot:
        plot_reliability(out["reliability"], args.plot, len(report))
        out["plot"] = str(args.plot)
    for name in ("scifact", "wikiqa"):
        if not ev.data_folder(args.data_root, name).exists():
            continue
        questions = sae.other_questions(args.data_root, name)
        questions = questions[:args.limit] if args.limit else questions
        other = responses(searcher, questions, args.out / "answers" / f"{name}{len(questions)}-{digest}-"
                                                                     f"top{args.read_top}.json.gz")
        out[f"nothing_{name}"] = round(float(np.mean([bool(other[q["qid"]]["nothing_relevant"])
                                                      for q in questions])), 4)
    out["threshold"] = calibration.threshold if calibration else None
    return out


def plot_reliability(rows: List[Dict[str, float]], path: Path, n: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.2, 4.2), dpi=110)
    ax.plot([0, 1], [0, 1], color="#999", lw=1, ls="--", label="perfect calibration")
    ax.plot([r["confidence"] for r in rows], [r["accuracy"] for r in rows], marker="o", color="#1f77b4",
            label="reader (10 bins)")
    for r in rows:
        ax.annotate(str(r["count"]), (r["confidence"], r["accuracy"]), textcoords="offset points", xytext=(4, -10),
                    fontsize=7, color="#555")
    ax.set_xlabel("confidence shown")
    ax.set_ylabel("share of answers right (exact match)")
    ax.set_title(f"SQuAD report part, {n} questions", fontsize=9)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def cmd_facts(args) -> Dict[str, Any]:
    import fact_questions as fq

    from pyterrier_fandom_colbert.app.search import Searcher

    if not fq.DEFAULT_DUMP.is_file():
        return {"skipped": f"{fq.DEFAULT_DUMP} not found"}
    questions = fq.load_questions(fq.DEFAULT_QUESTIONS)
    folder = args.out / f"pokeclicker-{args.pages if args.pages is not None else 'all'}"
    from pyterrier_fandom_colbert.app.folder import build_folder, is_search_folder

    if not is_search_folder(folder):  # as fact_questions.py builds it, in --precision
        source, _ = fq.source_for(fq.DEFAULT_DUMP, folder, questions, args.pages, 0)
        print(build_folder(source, folder, verbose=not args.quiet, cpu_precision=args.precision).summary())
    searcher = Searcher(folder, warm=False, reader=args.reader, read_top=args.read_top)
    reader_hits, kde_hits, per = 0, 0, {}
    for q in questions:
        response = searcher.search(q["question"], k=10)
        a, b = shown(response), kde_first(response)
        hit_a = bool(a) and fq.contains_answer(a, q["answers"])
        hit_b = bool(b) and fq.contains_answer(b, q["answers"])
        reader_hits += hit_a
        kde_hits += hit_b
        per[q["qid"]] = {"reader": a, "kde": b, "reader_right": hit_a, "kde_right": hit_b,
                         "confidence": (response["answer"] or {}).get("confidence")}
    return {"questions": len(questions), "folder": str(folder), "reader_first_answer_contains_gold": reader_hits,
            "kde_first_result_contains_gold": kde_hits, "per_question": per}


def cmd_speed(args, docs, parts) -> Dict[str, Any]:
    import numpy as np

    from pyterrier_fandom_colbert.app.search import Searcher

    folders = build(args, docs)
    questions = parts["report"][:args.limit or 100]
    with_reader = Searcher(folders["full"], warm=True, reader=args.reader, read_top=args.read_top)
    without = Searcher(folders["full"], warm=True, colbert=with_reader.colbert, reader=None)
    diffs, totals = [], []
    for i, q in enumerate(questions):
        pair = [(with_reader, 1), (without, 0)] if i % 2 == 0 else [(without, 0), (with_reader, 1)]
        took = {}
        for searcher, key in pair:
            started = time.perf_counter()
            searcher.search(q["query"], k=10)
            took[key] = time.perf_counter() - started
        diffs.append(1000 * (took[1] - took[0]))
        totals.append(1000 * took[1])
    return {"questions": len(questions), "read_top": args.read_top,
            "reader_added_ms_p50": round(float(np.median(diffs)), 1),
            "reader_added_ms_p90": round(float(np.percentile(diffs, 90)), 1),
            "search_with_reader_ms_p50": round(float(np.median(totals)), 1)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    from pyterrier_fandom_colbert.reader.transformer import DEFAULT_READER

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["build", "gold", "fit", "e2e", "facts", "speed"])
    ap.add_argument("--reader", type=Path, default=DEFAULT_READER, help="reader folder (default: the shipped one)")
    ap.add_argument("--part", choices=["selection", "report", "selection-facts"], default="report",
                    help="gold: selection-facts is made-up key: value questions from the selection articles")
    ap.add_argument("--kde", action="store_true", help="gold: also the study's KDE short answer")
    ap.add_argument("--read-top", type=int, default=3, help="results the reader reads per question")
    ap.add_argument("--max-false-nothing", type=float, default=0.02,
                    help="fit: the most false 'nothing relevant' allowed on selection (default 0.02: a point below "
                         "the 3%% target, as the report part ran about a point higher)")
    ap.add_argument("--features", choices=["margin", "margin+rank"], default="margin+rank",
                    help="fit: what the confidence is fitted on (the answer's margin, and its passage's rank)")
    ap.add_argument("--write", action="store_true", help="fit: write calibration.json into the reader folder")
    ap.add_argument("--plot", type=Path, default=None, help="e2e: reliability plot (PNG)")
    ap.add_argument("--limit", type=int, default=0, help="the first N questions only (smoke runs)")
    ap.add_argument("--pages", type=int, default=None, help="facts: question pages plus N others (default: all)")
    ap.add_argument("--precision", default="bfloat16", help="ColBERT CPU precision of the folders built")
    ap.add_argument("--checkpoint", default=None, help="ColBERT checkpoint of the folders built (default: the "
                                                       "package's)")
    ap.add_argument("--reader-precision", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "reader_eval")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--data-root", type=Path, default=ev.DATA)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    ev.set_threads(args.threads)
    if args.command == "facts":
        result = cmd_facts(args)
    else:
        if not ev.data_folder(args.data_root, "squad").exists():
            print(f"skipped: {ev.data_folder(args.data_root, 'squad')} not found")
            return 0
        docs, parts = sae.squad_questions(args.data_root)
        if args.command == "build":
            result = {name: str(path) for name, path in build(args, docs).items()}
        else:
            result = {"gold": cmd_gold, "fit": cmd_fit, "e2e": cmd_e2e, "speed": cmd_speed}[args.command](
                args, docs, parts)
    text = json.dumps(result, indent=1, default=str)
    print(text if args.command != "facts" else json.dumps({k: v for k, v in result.items() if k != "per_question"},
                                                         indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
