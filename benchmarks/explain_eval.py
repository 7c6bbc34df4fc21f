"""Answer localisation of explanations: do the KDE span and the top R_abs / R_acc tokens land on the gold answer?

    python benchmarks/explain_eval.py --n 500 --seed 0                       # default ColBERT, 2-core CPU
    python benchmarks/explain_eval.py --checkpoint path/to/checkpoint --bandwidth scott silverman 3

Each sampled SQuAD question is explained against its gold paragraph (``pfc.Explainer``). Reported per method:

* top R_abs token (most matches; ties broken by R_acc), top R_acc token, KDE peak token: how often the token's
  characters overlap a gold answer (any of the question's annotated answers);
* KDE answer span (whole words): how often it overlaps a gold answer, contains one entirely, or lies inside one;
  its mean length in words and as a share of the passage.

Baselines are position-matched and exact (the average over every possible placement, i.e. over infinitely many
random seeds): a random content token; a random run of as many consecutive words as the KDE span, anywhere in
the same passage. Paragraphs longer than one window are explained whole (``--long-docs windows``, the
``Explainer``'s default); with ``--long-docs truncate``, questions whose every gold answer lies beyond the encoded
part (``doc_maxlen``) are left out and counted. Skips (exit 0) when the SQuAD data is absent.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SQUAD_DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "squad-v1.1-split" / "dev-v1.1.json"


def load_questions(path: Path, n: int, seed: int):
    """A sample of ``n`` questions: (qid, question, paragraph id, paragraph, gold char spans)."""
    import numpy as np

    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    rows = []
    for a, article in enumerate(data):
        for p, para in enumerate(article["paragraphs"]):
            for qa in para["qas"]:
                gold = sorted({(ans["answer_start"], ans["answer_start"] + len(ans["text"])) for ans in qa["answers"]})
                rows.append((qa["id"], qa["question"], f"a{a}p{p}", para["context"], gold))
    picked = np.random.default_rng(seed).permutation(len(rows))[:n]
    return [rows[i] for i in sorted(picked)]


def _overlaps(start: int, end: int, gold: List[Tuple[int, int]]) -> bool:
    return any(start < g_end and g_start < end for g_start, g_end in gold)


def evaluate_row(offsets, words, word_spans, r_abs, r_acc, kde, answer_words: Optional[Tuple[int, int]],
                 gold: List[Tuple[int, int]]) -> Optional[Dict[str, float]]:
    """Hits of one explained passage and the exact random baselines; None when no gold answer was encoded."""
    import numpy as np

    content = np.flatnonzero(words >= 0)
    if not len(content) or answer_words is None:
        return None
    encoded_end = int(offsets[content[-1], 1])
    gold = [g for g in gold if g[1] <= encoded_end]
    if not gold:
        return None
    tok_gold = np.array([_overlaps(int(s), int(e), gold) for s, e in offsets[content]])
    best_abs = content[np.lexsort((-r_acc[content], -r_abs[content]))[0]]   # most matches, then largest R_acc
    out = {"r_abs_token": float(tok_gold[np.searchsorted(content, best_abs)]),
           "r_acc_token": float(tok_gold[np.argmax(r_acc[content])]),
           "kde_peak_token": float(tok_gold[np.argmax(kde[content])]),
           "random_token": float(tok_gold.mean())}
    w0, w1 = answer_words
    span = (int(word_spans[w0, 0]), int(word_spans[w1 - 1, 1]))
    out["kde_span_overlap"] = float(_overlaps(*span, gold))
    out["kde_span_contains"] = float(any(span[0] <= gs and ge <= span[1] for gs, ge in gold))
    out["kde_span_inside"] = float(any(gs <= span[0] and span[1] <= ge for gs, ge in gold))
    width, n_words = w1 - w0, len(word_spans)
    starts = np.arange(n_words - width + 1)
    rand = [(int(word_spans[s, 0]), int(word_spans[s + width - 1, 1])) for s in starts]
    out["random_span_overlap"] = float(np.mean([_overlaps(a, b, gold) for a, b in rand]))
    out["random_span_contains"] = float(np.mean([any(a <= gs and ge <= b for gs, ge in gold) for a, b in rand]))
    out["random_span_inside"] = float(np.mean([any(gs <= a and b <= ge for gs, ge in gold) for a, b in rand]))
    out["span_words"] = float(width)
    out["span_share"] = width / n_words
    return out


def answer_words(answer_tokens, words) -> Optional[Tuple[int, int]]:
    if answer_tokens is None:
        return None
    return int(words[answer_tokens[0]]), int(words[answer_tokens[1] - 1]) + 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--squad", type=Path, default=SQUAD_DEV, help="SQuAD v1.1 JSON with gold answer offsets")
    ap.add_argument("--n", type=int, default=500, help="questions to sample")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint", default=None, help="ColBERT checkpoint folder (default: from_pretrained())")
    ap.add_argument("--no-score-query-masks", action="store_true",
                    help="fresh default model with score_query_masks=False (not with --checkpoint)")
    ap.add_argument("--k-tilde", type=int, default=2)
    ap.add_argument("--bandwidth", nargs="+", default=["scott"], help="'scott', 'silverman' or token counts")
    ap.add_argument("--span-threshold", type=float, default=0.5)
    ap.add_argument("--long-docs", choices=["windows", "truncate"], default="windows",
                    help="paragraphs longer than one window: explained whole (the Explainer's default) or cut")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    if not args.squad.exists():
        print(f"skipped: {args.squad} not found (the shared SQuAD data is not available here)")
        return 0

    import numpy as np
    import pandas as pd
    import torch

    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.explain.relevance import ExplainOptions, explain_passage
    from pyterrier_fandom_colbert.explain.transformer import Explainer

    torch.set_num_threads(args.threads)
    bandwidths = [b if b in ("scott", "silverman") else float(b) for b in args.bandwidth]
    config = pfc.ColBERTConfig(score_query_masks=False) if args.no_score_query_masks else None
    colbert = pfc.ColBERT.from_pretrained(args.checkpoint, config=config, device=args.device)
    questions = load_questions(args.squad, args.n, args.seed)
    frame = pd.DataFrame([{"qid": q, "query": text, "docno": d, "text": ctx} for q, text, d, ctx, _ in questions])
    started = time.perf_counter()
    out = Explainer(colbert, k_tilde=args.k_tilde, bandwidth=bandwidths[0], span_threshold=args.span_threshold,
                    long_docs=args.long_docs)(frame)
    seconds = time.perf_counter() - started

    results = {}
    for bw in bandwidths:
        options = ExplainOptions(k_tilde=args.k_tilde, bandwidth=bw, span_threshold=args.span_threshold)
        rows = []
        for (_, row), (*_, gold) in zip(out.iterrows(), questions):
            if bw == bandwidths[0]:
                kde, tokens = row["kde"], row["answer_tokens"]
            else:
                sim = row["expl_sim"].astype(np.float64)
                e = explain_passage(np.nan_to_num(sim, nan=-np.inf), ~np.isnan(sim[0]), row["text"],
                                    row["expl_offsets"], options)
                kde, tokens = e.kde, e.answer_tokens
            rows.append(evaluate_row(row["expl_offsets"], row["expl_words"], row["word_spans"], row["r_abs"],
                                     row["r_acc"], kde, answer_words(tokens, row["expl_words"]), gold))
        kept = [r for r in rows if r is not None]
        results[str(bw)] = {"questions": len(kept), "left_out": len(rows) - len(kept),
                            **{k: float(np.mean([r[k] for r in kept])) for k in kept[0]}}

    report = {"command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
              "model": args.checkpoint or "from_pretrained() default", "fingerprint": colbert.fingerprint(),
              "score_query_masks": colbert.config.score_query_masks, "k_tilde": args.k_tilde, "n": args.n,
              "seed": args.seed, "span_threshold": args.span_threshold, "long_docs": args.long_docs,
              "explain_seconds": round(seconds, 1),
              "device": args.device, "threads": args.threads, "results": results}
    print(render_markdown(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def render_markdown(report) -> str:
    lines = [f"model: {report['model']} ({report['fingerprint']}), score_query_masks={report['score_query_masks']}, "
             f"k̃={report['k_tilde']}, span threshold {report['span_threshold']}, long texts "
             f"{report.get('long_docs', 'truncate')}, explain time "
             f"{report['explain_seconds']} s for {report['n']} questions", ""]
    for bw, r in report["results"].items():
        lines += [f"bandwidth {bw}: {r['questions']} questions ({r['left_out']} left out: answer not encoded); "
                  f"KDE span {r['span_words']:.1f} words on average, {100 * r['span_share']:.0f}% of the passage",
                  "", "| what | hits the gold answer | random baseline |", "|---|---|---|"]
        rows = [("top R_abs token", "r_abs_token", "random_token"), ("top R_acc token", "r_acc_token", "random_token"),
                ("KDE peak token", "kde_peak_token", "random_token"),
                ("KDE span overlaps answer", "kde_span_overlap", "random_span_overlap"),
                ("KDE span contains answer", "kde_span_contains", "random_span_contains"),
                ("KDE span inside answer", "kde_span_inside", "random_span_inside")]
        lines += [f"| {name} | {100 * r[hit]:.1f}% | {100 * r[base]:.1f}% |" for name, hit, base in rows]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
