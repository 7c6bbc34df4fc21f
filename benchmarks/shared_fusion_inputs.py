"""ColBERT alone and inside three fusions, in one experiment: ``pt.Experiment`` (each fusion re-runs its inputs)
against ``pfc.Experiment`` (each distinct system runs once). docs/experiments/fusion.md records the figures.

    python benchmarks/shared_fusion_inputs.py --out /tmp/shared --threads 2

On the bundled sample (``irds:fandom-qa/sample/test``) with the shipped checkpoint; builds the two indexes under
``--out`` first (timed apart). Prints the seconds of ColBERT alone and of each experiment, and whether the two
tables agree.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for the two indexes")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dataset", default="irds:fandom-qa/sample/test")
    parser.add_argument("--checkpoint", default=None, help="ColBERT checkpoint (default: the package's)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions (default: all)")
    args = parser.parse_args(argv)

    import pandas as pd
    import pyterrier as pt
    import torch
    from ir_measures import RR, R, nDCG

    import pyterrier_fandom_colbert as pfc

    torch.set_num_threads(args.threads)
    dataset = pt.get_dataset(args.dataset)
    colbert = pfc.ColBERT.from_pretrained(args.checkpoint, device="cpu")
    tfidf_index, index = pfc.TfidfIndex(args.out / "tfidf"), pfc.ColBERTIndex(args.out / "colbert")
    start = time.perf_counter()
    if not tfidf_index.built():
        tfidf_index.indexer(store_text=True).index(dataset.get_corpus_iter())
    if not index.built():
        index.indexer(colbert, verbose=True).index(dataset.get_corpus_iter())
    print(f"indexes ready in {time.perf_counter() - start:.1f} s ({index.meta.num_docs} passages)")

    tfidf = tfidf_index.retriever(num_results=1000)
    neural = colbert.query_encoder() >> index.retriever(num_results=1000)
    systems = [tfidf, neural, pfc.Hybrid(tfidf, neural), pfc.RRF([tfidf, neural]),
               pfc.LinearFusion([tfidf, neural], normalise="minmax")]
    names = ["tfidf", "colbert", "hybrid", "rrf", "linear"]
    topics, qrels = dataset.get_topics("text"), dataset.get_qrels()
    topics = topics.head(args.limit) if args.limit else topics
    measures = [RR @ 10, R @ 10, nDCG @ 10]
    start = time.perf_counter()
    neural(topics)
    print(f"ColBERT end to end alone: {time.perf_counter() - start:.1f} s on {len(topics)} queries")
    tables = {}
    for label, run in (("pt.Experiment", pt.Experiment), ("pfc.Experiment", pfc.Experiment)):
        start = time.perf_counter()
        tables[label] = run(systems, topics, qrels, measures, names=names)
        seconds = time.perf_counter() - start
        print(f"{label}: {seconds:.1f} s for {len(systems)} systems on {len(topics)} queries")
    print(tables["pfc.Experiment"].to_string(index=False))
    pd.testing.assert_frame_equal(tables["pt.Experiment"], tables["pfc.Experiment"])
    print("tables equal")


if __name__ == "__main__":
    main()
