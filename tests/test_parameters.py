"""PyTerrier's parameter protocol: ``set_parameter`` changes a transformer exactly as constructing it with that
value does (output, equality, hash, repr), refuses what the constructor refuses, and ``pt.GridSearch`` over a
fusion's weight agrees with ``tune_fusion``."""
import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.fusion import tune_fusion
from pyterrier_fandom_colbert.params import Parameters

TEXTS = ["The castle of Vel Amara was built in the third age by the river folk.",
         "When was the game released? It came out in the spring of 2011.",
         "Dragons, knights and wizards fight over the silver crown of the north.",
         "Who forged the blade? The smith Orrin forged it from fallen stars.",
         "The river folk sailed south when the winter came early that year.",
         "The silver blade of the north was forged by the river smith."]
CORPUS = [{"docno": f"d{i}", "text": t} for i, t in enumerate(TEXTS)]
TOPICS = pd.DataFrame({"qid": ["q1", "q2"], "query": ["who forged the silver blade", "when did the river folk sail"]})


@pytest.fixture(scope="module")
def parts(tiny_parts):
    return tiny_parts(CORPUS, "params")


def _cases(colbert, tfidf, index):
    """(name, constructor with keyword arguments, the input to run it on or None, parameter, other value,
    a value the constructor refuses or None)."""
    from pyterrier_fandom_colbert.index.fp16.search import ColBERTRetriever
    from pyterrier_fandom_colbert.index.scorer import IndexScorer
    from pyterrier_fandom_colbert.lexical.tfidf import TfidfRetriever
    from pyterrier_fandom_colbert.model.encoders import DocEncoder, EmbeddingScorer, QueryEncoder, TextScorer

    encoded = colbert.query_encoder()(TOPICS)
    with_text = tfidf.retriever(num_results=4, text=True)(TOPICS)
    candidates = colbert.query_encoder()(with_text)
    lexical, neural = tfidf.retriever(num_results=5), colbert.query_encoder() >> index.retriever(num_results=5)

    def hybrid(**kw):
        return pfc.Hybrid(lexical, neural, **kw)

    def linear(**kw):
        return pfc.LinearFusion([lexical, neural], **kw)

    def rrf(**kw):
        return pfc.RRF([lexical, neural], **kw)

    return [
        ("Hybrid", hybrid, TOPICS, "weight", 0.9, 1.5),
        ("Hybrid", hybrid, TOPICS, "normalise", "minmax", "softmax"),
        ("LinearFusion", linear, TOPICS, "weights", (0.9, 0.1), (0.5, np.inf)),
        ("RRF", rrf, TOPICS, "k", 1.0, -3),
        ("Normalise", lambda **kw: pfc.Normalise(**kw), with_text, "method", "zscore", "softmax"),
        ("TfidfRetriever", lambda **kw: TfidfRetriever(tfidf, **kw), TOPICS, "num_results", 2, 0),
        ("TfidfRetriever", lambda **kw: TfidfRetriever(tfidf, **kw), TOPICS, "text", True, None),
        ("ColBERTRetriever", lambda **kw: ColBERTRetriever(index, **kw), encoded, "num_results", 2, 0),
        ("ColBERTRetriever", lambda **kw: ColBERTRetriever(index, **kw), encoded, "k_hat", 1, 0),
        ("IndexScorer", lambda **kw: IndexScorer(index, **kw), candidates, "strict", True, None),
        ("QueryEncoder", lambda **kw: QueryEncoder(colbert, **kw), TOPICS, "strict", True, None),
        ("DocEncoder", lambda **kw: DocEncoder(colbert, **kw), None, "text_field", "body", None),
        ("TextScorer", lambda **kw: TextScorer(colbert, **kw), with_text, "stride", 3, 0),
        ("TextScorer", lambda **kw: TextScorer(colbert, **kw), with_text, "long_docs", "truncate", "middle"),
        ("EmbeddingScorer", lambda **kw: EmbeddingScorer(**kw), None, "config",
         pfc.ColBERTConfig(dim=16, similarity="l2"), None),
        ("Explainer", lambda **kw: pfc.Explainer(colbert, **kw), with_text.iloc[:2], "k_tilde", 3, 0),
        ("Explainer", lambda **kw: pfc.Explainer(colbert, **kw), None, "span_threshold", 0.8, 1.5),
        ("Explainer", lambda **kw: pfc.Explainer(colbert, **kw), None, "max_span", 32, 0),
    ]


