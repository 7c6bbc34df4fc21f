"""Query latency under OpenMP's wait policies, on a quiet machine and beside busy processes: the figures of
docs/results.md, "OpenMP's wait policy and query latency".

    python benchmarks/wait_policy.py                                   # the plaid_compare.py residual index
    python benchmarks/wait_policy.py --busy 0 2 --threads 2 1 --queries 300

``pfc`` sets ``OMP_WAIT_POLICY=PASSIVE`` (torch's idle OpenMP threads sleep); colbert-ai's server and
``plaid_compare.py`` leave OpenMP's default (they spin a while). The policy is read when torch loads, so each
setting runs in a fresh process of its own: it opens the index (``--index``; default the residual index that
``plaid_compare.py`` builds), loads the encoder (``--checkpoint``, default the package's; bf16 questions as ``pfc``
asks them on a CPU with bf16), warms up on ``--warmup`` claims and times ``index.searcher(colbert,
num_results=10).search`` on each of ``--queries`` SciFact train claims (text in, top 10 out). Per setting
(``--settings``: ``NAME=VALUE`` environment assignments joined by ``,``, or ``default`` for none), per torch thread
count (``--threads``) and per number of busy processes (``--busy``: each spins one core for the whole run, started
before the setting's process and stopped after it): p50, p95 and mean in ms, and the 1-minute load average before.
Without ``--index``'s folder, ``--max-docs N`` builds a residual index of the first N SciFact abstracts into
``--workdir`` first (the smoke test's way). Skips (exit 0, a message) without the SciFact folder.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

from bench_io import require_work, write_report
from plaid_compare import load_scifact, machine

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SETTINGS = ["OMP_WAIT_POLICY=PASSIVE", "GOMP_SPINCOUNT=1000", "GOMP_SPINCOUNT=10000", "GOMP_SPINCOUNT=100000",
            "default"]
SPIN = "while True: pass"


def claims(folder: Path, n: int) -> List[str]:
    path = next(folder.glob("queries-train.jsonl*"))
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")) as f:
        return [json.loads(line)["text"] for line in f][:n]


def build_index(folder: Path, out: Path, checkpoint: str | None, max_docs: int) -> None:
    """A residual index of the first ``max_docs`` abstracts, their text as ``plaid_compare.py`` indexes it."""
    import pandas as pd

    import pyterrier_fandom_colbert as pfc

    docs = load_scifact(folder)[0][:max_docs]
    colbert = pfc.ColBERT.from_pretrained(checkpoint, device="cpu")
    pfc.ColBERTIndex(out).indexer(colbert, compression="residual2", overwrite=True).index(pd.DataFrame(docs))


def environment(setting: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if setting != "default":
        for assignment in setting.split(","):
            name, _, value = assignment.partition("=")
            env[name.strip()] = value.strip()
    return env  # (the worker sets torch's threads itself: OMP_NUM_THREADS is left as it is)


def measure(args, setting: str, threads: int, busy: int, queries: Path) -> Dict[str, Any]:
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(busy)]
    try:
        time.sleep(0.5 if busy else 0)
        load = os.getloadavg()[0]
        cmd = [sys.executable, __file__, "--worker", "--index", str(args.index), "--queries-file", str(queries),
               "--warmup", str(args.warmup), "--worker-threads", str(threads)]
        if args.checkpoint:
            cmd += ["--checkpoint", args.checkpoint]
        done = subprocess.run(cmd, env=environment(setting), capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"wait_policy: the run of {setting!r} ({threads} threads, {busy} busy) failed:\n"
                             + done.stderr[-2000:])
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    times = json.loads(done.stdout.strip().splitlines()[-1])["ms"]
    return {"setting": setting, "threads": threads, "busy": busy, "queries": len(times), "load_before": load,
            "p50_ms": round(statistics.median(times), 2),
            "p95_ms": round(sorted(times)[max(0, int(0.95 * len(times)) - 1)], 2),
            "mean_ms": round(statistics.fmean(times), 2)}


def worker(args) -> int:
    import torch

    import pyterrier_fandom_colbert as pfc

    torch.set_num_threads(args.worker_threads)
    texts = json.loads(Path(args.queries_file).read_text())
    colbert = pfc.ColBERT.from_pretrained(args.checkpoint, device="cpu", cpu_precision="auto")
    searcher = pfc.ColBERTIndex(args.index).searcher(colbert, num_results=10)
    for text in texts[:args.warmup]:
        searcher.search(text)
    times = []
    for text in texts[args.warmup:]:
        started = time.perf_counter()
        searcher.search(text)
        times.append(1e3 * (time.perf_counter() - started))
    print(json.dumps({"ms": times}))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA / "scifact")
    ap.add_argument("--index", type=Path, default=ROOT / "runs" / "plaid_compare" / "ours-residual2.colbert")
    ap.add_argument("--checkpoint", default=None, help="the encoder (default: the package's checkpoint)")
    ap.add_argument("--max-docs", type=int, default=None, help="build --index from this many abstracts if absent")
    ap.add_argument("--workdir", type=Path, default=ROOT / "runs" / "wait_policy")
    ap.add_argument("--queries", type=int, default=300, help="claims timed per setting")
    ap.add_argument("--warmup", type=int, default=20, help="untimed claims first")
    ap.add_argument("--settings", nargs="+", default=SETTINGS, help="NAME=VALUE[,NAME=VALUE], or default")
    ap.add_argument("--threads", type=int, nargs="+", default=[2], help="torch threads per run")
    ap.add_argument("--busy", type=int, nargs="+", default=[0, 2], help="busy processes beside each run")
    ap.add_argument("--out", type=Path, default=None, help="the JSON report (default: WORKDIR/result.json)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--queries-file", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--worker-threads", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    if not args.data.exists():
        print(f"wait_policy: skipped: no SciFact folder at {args.data}")
        return 0
    if not (args.index / "pt_meta.json").exists():
        if args.max_docs is None:
            raise SystemExit(f"wait_policy: no index at {args.index}; build it with benchmarks/plaid_compare.py "
                             "--build-only, or give --max-docs N to build one here")
        args.index = args.workdir / f"scifact-{args.max_docs}.colbert"
        build_index(args.data, args.index, args.checkpoint, args.max_docs)
    texts = claims(args.data, args.warmup + args.queries)
    args.workdir.mkdir(parents=True, exist_ok=True)
    queries = args.workdir / "claims.json"
    queries.write_text(json.dumps(texts))
    rows = [measure(args, setting, threads, busy, queries)
            for busy in args.busy for threads in args.threads for setting in args.settings]
    require_work({f"claims timed ({row['setting']}, {row['threads']} threads, {row['busy']} busy)":
                  (row["queries"], len(texts) - args.warmup) for row in rows})
    for row in rows:
        print(f"{row['threads']} threads, {row['busy']} busy, {row['setting']}: p50 {row['p50_ms']} ms, "
              f"p95 {row['p95_ms']}, mean {row['mean_ms']}", file=sys.stderr)
    return write_report(args.out or args.workdir / "result.json",
                        {"machine": machine(), "index": str(args.index), "rows": rows})


if __name__ == "__main__":
    sys.exit(main())
