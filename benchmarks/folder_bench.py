"""Search folders on disk: size and search quality of an fp16 folder against a residual2 one, and the time of
``pfc index --update`` for a small change against a full build.

    # size and quality: fp16 and residual2 folders of one dump; questions of an ir_datasets split (qrels)
    python benchmarks/folder_bench.py quality --data squad --out runs/folder_bench/squad   # SQuAD report part
    python benchmarks/folder_bench.py quality --dump pyterrier_fandom_colbert/data/sample/samplewiki_pages_current.xml \
        --dataset fandom-qa/sample/test --out runs/folder_bench/sample
    # variants: float32 and bfloat16 encodings, residual2 codecs (default, colbert-ai's centroid count, seed 1),
    # each searched with its own, deeper and exhaustive ColBERT settings; --facts for the fact questions
    python benchmarks/folder_bench.py variants --data squad --queries 500 --out runs/fv/squad --bf16 \
        --centroids default plaid
    python benchmarks/folder_bench.py variants --dump DUMP --facts benchmarks/fact_questions.jsonl --bf16 \
        --out runs/fv/poke
    # update: change a share of the folder's articles in a copy of the dump, update a copy of the folder, time it
    python benchmarks/folder_bench.py update --dump DUMP --folder runs/folder_bench/x/residual2 --changed 0.01
    python benchmarks/folder_bench.py update ... --check   # also a fresh build with the folder's codec: equal?

``quality`` builds the fp16 folder with ``build_folder`` (what ``pfc index --compression fp16`` runs) and makes the
residual2 folder from it by writing its ColBERT index from the fp16 folder's vectors through the same index writer a
residual2 build uses: the same vectors in the same order, so the same codec and codes as ``pfc index`` (default
residual2) makes, without encoding the corpus twice (``--fresh`` builds it with ``build_folder`` instead, and checks
the two are equal). Each folder is searched with :class:`~pyterrier_fandom_colbert.app.search.Searcher`'s pipelines
(the systems of ``pfc search``) on the split's questions: nDCG@10, RR@10 and R@10 per system, and bytes per 1,000
passages.

``variants`` (docs/app.md, "Compressed folders" and "bfloat16 under a compressed folder") builds the fp16 folders
(float32 encoding, and with ``--bf16`` bfloat16), converts them as ``quality`` does with each ``--centroids`` rule,
and with ``--bf16`` also the bfloat16 vectors with the float32 folder's codec and the float32 vectors with a seed-1
codec; it reports the codec's error per vector against bfloat16's deviation and the codes bfloat16 changes, then
searches each folder with one encoding of the questions and one TF-IDF run, fused as the ``Searcher`` fuses them
(judged measures with qrels; the fact questions' counts and answer RR@10 with ``--facts``), and top-10 overlaps.
``--exact-shares`` also converts the fp16 folder into residual2 folders that store that share of tokens exactly
(``CompressionSpec.exact_share``, written by the index writer; ``--outliers`` is the older simulation of the same).

``update`` edits ``--changed`` of the folder's article pages (a sentence appended, a new revision id), writes the
edited dump as ``.xml`` beside a copy of the folder and times ``update_folder`` on the copy, against the folder's
own build time (its manifest). ``--check`` also builds the edited dump afresh with the folder's codec
(``build_folder(codec_from=)``) and compares every search result (docno and score) and the ColBERT files.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("tfidf", "colbert", "hybrid")


def convert(fp16_folder: Path, out: Path, compression: Any = "residual2", codec: Any = None,
            vectors_of: Any = None) -> None:
    """A copy of ``fp16_folder`` whose ColBERT index is written in ``compression`` (a format name or a
    ``CompressionSpec``) from its fp16 vectors; ``codec``: a known codec instead of one trained on them;
    ``vectors_of(start, end)``: the token vectors to write instead of the folder's rows ``[start, end)``."""
    import dataclasses

    import numpy as np

    from pyterrier_fandom_colbert.app.folder import COLBERT_DIR, MANIFEST, Manifest, folder_bytes
    from pyterrier_fandom_colbert.app.folder.assemble import parts_of
    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
    from pyterrier_fandom_colbert.index.residual.compress import CompressionSpec
    from pyterrier_fandom_colbert.index.writer import IndexWriter
    from pyterrier_fandom_colbert.storage import build_manifest, read_json, unsealed, write_artifact_meta

    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(fp16_folder, out, ignore=shutil.ignore_patterns(COLBERT_DIR))
    source = ColBERTIndex(fp16_folder / COLBERT_DIR)
    meta = source.meta
    with IndexWriter(out / COLBERT_DIR, source.config, meta.fingerprint, long_docs=meta.long_docs, stride=meta.stride,
                     compression=compression, codec=codec) as writer:
        for doc in range(len(source)):
            start, end = int(source.offsets[doc]), int(source.offsets[doc + 1])
            vectors = np.asarray(source.vectors[start:end]) if vectors_of is None else vectors_of(start, end)
            writer.add(str(source.docnos_of(np.array([doc]))[0]), vectors,
                       np.asarray(source.token_ids[start:end]), parts_of(source, doc))
        writer.truncated_docs, writer.windowed_docs = meta.truncated_docs, meta.windowed_docs
    manifest = Manifest.from_dict(unsealed(read_json(out / MANIFEST), out / MANIFEST))
    spec = CompressionSpec(compression) if isinstance(compression, str) else compression
    settings = dataclasses.replace(manifest.settings, compression=spec.format, exact_share=spec.exact_share)
    if vectors_of is not None:  # simulated vectors are searched exhaustively (no neighbour index to train)
        settings = dataclasses.replace(settings, faiss="flat")
    manifest = dataclasses.replace(manifest, settings=settings,
                                   codec={"trained_on": manifest.passages, "encoded_since": 0})
    if manifest.files is not None:  # the checksums of the new ColBERT index's pt_meta.json (its own manifest)
        manifest = dataclasses.replace(manifest, files=build_manifest(out, manifest.files))
    manifest = dataclasses.replace(manifest, bytes=folder_bytes(out))
    write_artifact_meta(out / MANIFEST, manifest.to_dict())


