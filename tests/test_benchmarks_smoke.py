"""Smoke runs of every script under benchmarks/ and pipelines/ (marker ``bench_smoke``), so that a refactor cannot
break one unseen: each is loaded and its command line built (``--help``), and the ones with a tiny-data option run
on tiny data here (the tiny random models of conftest.py, the bundled sample wiki, synthetic corpora) with their
output's shape and sanity checked: counts equal to the input, times positive, measures within [0, 1].

The scripts run in this process (``main(argv)``), not as subprocesses, so that the package and torch are imported
once for all of them. One table, ``RUNS``, holds each tiny run: script, arguments, check. Scripts that need a peer
environment (colbert-ai, PyLate) or the real data under ../shared/data skip with the reason.
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
from typing import Callable, Dict, List

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted([*(ROOT / "benchmarks").glob("*.py"), *(ROOT / "pipelines").glob("*.py")])
SAMPLE_DUMP = ROOT / "pyterrier_fandom_colbert" / "data" / "sample" / "samplewiki_pages_current.xml"
#: scripts whose command line is not argparse's: (reason, how they are loaded instead)
NO_HELP = {
    "bench_io.py": "a helper module of the benchmarks, not a script",
    "compare.py": "runs pfc-compare with fixed settings at import as __main__ (its options are pfc-compare's)",
    "check_formats_peer.py": "runs inside the peer environment, positional arguments only",
    "plaid_peer.py": "runs inside the peer environment, positional arguments only",
}

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
        assert path.name == "bench_io.py" or path.name == "compare.py" or callable(module.main)
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


@dataclass
class Tiny:
    """Tiny inputs shared by the runs, made once: a checkpoint, a SciFact-shaped folder, a work folder."""

    root: Path
    backbone: str  # conftest's tiny random BERT
    checkpoint: str  # a ColBERT checkpoint over it
    scifact: Path  # corpus.jsonl.gz, queries-train.jsonl.gz, qrels/train.tsv of CORPUS
    squad: Path  # train-v1.1.json and dev-v1.1.json of CORPUS
    fp16: Path  # CORPUS indexed with the checkpoint, fp16
    residual2: Path  # and residual2
    num_docs: int
    sample_passages: int  # the bundled sample wiki's, as the package splits it
    out: Path = None  # type: ignore[assignment]  # a fresh folder per run


CORPUS = [f"{s} {f}." for s in ("The castle of Vel Amara", "Captain Mirel", "The dragon Ysolde", "Old Orrin")
          for f in ("was built in the third age", "fought the hill giants", "guards a crown of fire",
                    "forged twelve blades from fallen stars", "trades silk along the coast")]


@pytest.fixture(scope="module")
def tiny(tiny_bert_dir, tmp_path_factory) -> Tiny:
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
    squad = root / "squad"
    squad.mkdir()

    def paragraph(a: int, i: int, text: str) -> dict:
        word = text.split()[-2]
        answer = {"text": word, "answer_start": text.rindex(word)}
        return {"context": text, "qas": [{"id": f"q{a}-{i}", "question": f"what {word}", "answers": [answer]}]}

    articles = [{"title": f"T{a}", "paragraphs": [paragraph(a, i, t) for i, t in enumerate(CORPUS[5 * a:5 * a + 5])]}
                for a in range(len(CORPUS) // 5)]
    for name in ("train-v1.1.json", "dev-v1.1.json"):
        (squad / name).write_text(json.dumps({"data": articles}))
    colbert = pfc.ColBERT.from_pretrained(str(checkpoint), device="cpu")
    docs = [{"docno": f"d{i}", "text": t} for i, t in enumerate(CORPUS)]
    for fmt in ("fp16", "residual2"):
        pfc.ColBERTIndex(root / f"{fmt}.colbert").indexer(colbert, compression=fmt, ann=None).index(docs)
    from pyterrier_fandom_colbert.data.passages import PassageConfig, dump_passages

    sample_passages = sum(1 for _ in dump_passages(SAMPLE_DUMP, PassageConfig()))
    return Tiny(root=root, backbone=tiny_bert_dir, checkpoint=str(checkpoint), scifact=scifact, squad=squad,
                fp16=root / "fp16.colbert", residual2=root / "residual2.colbert", num_docs=len(CORPUS),
                sample_passages=sample_passages)


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
    assert row["passages_per_s"] == pytest.approx(200 / row["seconds"], rel=0.02)


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
    assert row["close_seconds"] >= 0 and row["num_centroids"] > 0 and 0 < row["bytes_per_token"] < 2 * 16


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
                                        "--shards", "2", "--sample-docs", "100"], check_scale_bench, slow=True),
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
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if r.slow else []) for n, r in RUNS.items()])
def test_tiny_run(name, tiny, tmp_path, monkeypatch, capsys):
    run = RUNS[name]
    for need in run.needs:
        if not (ROOT.parent / "shared" / "data" / need).exists():
            pytest.skip(f"{run.script} needs ../shared/data/{need}")
    tiny.out = tmp_path
    monkeypatch.chdir(tmp_path)  # scripts that write under runs/ by default write here
    # the repository importable in the scripts' own subprocesses (hostile_wikitext imports itself as benchmarks.…)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    module = load(ROOT / run.script)
    assert call_main(module, run.args(tiny), monkeypatch) == 0
    run.check(tiny, capsys.readouterr().out)


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
