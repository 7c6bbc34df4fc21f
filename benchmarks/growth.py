"""How `pfc index` and `pfc search` grow with the corpus: the measured inputs of the projection in docs/results.md
("Big wikis: a projection").

    python benchmarks/growth.py --sizes 3000 10000 30000 --float32-at 30000 --one-thread-at 3000 \
        --out runs/growth/growth.json

Passages: the shared corpora together (SciFact abstracts, WikiQA sentences, the SQuAD v1.1 training paragraphs;
about 32,600), shuffled with a fixed seed so that every prefix has the same mix, the first N of them per size.
Each prefix is written to a JSONL file first and streamed into ``build_folder`` (what ``pfc index`` runs) in a
fresh process of its own, so the build's memory is its own: its peak RSS (``os.wait4``) and its RSS sampled every
half second, summarised as the highest RSS in each tenth of the build's wall time (a streamed build's curve is
flat after the model loads; one that holds the corpus climbs), and the same for its anonymous memory alone
(``RssAnon``: the file pages of memory-mapped index files, which the kernel reclaims at will, left out), also
split at the last chunk encoded: its peak while reading and encoding, and while writing the index. Per
build: passages, tokens, the manifest's ColBERT and total seconds, the seconds after encoding (from the last
chunk encoded to the folder complete: training the codec, writing the index), passages per second, milliseconds per
passage, the folder's bytes on disk, and the peak disk used under the folder's parent during the build beyond what
was there before it (``peak_disk_mb``, allocated blocks as ``du`` counts them, sampled every half second: the
kept encoded chunks and, before issue 41 item 5, the index's fp16 spill). ``--builds-only`` skips the searches.

Then, per folder, one process opens it as ``pfc search`` does (``Searcher``, reader on, warmed up) and times
``--queries`` SQuAD training questions (the corpus holds their paragraphs) one at a time, k = 10: the default
system with explanations and the reader's answer (what a fan waits for), and ColBERT alone without them (the
index's own search): p50 and p95 in ms, and the opening time.

``--precision`` is the builds' (``auto`` by default, as ``pfc index``); ``--float32-at N`` adds a float32 build of
size N (today's library default, item 3 of issue 41), ``--one-thread-at N`` one with 1 torch thread (the per-core
rate of the projection); ``--low-memory`` builds as ``pfc index --low-memory``. The builds run in the order
given, alternating; say the machine's load with the figures (each row records the 1-minute load average before and
after it). Skips (exit 0, a message) without the shared data.
"""
from __future__ import annotations

import argparse
import bz2
import contextlib
import functools
import gzip
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

from pyterrier_fandom_colbert.heap import bound_kernel_caches  # (no torch: read before torch loads)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as pfc sets it
bound_kernel_caches()  # as pfc does

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SEED = 41


@functools.lru_cache(maxsize=1)
def squad_train(data: Path) -> Dict[str, Any]:
    """The SQuAD v1.1 training set (read once: its paragraphs are passages, its questions the queries)."""
    with bz2.open(data / "squad-v1.1-train" / "train-v1.1-rebuilt.json.bz2", "rt", encoding="utf-8") as f:
        return json.load(f)


def corpora(data: Path) -> Iterator[Dict[str, Any]]:
    """Every passage of the shared corpora, as ``build_folder`` takes them (docnos prefixed by the corpus)."""
    for name in ("scifact", "wikiqa"):
        with gzip.open(data / name / "corpus.jsonl.gz", "rt", encoding="utf-8") as lines:
            for line in lines:
                d = json.loads(line)
                yield {"docno": f"{name}-{d['_id']}", "text": d["text"], "title": d.get("title") or "",
                       "url": "", "section": "", "page_id": 0}
    squad = squad_train(data)
    for a, article in enumerate(squad["data"]):
        for p, paragraph in enumerate(article["paragraphs"]):
            yield {"docno": f"squad-{a}-{p}", "text": paragraph["context"],
                   "title": article["title"].replace("_", " "), "url": "", "section": "", "page_id": a}