def sizes(folder: Path) -> Dict[str, Any]:
    from pyterrier_fandom_colbert.app.folder import load_manifest

    parts: Dict[str, int] = {}
    for path in folder.rglob("*"):
        if path.is_file():
            top = path.relative_to(folder).parts[0]
            parts[top] = parts.get(top, 0) + path.stat().st_size
    total = sum(parts.values())
    passages = load_manifest(folder).passages
    return {"bytes": total, "passages": passages, "mib_per_1000_passages": round(total / 2**20 / passages * 1000, 2),
            "parts_mib": {k: round(v / 2**20, 2) for k, v in sorted(parts.items())}}


def irds_questions(dataset: str):
    """(topics: qid, query; qrels: query_id, doc_id, relevance) of an ir_datasets split."""
    import ir_datasets
    import pandas as pd

    data = ir_datasets.load(dataset)
    topics = pd.DataFrame([{"qid": q.query_id, "query": q.default_text()} for q in data.queries_iter()])
    qrels = pd.DataFrame([{"query_id": q.query_id, "doc_id": q.doc_id, "relevance": q.relevance}
                          for q in data.qrels_iter()])
    return topics, qrels


def evaluate(folder: Path, colbert, topics, qrels) -> Dict[str, Any]:
    import ir_measures
    from ir_measures import RR, R, nDCG

    from pyterrier_fandom_colbert.app.search import Searcher

    searcher = Searcher(folder, colbert=colbert, warm=False)
    out: Dict[str, Any] = {}
    for system in SYSTEMS:
        started = time.perf_counter()
        run = searcher.pipelines[system](topics.copy())
        seconds = time.perf_counter() - started
        run = run[run["rank"] < 10].rename(columns={"qid": "query_id", "docno": "doc_id"})
        scores = ir_measures.calc_aggregate([nDCG @ 10, RR @ 10, R @ 10], qrels, run[["query_id", "doc_id", "score"]])
        out[system] = {str(k): round(float(v), 4) for k, v in scores.items()}
        out[system]["ms_per_query"] = round(1000 * seconds / len(topics), 1)
    out["questions"] = len(topics)
    return out


def quality(args) -> Dict[str, Any]:
    from pyterrier_fandom_colbert.app.folder import SearchSettings, build_folder
    from pyterrier_fandom_colbert.model.colbert import ColBERT

    colbert = ColBERT.from_pretrained(args.checkpoint)
    fp16, r2 = args.out / "fp16", args.out / "residual2"
    report: Dict[str, Any] = {"dump": str(args.dump), "data": args.data}
    # measures average over the judged questions: only those asked
    source, topics, qrels = question_set(args)
    if topics is not None and args.queries:
        report["questions_asked"] = f"the first {len(topics)}"
    if not fp16.exists():
        started = time.perf_counter()
        build_folder(source, fp16, colbert=colbert, checkpoint=args.checkpoint,
                     settings=SearchSettings(compression="fp16"), verbose=not args.quiet)
        report["fp16_build_seconds"] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    convert(fp16, r2)
    report["convert_seconds"] = round(time.perf_counter() - started, 1)
    if args.fresh:
        fresh = args.out / "residual2-fresh"
        if fresh.exists():
            shutil.rmtree(fresh)
        started = time.perf_counter()
        build_folder(source, fresh, colbert=colbert, checkpoint=args.checkpoint, verbose=not args.quiet)
        report["residual2_build_seconds"] = round(time.perf_counter() - started, 1)
        report["fresh_equals_converted"] = {
            name: (fresh / "colbert" / name).read_bytes() == (r2 / "colbert" / name).read_bytes()
            for name in ("codes.u16", "residuals.u8", "centroids.f16", "ivf_docs.i32")}
    for name, folder in (("fp16", fp16), ("residual2", r2)):
        report[name] = {"size": sizes(folder)}
        if topics is not None:
            report[name]["quality"] = evaluate(folder, colbert, topics, qrels)
    return report


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


