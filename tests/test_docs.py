"""The docs stay guides and their links stay live: every guide page under docs/ (results.md, the measurement record,
and docs/experiments/, the lab notes, aside) is at most 15 KiB, and every relative Markdown link in docs/, README.md,
CONTRIBUTING.md and CHANGELOG.md names a file that exists and, with a #fragment, a heading of that file (GitHub's
anchors)."""
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GUIDE_LIMIT = 15 * 1024
NOT_GUIDES = {"results.md"}  # the measurement record: the figures that stand, one section per result

LINK = re.compile(r"(?<!\\)\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose(text: str) -> list[str]:
    """The file's lines with fenced code blocks blanked and inline code removed: links there are not links."""
    out, fence = [], None
    for line in text.split("\n"):
        stripped = line.lstrip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            out.append("")
        elif fence is not None:
            out.append("")
            if stripped.startswith(fence):
                fence = None
        else:
            out.append(re.sub(r"`[^`]*`", "``", line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text lower-cased, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)  # emphasis underscores, not snake_case ones
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, with GitHub's -1, -2 suffixes for repeated headings."""
    seen: dict[str, int] = {}
    found = set()
    text = path.read_text(encoding="utf-8")
    fence = None
    for line in text.split("\n"):
        stripped = line.lstrip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    found.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))
    return found


def linked_files() -> list[Path]:
    return sorted(DOCS.rglob("*.md")) + [ROOT / name for name in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md")
                                         if (ROOT / name).exists()]


def broken_links(path: Path) -> list[str]:
    """'file:line: target (why)' for each relative link of `path` that names no file or no heading."""
    bad = []
    for number, line in enumerate(prose(path.read_text(encoding="utf-8")), 1):
        for target in LINK.findall(line):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            name, _, fragment = target.partition("#")
            goal = path if not name else (path.parent / name).resolve()
            where = f"{path.relative_to(ROOT)}:{number}: {target}"
            if not goal.exists():
                bad.append(f"{where} (no such file)")
            elif fragment and goal.suffix == ".md" and fragment.lower() not in anchors(goal):
                bad.append(f"{where} (no heading with that anchor in {goal.relative_to(ROOT)})")
    return bad


def test_slug_follows_github():
    assert slug("Speed: encoding") == "speed-encoding"
    assert slug("The compressed index against colbert-ai's PLAID") == "the-compressed-index-against-colbert-ais-plaid"
    assert slug("`pfc` folders: compressed, and updated without a rebuild") == \
        "pfc-folders-compressed-and-updated-without-a-rebuild"
    assert slug("Short answers, confidence and \"nothing relevant\"") == "short-answers-confidence-and-nothing-relevant"
    assert slug("Frozen lower layers (`training/frozen.py`): training on a CPU") == \
        "frozen-lower-layers-trainingfrozenpy-training-on-a-cpu"
    assert slug("3.8 Reference points from the study") == "38-reference-points-from-the-study"
    assert slug("`exact_share` and [the index](index.md)") == "exact_share-and-the-index"


def test_the_link_check_finds_what_is_broken(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "b.md").write_text("# Top\n\n## Top\n\n## Speed: encoding\n", encoding="utf-8")
    (tmp_path / "a.md").write_text(
        "# A\n[ok](b.md) [ok](b.md#speed-encoding) [ok](b.md#top-1) [ok](#a) [web](https://x.org/#y)\n"
        "[gone](c.md) [no anchor](b.md#speed) [self](#nowhere)\n"
        "```\n[in code](d.md)\n```\n`[inline](e.md)`\n", encoding="utf-8")
    bad = broken_links(tmp_path / "a.md")
    assert [b.split(": ", 1)[1] for b in bad] == [
        "c.md (no such file)", "b.md#speed (no heading with that anchor in b.md)",
        "#nowhere (no heading with that anchor in a.md)"]
    assert all(b.startswith("a.md:3: ") for b in bad)


@pytest.mark.parametrize("path", linked_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    assert broken_links(path) == []


def test_guides_are_short():
    guides = [p for p in DOCS.glob("*.md") if p.name not in NOT_GUIDES]
    assert len(guides) >= 10  # the guides are where this test looks for them
    too_long = {p.name: p.stat().st_size for p in guides if p.stat().st_size > GUIDE_LIMIT}
    assert too_long == {}, f"guides over {GUIDE_LIMIT} bytes (move measurements to docs/experiments/): {too_long}"


def test_every_experiments_log_is_listed():
    logs = {p.name for p in (DOCS / "experiments").glob("*.md")} - {"README.md"}
    listing = (DOCS / "experiments" / "README.md").read_text(encoding="utf-8")
    assert logs and {name for name in logs if f"({name})" not in listing} == set()
