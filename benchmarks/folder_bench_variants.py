"""``folder_bench.py variants`` (a helper module of benchmarks/folder_bench.py, not a script; its docstring
describes the job): fp16 folders in float32 and bfloat16 encoding, their residual2 conversions with each codec rule,
the codec's noise, and each folder searched with its own, deeper and exhaustive ColBERT settings."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
from folder_bench_common import ROOT, convert, question_set, sizes

# -- variants: fp16 against residual2, codec and search settings, float32 against bfloat16 encoding ----------------
#: the residual2 variants of ``variants``: each centroid count, from float32 and from bfloat16 vectors
PRECISIONS = {"fp16": "float32", "bf16-fp16": "bfloat16"}


def plaid_centroids(tokens: int) -> int:
    """colbert-ai's centroid count for ``tokens`` vectors: ``2^floor(log2(16·sqrt(tokens)))``.

    >>> plaid_centroids(23_519), plaid_centroids(279_487), plaid_centroids(897_094)
    (2048, 8192, 8192)
    """
    import math

    return int(2 ** math.floor(math.log2(16 * math.sqrt(tokens))))


def vector_rows(folder: Path, start: int, end: int):
    """Token vectors ``[start, end)`` of a folder's ColBERT index as float32: an fp16 index's stored vectors, a
    compressed index's decompressed ones (its exact outliers as stored)."""
    import numpy as np

    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex

    index = ColBERTIndex(folder / "colbert")
    if not index.compressed:
        return np.asarray(index.vectors[start:end], dtype=np.float32)
    return index.store.rows(start, end)


def codec_noise(out: Path, rule: str) -> Dict[str, Any]:
    """Per token vector: the residual2 reconstruction error, bfloat16's deviation from float32, and what bfloat16
    changes in the codes of one codec (the float32 folder's)."""
    import numpy as np

    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
    from pyterrier_fandom_colbert.index.residual.codec import unpack_bits

    exact32, exact16 = out / "fp16", out / "bf16-fp16"
    r32, r16 = out / f"residual2-{rule}", out / f"bf16-residual2-{rule}-samecodec"
    total = len(ColBERTIndex(exact32 / "colbert").vectors)
    a32, a16 = (ColBERTIndex(f / "colbert").store.arrays for f in (r32, r16))  # type: ignore[attr-defined]
    nbits = ColBERTIndex(r32 / "colbert").codec.nbits
    norms: Dict[str, List[Any]] = {"codec_error": [], "bf16_deviation": [], "bf16_codec_change": [],
                                   "bf16_own_codec_error": []}
    largest = {"codec_error": 0.0, "bf16_deviation": 0.0}
    codes_differ = buckets_differ = vectors_differ = 0
    for start in range(0, total, 65536):
        end = min(total, start + 65536)
        v32, v16 = vector_rows(exact32, start, end), vector_rows(exact16, start, end)
        d32, d16 = vector_rows(r32, start, end), vector_rows(r16, start, end)
        norms["codec_error"].append(np.linalg.norm(d32 - v32, axis=1))
        norms["bf16_deviation"].append(np.linalg.norm(v16 - v32, axis=1))
        norms["bf16_codec_change"].append(np.linalg.norm(d16 - d32, axis=1))
        norms["bf16_own_codec_error"].append(np.linalg.norm(d16 - v16, axis=1))
        largest["codec_error"] = max(largest["codec_error"], float(np.abs(d32 - v32).max()))
        largest["bf16_deviation"] = max(largest["bf16_deviation"], float(np.abs(v16 - v32).max()))
        c32, c16 = np.asarray(a32.codes[start:end]), np.asarray(a16.codes[start:end])
        b32, b16 = (unpack_bits(np.asarray(a.residuals[start:end]), nbits) for a in (a32, a16))
        codes_differ += int((c32 != c16).sum())
        buckets_differ += int((b32 != b16).sum())
        vectors_differ += int(((c32 != c16) | (b32 != b16).any(1)).sum())
    report: Dict[str, Any] = {"vectors": total, "dims": int(b32.shape[1])}
    for name, parts in norms.items():
        values = np.concatenate(parts)
        report[f"{name}_l2"] = {"mean": float(values.mean()), "p50": float(np.median(values)),
                                "p99": float(np.quantile(values, 0.99)), "max": float(values.max())}
    report["largest_element"] = largest
    report["share_centroid_ids_differ"] = codes_differ / total
    report["share_residual_buckets_differ"] = buckets_differ / (total * report["dims"])
    report["share_vectors_coded_differently"] = vectors_differ / total
    return report


