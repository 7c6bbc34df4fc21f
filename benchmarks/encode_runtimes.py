"""Passage encoding with ONNX Runtime and OpenVINO against torch (bfloat16 and float32) on the same batches.

    python3 -m venv /tmp/ox-venv && /tmp/ox-venv/bin/pip install onnxruntime openvino onnx numpy sympy
    python benchmarks/encode_runtimes.py --ox-python /tmp/ox-venv/bin/python --n 512 --rounds 3

Neither runtime is a dependency of the package: they live in their own environment (``--ox-python``), and this
script, run from the package's environment, drives both. It

1. encodes ``--n`` passages (SQuAD training paragraphs from the data folder beside the repository, else generated
   text) with ``ColBERT.encode_pieces`` exactly as ``pfc index`` calls it (windows, length-sorted batches of
   ``--batch-size``) and records the token-id batches that the package forms (``--work``/batches.npz);
2. exports the default checkpoint's encoder (backbone, projection, L2 normalisation: what makes the document
   vectors) to ONNX with torch's TorchScript exporter (``dynamo=False``, dynamic batch and length axes); the
   exporter needs the ``onnx`` package, taken from the ``--ox-python`` environment when this one lacks it. It is
   traced through transformers' BertModel (eager attention), whose graph ONNX Runtime's BERT optimizer fuses;
3. starts a worker in that environment (this file with ``--worker``) that loads the model in ONNX Runtime
   (float32, as exported and after ``onnxruntime.transformers.optimizer``'s fusions) and OpenVINO
   (``INFERENCE_PRECISION_HINT`` bf16, which uses AMX where the CPU has it, and f32), each on ``--threads``
   threads, and warms each up;
4. after an untimed pass each (warm-up over every batch shape; the vectors compared in 5), times a pass over all
   the batches per runtime, round after round, interleaved batch by batch (each batch by every runtime in turn,
   the order rotated from batch to batch) so that a drifting load hits all alike; torch runs
   through the package's own ``ColBERT._forward`` (``--no-torch-fp32`` leaves float32 untimed: its vectors,
   from step 1, stay the reference);
5. reports passages/s per runtime (median over rounds) and its speed over torch bfloat16, and how close each one's
   vectors (the scored tokens only) are to torch float32's and torch bfloat16's: mean and minimum cosine.

Only one process computes at a time (the other waits on a pipe). ``--json`` writes the report. Without the
runtimes (no ``--ox-python``, or one without them) it stops with a message saying how to make that environment.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SQUAD = Path(__file__).resolve().parents[2] / "shared" / "data" / "squad-v1.1-split" / "train-v1.1.json"
#: the worker's runtimes: name → (module it needs, what it runs)
RUNTIMES = {"onnxruntime fp32": "onnxruntime", "onnxruntime fp32 fused": "onnxruntime", "openvino bf16": "openvino",
            "openvino f32": "openvino"}
TORCH = ("torch bf16", "torch fp32")
SETUP = ("python3 -m venv /tmp/ox-venv && /tmp/ox-venv/bin/pip install onnxruntime openvino onnx numpy sympy, "
         "then pass --ox-python /tmp/ox-venv/bin/python")
MARK = "@@ "  # the worker's replies on stdout start with this (the runtimes may print there too)


# -- the worker: runs in the runtimes' environment (numpy and the runtimes only) -------------------------------------
def _load_batches(path: Path):
    import numpy as np

    with np.load(path) as data:
        count = int(data["count"])
        return [(data[f"ids_{i}"], data[f"mask_{i}"], data[f"score_{i}"]) for i in range(count)]


def _sessions(model: Path, names, threads: int):
    """name → function(ids, mask) → vectors [B, L, dim] float32, for those of ``names`` whose runtime imports."""
    import numpy as np

    runs = {}
    for name in (n for n in names if n.startswith("onnxruntime")):
        import onnxruntime as ort

        path = model
        if name.endswith("fused"):  # ORT's BERT graph fusions (attention, embedding + layer norm, GELU)
            from onnxruntime.transformers.optimizer import optimize_model

            path = model.with_suffix(".fused.onnx")
            heads, hidden = (int(x) for x in model.with_suffix(".shape").read_text().split())
            optimize_model(str(model), model_type="bert", num_heads=heads, hidden_size=hidden,
                           opt_level=0).save_model_to_file(str(path))
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        runs[name] = (lambda ids, mask, session=session:
                      session.run(None, {"input_ids": ids, "attention_mask": mask})[0])
    if any(n.startswith("openvino") for n in names):
        import openvino as ov

        core = ov.Core()
        network = core.read_model(str(model))
        for name in (n for n in names if n.startswith("openvino")):
            compiled = core.compile_model(network, "CPU", {
                "INFERENCE_PRECISION_HINT": name.split()[-1], "INFERENCE_NUM_THREADS": threads,
                "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"})
            request = compiled.create_infer_request()

            def run(ids, mask, request=request):
                request.infer({"input_ids": ids, "attention_mask": mask})
                return np.array(request.get_output_tensor(0).data, copy=True)

            runs[name] = run
    return {n: runs[n] for n in names if n in runs}


def _reply(obj) -> None:
    sys.stdout.write(MARK + json.dumps(obj) + "\n")
    sys.stdout.flush()


def worker(args) -> None:
    """Answer the driver on stdin/stdout: ``<runtime>`` → one timed pass over all batches (``{"seconds"}``; the
    first pass of each runtime also writes its scored-token vectors to ``<work>/<runtime>.npy``); ``<runtime>|<i>``
    → batch ``i`` alone, timed; ``quit``."""
    import importlib.util

    import numpy as np

    wanted = [n for n in args.runtimes if importlib.util.find_spec(RUNTIMES[n]) is not None]
    missing = sorted({RUNTIMES[n] for n in args.runtimes} - {RUNTIMES[n] for n in wanted})
    batches = _load_batches(args.work / "batches.npz")
    runs = _sessions(args.work / "colbert.onnx", wanted, args.threads)
    for fn in runs.values():  # warm-up (OpenVINO compiles per shape on first sight): the shortest batch
        fn(*batches[0][:2])
    _reply({"ready": list(runs), "missing": missing})
    written = set()
    for line in sys.stdin:
        name, _, index = line.strip().partition("|")
        if name == "quit":
            break
        fn = runs[name]
        chosen = batches if not index else [batches[int(index)]]
        began = time.perf_counter()
        outs = [fn(ids, mask) for ids, mask, _ in chosen]
        seconds = time.perf_counter() - began
        if name not in written and not index:
            np.save(args.work / f"{name.replace(' ', '_')}.npy",
                    np.concatenate([o[s] for o, (_, _, s) in zip(outs, batches)]).astype(np.float32))
            written.add(name)
        _reply({"name": name, "seconds": seconds})


# -- the driver: runs in the package's environment ------------------------------------------------------------------
def passages(n: int, squad: Path):
    if squad.exists():
        data = json.loads(squad.read_text())["data"]
        texts = [p["context"] for a in data for p in a["paragraphs"]]
        return texts[:n]
    import random

    rng = random.Random(0)
    words = ["the", "castle", "river", "folk", "dragon", "blade", "forged", "released", "game", "winter", "north"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(60, 160))) for _ in range(n)]


def probe(python: str) -> dict:
    """Which of the runtimes (and onnx, for the export) ``python`` can import, and where its packages live."""
    code = ("import importlib.util, json, sysconfig; print(json.dumps({m: importlib.util.find_spec(m) is not None "
            "for m in ('onnxruntime', 'openvino', 'onnx', 'numpy')} | {'site': sysconfig.get_paths()['purelib']}))")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise SystemExit(f"encode_runtimes: cannot run --ox-python {python!r} ({err}); expected a Python with "
                         f"onnxruntime and openvino: {SETUP}") from None
    return json.loads(out.strip().splitlines()[-1])


def capture_batches(colbert, texts):
    """The batches ``ColBERT.encode_pieces`` forms for ``texts`` as the indexer calls it (token ids, attention
    and score masks, numpy), and the scored tokens' vectors ``colbert`` computed for them ``[n, dim]``."""
    import numpy as np

    from pyterrier_fandom_colbert.model.tokenization import default_stride

    tok = colbert.tokenizer
    seen, vectors = [], []
    forward = colbert._forward

    def capture(batch, on_layer=None):
        seen.append((batch.input_ids.astype("int64"), batch.attention_mask.astype("int64"),
                     batch.score_mask.astype(bool)))
        out = forward(batch, on_layer)
        vectors.append(out.float().numpy()[seen[-1][2]])
        return out

    colbert._forward = capture
    try:
        colbert.encode_pieces(tok.document_pieces(texts), default_stride(tok.max_doc_pieces))
    finally:
        del colbert._forward
    return seen, np.concatenate(vectors)


