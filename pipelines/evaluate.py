"""Acceptance figures on real data under the evaluation protocol (docs/fusion.md): single systems and fusions.

    python pipelines/evaluate.py --threads 2                  # SQuAD report table, SciFact, WikiQA
    python pipelines/evaluate.py --data squad --systems tfidf colbert-full hybrid hybrid-tuned
    python pipelines/evaluate.py --data squad --checkpoint runs/train/best    # another checkpoint

Data come from the data folder beside the repository (DATA) (skipped, with a message, when absent):
  squad    the protocol's split by article (pyterrier_fandom_colbert.data.protocol). Corpus: all 1,393 paragraphs of
           the train and dev files. Fusion weights are tuned on the *selection* questions (the 628 questions of 4
           train articles held out by a seeded hash); the table is computed on the *report* questions (the 1,512
           questions of the 8 dev articles), which tune nothing.
  scifact  out of domain: BEIR SciFact (5,183 abstracts, 809 train claims)
  wikiqa   out of domain: WikiQA (8,516 sentences, 126 dev questions)
Systems: tfidf, bm25 (bm25s, if installed), biencoder (all-MiniLM-L6-v2 mean pooling, exhaustive),
maxsim-untrained (MiniLM token MaxSim: no trained projection, [MASK] vectors not scored, end to end),
colbert-rerank (TF-IDF top-k re-scored from the ColBERT index), colbert-full (end to end, FAISS --faiss),
and fusions of tfidf and colbert-full: linear (min-max, fixed 0.5/0.5), rrf (k = 60), hybrid (pfc.Hybrid, the
package default, untuned), hybrid-tuned (pfc.Hybrid with its weight tuned on the SQuAD selection questions, also
used out of domain) and hybrid-cv (out-of-domain sets: the weight tuned by 2-fold cross-validation on the set's
own queries, each half scored with the weight tuned on the other half).
SPLADE (docs/sparse.md; needs the [splade] extra, skipped with a message without it): splade (SPLADE-tiny,
exhaustive exact scoring), splade-pisa (the same index in PISA, MaxScore; needs pyterrier-pisa), splade-colbert
(SPLADE's top k re-scored from the ColBERT index) and hybrid-splade (pfc.Hybrid of SPLADE and ColBERT end to end,
default weight).
bm25-pisa: pyterrier-pisa's BM25 over the same passages (needs the [pisa] extra, skipped with a message without it);
hybrid-bm25: pfc.Hybrid of bm25-pisa and colbert-full (default weight). colbert-prf: ColBERT-PRF (index.prf(), the
paper's settings) re-ranking the colbert-full run; its grid on a selection split is benchmarks/prf_eval.py.
Each base system runs once per question set; the fusions combine those runs. The runs of tfidf and colbert-full
are cached under <out>/cache/<data>/runs/ (keyed by the settings, the checkpoint and the questions): delete them
to recompute.
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
SINGLE = ["tfidf", "bm25", "bm25-pisa", "biencoder", "maxsim-untrained", "colbert-rerank", "colbert-full",
          "colbert-prf", "splade", "splade-pisa", "splade-colbert"]
FUSIONS = ["linear", "rrf", "hybrid", "hybrid-tuned", "hybrid-cv", "hybrid-splade", "hybrid-bm25"]
SYSTEMS = SINGLE + FUSIONS
NAMES = {"tfidf": "TF-IDF", "bm25": "BM25 (bm25s)", "biencoder": "MiniLM bi-encoder",
         "maxsim-untrained": "MiniLM MaxSim, untrained", "colbert-rerank": "TF-IDF >> ColBERT",
         "colbert-full": "ColBERT end to end", "linear": "linear fusion 0.5/0.5 (min-max)", "rrf": "RRF (k = 60)",
         "hybrid": "Hybrid (default weight 0.2)", "hybrid-tuned": "Hybrid, weight tuned on SQuAD selection",
         "hybrid-cv": "Hybrid, weight by 2-fold CV", "splade": "SPLADE-tiny (exhaustive)",
         "splade-pisa": "SPLADE-tiny (PISA MaxScore)", "splade-colbert": "SPLADE-tiny >> ColBERT",
         "hybrid-splade": "Hybrid of SPLADE-tiny and ColBERT (default weight 0.2)",
         "bm25-pisa": "BM25 (PISA)", "colbert-prf": "ColBERT-PRF (3 docs, 10 embs, beta 1, k 24)",
         "hybrid-bm25": "Hybrid of BM25 (PISA) and ColBERT (default weight 0.2)"}
TUNING_GRID = [round(0.05 * i, 2) for i in range(21)]


# -- data: (corpus records, {part: (topics, qrels)}) -----------------------------------------------------------
def load_squad(root: Path = DATA):
    """Corpus = every paragraph of both files (docno f"{file}-{article}-{paragraph}"); parts = the protocol's
    selection and report questions."""
    import pandas as pd

    from pyterrier_fandom_colbert.data.irds import squad_dataset
    from pyterrier_fandom_colbert.data.protocol import squad_protocol

    folder = root / "squad-v1.1-split"
    split = squad_protocol(folder / "train-v1.1.json", folder / "dev-v1.1.json")
    docs, parts = [], {}
    for prefix, part in (("train", "selection"), ("dev", "report")):
        ds = squad_dataset(folder / f"{prefix}-v1.1.json")
        titles = {}
        for d in ds.docs_iter():
            docs.append({"docno": f"{prefix}-{d.doc_id}", "text": d.text})
            titles[d.doc_id] = d.title
        wanted = set(getattr(split, part))
        qrels = pd.DataFrame([{"qid": r.query_id, "docno": f"{prefix}-{r.doc_id}", "label": 1}
                              for r in ds.qrels_iter() if titles[r.doc_id] in wanted])
        asked = set(qrels["qid"])
        topics = pd.DataFrame([{"qid": q.query_id, "query": q.text} for q in ds.queries_iter() if q.query_id in asked])
        parts[part] = (topics, qrels)
    return docs, parts, split


def load_beir(name: str, root: Path = DATA):
    import pandas as pd

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
    return docs, {"all": (topics, qrels)}


def load(name: str, root: Path = DATA):
    """(docs, topics, qrels) of one question set, for the benchmarks: ``squad`` (the protocol's report questions
    over all 1,393 paragraphs), ``squad-selection`` (its selection questions, which may choose parameters, over the
    same paragraphs), ``squad-all`` (the 1,512 dev questions over the same paragraphs), ``squad-dev``
    (the dev questions over the dev paragraphs only), or a BEIR folder name (``scifact``: the train claims with
    judgements; others: the dev questions)."""
    if name in ("squad", "squad-selection"):
        docs, parts, _ = load_squad(root)
        return (docs, *parts["report" if name == "squad" else "selection"])
    if name.startswith("squad"):
        import pandas as pd

        from pyterrier_fandom_colbert.data.irds import squad_dataset

        docs, topics, qrels = [], None, None
        for split in (["dev"] if name == "squad-dev" else ["train", "dev"]):
            ds = squad_dataset(root / "squad-v1.1-split" / f"{split}-v1.1.json")
            docs += [{"docno": f"{split}-{d.doc_id}", "text": d.text} for d in ds.docs_iter()]
            if split == "dev":
                topics = pd.DataFrame([{"qid": q.query_id, "query": q.text} for q in ds.queries_iter()])
                qrels = pd.DataFrame([{"qid": r.query_id, "docno": f"dev-{r.doc_id}", "label": 1}
                                      for r in ds.qrels_iter()])
        return docs, topics, qrels
    docs, parts = load_beir(name, root)
    return (docs, *parts["all"])


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


# -- systems ---------------------------------------------------------------------------------------------------
def with_dependencies(names) -> list:
    """``names`` plus the single systems the fusions among them are built from (appended, in that order)."""
    wanted = list(names)
    if set(wanted) & set(FUSIONS):
        wanted += [n for n in ("tfidf", "colbert-full") if n not in wanted]
    if "hybrid-bm25" in wanted and "bm25-pisa" not in wanted:
        wanted.append("bm25-pisa")
    if "colbert-prf" in wanted and "colbert-full" not in wanted:
        wanted.append("colbert-full")
    if "hybrid-splade" in wanted and "splade" not in wanted:
        wanted.append("splade")
    if "splade-colbert" in wanted and "colbert-rerank" not in wanted:
        wanted.append("colbert-rerank")
    return wanted


def baseline_system(system: str, docs, k: int, cache: Path, device):
    """A baseline: ``bm25`` (bm25s), ``bm25-pisa`` (pyterrier-pisa) or ``biencoder`` (MiniLM); None, said on
    stderr, when its library is not installed."""
    if system == "bm25":
        try:
            return bm25(docs, k)
        except ImportError:
            print("bm25s not installed (pip install bm25s): BM25 skipped", file=sys.stderr)
            return None
    if system == "bm25-pisa":
        from pyterrier_fandom_colbert.sparse.bm25 import build_bm25_index
        from pyterrier_fandom_colbert.sparse.pisa import pisa_available

        if pisa_available():
            return build_bm25_index(cache / "bm25-pisa", docs).bm25(num_results=k)
        print("pyterrier-pisa not installed (pip install 'pyterrier-fandom-colbert[pisa]'): bm25-pisa and "
              "hybrid-bm25 skipped", file=sys.stderr)
        return None
    return biencoder(docs, k, device)


def single_systems(docs, names, k, checkpoint, cache: Path, device, faiss, k_hat, verbose, long_docs="windows"):
    """The single (non-fusion) systems asked for, plus tfidf and colbert-full whenever a fusion needs them.
    ColBERT indexes are cached per checkpoint and ``long_docs`` setting."""
    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.model.config import default_backbone

    def colbert_index(colbert):
        index = pfc.ColBERTIndex(cache / f"colbert-{long_docs}-{colbert.fingerprint()}")
        if not index.built():
            index.indexer(colbert, verbose=verbose, long_docs=long_docs).index(docs)
        return index

    wanted = with_dependencies(names)
    out = {}
    tfidf = pfc.TfidfIndex(cache / tfidf_key())
    if not tfidf.built():
        tfidf.indexer(verbose=verbose).index(docs)
    colbert = None
    for system in wanted:
        if system == "tfidf":
            out[system] = tfidf.retriever(num_results=k)
        elif system in ("bm25", "bm25-pisa", "biencoder"):
            baseline = baseline_system(system, docs, k, cache, device)
            if baseline is not None:
                out[system] = baseline
        elif system == "maxsim-untrained":
            raw = pfc.ColBERT.from_pretrained(default_backbone(), device=device, verbose=verbose,
                                              config=pfc.ColBERTConfig(dim=384, score_query_masks=False))
            out[system] = colbert_index(raw).retriever(raw, num_results=k, faiss=faiss, k_hat=k_hat)
        elif system in ("splade", "splade-pisa", "splade-colbert"):
            continue  # below, after the ColBERT systems
        elif system in ("colbert-rerank", "colbert-full"):
            colbert = colbert or pfc.ColBERT.from_pretrained(checkpoint, device=device, verbose=verbose)
            index = colbert_index(colbert)
            if system == "colbert-rerank":
                out["colbert-scorer"] = index.scorer(colbert)
                out[system] = tfidf.retriever(num_results=k) >> out["colbert-scorer"]
            else:
                out[system] = index.retriever(colbert, num_results=k, faiss=faiss, k_hat=k_hat)
                out["colbert-fingerprint"] = colbert.fingerprint()
                out["colbert-prf"] = index.prf()  # applied to the colbert-full run
    if {"splade", "splade-pisa", "splade-colbert"} & set(wanted):
        out.update(splade_systems(docs, wanted, k, cache, device, verbose))
    return out


def splade_systems(docs, names, k: int, cache: Path, device, verbose):
    """SPLADE-tiny over an index cached per encoder: exhaustive, and (pyterrier-pisa installed) PISA MaxScore."""
    from pyterrier_fandom_colbert.sparse.encoder import Splade
    from pyterrier_fandom_colbert.sparse.index import SparseIndex
    from pyterrier_fandom_colbert.sparse.pisa import build_pisa_index, pisa_available, pisa_retriever

    try:
        splade = Splade.from_pretrained(device=device, verbose=verbose)
    except ModuleNotFoundError as err:
        print(f"{err}: SPLADE skipped", file=sys.stderr)
        return {}
    index = SparseIndex(cache / f"splade-{splade.fingerprint()}")
    if not index.built():
        (splade.doc_encoder() >> index.indexer(verbose=verbose)).index(iter(docs))
    out = {"splade": splade.query_encoder() >> index.retriever(num_results=k),
           "splade-fingerprint": splade.fingerprint()}
    if "splade-pisa" in names:
        if not pisa_available():
            print("pyterrier-pisa not installed (pip install pyterrier-pisa): SPLADE in PISA skipped", file=sys.stderr)
        else:
            path = cache / f"splade-pisa-{splade.fingerprint()}"
            if not path.exists():
                build_pisa_index(path, index.get_corpus_iter())
            out["splade-pisa"] = splade.query_encoder() >> pisa_retriever(path, k)
    return out


def tfidf_key() -> str:
    """The cache name of the TF-IDF index and its runs: the package's default TF-IDF settings, hashed, so an index
    cached under older defaults (e.g. another stopword list) is never reused for the current ones."""
    from pyterrier_fandom_colbert.lexical.tfidf import TfidfConfig

    return f"tfidf-{TfidfConfig().settings_digest()[:8]}"


def colbert_key(fingerprint: str, k: int, faiss: str, k_hat: int, long_docs: str) -> str:
    """The cache key of an end-to-end ColBERT run: the checkpoint, the index's ``long_docs`` and the search."""
    return f"colbert-{long_docs}-{fingerprint}-k{k}-{faiss}-khat{k_hat}"


