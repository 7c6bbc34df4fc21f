"""A whole search-folder build (what ``pfc index`` does: passages → TF-IDF + compressed ColBERT) on a chosen
device and thread count, for the big-wiki projection (docs/scale.md): passages per second and where the time goes.

    python benchmarks/device_build.py --squad FILE --passages 18896 --device cuda --threads 16   # one GPU
    python benchmarks/device_build.py --squad FILE --passages 4000 --device cpu --threads 8      # 8 cores

Passages are the paragraphs of a SQuAD-format JSON file (``.json`` or ``.json.bz2``), in file order, as
``{docno, text}`` records. On a CPU the encoder runs in ``--precision`` (``auto``, as ``pfc index``); on a GPU
in bf16 autocast. Prints one JSON object (also written to ``--out``): the manifest's stage seconds (TF-IDF, the
ColBERT part, total), passages/s of the whole build, the token count and the peak RSS of the process.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

from bench_io import require_work

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def paragraphs(path: Path, n: int):
    """The first ``n`` paragraphs of a SQuAD-format file as passage records."""
    from pyterrier_fandom_colbert.storage.files import read_input_json

    data = read_input_json(path, "SQuAD JSON file")["data"]
    texts = [p["context"] for article in data for p in article["paragraphs"]][:n]
    if len(texts) < n:
        raise SystemExit(f"{path}: {len(texts)} paragraphs, fewer than --passages {n}")
    return [{"docno": f"p{i}", "text": t} for i, t in enumerate(texts)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--squad", type=Path, required=True)
    ap.add_argument("--passages", type=int, default=4000)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default="auto", help="CPU precision of the encoder (as pfc index --precision)")
    ap.add_argument("--batch-size", type=int, default=64, help="passages per forward pass (pfc index's default)")
    ap.add_argument("--checkpoint", default=None, help="ColBERT checkpoint (default: the package's)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    import torch

    from pyterrier_fandom_colbert.app.folder import build_folder
    from pyterrier_fandom_colbert.model.colbert import ColBERT

    torch.set_num_threads(args.threads)
    records = paragraphs(args.squad, args.passages)
    colbert = ColBERT.from_pretrained(args.checkpoint, device=args.device, batch_size=args.batch_size,
                                      cpu_precision=args.precision)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        report = build_folder(records, Path(tmp) / "folder", colbert=colbert, checkpoint=args.checkpoint)
        took = time.perf_counter() - started
    m = report.manifest
    require_work({"passages in the folder": (m.passages, len(records))})
    seconds = dict(m.seconds)
    result = {"device": args.device, "threads": args.threads, "precision": args.precision,
              "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
              "cpu_count": os.cpu_count(), "passages": m.passages, "tokens": m.tokens,
              "build_seconds": round(took, 2), "passages_per_second": round(m.passages / took, 1),
              "stage_seconds": seconds, "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    print(json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
