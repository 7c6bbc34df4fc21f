"""Check the colbert-ai and PyLate exports against those libraries' own encoders (a check script, not CI).

    .venv/bin/python benchmarks/check_formats.py [--venv /tmp/peers-venv] [--passages 300] [--queries 30]

1. Makes (once) a separate virtual environment with colbert-ai and PyLate (``--venv``; see ``setup_venv`` for the
   pins and why they are needed).
2. Converts the package's default checkpoint to each format under settings the format can represent (the
   checkpoint as trained scores only the non-[MASK] query vectors and averages them, which neither library can
   express: that refusal is checked too), reloads each export here, and runs ``check_formats_peer.py`` in the
   other environment to encode and score the same texts with the library's own code, and to save the model
   again with the library's own writer.
3. Compares query vectors, document vectors (and which tokens each keeps) and MaxSim scores, and does the same
   for the library-written folder read by this package; prints the results recorded in docs/formats.md and
   writes them to ``--out`` as JSON.

Texts: the first ``--passages`` SciFact passages and ``--queries`` train queries (skips, exit 0, when the data
are absent).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import string
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"

# colbert-ai 0.2.22 needs transformers 4 (its HF_ColBERT does not initialise transformers 5's tied-weight
# bookkeeping); PyLate 1.6.0 accepts transformers 4.41+. PyLate's fast-plaid requirement is left out: its wheels
# pin torch <= 2.11 (pip would replace torch with a CUDA build) and it is only needed for PLAID indexes.
PEER_PINS = ["transformers>=4.41,<5", "sentence-transformers==5.3.0", "datasets<5", "ujson==5.12.0",
             "ninja==1.11.1.4", "accelerate>=0.31.0", "pandas>=2.2.1", "bitarray", "flask", "GitPython",
             "python-dotenv", "scipy", "tqdm"]
PEER_NO_DEPS = ["colbert-ai==0.2.22", "pylate==1.6.0", "fastkmeans==0.5.0"]
TORCH = "torch==2.13.0"


def setup_venv(venv: Path) -> Path:
    """The environment's python, creating it first if needed (torch pinned first, so nothing replaces it)."""
    python = venv / "bin" / "python"
    if python.exists():
        return python
    print(f"creating {venv} (torch first, then colbert-ai and PyLate)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, TORCH], check=True)
    constraints = venv / "constraints.txt"
    constraints.write_text(TORCH + "\n")
    subprocess.run([*pip, "-c", str(constraints), *PEER_PINS], check=True)
    subprocess.run([*pip, "--no-deps", "-c", str(constraints), *PEER_NO_DEPS], check=True)
    return python


def read_texts(passages: int, queries: int):
    corpus, topics = DATA / "scifact" / "corpus.jsonl.gz", DATA / "scifact" / "queries-train.jsonl.gz"
    if not (corpus.exists() and topics.exists()):
        return None
    docs, qs = [], []
    with gzip.open(corpus, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            docs.append(f"{row.get('title', '')} {row['text']}".strip())
            if len(docs) == passages:
                break
    with gzip.open(topics, "rt", encoding="utf-8") as f:
        for line in f:
            qs.append(json.loads(line)["text"])
            if len(qs) == queries:
                break
    return qs, docs


def our_side(colbert, queries, documents):
    """Scored query vectors, document vectors and kept token ids, and the MaxSim matrix, from this package."""
    import torch

    from pyterrier_fandom_colbert.model.scoring import maxsim

    q, q_mask = colbert.encode_queries(queries)
    q_vecs = [q[i][q_mask[i]] for i in range(len(queries))]
    docs, ids = [None] * len(documents), [None] * len(documents)
    for batch in colbert.doc_batches(documents):
        for pos, vecs, toks in batch.per_document():
            docs[pos], ids[pos] = vecs, toks
    width = max(len(d) for d in docs)
    d_pad = torch.zeros(len(docs), width, colbert.config.dim)
    d_mask = torch.zeros(len(docs), width, dtype=torch.bool)
    for i, d in enumerate(docs):
        d_pad[i, :len(d)] = torch.from_numpy(d)
        d_mask[i, :len(d)] = True
    cfg = colbert.config
    scores = torch.stack([maxsim(v, d_pad, None, d_mask, cfg.similarity, cfg.reduction) for v in q_vecs])
    return [v.numpy() for v in q_vecs], docs, ids, scores.numpy()


def split(flat, lengths):
    return np.split(flat, np.cumsum(lengths)[:-1])


def compare(ours, theirs) -> dict:
    q_vecs, docs, ids, scores = ours
    their_q, their_d = split(theirs["q"], theirs["q_len"]), split(theirs["d"], theirs["d_len"])
    their_ids = split(theirs["d_ids"], theirs["d_ids_len"])
    same_q_shape = all(a.shape == b.shape for a, b in zip(q_vecs, their_q))
    same_tokens = all(len(a) == len(b) and np.array_equal(a, b) for a, b in zip(ids, their_ids))
    same_d_shape = all(a.shape == b.shape for a, b in zip(docs, their_d))
    out = {
        "query_shapes_equal": same_q_shape, "doc_tokens_equal": same_tokens,
        "query_vectors_max_abs_diff": float(max(np.abs(a - b).max() for a, b in zip(q_vecs, their_q)))
        if same_q_shape else None,
        "doc_vectors_max_abs_diff": float(max(np.abs(a - b).max() for a, b in zip(docs, their_d)))
        if same_d_shape else None,
    }
    for key in ("scores", "scores_unpadded"):
        theirs_s = theirs[key]
        diff = np.abs(theirs_s - scores)
        top_ours = np.argsort(-scores, axis=1, kind="stable")[:, :10]
        top_theirs = np.argsort(-theirs_s, axis=1, kind="stable")[:, :10]
        out[key] = {"max_abs_diff": float(diff.max()), "max_rel_diff": float((diff / np.abs(scores).clip(1e-6)).max()),
                    "pairs_over_1e-4": int((diff > 1e-4).sum()), "pairs": int(diff.size),
                    "top10_identical_queries": int((top_ours == top_theirs).all(axis=1).sum())}
    return out


def variants(colbert):
    """(name, format, settings) — each a setting combination the format represents exactly."""
    from pyterrier_fandom_colbert.model import formats

    hf = colbert.tokenizer.hf
    pylate_punct = list(dict.fromkeys(hf.convert_ids_to_tokens(hf.convert_tokens_to_ids(list(string.punctuation)))))
    scoring = dict(score_query_masks=True, reduction="sum")
    return [
        ("colbert-ai: ColBERTv2 settings (masks not attended, punctuation skipped)", "colbert-ai",
         dict(scoring, attend_to_query_masks=False, skiplist=formats.colbert_ai_punctuation(hf))),
        ("colbert-ai: masks attended, nothing skipped", "colbert-ai", dict(scoring, attend_to_query_masks=True)),
        ("pylate: query expansion, masks not attended, punctuation skipped", "pylate",
         dict(scoring, attend_to_query_masks=False, skiplist=pylate_punct)),
        ("pylate: no query expansion, nothing skipped", "pylate",
         dict(score_query_masks=False, attend_to_query_masks=False, reduction="sum")),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", default="/tmp/peers-venv", help="the colbert-ai + PyLate environment (made if absent)")
    ap.add_argument("--passages", type=int, default=300)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="runs/check_formats.json")
    args = ap.parse_args()

    texts = read_texts(args.passages, args.queries)
    if texts is None:
        print(f"{DATA / 'scifact'} is absent: nothing to check", file=sys.stderr)
        return 0
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch

    torch.set_num_threads(args.threads)
    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.model import formats

    python = setup_venv(Path(args.venv))
    queries, documents = texts
    base = pfc.ColBERT.from_pretrained(batch_size=32)
    results = {"passages": len(documents), "queries": len(queries), "checkpoint": base.fingerprint(),
               "threads": args.threads, "refusals": {}, "variants": {}}
    with tempfile.TemporaryDirectory(prefix="check-formats-") as tmp:
        tmp = Path(tmp)
        for fmt in ("colbert-ai", "pylate"):  # the checkpoint as trained cannot be expressed in either format
            try:
                base.save_pretrained(tmp / f"as-trained-{fmt}", format=fmt)
                results["refusals"][fmt] = None
            except ValueError as err:
                results["refusals"][fmt] = str(err)
        (tmp / "texts.json").write_text(json.dumps({"queries": queries, "documents": documents}))
        for i, (name, fmt, settings) in enumerate(variants(base)):
            model = formats.with_settings(base, **settings)
            folder = tmp / f"v{i}-{fmt}"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the mask_punctuation=false note; the peer applies its workaround
                model.save_pretrained(folder, format=fmt)
            reloaded = pfc.ColBERT.from_pretrained(folder, batch_size=32)
            ours = our_side(model, queries, documents)
            again = our_side(reloaded, queries, documents)
            started = time.perf_counter()
            env = dict(os.environ, CHECK_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
            saved_there = tmp / f"v{i}-{fmt}-saved-by-the-library"
            run = subprocess.run([str(python), str(Path(__file__).with_name("check_formats_peer.py")), fmt,
                                  str(folder), str(tmp / "texts.json"), str(tmp / f"v{i}.npz"), str(saved_there)],
                                 env=env, capture_output=True, text=True)
            if run.returncode != 0:
                print(run.stderr[-4000:], file=sys.stderr)
                results["variants"][name] = {"error": run.stderr[-2000:]}
                continue
            theirs = np.load(tmp / f"v{i}.npz")
            row = compare(ours, theirs)
            row["reload_identical_here"] = (all(np.array_equal(a, b) for a, b in zip(ours[0], again[0]))
                                            and all(np.array_equal(a, b) for a, b in zip(ours[1], again[1]))
                                            and reloaded.config.replace(backbone=None)
                                            == model.config.replace(backbone=None))
            row["peer_seconds"] = round(time.perf_counter() - started, 1)
            # the other direction: the folder the library itself wrote, read here
            theirs_read_here = pfc.ColBERT.from_pretrained(saved_there, batch_size=32)
            row["library_written_folder_read_here"] = {
                "config_equal": theirs_read_here.config.replace(backbone=None) == model.config.replace(backbone=None),
                **{k: v for k, v in compare(our_side(theirs_read_here, queries, documents), theirs).items()
                   if k != "scores_unpadded"}}
            row["settings"] = {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in settings.items()
                               if k != "skiplist"} | {"skiplist_tokens": len(settings.get("skiplist", ()))}
            results["variants"][name] = row
            print(f"\n{name}\n{json.dumps(row, indent=1)}", flush=True)
    for fmt, message in results["refusals"].items():
        print(f"\nas trained -> {fmt}: {'refused: ' + message if message else 'NOT refused'}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
