"""The documentation: the site builds with warnings as errors, and the guides' examples are checked.

Code blocks in the guides (docs/**/*.md) and the README come in two kinds, told apart by the fence's language:

- ```` ```pycon ````: an interactive session (``>>>`` prompts and their output) that needs nothing but the package
  and tiny data made in the block; it runs here as a doctest, the blocks of one file sharing one namespace in
  order, so a later block may use an earlier one's names.
- ```` ```python ````: shown, not run (it needs a checkpoint, an index, a dump or real data). It must still
  parse, and every ``pfc.<name>`` and ``from pyterrier_fandom_colbert... import`` it uses must exist, so a
  renamed part cannot leave a stale example behind.
"""
import ast
import doctest
import functools
import importlib.util
import logging
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import pyterrier_fandom_colbert as pfc

ROOT = Path(__file__).resolve().parents[1]
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.S | re.M)
FLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS


@functools.cache
def hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def blocks(page: Path, language: str):
    """(line of the block's first line, its text) for each fenced block of ``language`` in ``page``."""
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start(2)) + 1, m.group(2)) for m in FENCE.finditer(text) if m.group(1) == language]


def test_fence_reader_finds_blocks_by_language_and_line():
    page = "# t\n\n```python\nx = 1\n```\n\ntext\n```pycon\n>>> 1\n1\n```\n```bash\nls\n```\n"
    found = [(m.group(1), m.group(2)) for m in FENCE.finditer(page)]
    assert found == [("python", "x = 1\n"), ("pycon", ">>> 1\n1\n"), ("bash", "ls\n")]


RUN = [p for p in PAGES if blocks(p, "pycon")]


def test_some_guides_have_examples_that_run():
    assert {p.name for p in RUN} >= {"fusion.md", "reader.md"}


@pytest.mark.parametrize("page", RUN, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_guide_sessions_run_as_doctests(page):
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=FLAGS)
    namespace: dict = {}
    for line, text in blocks(page, "pycon"):
        assert ">>>" in text, f"{page.name}:{line}: a pycon block without a >>> prompt"
        test = parser.get_doctest(text, namespace, f"{page.name}:{line}", str(page), line - 1)
        runner.run(test, clear_globs=False)
        namespace = test.globs
    assert runner.summarize(verbose=False).failed == 0, f"an example of {page.name} failed (its output is above)"


SHOWN = [(p, line, text) for p in PAGES for line, text in blocks(p, "python")]


def package_names(module: str) -> set:
    """What ``from pyterrier_fandom_colbert[.<module>] import ...`` can name: its definitions, re-exports and
    submodules, and for the package itself its public names, all read statically (so an example's import of a
    torch-heavy part costs nothing here)."""
    h = hooks()
    folder = ROOT / "pyterrier_fandom_colbert" / Path(*module.split("."))
    if not folder.is_dir() and not folder.with_suffix(".py").is_file():
        return set()  # no such module: everything imported from it is reported
    submodules = {p.stem for p in folder.iterdir()} if folder.is_dir() else set()
    public = set(h.public_names()) if module == "" else set()
    return h.defined_names(module) | set(h.lazy_names(module)) | submodules | public