def questions(data: Path, n: int) -> List[str]:
    """``n`` SQuAD training questions (seeded sample)."""
    every = [q["question"] for a in squad_train(data)["data"] for p in a["paragraphs"] for q in p["qas"]]
    return random.Random(SEED).sample(every, n)


def write_prefixes(data: Path, sizes: List[int], workdir: Path) -> Dict[int, Path]:
    """The shuffled corpus's first N passages per size, as JSONL files (written once, reused)."""
    paths = {n: workdir / f"passages-{n}.jsonl" for n in sizes}
    if all(p.exists() for p in paths.values()):
        return paths
    records = list(corpora(data))
    random.Random(SEED).shuffle(records)
    for n, path in paths.items():
        if n > len(records):
            raise SystemExit(f"growth: --sizes {n} is more than the {len(records):,} passages of the corpora")
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as out:
            for r in records[:n]:
                out.write(json.dumps(r) + "\n")
        tmp.replace(path)
    return paths


def stream(path: Path) -> Iterator[Dict[str, Any]]:
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            yield json.loads(line)


# -- the child processes --------------------------------------------------------------------------------------------


def build_worker(args) -> int:
    if args.low_memory:  # as pfc index --low-memory, before torch allocates
        from pyterrier_fandom_colbert.heap import give_back_freed_memory

        give_back_freed_memory()
    import torch

    from pyterrier_fandom_colbert.app.folder import build_folder

    if args.threads:
        torch.set_num_threads(args.threads)
    from pyterrier_fandom_colbert.app.folder import build as building

    encode_into, encoded = building.encode_into, []

    def timed(*a, **k):  # (when the last passage is encoded: what follows is training and writing the index)
        encode_into(*a, **k)
        encoded.append(time.perf_counter())

    building.encode_into = timed
    started = time.perf_counter()
    report = build_folder(stream(args.passages), args.folder, overwrite=True, checkpoint=args.checkpoint,
                          cpu_precision=args.precision)
    ended = time.perf_counter()
    m = report.manifest
    print(json.dumps({"passages": m.passages, "tokens": m.tokens, "precision": m.precision,
                      "colbert_s": m.seconds["colbert"], "total_s": m.seconds["total"],
                      "after_encoding_s": round(ended - encoded[-1], 3) if encoded else None,
                      "wall_s": round(ended - started, 3), "threads": torch.get_num_threads()}))
    return 0