def cached_run(system, topics, cache: Path, key: str):
    """``system(topics)``, read from ``cache/runs/`` when this key and these questions were run before."""
    import hashlib

    import pandas as pd

    from pyterrier_fandom_colbert.storage import atomic_path

    digest = hashlib.sha256("\n".join(map(str, topics["qid"])).encode()).hexdigest()[:12]
    path = cache / "runs" / f"{key}-{digest}.pkl.gz"
    if path.exists():
        return pd.read_pickle(path)
    run = system(topics)
    with atomic_path(path) as tmp:
        run.to_pickle(tmp, compression="gzip")
    return run


def fusion_systems(names, lexical, neural, tuned_weight, cv_fusion):
    """Fusions of two precomputed runs (``pt.Transformer.from_df``)."""
    import pyterrier_fandom_colbert as pfc

    out = {}
    for name in names:
        if name == "linear":
            out[name] = pfc.LinearFusion([lexical, neural], [0.5, 0.5])
        elif name == "rrf":
            out[name] = pfc.RRF([lexical, neural], k=60)
        elif name == "hybrid":
            out[name] = pfc.Hybrid(lexical, neural)
        elif name == "hybrid-tuned" and tuned_weight is not None:
            out[name] = pfc.Hybrid(lexical, neural, weight=tuned_weight)
        elif name == "hybrid-cv" and cv_fusion is not None:
            out[name] = cv_fusion
    return out


