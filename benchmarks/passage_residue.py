"""Markup residue, facts recovered and passages per page of the dump reader, on real or bundled dumps.

    python benchmarks/passage_residue.py                       # the shared PokéClicker dump and the bundled sample
    python benchmarks/passage_residue.py --dump X.xml.bz2 --examples 3     # also print hits (stderr, development)
    PYTHONPATH=/tmp/old-checkout python benchmarks/passage_residue.py      # the same figures for older code
    python benchmarks/passage_residue.py --unknown first       # a general rule for unknown templates, measured

For each dump: pages, articles, passages, passages per article, facts passages and facts (infobox fields, when
the reader makes them), template calls rendered by the renderer table (by name), and the share of passages
with leftover markup of each kind below ("residue": the issue's target is at most 0.5% of passages with any).
``--unknown first|positional`` compares, page by page, the reader that drops unknown templates
(``unknown_templates="drop"``) with one that renders unknown inline templates by their first / all positional
arguments: words added, passages changed (facts passages included), and the templates that contribute most
(their names, with the words of each distinct call of a page counted once: the reader renders a call repeated
on a page once; ``--examples`` prints changed passages to stderr). The dump text is not to be copied
into the repository.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from passage_quality import measure  # the same scan over the same reader, with this script's kinds

from pyterrier_fandom_colbert.data.passages import PassageConfig

ROOT = Path(__file__).resolve().parents[1]
SHARED_DUMP = ROOT.parent / "shared" / "data" / "wikis" / "pokeclickerwiki_pages_current.xml.bz2"
SAMPLE_DUMP = ROOT / "pyterrier_fandom_colbert" / "data" / "sample" / "samplewiki_pages_current.xml"

#: kind -> pattern of leftover markup
KINDS = {
    "template braces {{ }}": r"\{\{|\}\}",
    "table markup {| |- || !! |}": r"\{\||\|\}|(?:^|\s)\|-|\|\||!!",
    "link brackets [[ ]]": r"\[\[|\]\]",
    "table attributes (class=, style=, rowspan=, ...)": r"\b(?:class|style|rowspan|colspan|align|width|bgcolor)\s*=",
    "heading = markers": r"(?:^|\s)={2,}|={2,}(?:\s|$)",
}


def residue(dump: Path, examples: int = 0) -> dict:
    """Passages with leftover markup of each kind of :data:`KINDS` (the reader and counting as passage_quality)."""
    return measure(dump, examples, kinds=KINDS)


def rendered_templates(dump: Path) -> Counter:
    """Template calls the renderer table turned into text on the dump's articles, by name (new reader only)."""
    from pyterrier_fandom_colbert.data.templates import FALLBACK_COUNT, all_positional, render_templates
    from pyterrier_fandom_colbert.data.wikidump import iter_pages, skip_reason

    counts: Counter = Counter()
    for _, page in iter_pages(dump):
        if skip_reason(page) is None:
            render_templates(page.text, page.title, fallback=all_positional, counts=counts)
    counts["(unknown, positional arguments)"] = counts.pop(FALLBACK_COUNT, 0)
    return counts


def unknown_rule(dump: Path, rule: str, examples: int = 0) -> dict:
    """Words and passages a general rule for unknown templates adds, against the default reader."""
    from pyterrier_fandom_colbert.data import passages as P
    from pyterrier_fandom_colbert.data import templates as T
    from pyterrier_fandom_colbert.data.wikidump import iter_pages, read_page, skip_reason

    renderer = {"first": T.first_positional, "positional": T.all_positional}[rule]
    config = PassageConfig(unknown_templates="drop")
    by_name: Counter = Counter()
    words = {"default": 0, rule: 0}
    changed = total = 0
    printed = 0

    def texts(page, fallback):
        read = read_page(page.text, page.title, tables=True, infoboxes=True, unknown_template=fallback)
        clean = P.drop_sections(read.text, set(config.skip_sections))
        return P.facts_passages(page.title, read.facts, config) + [t for _, t in P.text_passages(clean, config)]

    def counting(call):
        out = renderer(call)
        if out:
            by_name[call.name] += len(out.split())
        return out

    for _, page in iter_pages(dump):
        if skip_reason(page) is not None:
            continue
        before, after = texts(page, None), texts(page, counting)
        total += len(after)
        changed += sum(1 for a in after if a not in set(before))
        words["default"] += sum(len(t.split()) for t in before)
        words[rule] += sum(len(t.split()) for t in after)
        if printed < examples and before != after:
            printed += 1
            new = next(a for a in after if a not in set(before))
            print(f"[{rule}] {page.title}: {new[:300]!r}", file=sys.stderr)
    return {"words": words, "changed": changed, "passages": total, "by_name": by_name}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", type=Path, action="append", help="a MediaWiki export (repeatable); default: "
                        "the shared PokéClicker dump (when present) and the bundled sample")
    parser.add_argument("--examples", type=int, default=0, help="print this many hits of each kind (stderr)")
    parser.add_argument("--unknown", choices=("first", "positional"), default=None,
                        help="measure a general rule for unknown templates instead")
    args = parser.parse_args(argv)
    dumps = args.dump or [d for d in (SHARED_DUMP, SAMPLE_DUMP) if d.exists()]
    for dump in dumps:
        if not dump.exists():
            print(f"{dump} not found: pass --dump PATH (.xml/.bz2/.gz/.7z)", file=sys.stderr)
            return 2
        if args.unknown:
            r = unknown_rule(dump, args.unknown, args.examples)
            w = r["words"]
            print(f"{dump.name}: rule {args.unknown!r}: words {w['default']:,} -> {w[args.unknown]:,} "
                  f"(+{w[args.unknown] - w['default']:,}); {r['changed']:,} of {r['passages']:,} passages changed; "
                  f"words added by template (distinct calls of a page): {r['by_name'].most_common(12)}")
            continue
        r = residue(dump, args.examples)
        stats, n = r["stats"], max(r["passages"], 1)
        print(f"{dump.name}: {stats.pages:,} pages, {stats.articles:,} articles, {r['passages']:,} passages "
              f"({r['passages'] / max(stats.articles, 1):.2f} per article), skipped {dict(stats.skipped)}; "
              f"facts passages {getattr(stats, 'facts_passages', 'n/a')}, facts {getattr(stats, 'facts', 'n/a')}; "
              f"{r['seconds']:.1f} s")
        for kind in KINDS:
            print(f"  {kind:<50} {r['hits'][kind]:>6} ({100 * r['hits'][kind] / n:.2f}%)")
        print(f"  {'any':<50} {r['any']:>6} ({100 * r['any'] / n:.2f}%)")
        try:
            counts = rendered_templates(dump)
        except ImportError:
            continue  # older code: no renderer table
        print(f"  template calls rendered: {sum(counts.values()):,}; by name: {counts.most_common(15)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
