"""TF-IDF with each stopword list of ``lexical.analysis.STOPWORD_LISTS``, on the shared data.

    python benchmarks/stopwords_bench.py            # reads the data folder beside the repository
    python benchmarks/stopwords_bench.py --sets scifact --queries 50   # one set, its first 50 topics

Selection sets (the default list was chosen on these): SQuAD train questions over all SQuAD paragraphs (RR@10),
SciFact train claims (nDCG@10; technical text, the nearest offline stand-in for Cranfield). Report sets (not
used for the choice): SQuAD dev questions (RR@10), WikiQA dev questions (nDCG@10). Exits with a message (status
0) when the data is absent.
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def squad(split: str, data: Path = DATA):
    import pandas as pd

    docs, topics, qrels = [], [], []
    for part in ("train", "dev"):
        for article in json.loads((data / "squad-v1.1-split" / f"{part}-v1.1.json").read_text())["data"]:
            for i, para in enumerate(article["paragraphs"]):
                docno = f"{article['title']}/{i}"
                docs.append({"docno": docno, "text": para["context"]})
                if part == split:
                    topics += [{"qid": qa["id"], "query": qa["question"]} for qa in para["qas"]]
                    qrels += [{"qid": qa["id"], "docno": docno, "label": 1} for qa in para["qas"]]
    return docs, pd.DataFrame(topics), pd.DataFrame(qrels)


def beir(name: str, split: str, data: Path = DATA):
    import pandas as pd

    folder = data / name
    with gzip.open(folder / "corpus.jsonl.gz", "rt") as f:
        docs = [{"docno": d["_id"], "text": (d.get("title", "") + ". " + d["text"]).strip(". ")}
                for d in map(json.loads, f)]
    qfile = next(folder.glob(f"queries-{split}.jsonl*"))
    with (gzip.open(qfile, "rt") if qfile.suffix == ".gz" else open(qfile)) as f:
        topics = pd.DataFrame([{"qid": q["_id"], "query": q["text"]} for q in map(json.loads, f)])
    qrels = pd.read_csv(folder / "qrels" / f"{split}.tsv", sep="\t", dtype=str)
    qrels.columns = ["qid", "docno", "label"]
    qrels["label"] = qrels["label"].astype(int)
    return docs, topics[topics["qid"].isin(set(qrels["qid"]))].reset_index(drop=True), qrels


SETS = {"squad-train": "SQuAD train (selection)", "scifact": "SciFact train (selection)",
        "squad-dev": "SQuAD dev (report)", "wikiqa": "WikiQA dev (report)"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", type=Path, default=DATA)
    ap.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS))
    ap.add_argument("--queries", type=int, default=None, help="only the first N topics of each set")
    args = ap.parse_args(argv)
    if not args.data_root.exists():
        print(f"shared data not found at {args.data_root}; nothing to measure")
        return 0
    import pandas as pd
    import pyterrier as pt
    from ir_measures import RR, nDCG

    from pyterrier_fandom_colbert.lexical.analysis import STOPWORD_LISTS
    from pyterrier_fandom_colbert.lexical.tfidf import TfidfConfig, TfidfIndex

    root = args.data_root
    loaders = {"squad-train": (lambda: squad("train", root), RR @ 10),
               "scifact": (lambda: beir("scifact", "train", root), nDCG @ 10),
               "squad-dev": (lambda: squad("dev", root), RR @ 10),
               "wikiqa": (lambda: beir("wikiqa", "dev", root), nDCG @ 10)}
    sets = [(SETS[name], *loaders[name]) for name in args.sets]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for title, loader, metric in sets:
            docs, topics, qrels = loader()
            topics = topics.head(args.queries) if args.queries else topics
            row = {"set": title, "metric": str(metric)}
            for name in STOPWORD_LISTS:
                index = TfidfIndex.build(Path(tmp) / f"{len(rows)}-{name}", iter(docs),
                                         config=TfidfConfig(stopwords=name))
                table = pt.Experiment([index.retriever(num_results=100)], topics, qrels, [metric], names=[name])
                row[name] = round(float(table[str(metric)].iloc[0]), 4)
            rows.append(row)
            print(row, flush=True)
    print(pd.DataFrame(rows).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