def export(model, path: Path, onnx_site: str | None) -> None:
    """The encoder as ONNX (TorchScript exporter; ``onnx`` from ``onnx_site`` when not importable here)."""
    import importlib.util

    import torch

    if importlib.util.find_spec("onnx") is None:
        if onnx_site is None:
            raise SystemExit(f"encode_runtimes: the ONNX export needs the onnx package, in this environment or in "
                             f"--ox-python's: {SETUP}")
        sys.path.append(onnx_site)  # after this environment's own packages, which keep precedence

    class Encoder(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            return self.inner(input_ids, attention_mask)

    # traced through transformers' BertModel with eager attention (the graph ONNX Runtime's BERT optimizer
    # recognises), and with padding in the batch so that the attention mask is part of the graph
    ids = torch.full((2, 16), 1000, dtype=torch.long)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 10:] = 0
    axes = {"input_ids": {0: "batch", 1: "length"}, "attention_mask": {0: "batch", 1: "length"},
            "vectors": {0: "batch", 1: "length"}}
    config = model.backbone.config
    saved = model.fast_inference, config._attn_implementation
    model.fast_inference, config._attn_implementation = False, "eager"
    try:
        with torch.inference_mode():
            torch.onnx.export(Encoder(model.eval()), (ids, mask), str(path), dynamo=False, opset_version=17,
                              input_names=["input_ids", "attention_mask"], output_names=["vectors"],
                              dynamic_axes=axes)
    finally:
        model.fast_inference, config._attn_implementation = saved
    path.with_suffix(".shape").write_text(f"{config.num_attention_heads} {config.hidden_size}")


