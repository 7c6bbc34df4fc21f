"""The README's parts table lists every module of the package, and nothing that is not there.

A row of the table is ``| `path` | role |`` with ``path`` relative to the package folder: a module (``.py``) or a
folder of non-Python files (ending in ``/``). Package ``__init__.py`` files are not listed (they only re-export
and register); ``__main__.py`` files are (they are entry points).
"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository (the README and the package source beside it)
PACKAGE = ROOT / "pyterrier_fandom_colbert"
README = ROOT / "README.md"
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*([^|]*?)\s*\|\s*$")


def parts_table(text: str) -> dict:
    """path -> role, from the rows of the table under the README's "## The parts" heading."""
    section = text.split("\n## The parts\n", 1)
    assert len(section) == 2, "README.md has no '## The parts' section"
    body = section[1].split("\n## ", 1)[0]
    rows = {}
    for line in body.splitlines():
        match = ROW.match(line)
        if match:
            path, role = match.groups()
            assert path not in rows, f"README parts table lists {path!r} twice"
            rows[path] = role
    return rows


def package_modules(root: Path = PACKAGE) -> set:
    return {p.relative_to(root).as_posix() for p in root.rglob("*.py")
            if p.name != "__init__.py" and "__pycache__" not in p.parts}


def test_parts_table_parser_reads_rows_and_stops_at_the_next_section():
    text = ("# x\n\n## The parts\n\n| module | role |\n|---|---|\n| `a.py` | one |\n| `b/` | two |\n"
            "not a row `c.py`\n\n## Next\n\n| `d.py` | elsewhere |\n")
    assert parts_table(text) == {"a.py": "one", "b/": "two"}


def test_package_modules_skips_init_files(tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ("__init__.py", "__main__.py", "a.py", "sub/__init__.py", "sub/b.py", "sub/c.txt"):
        (tmp_path / name).write_text("")
    assert package_modules(tmp_path) == {"__main__.py", "a.py", "sub/b.py"}


def test_readme_lists_every_module_with_a_role():
    rows = parts_table(README.read_text(encoding="utf-8"))
    missing = sorted(package_modules() - set(rows))
    assert missing == [], f"modules missing from README.md's parts table: {missing}"
    assert [p for p, role in rows.items() if not role] == [], "every row needs a one-line role"


def test_readme_lists_nothing_that_is_not_on_disk():
    rows = parts_table(README.read_text(encoding="utf-8"))
    absent = sorted(p for p in rows if not (PACKAGE / p).exists()
                    or (p.endswith("/") and not (PACKAGE / p).is_dir())
                    or (not p.endswith("/") and not p.endswith(".py")))
    assert absent == [], f"README.md's parts table lists what the package does not hold: {absent}"
