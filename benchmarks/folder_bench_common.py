"""What the jobs of benchmarks/folder_bench.py share (a helper module, not a script): a copy of a folder with its
ColBERT index written in another format from its fp16 vectors (no second encoding), a folder's size by part, and
the question set of ``--data``, ``--dataset`` or ``--dump``."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any, Dict

ROOT = Path(__file__).resolve().parents[1]


def convert(fp16_folder: Path, out: Path, compression: Any = "residual2", codec: Any = None,
            vectors_of: Any = None) -> None:
    """A copy of ``fp16_folder`` whose ColBERT index is written in ``compression`` (a format name or a
    ``CompressionSpec``) from its fp16 vectors; ``codec``: a known codec instead of one trained on them;
    ``vectors_of(start, end)``: the token vectors to write instead of the folder's rows ``[start, end)``."""
    import dataclasses

    import numpy as np

    from pyterrier_fandom_colbert.app.folder import COLBERT_DIR, MANIFEST, Manifest, SearchSettings, folder_bytes
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
    before = manifest.settings
    retriever = before.retriever if before.compression.format == spec.format else \
        SearchSettings.of(spec.format).retriever  # (another format's options do not apply)
    if vectors_of is not None and spec.format == "fp16":  # simulated vectors are searched exhaustively (no
        retriever = dataclasses.replace(retriever, faiss="flat")  # neighbour index to train)
    settings = dataclasses.replace(before, compression=spec, retriever=retriever)
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
