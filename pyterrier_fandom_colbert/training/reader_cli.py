"""``pfc-train reader``: train the extractive reader on SQuAD-format questions (resumable).

    pfc-train reader --train train-v1.1.json.bz2 --out runs/reader -v          # trains, or resumes runs/reader
    pfc-train reader --out runs/reader --export                                # reader/ from the last checkpoint

The same command continues an interrupted run from its last checkpoint (settings must be the same). The finished
reader is ``<out>/reader``; fit its confidence with ``benchmarks/reader_eval.py calibrate``.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Sequence

from ..cli_errors import UserError


def build_parser() -> argparse.ArgumentParser:
    from ..reader.config import ReaderConfig
    from .reader import ReaderTrainConfig

    p = argparse.ArgumentParser(prog="pfc-train reader", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", help="SQuAD-format training questions (.json or .json.bz2)")
    p.add_argument("--out", required=True, help="run folder (state.pt, log.jsonl, reader/)")
    p.add_argument("--export", action="store_true", help="write <out>/reader from the latest checkpoint and stop")
    p.add_argument("--max-questions", type=int, help="train on the first N questions only")
    p.add_argument("--init", help="start from this trained reader folder (its layers become the top ones)")
    p.add_argument("--threads", type=int, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda when available)")
    p.add_argument("-v", "--verbose", action="store_true", help="progress bar")
    defaults = ReaderConfig()
    p.add_argument("--frozen-layers", type=int, default=defaults.frozen_layers,
                   help="base layers run unchanged (the reader trains the rest)")
    p.add_argument("--max-length", type=int, default=defaults.max_length, help="tokens per window")
    for f in dataclasses.fields(ReaderTrainConfig):
        if f.name in ("amp_dtype",):
            continue
        p.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)
    return p


def main_reader(argv: Sequence[str]) -> int:
    from ..reader.config import ReaderConfig
    from .reader import ReaderTrainConfig, export_reader, train_reader

    args = build_parser().parse_args(argv)
    if args.export:
        try:
            print(export_reader(args.out))
        except FileNotFoundError as err:
            raise UserError(str(err)) from None
        return 0
    if not args.train:
        raise UserError("give the training questions with --train (a SQuAD-format .json or .json.bz2)")
    if not Path(args.train).is_file():
        raise UserError(f"--train {args.train}: file not found (expected a SQuAD-format .json or .json.bz2)")
    try:
        config = ReaderConfig(frozen_layers=args.frozen_layers, max_length=args.max_length)
        train = ReaderTrainConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ReaderTrainConfig)
                                     if f.name != "amp_dtype"})
        folder = train_reader(args.train, args.out, config, train, max_questions=args.max_questions,
                              threads=args.threads, verbose=args.verbose, init=args.init,
                              device=args.device)
    except ValueError as err:
        raise UserError(str(err)) from None
    print(f"reader written to {folder}")
    return 0
