"""Index maintenance from the command line (a thin wrapper over :class:`~.artifact.ColBERTIndex`)::

    pfc build-ann FOLDER                                    # the default retriever's index
    pfc build-ann FOLDER --faiss ivfpq --nlist 4096
    python -m pyterrier_fandom_colbert.index build-ann FOLDER    # the same command, under its older name

``build-ann`` writes the neighbour index that end-to-end retrieval uses into ``FOLDER/faiss/`` ahead of time
(``ColBERTIndex(FOLDER).build_ann(...)``), e.g. before the folder is made read-only or shared. ``pfc build-ann``
and this module share :func:`add_build_ann_arguments` and :func:`run_build_ann`.
"""
from __future__ import annotations

import argparse
import errno
import sys
import time
from typing import Dict, List, Optional

#: FaissSpec fields settable from the command line
SPEC_OPTIONS = ("nlist", "pq_m", "pq_bits", "train_size", "seed")


def add_build_ann_arguments(parser: argparse.ArgumentParser, *, quiet: bool = True) -> None:
    """The arguments of ``build-ann`` (``quiet=False`` leaves out ``--quiet`` for a parser that has its own)."""
    parser.add_argument("folder", help="a ColBERT index folder")
    parser.add_argument("--faiss", default=None,
                        help="kind (exact, ivf, ivfpq, ivfpq-fs); default: what index.retriever() uses for this "
                             "index")
    for option in SPEC_OPTIONS:
        parser.add_argument(f"--{option.replace('_', '-')}", dest=option, type=int, default=None)
    if quiet:
        parser.add_argument("--quiet", action="store_true", help="no progress bars")


def spec_options(args: argparse.Namespace) -> Dict[str, int]:
    """The FaissSpec settings given on the command line; settings without ``--faiss`` are a ValueError."""
    options = {name: getattr(args, name) for name in SPEC_OPTIONS if getattr(args, name) is not None}
    if options and args.faiss is None:
        raise ValueError(f"--{', --'.join(sorted(options)).replace('_', '-')} need --faiss KIND")
    return options


def run_build_ann(args: argparse.Namespace, prefix: str = "error") -> int:
    """Build what ``args`` ask for; a bad option or folder prints ``prefix: message`` and returns 2."""
    try:
        return build_ann(args.folder, args.faiss, spec_options(args), verbose=not args.quiet)
    except (ValueError, OSError) as err:  # a bad option or folder, a full disk: the message says what to do
        if isinstance(err, OSError) and err.strerror:
            line = f"{err.filename}: {err.strerror}" if err.filename else err.strerror
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                line += "; nothing was left half-written: free some space and run it again"
        else:
            line = str(err)
        print(f"{prefix}: {' '.join(line.split())}", file=sys.stderr)
        return 2


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyterrier_fandom_colbert.index", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build-ann", help="build the neighbour index of end-to-end retrieval now")
    add_build_ann_arguments(build)
    args = parser.parse_args(argv)
    try:
        spec_options(args)
    except ValueError as err:
        parser.error(str(err))
    return run_build_ann(args)


def build_ann(folder: str, kind: Optional[str], options: Dict[str, int], verbose: bool) -> int:
    from .ann import FaissSpec
    from .artifact import ColBERTIndex

    started = time.perf_counter()
    target = ColBERTIndex(folder).build_ann(FaissSpec(kind, **options) if kind else None, verbose=verbose)
    if target is None:
        print(f"{folder}: exact search needs no neighbour index; nothing written")
    else:
        print(f"{target} ({target.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
