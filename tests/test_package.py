"""Package wiring: cheap import, lazy exports, PyTerrier entry points."""
import subprocess
import sys

import pyterrier as pt

import pyterrier_fandom_colbert as pfc


def test_lazy_exports_resolve_to_their_classes():
    from pyterrier_fandom_colbert.explain.transformer import Explainer
    from pyterrier_fandom_colbert.index.ann import FaissSpec
    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
    from pyterrier_fandom_colbert.lexical.tfidf import TfidfIndex
    from pyterrier_fandom_colbert.model.colbert import ColBERT

    assert (pfc.ColBERT, pfc.Explainer, pfc.ColBERTIndex, pfc.TfidfIndex, pfc.FaissSpec) == (
        ColBERT, Explainer, ColBERTIndex, TfidfIndex, FaissSpec)


def test_pyterrier_modules_entry_point_exposes_the_package():
    assert pt.fandom_colbert is pfc


def test_import_does_not_load_heavy_libraries():
    code = ("import sys, pyterrier_fandom_colbert; "
            "print(sorted(m for m in ('torch', 'transformers', 'faiss', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_explainer_is_built_over_a_colbert(tiny_bert_dir):
    colbert = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(dim=16))
    explainer = pfc.Explainer(colbert, k_tilde=3)
    assert explainer.options.k_tilde == 3 and explainer.colbert is colbert
