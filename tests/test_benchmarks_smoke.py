"""Smoke runs of every script under benchmarks/ and pipelines/ (marker ``bench_smoke``), so that a refactor cannot
break one unseen: each is loaded and its command line built (``--help``), and the ones with a tiny-data option run
on tiny data here (the tiny random models of conftest.py, the bundled sample wiki, synthetic corpora) with their
output's shape and sanity checked: counts equal to the input, times positive, measures within [0, 1].

The scripts run in this process (``main(argv)``), not as subprocesses, so that the package and torch are imported
once for all of them. One table, ``RUNS``, holds each tiny run: script, arguments, check. The tiny data folder
(``tiny.root``) stands in for ../shared/data: ``scifact/`` (BEIR layout) and ``squad-v1.1-split/`` (SQuAD files
whose articles make the evaluation protocol's parts), written here from ``CORPUS``. Scripts that need a peer
environment (colbert-ai, PyLate) or a benchmark-only package (bm25s) skip with the reason.
"""
from __future__ import annotations

import ast
import gzip
import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted([*(ROOT / "benchmarks").glob("*.py"), *(ROOT / "pipelines").glob("*.py")])
SAMPLE_DUMP = ROOT / "pyterrier_fandom_colbert" / "data" / "sample" / "samplewiki_pages_current.xml"
#: scripts whose command line is not argparse's: (reason, how they are loaded instead)
NO_HELP = {
    "bench_io.py": "a helper module of the benchmarks, not a script",
    "folder_bench_common.py": "a helper module of folder_bench.py, not a script",
    "folder_bench_variants.py": "a helper module of folder_bench.py (its variants job), not a script",
    "compare.py": "runs pfc-compare with fixed settings at import as __main__ (its options are pfc-compare's)",
    "check_formats_peer.py": "runs inside the peer environment, positional arguments only",
    "plaid_peer.py": "runs inside the peer environment, positional arguments only",
}

#: the helper modules among them: imported by the scripts beside them, no command line of their own
HELPERS = {name for name, why in NO_HELP.items() if why.startswith("a helper module")}

pytestmark = [pytest.mark.bench_smoke, pytest.mark.filterwarnings("ignore::UserWarning")]


def load(path: Path):
    """The script as a module (its folder first on sys.path, as when it runs: they import their neighbours)."""
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = f"smoke_{path.parent.name}_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def call_main(module, argv: List[str], monkeypatch) -> int:
    """``module.main(argv)`` (through sys.argv for the scripts whose main reads it), its exit status."""
    import inspect

    monkeypatch.setattr(sys, "argv", [module.__file__, *argv])
    try:
        takes_argv = bool(inspect.signature(module.main).parameters)
        status = module.main(argv) if takes_argv else module.main()
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) or stop.code is None else 1
    return int(status or 0)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_script_loads_and_builds_its_command_line(path, monkeypatch, capsys):
    module = load(path)
    if path.name in NO_HELP:
        assert path.name in HELPERS or path.name == "compare.py" or callable(module.main)
        return
    assert call_main(module, ["--help"], monkeypatch) == 0
    out = capsys.readouterr().out
    assert "usage:" in out, out[:300]


# -- tiny runs -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    """One tiny run: ``args(tiny)`` builds the arguments from the shared tiny inputs; ``check(tiny, stdout)``
    asserts the output's shape and sanity."""

    script: str
    args: Callable[["Tiny"], List[str]]
    check: Callable[["Tiny", str], None]
    needs: List[str] = field(default_factory=list)  # paths under ../shared/data
    slow: bool = False  # over ~4 s on the loaded 2-core machine (CONTRIBUTING.md: the slow marker)
    skip: Callable[[], Optional[str]] = lambda: None  # the reason it cannot run here (a peer environment absent)


@dataclass
class Tiny:
    """Tiny inputs shared by the runs, made once: a checkpoint, a SciFact-shaped folder, a work folder."""

    root: Path
    backbone: str  # conftest's tiny random BERT
    checkpoint: str  # a ColBERT checkpoint over it
    scifact: Path  # corpus.jsonl.gz, queries-train.jsonl.gz, qrels/train.tsv of CORPUS
    squad: Path  # train-v1.1.json (6 articles, 12 paragraphs) and dev-v1.1.json (2 articles, 8) of CORPUS
    fp16: Path  # CORPUS indexed with the checkpoint, fp16
    residual2: Path  # and residual2
    num_docs: int
    sample_passages: int  # the bundled sample wiki's, as the package splits it
    fixture: Callable[[str], str]  # another fixture by name, made on first use (sparse_mlm)
    out: Path = None  # type: ignore[assignment]  # a fresh folder per run


CORPUS = [f"{s} {f}." for s in ("The castle of Vel Amara", "Captain Mirel", "The dragon Ysolde", "Old Orrin")
          for f in ("was built in the third age", "fought the hill giants", "guards a crown of fire",
                    "forged twelve blades from fallen stars", "trades silk along the coast")]