def mixed_folder(out: Path, rule: str, share: float) -> Dict[str, Any]:
    """``mixed-{rule}-{share}``: an fp16 folder of the ``residual2-{rule}`` folder's decompressed vectors, except the
    ``share`` of tokens the codec reconstructs worst (L2 error), which keep their exact vectors: what a codec that
    stored its outlier tokens exactly would search (simulated; searched with exact neighbour search, ``flat``)."""
    import numpy as np

    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex

    exact, coded = out / "fp16", out / f"residual2-{rule}"
    total = len(ColBERTIndex(exact / "colbert").vectors)
    mixed = np.empty((total, ColBERTIndex(exact / "colbert").vectors.shape[1]), dtype=np.float16)
    errors = np.empty(total, dtype=np.float32)
    for a in range(0, total, 65536):
        b = min(total, a + 65536)
        v, d = vector_rows(exact, a, b), vector_rows(coded, a, b)
        errors[a:b] = np.linalg.norm(d - v, axis=1)
        mixed[a:b] = d
    cutoff = float(np.quantile(errors, 1 - share)) if share > 0 else float("inf")
    for a in range(0, total, 65536):
        b = min(total, a + 65536)
        keep = errors[a:b] > cutoff
        if keep.any():
            mixed[a:b][keep] = vector_rows(exact, a, b)[keep]
    name = f"mixed-{rule}-{share:g}"
    if not (out / name / "manifest.json").exists():
        convert(exact, out / name, "fp16", vectors_of=lambda start, end: mixed[start:end])
    return {"folder": name, "error_cutoff": cutoff, "exact_tokens": int((errors > cutoff).sum())}


def make_variants(args, source) -> Dict[str, Any]:
    """The fp16 folders (float32 and, with ``--bf16``, bfloat16 encoding) and their residual2 conversions."""
    import dataclasses

    from pyterrier_fandom_colbert.app.folder import SearchSettings, build_folder, load_manifest
    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
    from pyterrier_fandom_colbert.index.residual.compress import CompressionSpec
    from pyterrier_fandom_colbert.model.colbert import ColBERT

    report: Dict[str, Any] = {"build_seconds": {}, "convert_seconds": {}}
    precisions = PRECISIONS if args.bf16 else {"fp16": "float32"}
    for name, precision in precisions.items():
        if (args.out / name / "manifest.json").exists():
            continue
        colbert = ColBERT.from_pretrained(args.checkpoint, cpu_precision=precision)
        started = time.perf_counter()
        build_folder(source, args.out / name, colbert=colbert, checkpoint=args.checkpoint,
                     settings=SearchSettings(compression="fp16"), verbose=not args.quiet)
        report["build_seconds"][name] = round(time.perf_counter() - started, 1)
        del colbert
    tokens = load_manifest(args.out / "fp16").tokens
    for rule in args.centroids:
        spec = CompressionSpec("residual2", num_centroids=plaid_centroids(tokens) if rule == "plaid" else None)
        todo = [(f"residual2-{rule}", "fp16", None, spec)]
        if args.bf16:  # bfloat16 vectors: own codec, the float32 folder's codec; a codec trained with another seed
            todo += [(f"bf16-residual2-{rule}", "bf16-fp16", None, spec),
                     (f"bf16-residual2-{rule}-samecodec", "bf16-fp16", f"residual2-{rule}", spec),
                     (f"residual2-{rule}-seed1", "fp16", None, dataclasses.replace(spec, seed=1))]
        for name, base, codec_of, how in todo:
            if (args.out / name / "manifest.json").exists() and not args.reconvert:
                continue
            started = time.perf_counter()
            codec = ColBERTIndex(args.out / codec_of / "colbert").codec if codec_of else None
            convert(args.out / base, args.out / name, how, codec=codec)
            report["convert_seconds"][name] = round(time.perf_counter() - started, 1)
        report[f"centroids_{rule}"] = ColBERTIndex(args.out / f"residual2-{rule}" / "colbert").codec.num_centroids
        if args.bf16:
            report[f"codec_noise_{rule}"] = codec_noise(args.out, rule)
        for share in args.outliers:
            report.setdefault("outliers", {})[f"{rule}-{share:g}"] = mixed_folder(args.out, rule, share)
        for share in (s for s in args.exact_shares if s > 0):  # exact outliers, written by the index writer
            name = f"residual2-{rule}-exact{share:g}"
            if not (args.out / name / "manifest.json").exists() or args.reconvert:
                started = time.perf_counter()
                convert(args.out / "fp16", args.out / name, dataclasses.replace(spec, exact_share=share))
                report["convert_seconds"][name] = round(time.perf_counter() - started, 1)
            index = ColBERTIndex(args.out / name / "colbert")
            report.setdefault("exact_outliers", {})[name] = {"exact_above": index.codec.exact_above,
                                                             "exact_rows": index.meta.exact_rows,
                                                             "tokens": index.meta.num_tokens}
    return report


