"""``pfc`` end to end: index a wiki dump, serve it, and time the JSON API as the page uses it.

    python benchmarks/app_bench.py --dump ../shared/data/wikis/pokeclickerwiki_pages_current.xml.bz2 --threads 2

1. ``pfc index DUMP FOLDER`` runs as a child process: wall time, peak resident memory (the child's max RSS),
   pages/s of ingestion (dump → passages → TF-IDF, the first pass) and of the whole build, and the manifest's
   counts.
2. ``pfc serve FOLDER`` runs as a child process on a free port of 127.0.0.1. Questions are made from the folder's
   own page titles ("what is <title>?", "where can I find <title>?"), so the script works on any wiki and no wiki
   text is stored here. ``/api/search`` (the hybrid with highlights, k = 10, as the page asks) is timed from the
   client: one client in sequence, then ``--clients`` clients at once; p50/p95 and requests per second.

``--folder`` keeps the built folder there, or reuses it when it exists (skipping step 1). Prints one JSON
object (also written to ``--out``).

``--cold N`` times start-up instead (no server): each ``pfc search`` command below runs N times as a fresh
process, with wall time and the process's CPU time (user + system: on a loaded machine the wall time mostly
measures the queue for the cores, the CPU time what the command itself costs), the medians reported. Bad input
(``-k 0``, a missing folder, an existing folder without ``--overwrite``) is timed the same way. ``--baseline DIR``
times another copy of the package (a folder holding ``pyterrier_fandom_colbert/``, e.g. an older commit's
``git archive``) in the same run, command by command in turn with this one, so both see the same load::

    git archive 62bd9d9 pyterrier_fandom_colbert | tar -x -C /tmp/before
    cp -r pyterrier_fandom_colbert/model/checkpoints /tmp/before/pyterrier_fandom_colbert/model/
    python benchmarks/app_bench.py --folder F --cold 5 --threads 1 --baseline /tmp/before
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DUMP = ROOT.parent / "shared" / "data" / "wikis" / "pokeclickerwiki_pages_current.xml.bz2"


def pfc(*args: str) -> list:
    return [sys.executable, "-m", "pyterrier_fandom_colbert.app", *args]


def environment(root: Path = ROOT) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    return env


def machine() -> dict:
    model = ""
    with contextlib.suppress(OSError, StopIteration), open("/proc/cpuinfo") as cpuinfo:
        model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    return {"cpu": model or platform.processor(), "cores": os.cpu_count(), "python": platform.python_version(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}


def index(dump: Path, folder: Path, threads: int, checkpoint: "str | None" = None) -> dict:
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    model = ["--checkpoint", checkpoint] if checkpoint else []
    subprocess.run(pfc("index", str(dump), str(folder), "--threads", str(threads), "--quiet", "--overwrite", *model),
                   check=True, env=environment())
    wall = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    manifest = json.loads((folder / "manifest.json").read_text())
    seconds = manifest["seconds"]
    return {"wall_s": round(wall, 1), "peak_rss_mib": round(peak_kib / 1024, 1),
            "peak_rss_note": "max RSS of any child so far" if before else "max RSS of the pfc index process",
            "pages": manifest["pages"], "articles": manifest["articles"], "passages": manifest["passages"],
            "tokens": manifest["tokens"], "folder_mib": round(manifest["bytes"] / 2 ** 20, 1),
            "seconds": seconds, "ingest_pages_per_s": round(manifest["pages"] / seconds["read_tfidf"], 1),
            "build_pages_per_s": round(manifest["pages"] / wall, 1),
            "passages_per_s_colbert": round(manifest["passages"] / seconds["colbert"], 1)}


def questions(folder: Path, n: int, seed: int) -> list:
    with open(folder / "passages.jsonl", encoding="utf-8") as lines:
        titles = sorted({json.loads(line)["title"] for line in lines})
    rng = random.Random(seed)
    picked = rng.sample(titles, min(n, len(titles)))
    forms = ["what is {}?", "where can I find {}?", "how does {} work?"]
    return [forms[i % len(forms)].format(t) for i, t in enumerate(picked)]


def percentile(values: list, q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def summary(latencies: list, server_ms: list, seconds: float) -> dict:
    return {"requests": len(latencies), "p50_ms": round(percentile(latencies, 0.5), 1),
            "p95_ms": round(percentile(latencies, 0.95), 1), "max_ms": round(max(latencies), 1),
            "server_p50_ms": round(percentile(server_ms, 0.5), 1), "requests_per_s": round(len(latencies) / seconds, 2)}


def serve_and_time(folder: Path, threads: int, queries: list, clients: int, system: str, k: int) -> dict:
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.perf_counter()
    server = subprocess.Popen(pfc("serve", str(folder), "--port", str(port), "--threads", str(threads), "--quiet"),
                              env=environment(), stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=120) as client:
            while True:
                if server.poll() is not None:
                    raise RuntimeError(f"pfc serve exited: {server.stderr.read()}")
                try:
                    client.get("/api/info").raise_for_status()
                    break
                except httpx.TransportError:
                    time.sleep(0.2)
            load_s = time.perf_counter() - started
            for q in queries[:3]:  # warm-up, not timed
                client.get("/api/search", params={"q": q, "system": system, "k": k}).raise_for_status()

            def ask(c, q):
                t = time.perf_counter()
                r = c.get("/api/search", params={"q": q, "system": system, "k": k})
                r.raise_for_status()
                body = r.json()
                assert body["results"] and "answer" in body["results"][0], "explained results expected"
                return 1000 * (time.perf_counter() - t), body["took_ms"]

            t0 = time.perf_counter()
            single = [ask(client, q) for q in queries]
            single_s = time.perf_counter() - t0

        local = threading.local()

        def ask_own(q):
            if not hasattr(local, "client"):
                local.client = httpx.Client(base_url=base, timeout=300)
            return ask(local.client, q)

        t0 = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            many = list(pool.map(ask_own, queries))
        many_s = time.perf_counter() - t0
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    return {"server_start_to_ready_s": round(load_s, 1), "system": system, "k": k,
            "single_client": summary([a for a, _ in single], [b for _, b in single], single_s),
            f"{clients}_clients": summary([a for a, _ in many], [b for _, b in many], many_s)}


def cold_start(folder: Path, threads: int, repeats: int, baseline: "Path | None", only: str = "") -> dict:
    """Median wall and CPU seconds of fresh ``pfc`` processes: bad input refused, then one search per system
    (``only``: just the commands whose name contains it)."""
    import statistics

    question = questions(folder, 1, 0)[0]
    common = ["--threads", str(threads)]
    cases = {
        "refuse -k 0": ["search", str(folder), question, "-k", "0", *common],
        "refuse missing folder": ["search", str(folder.parent / "no-such-folder"), question, *common],
        "refuse existing folder": ["index", str(DEFAULT_DUMP), str(folder), *common],
        "search hybrid (explained)": ["search", str(folder), question, "-k", "5", *common],
        "search colbert (explained)": ["search", str(folder), question, "-k", "5", "--system", "colbert", *common],
        "search tfidf (explained)": ["search", str(folder), question, "-k", "5", "--system", "tfidf", *common],
        "search tfidf --no-explain": ["search", str(folder), question, "-k", "5", "--system", "tfidf",
                                      "--no-explain", *common],
    }
    picked = {name: args for name, args in cases.items() if only in name}
    if not picked:
        raise SystemExit(f"--only {only!r} matches no command; expected part of one of {list(cases)}")
    cases = picked
    roots = {"this code": ROOT, **({"baseline": baseline} if baseline else {})}
    times: dict = {(who, case): [] for who in roots for case in cases}
    for _ in range(repeats):
        for case, args in cases.items():
            for who, root in roots.items():
                if who == "baseline" and "--no-explain" in args:
                    continue  # an option the baseline may not have
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                # run from the copy's own folder: ``python -m`` looks in the working folder first
                done = subprocess.run(pfc(*args), env=environment(root), capture_output=True, text=True, cwd=root)
                wall = time.perf_counter() - started
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                expected = 2 if case.startswith("refuse") else 0
                if done.returncode != expected:
                    raise RuntimeError(f"{who}: pfc {' '.join(args)} exited {done.returncode}: {done.stderr}")
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                times[(who, case)].append((wall, cpu))
    return {who: {case: {"wall_s": round(statistics.median(w for w, _ in runs), 2),
                         "cpu_s": round(statistics.median(c for _, c in runs), 2), "runs": len(runs)}
                  for (w2, case), runs in times.items() if w2 == who and runs}
            for who in roots}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dump", type=Path, default=DEFAULT_DUMP)
    ap.add_argument("--folder", type=Path, default=None,
                    help="search folder: reused when it exists (no indexing), else built there and kept")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--system", default="hybrid")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--checkpoint", default=None, help="the ColBERT checkpoint pfc index uses (default: the package's)")
    ap.add_argument("--cold", type=int, default=0, metavar="N",
                    help="time start-up instead: each command N times in a fresh process (needs --folder)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="with --cold: another copy of the package to time in the same run")
    ap.add_argument("--only", default="", metavar="TEXT",
                    help="with --cold: time only the commands whose name contains TEXT (e.g. 'hybrid')")
    args = ap.parse_args(argv)
    report = {"machine": machine(), "threads": args.threads}
    if args.cold:
        if args.folder is None or not args.folder.exists():
            sys.exit("--cold needs an existing search folder: give --folder")
        report["cold"] = cold_start(args.folder, args.threads, args.cold, args.baseline, args.only)
        report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        text = json.dumps(report, indent=2)
        print(text)
        if args.out:
            args.out.write_text(text + "\n")
        return
    with tempfile.TemporaryDirectory(prefix="pfc-bench-") as tmp:
        folder = args.folder or Path(tmp) / "wiki"
        if not folder.exists():
            if not args.dump.exists():
                sys.exit(f"dump not found: {args.dump} (give --dump)")
            report["index"] = {"dump": args.dump.name, **index(args.dump, folder, args.threads, args.checkpoint)}
        queries = questions(folder, args.queries, args.seed)
        report["api"] = serve_and_time(folder, args.threads, queries, args.clients, args.system, args.k)
    report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