@pytest.fixture(scope="module")
def tiny(tiny_bert_dir, tmp_path_factory, request) -> Tiny:
    import pyterrier_fandom_colbert as pfc

    root = tmp_path_factory.mktemp("smoke")
    config = pfc.ColBERTConfig(dim=16, doc_maxlen=32, query_maxlen=16)
    checkpoint = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=config, device="cpu").save_pretrained(
        root / "checkpoint")
    scifact = root / "scifact"
    (scifact / "qrels").mkdir(parents=True)
    with gzip.open(scifact / "corpus.jsonl.gz", "wt", encoding="utf-8") as f:
        for i, text in enumerate(CORPUS):
            f.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    # three judged claims, then unjudged ones (query_side.py warms up on its first 20)
    queries = ["who forged blades", "what does the dragon guard", "when was the castle built",
               *(f"unjudged claim {i} about silk" for i in range(22))]
    with gzip.open(scifact / "queries-train.jsonl.gz", "wt", encoding="utf-8") as f:
        for i, text in enumerate(queries):
            f.write(json.dumps({"_id": f"q{i}", "text": text}) + "\n")
    (scifact / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td3\t1\nq1\td12\t1\nq2\td0\t1\n")
    squad = root / "squad-v1.1-split"  # where pipelines/evaluate.py looks under a data root
    squad.mkdir()

    def paragraph(text: str) -> dict:
        word = text.split()[-2]  # "third" of "... built in the third age."
        answer = {"text": word, "answer_start": text.rindex(word)}
        return {"context": text, "qas": [{"id": f"q{CORPUS.index(text)}", "question": f"what {word}",
                                          "answers": [answer]}]}

    # the protocol's parts: 4 of the 6 train articles are its selection part, the 2 dev articles its report part
    train = [{"title": f"T{a}", "paragraphs": [paragraph(t) for t in CORPUS[2 * a:2 * a + 2]]} for a in range(6)]
    dev = [{"title": f"D{a}", "paragraphs": [paragraph(t) for t in CORPUS[12 + 4 * a:16 + 4 * a]]} for a in range(2)]
    (squad / "train-v1.1.json").write_text(json.dumps({"data": train}))
    (squad / "dev-v1.1.json").write_text(json.dumps({"data": dev}))
    colbert = pfc.ColBERT.from_pretrained(str(checkpoint), device="cpu")
    docs = [{"docno": f"d{i}", "text": t} for i, t in enumerate(CORPUS)]
    for fmt in ("fp16", "residual2"):
        pfc.ColBERTIndex(root / f"{fmt}.colbert").indexer(colbert, compression=fmt, ann=None).index(docs)
    from pyterrier_fandom_colbert.data.passages import PassageConfig, dump_passages

    sample_passages = sum(1 for _ in dump_passages(SAMPLE_DUMP, PassageConfig()))
    return Tiny(root=root, backbone=tiny_bert_dir, checkpoint=str(checkpoint), scifact=scifact, squad=squad,
                fp16=root / "fp16.colbert", residual2=root / "residual2.colbert", num_docs=len(CORPUS),
                sample_passages=sample_passages, fixture=request.getfixturevalue)


@pytest.fixture(scope="module")
def sparse_mlm(tiny_mlm_dir, tmp_path_factory) -> str:
    """conftest's tiny random masked LM made sparse, as a trained SPLADE is: every vocabulary logit pushed far below
    zero but those of CORPUS's words (a random one weighs almost every term of the 30k vocabulary, and scoring
    such vectors takes minutes)."""
    import torch
    from transformers import AutoTokenizer, BertForMaskedLM

    model, tok = BertForMaskedLM.from_pretrained(tiny_mlm_dir), AutoTokenizer.from_pretrained(tiny_mlm_dir)
    words = sorted({i for text in CORPUS for i in tok(text, add_special_tokens=False)["input_ids"]})
    with torch.no_grad():
        model.cls.predictions.bias.fill_(-10.0)
        model.cls.predictions.bias[words] = 2.0
    out = tmp_path_factory.mktemp("sparse-mlm")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


def check_reader_gold(tiny: Tiny, stdout: str) -> None:
    report = json.loads(stdout)
    assert report["questions"] == 3 and report["reader_seconds_per_question"] > 0
    scores = report["reader"]
    assert all(0 <= scores[m] <= 100 for m in ("em", "f1")) and scores["em"] <= scores["f1"]


def check_reader_e2e(tiny: Tiny, stdout: str) -> None:
    report = json.loads(stdout[stdout.index("\n{") + 1:])  # after the lines about the folders it built
    assert report["questions"] == 3 and report["read_top"] == 3
    assert all(0 <= report[part][m] <= 100 for part in ("first_answer", "kde_first_result") for m in ("em", "f1"))
    assert all(0 <= report[m] <= 1 for m in ("ece_10_bins", "false_nothing", "nothing_scifact"))
    assert sum(r["count"] for r in report["reliability"]) == 3


def check_plaid_build(tiny: Tiny, stdout: str) -> None:
    result = json.loads((tiny.out / "build.json").read_text())
    assert result["passages_encoded"] == result["num_passages"] == tiny.num_docs
    assert result["encoding_passes"] == 1.0
    assert 0 < result["forward_seconds"] <= result["encode_seconds"] <= result["build_seconds"]
    assert result["after_encoding_seconds"] >= 0 and result["num_tokens"] > tiny.num_docs


def table_rows(stdout: str) -> List[List[str]]:
    """The body rows of the Markdown tables in ``stdout`` (header and rule lines left out), as lists of cells."""
    lines = stdout.splitlines()
    rows = []
    for i, line in enumerate(lines):
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if line.startswith("|") and not line.startswith("|---") and not following.startswith("|---"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def check_passage_quality(tiny: Tiny, stdout: str) -> None:
    assert f"{tiny.sample_passages:,} passages" in stdout
    rows = table_rows(stdout)
    assert len(rows) >= 3 and rows[-1][0] == "any of the above"
    for row in rows:
        hits, share = int(row[2]), float(row[3].rstrip("%"))
        assert 0 <= hits <= tiny.sample_passages and 0 <= share <= 100
    assert int(rows[-1][2]) >= max(int(r[2]) for r in rows[:-1])  # "any" covers each kind


def check_passage_residue(tiny: Tiny, stdout: str) -> None:
    counts = re.findall(r"^\s+(.+?)\s{2,}(\d+) \((\d+\.\d+)%\)$", stdout, re.M)
    assert len(counts) >= 3 and counts[-1][0] == "any", stdout[:500]
    assert all(0 <= float(share) <= 100 for _, _, share in counts)
    assert int(counts[-1][1]) >= max(int(h) for _, h, _ in counts[:-1])


def check_ingest(tiny: Tiny, stdout: str) -> None:
    assert f"passages {tiny.sample_passages}" in stdout
    (fmt, file_mb, _, pages, read_s, *_), = table_rows(stdout)
    assert fmt == "xml" and float(file_mb) > 0 and int(pages) > 0 and float(read_s) >= 0


def check_hostile(tiny: Tiny, stdout: str) -> None:
    rows = table_rows(stdout)
    assert [r[0] for r in rows] == ["`\"'''a\" * 20000`", "markup soup, 1 pages (seeds 0-0)",
                                    "parser soup, 1 pages (seeds 0-0)"]
    assert rows[0][1] == str(len("'''a") * 20000)  # the case's length
    assert 0 < float(rows[0][2]) < 30
    for row in rows[1:]:
        mean, worst = map(float, re.findall(r"(?:mean|max) ([\d.]+)", row[2]))
        assert 0 < mean <= worst


def check_stopwords(tiny: Tiny, stdout: str) -> None:
    from pyterrier_fandom_colbert.lexical.analysis import STOPWORD_LISTS

    rows = [ast.literal_eval(line) for line in stdout.splitlines() if line.startswith("{")]
    assert [r["set"] for r in rows] == ["SciFact train (selection)"]
    assert all(0 <= rows[0][name] <= 1 for name in STOPWORD_LISTS)
    assert max(rows[0][name] for name in STOPWORD_LISTS) > 0  # the tiny claims share words with their passages


def check_encode_bench(tiny: Tiny, stdout: str) -> None:
    assert "passages=8 " in stdout
    rates = dict(re.findall(r"^(\S.*?)\s+([\d.]+) passages/s", stdout, re.M))
    assert set(rates) >= {"backbone forward", "tokenisation alone", "doc_batches() (tensors)"}, stdout
    assert all(float(r) > 0 for r in rates.values())


def check_index_bench(tiny: Tiny, stdout: str) -> None:
    report = json.loads(stdout[stdout.index("{"):stdout.rindex("}") + 1])
    assert report["corpus"]["num_docs"] == report["build"]["num_docs"] == 300 and report["queries"] == 3
    assert report["build"]["num_tokens"] > 300 and report["build"]["wall_s"] > 0
    (row,) = report["results"]
    assert row["k"] == 10 and row["ms_per_query_mean"] > 0
    assert all(0 <= row[m] <= 1 for m in ("overlap_at_10", "overlap_at_10_with_flat", "source_in_top_10"))


def check_scale_bench(tiny: Tiny, stdout: str) -> None:
    (row,) = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert (row["bench"], row["passages"], row["shards"]) == ("build", 200, 2)
    assert row["tokens"] > 200 and row["seconds"] > 0 and row["cpu_s"] > 0
    # (seconds are rounded to 0.01: the rate is checked against the range that rounding leaves)
    assert 200 / (row["seconds"] + 0.005) - 0.05 <= row["passages_per_s"] <= 200 / (row["seconds"] - 0.005) + 0.05


def check_evaluate(tiny: Tiny, stdout: str) -> None:
    import pandas as pd

    assert f"scifact (all queries): {tiny.num_docs:,} passages, 3 questions" in stdout
    table = pd.read_csv(tiny.out / "runs" / "scifact.csv")
    assert list(table["name"]) == ["TF-IDF", "TF-IDF >> ColBERT", "ColBERT end to end"]
    measures = table.drop(columns="name").to_numpy()
    assert measures.shape == (3, 3) and ((measures >= 0) & (measures <= 1)).all()
    assert table.loc[0, "nDCG@10"] > 0  # TF-IDF finds the claims' passages by their words


def check_query_side(tiny: Tiny, stdout: str) -> None:
    report = json.loads((tiny.out / "query_side.json").read_text())
    assert report["queries"] == 2
    for name in ("pipeline", "direct", "encoding", "encoding_transformers"):
        assert report[f"{name}_ms_p50"] > 0
    assert report["encoding_ms_p50"] < report["direct_ms_p50"]  # encoding is part of the direct search's time


def check_compress_bench(tiny: Tiny, stdout: str) -> None:
    import pyterrier_fandom_colbert as pfc

    report = json.loads((tiny.out / "compress.json").read_text())
    (row,) = report["results"]
    tokens = pfc.ColBERTIndex(tiny.fp16).meta.num_tokens
    assert row["compression"] == "residual2" and row["tokens"] >= min(500, tokens)
    # smaller than the fp16 index of the same tokens at d = 16: 2 bytes per dimension and an int32 token id
    assert row["close_seconds"] >= 0 and row["num_centroids"] > 0 and 0 < row["bytes_per_token"] < 2 * 16 + 4


def check_build_memory(tiny: Tiny, stdout: str) -> None:
    report = json.loads((tiny.out / "build_memory.json").read_text())
    (row,) = report["rows"]
    assert row["step"] == report["step"]
    assert row["code"] == str(ROOT) and row["idle_mb"] > 0 and row["peak_above_idle_mb"] >= 0 and row["seconds"] >= 0
    if row["step"] == "tfidf":  # 300 passages of 90 words each, some repeated within a passage
        assert row["size"] == 300 and 300 <= row["postings"] <= 300 * 90 and 0 < row["terms"] <= row["postings"]
    else:  # 5,000 vectors: 4·sqrt(5,000) = 283 → 256 centroids; the sample is every vector, in the scratch folder
        assert (row["size"], row["centroids"], row["sample"], row["scratch"]) == (5000, 256, 5000, True)


RUNS: Dict[str, Run] = {
    "plaid_compare build": Run(
        "benchmarks/plaid_compare.py",
        lambda t: ["--worker", "build", "--data", str(t.scifact), "--checkpoint", t.checkpoint, "--threads", "1",
                   "--index", str(t.out / "idx"), "--compression", "residual2", "--result", str(t.out / "build.json")],
        check_plaid_build),
    "passage_quality": Run("benchmarks/passage_quality.py", lambda t: ["--dump", str(SAMPLE_DUMP)],
                           check_passage_quality),
    "passage_residue": Run("benchmarks/passage_residue.py", lambda t: ["--dump", str(SAMPLE_DUMP)],
                           check_passage_residue),
    "ingest_bench": Run("benchmarks/ingest_bench.py", lambda t: ["--dump", str(SAMPLE_DUMP), "--formats", "xml"],
                        check_ingest),
    "hostile_wikitext": Run("benchmarks/hostile_wikitext.py",
                            lambda t: ["--only", "'''a", "--fuzz", "1", "--fuzz-chars", "2000"], check_hostile,
                            slow=True),
    "encode_bench": Run("benchmarks/encode_bench.py",
                        lambda t: ["--backbone", t.backbone, "--squad", str(t.squad / "train-v1.1.json"), "--n", "8",
                                   "--repeats", "1", "--batch-size", "4", "--threads", "1"], check_encode_bench),
    "index_bench e2e": Run("benchmarks/index_bench.py",
                           lambda t: ["e2e", "--docs", "300", "--queries", "3", "--k", "10", "--kinds", "exact",
                                      "--workdir", str(t.out / "work")], check_index_bench, slow=True),
    "scale_bench build": Run("benchmarks/scale_bench.py",
                             lambda t: ["build", "--mode", "local", "--encoder", "tiny", "--passages", "200",
                                        "--shards", "2", "--sample-docs", "100"],
                             check_scale_bench, needs=["scifact", "wikiqa"], slow=True),
    "pipelines/evaluate": Run("pipelines/evaluate.py",
                              lambda t: ["--data", "scifact", "--data-root", str(t.root), "--checkpoint", t.checkpoint,
                                         "--systems", "tfidf", "colbert-rerank", "colbert-full", "--faiss", "flat",
                                         "--k", "10", "--threads", "1", "--out", str(t.out / "runs")], check_evaluate),
    "query_side": Run("benchmarks/query_side.py",
                      lambda t: ["--index", str(t.residual2), "--checkpoint", t.checkpoint, "--data", str(t.scifact),
                                 "--queries", "2", "--threads", "1", "--out", str(t.out / "query_side.json")],
                      check_query_side),
    "compress_bench": Run("benchmarks/compress_bench.py",
                          lambda t: ["--source", str(t.fp16), "--tokens", "500", "--threads", "1",
                                     "--workdir", str(t.out / "work"), "--out", str(t.out / "compress.json")],
                          check_compress_bench),
    "stopwords_bench": Run("benchmarks/stopwords_bench.py",
                           lambda t: ["--data-root", str(t.root), "--sets", "scifact"], check_stopwords),
    "build_memory tfidf": Run("benchmarks/build_memory.py",
                              lambda t: ["tfidf", "--sizes", "300", "--out", str(t.out / "build_memory.json")],
                              check_build_memory),
    "build_memory codec": Run("benchmarks/build_memory.py",
                              lambda t: ["codec", "--sizes", "5000", "--out", str(t.out / "build_memory.json")],
                              check_build_memory, slow=True),
}



# -- the scripts over the tiny data folder (scifact/ and squad-v1.1-split/ under tiny.root) ---------------------------
def unit(value) -> bool:
    """A measure, share or agreement: a number within [0, 1]."""
    return isinstance(value, (int, float)) and 0 <= value <= 1


def report_json(stdout: str) -> dict:
    """The JSON object a script printed last (after any progress lines)."""
    return json.loads(stdout[stdout.index("\n{") + 1 if not stdout.startswith("{") else 0:stdout.rindex("}") + 1])


def check_e2e_real(tiny: Tiny, stdout: str) -> None:
    report = json.loads((tiny.out / "e2e.json").read_text())
    assert (report["num_docs"], report["queries"]) == (tiny.num_docs, 3) and report["num_tokens"] > tiny.num_docs
    assert unit(report["exhaustive_relevant_in_top_10"]) and report["exhaustive_ms_per_query"] > 0
    (row,) = report["results"]
    assert (row["faiss"], row["k"], row["k_hat"]) == ("exact", 10, 5) and len(row["top10"]) == 3
    assert row["ms_per_query_mean"] > 0 and all(len(top) == 10 for top in row["top10"])  # 20 passages: 10 each
    assert unit(row["overlap_at_10"]) and unit(row["relevant_in_top_10"]) and row["overlap_with_exact"] == 1.0


def check_compressed_tradeoff(tiny: Tiny, stdout: str) -> None:
    report = json.loads((tiny.out / "tradeoff.json").read_text())
    assert (report["num_docs"], report["queries"], report["compression"]) == (tiny.num_docs, 3, "residual2")
    exact, exhaustive, *grid = report["results"]
    assert exact["setting"] == "exact fp16" and exhaustive["setting"].startswith("exhaustive")
    assert len(grid) == 2 and [r["ndocs"] for r in grid] == [8, 16]
    for row in report["results"]:
        assert unit(row["ndcg10"]) and unit(row["rr10"]) and unit(row.get("agreement_exact_fp16", 0))
    for row in grid:
        assert row["search_ms_mean"] > 0 and unit(row["agreement_decompressed"])
        assert 0 < row["candidates_mean"] <= tiny.num_docs


def check_long_docs(tiny: Tiny, stdout: str) -> None:
    report = json.loads((tiny.out / "scifact" / "result.json").read_text())
    assert (report["docs"], report["queries"], report["k"]) == (tiny.num_docs, 3, 10)
    assert report["longer_than_a_window"] == 0  # one sentence each: no window to cut
    assert report["truncated_index"]["truncated_docs"] == 0 and report["windowed_index"]["windowed_docs"] == 0
    assert report["truncated_index"]["tokens"] == report["windowed_index"]["tokens"]
    assert set(report["results"]) == {"truncate", "windows: union", "windows: max-window"}
    for row in report["results"].values():
        assert row["ms_per_query"] > 0 and all(unit(row[m]) for m in ("nDCG@10", "R@100", "RR@10"))
    # short texts are one window: the three ways score them alike
    assert report["results"]["truncate"]["nDCG@10"] == report["results"]["windows: union"]["nDCG@10"]


def check_explain_eval(tiny: Tiny, stdout: str) -> None:
    report = json.loads((tiny.out / "explain.json").read_text())
    (result,) = report["results"].values()
    assert result["questions"] + result["left_out"] == report["n"] == 4 and result["questions"] > 0
    assert all(unit(v) for k, v in result.items() if k not in ("questions", "left_out", "span_words"))
    assert result["span_words"] >= 1 and "| KDE span overlaps answer |" in stdout


def check_precision_quality(tiny: Tiny, stdout: str) -> None:
    report = json.loads((tiny.out / "precision.json").read_text())
    assert (report["questions"], report["documents"]) == (3, tiny.num_docs)
    rows = report["precisions"]
    assert list(rows) == ["float32", "float32 stored as float16", "bfloat16", "int8"]
    for name, row in rows.items():
        assert all(unit(row[m]) for m in ("RR@10", "nDCG@10", "R@1", "R@10")), name
        if name != "float32 stored as float16":
            assert row["passages_per_s"] > 0
        if name != "float32":
            assert unit(row["top10_overlap"]) and unit(row["top1_agreement"]) and row["vector_min_cosine"] <= 1.0001
    assert rows["float32 stored as float16"]["vector_max_abs_diff"] < 1e-2  # fp16 rounding of unit vectors


def numbers(line: str) -> List[float]:
    return [float(x) for x in re.findall(r"-?\d+\.\d+", line)]


def check_fusion_adaptive(tiny: Tiny, stdout: str) -> None:
    module = load(ROOT / "benchmarks" / "fusion_adaptive.py")
    lines = stdout.splitlines()
    header = next(line for line in lines if "worst vs better single" in line)
    assert "squad selection RR@10" in header and "scifact nDCG@10" in header
    for label in module.variants():
        (line,) = [x for x in lines if x.startswith(label + " ")]
        squad, scifact, worst, mean = numbers(line[len(label):])
        assert unit(squad) and unit(scifact) and -1 <= worst <= mean <= 1
    tfidf, colbert = (numbers(x[len(n):]) for n in ("TF-IDF", "ColBERT end to end") for x in lines
                      if x.startswith(n + " "))
    assert max(tfidf[2], colbert[2]) == 0  # the better single system is 0 behind itself


def check_prf_eval(tiny: Tiny, stdout: str) -> None:
    import pandas as pd

    table = pd.read_csv(tiny.out / "prf-scifact.csv")
    assert set(table["questions"]) == {"selection", "report", "all"}
    assert ((table[["nDCG@10", "AP@100", "R@100"]] >= 0) & (table[["nDCG@10", "AP@100", "R@100"]] <= 1)).all().all()
    names = set(table["name"])
    assert "ColBERT" in names and "PRF re-rank fb_docs=2 fb_embs=20 beta=1" in names
    assert any(n.startswith("PRF re-retrieve") for n in names)
    assert table[table["questions"] == "all"]["chosen_on_selection"].sum() == 2  # one re-rank, one re-retrieve
    assert "1 selection / 2 report questions" in stdout


def check_prf_vote_check(tiny: Tiny, stdout: str) -> None:
    same, centroids, chosen = re.search(r"the same token for ([\d.]+)% of (\d+) centroids; ([\d.]+)%", stdout).groups()
    assert 0 <= float(same) <= 100 and 0 <= float(chosen) <= 100 and int(centroids) == 3 * 24  # k 24 a question
    ndcg = re.findall(r"^\s*(ColBERT|(?:feedback|index) vote, beta=[\d.]+)\s+([\d.]+)", stdout, re.M)
    assert [name for name, _ in ndcg[:5]] == ["ColBERT", "feedback vote, beta=1", "feedback vote, beta=0.1",
                                              "index vote, beta=1", "index vote, beta=0.1"]
    assert len(ndcg) == 2 * 5 and all(unit(float(value)) for _, value in ndcg)  # report and all questions


def check_sample_forms(tiny: Tiny, stdout: str) -> None:
    import pandas as pd

    from pyterrier_fandom_colbert.app.compare import TUNING_GRID

    table = pd.read_csv(tiny.out / "results.csv")
    assert set(table["split"]) == {"dev", "test"} and len(table) == 2 * (2 + len(TUNING_GRID))
    measures = table[["RR@10", "R@1", "R@10", "R@50"]]
    assert ((measures >= 0) & (measures <= 1)).all().all()
    assert (table["R@1"] <= table["R@10"]).all() and (table["R@10"] <= table["R@50"]).all()
    ranks = pd.read_csv(tiny.out / "ranks.csv")
    per_system = ranks.groupby(["split", "system"]).size()
    assert len(per_system) == len(table) and per_system.nunique() == 1  # every system ranked every question
    assert ranks["rank"].dropna().between(1, 10).all()
    weight, best = re.search(r"weight tuned on dev: ([\d.]+) \(dev RR@10 ([\d.]+), test [\d.]+\)", stdout).groups()
    dev = table[(table["split"] == "dev") & table["system"].str.startswith("hybrid")].set_index("system")["RR@10"]
    assert float(best) == pytest.approx(dev.max(), abs=1e-4) == pytest.approx(dev[f"hybrid {weight}"], abs=1e-4)


def check_shared_fusion_inputs(tiny: Tiny, stdout: str) -> None:
    assert "tables equal" in stdout  # pt.Experiment and pfc.Experiment measured the same
    assert re.search(r"indexes ready in [\d.]+ s \(\d+ passages\)", stdout)
    assert re.search(r"pfc\.Experiment: [\d.]+ s for 5 systems on 4 queries", stdout)
    rows = [line.split() for line in stdout.splitlines() if line.split()[:1] in
            (["tfidf"], ["colbert"], ["hybrid"], ["rrf"], ["linear"])]
    assert [r[0] for r in rows] == ["tfidf", "colbert", "hybrid", "rrf", "linear"]
    assert all(unit(float(x)) for r in rows for x in r[1:4])


def check_train_speed(tiny: Tiny, stdout: str) -> None:
    rows = [json.loads(line) for line in (tiny.out / "train_speed.jsonl").read_text().splitlines()]
    assert [(r["setting"], r["phase"]) for r in rows] == [("freeze_layers=0", "cold"), ("freeze_layers=0", "warm"),
                                                          ("freeze_layers=1", "cold"), ("freeze_layers=1", "warm")]
    assert all(r["steps"] == 1 and r["pairs_per_second"] > 0 and r["threads"] == 1 for r in rows)


def check_train_default(tiny: Tiny, stdout: str) -> None:
    parts = {name: json.loads((tiny.out / "protocol" / f"{name}-part.json").read_text())["data"]
             for name in ("train", "selection")}
    assert len(parts["train"]) == 2 and len(parts["selection"]) == 4  # 6 train articles, 4 chosen for selection
    assert not {a["title"] for a in parts["train"]} & {a["title"] for a in parts["selection"]}
    assert re.search(r"total wall time [\d.]+ s", stdout)
    assert (tiny.out / "default" / "best").is_dir()


def check_formats_here(tiny: Tiny, stdout: str) -> None:
    report = json.loads((tiny.out / "formats.json").read_text())
    assert (report["passages"], report["queries"]) == (5, 2)
    assert report["refusals"]["similarity='dot' -> colbert-ai"]  # colbert-ai scores by cosine only: refused
    assert len(report["variants"]) == 4
    for name, entry in report["variants"].items():
        assert entry["reload_identical_here"] is True, name  # each export reads back as the model it came from
        assert entry["by_release"] == {}  # no peer environment asked


def check_integrity(tiny: Tiny, stdout: str) -> None:
    report = report_json(stdout)
    colbert, tfidf = report["colbert"], report["tfidf"]
    assert colbert["num_docs"] == 50 and colbert["num_tokens"] > 50 and tfidf["num_docs"] == 50
    assert colbert["open_ms_median"] > 0 and colbert["query_ms_median"] > 0 and colbert["verify_s"] >= 0
    assert tfidf["open_ms_median"] > 0 and tfidf["verify_s"] >= 0
    assert not (tiny.out / "work").exists()  # the script removes its indexes


def check_integrity_scifact(tiny: Tiny, stdout: str) -> None:
    report = report_json(stdout)["scifact"]
    assert (report["docs"], report["queries"], report["rounds"]) == (tiny.num_docs, 3, 1)
    assert report["tokens"] > tiny.num_docs
    for fmt in ("fp16", "residual2"):
        row = report[fmt]
        assert row["check_docs"] == tiny.num_docs and row["files_MB"] >= 0  # (kilobytes: 0.0 MB)
        assert row["check_us_complete"] > 0 and row["check_us_bitmap"] > 0
        assert all(row[f"{m}_{mode}"] > 0 for m in ("open_ms", "p50_ms") for mode in ("checked", "unchecked"))


def check_folder_quality(tiny: Tiny, stdout: str) -> None:
    report = report_json(stdout)
    for fmt in ("fp16", "residual2"):
        assert report[fmt]["size"]["passages"] == tiny.num_docs and report[fmt]["size"]["bytes"] > 0
        quality = report[fmt]["quality"]
        assert quality["questions"] == 3
        for system, row in quality.items():
            if system != "questions":
                assert all(unit(row[m]) for m in ("nDCG@10", "RR@10", "R@10")) and row["ms_per_query"] >= 0
    fp16, residual2 = (report[fmt]["quality"]["tfidf"] for fmt in ("fp16", "residual2"))
    assert {**fp16, "ms_per_query": 0} == {**residual2, "ms_per_query": 0}  # the folders' TF-IDF is the same


def folder_update_args(tiny: Tiny) -> List[str]:
    """A 3-page export of the sample wiki and a residual2 search folder built from it (what ``update`` edits)."""
    from pyterrier_fandom_colbert.app.folder import build_folder

    fq = load(ROOT / "benchmarks" / "fact_questions.py")
    dump = tiny.out / "small_pages_current.xml"
    fq.write_subset(SAMPLE_DUMP, dump, {"Emberfall Tactics"}, 2, 0)
    build_folder(dump, tiny.out / "folder", checkpoint=tiny.checkpoint)
    questions = tiny.out / "questions.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in FACT_QUESTIONS))
    return ["update", "--dump", str(dump), "--folder", str(tiny.out / "folder"), "--changed", "0.5", "--check",
            "--questions", str(questions), "--queries", "2", "--out", str(tiny.out / "work"), "--threads", "1",
            "--quiet"]


def check_folder_update(tiny: Tiny, stdout: str) -> None:
    report = report_json(stdout)
    assert report["edit"]["articles"] == 3 and report["edit"]["edited"] == 2  # round(0.5 * 3)
    assert report["passages"] > 0 and report["update_seconds"] >= 0 and report["queries"] == 2
    # the updated folder is what a fresh build of the edited export with the folder's codec makes
    assert report["results_equal"] is True and all(report["files_equal"].values())


def growth_args(tiny: Tiny) -> List[str]:
    """A data root holding the three corpora growth.py mixes, each made of CORPUS's sentences."""
    import bz2
    import shutil

    root = tiny.out / "data"
    shutil.copytree(tiny.scifact, root / "scifact")
    (root / "wikiqa").mkdir()
    with gzip.open(root / "wikiqa" / "corpus.jsonl.gz", "wt", encoding="utf-8") as f:
        for i, text in enumerate(CORPUS[:8]):
            f.write(json.dumps({"_id": f"w{i}", "title": "Wiki", "text": text.upper()}) + "\n")
    (root / "squad-v1.1-train").mkdir()
    train = json.loads((tiny.squad / "train-v1.1.json").read_text())
    with bz2.open(root / "squad-v1.1-train" / "train-v1.1-rebuilt.json.bz2", "wt", encoding="utf-8") as f:
        json.dump(train, f)
    return ["--data-root", str(root), "--sizes", "12", "--float32-at", "30",
            "--queries", "3", "--threads", "1", "--checkpoint", tiny.checkpoint,
            "--reader", tiny.fixture("tiny_reader_dir"), "--workdir", str(tiny.out / "work"),
            "--out", str(tiny.out / "growth.json")]


def check_wait_policy(tiny: Tiny, stdout: str) -> None:
    report = json.loads((tiny.out / "result.json").read_text())
    assert report["index"] == str(tiny.out / "scifact-12.colbert")  # built from 12 abstracts, --index absent
    import pyterrier_fandom_colbert as pfc

    assert len(pfc.ColBERTIndex(report["index"])) == 12
    rows = report["rows"]
    assert [(r["busy"], r["setting"]) for r in rows] == [(0, "OMP_WAIT_POLICY=PASSIVE"), (0, "default"),
                                                          (1, "OMP_WAIT_POLICY=PASSIVE"), (1, "default")]
    for r in rows:  # three claims timed after one warm-up, the summaries consistent
        assert r["queries"] == 3 and r["threads"] == 1 and 0 < r["p50_ms"] <= r["p95_ms"]
        assert r["p50_ms"] > 0 and r["mean_ms"] > 0


def check_growth(tiny: Tiny, stdout: str) -> None:
    from pyterrier_fandom_colbert.model.colbert import native_bf16

    report = json.loads((tiny.out / "growth.json").read_text())
    rows = report["builds"]
    auto = "bfloat16" if native_bf16() else "float32"
    assert [(r["size"], r["precision"], r["threads"]) for r in rows] == [(12, auto, 1), (30, "float32", 1)]
    for r in rows:  # every passage of the prefix indexed, the figures consistent with each other
        assert r["passages"] == r["size"] and r["tokens"] > r["size"] and r["folder_bytes"] > 0
        assert r["ms_per_passage"] == pytest.approx(1000 * r["total_s"] / r["passages"], abs=0.01)
        assert 0 < r["after_encoding_s"] < r["wall_s"] and r["peak_disk_mb"] >= 0
        assert len(r["rss_by_tenth_mb"]) == 10 and max(r["rss_by_tenth_mb"]) <= r["peak_rss_mb"] + 1
        assert len(r["anon_by_tenth_mb"]) == 10 and 0 < r["peak_anon_mb"] <= max(r["rss_by_tenth_mb"])
        for system in ("default", "colbert"):
            s = r["search"][system]
            assert s["queries"] == 3 and 0 < s["p50_ms"] <= s["p95_ms"]
        assert r["search"]["colbert"]["system"] == "colbert"
    # the prefixes: one shuffle, so the 12 are the 30's first 12, and all three corpora (8 + 25 + 12) are mixed in
    work = tiny.out / "work"
    docnos = {n: [json.loads(line)["docno"] for line in (work / f"passages-{n}.jsonl").open()] for n in (12, 30)}
    assert docnos[30][:12] == docnos[12] and len(set(docnos[30])) == 30
    assert {d.split("-")[0] for d in docnos[30]} == {"scifact", "wikiqa", "squad"}


def check_index_stages(tiny: Tiny, stdout: str) -> None:
    report = json.loads((tiny.out / "stages.json").read_text())
    assert (report["passages_in_dump"], report["passages"]) == (tiny.sample_passages, 20) and report["tokens"] > 20
    stages = ["parse", "load model", "tfidf", "tokenise", "encode", "write fp16", "ivf", "write residual2"]
    assert list(report["seconds"]) == stages and all(v >= 0 for v in report["seconds"].values())
    assert sum(report["share_of_build"].values()) == pytest.approx(1, abs=0.01)


def check_device_build(tiny: Tiny, stdout: str) -> None:
    report = json.loads((tiny.out / "device.json").read_text())
    assert json.loads(stdout.strip().splitlines()[-1]) == report
    assert (report["device"], report["threads"], report["passages"]) == ("cpu", 1, 12)  # every paragraph
    assert report["tokens"] > 12 and 0 < report["stage_seconds"]["total"] <= report["build_seconds"]
    # build_seconds is rounded to 2 decimals: a tiny build's rate agrees only to within that rounding
    assert report["passages_per_second"] == pytest.approx(12 / report["build_seconds"],
                                                          rel=0.05 + 0.005 / report["build_seconds"])
    assert report["gpu"] is None and report["peak_rss_mb"] > 50


def check_index_precision(tiny: Tiny, stdout: str) -> None:
    from pyterrier_fandom_colbert.model.colbert import native_bf16

    report = json.loads((tiny.out / "precision.json").read_text())
    rows = report["builds"]
    assert [(r["round"], r["variant"]) for r in rows] == [(1, "float32"), (1, "auto")]
    assert {r["variant"]: r["precision"] for r in rows} == {"float32": "float32",
                                                            "auto": "bfloat16" if native_bf16() else "float32"}
    for r in rows:  # each build indexed every passage, in its own process
        assert r["passages"] == tiny.num_docs and r["tokens"] > tiny.num_docs and r["peak_rss_mb"] > 50
        assert 0 < r["colbert_s"] <= r["total_s"] and r["passages_per_s"] > 0
    assert report["auto_over_float32"] == pytest.approx(
        report["median_passages_per_s"]["auto"] / report["median_passages_per_s"]["float32"], abs=1e-3)


def compare_args(tiny: Tiny) -> List[str]:
    """pipelines/compare.py's own settings (what it passes pfc-compare), then tiny ones overriding them."""
    settings = load(ROOT / "pipelines" / "compare.py").SETTINGS
    return [*settings, "--checkpoint", tiny.checkpoint, "--k", "10", "--out", str(tiny.out / "compare")]


def check_compare(tiny: Tiny, stdout: str) -> None:
    import pandas as pd

    table = pd.read_csv(tiny.out / "compare" / "results.csv")
    assert len(table) == 4 and table["name"].nunique() == 4  # TF-IDF, the re-ranker, ColBERT, the hybrid
    measures = table[["RR@10", "R@1", "R@10", "R@50"]]
    assert ((measures >= 0) & (measures <= 1)).all().all() and (table["R@1"] <= table["R@10"]).all()
    assert (tiny.out / "compare" / "recall_at_k.csv").is_file()


FACT_QUESTIONS = [  # on the bundled sample wiki's "Emberfall Tactics" page; the third answer is on no page
    {"qid": "s1", "question": "How many missions are in the Tactics campaign?", "title": "Emberfall Tactics",
     "answers": ["forty"], "kind": "table", "where": "prose: Campaign"},
    {"qid": "s2", "question": "Who leads the survivors south?", "title": "Emberfall Tactics",
     "answers": ["Wren Tallow"], "kind": "infobox", "where": "prose: Story"},
    {"qid": "s3", "question": "How fast does a lantern fly?", "title": "Emberfall Tactics",
     "answers": ["42 knots"], "kind": "template", "where": "nowhere"},
]


def fact_questions_args(tiny: Tiny) -> List[str]:
    questions = tiny.out / "questions.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in FACT_QUESTIONS))
    return ["--dump", str(SAMPLE_DUMP), "--folder", str(tiny.out / "folder"), "--questions", str(questions),
            "--pages", "1", "--checkpoint", tiny.checkpoint, "--threads", "1", "--quiet",
            "--json", str(tiny.out / "facts.json")]


def check_fact_questions(tiny: Tiny, stdout: str) -> None:
    report = json.loads((tiny.out / "facts.json").read_text())
    ceiling = {qid: q["ceiling"] for qid, q in report["per_question"].items()}
    assert ceiling == {"s1": {"anywhere": True, "on_page": True}, "s2": {"anywhere": True, "on_page": True},
                       "s3": {"anywhere": False, "on_page": False}}
    assert report["summary"]["ceiling"]["all"] == {"answerable": 0.667, "answerable_on_page": 0.667}
    assert report["build"]["subset"]["question_pages"] == 1 and report["build"]["subset"]["distractor_pages"] == 1
    for system in ("hybrid", "colbert", "tfidf"):
        shares = report["summary"][system]["all"]
        assert all(unit(v) for v in shares.values())
        assert shares["answer_on_page@10"] <= min(shares["answer@10"], shares["page@10"], 0.667)
        assert not report["per_question"]["s3"][system]["answer"]  # nowhere in the text: never found
    assert "| (indexed text) | answerable | 2/3 |" in stdout


def check_app_fusion(tiny: Tiny, stdout: str) -> None:
    import pandas as pd

    expected = {"squad-selection": 4 * 2, "squad-report": 8, "scifact-all": 3}
    for name, questions in expected.items():
        table = pd.read_csv(tiny.out / f"fusion-{name}.csv")
        assert len(table) == 2 + 1 + 2 * 6 + 1 and table["system"].iloc[0] == "TF-IDF"
        measures = table.drop(columns=["system", "depth"])
        assert ((measures >= 0) & (measures <= 1)).all().all(), name
        assert f"({questions:,} questions;" in stdout
    assert "10 of the 5,183 abstracts" in stdout  # the three judged ones and 7 drawn
    assert len(re.findall(r"100 results per system \d+ ms, 1000 results per system \d+ ms", stdout)) == 3


def check_short_answers(tiny: Tiny, stdout: str) -> None:
    rate = float(re.search(r"false 'nothing relevant' on the report questions: ([\d.]+)", stdout).group(1))
    nothing = float(re.search(r"'nothing relevant' on 3 scifact questions against the SQuAD passages: ([\d.]+)",
                              stdout).group(1))
    assert unit(rate) and unit(nothing)
    assert "short answers, report part (3 questions;" in stdout
    assert len(list((tiny.out / "answers").glob("*.json.gz"))) == 2  # report and scifact responses, cached


def check_app_bench(tiny: Tiny, stdout: str) -> None:
    report = report_json(stdout)
    index, api = report["index"], report["api"]
    assert index["passages"] == tiny.sample_passages and index["pages"] > 0 and index["wall_s"] > 0
    assert index["ingest_pages_per_s"] > 0 and index["peak_rss_mib"] > 0
    single, many = api["single_client"], api["2_clients"]
    assert single["requests"] == many["requests"] == 3
    assert 0 < single["p50_ms"] <= single["p95_ms"] <= single["max_ms"] and many["requests_per_s"] > 0


def check_sparse_bench(tiny: Tiny, stdout: str) -> None:
    report = json.loads((tiny.out / "sb" / "sparse_bench.json").read_text())["results"]["scifact"]
    info, points = report["info"], report["points"]
    assert (info["passages"], info["questions"]) == (tiny.num_docs, 3)
    assert info["index"]["num_docs"] == tiny.num_docs and info["splade_query_ms_batched"] > 0
    assert points[0]["family"] == "exhaustive" and points[0]["candidates"] == 1.0
    for point in points:
        assert point["ms"] > 0 and unit(point["RR@10"]) and unit(point["R@1000"])
        assert point["family"] == "PISA" or unit(point["candidates"])
    assert (tiny.out / "sb" / "sparse_bench.png").stat().st_size > 0


def check_tfidf_bench(tiny: Tiny, stdout: str) -> None:
    assert "corpus: 20 paragraphs; queries: 8 dev questions; k = 10" in stdout
    assert re.search(r"TF-IDF query latency: [\d.]+ ms/query batched, [\d.]+ ms/query one at a time \(3 queries\)",
                     stdout)


def check_plaid_compare(tiny: Tiny, stdout: str) -> None:
    result = json.loads((tiny.out / "pc" / "result.json").read_text())
    assert result["queries"] == 3
    for side in ("ours", "plaid"):
        row = result[side]
        build = row["build"]
        # this package encodes each passage once; colbert-ai encodes a sample first, then every passage again
        passes = 1 if side == "ours" else build["encoding_passes"]
        assert build["passages_encoded"] == round(passes * tiny.num_docs)
        assert build["passages_encoded"] >= tiny.num_docs and build["encode_seconds"] > 0
        assert row["e2e_ms"]["p50"] > 0 and unit(row["ndcg10"]) and unit(row["agreement_own_exhaustive"])
    # the frame-free searcher answered too, with the pipeline's passages (the worker's "same" needs all three)
    assert result["ours"]["e2e_arrays_ms"]["p50"] > 0 and result["ours"]["search_only_same_top10"] == 1.0


def check_formats_peer(tiny: Tiny, stdout: str) -> None:
    report = json.loads((tiny.out / "formats.json").read_text())
    for name, entry in report["variants"].items():
        for release, row in entry["by_release"].items():
            assert "error" not in row, (name, release, row)
            assert row["doc_tokens_equal"] and row["scores_unpadded"]["max_abs_diff"] < 1e-3


def peer_venv(path: str, python: str) -> Callable[[], Optional[str]]:
    """Skip unless the peer environment at ``path`` (or $PFC_PEER_VENV) is there: the smoke run never makes one."""
    def reason() -> Optional[str]:
        root = Path(os.environ.get("PFC_PEER_VENV", path))
        return None if (root / python).exists() else f"no peer environment at {root} (set PFC_PEER_VENV)"
    return reason


def module_absent(name: str) -> Callable[[], Optional[str]]:
    def reason() -> Optional[str]:
        return None if importlib.util.find_spec(name) else f"{name} is not installed (a benchmark-only dependency)"
    return reason


def data(t: Tiny, *names: str) -> List[str]:
    return ["--data", *names, "--data-root", str(t.root), "--checkpoint", t.checkpoint]


RUNS.update({
    "e2e_real": Run("benchmarks/e2e_real.py",
                    lambda t: ["--data", "scifact", "--data-root", str(t.root), "--index", str(t.fp16),
                               "--checkpoint", t.checkpoint, "--queries", "3", "--threads", "1", "--kinds", "exact",
                               "--k", "10", "--out", str(t.out / "e2e.json")], check_e2e_real),
    "compressed_tradeoff": Run("benchmarks/compressed_tradeoff.py",
                               lambda t: [*data(t, "scifact"), "--compressed", str(t.residual2), "--fp16",
                                          str(t.fp16), "--queries", "3", "--threads", "1", "--ncells", "1",
                                          "--ndocs", "8", "16", "--out", str(t.out / "tradeoff.json")],
                               check_compressed_tradeoff),
    "long_docs": Run("benchmarks/long_docs.py",
                     lambda t: [*data(t, "scifact"), "--workdir", str(t.out), "--queries", "3", "--threads", "1",
                                "--k", "10"], check_long_docs),
    "explain_eval": Run("benchmarks/explain_eval.py",
                        lambda t: ["--squad", str(t.squad / "dev-v1.1.json"), "--n", "4", "--checkpoint",
                                   t.checkpoint, "--threads", "1", "--json", str(t.out / "explain.json")],
                        check_explain_eval),
    "precision_quality": Run("benchmarks/precision_quality.py",
                             lambda t: [*data(t, "scifact"), "--limit", "3", "--threads", "1",
                                        "--out", str(t.out / "precision.json")], check_precision_quality),
    "fusion_adaptive": Run("benchmarks/fusion_adaptive.py",
                           lambda t: [*data(t, "squad", "scifact"), "--out", str(t.out), "--faiss", "flat",
                                      "--k", "10", "--threads", "1"], check_fusion_adaptive),
    "prf_eval": Run("benchmarks/prf_eval.py",
                    lambda t: [*data(t, "scifact"), "--out", str(t.out), "--faiss", "flat", "--k", "10",
                               "--fb-docs", "1", "2", "--threads", "1"], check_prf_eval),
    "prf_vote_check": Run("benchmarks/prf_vote_check.py",
                          lambda t: [*data(t, "scifact"), "--out", str(t.out), "--faiss", "flat", "--k", "10",
                                     "--fb-docs", "2", "--fb-embs", "3", "--threads", "1"], check_prf_vote_check),
    "sample_forms": Run("benchmarks/sample_forms.py",
                        lambda t: ["--out", str(t.out), "--checkpoint", t.checkpoint, "--k", "10", "--test"],
                        check_sample_forms,
                        slow=True),
    "shared_fusion_inputs": Run("benchmarks/shared_fusion_inputs.py",
                                lambda t: ["--out", str(t.out), "--threads", "1", "--checkpoint", t.checkpoint,
                                           "--limit", "4"], check_shared_fusion_inputs, slow=True),
    "train_speed": Run("benchmarks/train_speed.py",
                       lambda t: ["--data", str(t.squad), "--init", t.backbone, "--freeze", "0", "1", "--steps", "1",
                                  "--threads", "1", "--out", str(t.out / "train_speed.jsonl")], check_train_speed),
    "pipelines/train_default": Run(
        "pipelines/train_default.py",
        lambda t: ["--data", str(t.squad), "--parts", str(t.out / "protocol"), "--no-reference", "--init", t.backbone,
                   "--out", str(t.out / "default"), "--epochs", "1", "--batch-size", "2", "--dim", "16",
                   "--doc-maxlen", "32", "--query-maxlen", "16", "--eval-every", "1"],
        check_train_default),
    "check_formats here": Run("benchmarks/check_formats.py",
                              lambda t: ["--data", str(t.root), "--checkpoint", t.checkpoint, "--passages", "5",
                                         "--queries", "2", "--threads", "1", "--no-peer",
                                         "--out", str(t.out / "formats.json")], check_formats_here, slow=True),
    "check_formats peer": Run("benchmarks/check_formats.py",
                              lambda t: ["--data", str(t.root), "--checkpoint", t.checkpoint, "--passages", "5",
                                         "--queries", "2", "--threads", "1", "--pylate", "1.6.0",
                                         "--venv", os.environ.get("PFC_PEER_VENV", "/tmp/peer-venvs"),
                                         "--out", str(t.out / "formats.json")], check_formats_peer,
                              skip=peer_venv("/tmp/peer-venvs", "base/bin/python")),
    "integrity_bench": Run("benchmarks/integrity_bench.py",
                           lambda t: ["--docs", "50", "--tfidf-docs", "50", "--queries", "3", "--repeats", "2",
                                      "--threads", "1", "--workdir", str(t.out / "work")], check_integrity),
    "integrity_bench scifact": Run("benchmarks/integrity_bench.py",
                                   lambda t: ["--scifact", str(t.scifact), "--checkpoint", t.checkpoint, "--docs",
                                              "20", "--queries", "3", "--rounds", "1", "--repeats", "1",
                                              "--threads", "1", "--workdir", str(t.out / "work")],
                                   check_integrity_scifact),
    "folder_bench quality": Run("benchmarks/folder_bench.py",
                                lambda t: ["quality", *data(t, "scifact"), "--out", str(t.out / "fb"),
                                           "--threads", "1", "--quiet"], check_folder_quality),
    "index_precision": Run("benchmarks/index_precision.py",
                           lambda t: ["--source", str(t.scifact), "--max-docs", str(t.num_docs), "--rounds", "1",
                                      "--threads", "1", "--checkpoint", t.checkpoint,
                                      "--out", str(t.out / "precision.json")],
                           check_index_precision, slow=True),  # two builds, each in a process of its own
    "growth": Run("benchmarks/growth.py", growth_args, check_growth, slow=True),  # four processes
    "wait_policy": Run("benchmarks/wait_policy.py",
                       lambda t: ["--data", str(t.scifact), "--index", str(t.out / "absent"), "--max-docs", "12",
                                  "--checkpoint", t.checkpoint, "--workdir", str(t.out), "--queries", "3",
                                  "--warmup", "1", "--settings", "OMP_WAIT_POLICY=PASSIVE", "default",
                                  "--threads", "1", "--busy", "0", "1"],
                       check_wait_policy, slow=True),  # four processes
    "device_build": Run("benchmarks/device_build.py",
                        lambda t: ["--squad", str(t.squad / "train-v1.1.json"), "--passages", "12", "--threads", "1",
                                   "--checkpoint", t.checkpoint, "--out", str(t.out / "device.json")],
                        check_device_build),
    "index_stages": Run("benchmarks/index_stages.py",
                        lambda t: ["--dump", str(SAMPLE_DUMP), "--passages", "20", "--threads", "1",
                                   "--checkpoint", t.checkpoint, "--out", str(t.out / "stages.json")],
                        check_index_stages),
    "pipelines/compare": Run("pipelines/compare.py", compare_args, check_compare, slow=True),
    "folder_bench update": Run("benchmarks/folder_bench.py", folder_update_args, check_folder_update),
    "fact_questions": Run("benchmarks/fact_questions.py", fact_questions_args, check_fact_questions),
    "app_fusion": Run("benchmarks/app_fusion.py",
                      lambda t: [*data(t, "squad", "scifact"), "--out", str(t.out), "--threads", "1", "--quiet",
                                 "--scifact-docs", "10", "--latency", "2"], check_app_fusion),
    "reader_eval gold": Run("benchmarks/reader_eval.py",
                            lambda t: ["gold", "--data-root", str(t.root), "--reader", t.fixture("tiny_reader_dir"),
                                       "--limit", "3", "--threads", "1", "--quiet"], check_reader_gold),
    "reader_eval e2e": Run("benchmarks/reader_eval.py",
                           lambda t: ["e2e", "--data-root", str(t.root), "--reader", t.fixture("tiny_reader_dir"),
                                      "--checkpoint", t.checkpoint, "--out", str(t.out), "--limit", "3",
                                      "--threads", "1", "--quiet"], check_reader_e2e, slow=True),
    "short_answer_eval": Run("benchmarks/short_answer_eval.py",
                             lambda t: ["--data-root", str(t.root), "--checkpoint", t.checkpoint, "--out", str(t.out),
                                        "--threads", "1", "--quiet", "--sample", "3"], check_short_answers),
    "app_bench": Run("benchmarks/app_bench.py",
                     lambda t: ["--dump", str(SAMPLE_DUMP), "--checkpoint", t.checkpoint, "--threads", "1",
                                "--queries", "3", "--clients", "2", "--out", str(t.out / "app.json")],
                     check_app_bench, slow=True),
    "sparse_bench": Run("benchmarks/sparse_bench.py",
                        lambda t: ["--weights", t.fixture("sparse_mlm"), "--data", "scifact", "--data-root",
                                   str(t.root), "--queries", "3", "--threads", "1", "--num-topics", "2",
                                   "--topic-sources", "splade", "--trees", "unsorted/max",
                                   "--cache", str(t.out / "cache"), "--out", str(t.out / "sb")], check_sparse_bench),
    "tfidf_bench": Run("benchmarks/tfidf_bench.py", lambda t: ["--data", str(t.squad), "--k", "10", "--single", "3"],
                       check_tfidf_bench, skip=module_absent("bm25s")),
    "plaid_compare": Run("benchmarks/plaid_compare.py",
                         lambda t: ["--data", str(t.scifact), "--checkpoint", t.checkpoint, "--max-docs", "20",
                                    "--queries", "3", "--warmup", "1", "--threads", "1", "--out", str(t.out / "pc"),
                                    "--peer-venv", os.environ.get("PFC_PEER_VENV", "/tmp/peers-venv")],
                         check_plaid_compare, skip=peer_venv("/tmp/peers-venv", "bin/python"), slow=True),
})

@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if r.slow else []) for n, r in RUNS.items()])
def test_tiny_run(name, tiny, tmp_path, monkeypatch, capsys):
    run = RUNS[name]
    for need in run.needs:
        if not (ROOT.parent / "shared" / "data" / need).exists():
            pytest.skip(f"{run.script} needs ../shared/data/{need}")
    reason = run.skip()
    if reason:
        pytest.skip(f"{run.script}: {reason}")
    tiny.out = tmp_path
    monkeypatch.chdir(tmp_path)  # scripts that write under runs/ by default write here
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "irds-home"))  # the sample's irds data sets write there
    # the repository importable in the scripts' own subprocesses (hostile_wikitext imports itself as benchmarks.…)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    module = load(ROOT / run.script)
    status = call_main(module, run.args(tiny), monkeypatch)
    stdout = capsys.readouterr().out
    print(stdout)  # shown again when the check fails
    assert status == 0
    run.check(tiny, stdout)


