"""Side by side on SciFact: this package's compressed index (residual codes, centroid-pruned search) against
colbert-ai's PLAID, with the same weights, measured in one run.

    .venv/bin/python benchmarks/plaid_compare.py                       # builds once, caches under runs/
    .venv/bin/python benchmarks/plaid_compare.py --queries 200 --nbits 2

What it does:

1. colbert-ai goes into a separate virtual environment (``--peer-venv``, default /tmp/peers-venv; reused when it
   has the pinned versions, else brought to them): ``pip install torch==2.13.0`` first, then colbert-ai 0.2.22 with
   transformers 4.49.0 (0.2.22 loads no checkpoint under transformers 5), faiss-cpu and ninja, all pinned
   (``PEER_PACKAGES``; colbert-ai compiles its C++ extensions at first use).
2. The package's checkpoint (``--checkpoint``, default the bundled one) is converted into colbert-ai's format: a
   BERT folder whose weights are ``bert.*`` plus ``linear.weight``, with an ``artifact.metadata`` JSON (query and
   document lengths, ``[unused0]``/``[unused1]`` markers, masks attended, punctuation kept, cosine).
3. Both systems index the SciFact corpus, each in its own process (so each one's peak RSS is its own): this
   package with ``index.indexer(colbert, compression="residual<nbits>")``, colbert-ai with its ``Indexer``
   (``nbits``). Encoding is timed apart from the rest (this package: tokenising and encoding as the indexer
   counts and times them itself, ``indexer.stats``; colbert-ai: inside ``CollectionEncoder.encode_passages``),
   and encoded passages are counted; a build whose count of encoded passages is not the corpus's stops the script
   (exit status 1), rather than reporting a timer that measured nothing. The builds are
   cached (``--out``); ``--rebuild`` redoes them. An fp16 index of the package (the reference for exact search,
   built untimed in another process) is cached too.
4. Both indexes are served by a worker process each; the queries (SciFact *train* claims) go to both in blocks
   of ``--block`` (25): a block to one server, then the same block to the other, the first server alternating
   per block, so that drift in the machine's speed hits both alike (``--block 1``: alternate per query;
   ``--isolated``: one block of all the queries, which drift can bias: measured once at 0.67x where repeated
   blocks of 25 gave 0.85-0.88x), after ``--warmup`` untimed queries. Each worker times end to end
   (text in, top 10 out: this package's ``index.retriever(colbert, num_results=10)`` pipeline, and the same
   search through ``index.searcher(colbert, num_results=10)``, which returns arrays and no frame, the two in
   alternating order; colbert-ai's ``Searcher.search``, which returns lists) and search only (query vectors
   given).
5. Exhaustive references, cached: each system's own exhaustive MaxSim over its stored (decompressed) vectors,
   and this package's exact search over fp16 vectors. Reported: top-10 agreement with them, nDCG@10 on the
   train qrels, bytes per token (index folder size / stored tokens), peak RSS of each build and each server.

The train claims are a benchmark here, not a tuning set (no parameter of either system was chosen on them).
Skips (exit 0, message) when the SciFact folder is absent. Writes ``<out>/result.json`` (``result-k1000.json``
for ``--k 1000``, ``result-nscore64.json`` for ``--search-params '{"nscore": 64}'``, and so on) and prints a Markdown
table.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
from bench_io import require_work

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
PEER_SCRIPT = Path(__file__).resolve().parent / "plaid_peer.py"
#: the peer environment, pinned (docs/results.md records them beside the figures): colbert-ai 0.2.22 loads no
#: checkpoint under transformers 5 (its HF_ColBERT lacks ``all_tied_weights_keys``; issue 43), and builds with 4.49;
#: tokenizers is the one transformers 4.49 takes; torch first, on its own (PEER_TORCH), so that nothing replaces it
PEER_TORCH = "torch==2.13.0"
PEER_PACKAGES = ["colbert-ai==0.2.22", "transformers==4.49.0", "tokenizers==0.21.4", "faiss-cpu==1.15.1",
                 "ninja==1.11.1.4"]


# -- data ----------------------------------------------------------------------------------------------------------
def load_scifact(folder: Path):
    """(docs [{docno, text}], topics [(qid, text)], qrels {qid: {docno: label}}) of the train split."""
    with gzip.open(folder / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        docs = [{"docno": d["_id"], "text": (d.get("title", "") + ". " + d["text"]).strip(". ")}
                for d in map(json.loads, f)]
    qfile = next(folder.glob("queries-train.jsonl*"))
    with (gzip.open(qfile, "rt", encoding="utf-8") if qfile.suffix == ".gz" else open(qfile, encoding="utf-8")) as f:
        topics = [(q["_id"], q["text"]) for q in map(json.loads, f)]
    qrels: Dict[str, Dict[str, int]] = {}
    with open(folder / "qrels" / "train.tsv", encoding="utf-8") as f:
        next(f)
        for line in f:
            qid, docno, label = line.rstrip("\n").split("\t")
            qrels.setdefault(qid, {})[docno] = int(label)
    return docs, [t for t in topics if t[0] in qrels], qrels


def write_collection_tsv(docs: List[Dict[str, str]], path: Path) -> None:
    """colbert-ai's collection: ``pid<TAB>text``, pid = position (tabs and newlines become spaces)."""
    with open(path, "w", encoding="utf-8") as f:
        for pid, d in enumerate(docs):
            f.write(f"{pid}\t{' '.join(d['text'].split())}\n")


