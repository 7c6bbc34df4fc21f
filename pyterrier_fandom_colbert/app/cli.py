"""``pfc``: build a search folder from a wiki dump, search it in the terminal, or serve it as a local web page.

    pfc index starwars_pages_current.xml.7z starwars/        # dump (.xml/.bz2/.gz/.7z) or ir_datasets id
    pfc index --update newer_pages_current.xml.7z starwars/  # re-encode only the pages new or changed since
    pfc search starwars/ "who trained Luke?"                  # --json for scripts, --system tfidf|colbert|hybrid
    pfc serve starwars/                                       # http://127.0.0.1:8000/
    pfc build-ann starwars/colbert --faiss ivf                # a ColBERT index's neighbour index, ahead of time
    pfc compare ...  /  pfc train ...                         # the same as pfc-compare / pfc-train
"""
# Start-up is kept light: arguments, paths and the folder are checked (:func:`check_arguments`) before torch,
# transformers, FAISS or PyTerrier is imported, so bad input is refused in well under a second; each command then
# imports what it needs (``pfc search --system tfidf`` without explanations never loads torch).
from __future__ import annotations

import argparse
import contextlib
import errno
import math
import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

DELEGATED = {"compare": ("pyterrier_fandom_colbert.app.compare", "TF-IDF against ColBERT on a FANDOM-QA split "
                         "(pfc-compare)"),
             "train": ("pyterrier_fandom_colbert.training.cli", "train a ColBERT checkpoint (pfc-train)")}


