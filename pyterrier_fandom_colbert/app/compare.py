"""pfc-compare: TF-IDF against ColBERT (re-ranking TF-IDF, and end to end) and their hybrid on a FANDOM-QA split.

    pfc-compare                                             # fandom-qa/sample/test → runs/compare/
    pfc-compare --systems tfidf colbert-rerank --k 100 --checkpoint path/to/checkpoint
    pfc-compare --systems tfidf splade splade-colbert      # SPLADE (exhaustive), and as ColBERT's first stage

Prints a ``pt.Experiment`` table and writes ``results.csv``, ``recall_at_k.csv`` and ``recall_at_k.png``
(recall against cut-off k, log scale) into ``--out``. Indexes are cached under ``<out>/cache/<dataset>/``
(the ColBERT index per encoder fingerprint); delete that folder to rebuild them.

The hybrid (``pfc.Hybrid`` of TF-IDF and ColBERT end to end) takes its weight from ``--tune-dataset``: by default
the ``dev`` split beside a ``.../test`` dataset (same corpus, other questions), never the questions it is
measured on; the curve goes to ``hybrid_tuning.csv`` / ``.png``. Without a dev split it keeps its default weight.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, cast

from ..cli_errors import UserError, add_debug_flag, require_dataset, require_model_path, run

if TYPE_CHECKING:  # pragma: no cover
    import pyterrier as pt

SYSTEMS = {"tfidf": "TF-IDF", "colbert-rerank": "TF-IDF >> ColBERT", "colbert-full": "ColBERT (full)",
           "hybrid": "Hybrid (TF-IDF + ColBERT)", "splade": "SPLADE", "splade-colbert": "SPLADE >> ColBERT"}
#: SPLADE's default weights are an optional extra ([splade]), so its systems run only when asked for
DEFAULT_SYSTEMS = ["tfidf", "colbert-rerank", "colbert-full", "hybrid"]
#: lexical weights the hybrid's tuning tries
TUNING_GRID = [round(0.05 * i, 2) for i in range(21)]
DEFAULT_METRICS = "RR@10,R@1,R@10,R@50"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="pfc-compare", description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="fandom-qa/sample/test", help="ir_datasets id (topics, qrels, corpus)")
    ap.add_argument("--systems", nargs="+", choices=list(SYSTEMS), default=DEFAULT_SYSTEMS)
    ap.add_argument("--metrics", default=DEFAULT_METRICS, help="comma-separated ir_measures names")
    ap.add_argument("--out", type=Path, default=Path("runs/compare"), help="output folder (created)")
    ap.add_argument("--checkpoint", default=None, help="ColBERT checkpoint folder (default: the bundled one)")
    ap.add_argument("--splade", default=None, help="SPLADE masked-LM folder (default: SPLADE-tiny, extra [splade])")
    ap.add_argument("--k", type=int, default=1000, help="results per query (TF-IDF depth re-ranked by ColBERT)")
    ap.add_argument("--tune-dataset", default="auto",
                    help="ir_datasets id whose topics/qrels tune the hybrid's weight (same corpus as --dataset); "
                         "'auto': the dev split beside a .../test dataset; 'none': the hybrid's default weight")
    ap.add_argument("--verbose", action="store_true", help="progress bars")
    add_debug_flag(ap)
    return ap


def systems_for(corpus_iter, names: Sequence[str], cache: Path, k: int, checkpoint: Optional[str],
                verbose: bool = False, splade: Optional[str] = None) -> Dict[str, "pt.Transformer"]:
    """The named pipelines, building (or reusing) their indexes under ``cache``."""
    import pyterrier as pt

    import pyterrier_fandom_colbert as pfc

    systems = {}
    requested, names = names, list(names)
    if "hybrid" in names:  # fuses the two single systems
        names += [n for n in ("tfidf", "colbert-full") if n not in names]
    if {"tfidf", "colbert-rerank"} & set(names):
        config = pfc.TfidfConfig()  # cached per settings: an index built under other defaults is not reused
        tfidf = pfc.TfidfIndex(cache / f"tfidf-{config.settings_digest()}")
        if not tfidf.built():
            tfidf.indexer(config=config, store_text=True, verbose=verbose).index(corpus_iter())
        systems["tfidf"] = tfidf.retriever(num_results=k, text=True, verbose=verbose)
    if {"splade", "splade-colbert"} & set(names):
        systems["splade"] = splade_first_stage(corpus_iter, cache, k, splade, verbose)
    if {"colbert-rerank", "colbert-full", "splade-colbert"} & set(names):
        colbert = pfc.ColBERT.from_pretrained(checkpoint, verbose=verbose)
        if "colbert-rerank" in names:
            systems["colbert-rerank"] = systems["tfidf"] >> colbert.text_scorer()
        if "splade-colbert" in names:
            texts = {d["docno"]: d["text"] for d in corpus_iter()}
            add_text = pt.apply.generic(lambda frame: frame.assign(text=frame["docno"].map(texts)))
            systems["splade-colbert"] = systems["splade"] >> add_text >> colbert.text_scorer()
        if "colbert-full" in names:
            long_docs = "windows"
            index = pfc.ColBERTIndex(cache / f"colbert-{long_docs}-{colbert.fingerprint()[:16]}")
            if not index.built():
                index.indexer(colbert, verbose=verbose, long_docs=long_docs).index(corpus_iter())
            systems["colbert-full"] = index.retriever(colbert, num_results=k, verbose=verbose)
    if "hybrid" in names:
        systems["hybrid"] = pfc.Hybrid(systems["tfidf"], systems["colbert-full"], num_results=k)
    return {SYSTEMS[n]: systems[n] for n in requested}


def tune_dataset_id(dataset_id: str, choice: str) -> Optional[str]:
    """The dataset that tunes the hybrid: ``choice``, or for 'auto' the dev split beside a .../test dataset.

    >>> tune_dataset_id("fandom-qa/sample/test", "auto"), tune_dataset_id("x/dev", "auto")
    ('fandom-qa/sample/dev', None)
    >>> tune_dataset_id("fandom-qa/sample/test", "none"), tune_dataset_id("a/test", "b/dev")
    (None, 'b/dev')
    """
    if choice == "none":
        return None
    if choice != "auto":
        return choice
    head, _, last = dataset_id.rpartition("/")
    return f"{head}/dev" if head and last == "test" else None


def tune_hybrid(hybrid, tune, out: Path, verbose: bool = False):
    """The hybrid's weight maximising RR@10 on the ``tune`` dataset's questions; writes the curve."""
    import pyterrier_fandom_colbert as pfc

    lexical, neural = hybrid.systems
    tuned = pfc.tune_fusion([lexical, neural], query_topics(tune), tune.get_qrels(), "RR@10", TUNING_GRID,
                            fusion=lambda w: hybrid.with_weight(w), measures=["R@1", "R@10"], verbose=verbose)
    tuned.curve.drop(columns=["point"]).to_csv(out / "hybrid_tuning.csv", index=False)
    tuned.plot(out / "hybrid_tuning.png", title="hybrid weight on the tuning questions",
               xlabel="lexical (TF-IDF) weight")
    return tuned


def splade_first_stage(corpus_iter, cache: Path, k: int, weights: Optional[str], verbose: bool = False):
    """SPLADE query encoder >> exhaustive learned-sparse retrieval over an index cached per encoder."""
    from ..sparse.encoder import Splade
    from ..sparse.index import SparseIndex

    splade = Splade.from_pretrained(weights, verbose=verbose)
    index = SparseIndex(cache / f"splade-{splade.fingerprint()}")
    if not index.built():
        # PyTerrier types `>>` as a Transformer; a pipeline ending in an indexer is an indexer
        cast("pt.Indexer", splade.doc_encoder() >> index.indexer(verbose=verbose)).index(corpus_iter())
    return splade.query_encoder() >> index.retriever(num_results=k, verbose=verbose)


def curve_cutoffs(k: int, points: int = 40) -> List[int]:
    """Log-spaced cut-offs 1 … k for the recall curve.

    >>> curve_cutoffs(1000, 7)
    [1, 3, 10, 32, 100, 316, 1000]
    """
    import numpy as np

    return sorted({int(c) for c in np.geomspace(1, k, points).round()})


def plot_recall(curve, cutoffs: Sequence[int], path: Path, title: str) -> None:
    from ..cli_errors import require_extra

    matplotlib = require_extra("matplotlib", "plot", "plotting recall curves")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(6, 4))
    for _, row in curve.iterrows():
        ax.plot(cutoffs, [row[f"R@{c}"] for c in cutoffs], label=row["name"], drawstyle="steps-post")
    ax.set(xscale="log", xlabel="k", ylabel="Recall@k", ylim=(0, 1.02), title=title)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def query_topics(dataset):
    """qid, query topics. Datasets whose queries carry more fields (FANDOM-QA and SQuAD keep the gold answers)
    give several columns and no ``query``; then their ``text`` field is the query."""
    irds_ref = getattr(dataset, "irds_ref", None)
    if irds_ref is not None:
        fields = irds_ref().queries_cls()._fields[1:]
        if len(fields) > 1 and "text" in fields:
            return dataset.get_topics("text")
    topics = dataset.get_topics()
    return topics if "query" in topics.columns else dataset.get_topics("text")


def parse_metrics(metrics: str) -> list:
    """ir_measures measures from a comma-separated list; an empty list or an unknown name is a UserError."""
    import ir_measures

    names = [m.strip() for m in metrics.split(",") if m.strip()]
    if not names:
        raise UserError(f"--metrics {metrics!r} names no measure; give comma-separated ir_measures names, e.g. "
                        f"--metrics {DEFAULT_METRICS}")
    measures = []
    for name in names:
        try:
            measures.append(ir_measures.parse_measure(name))
        except (NameError, ValueError, SyntaxError) as err:
            raise UserError(f"--metrics: {name!r} is not an ir_measures measure ({err}); use names such as RR@10, "
                            "R@100, nDCG@10, P@5, AP") from err
    return measures


def compare(dataset, dataset_id: str, names: Sequence[str], metrics: str, out: Path, k: int,
            checkpoint: Optional[str] = None, verbose: bool = False, splade: Optional[str] = None, tune=None):
    """Run the experiment for a PyTerrier dataset (corpus iter, topics, qrels); write files; return the table.
    ``tune``: a dataset over the same corpus whose topics and qrels choose the hybrid's weight (None: default)."""
    import ir_measures
    import pyterrier as pt

    measures = parse_metrics(metrics)
    cutoffs = curve_cutoffs(k)
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "cache" / dataset_id.replace("/", "--")
    corpus = lambda: dataset.get_corpus_iter(verbose=verbose)
    systems = systems_for(corpus, names, cache, k, checkpoint, verbose, splade)
    if "hybrid" in names and tune is not None:
        tuned = tune_hybrid(systems[SYSTEMS["hybrid"]], tune, out, verbose)
        print(f"hybrid weight {tuned.best} (RR@10 {tuned.value:.4f} on the tuning questions)")
        systems[SYSTEMS["hybrid"]] = tuned.transformer()
    # plan="tree": the TF-IDF stage shared by several systems runs once
    res = pt.Experiment(list(systems.values()), query_topics(dataset), dataset.get_qrels(), names=list(systems),
                        eval_metrics=measures + [ir_measures.R @ c for c in cutoffs], plan="tree", verbose=verbose)
    table = res[["name"] + [str(m) for m in measures]]
    curve = res[["name"] + [f"R@{c}" for c in cutoffs]]
    table.to_csv(out / "results.csv", index=False)
    curve.to_csv(out / "recall_at_k.csv", index=False)
    plot_recall(curve, cutoffs, out / "recall_at_k.png", dataset_id)
    return table


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The ``pfc-compare`` command (user errors: one line on stderr, exit status 2; ``--debug``: traceback)."""
    return run(_main, argv, "pfc-compare")


def _main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.k < 1:
        raise UserError(f"--k {args.k}: expected a positive number of results")
    if args.out.exists() and not args.out.is_dir():
        raise UserError(f"--out {args.out} is a file; give a folder for the results (it is created if missing)")
    parse_metrics(args.metrics)
    require_model_path(args.checkpoint, "--checkpoint", "a ColBERT checkpoint folder (e.g. runs/sample/best from "
                                                        "pfc-train), or leave --checkpoint out for the bundled one")
    require_dataset(args.dataset, "--dataset")
    import pyterrier as pt

    dataset = pt.get_dataset(f"irds:{args.dataset}")
    tune_id = tune_dataset_id(args.dataset, args.tune_dataset) if "hybrid" in args.systems else None
    tune = None
    if tune_id is not None:
        import ir_datasets

        if tune_id in ir_datasets.registry:
            tune = pt.get_dataset(f"irds:{tune_id}")
        elif args.tune_dataset != "auto":
            raise SystemExit(f"--tune-dataset {tune_id}: no such ir_datasets id")
    if "hybrid" in args.systems:
        print(f"hybrid weight tuned on {tune_id}" if tune is not None else "hybrid with its default weight "
              "(no tuning split)")
    table = compare(dataset, args.dataset, args.systems, args.metrics, args.out, args.k, args.checkpoint,
                    args.verbose, args.splade, tune=tune)
    print(table.to_string(index=False, float_format="{:.4f}".format))
    tuning = ", hybrid_tuning.csv/.png" if tune is not None else ""
    print(f"wrote {args.out / 'results.csv'}, {args.out / 'recall_at_k.csv'}, {args.out / 'recall_at_k.png'}{tuning}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
