"""``pfc``: build a search folder from a wiki dump, search it in the terminal, or serve it as a local web page.

    pfc index starwars_pages_current.xml.7z starwars/        # dump (.xml/.bz2/.gz/.7z) or ir_datasets id
    pfc index --update newer_pages_current.xml.7z starwars/  # re-encode only the pages new or changed since
    pfc search starwars/ "who trained Luke?"                  # --json for scripts, --system tfidf|colbert|hybrid
    pfc serve starwars/                                       # http://127.0.0.1:8000/
    pfc build-ann starwars/colbert --faiss ivf                # a ColBERT index's neighbour index, ahead of time
    pfc compare ...  /  pfc train ...                         # the same as pfc-compare / pfc-train
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

DELEGATED = {"compare": ("pyterrier_fandom_colbert.__main__", "TF-IDF against ColBERT on a FANDOM-QA split "
                         "(pfc-compare)"),
             "train": ("pyterrier_fandom_colbert.training.cli", "train a ColBERT checkpoint (pfc-train)")}


def build_parser() -> argparse.ArgumentParser:
    from ..index.__main__ import add_build_ann_arguments
    from ..index.layout import FORMATS
    from .hybrid import METHODS
    from .search import MAX_K, SYSTEMS

    ap = argparse.ArgumentParser(prog="pfc", description="Build a search folder from a wiki dump, search it in the "
                                 "terminal, or serve it as a local web page.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ix = sub.add_parser("index", help="build a search folder from a wiki dump or an ir_datasets id",
                        description="Build everything a search needs in FOLDER: passages with page titles and "
                                    "URLs, a TF-IDF index, a ColBERT index and the fusion settings. With --update, "
                                    "bring a folder built from a dump up to date with a newer dump of that wiki.")
    ix.add_argument("source", help="MediaWiki dump (.xml, .bz2, .gz, .7z) or ir_datasets id (e.g. fandom-qa/sample)")
    ix.add_argument("folder", type=Path, help="the search folder to create")
    ix.add_argument("--checkpoint", default=None,
                    help="ColBERT checkpoint (or backbone) folder; default: the package's trained checkpoint")
    ix.add_argument("--overwrite", action="store_true", help="replace an existing search folder")
    ix.add_argument("--update", action="store_true",
                    help="update FOLDER (built from a dump) from the newer dump SOURCE: only pages new or changed "
                         "since are parsed and encoded, pages gone are dropped; the folder's settings, encoder and "
                         "codec are kept (after large changes, rebuild with --overwrite)")
    ix.add_argument("--compression", choices=FORMATS, default=None,
                    help="how the ColBERT index stores vectors: residual2 (default: 2 bits per dimension, searched "
                         "by centroids), residual1, residual4, or fp16 (exact vectors and a FAISS neighbour index)")
    ix.add_argument("--fusion", choices=METHODS, default="linear", help="how the hybrid fuses (default linear)")
    ix.add_argument("--weights", type=float, nargs=2, metavar=("TFIDF", "COLBERT"), default=(0.5, 0.5),
                    help="hybrid weights (default 0.5 0.5)")
    ix.add_argument("--depth", type=int, default=100, help="results per system fused by the hybrid (default 100)")
    ix.add_argument("--faiss", default=None, choices=("flat", "ivf", "ivfpq", "ivfpq-fs"),
                    help="with --compression fp16: the token neighbour search: ivf (default; above 4M tokens "
                         "ivfpq-fs), flat (exact), ivfpq, ivfpq-fs")
    ix.add_argument("--batch-size", type=int, default=256, help="passages encoded per batch")
    ix.add_argument("--min-words", type=int, default=None, metavar="N",
                    help="a dump's pages with fewer than N words of text and infobox facts are skipped as stubs "
                         "(default 20; 0 keeps every page with text)")
    _common(ix)

    se = sub.add_parser("search", help="search a folder from the terminal")
    se.add_argument("folder", type=Path)
    se.add_argument("query", help="the question (quote it)")
    se.add_argument("--system", choices=SYSTEMS, default="hybrid", help="default hybrid")
    se.add_argument("-k", type=int, default=5, help=f"results to show, 1 to {MAX_K} (default 5)")
    se.add_argument("--json", action="store_true", help="print the results as JSON (as the web API returns them)")
    se.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                    help="colour highlights (auto: when printing to a terminal and NO_COLOR is unset)")
    _common(se)

    sv = sub.add_parser("serve", help="serve a folder as a local web page")
    sv.add_argument("folder", type=Path)
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this computer only)")
    sv.add_argument("--port", type=int, default=8000, help="default 8000")
    _common(sv)

    ve = sub.add_parser("verify", help="check every file of an index, a checkpoint or a search folder against the "
                        "sizes and checksums recorded when it was written")
    ve.add_argument("path", type=Path, help="a ColBERT index, a TF-IDF index, a checkpoint or a pfc search folder")
    _common(ve)

    ba = sub.add_parser("build-ann", help="build the neighbour index of a ColBERT index's end-to-end retrieval now",
                        description="Write the neighbour index that end-to-end retrieval uses into FOLDER/faiss/ "
                                    "ahead of time (e.g. before the folder is made read-only or shared); the same "
                                    "as python -m pyterrier_fandom_colbert.index build-ann.")
    add_build_ann_arguments(ba, quiet=False)
    _common(ba)

    for name, (_, help_text) in DELEGATED.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return ap


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars or messages")


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        import importlib

        module = importlib.import_module(DELEGATED[argv[0]][0])
        return module.main(argv[1:])
    args = build_parser().parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # OpenMP threads that sleep instead of spinning while they wait: on a busy machine, spinning threads made
    # each query ~6x slower (docs/app.md); it must be set before torch loads
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    from .search import QueryError

    try:
        return {"index": _index, "search": _search, "serve": _serve, "verify": _verify,
                "build-ann": _build_ann}[args.command](args)
    except (QueryError, FileNotFoundError, FileExistsError, ValueError) as err:
        print(f"pfc {args.command}: error: {err}", file=sys.stderr)
        return 2


def artifacts_in(path: Path) -> List[Tuple[str, Path]]:
    """(kind, folder) of every artifact ``verify`` checks at ``path``: the artifact itself, or those one level
    below it (a pfc search folder holds a TF-IDF and a ColBERT index)."""
    def kind(folder: Path) -> Optional[str]:
        meta = folder / "pt_meta.json"
        if meta.is_file():
            from ..storage import read_json

            values = read_json(meta, "artifact metadata")
            from ..index.layout import FORMATS

            kinds: Dict[Tuple[Any, Any], str] = {("colbert", f): "colbert" for f in FORMATS}
            kinds[("sparse_index", "tfidf")] = "tfidf"
            return kinds.get((values.get("type"), values.get("format"))) if isinstance(values, dict) else None
        if (folder / "colbert_config.json").is_file():
            return "checkpoint"
        return None

    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a folder; give an index, a checkpoint or a pfc search folder")
    found = [(k, path)] if (k := kind(path)) else [(k, sub) for sub in sorted(path.iterdir())
                                                     if sub.is_dir() and (k := kind(sub))]
    if not found:
        raise ValueError(f"{path} holds no ColBERT index, TF-IDF index or checkpoint (no pt_meta.json of those "
                         "kinds, no colbert_config.json)")
    return found


def _verify(args) -> int:
    from ..index.artifact import ColBERTIndex
    from ..lexical.tfidf import TfidfIndex
    from ..model.colbert import ColBERT

    for kind, folder in artifacts_in(args.path):
        checked = {"colbert": lambda f: ColBERTIndex(f).verify(), "tfidf": lambda f: TfidfIndex(f).verify(),
                   "checkpoint": ColBERT.verify}[kind](folder)
        if not args.quiet:
            files = checked.get("files") if isinstance(checked, dict) else None
            count = len(files) if isinstance(files, (list, tuple, dict)) else files
            print(f"{folder}: {kind} intact" + (f" ({count} files checked)" if count is not None else ""))
    return 0


def _build_ann(args) -> int:
    from ..index.__main__ import run_build_ann

    return run_build_ann(args, prefix="pfc build-ann: error")


def _index(args) -> int:
    from .folder import SearchSettings, build_folder, update_folder
    from .hybrid import FusionSettings

    if args.update:
        given = [name for name, value in (("--overwrite", args.overwrite), ("--checkpoint", args.checkpoint),
                                          ("--compression", args.compression), ("--faiss", args.faiss),
                                          ("--min-words", args.min_words)) if value]
        if given:
            raise ValueError(f"--update keeps the folder's own settings; leave out {', '.join(given)} (or rebuild "
                             "with --overwrite)")
        try:
            report = update_folder(args.source, args.folder, batch_size=args.batch_size, verbose=not args.quiet)
        except KeyboardInterrupt:
            print(f"pfc index: interrupted; {args.folder} was left as it was", file=sys.stderr)
            return 130
        print(report.summary())
        return 0
    compression = args.compression or "residual2"
    if args.faiss is not None and compression != "fp16":
        raise ValueError(f"--faiss {args.faiss} needs --compression fp16: a {compression} index is searched by its "
                         "centroids, with no neighbour index")
    settings = SearchSettings(fusion=FusionSettings(method=args.fusion, weights=tuple(args.weights),
                                                    depth=args.depth), compression=compression,
                              faiss=args.faiss or "ivf")
    passage_config = None
    if args.min_words is not None:
        from ..data.passages import PassageConfig

        if args.min_words < 0:
            raise ValueError(f"--min-words must be >= 0, got {args.min_words}")
        passage_config = PassageConfig(min_page_words=args.min_words)
    try:
        report = build_folder(args.source, args.folder, checkpoint=args.checkpoint, settings=settings,
                              overwrite=args.overwrite, batch_size=args.batch_size, verbose=not args.quiet,
                              passage_config=passage_config)
    except KeyboardInterrupt:
        print(f"pfc index: interrupted; nothing was written to {args.folder}", file=sys.stderr)
        return 130
    print(report.summary())
    return 0


def _search(args) -> int:
    from ..display import use_color
    from .search import Searcher, format_results

    searcher = Searcher(args.folder, warm=False)
    response = searcher.search(args.query, system=args.system, k=args.k)
    if args.json:
        print(json.dumps(response, ensure_ascii=False, indent=1))
    else:
        color = use_color(sys.stdout) if args.color == "auto" else args.color == "always"
        sys.stdout.write(format_results(response, color))
    return 0


def _serve(args) -> int:
    from .search import Searcher
    from .server import serve

    if not args.quiet:
        print(f"loading {args.folder} …", file=sys.stderr, flush=True)
    searcher = Searcher(args.folder)
    if not args.quiet:
        shown = f"[{args.host}]" if ":" in args.host else args.host
        print(f"serving {searcher.manifest.name} at http://{shown}:{args.port}/ (Ctrl-C stops)", file=sys.stderr,
              flush=True)
    serve(searcher, args.host, args.port)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
