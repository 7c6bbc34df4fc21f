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

# the variants job's code is in folder_bench_variants.py, and what the jobs share (the conversion of a folder, its
# sizes, the question sets) in folder_bench_common.py, both beside this script
sys.path.insert(0, str(Path(__file__).resolve().parent))
from folder_bench_common import ROOT, convert, question_set, sizes
from folder_bench_variants import SEARCHES, variants

SYSTEMS = ("tfidf", "colbert", "hybrid")


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