#: search settings of ``variants`` beside each folder's own: (ncells, ndocs, nscore) of the ColBERT retriever
SEARCHES = {"deep": (None, 4096, 1024), "exhaustive": (1 << 30, None, None)}


def dense_runs(folder: Path, colbert, encoded, search: str) -> Any:
    """The folder's ColBERT ranking (depth as in the folder's hybrid) of the encoded questions, with ``search``
    (``folder``: its manifest's settings, or one of :data:`SEARCHES`), and ms per question."""
    from pyterrier_fandom_colbert.app.folder import load_manifest
    from pyterrier_fandom_colbert.app.search import MAX_K
    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex

    settings = load_manifest(folder).settings
    depth = max(MAX_K, settings.fusion.depth)
    index = ColBERTIndex(folder / "colbert")
    if search == "folder":
        retriever = index.retriever(num_results=depth, **settings.retriever.to_retriever_kwargs())
    elif search == "flat":
        retriever = index.retriever(num_results=depth, k_hat=settings.retriever.k_hat, faiss="flat")
    else:
        ncells, ndocs, nscore = SEARCHES[search]
        retriever = index.retriever(num_results=depth, ncells=ncells, ndocs=ndocs, nscore=nscore)
    started = time.perf_counter()
    run = retriever(encoded)
    return run, round(1000 * (time.perf_counter() - started) / len(encoded), 1)


def systems_of(folder: Path, tfidf_run, dense_run, encoded) -> Dict[str, Any]:
    """``{system: top-10 run}`` for tfidf, colbert and the folder's hybrid, from the two rankings."""
    import pyterrier as pt

    from pyterrier_fandom_colbert.app.folder import load_manifest
    from pyterrier_fandom_colbert.app.fusion_settings import hybrid_system

    fusion = load_manifest(folder).settings.fusion
    hybrid = hybrid_system(pt.Transformer.from_df(tfidf_run, uniform=False),
                           pt.Transformer.from_df(dense_run, uniform=False), fusion)(encoded)
    return {name: run[run["rank"] < 10] for name, run in
            (("tfidf", tfidf_run), ("colbert", dense_run), ("hybrid", hybrid))}


def judged_measures(runs: Dict[str, Any], qrels) -> Dict[str, Any]:
    import ir_measures
    from ir_measures import RR, R, nDCG

    out = {}
    for system, run in runs.items():
        run = run.rename(columns={"qid": "query_id", "docno": "doc_id"})[["query_id", "doc_id", "score"]]
        scores = ir_measures.calc_aggregate([nDCG @ 10, RR @ 10, R @ 10], qrels, run)
        out[system] = {str(k): round(float(v), 4) for k, v in scores.items()}
    return out


