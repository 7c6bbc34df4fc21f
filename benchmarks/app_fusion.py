"""Which fusion should ``pfc`` ship? Fusions of a search folder's own TF-IDF and ColBERT runs, measured.

    python benchmarks/app_fusion.py --threads 2                            # squad, wikiqa, scifact (subset), fan
    python benchmarks/app_fusion.py --data squad fan --out runs/app_quality

For each question set a ``pfc`` search folder is built with ``build_folder`` (what ``pfc index`` runs; reused
when it exists under ``--out``), and the folder's two systems run once exactly as the ``Searcher`` behind ``pfc
search`` runs them (TF-IDF; ColBERT end to end with the folder's neighbour search and k̂), 1,000 results each.
Every candidate then fuses those two runs (``Fusion.fuse``), at 100 or 1,000 results per system:

* the rule ``pfc`` had before it used ``pfc.Hybrid``: min-max, weights 0.5/0.5, a document one system did not
  return counting 0, each system's top 100;
* ``pfc.Hybrid`` (z-scores) at several lexical weights, min-max at 0.2, and RRF (k = 60).

Question sets (the data folder beside the repository; each skipped with a message when absent):

* ``squad``: the evaluation protocol's *selection* questions (which may choose) and *report* questions (which
  only report), over all 1,393 paragraphs of the train and dev files (``pipelines/evaluate.py``'s corpus);
* ``wikiqa``: the 126 dev questions over the 8,516 sentences;
* ``scifact``: the 809 train claims over a subset of the abstracts: every judged abstract plus ``--scifact-docs``
  minus that many others drawn with seed 0 (the whole corpus is 5,183 abstracts; the subset keeps the encoding
  within minutes on two cores);
* ``fan``: ``benchmarks/fact_questions.jsonl`` over the PokéClicker dump (with ``--fan-pages N``: the questions'
  pages plus N other article pages drawn with seed 0, as ``fact_questions.py --pages``); a passage is relevant
  when it is on the question's page and contains one of its answers (``fact_questions.contains_answer``);
  questions without such a passage in the folder are left out and counted.

Prints one table per set (RR@10, R@1, R@10 on SQuAD and the fan set; nDCG@10, R@100 elsewhere) and writes
``<out>/fusion-<set>-<part>.csv``. ``--latency N``: also the hybrid's time per query (query encoding, both
retrievals and the fusion; no explanations) at 100 and at 1,000 results per system, one query at a time, on the
first N questions of each set, the two depths interleaved query by query. ``--sample report=400``: a seeded
sample of a part's questions (the shared machine is slow; say so with the figures).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "pipelines"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import evaluate as ev  # noqa: E402  (pipelines/evaluate.py: data loading, threads)

DUMP = ev.DATA / "wikis" / "pokeclickerwiki_pages_current.xml.bz2"
SETS = ("squad", "wikiqa", "scifact", "fan")


def question_set(name: str, root: Path, scifact_docs: int, fan_pages=None, folder=None):
    """(source for build_folder, {part: (topics, qrels or None)}, note); qrels None: made from the folder (fan)."""
    import numpy as np

    if name == "squad":
        docs, parts, _ = ev.load_squad(root)
        return docs, parts, f"{len(docs):,} paragraphs"
    if name == "fan":
        import fact_questions as fq
        import pandas as pd

        questions = fq.load_questions(fq.DEFAULT_QUESTIONS)
        topics = pd.DataFrame({"qid": [q["qid"] for q in questions], "query": [q["question"] for q in questions]})
        source, subset = fq.source_for(root / "wikis" / DUMP.name, folder, questions, fan_pages, 0)
        note = "the PokéClicker dump" if subset is None else \
            f"the PokéClicker dump's {subset['question_pages']} question pages and {subset['distractor_pages']} others"
        return source, {"all": (topics, None)}, note
    docs, parts = ev.load_beir(name, root)
    if name == "scifact" and scifact_docs < len(docs):
        topics, qrels = parts["all"]
        judged = set(qrels["docno"])
        others = [d for d in docs if d["docno"] not in judged]
        rng = np.random.default_rng(0)
        keep = judged | {others[i]["docno"] for i in rng.permutation(len(others))[:max(0, scifact_docs - len(judged))]}
        docs = [d for d in docs if d["docno"] in keep]
        return docs, parts, f"{len(docs):,} of the 5,183 abstracts (every judged one, the rest drawn with seed 0)"
    return docs, parts, f"{len(docs):,} passages"


def fan_qrels(folder: Path, topics):
    """Relevant passages of the fan questions: on the question's page and containing an answer."""
    import fact_questions as fq
    import pandas as pd

    from pyterrier_fandom_colbert.app.folder import PassageTable
    from pyterrier_fandom_colbert.lexical.tfidf import TfidfIndex

    questions = {q["qid"]: q for q in fq.load_questions(fq.DEFAULT_QUESTIONS)}
    table = PassageTable(folder)
    tfidf = TfidfIndex(folder / "tfidf")
    titles = [table.get(i).get("title", "") for i in range(len(table))]
    rows = []
    for qid in topics["qid"]:
        q = questions[qid]
        on_page = [i for i, t in enumerate(titles) if fq._same_page(t, q["title"])]
        texts = tfidf.texts(on_page) if on_page else []
        for position, text in zip(on_page, texts):
            if fq.contains_answer(text, q["answers"]):
                rows.append({"qid": qid, "docno": str(tfidf.docnos.fwd[position]), "label": 1})
    return pd.DataFrame(rows, columns=["qid", "docno", "label"])


