"""``pfc-train``: train a ColBERT checkpoint from the command line.

    pfc-train --dataset fandom-qa/sample/train --dev fandom-qa/sample/dev --out runs/sample
    pfc-train --dataset train-v1.1.json --dev dev-v1.1.json --preset fresh --out runs/squad
    pfc-train --selfsup fandom-qa/witcher --init runs/squad/best --dev ... --out runs/witcher-adapted
    pfc-train --selfsup mywiki_pages_current.xml.7z --init runs/squad/best --dev ... --out runs/mywiki-adapted
    pfc-train reader --train train-v1.1.json.bz2 --out runs/reader -v    # the extractive reader (reader_cli.py)

Defaults are the study's settings (``--preset study``: lr 3e-6, 9 TF-IDF negatives, warm-up over the first of
4 epochs). That learning rate suits a model already trained as ColBERT (``--init <checkpoint>``); a fresh
projection over a sentence encoder needs about 1e-4 (``--preset fresh``). Every TrainConfig field has an option
(``--lr``, ``--backbone-lr``, ``--negatives`` …) that overrides the preset.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import typing
from pathlib import Path
from typing import List, Optional, Sequence

from ..cli_errors import UserError, add_debug_flag, require_dataset, require_model_path, run

_HELP = {
    "form": "qpp ⟨q, d+, d-…⟩ or qqp ⟨q+, q-, d+⟩", "loss": "ce (N_q-scaled cross-entropy) or mse",
    "lr": "learning rate of the projection head", "backbone_lr": "learning rate of the encoder (default: --lr)",
    "warmup": "warm-up fraction of all steps", "negatives": "QPP negatives per example",
    "negative_source": "tfidf, colbert (mined by --negative-checkpoint, default the starting model) or random",
    "negative_depth": "sample TF-IDF/ColBERT negatives from this many top passages",
    "negative_checkpoint": "ColBERT checkpoint that mines the colbert negatives (default: the starting model)",
    "freeze_layers": "freeze the embeddings and this many lower layers, caching their outputs (BERT backbones; "
    "several times faster on a CPU)",
    "in_batch": "score every candidate of the batch", "distill_weight": "weight of KL distillation from "
    "--teacher (0: off)", "distill_temperature": "teacher scores are divided by this (bi-encoder cosines: 0.05; "
    "hybrid z-scores: about 1)", "teacher": "biencoder (the backbone's own cosine) or hybrid (TF-IDF and a ColBERT, "
    "z-scored and weighted as pfc.Hybrid)", "teacher_checkpoint": "the hybrid teacher's ColBERT (default: the "
    "starting model)", "teacher_weight": "the hybrid teacher's lexical share (default: pfc.Hybrid's)",
    "teacher_depth": "the hybrid teacher fuses each system's top N per question",
    "amp_dtype": "autocast dtype on GPU: bfloat16, float16 or none",
    "eval_every": "optimizer steps between dev evaluations (0: every epoch)",
}


def _optional(tp):
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if args else tp


def _none_or(kind):
    def parse(text: str):
        return None if text.lower() == "none" else kind(text)
    parse.__name__ = kind.__name__
    return parse


def build_parser() -> argparse.ArgumentParser:
    from ..model.similarity import SIMILARITIES
    from .trainer import PRESETS, TrainConfig

    p = argparse.ArgumentParser(prog="pfc-train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    data = p.add_argument_group("data")
    data.add_argument("--dataset", action="append", default=[], metavar="ID_OR_JSON",
                      help="training questions: an ir_datasets id with queries and qrels, or a SQuAD-format .json "
                           "(repeatable: collections are merged)")
    data.add_argument("--selfsup", action="append", default=[], metavar="DUMP_OR_ID",
                      help="also train on self-supervised pairs (title+heading, held-out sentence) from this corpus: "
                           "a MediaWiki/Fandom dump file (.xml, .bz2, .gz, .7z) or an ir_datasets id with docs "
                           "(repeatable)")
    data.add_argument("--selfsup-max-passages", type=int, default=None)
    data.add_argument("--dev", metavar="ID_OR_JSON", help="dev questions for model selection (RR@10, exhaustive)")
    data.add_argument("--limit", type=int, help="use only the first N training questions")
    data.add_argument("--dev-limit", type=int, help="evaluate only the first N dev questions")
    p.add_argument("--out", required=True, help="run folder (checkpoints, best/, history.json)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--init", help="start from this ColBERT checkpoint or backbone folder (default: a fresh "
                                  "ColBERT over all-MiniLM-L6-v2)")
    p.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    p.add_argument("-v", "--verbose", action="store_true", help="progress bars")
    add_debug_flag(p)
    p.add_argument("--preset", choices=sorted(PRESETS), default="study", help="base settings (default: study)")
    model = p.add_argument_group("fresh model (ignored with a checkpoint --init)")
    model.add_argument("--dim", type=int, default=128)
    model.add_argument("--query-maxlen", type=int, default=32)
    model.add_argument("--doc-maxlen", type=int, default=180)
    model.add_argument("--similarity", default="cosine", choices=list(SIMILARITIES))
    model.add_argument("--score-query-masks", action=argparse.BooleanOptionalAction, default=False)
    model.add_argument("--projection-init", default="orthogonal")
    train = p.add_argument_group("training (override the preset)")
    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        kind = _optional(hints[f.name])
        if kind is bool:
            train.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=_HELP.get(f.name))
        else:
            parse = _none_or(kind) if kind is not hints[f.name] else kind
            train.add_argument(flag, type=parse, default=None, help=_HELP.get(f.name))
    return p


def _load_data(args):
    from .examples import QAData, load_collection
    from .selfsup import SelfSupConfig, selfsup_from_source

    if not args.dataset and not args.selfsup:
        raise UserError("give training data with --dataset and/or --selfsup")
    parts = [_collection(load_collection, s, "--dataset").limit(args.limit) for s in args.dataset]
    parts += [selfsup_from_source(s, SelfSupConfig(max_passages=args.selfsup_max_passages)) for s in args.selfsup]
    dev = _collection(load_collection, args.dev, "--dev").limit(args.dev_limit) if args.dev else None
    return QAData.concat(parts), dev


def _collection(load, value: str, flag: str):
    """``load(value)``; a file that is not SQuAD format (not JSON, or JSON of another shape) is a user error
    naming it, not a traceback."""
    try:
        return load(value)
    except (ValueError, KeyError, TypeError) as err:
        if not Path(value).is_file():
            raise
        why = f"missing {err}" if isinstance(err, KeyError) else str(err).replace(f"{value}: ", "")
        if not why.startswith("not SQuAD format"):
            why = f"not a SQuAD-format .json file ({why})"
        raise UserError(f"{flag} {value}: {why}") from None


def _check_collection(value: str, flag: str) -> None:
    """A SQuAD-format .json file that exists, or an ir_datasets id with questions and judgements."""
    path = Path(value)
    if path.suffix == ".json" or path.exists():
        if path.is_dir():
            raise UserError(f"{flag} {value}: is a folder; give a SQuAD-format .json file or an ir_datasets id")
        if not path.is_file():
            raise UserError(f"{flag} {value}: no such SQuAD-format .json file")
        if path.suffix.lower() != ".json":
            raise UserError(f"{flag} {value}: neither a SQuAD-format .json file nor an ir_datasets id (such as "
                            "fandom-qa/sample/train)")
    else:
        require_dataset(value, flag, files=True)


def _check_args(args) -> None:
    """Everything that can be refused before data and model are loaded."""
    from .selfsup import looks_like_dump
    from .trainer import STATE_FILE

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file; give a folder for the run (it is created if missing)")
    holds_run = (out / STATE_FILE).exists()
    if args.resume and not holds_run:
        raise UserError(f"--resume: {out} holds no training run to continue (no {STATE_FILE}); leave out --resume "
                        "to start a new run there")
    if holds_run and not args.resume:
        raise UserError(f"--out {out} already holds a training run; add --resume to continue it, or give another "
                        "--out")
    for value in args.dataset:
        _check_collection(value, "--dataset")
    if args.dev:
        _check_collection(args.dev, "--dev")
    for value in args.selfsup:
        if not looks_like_dump(value):
            require_dataset(value, "--selfsup", needs=("docs",))
        elif not Path(value).is_file():
            raise UserError(f"--selfsup {value}: no such dump file (give a MediaWiki/Fandom dump .xml, .bz2, .gz "
                            "or .7z, or an ir_datasets id with docs)")
    if args.negative_checkpoint is not None:
        require_model_path(args.negative_checkpoint, "--negative-checkpoint", "a ColBERT checkpoint folder that mines "
                                                                             "the colbert negatives")
        if args.negative_source != "colbert":
            raise UserError("--negative-checkpoint is only used with --negative-source colbert")
    if args.teacher_checkpoint is not None:
        require_model_path(args.teacher_checkpoint, "--teacher-checkpoint", "a ColBERT checkpoint folder for the "
                                                                           "hybrid teacher")
    require_model_path(args.init, "--init", "a ColBERT checkpoint or transformers model folder, or leave --init "
                                            "out for a fresh ColBERT over all-MiniLM-L6-v2")


def main(argv: Optional[List[str]] = None) -> int:
    """The ``pfc-train`` command (user errors: one line on stderr, exit status 2; ``--debug``: traceback)."""
    return run(_main, argv, "pfc-train")


def _main(argv: Sequence[str]) -> int:
    if list(argv[:1]) == ["reader"]:
        from .reader_cli import main_reader

        return main_reader(argv[1:])
    from ..model.colbert import ColBERT
    from ..model.config import ColBERTConfig
    from ..model.formats import detect
    from ..storage import write_json
    from .trainer import PRESETS, Trainer

    args = build_parser().parse_args(argv)
    _check_args(args)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(PRESETS["study"])
                 if getattr(args, f.name) is not None}
    try:
        config = PRESETS[args.preset].replace(**overrides)
    except ValueError as err:  # a setting out of range: the user's, said in one line
        raise UserError(str(err)) from err
    train, dev = _load_data(args)
    if args.init and detect(args.init) is not None:
        colbert = ColBERT.from_pretrained(args.init, device=args.device, verbose=args.verbose)
    else:
        cb = ColBERTConfig(query_maxlen=args.query_maxlen, doc_maxlen=args.doc_maxlen, dim=args.dim,
                           similarity=args.similarity, score_query_masks=args.score_query_masks,
                           projection_init=args.projection_init)
        colbert = ColBERT.from_pretrained(args.init, config=cb, seed=config.seed, device=args.device,
                                          verbose=args.verbose)
    print(f"training on {len(train.pairs())} (question, passage) pairs, {len(train.docnos)} passages; "
          f"device {colbert.device.type}; {json.dumps(config.to_dict(), sort_keys=True)}", flush=True)
    try:
        trainer = Trainer(colbert, config, train, args.out, dev=dev, resume=args.resume, verbose=args.verbose)
    except ValueError as err:  # settings this model cannot take (e.g. --freeze-layers beyond its depth)
        raise UserError(str(err)) from err
    result = trainer.train()
    summary = {"start": result.start, "best": result.best, "best_step": result.best_step, "steps": result.steps,
               "train_seconds": round(result.seconds, 1),
               "pairs_per_second": round(result.examples_per_second, 2), "device": colbert.device.type}
    write_json(Path(args.out) / "result.json", summary)
    if result.start is not None:
        print(f"dev {_metric(result.start)} at the start; best {_metric(result.best)} at step {result.best_step} "
              f"of {result.steps}")
        if result.best_step == 0:
            print("warning: no trained checkpoint beat the starting model; best/ holds the start", file=sys.stderr)
    print(f"trained {result.steps} steps in {result.seconds:.1f} s ({result.examples_per_second:.1f} pairs/s); "
          f"best checkpoint: {Path(args.out) / 'best'}")
    return 0


def _metric(m) -> str:
    return ", ".join(f"{k} {v:.4f}" for k, v in m.items())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
