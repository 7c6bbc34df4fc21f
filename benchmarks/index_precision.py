"""`pfc index` encoding speed in ``--precision float32`` against ``auto`` (the default: bfloat16 where the CPU has
native bf16), interleaved, with each build's peak RSS.

    python benchmarks/index_precision.py --max-docs 2000 --rounds 2 --threads 2
    python benchmarks/index_precision.py --source ../shared/data/wikis/pokeclickerwiki_pages_current.xml.bz2 \
        --max-docs 4000 --rounds 2
    python benchmarks/index_precision.py --source runs/growth/work/passages-30000.jsonl --max-docs 30000 \
        --rounds 1 --float32-from /tmp/wt-old      # growth.py's corpus mix; float32 by an older package

Each build is ``build_folder`` (what ``pfc index`` runs) over the first ``--max-docs`` passages of ``--source`` (a
BEIR folder, ``corpus.jsonl.gz``, by default the shared SciFact corpus; or a wiki dump, split as ``pfc index``
splits it) in a fresh process of its own, so that its peak RSS is its own (``os.wait4``) and no model or cache
is shared. The variants take turns, and their order is reversed every other round, so that a drifting load
favours none. Per build: passages, ColBERT seconds (encoding and writing the index) and total seconds as the
folder's manifest records them, passages per second of each, the precision the manifest records, and the peak
RSS. Prints one line per build and a JSON summary (``--out`` also writes it): the median rate of each variant and
``auto``'s against ``float32``. Say the machine's load with the figures (the load average is recorded).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as pfc sets it

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
VARIANTS = ("float32", "auto")


def records(source: Path, max_docs: int) -> List[Dict[str, Any]]:
    """The first ``max_docs`` passages of a BEIR folder, a JSONL file of passage records (``benchmarks/growth.py``'s
    ``passages-N.jsonl``) or a wiki dump, as ``build_folder`` takes them."""
    if source.suffix == ".jsonl":
        with open(source, encoding="utf-8") as f:
            return [json.loads(line) for _, line in zip(range(max_docs), f)]
    if source.is_dir():
        out = []
        with gzip.open(source / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i >= max_docs:
                    break
                d = json.loads(line)
                out.append({"docno": str(d["_id"]), "text": d["text"], "title": d.get("title", ""), "url": "",
                            "section": "", "page_id": i})
        return out
    from pyterrier_fandom_colbert.data.passages import dump_passages

    out = []
    for p in dump_passages(source):
        if len(out) >= max_docs:
            break
        out.append({"docno": p.doc_id, "text": p.text, "title": p.title, "url": p.url, "section": p.section,
                    "page_id": p.page_id})
    return out


def worker(args) -> int:
    """One build in this process; its figures as one JSON line on stdout."""
    import torch

    from pyterrier_fandom_colbert.app.folder import build_folder

    if args.threads:
        torch.set_num_threads(args.threads)
    docs = records(args.source, args.max_docs)
    started = time.perf_counter()
    report = build_folder(docs, args.worker_folder, checkpoint=args.checkpoint, overwrite=True,
                          batch_size=args.batch_size, cpu_precision=args.worker)
    wall = time.perf_counter() - started
    m = report.manifest
    print(json.dumps({"passages": m.passages, "tokens": m.tokens, "precision": m.precision,
                      "colbert_s": m.seconds["colbert"], "total_s": m.seconds["total"], "wall_s": round(wall, 3)}))
    return 0


def run_build(args, variant: str, folder: Path) -> Dict[str, Any]:
    """One build in a fresh process: its figures and its peak RSS."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", variant, "--worker-folder", str(folder),
               "--source", str(args.source), "--max-docs", str(args.max_docs), "--batch-size", str(args.batch_size)]
    command += (["--checkpoint", args.checkpoint] if args.checkpoint else []) + \
        (["--threads", str(args.threads)] if args.threads else [])
    package = args.float32_from if variant == "float32" and args.float32_from else ROOT
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(package), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen(command, stdout=out, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if child.returncode != 0:
        raise SystemExit(f"the {variant} build failed (exit status {child.returncode}): {command}")
    row = json.loads(text.strip().splitlines()[-1])
    row.update(variant=variant, peak_rss_mb=round(usage.ru_maxrss / 1024, 1),
               passages_per_s=round(row["passages"] / row["total_s"], 3),
               colbert_passages_per_s=round(row["passages"] / row["colbert_s"], 3))
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=SCIFACT,
                    help="a BEIR folder (corpus.jsonl.gz), a .jsonl of passage records or a wiki dump "
                         "(default: ../shared/data/scifact)")
    ap.add_argument("--max-docs", type=int, default=2000, help="passages indexed per build (default 2000)")
    ap.add_argument("--rounds", type=int, default=2, help="builds per variant, interleaved (default 2)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--batch-size", type=int, default=64, help="passages per forward pass (pfc index's default 64)")
    ap.add_argument("--checkpoint", default=None, help="ColBERT checkpoint (default: the package's)")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON summary here")
    ap.add_argument("--float32-from", type=Path, default=None, metavar="DIR",
                    help="build the float32 variant with the package in DIR (e.g. a git worktree of an older "
                         "commit): today's code in auto against an older default")
    ap.add_argument("--first-round", type=int, default=0, metavar="N",
                    help="order the builds as from round N on (1: auto first), to continue an earlier run's rounds")
    ap.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--worker-folder", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not args.source.exists():
        print(f"index_precision: {args.source} does not exist; give --source (a BEIR folder or a wiki dump)")
        return 2
    if args.worker:
        return worker(args)
    if args.float32_from and not (args.float32_from / "pyterrier_fandom_colbert").is_dir():
        print(f"index_precision: --float32-from {args.float32_from} holds no pyterrier_fandom_colbert package")
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="index_precision_") as tmp:
        for r in range(args.rounds):
            for variant in (VARIANTS if (r + args.first_round) % 2 == 0 else VARIANTS[::-1]):
                row = run_build(args, variant, Path(tmp) / f"{variant}-{r}")
                row.update(round=r + 1, load_average=round(os.getloadavg()[0], 2))
                rows.append(row)
                print(f"round {r + 1} {variant:8} ({row['precision']}): {row['passages']:,} passages, "
                      f"{row['passages_per_s']:.2f} passages/s overall, {row['colbert_passages_per_s']:.2f} in "
                      f"the ColBERT part; peak RSS {row['peak_rss_mb']:.0f} MB; load {row['load_average']}",
                      flush=True)
    medians = {v: statistics.median(r["passages_per_s"] for r in rows if r["variant"] == v) for v in VARIANTS}
    summary = {"source": str(args.source), "max_docs": args.max_docs, "threads": args.threads,
               "float32_from": str(args.float32_from) if args.float32_from else None,
               "median_passages_per_s": medians,
               "auto_over_float32": round(medians["auto"] / medians["float32"], 3), "builds": rows}
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
