"""Command-line tools report what the user can fix in one line, not a traceback.

A tool's ``main(argv)`` runs its work through :func:`run`. What the user can fix (an unknown dataset id, a missing
dump or checkpoint, a bad metric name, an output that already exists) is raised as :class:`UserError` with a
message that says what to do, or arrives as an ``OSError`` (a missing or unreadable file, a folder where a file
was expected, a dump that cannot be found or downloaded). :func:`run` prints ``<prog>: error: <message>`` on
stderr and returns exit status 2; with ``--debug`` on the command line it prints the traceback first. Any other
exception is a bug and keeps its traceback. Ctrl-C prints one line and returns 130.

The checks shared by the tools (:func:`require_dataset`, :func:`require_model_path`) live here too, and
:func:`require_extra`: an optional part of the package used without its extra is a :class:`MissingExtra` (a
UserError and a ModuleNotFoundError) whose one line names the extra to install. This module
is imported by the tools before anything heavy: it imports nothing from the package, and ir_datasets only inside
:func:`require_dataset`.
"""
from __future__ import annotations

import argparse
import importlib
import re
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Callable, Optional, Sequence

__all__ = ["EXIT_USER_ERROR", "UserError", "add_debug_flag", "require_dataset", "require_model_path", "run"]

#: exit status of a user error (argparse uses the same for bad options)
EXIT_USER_ERROR = 2


class UserError(Exception):
    """An error the user can fix; the message says how."""


#: the distribution name behind ``pip install '<DISTRIBUTION>[extra]'``
DISTRIBUTION = "pyterrier-fandom-colbert"


class MissingExtra(UserError, ModuleNotFoundError):
    """An optional dependency is not installed; the message names the extra that installs it."""


def require_extra(module: str, extra: str, what: str) -> ModuleType:
    """``import module``, or a :class:`MissingExtra` in one line: ``what`` needs ``module``, and the ``pip
    install`` command of the package's ``extra`` that brings it.

    >>> require_extra("json", "app", "pfc serve").__name__
    'json'
    >>> try:
    ...     require_extra("no_such_module_x", "app", "pfc serve")
    ... except MissingExtra as err:
    ...     print(err)
    pfc serve needs no_such_module_x, which is not installed: pip install 'pyterrier-fandom-colbert[app]'
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:  # not installed, or its import blocked (sys.modules[name] = None)
        if err.name is not None and err.name.split(".")[0] != module.split(".")[0]:
            raise  # the module is there but one of its own imports failed: not a missing extra
        raise MissingExtra(f"{what} needs {module}, which is not installed: pip install "
                           f"'{DISTRIBUTION}[{extra}]'", name=module) from None


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true", help="on an error, print the full traceback")


def _message(err: BaseException) -> str:
    if isinstance(err, UserError):
        return str(err)
    if isinstance(err, OSError) and err.strerror and err.filename:  # FileNotFoundError(2, "No such file", "x")
        return f"{err.filename}: {err.strerror}"
    text = str(err) or type(err).__name__
    return text if isinstance(err, OSError) and type(err) is not OSError else f"{type(err).__name__}: {text}"


def run(main: Callable[[Sequence[str]], int], argv: Optional[Sequence[str]], prog: str) -> int:
    """``main(argv)`` (``argv`` None: ``sys.argv[1:]``), with user errors printed as one line (module docstring).

    >>> def main(argv):
    ...     raise UserError("--metrics is empty: give names such as RR@10")
    >>> import contextlib, io
    >>> with contextlib.redirect_stderr(io.StringIO()) as err:
    ...     status = run(main, [], "pfc-demo")
    >>> status, err.getvalue()
    (2, 'pfc-demo: error: --metrics is empty: give names such as RR@10\\n')
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return main(argv)
    except (UserError, OSError) as err:
        if "--debug" in argv:
            traceback.print_exc()
        line = " ".join(_message(err).split())  # one line, whatever the message holds
        hint = "" if isinstance(err, UserError) or "--debug" in argv else " (--debug shows the traceback)"
        print(f"{prog}: error: {line}{hint}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        if "--debug" in argv:
            traceback.print_exc()
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


_HUB_ID_RE = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def require_model_path(value: Optional[str], flag: str, what: str) -> None:
    """Refuse a ``value`` that names no folder and cannot be a Hugging Face hub id (``org/name``) either (that one
    is left to the loader, which says whether the hub has it).

    >>> try:
    ...     require_model_path("/no/such/folder", "--init", "a checkpoint folder")
    ... except UserError as err:
    ...     print(err)
    --init /no/such/folder: no such folder; give a checkpoint folder
    """
    if value is None or Path(value).expanduser().exists() or _HUB_ID_RE.fullmatch(value):
        return
    raise UserError(f"{flag} {value}: no such folder; give {what}")


def require_dataset(name: str, flag: str, needs: Sequence[str] = ("queries", "qrels"), files: bool = False) -> None:
    """Refuse an ir_datasets id that is not registered (after the package registered ``fandom-qa/...``), or whose
    dataset lacks what the tool needs (``"docs"``, ``"queries"``, ``"qrels"``), naming some that would do
    (``files``: the tool also takes a SQuAD-format .json file, so say so)."""
    import ir_datasets  # fandom-qa/... are registered: importing this module imported the package first

    def has(dataset_id: str, part: str) -> bool:
        return getattr(ir_datasets.registry[dataset_id], f"has_{part}")()

    fitting = sorted(n for n in ir_datasets.registry if n.startswith("fandom-qa/") and
                     all(has(n, part) for part in needs))
    examples = f"such as {', '.join(fitting[:4])}{', …' if len(fitting) > 4 else ''}"
    if name not in ir_datasets.registry:
        raise UserError(f"{flag} {name}: unknown dataset; give an ir_datasets id ({examples})"
                        + (" or a SQuAD-format .json file" if files else ""))
    lacking = [part for part in needs if not has(name, part)]
    if lacking:
        raise UserError(f"{flag} {name}: the dataset has no {' or '.join(lacking)}; give one that has, {examples}")
