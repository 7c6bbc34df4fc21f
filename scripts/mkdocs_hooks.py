"""MkDocs hooks (mkdocs.yml: ``hooks``): the API reference pages, and links from docs/ to the rest of the repository.

The API reference has one page per part of the package, ``api/<part>.md``, written at build time from the
package's public names (``_LAZY`` and the eager imports of ``pyterrier_fandom_colbert/__init__.py``, read with
``ast``: nothing is imported), so a new public name gets its entry without editing the docs. mkdocstrings renders each
entry from the docstrings, reading the source statically as well.

Docstrings are written for ``help()`` and doctest, with reST's inline roles (``:class:`Hybrid```); the griffe
extension :class:`DocstringMarkup` (mkdocs.yml: the handler's ``extensions``) turns those roles into code and
each doctest run into a ``pycon`` block as mkdocstrings reads them, so neither is shown as mangled Markdown.

The guides also link to files outside docs/ (``../datasets/README.md``), which work on GitHub but are not pages
of the site. Each such link must name a file that exists in the repository (a missing one is a warning, which
``--strict`` turns into an error); on the site it becomes the file's path as code.
"""
from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

try:
    from griffe import Extension
except ImportError:  # the [docs] extra is not installed: the pure functions below still load (tests/test_docs_site.py)
    Extension = object

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "pyterrier_fandom_colbert"
log = logging.getLogger("mkdocs.hooks.pfc")