def build_parser() -> argparse.ArgumentParser:
    from ..index.build_ann import add_build_ann_arguments
    from ..index.layout import FORMATS
    from ..model.colbert import CPU_PRECISIONS
    from .folder import DEFAULT_EXACT_SHARE
    from .fusion_settings import NORMALISATIONS, FusionSettings
    from .queries import DEFAULT_K, MAX_K, READ_TOP, SYSTEMS

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
    ix.add_argument("--restart", action="store_true",
                    help="encode every passage again, discarding what an interrupted build of FOLDER kept (by "
                         "default the same command resumes where it stopped)")
    ix.add_argument("--update", action="store_true",
                    help="update FOLDER (built from a dump) from the newer dump SOURCE: only pages new or changed "
                         "since are parsed and encoded, pages gone are dropped; the folder's settings, encoder and "
                         "codec are kept (after large changes, rebuild with --overwrite)")
    ix.add_argument("--force", action="store_true",
                    help="with --update: update from a dump of another wiki, or an older dump, instead of refusing")
    ix.add_argument("--compression", choices=FORMATS, default=None,
                    help="how the ColBERT index stores vectors: residual2 (default: 2 bits per dimension, searched "
                         "by centroids), residual1, residual4, or fp16 (exact vectors and a FAISS neighbour index)")
    ix.add_argument("--exact-share", type=float, default=None, metavar="S",
                    help="residual compression: the share of tokens, those the codes reconstruct worst, also stored "
                         f"exactly (default {DEFAULT_EXACT_SHARE:g}; 0: none; about +1 MiB per 1,000 passages at "
                         "0.01, docs/app.md)")
    fusion = FusionSettings()
    ix.add_argument("--weight", type=float, default=fusion.weight, metavar="W",
                    help=f"the hybrid's TF-IDF share, 0 to 1 (pfc.Hybrid; default {fusion.weight:g})")
    ix.add_argument("--normalise", choices=NORMALISATIONS, default=fusion.normalise,
                    help=f"per-query score normalisation of the hybrid (default {fusion.normalise})")
    ix.add_argument("--depth", type=int, default=fusion.depth,
                    help=f"results per system fused by the hybrid (default {fusion.depth})")
    ix.add_argument("--faiss", default=None, choices=("flat", "ivf", "ivfpq", "ivfpq-fs"),
                    help="with --compression fp16: the token neighbour search: ivf (default; above 4M tokens "
                         "ivfpq-fs), flat (exact), ivfpq, ivfpq-fs")
    ix.add_argument("--batch-size", type=int, default=64,
                    help="passages per forward pass of the encoder (default 64)")
    ix.add_argument("--precision", choices=(*CPU_PRECISIONS, "auto"), default="auto",
                    help="arithmetic of encoding on a CPU: auto (default: bfloat16 where the CPU has native bf16, "
                         "AVX512-BF16 or AMX, else float32; the folder records which), float32, bfloat16 (about 2x "
                         "faster where native; results within the codec's noise), int8 (less accurate); "
                         "docs/app.md has the figures")
    ix.add_argument("--min-words", type=int, default=None, metavar="N",
                    help="a dump's pages with fewer than N words of text and infobox facts are skipped as stubs "
                         "(default 20; 0 keeps every page with text)")
    ix.add_argument("--low-memory", action="store_true",
                    help="give memory the encoder frees back to the system at once: a lower peak that does not "
                         "grow with the build, for slower encoding (docs/folder.md has the figures); not with --ray")
    _ray_arguments(ix, "encode the passages on a Ray cluster into a sharded, compressed ColBERT index")
    ix.add_argument("--shards", type=int, default=None, help="with --ray: shards (default one per 250,000 passages)")
    ix.add_argument("--workers", type=int, default=None,
                    help="with --ray: shards built at once (default: the cluster's GPUs, or its CPUs)")
    _common(ix)

    se = sub.add_parser("search", help="search a folder from the terminal")
    se.add_argument("folder", type=Path)
    se.add_argument("query", nargs="+", help="the question (its words are joined: quotes are optional)")
    se.add_argument("--system", choices=SYSTEMS, default=None,
                    help="default hybrid (tfidf while the folder's ColBERT part is being built)")
    se.add_argument("-k", type=int, default=DEFAULT_K, help=f"results to show, 1 to {MAX_K} (default {DEFAULT_K})")
    se.add_argument("--read-top", type=int, default=READ_TOP, metavar="N",
                    help=f"the reader finds the answer in the top N results (default {READ_TOP}; 0: no reader, "
                         "the study's densest-evidence window instead)")
    se.add_argument("--json", action="store_true", help="print the results as JSON (as the web API returns them)")
    se.add_argument("--no-explain", dest="explain", action="store_false",
                    help="ranked passages only, without the answer highlight (--system tfidf then loads no model)")
    se.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                    help="colour highlights (auto: when printing to a terminal and NO_COLOR is unset)")
    _common(se)

    sv = sub.add_parser("serve", help="serve a folder as a local web page")
    sv.add_argument("folder", type=Path)
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this computer only)")
    sv.add_argument("--port", type=int, default=8000, help="default 8000")
    _ray_arguments(sv, "search a sharded ColBERT index through Ray shard actors")
    sv.add_argument("--ray-timeout", type=float, default=None, metavar="SECONDS",
                    help="with --ray: how long the shard actors may take to answer a query before it fails with an "
                         "error naming the late shards (default 30)")
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


