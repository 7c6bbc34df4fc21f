"""The package's shape: parts import only downward, and stages compose through columns so that a pipeline, or
an experiment over several pipelines, runs each shared stage once."""
import ast
import functools
from pathlib import Path

import pandas as pd
import pyterrier as pt
import pytest
from ir_measures import RR

import pyterrier_fandom_colbert as pfc

PACKAGE = Path(pfc.__file__).parent
#: parts of the system, lowest first: a module may import its own part and the parts below it, never above
LAYERS = [
    {"checks"},  # the parameter checks, used by every part (the parameter protocol's rank cutoff too)
    {"progress", "lazy", "ranking", "cli_errors", "display", "params", "caching", "heap"},
    {"frames", "storage"},
    {"model"},
    {"lexical", "data", "index", "fusion", "sparse", "reader"},
    {"explain", "distributed"},
    {"training"},
    {"__init__", "cli", "app"},
    {"__main__"},  # `python -m pyterrier_fandom_colbert`: the pfc command (app/cli.py)
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts)


def _imports(path: Path):
    """Package modules imported by ``path`` at run time (``if TYPE_CHECKING:`` blocks are annotations only)."""
    tree = ast.parse(path.read_text())
    module = _module_name(path).split(".")
    package = module[:-1]  # a module's package; for "<pkg>.__init__", the package itself
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
            target = base + (node.module.split(".") if node.module else [])
        elif node.module and node.module.startswith("pyterrier_fandom_colbert"):
            target = node.module.split(".")[1:]
        else:
            continue
        for alias in node.names:  # `from . import network` names a module
            candidate = [*target, alias.name]
            if (PACKAGE.joinpath(*candidate).with_suffix(".py")).exists() or PACKAGE.joinpath(*candidate).is_dir():
                found.add(".".join(candidate))
            else:
                found.add(".".join(target) if target else "__init__")
    return found


@functools.lru_cache(maxsize=1)  # the three tests below read one parse of the package (it does not change)
def _graph():
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        graph[_module_name(path)] = {m.removesuffix(".__init__") for m in _imports(path)}
    return graph


def _part(module: str) -> str:
    return module.split(".")[0]


def _rank(part: str) -> int:
    for rank, parts in enumerate(LAYERS):
        if part in parts:
            return rank
    raise AssertionError(f"part {part!r} of the package is not placed in LAYERS")


def test_parts_import_only_downward():
    upward = []
    for module, targets in _graph().items():
        for target in targets:
            a, b = _part(module), _part(target)
            if a != b and _rank(b) >= _rank(a):
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_no_import_circles_between_modules():
    graph = _graph()
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            nxt = nxt if nxt in graph else nxt.rsplit(".", 1)[0]
            if nxt == node or nxt not in graph:
                continue
            if state.get(nxt) == "open":
                raise AssertionError("import circle: " + " -> ".join([*stack[stack.index(nxt):], nxt]))
            if nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_the_graph_sees_real_edges():
    """The checks above would pass on an empty graph: make sure the parser finds known imports."""
    graph = _graph()
    assert "model.config" in graph["index.artifact"]
    assert "model.encoders" in graph["index.fp16.search"]
    assert "storage" in graph or "storage" in {t for ts in graph.values() for t in ts}


#: the longest a module may be (CONTRIBUTING.md: "A module stays under about 600 lines")
MAX_LINES = 600


def test_no_module_is_over_600_lines():
    """The package, and the scripts of benchmarks/ and pipelines/ (split a long one by job into neighbour modules,
    as benchmarks/folder_bench.py is)."""
    root = PACKAGE.parent
    modules = [*PACKAGE.rglob("*.py"), *(root / "benchmarks").glob("*.py"), *(root / "pipelines").glob("*.py")]
    assert len(modules) > 100 and any(m.parent.name == "benchmarks" for m in modules)
    long = {str(m.relative_to(root)): n for m in modules if (n := len(m.read_text().splitlines())) > MAX_LINES}
    assert long == {}


# -- composition and equality -----------------------------------------------------------------------------

