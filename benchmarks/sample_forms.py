"""The main job's systems on the bundled sample for one way of making its passages: RR@10 (and R@1, R@10, R@50)
of TF-IDF, ColBERT end to end and the hybrid at every lexical weight of ``pfc-compare``'s tuning grid.

    python benchmarks/sample_forms.py --out runs/forms/reader4                          # this reader
    python benchmarks/sample_forms.py --config facts_in_lead=False --out runs/forms/reader3
    python benchmarks/sample_forms.py --qa-json OLD_QA.json --out runs/forms/reader1    # a QA file of another reader
    python benchmarks/sample_forms.py --out runs/forms/reader4 --test                   # the test split too

For comparing passage forms (``PassageConfig`` settings) on the ``dev`` questions before the main job reports
``test`` once. The passages are what ``dump_passages`` makes of the bundled export with ``--config`` (``key=value``,
values as Python literals), and the judgements are built as ``datasets/build_sample_qa.py`` builds them
(``questions.tsv``, then ``extra_judgements.tsv``). ``--qa-json`` reads a study-format QA file instead (for
example the one an older reader built, from git history).

The systems are ``pfc-compare``'s (``systems_for``: TF-IDF, ColBERT end to end, depth 1,000, indexes cached
under ``--out``); the hybrid (``pfc.Hybrid``, z-scores) is fused from the two runs at each weight of
``TUNING_GRID``, and the weight ``pfc-compare`` would tune on the dev questions (the first best one) is named.
Writes ``results.csv`` (split, system, measures) and ``ranks.csv`` (each question's text and the rank of its
first relevant passage per system). Prints the dev column only unless ``--test`` is given.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_config(items):
    """``["key=value", ...]`` -> ``PassageConfig`` (values as Python literals, else strings)."""
    from pyterrier_fandom_colbert.data.passages import PassageConfig

    kwargs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--config {item!r}: expected key=value")
        try:
            kwargs[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            kwargs[key] = value
    try:
        return PassageConfig(**kwargs)
    except TypeError as err:
        raise SystemExit(f"--config: {err}") from None


def build_qa(config, out: Path) -> Path:
    """The sample's study-format QA file for ``config``, written to ``out/qa.json``."""
    sys.path.insert(0, str(ROOT / "datasets"))
    import build_sample_qa as builder

    from pyterrier_fandom_colbert.data.irds import SAMPLE_DIR

    pages, errors, _, _ = builder.build(SAMPLE_DIR / "samplewiki_pages_current.xml", SAMPLE_DIR / "questions.tsv",
                                        config=config, extra=SAMPLE_DIR / "extra_judgements.tsv")
    if errors:
        raise SystemExit("the sample's questions do not resolve with this config:\n  " + "\n  ".join(errors))
    path = out / "qa.json"
    path.write_text(json.dumps(pages, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE", help="PassageConfig settings")
    ap.add_argument("--qa-json", type=Path, default=None, help="a study-format QA file instead of building one")
    ap.add_argument("--out", type=Path, required=True, help="folder for qa.json, the indexes and the tables")
    ap.add_argument("--test", action="store_true", help="print the test split's figures too")
    ap.add_argument("--checkpoint", default=None, help="ColBERT checkpoint (default: the package's)")
    ap.add_argument("--k", type=int, default=1000, help="results per system (default 1000, pfc-compare's depth)")
    args = ap.parse_args(argv)
    if args.qa_json is not None and args.config:
        raise SystemExit("give --config or --qa-json, not both")

    import ir_measures
    import pandas as pd
    import pyterrier as pt

    from pyterrier_fandom_colbert.app.compare import TUNING_GRID, query_topics, systems_for
    from pyterrier_fandom_colbert.data.irds import register_qa_release

    args.out.mkdir(parents=True, exist_ok=True)
    qa = args.qa_json if args.qa_json is not None else build_qa(parse_config(args.config), args.out)
    pages = json.loads(qa.read_text(encoding="utf-8"))
    name = f"sample-forms/{hashlib.sha1(str(qa.resolve()).encode()).hexdigest()[:12]}"
    register_qa_release(name, qa, wiki="samplewiki")
    splits = {s: pt.get_dataset(f"irds:{name}/{s}") for s in ("dev", "test")}
    print(f"{qa}: {sum(len(p['text']) for p in pages)} passages, "
          f"{sum(len(q) for p in pages for q in p.get('also_positive', []))} extra judgements")
    systems = systems_for(lambda: splits["dev"].get_corpus_iter(verbose=False), ["tfidf", "colbert-full", "hybrid"],
                          args.out / "cache", args.k, args.checkpoint)
    tfidf, colbert, hybrid = systems.values()
    measures = [ir_measures.RR @ 10, ir_measures.R @ 1, ir_measures.R @ 10, ir_measures.R @ 50]
    rows, ranks = [], []
    for split, dataset in splits.items():
        topics, qrels = query_topics(dataset), dataset.get_qrels()
        r_tfidf, r_colbert = tfidf(topics), colbert(topics)
        runs = {"tfidf": r_tfidf, "colbert": r_colbert}
        runs.update({f"hybrid {w}": hybrid.with_weight(w).fuse(topics, [r_tfidf, r_colbert]) for w in TUNING_GRID})
        gold = qrels[qrels["label"] > 0].groupby("qid")["docno"].apply(set).to_dict()
        text = dict(zip(topics["qid"], topics["query"]))
        for system, run in runs.items():
            values = ir_measures.calc_aggregate(
                measures, qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"}),
                run.rename(columns={"qid": "query_id", "docno": "doc_id"})[["query_id", "doc_id", "score"]])
            rows.append({"split": split, "system": system, **{str(m): values[m] for m in measures}})
            for qid, ranked in run.sort_values(["qid", "score"], ascending=[True, False]).groupby("qid"):
                hit = [i for i, d in enumerate(ranked["docno"], 1) if d in gold.get(qid, ())]
                ranks.append({"split": split, "system": system, "question": text[qid],
                              "rank": hit[0] if hit else None})
    table = pd.DataFrame(rows)
    table.to_csv(args.out / "results.csv", index=False)
    pd.DataFrame(ranks).to_csv(args.out / "ranks.csv", index=False)
    rr = table.pivot(index="system", columns="split", values="RR@10")
    order = ["tfidf", "colbert"] + [f"hybrid {w}" for w in TUNING_GRID]
    print(rr.loc[order, ["dev", "test"] if args.test else ["dev"]].to_string(float_format="{:.4f}".format))
    best = max(TUNING_GRID, key=lambda w: (rr.loc[f"hybrid {w}", "dev"], -w))
    line = f"weight tuned on dev: {best} (dev RR@10 {rr.loc[f'hybrid {best}', 'dev']:.4f}"
    print(line + (f", test {rr.loc[f'hybrid {best}', 'test']:.4f})" if args.test else ")"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
