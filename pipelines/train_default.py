"""The recipe of the package's default checkpoint: all-MiniLM-L6-v2 fine-tuned as ColBERT on SQuAD.

    python pipelines/train_default.py                                 # the recipe (GPU: ~1-2 minutes on an H100)
    python pipelines/train_default.py --limit 64 --epochs 1          # a quick end-to-end check (CPU: minutes)
    python pipelines/train_default.py --data DIR --init BACKBONE_DIR  # data/backbone elsewhere (e.g. a GPU box)

Follows the evaluation protocol (docs/fusion.md): trains on its *train* part (20 of the 24 articles of
``train-v1.1.json``) and keeps the checkpoint with the best RR@10 on its *selection* part (the other 4), so that
the report part (every article of ``dev-v1.1.json``) judges the result unseen; both parts are written as SQuAD
files to ``runs/protocol/``. Settings (any ``pfc-train`` option given here overrides them):
d = 128, N_q = 32, N_d = 180, orthogonal projection init, the [MASK] query vectors attended to but not
scored (scoring them cost 3 RR@10 points after training, see docs/training.md); batches of 32 questions, each
with its passage and one TF-IDF hard negative, every question ranked against all 64 passages of the batch
(in-batch negatives); N_q-scaled cross-entropy; AdamW with lr 1e-4 for the projection and a lower 3e-5 for the
encoder; 10% linear warm-up then linear decay; bf16 autocast on GPU; 4 epochs; selection evaluation every 100 steps.

Prints the selection RR@10 of the reference the trained model must beat (the untrained MiniLM's token MaxSim with the
[MASK] vectors not scored; docs/method.md §3.8 quotes about 0.905; on the dev articles, in ColBERT's input layout,
it is 0.8675), of
the untrained start and of the best checkpoint, the training time and pairs/s. The checkpoint is
``<out>/best``; to ship it as the default:
``cp -r runs/default/best pyterrier_fandom_colbert/model/checkpoints/default``.
"""
import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SQUAD = ROOT.parent / "shared" / "data" / "squad-v1.1-split"

SETTINGS = [
    "--preset", "fresh",
    "--out", "runs/default",
    "--dim", "128", "--query-maxlen", "32", "--doc-maxlen", "180", "--projection-init", "orthogonal",
    "--no-score-query-masks",
    "--form", "qpp", "--loss", "ce",
    "--batch-size", "32", "--in-batch", "--negatives", "1", "--negative-source", "tfidf", "--negative-depth", "10",
    "--lr", "1e-4", "--backbone-lr", "3e-5", "--warmup", "0.1", "--epochs", "4",
    "--amp-dtype", "bfloat16", "--dropout", "0.1", "--max-grad-norm", "1.0",
    "--eval-every", "100", "--seed", "0",
]


def reference_rr10(dev_json: Path, backbone, dev_limit) -> float:
    """RR@10 of the untrained backbone's token MaxSim, [MASK]s not scored: a full-width orthogonal projection is
    a rotation, so cosines are the backbone's own."""
    from pyterrier_fandom_colbert import ColBERT, ColBERTConfig
    from pyterrier_fandom_colbert.training import evaluate, load_collection

    dev = load_collection(str(dev_json)).limit(dev_limit)
    colbert = ColBERT.from_pretrained(backbone, config=ColBERTConfig(dim=384, score_query_masks=False))
    return evaluate(colbert, dev)["RR@10"]


def main(argv=None) -> int:
    from pyterrier_fandom_colbert.data.protocol import squad_protocol, write_training_parts
    from pyterrier_fandom_colbert.training.cli import main as train

    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--data", type=Path, default=SQUAD, help="folder with train-v1.1.json and dev-v1.1.json")
    own.add_argument("--no-reference", action="store_true", help="skip the untrained-MaxSim reference")
    own.add_argument("--parts", type=Path, default=ROOT / "runs" / "protocol",
                     help="folder the protocol's train and selection parts are written to")
    args, rest = own.parse_known_args(argv)
    if {"-h", "--help"} & set(rest):  # help at once: nothing is read or computed
        print("pipelines/train_default.py [--data DIR] [--no-reference] [--parts DIR] [pfc-train options]\n\n"
              + __doc__.strip() + "\n\nIts own options:\n  --data DIR        folder with train-v1.1.json and "
              "dev-v1.1.json\n  --no-reference    skip the untrained-MaxSim reference\n  --parts DIR       "
              "folder for the protocol's train and selection parts (default runs/protocol)\n\npfc-train options:")
        return train(["--help"])
    for name in ("train-v1.1.json", "dev-v1.1.json"):
        if not (args.data / name).is_file():
            raise SystemExit(f"{args.data / name} not found; pass --data DIR")
    split = squad_protocol(args.data / "train-v1.1.json", args.data / "dev-v1.1.json")
    train_part, selection_part = write_training_parts(split, args.parts)
    passthrough = ["--dataset", str(train_part), "--dev", str(selection_part)]
    if not args.no_reference:
        peek = argparse.ArgumentParser(add_help=False)
        peek.add_argument("--init")
        peek.add_argument("--dev-limit", type=int)
        known, _ = peek.parse_known_args(rest)
        started = time.perf_counter()
        ref = reference_rr10(selection_part, known.init, known.dev_limit)
        print(f"reference: untrained MaxSim without [MASK] scores, selection RR@10 {ref:.4f} "
              f"({time.perf_counter() - started:.1f} s)", flush=True)
    started = time.perf_counter()
    code = train(SETTINGS + passthrough + rest)
    print(f"total wall time {time.perf_counter() - started:.1f} s (loading, TF-IDF, evaluations, training)")
    return code


if __name__ == "__main__":
    sys.exit(main())