TEXTS = ["The castle of Vel Amara was built in the third age by the river folk.",
         "When was the game released? It came out in the spring of 2011.",
         "Dragons, knights and wizards fight over the silver crown of the north.",
         "Who forged the blade? The smith Orrin forged it from fallen stars.",
         "The river folk sailed south when the winter came early that year."]
CORPUS = [{"docno": f"d{i}", "text": t} for i, t in enumerate(TEXTS)]
TOPICS = pd.DataFrame({"qid": ["q1", "q2"], "query": ["who forged the blade", "when was the game released"]})
QRELS = pd.DataFrame({"qid": ["q1", "q2"], "docno": ["d3", "d1"], "label": [1, 1]})


@pytest.fixture(scope="module")
def parts(tiny_parts):
    return tiny_parts(CORPUS, "arch")



def test_transformers_are_equal_when_their_output_would_be(parts, tiny_bert_dir):
    colbert, tfidf, index = parts
    assert tfidf.retriever(10, text=True) == pfc.TfidfIndex(tfidf.path).retriever(10, text=True)
    assert hash(tfidf.retriever(10, text=True)) == hash(pfc.TfidfIndex(tfidf.path).retriever(10, text=True))
    assert tfidf.retriever(10) != tfidf.retriever(10, text=True) and tfidf.retriever(10) != tfidf.retriever(11)
    assert index.retriever(num_results=5) == pfc.ColBERTIndex(index.path).retriever(num_results=5)
    assert index.retriever(num_results=5) != index.retriever(num_results=5, k_hat=9)
    assert index.scorer() == pfc.ColBERTIndex(index.path).scorer()
    assert colbert.query_encoder() == colbert.query_encoder() and colbert.text_scorer() == colbert.text_scorer()
    other = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(dim=16), seed=1, device="cpu")
    assert other.query_encoder() != colbert.query_encoder()  # other weights, other vectors
    assert pfc.Explainer(colbert) == pfc.Explainer(colbert) != pfc.Explainer(colbert, k_tilde=3)


def test_shared_stages_run_once_in_a_tree_experiment(parts, count_calls):
    """The README's experiment: TF-IDF is the first stage of three systems and runs once; the query encoder is
    shared by the two pipelines that start with it and runs once."""
    colbert, tfidf, index = parts
    searches = count_calls(pfc.TfidfIndex, "search")
    encodes = count_calls(pfc.ColBERT, "encode_queries")
    first = tfidf.retriever(num_results=5, text=True)
    encoder = colbert.query_encoder()
    systems = [first,
               first >> colbert.text_scorer(),
               first >> encoder >> index.scorer(),
               encoder >> index.retriever(num_results=5)]
    table = pt.Experiment(systems, TOPICS, QRELS, [RR @ 10], plan="tree",
                          names=["tfidf", "tfidf>>text", "tfidf>>index", "colbert"])
    assert searches.calls == 1
    assert encodes.calls == 3  # the text scorer's own queries, the encoder after TF-IDF, the encoder first
    linear = pt.Experiment(systems, TOPICS, QRELS, [RR @ 10], names=list(table.name))
    assert searches.calls == 1 + 3
    pd.testing.assert_frame_equal(table, linear)


def test_a_pipeline_encodes_each_query_once(parts, count_calls):
    colbert, _, index = parts
    encodes = count_calls(pfc.ColBERT, "encode_queries")
    text = pd.DataFrame(CORPUS)
    pipeline = (index.retriever(colbert, num_results=5) % 3
                >> pt.apply.generic(lambda df: df.merge(text, on="docno"))
                >> pfc.Explainer(colbert))
    out = pipeline(TOPICS)
    assert encodes.calls == 1 and len(out) == 6
    fresh = pfc.Explainer(colbert)(out.drop(columns=["query_embs", "query_toks"]))  # encodes its own
    assert encodes.calls == 2
    for column in ("r_abs", "expl_sim"):
        for a, b in zip(out[column], fresh[column]):
            pd.testing.assert_series_equal(pd.Series(a.ravel()), pd.Series(b.ravel()), atol=1e-5)