def candidates(lexical, neural) -> List[Tuple[str, int, object]]:
    """(name, results per system, fusion) of every candidate."""
    import pyterrier_fandom_colbert as pfc

    out: List[Tuple[str, int, object]] = [("former pfc rule: min-max 0.5/0.5, missing 0", 100,
                                           pfc.LinearFusion([lexical, neural], [0.5, 0.5], normalise="minmax",
                                                            missing="zero"))]
    for depth in (100, 1000):
        for w in (0.1, 0.15, 0.2, 0.25, 0.3):
            out.append((f"Hybrid z-score {w:g}", depth, pfc.Hybrid(lexical, neural, weight=w)))
        out.append(("Hybrid min-max 0.2", depth, pfc.Hybrid(lexical, neural, weight=0.2, normalise="minmax")))
    out.append(("RRF k=60", 100, pfc.RRF([lexical, neural], k=60)))
    return out


def latency(searcher, topics, n: int) -> Dict[int, float]:
    """Median seconds per query of the folder's hybrid at 100 and 1,000 results per system, interleaved."""
    import numpy as np

    from pyterrier_fandom_colbert.app.fusion_settings import FusionSettings, hybrid_system
    from pyterrier_fandom_colbert.app.sharded import dense_retriever

    encoder = searcher.colbert.query_encoder()
    tfidf = searcher.tfidf.retriever(num_results=1000)
    # the folder's own search settings, as the Searcher makes its retriever (a residual2 folder's centroid search
    # takes no FAISS options)
    dense = dense_retriever(searcher.index, searcher.manifest.settings, 1000)
    pipelines = {d: encoder >> hybrid_system(tfidf, dense, FusionSettings(depth=d)) for d in (100, 1000)}
    times: Dict[int, List[float]] = {d: [] for d in pipelines}
    for i in range(min(n, len(topics))):
        one = topics.iloc[i:i + 1][["qid", "query"]]
        for d, pipeline in pipelines.items():
            started = time.perf_counter()
            pipeline(one)
            times[d].append(time.perf_counter() - started)
    return {d: float(np.median(t[1:] if len(t) > 1 else t)) for d, t in times.items()}  # the first warms up