def search_worker(args) -> int:
    import torch

    from pyterrier_fandom_colbert.app.search import Searcher

    if args.threads:
        torch.set_num_threads(args.threads)
    queries = json.loads(Path(args.queries_file).read_text(encoding="utf-8"))
    started = time.perf_counter()
    reader = args.reader if args.reader else True
    # warmed up, reader on: what `pfc search` and `pfc serve` open
    searcher = Searcher(args.folder, reader=reader)
    opened = time.perf_counter() - started
    out: Dict[str, Any] = {"open_s": round(opened, 3)}
    for label, system, explain in (("default", None, True), ("colbert", "colbert", False)):
        for q in queries[:3]:  # warm-up, not timed
            searcher.search(q, system=system, k=10, explain=explain)
        times = []
        for q in queries:
            t = time.perf_counter()
            searcher.search(q, system=system, k=10, explain=explain)
            times.append(1000 * (time.perf_counter() - t))
        times.sort()
        out[label] = {"system": system or searcher.default_system, "p50_ms": round(statistics.median(times), 2),
                      "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2), "queries": len(times)}
    print(json.dumps(out))
    return 0


# -- the driver -----------------------------------------------------------------------------------------------------


def disk_used(folder: Path) -> int:
    """Bytes allocated to the files under ``folder`` (as ``du`` counts them; files vanishing meanwhile skipped)."""
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def run_child(command: List[str], disk: Optional[Path] = None) -> Dict[str, Any]:
    """Run one child: its last stdout line as JSON, its peak RSS, its RSS every half second; ``disk``: also the
    peak bytes used under that folder beyond those used before the child started, sampled as often."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    samples: List[tuple] = []
    disk_before = disk_used(disk) if disk is not None else 0
    disk_peak = [disk_before]
    with subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True) as child:
        done = threading.Event()

        def sample() -> None:
            status = Path(f"/proc/{child.pid}/status")
            t0 = time.perf_counter()
            while not done.wait(0.5):
                try:
                    fields = dict(x.split(":", 1) for x in status.read_text().splitlines() if ":" in x)
                    rss, anon = (int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "RssAnon"))
                except (OSError, KeyError, ValueError):
                    break
                samples.append((time.perf_counter() - t0, rss, anon))
                if disk is not None:
                    disk_peak.append(disk_used(disk))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        stdout = child.stdout.read() if child.stdout else ""
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        done.set()
        sampler.join()
    if child.returncode != 0:
        raise SystemExit(f"growth: a child failed (exit status {child.returncode}): {' '.join(command)}")
    row = json.loads(stdout.strip().splitlines()[-1])
    row["peak_rss_mb"] = round(usage.ru_maxrss / 1024, 1)
    if samples:
        end = samples[-1][0] or 1.0
        for key, column in (("rss_by_tenth_mb", 1), ("anon_by_tenth_mb", 2)):
            row[key] = [round(max((s[column] for s in samples if i / 10 * end <= s[0] <= (i + 1) / 10 * end),
                                  default=0.0), 1) for i in range(10)]
        row["peak_anon_mb"] = round(max(s[2] for s in samples), 1)
        if row.get("after_encoding_s") is not None:  # the two phases: encoding (and reading), then the index
            cut = end - row["after_encoding_s"]
            for key, phase in (("peak_anon_before_index_mb", lambda t: t < cut),
                               ("peak_anon_index_mb", lambda t: t >= cut)):
                row[key] = round(max((s[2] for s in samples if phase(s[0])), default=0.0), 1)
    if disk is not None:
        row["peak_disk_mb"] = round((max(disk_peak) - disk_before) / 1e6, 1)
    return row


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[3000, 10000, 30000], help="passages per build")
    ap.add_argument("--precision", default="auto", choices=("auto", "float32", "bfloat16"),
                    help="the builds' CPU precision (default auto, as pfc index)")
    ap.add_argument("--float32-at", type=int, default=None, help="also a float32 build of this size")
    ap.add_argument("--one-thread-at", type=int, default=None, help="also a 1-thread build of this size")
    ap.add_argument("--threads", type=int, default=None, help="torch threads of the other runs (default torch's)")
    ap.add_argument("--queries", type=int, default=100, help="questions timed per folder (default 100)")
    ap.add_argument("--checkpoint", default=None, help="ColBERT checkpoint (default: the package's)")
    ap.add_argument("--reader", default=None, help="reader folder (default: the package's)")
    ap.add_argument("--data-root", type=Path, default=DATA, help="the shared data (default ../shared/data)")
    ap.add_argument("--workdir", type=Path, default=Path("runs/growth/work"), help="prefixes and folders")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON summary here")
    ap.add_argument("--search-only", action="store_true",
                    help="time the searches of the folders an earlier run built (same arguments), build nothing")
    ap.add_argument("--builds-only", action="store_true", help="build the folders, time no searches")
    ap.add_argument("--low-memory", action="store_true", help="builds as pfc index --low-memory")
    ap.add_argument("--worker", choices=("build", "search"), help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--passages", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--queries-file", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker == "build":
        return build_worker(args)
    if args.worker == "search":
        return search_worker(args)
    needed = [args.data_root / "scifact", args.data_root / "wikiqa", args.data_root / "squad-v1.1-train"]
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        print(f"growth: skipped, the shared data is absent ({', '.join(missing)})")
        return 0
    plan = [(n, args.precision, args.threads) for n in args.sizes]
    if args.float32_at:
        plan.append((args.float32_at, "float32", args.threads))
    if args.one_thread_at:
        plan.append((args.one_thread_at, args.precision, 1))
    args.workdir.mkdir(parents=True, exist_ok=True)
    prefixes = write_prefixes(args.data_root, sorted({n for n, _, _ in plan}), args.workdir)
    queries_file = args.workdir / "queries.json"
    queries_file.write_text(json.dumps(questions(args.data_root, args.queries)), encoding="utf-8")
    from pyterrier_fandom_colbert.app.folder import folder_bytes

    me = [sys.executable, str(Path(__file__).resolve())]
    rows = []
    for n, precision, threads in plan:
        folder = args.workdir / f"folder-{n}-{precision}-{threads or 'default'}"
        with_threads = ["--threads", str(threads)] if threads else []
        load_before = os.getloadavg()[0]
        if args.search_only:
            if not folder.exists():
                raise SystemExit(f"growth: --search-only, but {folder} was not built; run without it first")
            search = run_child([*me, "--worker", "search", "--folder", str(folder), "--queries-file",
                                str(queries_file), *with_threads])
            rows.append({"size": n, "requested_precision": precision, "threads": threads,
                         "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
                         "search": {k: v for k, v in search.items() if not k.endswith("by_tenth_mb")}})
            print(f"{n:>7,} passages {precision}: search p50 {search['default']['p50_ms']:.1f} ms "
                  f"({search['default']['system']}), {search['colbert']['p50_ms']:.1f} ms (colbert); open "
                  f"{search['open_s']:.2f} s; load {rows[-1]['load_before']}-{rows[-1]['load_after']}", flush=True)
            continue
        checkpoint = ["--checkpoint", args.checkpoint] if args.checkpoint else []
        build = run_child([*me, "--worker", "build", "--folder", str(folder), "--passages", str(prefixes[n]),
                           "--precision", precision, *with_threads, *checkpoint,
                           *(["--low-memory"] if args.low_memory else [])], disk=folder.parent)
        build.update(size=n, requested_precision=precision, folder_bytes=folder_bytes(folder),
                     passages_per_s=round(build["passages"] / build["total_s"], 3),
                     ms_per_passage=round(1000 * build["total_s"] / build["passages"], 2),
                     load_before=round(load_before, 2), load_after=round(os.getloadavg()[0], 2))
        if args.builds_only:
            rows.append(build)
            print(f"{n:>7,} passages {build['precision']:8}: {build['total_s']:.1f} s, {build['after_encoding_s']} s "
                  f"after encoding; peak disk {build.get('peak_disk_mb')} MB beyond the start, folder "
                  f"{build['folder_bytes'] / 1e6:.1f} MB; load {build['load_before']}-{build['load_after']}",
                  flush=True)
            continue
        reader = ["--reader", args.reader] if args.reader else []
        search = run_child([*me, "--worker", "search", "--folder", str(folder), "--queries-file", str(queries_file),
                            *with_threads, *checkpoint, *reader])
        for key in ("rss_by_tenth_mb", "anon_by_tenth_mb"):
            search.pop(key, None)
        build["search"] = search
        rows.append(build)
        print(f"{n:>7,} passages {build['precision']:8} {build['threads']} threads: "
              f"{build['passages_per_s']:.1f} passages/s ({build['ms_per_passage']:.1f} ms each), peak RSS "
              f"{build['peak_rss_mb']:.0f} MB (anonymous {build.get('peak_anon_mb', 0):.0f} MB), folder "
              f"{build['folder_bytes'] / 1e6:.1f} MB; search p50 "
              f"{search['default']['p50_ms']:.1f} ms ({search['default']['system']}), "
              f"{search['colbert']['p50_ms']:.1f} ms (colbert); load {build['load_before']}-{build['load_after']}",
              flush=True)
    summary = {"machine": os.uname().nodename, "cpus": os.cpu_count(), "builds": rows}
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
