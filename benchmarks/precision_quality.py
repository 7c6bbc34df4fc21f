"""What a CPU precision of document encoding costs in retrieval quality: float32 against bfloat16 and int8.

    python benchmarks/precision_quality.py --data squad --threads 2

Documents are encoded as the indexer encodes them (whole texts as windows, ``ColBERT.encode_pieces``) once per
``--precisions`` entry; queries always in float32 (the precision is an index-time option: ``pfc index
--precision``, ``ColBERT(cpu_precision=...)``). Every question is scored against every document by exhaustive
MaxSim (the default checkpoint's cosine similarity and mean reduction), so the figures compare encodings, not
neighbour searches. Reported per precision: RR@10, nDCG@10, R@1 and R@10; the deviation from float32 of the token
vectors (largest component difference, lowest cosine) and of the scores (mean and largest absolute difference over
all pairs, and over each question's float32 top 10); top-10 overlap and top-1 agreement with float32; encoding
passages/s (one pass each, so under a changing load only a rough speed). The yardstick of floating-point noise is
the row "float32 stored as float16": float32's vectors rounded as every fp16 index stores them.
Skips (exit 0, message) when the data are absent.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from bench_io import write_report
from evaluate import DATA, data_folder, load, set_threads


def doc_matrix(encoded):
    """(all token vectors [T, d] float32, document of each row [T]) of ``encode_pieces`` output."""
    import torch

    vecs = torch.from_numpy(np.concatenate([v for v, _, _ in encoded]))
    owner = torch.from_numpy(np.repeat(np.arange(len(encoded)), [len(v) for v, _, _ in encoded]))
    return vecs, owner


def all_scores(queries, vecs, owner, ndocs: int, chunk: int = 64) -> np.ndarray:
    """[questions, documents] mean-over-query-tokens of the max cosine over each document's tokens."""
    import torch

    out = np.empty((len(queries), ndocs), dtype=np.float64)
    index = owner[:, None]
    for start in range(0, len(queries), chunk):
        block = queries[start:start + chunk]
        for i, q in enumerate(block):
            sims = vecs @ torch.from_numpy(q).T                       # [T, n_q]
            best = torch.full((ndocs, q.shape[0]), -2.0).scatter_reduce(
                0, index.expand(-1, q.shape[0]), sims, reduce="amax")
            out[start + i] = best.mean(1).double().numpy()
    return out


def metrics(scores: np.ndarray, relevant: list) -> dict:
    order = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    rr = ndcg = r1 = r10 = 0.0
    for row, rel in zip(order, relevant):
        hits = [r for r, d in enumerate(row) if d in rel]
        if hits:
            rr += 1 / (hits[0] + 1)
            r1 += hits[0] == 0
            r10 += len(hits) / len(rel)
        dcg = sum(1 / np.log2(r + 2) for r in hits)
        ideal = sum(1 / np.log2(r + 2) for r in range(min(10, len(rel))))
        ndcg += dcg / ideal
    n = len(relevant)
    return {"RR@10": rr / n, "nDCG@10": ndcg / n, "R@1": r1 / n, "R@10": r10 / n}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="squad", help="a pipelines/evaluate.py data name (default: the SQuAD report "
                                                    "part: 1,512 questions over all 1,393 paragraphs)")
    ap.add_argument("--data-root", type=Path, default=DATA)
    ap.add_argument("--precisions", nargs="+", default=["float32", "bfloat16", "int8"])
    ap.add_argument("--checkpoint", default=None, help="default: the package's checkpoint")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None, help="only the first N questions")
    ap.add_argument("--out", type=Path, default=Path("runs/precision_quality.json"))
    args = ap.parse_args(argv)
    if args.precisions[0] != "float32":
        ap.error("--precisions must start with float32 (the others are compared with it)")
    if not data_folder(args.data_root, args.data.split("-")[0]).exists():
        print(f"skipped: {args.data} is not under {args.data_root}")
        return 0

    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.model.encoders import encode_query_frame
    from pyterrier_fandom_colbert.model.tokenization import default_stride

    set_threads(args.threads)
    docs, topics, qrels = load(args.data, args.data_root)
    if args.limit:
        topics = topics.iloc[:args.limit]
    docnos = [d["docno"] for d in docs]
    position = {d: i for i, d in enumerate(docnos)}
    relevant = [set(position[d] for d in qrels.loc[(qrels["qid"] == qid) & (qrels["label"] > 0), "docno"])
                for qid in topics["qid"]]
    reference = pfc.ColBERT.from_pretrained(args.checkpoint, device="cpu", batch_size=args.batch_size)
    cfg = reference.config
    if (cfg.similarity, cfg.reduction, cfg.normalise) != ("cosine", "mean", True):
        raise SystemExit("this script scores cosine/mean ColBERT checkpoints with normalised vectors")
    queries = encode_query_frame(reference, topics["query"].tolist())[0]
    pieces = reference.tokenizer.document_pieces([d["text"] for d in docs])
    stride = default_stride(reference.tokenizer.max_doc_pieces)
    report = {"data": args.data, "questions": len(topics), "documents": len(docs), "threads": args.threads,
              "load_average_at_start": [round(x, 2) for x in os.getloadavg()], "precisions": {}}
    base = None
    for precision in args.precisions:  # float32 first: the others are compared with it
        colbert = pfc.ColBERT(reference.model, reference.tokenizer, device="cpu", batch_size=args.batch_size,
                              cpu_precision=precision)
        started = time.perf_counter()
        encoded = colbert.encode_pieces(pieces, stride)
        seconds = time.perf_counter() - started
        vecs, owner = doc_matrix(encoded)
        variants = [(precision, vecs, {"encode_seconds": round(seconds, 1),
                                       "passages_per_s": round(len(docs) / seconds, 2)})]
        if precision == "float32":  # the yardstick: float32 vectors rounded to float16, as an index stores them
            variants.append(("float32 stored as float16", vecs.half().float(), {}))
        for name, v, timing in variants:
            row = compare(name, v, owner, timing, queries, relevant, len(docs), base)
            scores = row.pop("_scores")
            base = base or (v, scores)
            report["precisions"][name] = row
            print(name, row, flush=True)
    report["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    write_report(args.out, report)
    return 0


def compare(name, vecs, owner, timing, queries, relevant, ndocs, base):
    """Quality of one set of document vectors, and (``base``: float32's vectors and scores) its deviation."""
    scores = all_scores(queries, vecs, owner, ndocs)
    row = {**timing, **{k: round(float(v), 4) for k, v in metrics(scores, relevant).items()}, "_scores": scores}
    if base is None:
        return row
    bvecs, bscores = base
    top = np.argsort(-bscores, axis=1, kind="stable")[:, :10]
    mine = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    diff = np.abs(scores - bscores)
    top_diff = np.take_along_axis(diff, top, axis=1)
    row.update({
        "vector_max_abs_diff": float((vecs - bvecs).abs().max()),
        "vector_min_cosine": float((vecs * bvecs).sum(1).min()),
        "score_mean_abs_diff": float(diff.mean()), "score_max_abs_diff": float(diff.max()),
        "top10_score_mean_abs_diff": float(top_diff.mean()), "top10_score_max_abs_diff": float(top_diff.max()),
        "top10_overlap": float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top, mine)])),
        "top1_agreement": float(np.mean(top[:, 0] == mine[:, 0]))})
    return row


if __name__ == "__main__":
    sys.exit(main())