def used_names(tree: ast.AST):
    """(line, what, the name) for each ``pfc.<name>`` and each name imported from the package in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "pfc":
            yield node.lineno, "", node.attr
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pyterrier_fandom_colbert":
            for alias in node.names:
                yield node.lineno, node.module.partition(".")[2], alias.name


def test_used_names_reads_attributes_and_imports():
    tree = ast.parse("import pyterrier_fandom_colbert as pfc\nfrom pyterrier_fandom_colbert.fusion import maths\n"
                     "x = pfc.Hybrid(a, b) >> other.Thing\n")
    assert sorted(used_names(tree)) == [(2, "fusion", "maths"), (3, "", "Hybrid")]


def test_package_names_know_real_parts_and_refuse_made_up_ones():
    assert {"Hybrid", "ColBERT", "fusion"} <= package_names("")
    assert {"zscore", "weighted_sum"} <= package_names("fusion.maths")
    assert {"Splade", "TopicModel"} <= package_names("sparse")   # a part's own lazy names
    assert "Hybird" not in package_names("") and "zscores" not in package_names("fusion.maths")


@pytest.mark.parametrize("page, line, text", SHOWN, ids=[f"{p.name}:{line}" for p, line, _ in SHOWN])
def test_shown_examples_parse_and_name_real_parts(page, line, text):
    assert ">>>" not in text, f"{page.name}:{line}: a session with >>> prompts is a pycon block (run as a test)"
    tree = ast.parse(text, filename=f"{page.name}:{line}")
    stale = [f"{page.name}:{line + at - 1}: {'pyterrier_fandom_colbert.' + module if module else 'pfc'}.{name}"
             for at, module, name in used_names(tree) if name not in package_names(module)]
    assert stale == [], f"examples name what the package does not have: {stale}"


def test_api_reference_covers_every_public_name():
    """The hook's pages are written from the package's own list, read statically: each public name, once."""
    h = hooks()
    names = h.public_names()
    assert set(names) == set(pfc.__all__) - {"__version__"}
    pages = h.api_pages(names)
    entries = [line for page in pages.values() for line in page.splitlines()
               if line.startswith("::: ") or line.startswith("## ")]
    for name in names:
        assert sum(e.endswith(f".{name}") or e == f"## {name}" for e in entries) == 1, name
    assert "api/indexes.md" in pages and "api/index.md" not in pages   # api/index.md would be the section's front


def test_hooks_doctests_pass():
    """scripts/ is outside the doctest run of pytest's testpaths: the hook module's own examples run here."""
    result = doctest.testmod(hooks(), optionflags=FLAGS)
    assert result.attempted > 0 and result.failed == 0


def test_api_pages_refuse_a_part_without_a_title():
    with pytest.raises(ValueError, match=r"'newpart'.*PARTS"):
        hooks().api_pages({"Thing": "newpart.module"})


def test_markup_turns_roles_into_code_and_sessions_into_blocks():
    h = hooks()
    text = "See :meth:`~pyterrier_fandom_colbert.ColBERT.scorer` and :mod:`.maths`.\n\n    >>> f(1)\n    2\nAfter."
    assert h.markdown_docstring(text).splitlines() == [
        "See `scorer` and `.maths`.", "", "    ```pycon", "    >>> f(1)", "    2", "    ```", "After."]
    assert h.markdown_docstring("plain text, no code") == "plain text, no code"


def test_links_out_of_docs_become_checked_paths(caplog):
    h = hooks()
    page = SimpleNamespace(file=SimpleNamespace(src_uri="data.md"))
    config = {"docs_dir": str(ROOT / "docs")}
    text = "[the builds](../datasets/README.md), [`LICENSE`](../LICENSE), [gone](../nothing/here.md), [p](prf.md)"
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.pfc"):
        out = h.on_page_markdown(text, page, config, files=None)
    assert out == "the builds (`datasets/README.md`), `LICENSE`, [gone](../nothing/here.md), [p](prf.md)"
    assert [r.getMessage() for r in caplog.records] == [
        "data.md links to '../nothing/here.md', which is not a file of the repository"]


@pytest.mark.docs
@pytest.mark.slow
def test_site_builds_with_warnings_as_errors(tmp_path):
    """``mkdocs build --strict``: every page in the nav, every link and anchor resolving, every API entry found."""
    for needed in ("mkdocs", "mkdocstrings_handlers"):
        if importlib.util.find_spec(needed) is None:
            pytest.skip(f"the [docs] extra is not installed ({needed} is missing): pip install -e '.[docs]'")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site),
                           "--config-file", str(ROOT / "mkdocs.yml")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    html = (site / "api" / "fusion" / "index.html").read_text(encoding="utf-8")
    assert 'id="pyterrier_fandom_colbert.fusion.Hybrid"' in html      # an entry rendered from the docstrings
    assert "```pycon" not in html and ":class:`" not in html            # the markup was converted, not shown
    assert (site / "fusion" / "index.html").is_file() and (site / "api" / "indexes" / "index.html").is_file()
