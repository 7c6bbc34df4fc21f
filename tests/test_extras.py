"""The optional parts are extras: with only the core dependencies (the extras' modules blocked from importing, as if
not installed) the package imports and a TF-IDF >> ColBERT pipeline ranks exactly as with everything installed,
and each optional part used anyway fails with one line naming the extra that installs it."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import pyterrier_fandom_colbert as pfc

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = Path(pfc.__file__).parent / "data" / "sample" / "samplewiki_pages_current.xml"
#: the extras' top-level modules (pyproject.toml: app, wiki, plot)
EXTRAS = {"app": ["starlette", "uvicorn", "jinja2"], "wiki": ["mwparserfromhell", "py7zr"], "plot": ["matplotlib"]}
BLOCK = "import sys\nfor name in {names!r}:\n    sys.modules[name] = None  # import raises ImportError\n"

PIPELINE = """
import json
import pandas as pd
import pyterrier_fandom_colbert as pfc
records = [{{"docno": f"d{{i}}", "text": text}} for i, text in enumerate([
    "The lighthouse keeper of Quillmere was Odalys Brenn.",
    "Ferries leave the Quillmere pier at dawn with salt and rope.",
    "Hollowlight Studios was founded by Mira Vance in the north.",
    "The silver crown of the north was forged by the smith Orrin.",
    "Dragons and knights fight over the crown in the third age."])]
tfidf_index = pfc.TfidfIndex({folder!r} + "/tfidf")
tfidf_index.indexer(store_text=True).index(records)
colbert = pfc.ColBERT.from_pretrained({checkpoint!r}, device="cpu")
pipeline = tfidf_index.retriever(text=True) >> colbert.text_scorer()
topics = pd.DataFrame({{"qid": ["1", "2"], "query": ["who kept the Quillmere lighthouse", "who forged the crown"]}})
out = pipeline(topics)
print(json.dumps([[r.qid, r.docno, round(float(r.score), 4), int(r["rank"])] for _, r in out.iterrows()]))
"""


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600)


@pytest.mark.slow
def test_the_core_alone_runs_tfidf_then_colbert_as_the_full_install_does(tmp_path, tiny_bert_dir):
    blocked = [name for names in EXTRAS.values() for name in names]
    bare = run_python(BLOCK.format(names=blocked) + PIPELINE.format(folder=str(tmp_path / "bare"),
                                                                    checkpoint=tiny_bert_dir))
    assert bare.returncode == 0, bare.stderr[-3000:]
    full = run_python(PIPELINE.format(folder=str(tmp_path / "full"), checkpoint=tiny_bert_dir))
    assert full.returncode == 0, full.stderr[-3000:]
    rows = json.loads(bare.stdout.strip().splitlines()[-1])
    assert rows == json.loads(full.stdout.strip().splitlines()[-1])
    assert {qid for qid, *_ in rows} == {"1", "2"}
    for qid in ("1", "2"):  # each query's re-ranked results in rank order, scores falling
        scores = [score for q, _, score, _ in sorted((r for r in rows if r[0] == qid), key=lambda r: r[3])]
        assert scores == sorted(scores, reverse=True)


OPTIONAL_PARTS = [
    ("app", "from pyterrier_fandom_colbert.app.server import create_app\ncreate_app(None)", "pfc serve"),
    ("app", "from pyterrier_fandom_colbert.app.server import make_server\nmake_server(None)", "pfc serve"),
    ("wiki", f"from pyterrier_fandom_colbert.data.passages import dump_passages\nlist(dump_passages({str(SAMPLE)!r}))",
     "reading wikitext"),
    ("plot", "from pyterrier_fandom_colbert.explain.render import heatmap\nheatmap({})", "a heatmap"),
]
#: each case of OPTIONAL_PARTS in one process (one start, not four): its extra's modules blocked (never imported by
#: an earlier case, or the block would not be what a fresh process sees), its code run, and the last line the
#: error would print uncaught (None: no error); then the modules unblocked for the next case
CASES = """
import json, sys, traceback
lines = []
for names, code in json.loads(sys.argv[1]):
    assert not set(names) & set(sys.modules), f"an earlier case imported {set(names) & set(sys.modules)}"
    for name in names:
        sys.modules[name] = None  # import raises ImportError
    try:
        exec(code, {"__name__": "__main__"})
        lines.append(None)
    except Exception as err:
        lines.append(traceback.format_exception_only(err)[-1].strip())
    for name in names:
        del sys.modules[name]
print(json.dumps(lines))
"""


@pytest.fixture(scope="module")
def optional_part_errors():
    cases = [(EXTRAS[extra], code) for extra, code, _ in OPTIONAL_PARTS]
    done = subprocess.run([sys.executable, "-c", CASES, json.dumps(cases)], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("extra, code, what", OPTIONAL_PARTS)
def test_an_optional_part_without_its_extra_names_the_extra(extra, code, what, optional_part_errors):
    last = optional_part_errors[OPTIONAL_PARTS.index((extra, code, what))]
    assert last is not None  # the part failed
    module = next(name for name in EXTRAS[extra] if f"needs {name}," in last)
    assert last == (f"pyterrier_fandom_colbert.cli_errors.MissingExtra: {what} needs {module}, which is not "
                    f"installed: pip install 'pyterrier-fandom-colbert[{extra}]'")


def test_pfc_index_of_a_dump_without_the_wiki_extra_is_one_line(tmp_path, tiny_bert_dir):
    code = ("import sys\nfrom pyterrier_fandom_colbert.app.cli import main\n"
            f"sys.exit(main(['index', {str(SAMPLE)!r}, {str(tmp_path / 'wiki')!r}, '--checkpoint', "
            f"{tiny_bert_dir!r}, '--quiet']))")
    done = run_python(BLOCK.format(names=EXTRAS["wiki"]) + code)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip() == ("pfc index: error: reading wikitext needs mwparserfromhell, which is not "
                                   "installed: pip install 'pyterrier-fandom-colbert[wiki]'")
    assert list(tmp_path.iterdir()) == []  # nothing written
