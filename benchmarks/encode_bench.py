"""Document-encoding throughput: ``colbert.doc_encoder()`` against the raw backbone forward on the same batches.

    python benchmarks/encode_bench.py --threads 2 --n 512            # CPU
    python benchmarks/encode_bench.py --device cuda --n 8192         # GPU

Passages are SQuAD paragraphs from the data folder beside the repository when present (else generated text of
similar length).
Overhead = (plugin time − backbone time) / backbone time; the plugin time includes tokenisation, the
projection, normalisation and turning batches into per-passage arrays and token strings.
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


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backbone", default=None, help="backbone folder (default: the bundled MiniLM)")
    ap.add_argument("--squad", type=Path, default=SQUAD, help="SQuAD-format JSON whose paragraphs are encoded")
    args = ap.parse_args(argv)

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
