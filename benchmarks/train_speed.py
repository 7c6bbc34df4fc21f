"""Training throughput on this machine: full fine-tuning against frozen lower layers (cached), and bf16 autocast.

    python benchmarks/train_speed.py --freeze 0 4 5 --steps 3          # pairs/s of the recipe's steps
    python benchmarks/train_speed.py --autocast                       # fp32 against bf16 autocast, one step

The recipe's batches (32 SQuAD questions of the protocol's train part, each with its passage and one TF-IDF
negative, in-batch scoring: 64 passages) over all-MiniLM-L6-v2. For each ``--freeze n`` it times ``--steps``
optimizer steps twice over the same batches: the first pass fills the frozen-layer cache (cold), the second is
what every later epoch costs (warm; ``n = 0`` has no cache, both passes cost the same). ``--autocast`` times one
forward + backward of the full model in fp32 and under ``torch.autocast("cpu", torch.bfloat16)``.
Prints one JSON line per measurement (and writes them to ``--out``).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SQUAD = ROOT.parent / "shared" / "data" / "squad-v1.1-split"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=SQUAD)
    ap.add_argument("--freeze", type=int, nargs="*", default=[0, 4, 5])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--autocast", action="store_true", help="fp32 against bf16 autocast on the CPU instead")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "train_speed.jsonl")
    ap.add_argument("--init", default=None,
                    help="the model to train: a checkpoint or backbone folder (default: the package's)")
    args = ap.parse_args(argv)
    if not (args.data / "train-v1.1.json").is_file():
        print(f"{args.data / 'train-v1.1.json'} not found; pass --data DIR", file=sys.stderr)
        return 2
    import torch

    from pyterrier_fandom_colbert import ColBERT, ColBERTConfig
    from pyterrier_fandom_colbert.data.protocol import squad_protocol, write_training_parts
    from pyterrier_fandom_colbert.training import PRESETS, Trainer, load_collection
    from pyterrier_fandom_colbert.training.examples import collate

    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        split = squad_protocol(args.data / "train-v1.1.json", args.data / "dev-v1.1.json")
        train = load_collection(str(write_training_parts(split, tmp)[0]))
        config = PRESETS["fresh"]
        settings = [("autocast", None), ("autocast", torch.bfloat16)] if args.autocast else \
            [("freeze", n) for n in args.freeze]
        for kind, value in settings:
            colbert = ColBERT.from_pretrained(args.init, config=ColBERTConfig(score_query_masks=False))
            cfg = config.replace(freeze_layers=value if kind == "freeze" else 0)
            trainer = Trainer(colbert, cfg, train, Path(tmp) / f"{kind}-{value}")
            batches = trainer._batches(0)[:args.steps]
            trainer.model.train()
            if kind == "autocast":
                started = time.perf_counter()
                for examples in batches:
                    with torch.autocast("cpu", dtype=value or torch.float32, enabled=value is not None):
                        loss = trainer.loss(collate(examples, trainer.source_data, cfg.in_batch))
                    loss.backward()
                    trainer.optimizer.zero_grad(set_to_none=True)
                seconds = time.perf_counter() - started
                row = {"setting": f"autocast {value}", "steps": len(batches),
                       "pairs_per_second": round(sum(map(len, batches)) / seconds, 2)}
                print(json.dumps(row), flush=True)
                rows.append(row)
                continue
            for phase in ("cold", "warm"):
                started = time.perf_counter()
                for examples in batches:
                    trainer.optimizer_step([examples])
                seconds = time.perf_counter() - started
                row = {"setting": f"freeze_layers={value}", "phase": phase, "steps": len(batches),
                       "pairs_per_second": round(sum(map(len, batches)) / seconds, 2),
                       "seconds_per_step": round(seconds / len(batches), 2)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({**row, "threads": args.threads}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