def _ray_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help=f"{what}; ADDRESS: the cluster's head (host:port, or auto for `ray start` here); "
                             "without it RAY_ADDRESS, or a cluster started on this machine (needs the [ray] extra)")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for torch and FAISS, 1 or more (default: theirs)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars or messages")


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        import importlib

        module = importlib.import_module(DELEGATED[argv[0]][0])
        return module.main(argv[1:])
    from ..cli_errors import UserError

    args = build_parser().parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # OpenMP threads that sleep instead of spinning while they wait: on a busy machine, spinning threads made
    # each query ~6x slower (docs/app.md); it must be set before torch loads
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from ..heap import bound_kernel_caches

    bound_kernel_caches()  # a build's memory would grow with the corpus: 32 shapes each, at no measured cost
    try:
        check_arguments(args)
        if args.threads is not None:
            set_threads(args.threads)
        return {"index": _index, "search": _search, "serve": _serve, "verify": _verify,
                "build-ann": _build_ann}[args.command](args)
    except (ValueError, OSError, UserError) as err:  # QueryError is a ValueError
        print(f"pfc {args.command}: error: {error_line(err, args)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        done = f"; {args.folder} was not written" if args.command == "index" else ""
        from .folder.manifest import is_pending_folder

        if args.command == "index" and is_pending_folder(args.folder):
            done = (f"; {args.folder} answers TF-IDF searches, its ColBERT part is not built: run the same "
                    "command again to complete it")
        print(f"pfc {args.command}: interrupted{done}", file=sys.stderr)
        return 130


def error_line(err: BaseException, args: argparse.Namespace) -> str:
    """One line for a user: what failed and, for a failed write, that nothing was left half-written.

    >>> ns = argparse.Namespace(command="index", folder=Path("wiki"))
    >>> error_line(OSError(errno.ENOSPC, "No space left on device", "wiki/.tmp/x"), ns)
    'no space left on device (writing wiki/.tmp/x); nothing was written to wiki: free some space and run it again'
    """
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        where = f" (writing {err.filename})" if err.filename else ""
        line = f"no space left on device{where}"
    elif isinstance(err, OSError) and err.errno == errno.EROFS:
        line = f"{err.filename or 'the folder'} is on a read-only file system"
    elif isinstance(err, OSError) and err.strerror:
        line = f"{err.filename}: {err.strerror}" if err.filename else err.strerror
    else:
        line = _folder_remedy(err, args, str(err) or type(err).__name__)
    if isinstance(err, OSError) and args.command == "index" and err.errno in (
            errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM):
        line += f"; nothing was written to {args.folder}"
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            line += ": free some space and run it again"
    elif isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        line += "; nothing was left half-written: free some space and run it again"
    return " ".join(line.split())


#: the end of a library artifact's damage message: how to rebuild it with the library (``overwrite=True``)
_LIBRARY_REMEDY = re.compile(r"rebuild (?:the index|it) \(.*overwrite=True.*\)\s*$|rebuild the shard or the index "
                             r"\(a sharded build resumes from the shards left intact\)\s*$")


def _folder_remedy(err: BaseException, args: argparse.Namespace, line: str) -> str:
    """``line`` (the message of ``err``) with a library rebuild call at its end replaced by the ``pfc index ...
    --overwrite`` of the search folder the damaged file belongs to: an index inside a folder is rebuilt with it."""
    from ..storage import DamagedFileError

    folder = getattr(args, "folder", None) or getattr(args, "path", None)
    if not isinstance(err, DamagedFileError) or folder is None or not _LIBRARY_REMEDY.search(line):
        return line
    from .folder import is_search_folder, load_manifest
    from .folder.manifest import remedy_of

    folder = Path(folder)
    inside = next((f for f in (folder, *folder.parents) if is_search_folder(f)), None) if folder.is_dir() else None
    if inside is None or inside.resolve() not in err.path.resolve().parents:
        return line
    try:
        manifest = load_manifest(inside)
    except (ValueError, OSError):
        manifest = None
    return _LIBRARY_REMEDY.sub(remedy_of(inside, manifest), line)


def set_threads(threads: int) -> None:
    """``threads`` CPU threads for torch and FAISS (OpenMP): through the environment while torch is not loaded
    (a TF-IDF search never loads it), directly once it is."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse what can be refused before anything heavy is imported: bad numbers, a missing dump or folder, an
    existing folder without ``--overwrite``, an unwritable place, a bad query or ``-k``."""
    from ..checks import int_in_range

    if args.threads is not None:
        int_in_range("--threads", args.threads, 1, what="CPU threads")
    if args.command == "index":
        _check_index(args)
    elif args.command == "search":
        from .folder import load_manifest
        from .queries import check_k, check_query, check_read_top

        args.query = check_query(" ".join(args.query) if isinstance(args.query, list) else args.query)
        check_k(args.k)
        check_read_top(args.read_top)
        load_manifest(args.folder)
    elif args.command == "serve":
        from .folder import load_manifest

        int_in_range("--port", args.port, 0, 65535)
        if args.ray_timeout is not None:
            if not (math.isfinite(args.ray_timeout) and args.ray_timeout > 0):
                raise ValueError(f"--ray-timeout {args.ray_timeout:g}; expected a positive number of seconds")
            if args.ray is None:
                raise ValueError("--ray-timeout applies to shard actors; give --ray too (or leave --ray-timeout out)")
        load_manifest(args.folder)
        if args.ray:
            from ..distributed.cluster import check_reachable

            check_reachable(args.ray)


def _check_index(args: argparse.Namespace) -> None:
    from ..checks import int_in_range
    from ..cli_errors import require_model_path
    from .folder import is_search_folder

    int_in_range("--batch-size", args.batch_size, 1, what="passages per batch")
    int_in_range("--depth", args.depth, 1, what="results per system")
    if args.min_words is not None:
        int_in_range("--min-words", args.min_words, 0)
    if args.low_memory and args.ray is not None:
        raise ValueError("--low-memory applies to a build's own process; with --ray the passages are encoded by "
                         "Ray's workers: leave out one of them")
    if args.update:
        given = [name for name, value in (("--overwrite", args.overwrite), ("--checkpoint", args.checkpoint),
                                          ("--compression", args.compression), ("--faiss", args.faiss),
                                          ("--exact-share", args.exact_share is not None),
                                          ("--min-words", args.min_words), ("--ray", args.ray is not None))
                 if value]
        if given:
            raise ValueError(f"--update keeps the folder's own settings; leave out {', '.join(given)} (or rebuild "
                             "with --overwrite)")
    # the settings, built once by their own rule and checks (with --update, those of its fusion options)
    args.settings = _search_settings(args)
    _check_source(args.source)
    require_model_path(args.checkpoint, "--checkpoint", "a ColBERT checkpoint (or backbone) folder, or leave "
                                                        "--checkpoint out for the package's own")
    folder = Path(args.folder)
    _check_ray_and_force(args)
    if args.update:
        if not is_search_folder(folder):
            raise FileNotFoundError(f"{folder} is not a search folder to update; build one with `pfc index "
                                    f"{args.source} {folder}`")
        return
    if args.ray is not None:
        from .sharded import RayBuild

        RayBuild.check_compression(args.settings.compression.format,
                                   remedy="leave out --compression fp16, or leave out --ray for an fp16 folder")
    if folder.exists() and not (folder.is_dir() and not any(folder.iterdir())):
        if not folder.is_dir():
            raise FileExistsError(f"{folder} is a file; give a folder for the search folder")
        if not args.overwrite:
            raise FileExistsError(f"{folder} already exists; add --overwrite to replace it")
        if not is_search_folder(folder):
            raise FileExistsError(f"{folder} exists but is not a search folder; --overwrite only replaces a search "
                                  "folder, so move it or choose another folder")
    parent = folder.absolute().parent
    if not parent.is_dir():
        above = next(p for p in (parent, *parent.parents) if p.exists() or p == p.parent)
        if above.exists() and not above.is_dir():
            raise NotADirectoryError(f"{above} is a file, not a folder; choose another place for {folder.name}")
        raise FileNotFoundError(f"{parent} does not exist; create it first or choose another place for {folder.name}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, f"{parent} is read-only for you; choose another place for {folder.name}")


def _check_source(source_arg: str) -> None:
    """A dump that is a file (a folder is named as one), or an ir_datasets id with documents."""
    from .folder import DUMP_SUFFIXES

    source = Path(source_arg)
    if source.suffix.lower() in DUMP_SUFFIXES or source.exists():
        if not source.is_file() and not source.is_dir():
            raise FileNotFoundError(f"dump not found: {source} (give a MediaWiki dump .xml, .bz2, .gz or .7z, or an "
                                    "ir_datasets id such as fandom-qa/sample)")
        from ..data.dumpbytes import check_dump_file

        check_dump_file(source)  # (a folder is named as one)
    else:  # an ir_datasets id: it must exist and have documents
        from ..cli_errors import require_dataset

        require_dataset(source_arg.removeprefix("irds:"), "SOURCE", needs=("docs",))


def _check_ray_and_force(args: argparse.Namespace) -> None:
    """The Ray build's options only with ``--ray``, whose address must answer (now, not after the dump is read);
    ``--force`` only with ``--update``."""
    if args.ray is None:
        given = [name for name, value in (("--shards", args.shards), ("--workers", args.workers)) if value is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} apply to a Ray build; add --ray (or leave out {', '.join(given)})")
    elif args.ray:
        from ..distributed.cluster import check_reachable

        check_reachable(args.ray)
    if args.force and not args.update:
        raise ValueError("--force applies to --update (a dump of another wiki, or an older one); leave it out")


def artifact_kind(folder: Path) -> Optional[str]:
    """What ``verify`` checks in ``folder``: ``"colbert"`` (any storage format), ``"sharded"``, ``"tfidf"``,
    ``"splade"`` (a learned-sparse index), ``"checkpoint"``, ``"search folder"`` (a pfc folder's own files), or None."""
    from ..storage import read_json
    from .folder import MANIFEST, PASSAGES

    meta = folder / "pt_meta.json"
    if meta.is_file():
        values = read_json(meta, "artifact metadata")
        if not isinstance(values, dict):
            return None
        kinds: Dict[Tuple[Any, Any], str] = {("sparse_index", "tfidf"): "tfidf",
                                             ("sparse_index", "learned_csr"): "splade"}
        if values.get("type") == "colbert":
            return "sharded" if values.get("format") == "sharded" else "colbert"
        return kinds.get((values.get("type"), values.get("format")))
    if (folder / "colbert_config.json").is_file():
        return "checkpoint"
    if (folder / MANIFEST).exists() or (folder / PASSAGES).exists():
        # a search folder, or what is left of one: its check refuses a manifest that is missing, foreign, a folder
        # or unreadable, rather than verifying the indexes inside as if the folder were whole
        return "search folder"
    return None


def artifacts_in(path: Path) -> List[Tuple[str, Path]]:
    """(kind, folder) of every artifact ``verify`` checks at ``path``: the artifact itself, or those one level
    below it; a pfc search folder is its own files and then its TF-IDF and ColBERT indexes."""
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a folder; give an index, a checkpoint or a pfc search folder")
    kind = artifact_kind(path)
    found = [(kind, path)] if kind and kind != "search folder" else []
    if not found:
        found = [(k, sub) for sub in sorted(path.iterdir()) if sub.is_dir() and (k := artifact_kind(sub))]
        if kind == "search folder":
            found.insert(0, (kind, path))
    if not found:
        raise ValueError(f"{path} holds no ColBERT index, TF-IDF or learned-sparse index, checkpoint or search "
                         "folder (no pt_meta.json of those kinds, no colbert_config.json, no search folder "
                         "manifest.json)")
    return found


def _verify(args) -> int:
    from ..index.artifact import ColBERTIndex
    from ..index.sharded.artifact import ShardedColBERTIndex
    from ..lexical.tfidf import TfidfIndex
    from ..model.colbert import ColBERT
    from ..sparse.index import SparseIndex
    from .folder import verify_folder

    checks = {"colbert": lambda f: ColBERTIndex(f).verify(), "tfidf": lambda f: TfidfIndex(f).verify(),
              "splade": lambda f: SparseIndex(f).verify(), "checkpoint": ColBERT.verify,
              "sharded": lambda f: ShardedColBERTIndex(f).verify(), "search folder": verify_folder}
    for kind, folder in artifacts_in(args.path):
        checked = checks[kind](folder)
        if not args.quiet:
            files = checked.get("files") if isinstance(checked, dict) else None
            count = len(files) if isinstance(files, (list, tuple, dict)) else files
            pending = checked.get("pending") if isinstance(checked, dict) else None
            print(f"{folder}: {kind} intact" + (f" ({count} files checked)" if count is not None else "")
                  + (f"; ColBERT pending ({pending}): searched with TF-IDF until it is built" if pending else ""))
    return 0


def _search_settings(args: argparse.Namespace):
    """The folder's search settings from ``pfc index``'s options, by :meth:`SearchSettings.of` and its checks
    (one rule and one default per setting, as ``build_folder()`` from Python applies them)."""
    from .folder import SearchSettings
    from .fusion_settings import FusionSettings

    options = {} if args.faiss is None else {"faiss": args.faiss}
    return SearchSettings.of(args.compression or "residual2", exact_share=args.exact_share,
                             fusion=FusionSettings(weight=args.weight, normalise=args.normalise, depth=args.depth),
                             **options)


def _build_ann(args) -> int:
    from ..index.build_ann import run_build_ann

    return run_build_ann(args, prefix="pfc build-ann: error")


def _index(args) -> int:
    from .folder import build_folder, update_folder

    if args.low_memory:
        from ..heap import give_back_freed_memory

        give_back_freed_memory()  # before the encoder loads: its allocations too
    if args.update:
        report = update_folder(args.source, args.folder, batch_size=args.batch_size, verbose=not args.quiet,
                               restart=args.restart, force=args.force)
        print(report.summary())
        return 0
    settings = args.settings  # (built and checked once, by check_arguments)
    passage_config = None
    if args.min_words is not None:
        from ..data.passages import PassageConfig

        passage_config = PassageConfig(min_page_words=args.min_words)
    ray = None
    if args.ray is not None:
        from .sharded import RayBuild

        ray = RayBuild(address=args.ray or None, shards=args.shards, workers=args.workers)
    report = build_folder(args.source, args.folder, checkpoint=args.checkpoint, settings=settings,
                          overwrite=args.overwrite, batch_size=args.batch_size, verbose=not args.quiet,
                          passage_config=passage_config, ray=ray,
                          # a Ray build's workers encode in float32: auto must not record bfloat16 for them
                          cpu_precision="float32" if ray is not None and args.precision == "auto" else args.precision,
                          restart=args.restart)
    print(report.summary())
    return 0


def _search(args) -> int:
    from ..display import json_text, use_color
    from .printing import format_results
    from .search import Searcher

    searcher = Searcher(args.folder, warm=False, reader=args.read_top > 0, read_top=args.read_top)
    response = searcher.search(args.query, system=args.system, k=args.k, explain=args.explain)
    if args.json:
        print(json_text(response, indent=1))
    else:
        color = use_color(sys.stdout) if args.color == "auto" else args.color == "always"
        sys.stdout.write(format_results(response, color))
    return 0


def _serve(args) -> int:
    from .server import bind, exposure_warning

    sock = bind(args.host, args.port)  # a busy port is refused before anything is loaded
    if exposure_warning(args.host):  # every computer on the network can reach it: say so, quiet or not
        print(f"pfc serve: {exposure_warning(args.host)}", file=sys.stderr, flush=True)
    try:
        from .live import ServedFolder
        from .server import serve

        if not args.quiet:
            print(f"loading {args.folder} …", file=sys.stderr, flush=True)
        timeout = {} if args.ray_timeout is None else {"ray_timeout_s": args.ray_timeout}  # else the Searcher's
        served = ServedFolder(args.folder, ray=args.ray, **timeout)
        if not args.quiet:
            shown = f"[{args.host}]" if ":" in args.host else args.host
            port = sock.getsockname()[1]
            print(f"serving {served.searcher.manifest.name} at http://{shown}:{port}/ (Ctrl-C stops)",
                  file=sys.stderr, flush=True)
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn has shut down cleanly; Ctrl-C only ends the command
            serve(served, args.host, args.port, sock=sock)
        if not args.quiet:
            print("pfc serve: stopped", file=sys.stderr)
        return 0
    finally:
        sock.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