def measured(label: str, depth: int, frame, judged, measures) -> Dict[str, object]:
    """One table row: the run's measures against ``judged`` (ir_measures columns)."""
    from ir_measures import calc_aggregate

    run = frame.rename(columns={"qid": "query_id", "docno": "doc_id"})[["query_id", "doc_id", "score"]]
    values = calc_aggregate(measures, judged, run)
    return {"system": label, "depth": depth, **{str(m): round(values[m], 4) for m in measures}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=list(SETS), choices=SETS)
    ap.add_argument("--out", type=Path, default=Path("runs/app_quality"))
    ap.add_argument("--fan-pages", type=int, default=None, metavar="N",
                    help="fan: the question pages plus N other pages (default: the whole dump)")
    ap.add_argument("--scifact-docs", type=int, default=1500, help="abstracts in the SciFact subset")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--data-root", type=Path, default=ev.DATA)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--checkpoint", default=None, help="the folders' ColBERT checkpoint (default: the package's)")
    ap.add_argument("--latency", type=int, default=0, metavar="N", help="time the hybrid on N questions per set")
    ap.add_argument("--sample", nargs="*", default=[], metavar="PART=N",
                    help="ask N questions of PART (e.g. report=400), drawn with seed 0; default: all")
    args = ap.parse_args(argv)

    import pandas as pd
    import pyterrier as pt
    from ir_measures import RR, R, nDCG

    from pyterrier_fandom_colbert.app.folder import build_folder, is_search_folder
    from pyterrier_fandom_colbert.app.search import Searcher

    ev.set_threads(args.threads)
    sample = {part: int(n) for part, n in (item.split("=") for item in args.sample)}
    for name in args.data:
        if not ev.data_folder(args.data_root, "squad" if name == "fan" else name).exists() or \
                (name == "fan" and not (args.data_root / "wikis" / DUMP.name).exists()):
            print(f"{name}: data not found under {args.data_root}, skipped")
            continue
        folder = args.out / (f"folder-{name}" if name != "fan" or args.fan_pages is None else
                             f"folder-fan{args.fan_pages}")
        source, parts, note = question_set(name, args.data_root, args.scifact_docs, args.fan_pages, folder)
        if not is_search_folder(folder):
            started = time.perf_counter()
            build_folder(source, folder, checkpoint=args.checkpoint, verbose=not args.quiet)
            print(f"{name}: built {folder} in {time.perf_counter() - started:.0f} s")
        searcher = Searcher(folder, warm=False)
        lexical, neural = searcher.pipelines["tfidf"], searcher.pipelines["colbert"]
        measures = [RR @ 10, R @ 1, R @ 10] if name in ("squad", "fan") else [nDCG @ 10, R @ 100, RR @ 10]
        for part, (topics, qrels) in parts.items():
            if part in sample:
                import numpy as np  # the same draw as short_answer_eval.py's --sample: the same questions

                picked = sorted(np.random.default_rng(0).permutation(len(topics))[:sample[part]])
                topics = topics.iloc[picked].reset_index(drop=True)
                part = f"{part}{len(topics)}"
            if qrels is None:
                qrels = fan_qrels(folder, topics)
                print(f"{name}: {qrels['qid'].nunique()} of {len(topics)} questions have a relevant passage")
                topics = topics[topics["qid"].isin(set(qrels["qid"]))].reset_index(drop=True)
            runs = {}
            for system, pipeline in (("tfidf", lexical), ("colbert", neural)):
                path = args.out / "runs" / f"{name}-{part}-{system}.pkl.gz"
                if path.exists():
                    runs[system] = pd.read_pickle(path)
                else:
                    started = time.perf_counter()
                    runs[system] = pipeline(topics)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    runs[system].to_pickle(path, compression="gzip")
                    print(f"{name} {part}: {system} run in {time.perf_counter() - started:.0f} s")
            rows: List[Dict[str, object]] = []
            judged = qrels[qrels["qid"].isin(set(topics["qid"]))]  # only the questions asked (a sample: its own)
            judged = judged.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})

            rows.append(measured("TF-IDF", 1000, runs["tfidf"], judged, measures))
            rows.append(measured("ColBERT end to end", 1000, runs["colbert"], judged, measures))
            lex_t, neu_t = pt.Transformer.from_df(runs["tfidf"]), pt.Transformer.from_df(runs["colbert"])
            for label, depth, fusion in candidates(lex_t, neu_t):
                cut = [r[r["rank"] < depth] for r in (runs["tfidf"], runs["colbert"])]
                rows.append(measured(label, depth, fusion.fuse(topics, cut), judged, measures))
            table = pd.DataFrame(rows)
            print(f"\n{name} {part} ({len(topics):,} questions; {note}; folder {folder})")
            print(table.to_string(index=False))
            table.to_csv(args.out / f"fusion-{name}-{part}.csv", index=False)
            (args.out / f"fusion-{name}-{part}.json").write_text(json.dumps({"note": note, "rows": rows}, indent=1))
            if args.latency:
                median = latency(searcher, topics, args.latency)
                print(f"hybrid, median per query over {min(args.latency, len(topics)) - 1} queries: "
                      + ", ".join(f"{d} results per system {1000 * t:.0f} ms" for d, t in median.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