def tune_hybrid(lexical, neural, topics, qrels, metric, out: Path, title: str):
    """The Hybrid weight that maximises ``metric`` on (topics, qrels); writes the curve (CSV, PNG)."""
    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.fusion import tune_fusion

    tuned = tune_fusion([lexical, neural], topics, qrels, metric, TUNING_GRID,
                        fusion=lambda w: pfc.Hybrid(lexical, neural, weight=w),
                        measures=["RR@10", "nDCG@10", "R@10"])
    tuned.curve.drop(columns=["point"]).to_csv(out.with_suffix(".csv"), index=False)
    tuned.plot(out.with_suffix(".png"), title=title, xlabel="lexical (TF-IDF) weight")
    return tuned


def cross_validated(lexical, neural, topics, qrels, metric, folds: int, seed: int = 0):
    """Each fold's queries are fused with the Hybrid weight tuned on the other folds; returns a from_df system and
    the per-fold weights."""
    import numpy as np
    import pandas as pd
    import pyterrier as pt

    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.fusion import tune_fusion

    order = np.random.default_rng(seed).permutation(len(topics))
    fold_of = np.empty(len(topics), dtype=int)
    fold_of[order] = np.arange(len(topics)) % folds
    runs, weights = [], []
    for f in range(folds):
        train, test = topics[fold_of != f], topics[fold_of == f]
        tuned = tune_fusion([lexical, neural], train, qrels, metric, TUNING_GRID,
                            fusion=lambda w: pfc.Hybrid(lexical, neural, weight=w))
        weights.append(tuned.best)
        runs.append(pfc.Hybrid(lexical, neural, weight=tuned.best)(test))
    return pt.Transformer.from_df(pd.concat(runs, ignore_index=True)), weights