# -- colbert-ai's environment and checkpoint -----------------------------------------------------------------------
def peer_python(venv: Path) -> Path:
    """The peer environment's python, made or brought to the pinned versions (PEER_PACKAGES) if needed."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", PEER_TORCH], check=True)  # torch first
    pins = {p.split("==")[0]: p.split("==")[1] for p in [PEER_TORCH, *PEER_PACKAGES]}
    probe = ("import importlib.metadata as m, json, sys; pins = json.loads(sys.argv[1]); "
             "sys.exit(0 if all(m.version(k).split('+')[0] == v for k, v in pins.items()) else 1)")
    if subprocess.run([str(python), "-c", probe, json.dumps(pins)], capture_output=True).returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", PEER_TORCH, *PEER_PACKAGES], check=True)
    return python


def convert_checkpoint(checkpoint: Optional[str], out: Path) -> Path:
    """The package's checkpoint as a colbert-ai checkpoint folder (weights as float32)."""
    import torch
    from safetensors.torch import save_file

    import pyterrier_fandom_colbert as pfc

    if (out / "artifact.metadata").exists():
        return out
    colbert = pfc.ColBERT.from_pretrained(checkpoint, device="cpu")
    config = colbert.config
    if config.similarity != "cosine" or not config.normalise:
        raise ValueError(f"colbert-ai scores unit vectors by cosine; this checkpoint has similarity="
                         f"{config.similarity!r}, normalise={config.normalise}")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model = colbert.model
    backbone = model.backbone
    state = {f"bert.{k}": v.detach().to(torch.float32).contiguous() for k, v in backbone.state_dict().items()}
    state["linear.weight"] = model.projection.weight.detach().to(torch.float32).contiguous()
    save_file(state, str(tmp / "model.safetensors"))
    hf_config = backbone.config.to_dict()
    hf_config.update(architectures=["HF_ColBERT"], torch_dtype="float32", dtype="float32")
    (tmp / "config.json").write_text(json.dumps(hf_config, indent=2))
    colbert.tokenizer.hf.save_pretrained(str(tmp))
    metadata = {"query_token_id": "[unused0]", "doc_token_id": "[unused1]", "query_token": "[Q]", "doc_token": "[D]",
                "query_maxlen": config.query_maxlen, "doc_maxlen": config.doc_maxlen, "dim": config.dim,
                "mask_punctuation": bool(config.skip_punctuation), "attend_to_mask_tokens": True,
                "similarity": "cosine", "interaction": "colbert"}
    (tmp / "artifact.metadata").write_text(json.dumps(metadata, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


# -- this package's side (run as worker processes of this script) --------------------------------------------------
def peak_rss_mb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, children) / 1024, 1)


