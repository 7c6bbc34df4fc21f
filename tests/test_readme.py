"""The README's parts table lists every module of the package, and nothing that is not there.

A row of the table is ``| `path` | role |`` with ``path`` relative to the package folder: a module (``.py``) or a
folder of non-Python files (ending in ``/``). Package ``__init__.py`` files are not listed (they only re-export
and register); ``__main__.py`` files are (they are entry points).
"""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository (the README and the package source beside it)
PACKAGE = ROOT / "pyterrier_fandom_colbert"
README = ROOT / "README.md"
MODULES = ROOT / "docs" / "modules.md"  # the parts table
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*([^|]*?)\s*\|\s*$")


def parts_table(text: str) -> dict:
    """path -> role, from the rows of the parts table (the page holds that one table)."""
    rows = {}
    for line in text.splitlines():
        match = ROW.match(line)
        if match:
            path, role = match.groups()
            assert path not in rows, f"{MODULES.name}'s parts table lists {path!r} twice"
            rows[path] = role
    return rows


def package_modules(root: Path = PACKAGE) -> set:
    return {p.relative_to(root).as_posix() for p in root.rglob("*.py")
            if p.name != "__init__.py" and "__pycache__" not in p.parts}


def test_parts_table_parser_reads_rows_only():
    text = ("# x\n\n| module | role |\n|---|---|\n| `a.py` | one |\n| `b/` | two |\nnot a row `c.py`\n\n"
            "| `d.py` | | extra |\n")
    assert parts_table(text) == {"a.py": "one", "b/": "two"}


def test_package_modules_skips_init_files(tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ("__init__.py", "__main__.py", "a.py", "sub/__init__.py", "sub/b.py", "sub/c.txt"):
        (tmp_path / name).write_text("")
    assert package_modules(tmp_path) == {"__main__.py", "a.py", "sub/b.py"}


def test_parts_table_lists_every_module_with_a_role():
    rows = parts_table(MODULES.read_text(encoding="utf-8"))
    missing = sorted(package_modules() - set(rows))
    assert missing == [], f"modules missing from the parts table in docs/modules.md: {missing}"
    assert [p for p, role in rows.items() if not role] == [], "every row needs a one-line role"


def test_parts_table_lists_nothing_that_is_not_on_disk():
    rows = parts_table(MODULES.read_text(encoding="utf-8"))
    absent = sorted(p for p in rows if not (PACKAGE / p).exists()
                    or (p.endswith("/") and not (PACKAGE / p).is_dir())
                    or (not p.endswith("/") and not p.endswith(".py")))
    assert absent == [], f"docs/modules.md's parts table lists what the package does not hold: {absent}"


def test_readme_is_a_front_door():
    """Under 10 KB, opening with the set-up and test commands exactly as .ci/run runs them."""
    text = README.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) <= 10_000, f"README.md is {len(text.encode())} bytes; keep it under 10 KB"
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in first_block.splitlines()]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    for command in ("bash scripts/setup.sh", ".venv/bin/pytest -n 2"):
        assert command in commands, f"README.md's first command block lacks {command!r}"
        assert command in ci, f".ci/run no longer runs {command!r}, which README.md gives as the way to test"
    assert "docs/modules.md" in text, "README.md links to the parts table"


def layers_of_the_test() -> list:
    """``LAYERS`` of tests/test_architecture.py (read, not imported: test modules are not a package)."""
    tree = ast.parse((ROOT / "tests" / "test_architecture.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "LAYERS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("tests/test_architecture.py has no LAYERS")


def test_contributing_layer_table_is_the_one_the_test_enforces():
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("\n## The layering rule\n", 1)[1].split("\n## ", 1)[0]
    ranks = [re.findall(r"`([^`]+?)/?`", line.split("|")[2]) for line in section.splitlines()
             if re.match(r"^\|\s*\d", line)]
    assert [set(r) for r in ranks] == layers_of_the_test(), "CONTRIBUTING.md's layering table differs from LAYERS"
