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
def test_the_core_alone_runs_tfidf_then_colbert_as_the_full_install_does(tmp_path, tiny_bert_dir, capsys):
    blocked = [name for names in EXTRAS.values() for name in names]
    bare = run_python(BLOCK.format(names=blocked) + PIPELINE.format(folder=str(tmp_path / "bare"),
                                                                    checkpoint=tiny_bert_dir))
    assert bare.returncode == 0, bare.stderr[-3000:]
    capsys.readouterr()
    exec(PIPELINE.format(folder=str(tmp_path / "full"), checkpoint=tiny_bert_dir), {})  # the full install: this one
    full = capsys.readouterr().out
    rows = json.loads(bare.stdout.strip().splitlines()[-1])
    assert rows == json.loads(full.strip().splitlines()[-1])
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
#: cases run one after another in one process (one start, not one each): the case's blocked modules (never imported
#: by an earlier case, or the block would not be what a fresh process sees), its code run with everything it writes
#: to stderr (file descriptor 2) kept, and the last line its error would print uncaught (None: no error) or the
#: status it exits with; then the modules unblocked for the next case
CASES = """
import json, os, sys, tempfile, traceback
results = []
for names, code in json.loads(sys.argv[1]):
    assert not set(names) & set(sys.modules), f"an earlier case imported {set(names) & set(sys.modules)}"
    for name in names:
        sys.modules[name] = None  # import raises ImportError
    result = {"error": None, "status": None}
    with tempfile.TemporaryFile("w+") as err:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            exec(code, {"__name__": "__main__"})
        except SystemExit as stop:
            result["status"] = stop.code
        except Exception as error:
            result["error"] = traceback.format_exception_only(error)[-1].strip()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        result["stderr"] = err.read()
    for name in names:
        del sys.modules[name]
    results.append(result)
print(json.dumps(results))
"""


def pfc_index_code(folder: Path, checkpoint: str) -> str:
    return ("import sys\nfrom pyterrier_fandom_colbert.app.cli import main\n"
            f"sys.exit(main(['index', {str(SAMPLE)!r}, {str(folder / 'wiki')!r}, '--checkpoint', "
            f"{checkpoint!r}, '--quiet']))")


@pytest.fixture(scope="module")
def extra_cases(tmp_path_factory, tiny_bert_dir):
    """The results of OPTIONAL_PARTS, then of ``pfc index`` of a dump without the wiki extra (last: it imports
    jinja2, which the app cases block), and the folder ``pfc index`` was given."""
    folder = tmp_path_factory.mktemp("no-wiki")
    cases = [(EXTRAS[extra], code) for extra, code, _ in OPTIONAL_PARTS]
    cases += [(EXTRAS["wiki"], pfc_index_code(folder, tiny_bert_dir))]
    done = subprocess.run([sys.executable, "-c", CASES, json.dumps(cases)], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return {"parts": results[:-1], "pfc index": results[-1], "folder": folder}


@pytest.mark.parametrize("extra, code, what", OPTIONAL_PARTS)
def test_an_optional_part_without_its_extra_names_the_extra(extra, code, what, extra_cases):
    last = extra_cases["parts"][OPTIONAL_PARTS.index((extra, code, what))]["error"]
    assert last is not None  # the part failed
    module = next(name for name in EXTRAS[extra] if f"needs {name}," in last)
    assert last == (f"pyterrier_fandom_colbert.cli_errors.MissingExtra: {what} needs {module}, which is not "
                    f"installed: pip install 'pyterrier-fandom-colbert[{extra}]'")


def test_pfc_index_of_a_dump_without_the_wiki_extra_is_one_line(extra_cases):
    done = extra_cases["pfc index"]
    assert done["status"] == 2, done
    # all the process wrote to stderr (the cases before it too, which imported what it uses): its one line
    written = "".join(r["stderr"] for r in [*extra_cases["parts"], done])
    assert written.strip() == ("pfc index: error: reading wikitext needs mwparserfromhell, which is not "
                               "installed: pip install 'pyterrier-fandom-colbert[wiki]'")
    assert list(extra_cases["folder"].iterdir()) == []  # nothing written