def worker_build(args) -> int:
    """Index the corpus (``--compression``), timing encoding apart from the rest; figures to ``--result``."""
    import torch

    import pyterrier_fandom_colbert as pfc

    torch.set_num_threads(args.threads)
    docs = load_scifact(args.data)[0][:args.max_docs]
    colbert = pfc.ColBERT.from_pretrained(args.checkpoint, device="cpu")
    started = time.perf_counter()
    indexer = pfc.ColBERTIndex(args.index).indexer(colbert, compression=args.compression, overwrite=True,
                                                   ann=None, long_docs="truncate")  # as PLAID
    index = indexer.index(docs)
    total = time.perf_counter() - started
    # encoding = tokenisation + encoding the pieces, as the indexer itself counted and timed them
    stats = indexer.stats
    require_work({"passages encoded": (stats.passages, len(docs)), "passages written": (len(index), len(docs))})
    if not 0 < stats.forward_seconds <= stats.encode_seconds:
        raise SystemExit(f"benchmark measured the wrong work: forward passes {stats.forward_seconds:.3f} s within "
                         f"encoding {stats.encode_seconds:.3f} s")
    encode_seconds = stats.tokenise_seconds + stats.encode_seconds
    result = {"build_seconds": round(total, 3), "encode_seconds": round(encode_seconds, 3),
              "forward_seconds": round(stats.forward_seconds, 3), "tokenise_seconds": round(stats.tokenise_seconds, 3),
              "after_encoding_seconds": round(total - encode_seconds, 3),
              "passages_encoded": stats.passages, "num_passages": len(docs),
              "encoding_passes": round(stats.passages / len(docs), 3), "peak_rss_mb": peak_rss_mb(),
              "num_tokens": index.meta.num_tokens, "threads": args.threads, "compression": args.compression}
    if index.compressed:
        result["codec"] = index.codec_info
    Path(args.result).write_text(json.dumps(result, indent=2))
    return 0


def worker_serve(args) -> int:
    """Answer search / exhaustive / exact / rss requests (JSON lines) over the compressed and fp16 indexes."""
    import torch

    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.index.fp16.search import score_docs
    from pyterrier_fandom_colbert.index.residual import search as cs
    from pyterrier_fandom_colbert.ranking import top_k

    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    torch.set_num_threads(args.threads)
    colbert = pfc.ColBERT.from_pretrained(args.checkpoint, device="cpu")
    index = pfc.ColBERTIndex(args.index)
    overrides = json.loads(args.search_params)
    # the timed pipeline encodes in --query-precision; the references and the search-only timing in float32
    timed = pfc.ColBERT(colbert.model, colbert.tokenizer, device="cpu", cpu_precision=args.query_precision)
    pipeline = index.retriever(timed, num_results=args.k, **overrides)
    arrays = index.searcher(timed, num_results=args.k, **overrides)  # the same search, no frames around it
    served = 0
    store = index.store.arrays
    params = cs.SearchParams.for_k(args.k, **overrides)
    centroids = torch.from_numpy(store.codec.centroids)
    exhaustive = cs.SearchParams(ncells=1 << 30, threshold=0.0, ndocs=None)
    fp16 = pfc.ColBERTIndex(args.fp16_index) if args.fp16_index else None
    all_ids = np.arange(len(index))
    replies.write(json.dumps({"ready": True, "params": str(params)}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        cmd = request.get("cmd")
        if cmd == "quit":
            break
        with torch.inference_mode():
            if cmd == "rss":
                reply = {"peak_rss_mb": peak_rss_mb()}
            elif cmd == "search":
                took = {}
                for way in (("frame", "arrays") if served % 2 == 0 else ("arrays", "frame")):
                    start = time.perf_counter()
                    if way == "frame":
                        res = pipeline.search(request["query"])
                    else:
                        got, _ = arrays.search(request["query"])
                    took[way] = time.perf_counter() - start
                served += 1
                e2e = took["frame"]
                Q, mask = colbert.encode_queries([request["query"]])
                q = Q[0][mask[0]]
                start = time.perf_counter()
                ids, _ = cs.search_one(store, centroids, q, args.k, params)
                search_only = time.perf_counter() - start
                ranked = res.sort_values("rank").docno.tolist()
                reply = {"ids": ranked, "e2e_ms": 1e3 * e2e, "e2e_arrays_ms": 1e3 * took["arrays"],
                         "search_ms": 1e3 * search_only,
                         "same": index.docnos_of(ids).tolist() == ranked == got.tolist()}
            elif cmd in ("exhaustive", "exact"):
                Q, mask = colbert.encode_queries([request["query"]])
                q = Q[0][mask[0]]
                if cmd == "exhaustive":
                    ids, _ = cs.search_one(store, centroids, q, 10, exhaustive)
                else:
                    scores = score_docs(fp16, q, all_ids)
                    ids = all_ids[top_k(scores, all_ids, 10)]
                reply = {"ids": index.docnos_of(ids).tolist()}
            else:
                reply = {"error": f"unknown command {cmd!r}"}
        replies.write(json.dumps(reply) + "\n")
    return 0


def check_builds(ours: Dict[str, Any], plaid: Dict[str, Any], num_passages: int) -> None:
    """Stop (exit status 1) when a build's figures (possibly cached from an older run, before the timers counted
    what they timed) do not cover the corpus: this package encodes each passage once; PLAID at least once (a
    sample for its centroids, then every passage)."""
    hint = " (a cached build's figures: rerun with --rebuild)"
    try:
        require_work({"this package's passages encoded": (ours.get("passages_encoded"), num_passages),
                      "this package's passages in the build": (ours.get("num_passages"), num_passages)})
    except SystemExit as stop:
        raise SystemExit(f"{stop}{hint}") from None
    if not plaid.get("passages_encoded", 0) >= num_passages or not plaid.get("encode_seconds", 0) > 0:
        raise SystemExit(f"benchmark measured the wrong work: PLAID's build encoded {plaid.get('passages_encoded')} "
                         f"passages in {plaid.get('encode_seconds')} s for a corpus of {num_passages}{hint}")


# -- the driver ----------------------------------------------------------------------------------------------------
class Worker:
    """A server process answering one JSON request per line."""

    def __init__(self, command: List[str], log: Path, env: Optional[Dict[str, str]] = None):
        # the worker's stderr for as long as it lives: close() closes it
        self.log = open(log, "a", encoding="utf-8")  # noqa: SIM115
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, bufsize=1, env=env)
        self.hello = self._read()

    def _read(self) -> Dict[str, Any]:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.proc.args[:3]} ended; see {self.log.name}")
        return json.loads(line)

    def ask(self, **request) -> Dict[str, Any]:
        self.proc.stdin.write(json.dumps(request) + "\n")
        return self._read()

    def close(self) -> None:
        try:
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        finally:
            self.log.close()


