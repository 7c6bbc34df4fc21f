"""Index maintenance from the command line (a thin wrapper over :class:`~.artifact.ColBERTIndex`)::

    python -m pyterrier_fandom_colbert.index build-ann FOLDER                  # the default retriever's index
    python -m pyterrier_fandom_colbert.index build-ann FOLDER --faiss ivfpq --nlist 4096

``build-ann`` writes the neighbour index that end-to-end retrieval uses into ``FOLDER/faiss/`` ahead of time
(``ColBERTIndex(FOLDER).build_ann(...)``), e.g. before the folder is made read-only or shared.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Dict, List, Optional

#: FaissSpec fields settable from the command line
SPEC_OPTIONS = ("nlist", "pq_m", "pq_bits", "train_size", "seed")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyterrier_fandom_colbert.index", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build-ann", help="build the neighbour index of end-to-end retrieval now")
    build.add_argument("folder", help="a ColBERT index folder")
    build.add_argument("--faiss", default=None,
                       help="kind (exact, ivf, ivfpq, ivfpq-fs); default: what index.retriever() uses for this index")
    for option in SPEC_OPTIONS:
        build.add_argument(f"--{option.replace('_', '-')}", dest=option, type=int, default=None)
    build.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)

    options = {name: getattr(args, name) for name in SPEC_OPTIONS if getattr(args, name) is not None}
    if options and args.faiss is None:
        parser.error(f"--{', --'.join(sorted(options)).replace('_', '-')} need --faiss KIND")
    try:
        return build_ann(args.folder, args.faiss, options, verbose=not args.quiet)
    except (ValueError, OSError) as err:  # a bad option or folder: the message says what to do
        print(f"error: {err}", file=sys.stderr)
        return 2


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