def test_plaid_compare_refuses_builds_that_measured_nothing():
    """A cached build from the broken timer (0 passages encoded) stops the driver with a message, not a table."""
    module = load(ROOT / "benchmarks" / "plaid_compare.py")
    plaid = {"passages_encoded": 10, "encode_seconds": 2.0}
    ours = {"passages_encoded": 5, "num_passages": 5}
    module.check_builds(ours, plaid, 5)
    with pytest.raises(SystemExit, match=r"passages encoded 0, expected 5.*--rebuild"):
        module.check_builds(dict(ours, passages_encoded=0), plaid, 5)
    with pytest.raises(SystemExit, match="PLAID's build encoded 4 passages"):
        module.check_builds(ours, dict(plaid, passages_encoded=4), 5)


def test_encode_runtimes_says_how_to_get_the_runtimes(tmp_path):
    """Without ONNX Runtime and OpenVINO (they are no dependency), the runtime comparison stops before loading a
    model, with a message naming what is missing and how to make the environment that has them."""
    import importlib.util

    module = load(ROOT / "benchmarks" / "encode_runtimes.py")
    with pytest.raises(SystemExit, match=r"onnxruntime, openvino not found \(no --ox-python was given\).*pip install"):
        module.main(["--work", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"cannot run --ox-python '/no/such/python'.*/tmp/ox-venv"):
        module.main(["--ox-python", "/no/such/python", "--work", str(tmp_path)])
    if importlib.util.find_spec("onnxruntime") is None:  # the package's own environment, as it normally is
        with pytest.raises(SystemExit, match=rf"onnxruntime not found \(--ox-python {re.escape(sys.executable)}\)"):
            module.main(["--ox-python", sys.executable, "--runtimes", "onnxruntime fp32", "--work", str(tmp_path)])
    assert not list(tmp_path.iterdir())  # stopped before writing anything


@pytest.mark.slow
def test_reader_fit_refuses_a_reader_that_is_never_right(tiny, tmp_path, monkeypatch, capsys):
    """``reader_eval.py fit`` end to end on the tiny data: the selection questions are asked of both folders and
    the answers gathered; the tiny random reader is never right, so the fit says why it fits nothing and writes
    nothing (the fit itself is checked on synthetic answers in its doctests)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "irds-home"))
    module = load(ROOT / "benchmarks" / "reader_eval.py")
    reader = Path(tiny.fixture("tiny_reader_dir"))
    before = (reader / "manifest.json").read_bytes()
    with pytest.raises(SystemExit, match=r"fit: the \d+ answers shown are all wrong: nothing to fit"):
        module.main(["fit", "--data-root", str(tiny.root), "--reader", str(reader), "--checkpoint",
                     tiny.checkpoint, "--out", str(tmp_path), "--threads", "1", "--quiet", "--write"])
    assert (reader / "manifest.json").read_bytes() == before
    assert len(list((tmp_path / "answers").glob("sel-*.json.gz"))) == 2  # both folders were asked