def agreement(a, b) -> dict:
    """Per-token cosine of two ``[n, dim]`` arrays: mean and minimum."""
    import numpy as np

    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    cos = (a64 * b64).sum(1) / np.maximum(np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1), 1e-12)
    return {"mean_cosine": float(cos.mean()), "min_cosine": float(cos.min())}


class Worker:
    """The worker process in the runtimes' environment, one request at a time."""

    def __init__(self, python: str, args):
        command = [python, str(Path(__file__).resolve()), "--worker", "--work", str(args.work),
                   "--threads", str(args.threads), "--runtimes", *args.runtimes]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.hello = self.read()

    def read(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
        raise SystemExit(f"encode_runtimes: the worker stopped (exit status {self.proc.wait()}); its errors are "
                         f"above")

    def time(self, name: str, batch: int | None = None) -> float:
        """Seconds of a pass over all the batches, or over batch ``batch`` alone."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(name + ("" if batch is None else f"|{batch}") + "\n")
        self.proc.stdin.flush()
        return float(self.read()["seconds"])

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
        self.proc.wait()


def drive(args) -> dict:
    found = probe(args.ox_python) if args.ox_python else {}
    absent = sorted({RUNTIMES[n] for n in args.runtimes if not found.get(RUNTIMES[n])})
    if absent:
        where = f"--ox-python {args.ox_python}" if args.ox_python else "no --ox-python was given"
        raise SystemExit(f"encode_runtimes: {', '.join(absent)} not found ({where}); expected a Python "
                         f"environment with them: {SETUP}")
    import numpy as np
    import torch

    import pyterrier_fandom_colbert as pfc

    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    texts = passages(args.n, args.squad)
    colbert = pfc.ColBERT.from_pretrained(args.checkpoint, device="cpu", batch_size=args.batch_size,
                                          cpu_precision="float32")
    batches, reference = capture_batches(colbert, texts)  # float32: the reference vectors
    arrays = {"count": np.array(len(batches))}
    for i, (ids, mask, score) in enumerate(batches):
        arrays |= {f"ids_{i}": ids, f"mask_{i}": mask, f"score_{i}": score}
    np.savez(args.work / "batches.npz", **arrays)
    began = time.perf_counter()
    export(colbert.model, args.work / "colbert.onnx", found.get("site"))
    tokens = int(sum(int(m.sum()) for _, m, _ in batches))
    padded = int(sum(m.size for _, m, _ in batches))
    print(f"{len(texts)} passages, {len(batches)} batches of up to {args.batch_size}, {tokens} tokens "
          f"({padded} with padding), threads {args.threads}; ONNX export {time.perf_counter() - began:.1f} s "
          f"({(args.work / 'colbert.onnx').stat().st_size / 2**20:.0f} MiB)", flush=True)

    encoders = {"torch bf16": pfc.ColBERT(colbert.model, colbert.tokenizer, device="cpu", cpu_precision="bfloat16"),
                "torch fp32": colbert}
    vectors = {"torch fp32": reference}

    class Packed:  # what _forward reads of a tokenised batch
        def __init__(self, ids, mask):
            self.input_ids, self.attention_mask = ids, mask

    def run_torch(name, batch=None):
        encoder = encoders[name]
        chosen = batches if batch is None else [batches[batch]]
        began = time.perf_counter()
        outs = [encoder._forward(Packed(ids, mask)) for ids, mask, _ in chosen]
        seconds = time.perf_counter() - began
        if name != "torch fp32" and batch is None:
            vectors.setdefault(name, np.concatenate([o.float().numpy()[s] for o, (_, _, s) in zip(outs, batches)]))
        return seconds

    timed = ["torch bf16", *(["torch fp32"] if not args.no_torch_fp32 else [])]
    pool = Worker(args.ox_python, args)
    seconds = {name: [] for name in (*timed, *pool.hello["ready"])}
    try:
        # an untimed pass each: warm-up over every batch shape (the bf16 copy of the weights is made on first use,
        # OpenVINO compiles per shape on first sight), and the vectors compared below
        for name in seconds:
            run_torch(name) if name in TORCH else pool.time(name)
        names = list(seconds)
        for r in range(args.rounds):
            took = dict.fromkeys(names, 0.0)
            for b in range(len(batches)):  # each batch by every runtime in turn, starting one further each time
                for name in names[b % len(names):] + names[:b % len(names)]:
                    took[name] += run_torch(name, b) if name in TORCH else pool.time(name, b)
            for name in names:
                seconds[name].append(took[name])
                print(f"round {r + 1} {name:22s} {len(texts) / took[name]:6.1f} passages/s ({took[name]:5.1f} s), "
                      f"load average {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        pool.close()
    for name in pool.hello["ready"]:
        vectors[name] = np.load(args.work / f"{name.replace(' ', '_')}.npy")
    median = {name: statistics.median(s) for name, s in seconds.items()}
    report = {"passages": len(texts), "batches": len(batches), "tokens": tokens, "threads": args.threads,
              "rounds": args.rounds, "load_average": os.getloadavg(), "results": {}}
    for name in seconds:
        report["results"][name] = {
            "passages_per_s": len(texts) / median[name], "over_torch_bf16": median["torch bf16"] / median[name],
            # the same round's torch bf16 time over this one's, median over rounds: robust to a drifting load
            "over_torch_bf16_paired": statistics.median([b / s for b, s in zip(seconds["torch bf16"],
                                                                             seconds[name])]),
            "rounds_passages_per_s": [len(texts) / s for s in seconds[name]],
            "vs_torch_fp32": agreement(vectors[name], vectors["torch fp32"]),
            "vs_torch_bf16": agreement(vectors[name], vectors["torch bf16"])}
    print(f"\n| runtime | passages/s (median of {args.rounds}) | × torch bf16 (medians; paired) | cosine to fp32: "
          f"mean / min | cosine to bf16: mean / min |\n|---|---|---|---|---|")
    for name, row in report["results"].items():
        f32, b16 = row["vs_torch_fp32"], row["vs_torch_bf16"]
        print(f"| {name} | {row['passages_per_s']:.1f} | "
              f"{row['over_torch_bf16']:.2f}; {row['over_torch_bf16_paired']:.2f} | "
              f"{f32['mean_cosine']:.6f} / {f32['min_cosine']:.4f} | "
              f"{b16['mean_cosine']:.6f} / {b16['min_cosine']:.4f} |")
    return report


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ox-python", default=None, help="the Python of an environment with onnxruntime and openvino")
    ap.add_argument("--n", type=int, default=512, help="passages to encode")
    ap.add_argument("--batch-size", type=int, default=64, help="passages per model batch (pfc index's default)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-torch-fp32", action="store_true",
                    help="do not time torch float32 (its vectors, from recording the batches, stay the reference)")
    ap.add_argument("--runtimes", nargs="+", default=list(RUNTIMES), choices=list(RUNTIMES))
    ap.add_argument("--checkpoint", default=None, help="checkpoint folder (default: the bundled one)")
    ap.add_argument("--squad", type=Path, default=SQUAD, help="SQuAD-format JSON whose paragraphs are encoded")
    ap.add_argument("--work", type=Path, default=Path("/tmp/encode_runtimes"),
                    help="folder for the batches, the ONNX model and the runtimes' vectors")
    ap.add_argument("--json", type=Path, default=None, help="write the report here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    report = drive(args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