def run_systems(names, singles: dict, lex, neu, sparse, bm25=None) -> dict:
    """The non-fusion systems of the table, over the cached base runs ``lex`` (TF-IDF), ``neu`` (ColBERT
    end-to-end), ``sparse`` (SPLADE) and ``bm25`` (PISA) where a system is one of them or starts from one; a
    system whose base run was not made (None) is left out."""
    import pyterrier_fandom_colbert as pfc

    scorer = singles.get("colbert-scorer")
    # name -> (the base runs it is built from, how)
    from_runs = {
        "tfidf": ((lex,), lambda: lex),
        "colbert-full": ((neu,), lambda: neu),
        "splade": ((sparse,), lambda: sparse),
        "splade-colbert": ((sparse,), lambda: sparse >> scorer),
        "hybrid-splade": ((sparse, neu), lambda: pfc.Hybrid(sparse, neu)),
        "bm25-pisa": ((bm25,), lambda: bm25),
        "hybrid-bm25": ((bm25, neu), lambda: pfc.Hybrid(bm25, neu)),
        "colbert-prf": ((neu,), lambda: neu >> singles["colbert-prf"]),
    }
    systems = {}
    for s in names:
        if s == "colbert-rerank":
            systems[s] = lex >> scorer if lex is not None else singles[s]
        elif s in from_runs:
            needs, make = from_runs[s]
            if all(run is not None for run in needs):
                systems[s] = make()
        elif s in singles:
            systems[s] = singles[s]
    return systems


