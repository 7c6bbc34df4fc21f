"""The study's comparison: TF-IDF, TF-IDF >> ColBERT re-ranking, ColBERT end to end and their hybrid, on FANDOM-QA.

    python pipelines/compare.py                       # the settings below
    python pipelines/compare.py --k 100 --out runs/x  # any pfc-compare option overrides them

Same as ``pfc-compare`` / ``pfc compare``: a pt.Experiment table (RR@10, R@1, R@10,
R@50) printed and written to results.csv, plus the Recall@k curve (recall_at_k.csv, recall_at_k.png).
"""
import sys

from pyterrier_fandom_colbert.app.compare import main

SETTINGS = [
    "--dataset", "fandom-qa/sample/test",
    "--systems", "tfidf", "colbert-rerank", "colbert-full", "hybrid",
    "--metrics", "RR@10,R@1,R@10,R@50",
    "--out", "runs/compare",
    "--k", "1000",
]

if __name__ == "__main__":
    sys.exit(main(SETTINGS + sys.argv[1:]))