def question_set(args):
    """(source, topics, qrels) of ``--data``/``--dataset``/``--dump`` (topics and qrels None without judgements).
    ``--data`` is a pipelines/evaluate.py question set: its corpus, questions and judgements."""
    topics = qrels = None
    source: Any = args.dump
    if args.data:
        sys.path.insert(0, str(ROOT / "pipelines"))
        import evaluate as pipeline

        docs, topics, qrels = pipeline.load(args.data, args.data_root)
        source = docs
        qrels = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    elif args.dataset:
        topics, qrels = irds_questions(args.dataset)
    if topics is not None and args.queries:
        topics = topics.head(args.queries)
    if topics is not None:
        qrels = qrels[qrels["query_id"].isin(set(topics["qid"]))]
    return source, topics, qrels


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


def edit_dump(dump: Path, out: Path, folder: Path, share: float, seed: int) -> Dict[str, Any]:
    """Append a sentence to ``share`` of the folder's articles (and give them a new revision id); write ``out``."""
    from pyterrier_fandom_colbert.data.dumpbytes import xml_chunks

    data = b"".join(xml_chunks(dump)).decode("utf-8")
    articles = [json.loads(line)["id"] for line in (folder / "pages.jsonl").read_text().splitlines()
                if json.loads(line)["skip"] is None]
    chosen = set(random.Random(seed).sample(articles, max(1, round(share * len(articles)))))
    edited = 0

    def change(match: "re.Match[str]") -> str:
        nonlocal edited
        page = match.group(0)
        page_id = int(re.search(r"<id>(\d+)</id>", page).group(1))  # type: ignore[union-attr]
        if page_id not in chosen:
            return page
        edited += 1
        page = re.sub(r"(<revision>\s*<id>)(\d+)(</id>)", lambda m: f"{m.group(1)}{int(m.group(2)) + 10**7}"
                      f"{m.group(3)}", page, count=1)
        return page.replace("</text>", "\n\nThis page was edited after the first build of the search folder.</text>",
                            1)

    out.write_text(re.sub(r"<page>.*?</page>", change, data, flags=re.S), encoding="utf-8")
    return {"articles": len(articles), "edited": edited}


def results(folder: Path, colbert, queries: List[str]) -> List[Any]:
    from pyterrier_fandom_colbert.app.search import Searcher

    searcher = Searcher(folder, colbert=colbert, warm=False)
    return [[(r["docno"], r["score"]) for r in searcher.search(q, system=system, k=10, explain=False)["results"]]
            for q in queries for system in SYSTEMS]


