"""Check the colbert-ai and PyLate exports against those libraries' own encoders (a check script, not CI).

    .venv/bin/python benchmarks/check_formats.py [--venv /tmp/peer-venvs] [--pylate 1.2.0,...,1.6.0]
                                                 [--passages 300] [--queries 30]

1. Makes (once) a separate environment for the libraries (``--venv``; see ``setup_venv`` for the pins and why
   they are needed): colbert-ai 0.2.22 in a base virtual environment, and each PyLate release of ``--pylate``
   with the sentence-transformers and transformers it pins in a folder of its own, put first on ``PYTHONPATH``.
2. Converts the package's default checkpoint to each format under settings the format can represent (the
   checkpoint as trained scores only the non-[MASK] query vectors and averages them, which neither library can
   express: that refusal is checked too, and so is a dot-product model for colbert-ai), reloads each export here,
   and runs ``check_formats_peer.py`` in the other environment (for PyLate, once per release) to encode and score
   the same texts with the library's own code, and to save the model again with the library's own writer.
3. Compares query vectors, document vectors (and which tokens each keeps) and MaxSim scores, and does the same
   for the library-written folder read by this package.
4. Converts a folder written by PyLate itself (its tokenizer pads with [MASK]) to colbert-ai through this package
   and compares colbert-ai's encoder with this package on it; and the same folder as the export wrote it before
   the padding token was fixed (colbert-ai then zeroes every [MASK] query vector, which this package now reads as
   ``score_query_masks=False``).

Prints a summary (the tables of docs/formats.md) and writes everything to ``--out`` as JSON. Texts: the first
``--passages`` SciFact passages and ``--queries`` train queries (skips, exit 0, when the data are absent).
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
from typing import Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"

# colbert-ai 0.2.22 needs transformers 4 (its HF_ColBERT does not initialise transformers 5's tied-weight
# bookkeeping); PyLate accepts transformers 4.41+ from 1.3 on. PyLate's fast-plaid requirement is left out: its
# wheels pin torch <= 2.11 (pip would replace torch with a CUDA build) and it is only needed for PLAID indexes.
PEER_PINS = ["transformers==4.56.2", "sentence-transformers==5.3.0", "datasets<5", "ujson==5.12.0",
             "ninja==1.11.1.4", "accelerate>=0.31.0", "pandas>=2.2.1", "bitarray", "flask", "GitPython",
             "python-dotenv", "scipy", "tqdm", "pillow", "scikit-learn", "sqlitedict", "voyager"]
PEER_NO_DEPS = ["colbert-ai==0.2.22", "fastkmeans==0.5.0"]
TORCH = "torch==2.13.0"
#: each PyLate release checked, with the sentence-transformers and transformers it pins (or the newest it allows)
PYLATE_RELEASES = {
    "1.2.0": ["sentence-transformers==4.0.2", "transformers==4.48.2", "tokenizers==0.21.4"],
    "1.3.0": ["sentence-transformers==4.0.2", "transformers==4.48.2", "tokenizers==0.21.4"],
    "1.3.4": ["sentence-transformers==5.1.1", "transformers==4.56.2"],
    "1.4.0": ["sentence-transformers==5.1.1", "transformers==4.56.2"],
    "1.5.1": ["sentence-transformers==5.3.0", "transformers==4.56.2"],
    "1.6.0": ["sentence-transformers==5.3.0", "transformers==4.56.2"],
}


def setup_venv(venv: Path, releases) -> Path:
    """The base environment's python, creating it and each release's folder first where needed (torch pinned
    first, so nothing replaces it; the libraries without their declared dependencies)."""
    python = venv / "base" / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q"]
    constraints = venv / "constraints.txt"
    if not python.exists():
        print(f"creating {venv / 'base'} (torch first, then colbert-ai)", flush=True)
        venv.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv / "base")], check=True)
        subprocess.run([*pip, TORCH], check=True)
        constraints.write_text(TORCH + "\n")
        subprocess.run([*pip, "-c", str(constraints), *PEER_PINS], check=True)
        subprocess.run([*pip, "--no-deps", "-c", str(constraints), *PEER_NO_DEPS], check=True)
    for release in releases:
        overlay = venv / f"overlay-{release}"
        if not overlay.exists():
            print(f"installing PyLate {release} into {overlay}", flush=True)
            subprocess.run([*pip, "--no-deps", "--target", str(overlay), f"pylate=={release}",
                            *PYLATE_RELEASES[release]], check=True)
    return python


def read_texts(passages: int, queries: int, data: Path = DATA):
    corpus, topics = data / "scifact" / "corpus.jsonl.gz", data / "scifact" / "queries-train.jsonl.gz"
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


def run_peer(python: Path, venv: Path, library: str, folder: Path, texts: Path, out: Path, threads: int,
             release: Optional[str] = None, save: Optional[Path] = None):
    """The library's side for ``folder`` (``release``: the PyLate release to put first on the path): its npz, or
    ``{"error": ...}``."""
    env = dict(os.environ, CHECK_THREADS=str(threads), OMP_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    if release is not None:
        env["PYTHONPATH"] = str(venv / f"overlay-{release}")
    command = [str(python), str(Path(__file__).with_name("check_formats_peer.py")), library, str(folder), str(texts),
               str(out)] + ([str(save)] if save is not None else [])
    run = subprocess.run(command, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        return {"error": run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit {run.returncode}"}
    return dict(np.load(out))


def row_of(ours, theirs, model_config, read_here=None) -> dict:
    """The comparison of one (export, library release) pair; ``read_here``: the library-written folder read by
    this package (with its side)."""
    if "error" in theirs:
        return {"error": theirs["error"]}
    row = {"library_read": json.loads(str(theirs["info"])), **compare(ours, theirs)}
    if read_here is not None:
        colbert, again = read_here
        row["library_written_folder_read_here"] = {
            "config_equal": colbert.config.replace(backbone=None) == model_config.replace(backbone=None),
            **{k: v for k, v in compare(again, theirs).items() if k != "scores_unpadded"}}
    return row


def summary_line(name: str, row: dict) -> str:
    """One line of the summary table (docs/formats.md)."""
    if "error" in row:
        return f"| {name} | fails to load: {row['error'][:120]} |"
    read = row["library_read"]
    s, alone = row["scores"], row["scores_unpadded"]
    q = row["query_vectors_max_abs_diff"]
    d = row["doc_vectors_max_abs_diff"]
    back = row.get("library_written_folder_read_here")
    back_text = (f"{'yes' if back['config_equal'] else 'NO'} / {back['doc_vectors_max_abs_diff']:.1e}"
                 if back and back.get("doc_vectors_max_abs_diff") is not None else "—")
    return (f"| {name} | {read['library']} | {'yes' if row['doc_tokens_equal'] else 'NO'} | "
            f"{'shape differs' if q is None else f'{q:.1e}'} | {'shape differs' if d is None else f'{d:.1e}'} | "
            f"{alone['max_abs_diff']:.1e} ({s['max_abs_diff']:.1e}) | {alone['top10_identical_queries']}/"
            f"{row['queries']} | {back_text} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", default="/tmp/peer-venvs", help="the libraries' environment (made if absent)")
    ap.add_argument("--pylate", default=",".join(PYLATE_RELEASES), help="the PyLate releases to check")
    ap.add_argument("--passages", type=int, default=300)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="runs/check_formats.json")
    ap.add_argument("--data", type=Path, default=DATA, help="the data folder holding scifact/")
    ap.add_argument("--checkpoint", default=None, help="the checkpoint exported (default: the package's)")
    ap.add_argument("--no-peer", action="store_true",
                    help="only this package's side (refusals, exports reloaded here): no peer environment")
    args = ap.parse_args(argv)

    texts = read_texts(args.passages, args.queries, args.data)
    if texts is None:
        print(f"{args.data / 'scifact'} is absent: nothing to check", file=sys.stderr)
        return 0
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch

    torch.set_num_threads(args.threads)
    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.model import formats

    releases = [r for r in args.pylate.split(",") if r]
    unknown = [r for r in releases if r not in PYLATE_RELEASES]
    if unknown:
        raise SystemExit(f"--pylate {unknown}: expected some of {list(PYLATE_RELEASES)}")
    venv = Path(args.venv)
    python = None if args.no_peer else setup_venv(venv, releases)
    queries, documents = texts
    base = pfc.ColBERT.from_pretrained(args.checkpoint, batch_size=32)
    results = {"passages": len(documents), "queries": len(queries), "checkpoint": base.fingerprint(),
               "threads": args.threads, "refusals": {}, "variants": {}, "conversion": {}}
    lines = []
    with tempfile.TemporaryDirectory(prefix="check-formats-") as tmp:
        tmp = Path(tmp)
        scoring = dict(score_query_masks=True, reduction="sum")
        refused = {"as trained -> colbert-ai": (base, "colbert-ai"), "as trained -> pylate": (base, "pylate"),
                   "similarity='dot' -> colbert-ai": (formats.with_settings(base, similarity="dot", **scoring),
                                                      "colbert-ai")}
        for name, (model, fmt) in refused.items():
            try:
                model.save_pretrained(tmp / "refused", format=fmt)
                results["refusals"][name] = None
            except ValueError as err:
                results["refusals"][name] = str(err)
        texts_path = tmp / "texts.json"
        texts_path.write_text(json.dumps({"queries": queries, "documents": documents}))
        pylate_written = None
        for i, (name, fmt, settings) in enumerate(variants(base)):
            model = formats.with_settings(base, **settings)
            folder = tmp / f"v{i}-{fmt}"
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model.save_pretrained(folder, format=fmt)
            reloaded = pfc.ColBERT.from_pretrained(folder, batch_size=32)
            ours = our_side(model, queries, documents)
            again = our_side(reloaded, queries, documents)
            entry = {"settings": {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in settings.items()
                                  if k != "skiplist"} | {"skiplist_tokens": len(settings.get("skiplist", ()))},
                     "export_warnings": [str(w.message) for w in caught],
                     "written": json.loads((folder / (formats.ST_CONFIG if fmt == "pylate"
                                                      else formats.COLBERT_AI_METADATA)).read_text()),
                     "reload_identical_here": (
                         all(np.array_equal(a, b) for a, b in zip(ours[0], again[0]))
                         and all(np.array_equal(a, b) for a, b in zip(ours[1], again[1]))
                         and reloaded.config.replace(backbone=None) == model.config.replace(backbone=None)),
                     "by_release": {}}
            for release in (releases if fmt == "pylate" else [None]) if python is not None else ():
                started = time.perf_counter()
                saved_there = tmp / f"v{i}-{release}-saved-by-the-library"
                theirs = run_peer(python, venv, fmt, folder, texts_path, tmp / f"v{i}-{release}.npz", args.threads,
                                  release, saved_there)
                read_here = None
                if "error" not in theirs:
                    written_there = pfc.ColBERT.from_pretrained(saved_there, batch_size=32)
                    read_here = (written_there, our_side(written_there, queries, documents))
                    if fmt == "pylate" and settings.get("score_query_masks") and release == releases[-1]:
                        pylate_written = saved_there
                row = row_of(ours, theirs, model.config, read_here)
                row["peer_seconds"] = round(time.perf_counter() - started, 1)
                entry["by_release"][release or "colbert-ai 0.2.22"] = row
                lines.append(summary_line(name, row | {"queries": len(queries), "passages": len(documents)}))
                print(lines[-1], flush=True)
            results["variants"][name] = entry
        if pylate_written is not None and python is not None:
            results["conversion"] = convert_pylate_written(pfc, pylate_written, tmp, python, venv, texts_path,
                                                           queries, documents, args.threads, lines)
    for name, message in results["refusals"].items():
        print(f"\n{name}: {'refused: ' + message if message else 'NOT refused'}")
    print("\n" + "\n".join(lines))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str))
    print(f"\nwritten to {out}")
    return 0


def convert_pylate_written(pfc, folder: Path, tmp: Path, python: Path, venv: Path, texts_path: Path, queries,
                           documents, threads: int, lines) -> dict:
    """A folder PyLate wrote (its tokenizer pads with [MASK]) converted to colbert-ai here: colbert-ai against this
    package on the export, and on the export as written before the padding token was fixed."""
    import shutil

    from transformers import AutoTokenizer

    model = pfc.ColBERT.from_pretrained(folder, batch_size=32)
    out = {"pylate_pad_token": model.tokenizer.hf.pad_token}
    fixed = tmp / "pylate-written-as-colbert-ai"
    model.save_pretrained(fixed, format="colbert-ai")
    as_before = tmp / "pylate-written-as-colbert-ai-padding-with-mask"
    shutil.copytree(fixed, as_before)
    AutoTokenizer.from_pretrained(folder).save_pretrained(as_before)  # PyLate's tokenizer, as exports kept it
    for name, export in (("PyLate-written folder -> colbert-ai (export pads with [PAD])", fixed),
                         ("the same, padding with [MASK] as exported before (read here as colbert-ai scores it)",
                          as_before)):
        read_here = pfc.ColBERT.from_pretrained(export, batch_size=32)
        ours = our_side(read_here, queries, documents)
        theirs = run_peer(python, venv, "colbert-ai", export, texts_path, tmp / f"{export.name}.npz", threads)
        row = row_of(ours, theirs, read_here.config)
        row["read_here"] = {"pad_token": read_here.tokenizer.hf.pad_token,
                            "score_query_masks": read_here.config.score_query_masks}
        if "error" not in theirs:  # against the model as PyLate's folder defines it
            original = our_side(model, queries, documents)[3]
            row["top10_identical_with_the_pylate_model"] = int(
                (np.argsort(-original, axis=1, kind="stable")[:, :10]
                 == np.argsort(-theirs["scores_unpadded"], axis=1, kind="stable")[:, :10]).all(axis=1).sum())
        out[name] = row
        lines.append(summary_line(name, row | {"queries": len(queries), "passages": len(documents)}))
        print(lines[-1], f"(top-10 identical with the PyLate model: {row.get('top10_identical_with_the_pylate_model')}"
              f"/{len(queries)})", flush=True)
    return out


if __name__ == "__main__":
    sys.exit(main())