def folder_bytes(folder: Path, skip: tuple = ()) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not any(s in p.parts for s in skip))


def run_cached(result: Path, command: List[str], log: Path, rebuild: bool, env=None) -> Dict[str, Any]:
    if rebuild or not result.exists():
        print(f"building: {' '.join(command)}  (log: {log})", file=sys.stderr)
        with open(log, "a", encoding="utf-8") as out:
            subprocess.run(command, check=True, stdout=out, stderr=out, env=env)
    return json.loads(result.read_text())


def cached_references(path: Path, worker: Worker, cmd: str, topics, key: str, built: Path) -> Dict[str, List]:
    """Each topic's reference top 10 from ``worker``, cached in ``path`` for the build recorded in ``built`` (a
    rebuilt index, whose codec may differ, starts the cache afresh)."""
    build = hashlib.sha256(built.read_bytes()).hexdigest()[:16]
    cache = json.loads(path.read_text()) if path.exists() else {}
    if cache.pop("_build", None) != build:
        cache = {}
    todo = [(qid, text) for qid, text in topics if qid not in cache]
    for i, (qid, text) in enumerate(todo):
        cache[qid] = worker.ask(cmd=cmd, query=text, k=10)[key]
        if i % 50 == 49 or i == len(todo) - 1:
            path.write_text(json.dumps({"_build": build, **cache}))
            print(f"{path.name}: {i + 1}/{len(todo)}", file=sys.stderr)
    return cache


def ndcg10(run: Dict[str, List[str]], qrels: Dict[str, Dict[str, int]]) -> float:
    import ir_measures
    from ir_measures import nDCG

    qrel_list = [ir_measures.Qrel(q, d, r) for q, docs in qrels.items() if q in run for d, r in docs.items()]
    scored = [ir_measures.ScoredDoc(q, d, float(10 - i)) for q, docs in run.items() for i, d in enumerate(docs)]
    return float(ir_measures.calc_aggregate([nDCG @ 10], qrel_list, scored)[nDCG @ 10])


def agreement(run: Dict[str, List], reference: Dict[str, List]) -> float:
    return float(np.mean([len(set(run[q]) & set(reference[q])) / len(reference[q]) for q in run]))