# part -> (page title, one line on what it holds); a public name in a part missing here fails the build
PARTS = {
    "model": ("ColBERT models", "Loading, encoding and the transformer factories of a ColBERT checkpoint."),
    "lexical": ("TF-IDF", "Terrier's TF_IDF as an artifact and its retriever."),
    "index": ("ColBERT indexes", "Building and searching ColBERT indexes, sharded or not, and neighbour search."),
    "fusion": ("Fusion", "Hybrid lexical + neural retrieval: normalisation, weighted sums, reciprocal ranks."),
    "sparse": ("Learned sparse", "SPLADE encoders, the exact learned-sparse index and BM25 through PISA."),
    "explain": ("Explanations", "Why a passage matched: R_abs, R_acc and the KDE answer span."),
    "reader": ("The reader", "Answers from passages, with a calibrated confidence."),
    "distributed": ("Ray", "Sharded builds and search on a Ray cluster (the [ray] extra)."),
    "caching": ("Caching", "PyTerrier's caches keyed by a transformer's content."),
}
ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc|const):`~?([^`]+)`")
OUT_OF_DOCS_LINK = re.compile(r"\[([^\]]*)\]\((\.\./[^)#\s]+)(#[^)\s]*)?\)")


def public_names() -> dict:
    """Public name -> the module (dotted, under the package) that defines it: the package's ``_LAZY`` table and
    the classes it imports eagerly."""
    names: dict = {}
    for node in ast.parse(module_path("").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                if not alias.name.startswith("_") and alias.name[0].isupper():
                    names[alias.asname or alias.name] = node.module
    names.update(lazy_names(""))
    return names


def module_path(module: str) -> Path:
    """The source file of a module (dotted, under the package; "" for the package itself)."""
    base = ROOT / PACKAGE / Path(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def defined_names(module: str) -> set:
    """The names a module defines or imports at its top level, read with ``ast`` (not those of its ``_LAZY``
    table, which are made on first access: see :func:`lazy_names`)."""
    names = set()
    for node in ast.parse(module_path(module).read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def lazy_names(module: str) -> dict:
    """A package's ``_LAZY`` table (public name -> the submodule that defines it), read with ``ast``; {} if none."""
    for node in ast.parse(module_path(module).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def entry(name: str, module: str) -> str:
    """One public name's mkdocstrings entry. A name its module makes on first use (a class built once its optional
    dependency is imported, through the module's ``__getattr__``) cannot be read statically: its heading is
    followed by the module's own description, which must then describe it."""
    if name in defined_names(module):
        return f"::: {PACKAGE}.{module}.{name}\n"
    return (f"## {name}\n\nMade on first use (`pfc.{name}`); from the description of its module:\n\n"
            f"::: {PACKAGE}.{module}\n    options:\n      members: false\n      show_root_heading: false\n")


def api_pages(names: dict) -> dict:
    """``api/<part>.md`` (``api/indexes.md`` for ``index``) -> its Markdown: a title, a line, and one
    mkdocstrings entry per public name."""
    by_part: dict = {}
    for name, module in names.items():
        part = module.split(".")[0]
        if part not in PARTS:
            raise ValueError(f"public name {name!r} lives in part {part!r}, which scripts/mkdocs_hooks.py's PARTS "
                             f"does not know: add it there (a title and one line) and to the nav in mkdocs.yml")
        by_part.setdefault(part, []).append((name, module))
    pages = {}
    for part, entries in by_part.items():
        title, line = PARTS[part]
        body = [f"# {title}", "", line, "", "Each name below is exported by the package: `pfc.<name>`.", ""]
        body += [entry(name, module) for name, module in entries]
        # docs/api/index.md would be the section's front page, not a page of its own
        pages[f"api/{'indexes' if part == 'index' else part}.md"] = "\n".join(body)
    return pages


def on_files(files, config):
    from mkdocs.structure.files import File

    for uri, content in api_pages(public_names()).items():
        files.append(File.generated(config, uri, content=content))
    # A folder's README.md and index.md both claim the folder's page, and MkDocs drops the README with a
    # warning: docs/experiments/ has both (its README is the log's overview, its index.md the ColBERT index's
    # log). mkdocs.yml excludes such a README, and it comes back here as the folder's overview.md.
    docs = Path(config["docs_dir"])
    for readme in sorted(docs.rglob("README.md")):
        if readme.parent != docs and (readme.parent / "index.md").is_file():
            uri = (readme.parent / "overview.md").relative_to(docs).as_posix()
            files.append(File.generated(config, uri, abs_src_path=str(readme)))
    return files


def on_page_markdown(markdown, page, config, files):
    page_dir = (Path(config["docs_dir"]) / page.file.src_uri).parent

    def replace(match: re.Match) -> str:
        text, target = match.group(1), match.group(2)
        path = (page_dir / target).resolve()
        if not path.is_relative_to(ROOT) or not path.exists():
            log.warning(f"{page.file.src_uri} links to {target!r}, which is not a file of the repository")
            return match.group(0)
        shown = path.relative_to(ROOT).as_posix()
        return f"{text} (`{shown}`)" if text.strip("`") != shown else f"`{shown}`"

    return OUT_OF_DOCS_LINK.sub(replace, markdown)


def markdown_docstring(text: str) -> str:
    """A docstring as Markdown: reST roles become code, doctest runs become ``pycon`` blocks.

    >>> markdown_docstring("Uses :class:`~a.b.Hybrid` and :func:`.f`.\\n\\n>>> 1 + 1\\n2\\n\\nDone.").splitlines()
    ['Uses `Hybrid` and `.f`.', '', '```pycon', '>>> 1 + 1', '2', '```', '', 'Done.']
    """
    def code(match: re.Match) -> str:
        target = match.group(1)
        return f"`{target.rsplit('.', 1)[-1]}`" if match.group(0).split("`")[1].startswith("~") else f"`{target}`"

    out: list = []
    indent = None  # the indent of the doctest run being read, None outside one
    for line in ROLE.sub(code, text).splitlines():
        stripped = line.lstrip()
        if indent is None and stripped.startswith(">>>"):
            indent = line[: len(line) - len(stripped)]
            out.append(f"{indent}```pycon")
        elif indent is not None and (not stripped or not line.startswith(indent)):  # a blank or dedented line
            out.append(f"{indent}```")
            indent = None
        out.append(line)
    if indent is not None:
        out.append(f"{indent}```")
    return "\n".join(out)


class DocstringMarkup(Extension):
    """The griffe extension that passes every docstring through :func:`markdown_docstring`."""

    def on_instance(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)
