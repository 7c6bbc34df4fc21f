"""Share of passages with markup residue after cleaning a real wiki dump.

    python benchmarks/passage_quality.py --dump ../shared/data/wikis/pokeclickerwiki_pages_current.xml.bz2
    python benchmarks/passage_quality.py --dump X.xml.bz2 --examples 3     # also print a few hits of each kind

Runs the whole pipeline (``dump_passages`` with the default ``PassageConfig``) and counts, for each kind of
residue below, the passages whose text has at least one hit. The kinds are the leftovers of removed or
half-parsed markup; a few can also be legitimate prose (``space before punct`` in "A ? B"), so the figures are an
upper bound on residue, not a precise count. ``--examples`` prints snippets to look at (to stderr), for
development only: the dump's text is not to be copied into the repository.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Dict, Optional

from pyterrier_fandom_colbert.data.passages import DumpStats, PassageConfig, dump_passages

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DUMP = ROOT.parent / "shared" / "data" / "wikis" / "pokeclickerwiki_pages_current.xml.bz2"

_SEP = r"[;,:/\u2013\u2014-]"
#: kind -> (pattern, what it catches)
KINDS = {
    "empty parens": (rf"\(\s*(?:{_SEP}\s*)*\)", '"()" or "( ; , )" left by removed templates'),
    "dangling separator": (r"\(\s*[;,]|[;,]\s*\)", '"( ; born" or "x, )" at a parenthesis'),
    "space before punct": (r"[^\W_]\s+[,;:.!?](?=\s|$)", '"Points ." where markup between was removed'),
    "file link": (r"(?i)\[\[\s*:?\s*(?:file|image)\s*:|\b(?:file|image):\S+\.(?:png|jpe?g|gif|svg|webp)\b"
                  r"|\b(?:thumb|thumbnail|frameless|upright)\s*\||\|\s*\d+px\b", "[[File:...]] or its parameters"),
    "template": (r"(?i)\{\{|\}\}|\bcite (?:web|book|news|journal)\b|\b(?:url|access-?date|archive-?url)\s*=",
                 "{{...}} braces or citation parameters"),
    "wiki markup": (r"\[\[|\]\]|''|__[A-Z]+__|^\s*[*#]|[{}|]", "[[, ]], '', magic words, list markers, braces, pipes"),
    "html entity": (r"&(?:[A-Za-z][A-Za-z0-9]{1,31}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});", "&amp;, &#8212; ..."),
    "html tag": (r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>", "<span ...>, </div>, <br/>"),
    "invisible char": (r"[\x00-\x08\x0b\x0c\x0e-\x1f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]",
                       "control, zero-width and bidi characters"),
}


def measure(dump: Path, examples: int = 0, kinds: Optional[Dict[str, str]] = None) -> dict:
    """Passages of ``dump`` with a hit of each kind of residue (``kinds``: kind -> pattern; default: :data:`KINDS`),
    the passages with any, and the reader's stats and time."""
    patterns = kinds if kinds is not None else {kind: pattern for kind, (pattern, _) in KINDS.items()}
    compiled = {kind: re.compile(pattern) for kind, pattern in patterns.items()}
    hits = {kind: 0 for kind in patterns}
    shown = {kind: 0 for kind in patterns}
    anything = 0
    stats = DumpStats()
    start = time.perf_counter()
    passages = 0
    for passage in dump_passages(dump, PassageConfig(), stats):
        passages += 1
        found = False
        for kind, pattern in compiled.items():
            m = pattern.search(passage.text)
            if m:
                hits[kind] += 1
                found = True
                if shown[kind] < examples:
                    shown[kind] += 1
                    text = passage.text
                    print(f"[{kind}] {passage.doc_id}: …{text[max(0, m.start() - 60):m.end() + 40]!r}…",
                          file=sys.stderr)
        anything += found
    seconds = time.perf_counter() - start
    return {"passages": passages, "hits": hits, "any": anything, "seconds": seconds, "stats": stats}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", type=Path, default=DEFAULT_DUMP)
    parser.add_argument("--examples", type=int, default=0, help="print this many hits of each kind (stderr)")
    args = parser.parse_args(argv)
    if not args.dump.exists():
        print(f"{args.dump} not found: pass --dump PATH (a MediaWiki export, .xml/.bz2/.gz/.7z)", file=sys.stderr)
        return 2
    result = measure(args.dump, args.examples)
    n = max(result["passages"], 1)
    stats = result["stats"]
    print(f"{args.dump.name}: {stats.pages:,} pages, {stats.articles:,} articles, {result['passages']:,} passages, "
          f"{result['seconds']:.1f} s; skipped {dict(stats.skipped)}")
    guarded = getattr(stats, "guarded", None)
    if guarded is not None:
        print(f"pages cleaned by the fallback cleaner: {dict(guarded)}")
    print("\n| residue | what | passages | share |\n|---|---|---|---|")
    for kind, (_, what) in KINDS.items():
        print(f"| {kind} | {what} | {result['hits'][kind]} | {100 * result['hits'][kind] / n:.2f}% |")
    print(f"| any of the above | | {result['any']} | {100 * result['any'] / n:.2f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