def machine() -> Dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return {"cpu": model, "cores": os.cpu_count(), "load_avg_1min": round(os.getloadavg()[0], 2),
            "python": platform.python_version()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA / "scifact")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "plaid_compare")
    ap.add_argument("--peer-venv", type=Path, default=Path("/tmp/peers-venv"))
    ap.add_argument("--checkpoint", default=None, help="this package's checkpoint (default: the bundled one)")
    ap.add_argument("--nbits", type=int, default=2, choices=[1, 2, 4])
    ap.add_argument("--queries", type=int, default=None, help="at most this many train claims (default: all)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--query-precision", choices=("float32", "bfloat16", "auto"), default="float32",
                    help="CPU precision of this package's timed end-to-end queries (auto: bfloat16 where native, as "
                         "pfc search encodes questions for a bf16 folder; default float32, as before)")
    ap.add_argument("--search-params", default="{}",
                    help='JSON overrides for this package\'s retriever, e.g. \'{"ncells": 2, "ndocs": 512}\'')
    ap.add_argument("--k", type=int, default=10,
                    help="results per query, timed (default 10; e.g. 1000); quality is measured on the first 10")
    ap.add_argument("--block", type=int, default=25,
                    help="queries per block: a block to one server, then to the other, alternating which goes first "
                         "(default 25; 1: alternate per query)")
    ap.add_argument("--isolated", action="store_true",
                    help="send every query to one server, then every query to the other (one block of all)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild both indexes (the fp16 reference is kept)")
    ap.add_argument("--max-docs", type=int, default=None, help="smoke test: only the first N passages")
    ap.add_argument("--build-only", action="store_true", help="build (or reuse) the indexes, then stop")
    # worker modes (this script runs itself in subprocesses)
    ap.add_argument("--worker", choices=["build", "serve"], help=argparse.SUPPRESS)
    ap.add_argument("--index", help=argparse.SUPPRESS)
    ap.add_argument("--fp16-index", help=argparse.SUPPRESS)
    ap.add_argument("--compression", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.block < 1:
        ap.error(f"--block {args.block}: expected a positive number of queries per block")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.worker == "build":
        return worker_build(args)
    if args.worker == "serve":
        return worker_serve(args)
    if not (args.data / "corpus.jsonl.gz").exists():
        print(f"{args.data} is absent: nothing to measure", file=sys.stderr)
        return 0

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    docs, topics, qrels = load_scifact(args.data)
    docs = docs[:args.max_docs]
    topics = topics[:args.queries] if args.queries else topics
    fmt = f"residual{args.nbits}"
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               PLAID_THREADS=str(args.threads), PYTHONPATH=str(ROOT))
    peer_env = dict(env, PATH=f"{args.peer_venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    me = [sys.executable, str(Path(__file__).resolve()), "--data", str(args.data), "--threads", str(args.threads),
          "--query-precision", args.query_precision]
    if args.max_docs:
        me += ["--max-docs", str(args.max_docs)]
    if args.checkpoint:
        me += ["--checkpoint", args.checkpoint]

    # builds (each in its own process; cached)
    ours_index = out / f"ours-{fmt}.colbert"
    fp16_index = out / "ours-fp16.colbert"
    ours_build = run_cached(out / f"build-ours-{fmt}.json", [*me, "--worker", "build", "--index", str(ours_index),
                            "--compression", fmt, "--result", str(out / f"build-ours-{fmt}.json")],
                            out / "build-ours.log", args.rebuild, env)
    run_cached(out / "build-ours-fp16.json", [*me, "--worker", "build", "--index", str(fp16_index), "--compression",
               "fp16", "--result", str(out / "build-ours-fp16.json")], out / "build-ours.log", False, env)
    python = peer_python(args.peer_venv)
    checkpoint = convert_checkpoint(args.checkpoint, out / "checkpoint-colbert-ai")
    collection = out / "collection.tsv"
    write_collection_tsv(docs, collection)
    plaid_root = out / "plaid"
    plaid_name = f"scifact.nbits{args.nbits}"
    plaid_build = run_cached(out / f"build-plaid-nbits{args.nbits}.json",
                             [str(python), str(PEER_SCRIPT), "build", str(checkpoint), str(collection),
                              str(plaid_root), plaid_name, str(args.nbits),
                              str(out / f"build-plaid-nbits{args.nbits}.json")],
                             out / "build-plaid.log", args.rebuild, peer_env)
    plaid_folder = plaid_root / "plaid" / "indexes" / plaid_name
    check_builds(ours_build, plaid_build, len(docs))
    if args.build_only:
        return 0
    plaid_tokens = json.loads((plaid_folder / "metadata.json").read_text())["num_embeddings"]

    # serving, interleaved
    ours = Worker([*me, "--worker", "serve", "--index", str(ours_index), "--fp16-index", str(fp16_index),
                   "--search-params", args.search_params, "--k", str(args.k)], out / "serve-ours.log", env)
    plaid = Worker([str(python), str(PEER_SCRIPT), "serve", str(plaid_root), plaid_name], out / "serve-plaid.log",
                   peer_env)
    docnos = [d["docno"] for d in docs]
    try:
        load_before = os.getloadavg()[0]
        for _, text in topics[:args.warmup]:  # at --k: colbert-ai keeps the search settings of its first k
            ours.ask(cmd="search", query=text, k=args.k)
            plaid.ask(cmd="search", query=text, k=args.k)
        timings: Dict[str, Dict[str, List[float]]] = {"ours": {"e2e": [], "search": [], "e2e_arrays": []},
                                                      "plaid": {"e2e": [], "search": []}}
        runs: Dict[str, Dict[str, List[str]]] = {"ours": {}, "plaid": {}}
        same = {"ours": 0, "plaid": 0}
        started = time.perf_counter()
        order = [("ours", ours), ("plaid", plaid)]
        block = len(topics) if args.isolated else args.block
        schedule = [(name, worker, qid, text) for b, first in enumerate(range(0, len(topics), block))
                    for name, worker in (order if b % 2 == 0 else order[::-1])
                    for qid, text in topics[first:first + block]]
        for name, worker, qid, text in schedule:
            reply = worker.ask(cmd="search", query=text, k=args.k)
            timings[name]["e2e"].append(reply["e2e_ms"])
            timings[name]["search"].append(reply["search_ms"])
            if "e2e_arrays_ms" in reply:
                timings[name]["e2e_arrays"].append(reply["e2e_arrays_ms"])
            same[name] += bool(reply["same"])
            ids = reply["ids"] if name == "ours" else [docnos[p] for p in reply["ids"]]
            if len(ids) != min(args.k, len(docs)):
                raise SystemExit(f"{name} answered {len(ids)} passages for claim {qid}, not --k {args.k}")
            runs[name][qid] = ids[:10]  # quality: the first 10
        search_wall = time.perf_counter() - started
        load_after = os.getloadavg()[0]
        serve_rss = {"ours": ours.ask(cmd="rss")["peak_rss_mb"], "plaid": plaid.ask(cmd="rss")["peak_rss_mb"]}
        # exhaustive references (cached)
        ref_ours = cached_references(out / f"exhaustive-ours-{fmt}.json", ours, "exhaustive", topics, "ids",
                                     out / f"build-ours-{fmt}.json")
        ref_exact = cached_references(out / "exact-ours-fp16.json", ours, "exact", topics, "ids",
                                      out / "build-ours-fp16.json")
        ref_plaid = cached_references(out / f"exhaustive-plaid-nbits{args.nbits}.json", plaid, "exhaustive", topics,
                                      "ids", out / f"build-plaid-nbits{args.nbits}.json")
    finally:
        ours.close()
        plaid.close()
    qids = [q for q, _ in topics]
    ref_ours = {q: ref_ours[q] for q in qids}
    ref_exact = {q: ref_exact[q] for q in qids}
    ref_plaid = {q: [docnos[p] for p in ref_plaid[q]] for q in qids}

    def latency(values: List[float]) -> Dict[str, float]:
        return {"p50": round(float(np.percentile(values, 50)), 1), "p95": round(float(np.percentile(values, 95)), 1),
                "mean": round(float(np.mean(values)), 1)}

    ours_bytes = folder_bytes(ours_index, skip=("faiss",))
    plaid_bytes = folder_bytes(plaid_folder)
    result = {
        "machine": machine(), "threads": args.threads, "query_precision": args.query_precision,
        "queries": len(topics), "query_set": "SciFact train claims", "k": args.k,
        "load_avg_1min": {"before": round(load_before, 2), "after": round(load_after, 2)},
        "search_wall_seconds": round(search_wall, 1), "nbits": args.nbits, "search_params": ours.hello["params"],
        "schedule": "isolated" if args.isolated else f"blocks of {args.block}, alternating",
        "peer_packages": [PEER_TORCH, *PEER_PACKAGES],
        "ours": {"build": ours_build, "bytes_per_token": round(ours_bytes / ours_build["num_tokens"], 2),
                 "index_bytes": ours_bytes, "num_tokens": ours_build["num_tokens"],
                 "e2e_ms": latency(timings["ours"]["e2e"]), "search_ms": latency(timings["ours"]["search"]),
                 "e2e_arrays_ms": latency(timings["ours"]["e2e_arrays"]),
                 "serve_peak_rss_mb": serve_rss["ours"], "search_only_same_top10": same["ours"] / len(topics),
                 "ndcg10": round(ndcg10(runs["ours"], qrels), 4),
                 "ndcg10_own_exhaustive": round(ndcg10(ref_ours, qrels), 4),
                 "ndcg10_exact_fp16": round(ndcg10(ref_exact, qrels), 4),
                 "agreement_own_exhaustive": round(agreement(runs["ours"], ref_ours), 4),
                 "agreement_exact_fp16": round(agreement(runs["ours"], ref_exact), 4)},
        "plaid": {"build": plaid_build, "bytes_per_token": round(plaid_bytes / plaid_tokens, 2),
                  "index_bytes": plaid_bytes, "num_tokens": plaid_tokens,
                  "e2e_ms": latency(timings["plaid"]["e2e"]), "search_ms": latency(timings["plaid"]["search"]),
                  "serve_peak_rss_mb": serve_rss["plaid"], "search_only_same_top10": same["plaid"] / len(topics),
                  "ndcg10": round(ndcg10(runs["plaid"], qrels), 4),
                  "ndcg10_own_exhaustive": round(ndcg10(ref_plaid, qrels), 4),
                  "agreement_own_exhaustive": round(agreement(runs["plaid"], ref_plaid), 4)},
    }
    name = ("result-isolated" if args.isolated else "result" if args.block == ap.get_default("block")
            else f"result-block{args.block}")
    tuned = "".join(f"-{key}{value}" for key, value in sorted(json.loads(args.search_params).items()))
    (out / (name + ("" if args.k == 10 else f"-k{args.k}") + tuned + ".json")).write_text(
        json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    print(table(result))
    return 0


def table(r: Dict[str, Any]) -> str:
    o, p = r["ours"], r["plaid"]
    rows = [
        ("encoding (s)", o["build"]["encode_seconds"], p["build"]["encode_seconds"]),
        ("build after encoding (s)", o["build"]["after_encoding_seconds"], p["build"]["after_encoding_seconds"]),
        ("encoding passes", o["build"]["encoding_passes"], p["build"]["encoding_passes"]),
        ("bytes per token", o["bytes_per_token"], p["bytes_per_token"]),
        ("peak RSS, build (MB)", o["build"]["peak_rss_mb"], p["build"]["peak_rss_mb"]),
        ("peak RSS, serving (MB)", o["serve_peak_rss_mb"], p["serve_peak_rss_mb"]),
        ("end to end p50 / p95 (ms)", f"{o['e2e_ms']['p50']} / {o['e2e_ms']['p95']}",
         f"{p['e2e_ms']['p50']} / {p['e2e_ms']['p95']}"),
        ("end to end, arrays (`index.searcher`, no frame) p50 / p95 (ms)",
         f"{o['e2e_arrays_ms']['p50']} / {o['e2e_arrays_ms']['p95']}", "(its `Searcher.search` returns lists)"),
        ("search only p50 / p95 (ms)", f"{o['search_ms']['p50']} / {o['search_ms']['p95']}",
         f"{p['search_ms']['p50']} / {p['search_ms']['p95']}"),
        ("nDCG@10", o["ndcg10"], p["ndcg10"]),
        ("nDCG@10 of its own exhaustive MaxSim", o["ndcg10_own_exhaustive"], p["ndcg10_own_exhaustive"]),
        ("top-10 agreement with its own exhaustive MaxSim", o["agreement_own_exhaustive"],
         p["agreement_own_exhaustive"]),
    ]
    lines = [f"| | this package (residual{r['nbits']}) | colbert-ai PLAID (nbits {r['nbits']}) |", "|---|---|---|"]
    lines += [f"| {name} | {a} | {b} |" for name, a, b in rows]
    lines.append(f"\nthis package's exact search (fp16, exhaustive): nDCG@10 {o['ndcg10_exact_fp16']}; top-10 "
                 f"agreement of the compressed retriever with it {o['agreement_exact_fp16']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
