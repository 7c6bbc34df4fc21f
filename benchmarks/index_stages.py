"""Where ``pfc index``'s time goes: each stage of a build timed on its own, on the first passages of a wiki dump.

    python benchmarks/index_stages.py --dump ../shared/data/wikis/pokeclickerwiki_pages_current.xml.bz2 \\
        --passages 200 --threads 2

Stages, in the order ``pfc index`` runs them (``app.folder.build_folder``):

1. ``parse``: the whole dump read, cleaned and split into passages (``data.passages.dump_passages``); its rate is
   given per passage, and the first ``--passages`` are kept for the next stages;
2. ``tfidf``: those passages into a ``TfidfIndex`` with the text stored;
3. ``tokenise``: their word pieces (``tokenizer.document_pieces``);
4. ``encode``: their ColBERT vectors as the indexer makes them (windows, read batches of 1,024, ``--precision``);
5. ``write fp16``: the vectors streamed into an fp16 ``ColBERTIndex`` and closed (docno lookup, manifest);
6. ``ivf``: the IVF neighbour index over them (``pfc index``'s default ``--faiss ivf``);
7. ``write residual2``: the same vectors into a compressed ``residual2`` index (k-means centroids, then codes).

Model loading is timed too. Per-stage seconds are also given per 1,000 passages. Prints one JSON object (also
written to ``--out``). Skips (exit 0, message) when the dump is absent.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from bench_io import write_report

DEFAULT_DUMP = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikis" / \
    "pokeclickerwiki_pages_current.xml.bz2"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", type=Path, default=DEFAULT_DUMP)
    ap.add_argument("--passages", type=int, default=200, help="passages taken through the later stages")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--precision", default="float32")
    ap.add_argument("--out", type=Path, default=Path("runs/index_stages.json"))
    ap.add_argument("--checkpoint", default=None, help="ColBERT checkpoint (default: the package's)")
    args = ap.parse_args(argv)
    if not args.dump.exists():
        print(f"skipped: {args.dump} not found")
        return 0

    import faiss
    import torch

    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.data.passages import dump_passages
    from pyterrier_fandom_colbert.index.ann import FaissSpec
    from pyterrier_fandom_colbert.index.writer import IndexWriter
    from pyterrier_fandom_colbert.model.tokenization import default_stride

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    seconds, report = {}, {"dump": args.dump.name, "threads": args.threads, "batch_size": args.batch_size,
                           "precision": args.precision,
                           "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}

    def timed(name, fn):
        started = time.perf_counter()
        out = fn()
        seconds[name] = round(time.perf_counter() - started, 2)
        print(f"{name:16s} {seconds[name]:8.2f} s   load average {os.getloadavg()[0]:.1f}", flush=True)
        return out

    everything = timed("parse", lambda: [(p.doc_id, p.text) for p in dump_passages(args.dump)])
    records = [{"docno": d, "text": t} for d, t in everything[:args.passages]]
    colbert = timed("load model", lambda: pfc.ColBERT.from_pretrained(
        args.checkpoint, device="cpu", batch_size=args.batch_size, cpu_precision=args.precision))
    with tempfile.TemporaryDirectory() as tmp:
        timed("tfidf", lambda: pfc.TfidfIndex(Path(tmp) / "tfidf").indexer(store_text=True).index(records))
        texts = [r["text"] for r in records]
        pieces = timed("tokenise", lambda: colbert.tokenizer.document_pieces(texts))
        stride = default_stride(colbert.tokenizer.max_doc_pieces)
        encoded = timed("encode", lambda: [e for start in range(0, len(pieces), 1024)
                                           for e in colbert.encode_pieces(pieces[start:start + 1024], stride)])

        def write(folder, compression):
            with IndexWriter(folder, colbert.config, colbert.fingerprint(), long_docs="windows", stride=stride,
                             compression=compression) as writer:
                for record, (vecs, ids, parts) in zip(records, encoded):
                    writer.add(record["docno"], vecs, ids, parts)
            return folder

        fp16 = timed("write fp16", lambda: write(Path(tmp) / "fp16", "fp16"))
        timed("ivf", lambda: pfc.ColBERTIndex(fp16).ann(FaissSpec("ivf")))
        timed("write residual2", lambda: write(Path(tmp) / "residual2", "residual2"))
    n = len(records)
    report.update({"passages_in_dump": len(everything), "passages": n,
                   "tokens": int(sum(len(v) for v, _, _ in encoded)), "seconds": seconds,
                   "seconds_per_1000_passages": {k: round(v * 1000 / (len(everything) if k == "parse" else n), 2)
                                                 for k, v in seconds.items() if k != "load model"},
                   "load_average_at_end": [round(x, 2) for x in os.getloadavg()]})
    per = report["seconds_per_1000_passages"]
    total = sum(per.values())
    report["share_of_build"] = {k: round(v / total, 3) for k, v in per.items()}
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
