"""Time of ``clean_wikitext`` on hostile wikitext: unclosed markup repeated, and random markup soup.

    python benchmarks/hostile_wikitext.py                    # every case, each in its own process, 60 s limit
    python benchmarks/hostile_wikitext.py --timeout 30 --fuzz 20 --fuzz-chars 100000

mwparserfromhell backtracks over every construct it cannot close, so these inputs once took minutes
(``"{{a|b=" * 10000``: 141 s). Each case runs in a fresh subprocess so that a case that does not finish can be
stopped (``> limit`` in the table) and the next one still measured. ``--fuzz N`` adds N random pages made of
markup fragments (openers without closers, closers without openers, quotes, brackets, tags, line breaks; no
comments, as an unclosed one hides the rest of the page; fixed
seeds) and reports the slowest; "parser soup" leaves out the fragments that the pre-pass cuts out with what follows
them (tables, templates, dropped tags), so that the parser gets the whole page.
"""
from __future__ import annotations

import argparse
import random
import subprocess
import sys

CASES = {
    '"{{a|b=" * 10000': '"{{a|b=" * 10000',
    '"{{a|b=" * 50000': '"{{a|b=" * 50000',
    '"<ref>" * 50000': '"<ref>" * 50000',
    '"<ref>x" * 50000': '"<ref>x" * 50000',
    '"<ref name=\\"" * 10000': '"<ref name=\\"" * 10000',
    '"<a b=\\"" * 10000': '"<a b=\\"" * 10000',
    '"[[a|[[b]]" * 10000': '"[[a|[[b]]" * 10000',
    '"<p>" * 20000': '"<p>" * 20000',
    '"<span>" * 20000': '"<span>" * 20000',
    '"{{{a|" * 10000': '"{{{a|" * 10000',
    '"{{a|b=\\n" * 10000': '"{{a|b=\\n" * 10000',
    '"[http://x " * 10000': '"[http://x " * 10000',
    '"[[a|b\\n" * 10000': '"[[a|b\\n" * 10000',
    '"<!--" * 20000': '"<!--" * 20000',
    '"<nowiki>" * 20000': '"<nowiki>" * 20000',
    "\"'''a\" * 20000": "\"'''a\" * 20000",
    '"*" * 100000 + " x"': '"*" * 100000 + " x"',
    '";" + ":" * 100000': '";" + ":" * 100000',
    '"==a==\\n" * 100000': '"==a==\\n" * 100000',
    '"* [[a]] b\\n" * 50000': '"* [[a]] b\\n" * 50000',
    '"a\\n\\n" * 100000': '"a\\n\\n" * 100000',
    '"{{nowrap|" * 20000 + "x" + "}}" * 20000': '"{{nowrap|" * 20000 + "x" + "}}" * 20000',
    '"{{convert|1|km|" * 20000': '"{{convert|1|km|" * 20000',
    '"{|\\n" + "|-\\n| rowspan=50 colspan=50 | x || y\\n" * 20000 + "|}"':
        '"{|\\n" + "|-\\n| rowspan=50 colspan=50 | x || y\\n" * 20000 + "|}"',
    '"{|\\n| a\\n" + "b\\n" * 100000': '"{|\\n| a\\n" + "b\\n" * 100000',
    '"{|\\n|" + "[[a||" * 20000': '"{|\\n|" + "[[a||" * 20000',
}

FRAGMENTS = ["{{", "}}", "{{{", "}}}", "{{a|b=", "[[", "]]", "[[a|", "[[File:x.png|", "[", "]", "[http://x ",
             "<ref>", "</ref>", '<ref name="', "<ref name=a/>", "<div>", "</div>", "<span>", "<p>", '<a b="',
             "<nowiki>", "</nowiki>", "''", "'''", "|", "=", "==", "\n", "\n\n", "{|", "|}",
             "&amp;", "&", "<", ">", '"', "text ", "word ", ": ", "* ", "; ", "\n{|", "\n|}", "|-", "||", "!!",
             "<b>", "<i>", "</b>", "</i>", "<br>", "<li>", "==a==", "-{", "}-", "__TOC__", "(", ")", "; ", ", "]


#: what reaches the parser: no tables, templates, dropped tags, nowiki (the pre-pass cuts those out)
PARSER_FRAGMENTS = [f for f in FRAGMENTS if not any(x in f for x in ("{", "}", "ref", "nowiki"))]


def soup(seed: int, chars: int, fragments: list = FRAGMENTS) -> str:
    rng = random.Random(seed)
    out, n = [], 0
    while n < chars:
        piece = rng.choice(fragments)
        out.append(piece)
        n += len(piece)
    return "".join(out)


def run(expression: str, timeout: float) -> tuple[int, float | None]:
    code = ("import sys, time\nfrom pyterrier_fandom_colbert.data.wikidump import clean_wikitext\n"
            "from benchmarks.hostile_wikitext import FRAGMENTS, PARSER_FRAGMENTS, soup\n"
            f"text = {expression}\nt = time.perf_counter()\nclean_wikitext(text)\n"
            "print(len(text), time.perf_counter() - t)")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                              check=True)
    except subprocess.TimeoutExpired:
        return -1, None
    chars, seconds = done.stdout.split()
    return int(chars), float(seconds)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    parser.add_argument("--fuzz", type=int, default=10, help="random pages of markup soup")
    parser.add_argument("--fuzz-chars", type=int, default=60_000)
    parser.add_argument("--only", default="", help="run the cases whose expression contains one of these "
                                                   "comma-separated strings")
    args = parser.parse_args(argv)
    print("| input | chars | seconds |\n|---|---|---|")
    for label, expression in CASES.items():
        if args.only and not any(part in label for part in args.only.split(",")):
            continue
        chars, seconds = run(expression, args.timeout)
        shown = f"> {args.timeout:.0f}" if seconds is None else f"{seconds:.4f}"  # (a fast case is under 5 ms)
        print(f"| `{label}` | {chars if chars >= 0 else '?'} | {shown} |", flush=True)
    for name, fragments in (("markup soup", "FRAGMENTS"), ("parser soup", "PARSER_FRAGMENTS")):
        if not args.fuzz:
            break
        worst, total = (0.0, -1), 0.0
        for seed in range(args.fuzz):
            _, seconds = run(f"soup({seed}, {args.fuzz_chars}, {fragments})", args.timeout)
            seconds = args.timeout if seconds is None else seconds
            total += seconds
            worst = max(worst, (seconds, seed))
        print(f"| {name}, {args.fuzz} pages (seeds 0-{args.fuzz - 1}) | {args.fuzz_chars} each | "
              f"mean {total / args.fuzz:.4f}, max {worst[0]:.4f} (seed {worst[1]}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