def set_threads(threads) -> None:
    """CPU threads for torch and FAISS (None or 0: their defaults)."""
    if threads:
        import faiss
        import torch

        torch.set_num_threads(threads)
        faiss.omp_set_num_threads(threads)


def data_folder(root: Path, name: str) -> Path:
    """Where the data set ``name`` (squad, scifact, wikiqa) lies under the shared data root."""
    return root / ("squad-v1.1-split" if name == "squad" else name)


def add_run_arguments(ap: argparse.ArgumentParser, data=("squad", "scifact", "wikiqa")) -> None:
    """The options that decide which cached runs are read or made (data sets, checkpoint, depth, FAISS kind, k̂,
    long-document mode, output folder, threads, data root): shared with the benchmarks built on these runs."""
    ap.add_argument("--data", nargs="+", default=list(data), choices=["squad", "scifact", "wikiqa"])
    ap.add_argument("--checkpoint", default=None, help="ColBERT checkpoint (default: the bundled one)")
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--faiss", default="ivfpq", help="FAISS kind of the end-to-end retrievers (flat = exact)")
    ap.add_argument("--k-hat", type=int, default=100,
                    help="document-token neighbours per query vector of the end-to-end retrievers (candidates)")
    ap.add_argument("--long-docs", choices=["windows", "truncate"], default="windows",
                    help="how the ColBERT index stores texts longer than doc_maxlen (the indexer's default: windows)")
    ap.add_argument("--out", type=Path, default=Path("runs/evaluate"))
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--data-root", type=Path, default=DATA)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(ap)
    ap.add_argument("--systems", nargs="+", default=["tfidf", "bm25", "colbert-rerank", "colbert-full", *FUSIONS],
                    choices=SYSTEMS)
    ap.add_argument("--folds", type=int, default=2, help="cross-validation folds of hybrid-cv")
    ap.add_argument("--device", default=None)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)

    import pyterrier as pt
    import torch
    from ir_measures import RR, R, nDCG

    from pyterrier_fandom_colbert.storage import read_json, write_json

    set_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    tuned_file = args.out / "squad-selection-weight.json"
    names = list(dict.fromkeys(args.systems))
    fusions = [n for n in names if n in FUSIONS]
    # squad first: its selection part tunes the weight that the out-of-domain sets reuse
    for name in sorted(args.data, key=lambda n: n != "squad"):
        needed = data_folder(args.data_root, name)
        if not needed.exists():
            print(f"{name}: {needed} not found, skipped")
            continue
        if name == "squad":
            docs, parts, split = load_squad(args.data_root)
            metrics, objective = [RR @ 10, R @ 1, R @ 10, R @ 50], "RR@10"
        else:
            docs, parts = load_beir(name, args.data_root)
            metrics, objective = [nDCG @ 10, R @ 100, RR @ 10], "nDCG@10"
        cache = args.out / "cache" / name
        singles = single_systems(docs, [n for n in names if n in SINGLE], args.k, args.checkpoint, cache, device,
                                 args.faiss, args.k_hat, args.verbose, args.long_docs)
        keys = {"tfidf": f"{tfidf_key()}-k{args.k}",
                "colbert-full": colbert_key(singles.get("colbert-fingerprint"), args.k, args.faiss, args.k_hat,
                                            args.long_docs),
                "splade": f"splade-{singles.get('splade-fingerprint')}-k{args.k}",
                "bm25-pisa": f"bm25-pisa-k{args.k}"}
        # each base run once per question set; fusions (and the re-ranker's first stage) reuse it
        runs = {part: {s: cached_run(singles[s], topics, cache, keys[s]) for s in keys if s in singles}
                for part, (topics, _) in parts.items()}
        tuned_weight, cv, cv_note = None, None, ""
        if name == "squad" and fusions:
            sel_topics, sel_qrels = parts["selection"]
            lex, neu = (pt.Transformer.from_df(runs["selection"][s]) for s in ("tfidf", "colbert-full"))
            tuned = tune_hybrid(lex, neu, sel_topics, sel_qrels, objective, args.out / "squad-selection-curve",
                                f"SQuAD selection ({len(sel_topics)} questions)")
            tuned_weight = tuned.best
            write_json(tuned_file, {"weight": tuned_weight, "RR@10": tuned.value, "checkpoint": args.checkpoint,
                                    "selection_articles": list(split.selection)})
            print(f"Hybrid weight tuned on the SQuAD selection part: {tuned_weight} (RR@10 {tuned.value:.4f})")
        elif fusions and "hybrid-tuned" in names:
            if tuned_file.exists():
                tuned_weight = read_json(tuned_file)["weight"]
            else:
                print(f"{tuned_file} not found (run --data squad first): hybrid-tuned skipped", file=sys.stderr)
        report = "report" if name == "squad" else "all"
        topics, qrels = parts[report]
        lex = pt.Transformer.from_df(runs[report]["tfidf"]) if "tfidf" in runs[report] else None
        neu = pt.Transformer.from_df(runs[report]["colbert-full"]) if "colbert-full" in runs[report] else None
        sparse = pt.Transformer.from_df(runs[report]["splade"]) if "splade" in runs[report] else None
        bm25_run = pt.Transformer.from_df(runs[report]["bm25-pisa"]) if "bm25-pisa" in runs[report] else None
        if name != "squad" and "hybrid-cv" in names:
            cv, weights = cross_validated(lex, neu, topics, qrels, objective, args.folds)
            cv_note = f" (hybrid-cv weights per fold: {weights})"
        table_systems = run_systems(names, singles, lex, neu, sparse, bm25_run)
        table_systems.update(fusion_systems(fusions, lex, neu, tuned_weight, cv))
        ordered = {NAMES[s]: table_systems[s] for s in names if s in table_systems}
        table = pt.Experiment(list(ordered.values()), topics, qrels, metrics, names=list(ordered),
                              verbose=args.verbose)
        where = "report part" if name == "squad" else "all queries"
        print(f"\n{name} ({where}): {len(docs):,} passages, {len(topics):,} questions, ColBERT index long_docs="
              f"{args.long_docs!r}{cv_note}")
        print(table.to_string(index=False, float_format="{:.4f}".format))
        table.to_csv(args.out / f"{name}.csv", index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
