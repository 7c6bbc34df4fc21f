"""TF-IDF with each stopword list of ``lexical.analysis.STOPWORD_LISTS``, on the shared data.

    python benchmarks/stopwords_bench.py            # reads the data folder beside the repository

Selection sets (the default list was chosen on these): SQuAD train questions over all SQuAD paragraphs (RR@10),
SciFact train claims (nDCG@10; technical text, the nearest offline stand-in for Cranfield). Report sets (not
used for the choice): SQuAD dev questions (RR@10), WikiQA dev questions (nDCG@10). Exits with a message (status
0) when the data is absent.
"""
from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def squad(split: str):
    import pandas as pd

    docs, topics, qrels = [], [], []
    for part in ("train", "dev"):
        for article in json.loads((DATA / "squad-v1.1-split" / f"{part}-v1.1.json").read_text())["data"]:
            for i, para in enumerate(article["paragraphs"]):
                docno = f"{article['title']}/{i}"
                docs.append({"docno": docno, "text": para["context"]})
                if part == split:
                    topics += [{"qid": qa["id"], "query": qa["question"]} for qa in para["qas"]]
                    qrels += [{"qid": qa["id"], "docno": docno, "label": 1} for qa in para["qas"]]
    return docs, pd.DataFrame(topics), pd.DataFrame(qrels)


def beir(name: str, split: str):
    import pandas as pd

    folder = DATA / name
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


def main() -> int:
    if not DATA.exists():
        print(f"shared data not found at {DATA}; nothing to measure")
        return 0
    import pandas as pd
    import pyterrier as pt
    from ir_measures import RR, nDCG

    from pyterrier_fandom_colbert.lexical.analysis import STOPWORD_LISTS
    from pyterrier_fandom_colbert.lexical.tfidf import TfidfConfig, TfidfIndex

    sets = [("SQuAD train (selection)", lambda: squad("train"), RR @ 10),
            ("SciFact train (selection)", lambda: beir("scifact", "train"), nDCG @ 10),
            ("SQuAD dev (report)", lambda: squad("dev"), RR @ 10),
            ("WikiQA dev (report)", lambda: beir("wikiqa", "dev"), nDCG @ 10)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for title, loader, metric in sets:
            docs, topics, qrels = loader()
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