def fact_measures(folder: Path, runs: Dict[str, Any], questions) -> Dict[str, Any]:
    """benchmarks/fact_questions.py's counts (answer@10, answer_on_page@10, page@10) and the answer's RR@10."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fact_questions as fq

    from pyterrier_fandom_colbert.app.search import Searcher

    searcher = Searcher(folder, warm=False)
    out: Dict[str, Any] = {}
    for system, run in runs.items():
        counts = {"answer@10": 0, "answer_on_page@10": 0, "page@10": 0}
        rr, ranks = 0.0, {}
        for q in questions:
            rows = run[run["qid"] == q["qid"]].sort_values("rank")
            positions = searcher._positions(rows["docno"])
            texts = searcher.tfidf.texts(positions) if len(rows) else []
            titles = [searcher.passages.get(int(p)).get("title") or "" for p in positions]
            answer = [i for i, t in enumerate(texts) if fq.contains_answer(t, q["answers"])]
            page = [i for i, t in enumerate(titles) if fq._same_page(t, q["title"])]
            counts["answer@10"] += bool(answer)
            counts["answer_on_page@10"] += bool(set(answer) & set(page))
            counts["page@10"] += bool(page)
            rr += 1 / (answer[0] + 1) if answer else 0.0
            ranks[q["qid"]] = answer[0] + 1 if answer else None
        out[system] = {**counts, "answer_RR@10": round(rr / len(questions), 4), "first_answer_rank": ranks}
    return out


def variants(args) -> Dict[str, Any]:
    """Build (or reuse) the variants' folders, then search each with each setting on the question set."""
    import pandas as pd

    from pyterrier_fandom_colbert.app.search import Searcher
    from pyterrier_fandom_colbert.model.colbert import ColBERT

    source, topics, qrels = question_set(args)
    report: Dict[str, Any] = {"dump": str(args.dump), "data": args.data, "dataset": args.dataset}
    report.update(make_variants(args, source))
    facts = None
    if args.facts is not None:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import fact_questions as fq

        facts = fq.load_questions(args.facts)
        topics = pd.DataFrame({"qid": [q["qid"] for q in facts], "query": [q["question"] for q in facts]})
    folders = ["fp16"] + [f"{p}residual2-{rule}{x}" for rule in args.centroids
                          for p, x in ((("", ""), ("bf16-", ""), ("", "-seed1")) if args.bf16 else (("", ""),))]
    folders += [f"residual2-{rule}-exact{share:g}" for rule in args.centroids for share in args.exact_shares
                if share > 0]
    for name in folders:
        report.setdefault("sizes", {})[name] = sizes(args.out / name)
    if args.outliers:  # the simulated folders, and fp16's exact vectors under the same (flat) search
        folders += [f"mixed-{rule}-{share:g}" for rule in args.centroids for share in args.outliers]
    if topics is None or args.build_only:
        return report
    report["questions"] = len(topics)
    colbert = ColBERT.from_pretrained(args.checkpoint)
    encoded = colbert.query_encoder()(topics)
    tfidf_run = Searcher(args.out / "fp16", colbert=colbert, warm=False).pipeline("tfidf")(topics)
    results: Dict[str, Any] = {}
    tops: Dict[str, Dict[str, Any]] = {}
    for name in folders:
        searches = ["folder"] + ([] if name == "fp16" or "-seed" in name or name.startswith("mixed-")
                                 else list(args.searches))
        if name == "fp16" and args.outliers:
            searches.append("flat")
        for search in searches:
            dense_run, ms = dense_runs(args.out / name, colbert, encoded, search)
            runs = systems_of(args.out / name, tfidf_run, dense_run, encoded)
            measures = fact_measures(args.out / name, runs, facts) if facts is not None \
                else judged_measures(runs, qrels)
            measures["colbert_ms_per_query"] = ms
            results[f"{name}/{search}"] = measures
            tops[f"{name}/{search}"] = {system: run.groupby("qid")["docno"].agg(set).to_dict()
                                        for system, run in runs.items()}
            print(name, search, json.dumps({s: {k: v for k, v in m.items() if k != "first_answer_rank"}
                                            for s, m in measures.items() if isinstance(m, dict)}),
                  file=sys.stderr, flush=True)
    report["results"] = results
    references = ["fp16/folder"] + [f"residual2-{rule}/folder" for rule in args.centroids]
    report["top10_overlap"] = {ref: {key: {system: top10_overlap(tops[ref][system], top[system])
                                           for system in ("colbert", "hybrid")}
                                     for key, top in tops.items() if key != ref} for ref in references}
    return report


def top10_overlap(a: Dict[str, set], b: Dict[str, set]) -> float:
    """Mean share of one ranking's top 10 in the other's, over the questions of either (a question missing from
    one counts as no overlap).

    >>> top10_overlap({"q1": set("abcdefghij"), "q2": set("abcdefghij")}, {"q1": set("abcdefghiz")})
    0.45
    """
    qids = set(a) | set(b)
    return round(sum(len(a.get(q, set()) & b.get(q, set())) / 10 for q in qids) / len(qids), 4)
