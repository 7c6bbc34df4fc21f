"""Search folders on disk: size and search quality of an fp16 folder against a residual2 one, and the time of
``pfc index --update`` for a small change against a full build.

    # size and quality: fp16 and residual2 folders of one dump; questions of an ir_datasets split (qrels)
    python benchmarks/folder_bench.py quality --data squad --out runs/folder_bench/squad   # SQuAD report part
    python benchmarks/folder_bench.py quality --dump pyterrier_fandom_colbert/data/sample/samplewiki_pages_current.xml \
        --dataset fandom-qa/sample/test --out runs/folder_bench/sample
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


def convert(fp16_folder: Path, out: Path, compression: str = "residual2") -> None:
    """A copy of ``fp16_folder`` whose ColBERT index is written in ``compression`` from its fp16 vectors."""
    import dataclasses

    import numpy as np

    from pyterrier_fandom_colbert.app.folder import COLBERT_DIR, MANIFEST, Manifest, _parts_of, folder_bytes
    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
    from pyterrier_fandom_colbert.index.writer import IndexWriter
    from pyterrier_fandom_colbert.storage import read_json, write_json

    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(fp16_folder, out, ignore=shutil.ignore_patterns(COLBERT_DIR))
    source = ColBERTIndex(fp16_folder / COLBERT_DIR)
    meta = source.meta
    with IndexWriter(out / COLBERT_DIR, source.config, meta.fingerprint, long_docs=meta.long_docs, stride=meta.stride,
                     compression=compression) as writer:
        for doc in range(len(source)):
            start, end = int(source.offsets[doc]), int(source.offsets[doc + 1])
            writer.add(str(source.docnos_of(np.array([doc]))[0]), np.asarray(source.vectors[start:end]),
                       np.asarray(source.token_ids[start:end]), _parts_of(source, doc))
        writer.truncated_docs, writer.windowed_docs = meta.truncated_docs, meta.windowed_docs
    manifest = Manifest.from_dict(read_json(out / MANIFEST))
    manifest = dataclasses.replace(manifest, settings=dataclasses.replace(manifest.settings, compression=compression),
                                   codec={"trained_on": manifest.passages, "encoded_since": 0})
    manifest = dataclasses.replace(manifest, bytes=folder_bytes(out))
    write_json(out / MANIFEST, manifest.to_dict())


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
    source: Any = args.dump
    topics = qrels = None
    if args.data:  # a pipelines/evaluate.py question set: its corpus, questions and judgements
        sys.path.insert(0, str(ROOT / "pipelines"))
        import evaluate as pipeline

        docs, topics, qrels = pipeline.load(args.data, args.data_root)
        source = docs
        qrels = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    elif args.dataset:
        topics, qrels = irds_questions(args.dataset)
    if topics is not None and args.queries:
        topics = topics.head(args.queries)
        report["questions_asked"] = f"the first {len(topics)}"
    if topics is not None:  # (measures average over the judged questions: only those asked)
        qrels = qrels[qrels["query_id"].isin(set(topics["qid"]))]
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
    u = sub.add_parser("update")
    u.add_argument("--dump", type=Path, required=True, help="the dump the folder was built from")
    u.add_argument("--folder", type=Path, required=True, help="a residual2 folder built from --dump (copied)")
    u.add_argument("--changed", type=float, default=0.01, help="share of the articles edited (default 0.01)")
    u.add_argument("--seed", type=int, default=0)
    u.add_argument("--check", action="store_true", help="compare with a fresh build that uses the folder's codec")
    u.add_argument("--questions", type=Path, default=ROOT / "benchmarks" / "fact_questions.jsonl",
                   help="questions for --check (.jsonl with 'question', or a .tsv with a question column)")
    u.add_argument("--queries", type=int, default=50)
    for p in (q, u):
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
    report = quality(args) if args.command == "quality" else update(args)
    report["load_average"] = os.getloadavg()
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
