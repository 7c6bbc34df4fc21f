"""Peak anonymous memory of a build's corpus-wide steps, on made-up data, each size in a fresh process.

    python benchmarks/build_memory.py tfidf --sizes 100000 400000       # a TF-IDF index of N passages
    python benchmarks/build_memory.py codec --sizes 1921434 5864695     # the codec of T token vectors
    python benchmarks/build_memory.py codec --sizes 1921434 --baseline /tmp/wt-base   # and older code

* ``tfidf``: ``TfidfIndex.build`` with the text stored (as ``pfc index`` builds it) over N made-up passages of 90
  words drawn from a Zipf law over 300,000 terms, docnos shaped like a wiki's (``Page_title_17#passage-3``).
* ``codec``: T clustered unit vectors in fp16 in a memory-mapped file (as a build's kept chunks are), then the
  codec ``pfc index`` trains on them (``TrainedCodec.train`` of ``residual2`` with 1% exact outliers, its sample in
  a scratch folder where the code has one): the centroid count and sample follow T as in a build.

Each worker samples its anonymous RSS (``RssAnon``: memory-mapped file pages, which the kernel reclaims, left out)
every 10 ms and prints the peak above its idle self, with the seconds taken. ``--baseline DIR`` runs each size in
a checkout of other code too (``DIR`` first on ``PYTHONPATH``), alternating, this code first.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_io import require_work, write_report  # noqa: E402  (benchmarks/bench_io.py)


def anon_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Peak:
    """The highest anonymous RSS while the block runs, sampled every 10 ms."""

    def __enter__(self) -> "Peak":
        self.idle, self.peak, self._run = anon_mb(), 0.0, True
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while self._run:
            self.peak = max(self.peak, anon_mb())
            time.sleep(0.01)

    def __exit__(self, *exc: Any) -> None:
        self._run = False
        self._thread.join()
        self.peak = max(self.peak, anon_mb())


def tfidf_worker(n: int, work: Path) -> Dict[str, Any]:
    import numpy as np

    from pyterrier_fandom_colbert.lexical.tfidf import TfidfIndex

    words = np.array([f"term{i}" for i in range(300_000)])
    rng = np.random.default_rng(0)

    def docs():
        for i in range(n):
            ids = np.minimum(rng.zipf(1.15, 90), len(words)) - 1
            yield {"docno": f"Page_title_{i // 7}#passage-{i % 7}", "text": " ".join(words[ids])}

    started = time.perf_counter()
    with Peak() as peak:
        index = TfidfIndex.build(work / "tfidf", docs(), store_text=True)
    require_work({"passages indexed": (index.meta.num_docs, n)})
    return {"step": "tfidf", "size": n, "idle_mb": round(peak.idle), "peak_above_idle_mb": round(peak.peak - peak.idle),
            "seconds": round(time.perf_counter() - started, 1), "postings": index.meta.num_postings,
            "terms": index.meta.num_terms}


def codec_worker(tokens: int, work: Path) -> Dict[str, Any]:
    import inspect

    import numpy as np
    import torch

    from pyterrier_fandom_colbert.index.residual.compress import DEFAULT_EXACT_SHARE, CompressionSpec, TrainedCodec

    torch.set_num_threads(2)
    dim = 128
    vectors = np.memmap(work / "vectors.f16", dtype=np.float16, mode="w+", shape=(tokens, dim))
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(512, dim)).astype(np.float32)
    for start in range(0, tokens, 1 << 18):
        end = min(tokens, start + (1 << 18))
        x = centres[rng.integers(0, 512, end - start)] + 0.5 * rng.normal(size=(end - start, dim)).astype(np.float32)
        vectors[start:end] = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float16)
    vectors.flush()
    spec = CompressionSpec("residual2", exact_share=DEFAULT_EXACT_SHARE)
    scratch = {"scratch": work} if "scratch" in inspect.signature(TrainedCodec.train).parameters else {}
    started = time.perf_counter()
    with Peak() as peak:
        trained = TrainedCodec.train([vectors], tokens, spec, **scratch)
    centroids, sample = spec.resolve(tokens)
    require_work({"sample rows": (trained.sample, sample), "centroids": (trained.codec.num_centroids, centroids)})
    return {"step": "codec", "size": tokens, "centroids": centroids, "sample": sample, "idle_mb": round(peak.idle),
            "peak_above_idle_mb": round(peak.peak - peak.idle), "seconds": round(time.perf_counter() - started, 1),
            "scratch": bool(scratch), "codec_centroids_sum": float(trained.codec.centroids.sum())}


def run(step: str, size: int, code: Path) -> Dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, __file__, "--worker", step, "--sizes", str(size)], env=env, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    row = json.loads(out.strip().splitlines()[-1])
    row["code"] = str(code)
    return row


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=["tfidf", "codec"])
    ap.add_argument("--sizes", type=int, nargs="+", required=True, help="passages (tfidf) or token vectors (codec)")
    ap.add_argument("--baseline", type=Path, help="a checkout of other code, measured alternately")
    ap.add_argument("--out", type=Path, help="write the rows here as JSON")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        work = Path(tempfile.mkdtemp(prefix="build-memory-"))
        try:
            row = (tfidf_worker if args.step == "tfidf" else codec_worker)(args.sizes[0], work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(json.dumps(row))
        return 0
    rows = []
    for size in args.sizes:
        for code in [ROOT] + ([args.baseline] if args.baseline else []):
            row = run(args.step, size, code)
            rows.append(row)
            print(f"{args.step} {size:>10,} {Path(row['code']).name:>10}: +{row['peak_above_idle_mb']:,} MB over "
                  f"{row['idle_mb']} MB idle, {row['seconds']} s", flush=True)
    return write_report(args.out, {"step": args.step, "rows": rows}) if args.out else 0


if __name__ == "__main__":
    sys.exit(main())
