"""Document-encoding throughput: ``colbert.doc_encoder()`` against the raw backbone forward on the same batches,
or (``--indexing``) the indexer's encoding path before and after its CPU speed-ups, interleaved.

    python benchmarks/encode_bench.py --threads 2 --n 512            # CPU
    python benchmarks/encode_bench.py --device cuda --n 8192         # GPU
    python benchmarks/encode_bench.py --indexing --threads 2 --n 1024 --rounds 2 \
        --dump ../shared/data/wikis/pokeclickerwiki_pages_current.xml.bz2

Passages are SQuAD paragraphs from the data folder beside the repository when present (else generated text of
similar length), or with ``--dump`` the first ``--n`` passages of a wiki dump as ``pfc index`` makes them.
Overhead = (plugin time − backbone time) / backbone time; the plugin time includes tokenisation, the
projection, normalisation and turning batches into per-passage arrays and token strings.

``--indexing`` times ``ColBERT.encode_pieces`` as ``ColBERTIndexer`` calls it (whole texts as windows, length-sorted
within each read batch), one variant after another in each round, the order reversed every other round so that a
drifting load favours none: ``before`` is the path ``pfc index`` took before (float32, read batches of 256 texts,
64 per model batch); ``float32`` reads 1,024 texts at once (the indexer's default, which ``pfc index`` now keeps:
less padding); ``bfloat16`` and ``int8`` add those CPU precisions. Each variant's vectors are compared with
``before``'s (largest absolute component difference). Prints passages/s per round and the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SQUAD = Path(__file__).resolve().parents[2] / "shared" / "data" / "squad-v1.1-split" / "train-v1.1.json"


def passages(n: int, squad: Path = SQUAD):
    if squad.exists():
        data = json.loads(squad.read_text())["data"]
        texts = [p["context"] for a in data for p in a["paragraphs"]]
    else:
        import random

        rng = random.Random(0)
        words = [
            "the", "castle", "river", "folk", "dragon", "blade", "forged", "released", "game", "winter", "north",
            "crown",
        ]
        texts = [" ".join(rng.choice(words) for _ in range(rng.randint(60, 160))) for _ in range(n)]
    return (texts * (n // len(texts) + 1))[:n]


#: variant → (CPU precision, texts read and length-sorted at once)
VARIANTS = {"before": ("float32", 256), "float32": ("float32", 1024), "bfloat16": ("bfloat16", 1024),
            "int8": ("int8", 1024)}


def dump_texts(path: Path, n: int):
    from pyterrier_fandom_colbert.data.passages import dump_passages

    texts = []
    for passage in dump_passages(path):
        texts.append(passage.text)
        if len(texts) == n:
            break
    return texts


def padding(pieces, window: int, batch: int, size: int, stride: int):
    """(tokens, tokens with padding) of encoding ``pieces`` as the indexer does: windows of the texts of each read
    batch of ``window`` texts sorted by length, then cut into model batches of ``batch``."""
    import numpy as np

    from pyterrier_fandom_colbert.model.tokenization import windows

    real = padded = 0
    for start in range(0, len(pieces), window):
        lengths = np.sort([b - a + 3 for p in pieces[start:start + window] for a, b in windows(len(p), size, stride)])
        real += int(lengths.sum())
        padded += sum(int(lengths[b:b + batch].max()) * len(lengths[b:b + batch])
                      for b in range(0, len(lengths), batch))
    return real, padded


def indexing(args) -> None:
    import numpy as np
    import torch

    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.model.tokenization import default_stride, windows

    torch.set_num_threads(args.threads)
    texts = dump_texts(args.dump, args.n) if args.dump else passages(args.n, args.squad)
    reference = pfc.ColBERT.from_pretrained(args.backbone, device="cpu", batch_size=args.batch_size)
    tok = reference.tokenizer
    stride = default_stride(tok.max_doc_pieces)

    def run(name):
        precision, window = VARIANTS[name]
        colbert = pfc.ColBERT(reference.model, tok, device="cpu", batch_size=args.batch_size,
                              cpu_precision=precision)
        if precision == "int8":
            colbert.encode_pieces([[1000]])  # the int8 copy is made once per encoder, not timed
        started = time.perf_counter()
        out = []
        for start in range(0, len(texts), window):  # as ColBERTIndexer.index: tokenise, then encode, per read batch
            out += colbert.encode_pieces(tok.document_pieces(texts[start:start + window]), stride)
        return time.perf_counter() - started, [v for v, _, _ in out]

    pieces = tok.document_pieces(texts)
    parts = sum(len(windows(len(p), tok.max_doc_pieces, stride)) for p in pieces)
    print(f"threads={args.threads} passages={len(texts)} windows={parts} "
          f"word pieces={sum(len(p) for p in pieces)} batch={args.batch_size} load average {os.getloadavg()}",
          flush=True)
    for window in sorted({VARIANTS[name][1] for name in args.variants}):
        real, padded = padding(pieces, window, args.batch_size, tok.max_doc_pieces, stride)
        print(f"read batches of {window}: {padded} tokens through the model for {real} "
              f"({100 * (padded - real) / padded:.1f}% padding)")
    seconds = {name: [] for name in args.variants}
    vectors = {}
    for r in range(args.rounds):
        for name in (args.variants if r % 2 == 0 else args.variants[::-1]):
            took, vecs = run(name)
            seconds[name].append(took)
            vectors.setdefault(name, vecs)
            print(f"round {r + 1} {name:9s} {len(texts) / took:7.2f} passages/s ({took:.1f} s), load average "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
    base = vectors.get("before")
    for name in args.variants if args.rounds else ():  # --rounds 0: only the token counts above
        best = min(seconds[name])
        diff = ""
        if base is not None and name != "before":
            largest = max(float(np.abs(a - b).max()) for a, b in zip(vectors[name], base))
            diff = f", largest difference from before {largest:.2e}"
        speed = "" if "before" not in seconds else f", {min(seconds['before']) / best:.2f}x before"
        print(f"{name:9s} best {len(texts) / best:7.2f} passages/s{speed}{diff}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backbone", default=None, help="backbone folder (default: the bundled MiniLM)")
    ap.add_argument("--squad", type=Path, default=SQUAD, help="SQuAD-format JSON whose paragraphs are encoded")
    ap.add_argument("--dump", type=Path, default=None, help="encode the first --n passages of this wiki dump")
    ap.add_argument("--indexing", action="store_true", help="the indexer's path, before against after (above)")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    if args.indexing:
        return indexing(args)

    import numpy as np
    import pandas as pd
    import torch

    import pyterrier_fandom_colbert as pfc

    torch.set_num_threads(args.threads)
    colbert = pfc.ColBERT.from_pretrained(args.backbone, device=args.device, batch_size=args.batch_size)
    texts = passages(args.n, args.squad)
    frame = pd.DataFrame({"docno": [str(i) for i in range(len(texts))], "text": texts})
    tok = colbert.tokenizer
    content, _ = tok.document_content(texts)
    order = np.argsort([len(c) for c in content], kind="stable")
    batches = [tok.pack_documents([content[i] for i in order[b:b + args.batch_size]])
               for b in range(0, len(order), args.batch_size)]
    backbone = colbert.model.backbone
    amp = colbert.device.type == "cuda"

    def sync():
        if amp:
            torch.cuda.synchronize()

    def raw():
        with torch.inference_mode(), torch.autocast(colbert.device.type, dtype=torch.bfloat16, enabled=amp):
            for b in batches:
                backbone(input_ids=torch.as_tensor(b.input_ids, device=colbert.device),
                         attention_mask=torch.as_tensor(b.attention_mask, device=colbert.device))
        sync()

    encoder = colbert.doc_encoder()

    def plugin():
        encoder(frame)
        sync()

    def tensors():  # the path the indexer and the re-ranker use: batches stay tensors
        for _ in colbert.doc_batches(texts):
            pass
        sync()

    def tokenise():
        tok.document_content(texts)

    runs = {"backbone forward": raw, "tokenisation alone": tokenise, "doc_batches() (tensors)": tensors,
            "doc_encoder() (DataFrame)": plugin}
    for fn in runs.values():  # warm-up
        fn()
    best = {name: float("inf") for name in runs}
    for _ in range(args.repeats):  # interleaved, best of
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    tokens = int(sum(len(c) + 3 for c in content))
    print(f"device={colbert.device} threads={args.threads} passages={len(texts)} tokens={tokens} "
          f"batch={args.batch_size}")
    r = best["backbone forward"]
    for name, t in best.items():
        extra = "" if name == "backbone forward" or name.startswith("tok") else \
            f"  overhead {100 * (t - r) / r:+.1f}% of backbone time"
        print(f"{name:27s} {len(texts) / t:9.1f} passages/s ({t:.3f} s){extra}")


if __name__ == "__main__":
    main()