def _same_output(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for column in a.columns:
        for x, y in zip(a[column], b[column]):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


#: settings whose other value changes the output on the cases' input (the others: equality and repr only, e.g.
#: ``strict`` refuses bad rows, of which there are none, and the texts are shorter than one window)
CHANGES_OUTPUT = {("Hybrid", "weight"), ("Hybrid", "normalise"), ("LinearFusion", "weights"), ("RRF", "k"),
                  ("Normalise", "method"), ("TfidfRetriever", "num_results"), ("TfidfRetriever", "text"),
                  ("ColBERTRetriever", "num_results"), ("ColBERTRetriever", "k_hat"), ("Explainer", "k_tilde")}


def test_set_parameter_changes_a_transformer_as_its_constructor_would(parts):
    changed = set()
    for name, make, inp, param, value, _ in _cases(*parts):
        default = {"EmbeddingScorer": {"config": pfc.ColBERTConfig(dim=16)}}.get(name, {})
        t = make(**default)
        before = t(inp) if inp is not None else None
        original = t.get_parameter(param)
        expected = make(**{**default, param: value})
        assert t.set_parameter(param, value) is t
        assert t.get_parameter(param) == expected.get_parameter(param), (name, param)
        assert t == expected and hash(t) == hash(expected) and repr(t) == repr(expected), (name, param)
        if inp is not None:
            after = t(inp)
            _same_output(after, expected(inp))
            if (name, param) in CHANGES_OUTPUT:
                with pytest.raises(AssertionError):
                    _same_output(after, before)
                changed.add((name, param))
        t.set_parameter(param, original)
        assert t == make(**default), (name, param)
    assert changed == CHANGES_OUTPUT


def test_set_parameter_refuses_what_the_constructor_refuses(parts):
    for name, make, _, param, _, bad in _cases(*parts):
        if bad is None:
            continue
        t = make()
        with pytest.raises(ValueError) as from_constructor:
            make(**{param: bad})
        with pytest.raises(ValueError) as from_setter:
            t.set_parameter(param, bad)
        assert str(from_setter.value) == str(from_constructor.value), (name, param)
        message = str(from_setter.value)
        assert f"{param}=" in message or repr(bad) in message, (name, param, message)
        assert t == make(), f"{name}: a refused {param} left the transformer changed"


def test_unknown_parameters_are_refused_by_name(parts):
    _colbert, tfidf, _index = parts
    retriever = tfidf.retriever(num_results=3)
    with pytest.raises(ValueError, match=r"no parameter 'wmodel'.*num_results"):
        retriever.set_parameter("wmodel", "BM25")
    with pytest.raises(ValueError, match="no parameter 'wieght'"):
        pfc.Hybrid(retriever, retriever).get_parameter("wieght")


def _transformer_classes():
    """Every class of the package that derives from a PyTerrier transformer (not an indexer), by source."""
    package = Path(pfc.__file__).parent
    found = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b) for b in node.bases}
                if bases & {"pt.Transformer", "SparseSearcher", "_Encoder", "Fusion", "LinearFusion"}:
                    module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
                    found.append((module, node.name))
    return found


def test_every_transformer_takes_its_parameters_from_its_constructor():
    import importlib

    classes = _transformer_classes()
    assert len(classes) >= 15  # the scan sees the package's transformers
    for module, name in classes:
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, Parameters), f"{module}.{name} does not take set_parameter through its constructor"
        if name != "Fusion":  # the abstract base of the fusions
            assert cls._constructor_args is not Parameters._constructor_args, f"{module}.{name}"


def test_grid_search_over_the_hybrid_weight_agrees_with_tune_fusion():
    """Hand-made runs where each system is narrowly wrong on one query the other gets clearly right, so the best
    weight is neither end of the grid (where the bug of a weight that changed only the repr would land)."""
    topics = pd.DataFrame({"qid": ["a", "b", "c"], "query": ["x", "y", "z"]})
    lexical_rows = [("a", "a1", 10.0), ("a", "a2", 1.0), ("a", "a3", 0.0),
                    ("b", "b1", 5.0), ("b", "b2", 4.0), ("b", "b3", 0.0),
                    ("c", "c2", 5.0), ("c", "c1", 4.9), ("c", "c3", 0.0)]
    neural_rows = [("a", "a2", 0.9), ("a", "a1", 0.85), ("a", "a3", 0.0),
                   ("b", "b1", 0.7), ("b", "b2", 0.6), ("b", "b3", 0.1),
                   ("c", "c1", 0.9), ("c", "c2", 0.1), ("c", "c3", 0.05)]
    qrels = pd.DataFrame({"qid": ["a", "b", "c"], "docno": ["a1", "b1", "c1"], "label": [1, 1, 1]})

    def run(rows):
        return pt.Transformer.from_df(pt.model.add_ranks(pd.DataFrame(rows, columns=["qid", "docno", "score"])))

    lexical, neural = run(lexical_rows), run(neural_rows)
    grid = [round(0.1 * i, 1) for i in range(11)]
    tuned = tune_fusion([lexical, neural], topics, qrels, "nDCG@10", grid,
                        fusion=lambda w: pfc.Hybrid(lexical, neural, weight=w))
    hybrid = pfc.Hybrid(lexical, neural, weight=0.0)
    value, setting = pt.GridSearch(hybrid, {hybrid: {"weight": grid}}, topics, qrels, "ndcg_cut_10",
                                   return_type="best_setting")
    curve = tuned.curve["nDCG@10"].to_numpy()
    assert curve.max() > curve[0] and curve.max() > curve[-1]  # the best weight is inside the grid
    assert setting[0][2] == tuned.best and value == pytest.approx(tuned.value)
    assert hybrid.weight == 0.0  # "best_setting" restores the starting value
    best = pt.GridSearch(hybrid, {hybrid: {"weight": grid}}, topics, qrels, "ndcg_cut_10")
    assert best.weight == tuned.best and best == tuned.transformer()


def test_rank_cutoff_keeps_pyterriers_meaning_and_refuses_what_is_not_a_cutoff(parts):
    # `t % k` is PyTerrier's rank cutoff: each query's results of rank below k (brute force over t's own output)
    seen = set()
    for name, make, inp, *_ in _cases(*parts):
        if inp is None or name in seen or name in ("Normalise", "QueryEncoder", "Explainer"):
            continue  # (not ranked results)
        seen.add(name)
        t = make()
        full = t(inp)
        if "rank" not in full.columns:
            continue
        expected = full[full["rank"] < 2].reset_index(drop=True)
        _same_output((t % 2)(inp).reset_index(drop=True), expected)
        for bad in (0, True, 1.5):
            with pytest.raises(ValueError, match="rank cutoff"):
                t % bad
    assert {"Hybrid", "TfidfRetriever", "ColBERTRetriever", "TextScorer"} <= seen
