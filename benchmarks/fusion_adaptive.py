"""Fixed against per-query adaptive fusion weights of TF-IDF and ColBERT end to end (docs/fusion.md).

    python benchmarks/fusion_adaptive.py --threads 1        # SQuAD selection part, SciFact, WikiQA

Never touches the SQuAD report part. Reuses the runs that ``pipelines/evaluate.py`` caches (same --out, --k,
--faiss, --k-hat, --long-docs), computing the missing ones. Each row fuses the same two runs; the lexical weight
of a row is a constant or a per-query function of signals that need no relevance labels:

* agreement: the share of the two top-10 lists the systems have in common;
* lexical peak: how far TF-IDF's top score stands above its top 20 (z of the first among the first 20);
* cross ranks: where each system ranks the other's first document.

Prints, per collection, each row's measure (RR@10 on SQuAD, nDCG@10 elsewhere), and the worst and the mean
difference to the better single system over the collections.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))


def top_overlap(al, depth: int) -> np.ndarray:
    """Per query: |top-depth(lexical) ∩ top-depth(neural)| / depth."""
    both = (al.ranks[:, 0] < depth) & (al.ranks[:, 1] < depth)
    return np.bincount(al.groups, weights=both.astype(float), minlength=al.n_groups) / depth


def head_peak(al, system: int, depth: int) -> np.ndarray:
    """Per query: (top score - mean) / std over the system's first ``depth`` raw scores."""
    from pyterrier_fandom_colbert.fusion import maths as S

    sel = al.ranks[:, system] < depth
    s, g = al.raw[sel, system], al.groups[sel]
    mean, std = S.group_mean_std(s, g, al.n_groups)
    with np.errstate(all="ignore"):
        return np.nan_to_num((S.group_max(s, g, al.n_groups) - mean) / std, nan=0.0)


def cross_rank(al, system: int) -> np.ndarray:
    """Per query: the other system's 0-based rank of this system's first document (inf: not returned)."""
    first = al.ranks[:, system] == 0
    out = np.full(al.n_groups, np.inf)
    other = al.ranks[first, 1 - system]
    out[al.groups[first]] = np.where(np.isnan(other), np.inf, other)
    return out


def linear(al, weight) -> np.ndarray:
    """Lexical weight (a number or one per query) times the first column plus the rest times the second."""
    from pyterrier_fandom_colbert.fusion import maths as S

    filled = S.fill_missing(al.scores, al.groups, al.n_groups, "min")
    w = np.broadcast_to(np.asarray(weight, dtype=float), (al.n_groups,))[al.groups]
    return w * filled[:, 0] + (1 - w) * filled[:, 1]


def variants():
    """name -> (normalisation, lexical weight from the aligned runs)."""
    rows = {"TF-IDF": ("minmax", lambda al: 1.0), "ColBERT end to end": ("minmax", lambda al: 0.0)}
    for w in (0.1, 0.2, 0.3, 0.5):
        rows[f"min-max, fixed {w}"] = ("minmax", lambda al, w=w: w)
    for w in (0.15, 0.2, 0.25, 0.3):
        rows[f"z-score, fixed {w}"] = ("zscore", lambda al, w=w: w)
    rows["z-score, 0.4 x agreement@10"] = ("zscore", lambda al: 0.4 * top_overlap(al, 10))
    rows["min-max, 0.4 x agreement@10"] = ("minmax", lambda al: 0.4 * top_overlap(al, 10))
    rows["z-score, 0.3 x lexical peak / 4"] = ("zscore", lambda al: np.clip(0.3 * head_peak(al, 0, 20) / 4, 0, 1))
    rows["z-score, cross ranks: 0.1 / 0.3 / 0.2"] = (
        "zscore", lambda al: np.where(cross_rank(al, 0) >= 10, 0.1, np.where(cross_rank(al, 1) >= 10, 0.3, 0.2)))

    def cross_continuous(al, w0=0.2):
        support_lex = 1 / (1 + np.log1p(np.minimum(cross_rank(al, 0), 1000)))
        support_neu = 1 / (1 + np.log1p(np.minimum(cross_rank(al, 1), 1000)))
        return np.clip(2 * w0 * support_lex / (support_lex + support_neu), 0, 1)

    rows["z-score, cross ranks, continuous (0.2)"] = ("zscore", cross_continuous)
    return rows


def main(argv=None) -> int:
    import evaluate as ev

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ev.add_run_arguments(ap)
    args = ap.parse_args(argv)

    import pandas as pd

    from pyterrier_fandom_colbert.fusion.transformers import align, assemble
    from pyterrier_fandom_colbert.fusion.tuning import per_query

    ev.set_threads(args.threads)
    columns = {}
    for name in args.data:
        if not ev.data_folder(args.data_root, name).exists():
            print(f"{name}: not found under {args.data_root}, skipped")
            continue
        if name == "squad":
            docs, parts, _ = ev.load_squad(args.data_root)
            (topics, qrels), measure = parts["selection"], "RR@10"
        else:
            docs, parts = ev.load_beir(name, args.data_root)
            (topics, qrels), measure = parts["all"], "nDCG@10"
        cache = args.out / "cache" / name
        singles = ev.single_systems(docs, ["tfidf", "colbert-full"], args.k, args.checkpoint, cache, "cpu",
                                    args.faiss, args.k_hat, False, args.long_docs)
        lexical = ev.cached_run(singles["tfidf"], topics, cache, f"{ev.tfidf_key()}-k{args.k}")
        neural = ev.cached_run(singles["colbert-full"], topics, cache,
                               ev.colbert_key(singles["colbert-fingerprint"], args.k, args.faiss, args.k_hat,
                                              args.long_docs))
        aligned = {norm: align(topics, [lexical, neural], norm) for norm in ("minmax", "zscore")}
        values = {}
        for label, (norm, weight) in variants().items():
            al = aligned[norm]
            run = assemble(topics, al, linear(al, weight(al)), args.k)
            values[label] = per_query(run, qrels, [measure], topics["qid"])[measure].mean()
        key = f"{name} {'selection' if name == 'squad' else ''} {measure}".replace("  ", " ")
        columns[key] = pd.Series(values)
    table = pd.DataFrame(columns)
    best = table.loc[["TF-IDF", "ColBERT end to end"]].max()
    gains = table - best
    table["worst vs better single"] = gains.min(axis=1)
    table["mean vs better single"] = gains.mean(axis=1)
    print(table.to_string(float_format="{:.4f}".format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