def update(args) -> Dict[str, Any]:
    from pyterrier_fandom_colbert.app.folder import build_folder, load_manifest, update_folder
    from pyterrier_fandom_colbert.model.colbert import ColBERT

    work = args.out
    work.mkdir(parents=True, exist_ok=True)
    copy, edited = work / "updated", work / "edited_pages_current.xml"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(args.folder, copy)
    before = load_manifest(args.folder)
    report: Dict[str, Any] = {"folder": str(args.folder), "full_build_seconds": before.seconds["total"],
                              "passages": before.passages, "edit": edit_dump(args.dump, edited, args.folder,
                                                                              args.changed, args.seed)}
    colbert = ColBERT.from_pretrained(before.checkpoint)
    started = time.perf_counter()
    manifest = update_folder(edited, copy, colbert=colbert, verbose=not args.quiet).manifest
    report["update_seconds"] = round(time.perf_counter() - started, 1)
    report["update"] = manifest.update
    report["update_phases"] = manifest.seconds
    if args.check:
        fresh = work / "fresh"
        if fresh.exists():
            shutil.rmtree(fresh)
        started = time.perf_counter()
        build_folder(edited, fresh, colbert=colbert, checkpoint=before.checkpoint, settings=before.settings,
                     codec_from=args.folder, verbose=not args.quiet)
        report["fresh_with_codec_seconds"] = round(time.perf_counter() - started, 1)
        queries = [json.loads(line)["question"] for line in args.questions.read_text().splitlines()][:args.queries] \
            if args.questions.suffix == ".jsonl" else \
            [line.split("\t")[1] for line in args.questions.read_text().splitlines()[1:]][:args.queries]
        report["results_equal"] = results(copy, colbert, queries) == results(fresh, colbert, queries)
        report["queries"] = len(queries)
        report["files_equal"] = {name: (copy / "colbert" / name).read_bytes() == (fresh / "colbert" / name).read_bytes()
                                 for name in ("codes.u16", "residuals.u8", "ivf_docs.i32", "token_ids.u16")}
    return report


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    q = sub.add_parser("quality")
    q.add_argument("--dump", type=Path, default=None, help="the dump to index")
    q.add_argument("--dataset", default=None, help="ir_datasets split whose questions and qrels are searched")
    q.add_argument("--data", default=None, help="instead of --dump: a pipelines/evaluate.py question set (squad: "
                   "the protocol's report questions over its 1,393 paragraphs), its corpus indexed as records")
    q.add_argument("--data-root", type=Path, default=ROOT.parent / "shared" / "data")
    q.add_argument("--queries", type=int, default=None, help="ask only the first N questions")
    q.add_argument("--fresh", action="store_true", help="also build the residual2 folder with build_folder")
    v = sub.add_parser("variants")
    v.add_argument("--dump", type=Path, default=None, help="the dump to index")
    v.add_argument("--dataset", default=None, help="ir_datasets split whose questions and qrels are searched")
    v.add_argument("--data", default=None, help="instead of --dump: a pipelines/evaluate.py question set")
    v.add_argument("--data-root", type=Path, default=ROOT.parent / "shared" / "data")
    v.add_argument("--queries", type=int, default=None, help="ask only the first N questions")
    v.add_argument("--facts", type=Path, default=None, help="instead of judgements: fact questions (.jsonl of "
                   "benchmarks/fact_questions.py) over the dump")
    v.add_argument("--bf16", action="store_true", help="also a bfloat16-encoded fp16 folder and its residual2 "
                   "conversions (own codec; the float32 folder's codec), with the codec noise per vector")
    v.add_argument("--centroids", nargs="+", choices=("default", "plaid"), default=["default"],
                   help="residual2 codecs: the index writer's default centroid count, colbert-ai's rule")
    v.add_argument("--searches", nargs="*", choices=tuple(SEARCHES), default=list(SEARCHES),
                   help="ColBERT search settings tried besides each folder's own")
    v.add_argument("--outliers", nargs="*", type=float, default=[], metavar="SHARE",
                   help="also simulate codecs that keep each SHARE (e.g. 0 0.01) of the worst-coded tokens exact: "
                        "fp16 folders of mixed vectors, searched with exact neighbour search")
    v.add_argument("--exact-shares", nargs="*", type=float, default=[], metavar="SHARE",
                   help="also residual2 folders that store this share of tokens exactly (CompressionSpec.exact_share; "
                        "0: the plain residual2 folder), written by the index writer")
    v.add_argument("--build-only", action="store_true")
    v.add_argument("--reconvert", action="store_true", help="write the residual2 conversions again")
    u = sub.add_parser("update")
    u.add_argument("--dump", type=Path, required=True, help="the dump the folder was built from")
    u.add_argument("--folder", type=Path, required=True, help="a residual2 folder built from --dump (copied)")
    u.add_argument("--changed", type=float, default=0.01, help="share of the articles edited (default 0.01)")
    u.add_argument("--seed", type=int, default=0)
    u.add_argument("--check", action="store_true", help="compare with a fresh build that uses the folder's codec")
    u.add_argument("--questions", type=Path, default=ROOT / "benchmarks" / "fact_questions.jsonl",
                   help="questions for --check (.jsonl with 'question', or a .tsv with a question column)")
    u.add_argument("--queries", type=int, default=50)
    for p in (q, v, u):
        p.add_argument("--out", type=Path, required=True)
        p.add_argument("--checkpoint", default=None)
        p.add_argument("--threads", type=int, default=None)
        p.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if getattr(args, "data", None) is None and (args.dump is None or not args.dump.is_file()):
        print(f"{args.dump} is absent: nothing to measure", file=sys.stderr)
        return 0
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"quality": quality, "variants": variants, "update": update}[args.command](args)
    report["load_average"] = os.getloadavg()
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
