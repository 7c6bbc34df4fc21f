"""Checkpoint formats: colbert-ai and PyLate folders written here the way those libraries write them, read
against a brute-force encoder of the libraries' rules, exported and read back with identical scores; the
settings mapping (fixtures of the libraries' metadata) and its errors for what cannot be represented."""
import json
import string
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.model import formats
from pyterrier_fandom_colbert.model.config import CONFIG_FILE, default_backbone
from pyterrier_fandom_colbert.model.formats import ST_CONFIG

HIDDEN, DIM, QLEN, DLEN = 32, 16, 16, 24
QUERIES = ["who forged the blade?", "when was the castle of Vel Amara built"]
PASSAGES = [
    "The castle of Vel Amara was built in the third age, by the river folk!",
    "Orrin the smith forged the silver blade (from a fallen star).",
    "Dragons: fire, ash; and smoke... over the northern mountains.",
]

# artifact.metadata as colbert-ai's BaseColBERT.save writes it: every setting of its ColBERTConfig, plus "meta"
COLBERT_AI_METADATA = {
    "query_token_id": "[unused0]", "doc_token_id": "[unused1]", "query_token": "[Q]", "doc_token": "[D]",
    "ncells": None, "centroid_score_threshold": None, "ndocs": None, "load_index_with_mmap": False,
    "index_path": None, "index_bsize": 64, "nbits": 2, "kmeans_niters": 20, "resume": False, "pool_factor": 1,
    "clustering_mode": "hierarchical", "protected_tokens": 0, "similarity": "cosine", "bsize": 32,
    "accumsteps": 1, "lr": 1e-05, "maxsteps": 400000, "save_every": None, "warmup": 20000, "warmup_bert": None,
    "relu": False, "nway": 64, "use_ib_negatives": True, "reranker": False, "distillation_alpha": 1.0,
    "ignore_scores": False, "model_name": None, "query_maxlen": QLEN, "attend_to_mask_tokens": False,
    "interaction": "colbert", "dim": DIM, "doc_maxlen": DLEN, "mask_punctuation": True, "checkpoint": None,
    "triples": "/data/triples.jsonl", "collection": "/data/collection.tsv", "queries": "/data/queries.tsv",
    "index_name": None, "overwrite": False, "root": "/experiments", "experiment": "default", "index_root": None,
    "name": "2024-01/01/00.00.00", "rank": 0, "nranks": 1, "amp": True, "gpus": 1, "avoid_fork_if_possible": False,
    "meta": {"hostname": "trainer", "current_datetime": "Jan 01, 2024 ; 12:00AM UTC (+0000)",
             "cmd": "train.py", "version": "colbert-v0.4"},
}
# config_sentence_transformers.json as PyLate's ColBERT.save writes it
PYLATE_SETTINGS = {
    "__version__": {"sentence_transformers": "5.3.0", "transformers": "4.57.6", "pytorch": "2.13.0+cpu"},
    "prompts": {"query": "", "document": ""}, "default_prompt_name": None, "similarity_fn_name": "MaxSim",
    "query_prefix": "[Q] ", "document_prefix": "[D] ", "query_length": QLEN, "document_length": DLEN,
    "attend_to_expansion_tokens": False, "skiplist_words": list(string.punctuation), "do_query_expansion": True,
    "model_type": "ColBERT",
}
PYLATE_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"},
]
DENSE_CONFIG = {"in_features": HIDDEN, "out_features": DIM, "bias": False,
                "activation_function": "torch.nn.modules.linear.Identity", "use_residual": False}


# -- folders written the way the libraries write them ---------------------------------------------------------------
def _projection(seed):
    return torch.randn(DIM, HIDDEN, generator=torch.Generator().manual_seed(seed))


def write_colbert_ai(folder: Path, bert_dir, metadata=COLBERT_AI_METADATA, seed=1) -> Path:
    """An HF_ColBERT folder: ``bert.*`` weights (pooler included) with ``linear.weight``, tokenizer, metadata."""
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, BertModel

    folder.mkdir(parents=True)
    bert = BertModel.from_pretrained(bert_dir)
    state = {f"bert.{k}": v.contiguous() for k, v in bert.state_dict().items()}
    state["linear.weight"] = _projection(seed)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    bert.config.architectures = ["HF_ColBERT"]
    bert.config.save_pretrained(folder)
    AutoTokenizer.from_pretrained(bert_dir).save_pretrained(folder)
    (folder / "artifact.metadata").write_text(json.dumps(metadata, indent=4) + "\n")
    return folder


def write_pylate(folder: Path, bert_dir, settings=PYLATE_SETTINGS, dense=DENSE_CONFIG, modules=PYLATE_MODULES,
                 seed=2) -> Path:
    """A PyLate folder: the Transformer at the root (prefix tokens added, embeddings resized), 1_Dense, configs."""
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, BertModel

    folder.mkdir(parents=True)
    tok = AutoTokenizer.from_pretrained(bert_dir)
    bert = BertModel.from_pretrained(bert_dir)
    tok.add_tokens([p for p in (settings.get("query_prefix"), settings.get("document_prefix")) if p])
    bert.resize_token_embeddings(len(tok))
    bert.save_pretrained(folder)
    tok.save_pretrained(folder)
    (folder / "modules.json").write_text(json.dumps(modules, indent=2))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": DLEN - 1, "do_lower_case": False}))
    (folder / "config_sentence_transformers.json").write_text(json.dumps(settings, indent=2))
    (folder / "1_Dense").mkdir()
    (folder / "1_Dense" / "config.json").write_text(json.dumps(dense, indent=2))
    save_file({"linear.weight": _projection(seed)}, str(folder / "1_Dense" / "model.safetensors"))
    return folder


def variant(folder: Path, target: Path, **files) -> Path:
    """A copy of ``folder`` with some JSON files replaced (``files``: relative path with "/" as "__" -> value)."""
    import shutil

    shutil.copytree(folder, target)
    for name, value in files.items():
        (target / name.replace("__", "/")).write_text(json.dumps(value, indent=2))
    return target


# -- a brute-force encoder of the libraries' rules ------------------------------------------------------------------
def reference_scores(folder, markers, skipped_words, attend_masks, expansion=True, unk_for_missing=False,
                     backbone=None):
    """MaxSim of QUERIES × PASSAGES computed directly from the weights by the libraries' rules: ``[CLS] marker
    text [SEP]``, queries padded with [MASK] to the query length (attended or not; with ``expansion`` off, padding
    neither attends nor scores), skipped document tokens never scoring, normalised vectors, summed maxima.
    ``backbone``: where the encoder weights were taken from (default: ``folder``)."""
    from safetensors import safe_open
    from transformers import AutoModel, AutoTokenizer

    folder = Path(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    bert = AutoModel.from_pretrained(backbone or folder).eval()
    dense = folder / "1_Dense" if (folder / "1_Dense").exists() else folder
    with safe_open(str(dense / "model.safetensors"), "pt") as f:
        weight = f.get_tensor("linear.weight")
    vocab = tok.get_vocab()
    q_id, d_id = (vocab[m] for m in markers)
    skip = {vocab.get(w, tok.unk_token_id) if unk_for_missing else tok.encode(w, add_special_tokens=False)[0]
            for w in skipped_words}

    def encode(ids, attention):
        with torch.no_grad():
            h = bert(input_ids=torch.tensor([ids]), attention_mask=torch.tensor([attention])).last_hidden_state[0]
        return torch.nn.functional.normalize(h @ weight.T, dim=-1)

    scores = np.zeros((len(QUERIES), len(PASSAGES)))
    for i, q in enumerate(QUERIES):
        row = [tok.cls_token_id, q_id, *tok(q, add_special_tokens=False)["input_ids"][:QLEN - 3], tok.sep_token_id]
        pad = QLEN - len(row)
        qv = encode(row + [tok.mask_token_id] * pad, [1] * len(row) + [int(attend_masks and expansion)] * pad)
        qv = qv if expansion else qv[:len(row)]
        for j, p in enumerate(PASSAGES):
            drow = [tok.cls_token_id, d_id, *tok(p, add_special_tokens=False)["input_ids"][:DLEN - 3],
                    tok.sep_token_id]
            dv = encode(drow, [1] * len(drow))[[t not in skip for t in drow]]
            scores[i, j] = (qv @ dv.T).max(1).values.sum().item()
    return scores


def scores_of(colbert) -> np.ndarray:
    frame = pd.DataFrame([{"qid": str(i), "query": q, "docno": str(j), "text": p}
                          for i, q in enumerate(QUERIES) for j, p in enumerate(PASSAGES)])
    out = colbert.text_scorer()(frame)
    return out.pivot(index="qid", columns="docno", values="score").sort_index().to_numpy()


def vectors_of(colbert):
    q, mask = colbert.encode_queries(QUERIES)
    return [q[i][mask[i]].numpy() for i in range(len(QUERIES))], colbert.encode_docs(PASSAGES)


def assert_same_vectors(a, b):
    for x, y in zip(a[0] + a[1], b[0] + b[1]):
        np.testing.assert_array_equal(x, y)


@pytest.fixture(scope="module")
def colbert_ai_dir(tmp_path_factory, tiny_bert_dir):
    return write_colbert_ai(tmp_path_factory.mktemp("fmt") / "colbertv2-like", tiny_bert_dir)


@pytest.fixture(scope="module")
def pylate_dir(tmp_path_factory, tiny_bert_dir):
    return write_pylate(tmp_path_factory.mktemp("fmt") / "pylate-like", tiny_bert_dir)


# -- reading the libraries' folders ---------------------------------------------------------------------------------
def test_colbert_ai_folder_scores_as_colbert_ai_does(colbert_ai_dir, tiny_bert_dir):
    assert formats.detect(colbert_ai_dir) == "colbert-ai"
    colbert = pfc.ColBERT.from_pretrained(colbert_ai_dir)
    cfg = colbert.config
    assert (cfg.query_maxlen, cfg.doc_maxlen, cfg.dim, cfg.reduction) == (QLEN, DLEN, DIM, "sum")
    assert cfg.score_query_masks and not cfg.attend_to_query_masks and cfg.marker_tokens is None
    assert set(cfg.skiplist) == set(formats.colbert_ai_punctuation(colbert.tokenizer.hf))
    expected = reference_scores(colbert_ai_dir, ("[unused0]", "[unused1]"), string.punctuation, attend_masks=False,
                                backbone=tiny_bert_dir)  # the weights before they were written with bert.* names
    np.testing.assert_allclose(scores_of(colbert), expected, rtol=1e-5, atol=1e-5)


def test_pylate_folder_scores_as_pylate_does(pylate_dir):
    assert formats.detect(pylate_dir) == "pylate"
    colbert = pfc.ColBERT.from_pretrained(pylate_dir)
    cfg = colbert.config
    assert cfg.marker_tokens == ("[Q] ", "[D] ") and (cfg.query_maxlen, cfg.doc_maxlen, cfg.dim) == (QLEN, DLEN, DIM)
    assert cfg.score_query_masks and not cfg.attend_to_query_masks and cfg.reduction == "sum"
    assert colbert.tokenizer.tokens([colbert.tokenizer.q_marker_id]) == ["[Q]"]
    expected = reference_scores(pylate_dir, ("[Q] ", "[D] "), string.punctuation, attend_masks=False,
                                unk_for_missing=True)
    np.testing.assert_allclose(scores_of(colbert), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attend", [True, False])
def test_pylate_expansion_settings(tmp_path, pylate_dir, attend):
    settings = dict(PYLATE_SETTINGS, do_query_expansion=False, attend_to_expansion_tokens=attend,
                    skiplist_words=[".", "nonexistentword"])
    folder = variant(pylate_dir, tmp_path / "m", **{"config_sentence_transformers.json": settings})
    colbert = pfc.ColBERT.from_pretrained(folder)
    assert not colbert.config.score_query_masks and not colbert.config.attend_to_query_masks
    assert colbert.config.skiplist == (".", "[UNK]"), "PyLate maps a word outside the vocabulary to [UNK]"
    expected = reference_scores(folder, ("[Q] ", "[D] "), [".", "nonexistentword"], attend_masks=attend,
                                expansion=False, unk_for_missing=True)
    np.testing.assert_allclose(scores_of(colbert), expected, rtol=1e-5, atol=1e-5)


# -- exporting and reading back -------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("source", ["colbert-ai", "pylate"])
def test_export_and_reload_keeps_scores(tmp_path, colbert_ai_dir, pylate_dir, source):
    original = pfc.ColBERT.from_pretrained(colbert_ai_dir if source == "colbert-ai" else pylate_dir)
    vectors, scores = vectors_of(original), scores_of(original)
    for target in formats.FORMATS:
        original.save_pretrained(tmp_path / target, format=target)
        assert formats.detect(tmp_path / target) == target
        again = pfc.ColBERT.from_pretrained(tmp_path / target)
        assert again.config.replace(backbone=None) == original.config.replace(backbone=None)
        assert again.fingerprint() == original.fingerprint()
        assert_same_vectors(vectors, vectors_of(again))
        np.testing.assert_array_equal(scores, scores_of(again))


def test_own_roberta_model_round_trip(tmp_path, tiny_roberta_dir):
    """A model built here over a vocabulary without [unused] tokens: its added [Q]/[D] markers travel along."""
    config = pfc.ColBERTConfig(dim=DIM, query_maxlen=QLEN, doc_maxlen=DLEN, reduction="sum", score_query_masks=True)
    original = pfc.ColBERT.from_pretrained(tiny_roberta_dir, config=config)
    vectors = vectors_of(original)
    with pytest.warns(UserWarning, match="mask_punctuation"):
        original.save_pretrained(tmp_path / "colbert-ai", format="colbert-ai")
    original.save_pretrained(tmp_path / "pylate", format="pylate")
    assert json.loads((tmp_path / "pylate" / "config_sentence_transformers.json").read_text())["query_prefix"] == "[Q]"
    for target in ("colbert-ai", "pylate"):
        again = pfc.ColBERT.from_pretrained(tmp_path / target)
        assert again.config.replace(backbone=None) == original.config.replace(backbone=None)
        assert again.fingerprint() == original.fingerprint()
        assert_same_vectors(vectors, vectors_of(again))


def test_written_layouts_are_what_the_libraries_read(tmp_path, colbert_ai_dir):
    colbert = pfc.ColBERT.from_pretrained(colbert_ai_dir)
    colbert.save_pretrained(tmp_path / "c", format="colbert-ai", dtype="float16")
    colbert.save_pretrained(tmp_path / "p", format="pylate")
    meta = json.loads((tmp_path / "c" / "artifact.metadata").read_text())
    assert {k: meta[k] for k in ("query_token_id", "doc_token_id", "query_maxlen", "doc_maxlen", "dim",
                                 "mask_punctuation", "attend_to_mask_tokens", "similarity", "interaction")} == \
        {k: COLBERT_AI_METADATA[k] for k in ("query_token_id", "doc_token_id", "query_maxlen", "doc_maxlen", "dim",
                                             "mask_punctuation", "attend_to_mask_tokens", "similarity", "interaction")}
    from safetensors import safe_open

    with safe_open(str(tmp_path / "c" / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert f.get_tensor("linear.weight").dtype == torch.float16
    assert "linear.weight" in keys and all(k.startswith("bert.") for k in keys - {"linear.weight"})
    assert json.loads((tmp_path / "c" / "config.json").read_text())["architectures"] == ["HF_ColBERT"]
    assert json.loads((tmp_path / "p" / "modules.json").read_text()) == PYLATE_MODULES
    # PyLate builds Dense(**config): any other key would fail there, and before 1.3.4 use_residual does
    dense = {k: v for k, v in DENSE_CONFIG.items() if k != "use_residual"}
    assert json.loads((tmp_path / "p" / "1_Dense" / "config.json").read_text()) == dense
    assert "PyLate 1.2 or later" in (tmp_path / "p" / "README.md").read_text()
    settings = json.loads((tmp_path / "p" / "config_sentence_transformers.json").read_text())
    assert settings["query_prefix"] == "[unused0]" and settings["do_query_expansion"] is True
    assert settings["attend_to_expansion_tokens"] is False
    assert sorted(settings["skiplist_words"]) == sorted(colbert.config.skiplist)


def test_empty_skip_set_is_written_as_an_inert_token(tmp_path, tiny_bert_dir):
    """PyLate before 1.5 reads an empty skiplist_words as the punctuation list: a WordPiece model that skips nothing
    is written with one token that no text tokenises to, which every release reads as skipping nothing."""
    from pyterrier_fandom_colbert.model.formats.pylate import inert_token

    colbert = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(
        dim=DIM, query_maxlen=QLEN, doc_maxlen=DLEN, reduction="sum", score_query_masks=True))
    assert colbert.tokenizer.skipped_ids().size == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every checked release reads it: nothing to warn about
        colbert.save_pretrained(tmp_path / "p", format="pylate")
    words = json.loads((tmp_path / "p" / "config_sentence_transformers.json").read_text())["skiplist_words"]
    assert words == ["[unused2]"], "the lowest-id entry that is neither a marker nor a special token"
    hf = colbert.tokenizer.hf
    inert = inert_token(hf, ("[unused0]", "[unused1]"))
    # brute force: no vocabulary entry's own text, nor the inert token inside words, tokenises to it
    texts = [*hf.get_vocab(), f"x{inert}y", f"{inert}{inert}", f"## {inert} ##"]
    produced = {i for ids in hf(texts, add_special_tokens=False)["input_ids"] for i in ids}
    assert hf.convert_tokens_to_ids(inert) not in produced
    again = pfc.ColBERT.from_pretrained(tmp_path / "p")
    assert again.config.skiplist == () and not again.config.skip_punctuation
    assert again.fingerprint() == colbert.fingerprint()


def test_exports_state_the_oldest_pylate_that_reads_them(tmp_path, tiny_bert_dir, tiny_roberta_dir):
    base = pfc.ColBERTConfig(dim=DIM, query_maxlen=QLEN, doc_maxlen=DLEN, reduction="sum", score_query_masks=False,
                             attend_to_query_masks=False, skip_punctuation=True)
    bert = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=base)
    with pytest.warns(UserWarning, match=r"needs PyLate 1\.3 or later: PyLate before 1\.3 has no do_query_expansion"):
        bert.save_pretrained(tmp_path / "no-expansion", format="pylate")
    assert "PyLate 1.3 or later" in (tmp_path / "no-expansion" / "README.md").read_text()
    # a byte-level BPE vocabulary has no token that provably never occurs: an empty skip set needs PyLate 1.5
    roberta = pfc.ColBERT.from_pretrained(tiny_roberta_dir, config=base.replace(score_query_masks=True,
                                                                                skip_punctuation=False))
    with pytest.warns(UserWarning, match=r"needs PyLate 1\.5 or later: .*empty skiplist_words"):
        roberta.save_pretrained(tmp_path / "bpe", format="pylate")
    assert json.loads((tmp_path / "bpe" / ST_CONFIG).read_text())["skiplist_words"] == []
    assert "PyLate 1.5 or later" in (tmp_path / "bpe" / "README.md").read_text()


def _pads_with_mask(folder: Path) -> Path:
    """``folder`` with its tokenizer saved as PyLate saves it: [MASK] as the padding token."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    tok.pad_token = tok.mask_token
    tok.save_pretrained(folder)
    return folder


def test_pylate_model_exported_to_colbert_ai_pads_with_the_backbones_token(tmp_path, pylate_dir):
    """colbert-ai zeroes the query vectors of its padding token, and pads queries with [MASK]."""
    from transformers import AutoTokenizer

    folder = _pads_with_mask(variant(pylate_dir, tmp_path / "as-saved-by-pylate"))
    colbert = pfc.ColBERT.from_pretrained(folder)
    assert colbert.tokenizer.hf.pad_token == "[MASK]" and colbert.config.score_query_masks
    colbert.save_pretrained(tmp_path / "c", format="colbert-ai")
    written = AutoTokenizer.from_pretrained(tmp_path / "c")
    assert (written.pad_token, written.pad_token_id) == ("[PAD]", 0) and written.mask_token == "[MASK]"
    assert colbert.tokenizer.hf.pad_token == "[MASK]", "the model's own tokenizer is left as it was"
    again = pfc.ColBERT.from_pretrained(tmp_path / "c")
    assert again.config.replace(backbone=None) == colbert.config.replace(backbone=None)
    np.testing.assert_array_equal(scores_of(again), scores_of(colbert))


def test_colbert_ai_folder_padding_with_mask_scores_no_mask_vectors(tmp_path, colbert_ai_dir, tiny_bert_dir):
    """Such a folder (written by an earlier export of a PyLate model) is read as colbert-ai scores it."""
    folder = _pads_with_mask(variant(colbert_ai_dir, tmp_path / "m"))
    colbert = pfc.ColBERT.from_pretrained(folder)
    assert not colbert.config.score_query_masks and not colbert.config.attend_to_query_masks
    expected = reference_scores(folder, ("[unused0]", "[unused1]"), string.punctuation, attend_masks=False,
                                expansion=False, backbone=tiny_bert_dir)
    np.testing.assert_allclose(scores_of(colbert), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fmt, weights", [("colbert-ai", "model.safetensors"), ("pylate", "model.safetensors"),
                                          ("pylate", "1_Dense/model.safetensors")])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_at_load(tmp_path, colbert_ai_dir, pylate_dir, fmt, weights, value):
    from safetensors.torch import load_file, save_file

    from pyterrier_fandom_colbert.storage import DamagedFileError

    folder = variant(colbert_ai_dir if fmt == "colbert-ai" else pylate_dir, tmp_path / "m")
    state = load_file(str(folder / weights))
    name = next(k for k in state if k == "linear.weight" or k.endswith("word_embeddings.weight"))
    state[name][0, 0] = value
    save_file(state, str(folder / weights), metadata={"format": "pt"})
    with pytest.raises(DamagedFileError, match=r"holds 1 NaN/inf value\(s\)") as err:
        pfc.ColBERT.from_pretrained(folder)
    assert err.value.path == folder / weights and str(folder / weights) in str(err.value)


def test_lengths_beyond_the_backbones_positions_are_refused_at_load(tmp_path, colbert_ai_dir, pylate_dir,
                                                                    tiny_bert_dir):
    """The tiny BERT has 512 positions: a longer doc_maxlen would index past them while encoding."""
    folder = variant(colbert_ai_dir, tmp_path / "c", **{"artifact.metadata": dict(COLBERT_AI_METADATA,
                                                                                  doc_maxlen=600)})
    with pytest.raises(ValueError, match=r"doc_maxlen=600 exceed the BertModel backbone's 512 positions"):
        pfc.ColBERT.from_pretrained(folder)
    folder = variant(pylate_dir, tmp_path / "p", **{ST_CONFIG: dict(PYLATE_SETTINGS, query_length=513)})
    with pytest.raises(ValueError, match=r"query_maxlen=513 exceed"):
        pfc.ColBERT.from_pretrained(folder)
    with pytest.raises(ValueError, match=r"doc_maxlen=513 exceed .* expected at most 512 tokens"):
        pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(doc_maxlen=513))
    ok = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(dim=DIM, doc_maxlen=512))
    ok.model.config = ok.config.replace(doc_maxlen=1024)  # a checkpoint saved with a config it cannot encode
    ok.save_pretrained(tmp_path / "own")
    with pytest.raises(ValueError, match=rf"{CONFIG_FILE}: doc_maxlen=1024 exceed"):
        pfc.ColBERT.from_pretrained(tmp_path / "own")


def test_roberta_positions_start_after_the_padding_index(tiny_roberta_dir):
    from transformers import AutoModel

    from pyterrier_fandom_colbert.model.network import max_positions

    net = AutoModel.from_pretrained(tiny_roberta_dir)
    assert max_positions(net) == net.config.max_position_embeddings - net.config.pad_token_id - 1
    long = "castle " * 2000
    longest = pfc.ColBERTConfig(dim=DIM, doc_maxlen=max_positions(net))
    fits = pfc.ColBERT.from_pretrained(tiny_roberta_dir, config=longest)
    assert len(fits.encode_docs([long])[0]) > 0, "the longest allowed document encodes"
    with pytest.raises(ValueError, match="exceed the RobertaModel backbone"):
        pfc.ColBERT.from_pretrained(tiny_roberta_dir, config=pfc.ColBERTConfig(doc_maxlen=max_positions(net) + 1))


# -- the settings mapping -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bert_tok(tiny_bert_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_bert_dir)


def test_colbert_ai_metadata_mapping(bert_tok):
    cfg = formats.config_from_colbert_ai(dict(COLBERT_AI_METADATA, attend_to_mask_tokens=True, similarity="l2"),
                                         bert_tok)
    assert cfg.attend_to_query_masks and cfg.similarity == "l2" and cfg.normalise
    nested = formats.config_from_colbert_ai({"config": COLBERT_AI_METADATA}, bert_tok)
    assert nested == formats.config_from_colbert_ai(COLBERT_AI_METADATA, bert_tok)
    defaults = formats.config_from_colbert_ai({}, bert_tok)  # colbert-ai's own defaults, not this package's
    assert (defaults.query_maxlen, defaults.doc_maxlen, defaults.dim) == (32, 220, 128)
    assert defaults.skiplist and not defaults.attend_to_query_masks
    none = formats.config_from_colbert_ai(dict(COLBERT_AI_METADATA, mask_punctuation=False), bert_tok)
    assert none.skiplist == () and not none.skip_punctuation


def test_pylate_settings_mapping(bert_tok):
    with pytest.raises(ValueError, match=r"marker tokens \['\[Q\] ', '\[D\] '\] are not in the tokenizer"):
        formats.config_from_pylate(PYLATE_SETTINGS, bert_tok)
    cfg = formats.config_from_pylate(dict(PYLATE_SETTINGS, query_prefix="[unused0]", document_prefix="[unused1]",
                                          skiplist_words=[]), bert_tok)
    assert cfg.marker_tokens is None and cfg.skiplist == () and not cfg.skip_punctuation
    defaults = formats.config_from_pylate({"query_prefix": "[unused0]", "document_prefix": "[unused1]"}, bert_tok)
    assert (defaults.query_maxlen, defaults.doc_maxlen) == (32, 180) and len(defaults.skiplist) == 32


@pytest.mark.parametrize("change, message", [
    ({"interaction": "flipr"}, "interaction='flipr'"),
    ({"similarity": "dot"}, "similarity='dot'"),
    ({"query_token_id": "[notatoken]"}, r"marker tokens \['\[notatoken\]'\]"),
    ({"query_maxlen": 2}, "query_maxlen=2"),
])
def test_colbert_ai_settings_it_cannot_represent(bert_tok, change, message):
    with pytest.raises(ValueError, match=message):
        formats.config_from_colbert_ai(dict(COLBERT_AI_METADATA, **change), bert_tok)


@pytest.mark.parametrize("change, message", [
    ({"similarity_fn_name": "cosine"}, "similarity_fn_name='cosine'"),
    ({"query_prefix": ""}, "query_prefix=''"),
    ({"default_prompt_name": "query", "prompts": {"query": "query: "}}, "prepends 'query: '"),
])
def test_pylate_settings_it_cannot_represent(bert_tok, change, message):
    with pytest.raises(ValueError, match=message):
        formats.config_from_pylate(dict(PYLATE_SETTINGS, **change), bert_tok)


@pytest.mark.parametrize("what, message", [
    ({"dense": dict(DENSE_CONFIG, bias=True)}, "bias=true"),
    ({"dense": dict(DENSE_CONFIG, activation_function="torch.nn.modules.activation.Tanh")}, "Tanh"),
    ({"dense": dict(DENSE_CONFIG, use_residual=True)}, "use_residual"),
    ({"modules": PYLATE_MODULES[:1]}, "0 Dense modules"),
    ({"modules": [*PYLATE_MODULES, dict(PYLATE_MODULES[1], idx=2, path="2_Dense")]}, "2 Dense modules"),
])
def test_pylate_modules_it_cannot_represent(tmp_path, pylate_dir, what, message):
    names = {"dense": "1_Dense__config.json", "modules": "modules.json"}
    folder = variant(pylate_dir, tmp_path / "m", **{names[k]: v for k, v in what.items()})
    with pytest.raises(ValueError, match=message):
        pfc.ColBERT.from_pretrained(folder)


def test_lowercasing_transformer_module_is_refused(tmp_path, pylate_dir):
    folder = variant(pylate_dir, tmp_path / "m", **{"sentence_bert_config.json": {"max_seq_length": 23,
                                                                                   "do_lower_case": True}})
    with pytest.raises(ValueError, match="do_lower_case"):
        pfc.ColBERT.from_pretrained(folder)


def test_backbone_weights_missing_from_the_file_are_an_error(tmp_path, colbert_ai_dir):
    from safetensors.torch import load_file, save_file

    folder = variant(colbert_ai_dir, tmp_path / "m")
    state = load_file(str(folder / "model.safetensors"))
    save_file({k.replace("bert.encoder", "encoder_v2"): v for k, v in state.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"lack \d+ of the BertModel backbone's tensors"):
        pfc.ColBERT.from_pretrained(folder)


def test_metadata_dim_must_match_the_weights(tmp_path, colbert_ai_dir):
    folder = variant(colbert_ai_dir, tmp_path / "m", **{"artifact.metadata": dict(COLBERT_AI_METADATA, dim=24)})
    with pytest.raises(ValueError, match=r"dim=24 but linear\.weight has 16 rows"):
        pfc.ColBERT.from_pretrained(folder)


@pytest.mark.parametrize("target", ["colbert-ai", "pylate"])
def test_export_refuses_settings_the_format_cannot_represent(tmp_path, tiny_bert_dir, target):
    as_trained = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(
        dim=DIM, query_maxlen=QLEN, doc_maxlen=DLEN, reduction="mean", score_query_masks=False, normalise=False))
    with pytest.raises(ValueError) as err:
        as_trained.save_pretrained(tmp_path / "out", format=target)
    for setting in ("reduction='mean'", "score_query_masks=False", "normalise=False", "with_settings"):
        assert setting in str(err.value)
    assert not (tmp_path / "out").exists()
    representable = formats.with_settings(as_trained, reduction="sum", score_query_masks=True, normalise=True)
    if target == "pylate":
        with pytest.raises(ValueError, match="similarity='l2'"):
            formats.with_settings(representable, similarity="l2").save_pretrained(tmp_path / "out", format=target)
    else:  # colbert-ai knows cosine and l2 only: a dot-product model is not written as either
        with pytest.raises(ValueError, match=r"similarity='dot' \(colbert-ai knows 'cosine' and 'l2'"):
            formats.with_settings(representable, similarity="dot").save_pretrained(tmp_path / "out", format=target)
        assert not (tmp_path / "out").exists()
        # colbert-ai skips all of its punctuation tokens or none
        with pytest.raises(ValueError, match=r"skiplist=\['\.'\] skip 1 token\(s\), but colbert-ai's mask_punctuation"):
            formats.with_settings(representable, skiplist=["."]).save_pretrained(tmp_path / "out", format=target)


def test_with_settings_keeps_weights_and_original(tiny_bert_dir):
    base = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(dim=DIM, query_maxlen=QLEN,
                                                                                doc_maxlen=DLEN))
    changed = formats.with_settings(base, reduction="sum", skiplist=["."])
    assert base.config.reduction == "mean" and changed.config.reduction == "sum"
    assert torch.equal(base.model.projection.weight, changed.model.projection.weight)
    docs = changed.encode_docs(["a castle. a keep."])[0]
    assert len(docs) == len(base.encode_docs(["a castle. a keep."])[0]) - 2
    with pytest.raises(ValueError, match="cannot change dim"):
        formats.with_settings(base, dim=DIM * 2)


# -- detection, dispatch and the package's own format ---------------------------------------------------------------
def test_detection(tmp_path, tiny_bert_dir, colbert_ai_dir, pylate_dir):
    assert formats.detect(default_backbone()) is None, "a plain sentence-transformers model is a backbone"
    assert formats.detect(tiny_bert_dir) is None
    assert formats.detect(tmp_path / "missing") is None
    no_metadata = tmp_path / "bare"
    no_metadata.mkdir()
    for name in ("config.json", "model.safetensors"):
        (no_metadata / name).write_bytes((colbert_ai_dir / name).read_bytes())
    assert formats.detect(no_metadata) == "colbert-ai", "an HF_ColBERT config without artifact.metadata"
    with pytest.raises(ValueError, match="its own settings"):
        pfc.ColBERT.from_pretrained(pylate_dir, config=pfc.ColBERTConfig())
    with pytest.raises(ValueError, match="format='onnx'"):
        pfc.ColBERT.from_pretrained(colbert_ai_dir).save_pretrained(tmp_path / "x", format="onnx")
    assert formats.resolve("someone/some-colbert") == "someone/some-colbert", "offline: left to the loader"
    (tmp_path / "colbert-60000.dnn").write_bytes(b"")
    with pytest.raises(ValueError, match="deprecated format"):
        pfc.ColBERT.from_pretrained(tmp_path / "colbert-60000.dnn")


def test_export_never_replaces_a_folder_of_other_files(tmp_path, colbert_ai_dir):
    colbert = pfc.ColBERT.from_pretrained(colbert_ai_dir)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not a ColBERT checkpoint folder"):
        colbert.save_pretrained(tmp_path / "mine", format="pylate")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    colbert.save_pretrained(tmp_path / "ck", format="pylate")
    colbert.save_pretrained(tmp_path / "ck", format="colbert-ai")  # a checkpoint folder is replaced
    assert formats.detect(tmp_path / "ck") == "colbert-ai" and not (tmp_path / "ck" / "modules.json").exists()


def test_shipped_checkpoint_settings_fingerprint_as_before():
    """The later fields at their defaults leave the fingerprinted settings as they were before they existed."""
    from pyterrier_fandom_colbert.model.colbert import DEFAULT_CHECKPOINT

    saved = json.loads((DEFAULT_CHECKPOINT / CONFIG_FILE).read_text())
    config = pfc.ColBERTConfig.from_dict(saved)
    assert config.fingerprint_settings() == {k: v for k, v in saved.items() if k != "backbone"}
    loaded = pfc.ColBERTConfig.from_dict(json.loads(json.dumps(config.replace(skiplist=["."],
                                                                              marker_tokens=["[a]", "[b]"]).to_dict())))
    assert hash(loaded) and loaded.skiplist == (".",) and loaded.marker_tokens == ("[a]", "[b]")


def test_tokenizer_settings(tiny_bert_dir):
    c = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(
        dim=DIM, query_maxlen=QLEN, doc_maxlen=DLEN, attend_to_query_masks=False, score_query_masks=True,
        marker_tokens=["[unused5]", "[unused6]"], skiplist=["the"]))
    batch = c.tokenizer.queries(["the castle"])
    assert batch.attention_mask[0].tolist() == [1] * 5 + [0] * (QLEN - 5) and batch.score_mask.all()
    assert c.tokenizer.hf.convert_ids_to_tokens(batch.input_ids[0][:2].tolist()) == ["[CLS]", "[unused5]"]
    docs = c.tokenizer.documents(["the castle of the king"])
    assert [t for t, s in zip(c.tokenizer.tokens(docs.input_ids[0]), docs.score_mask[0]) if not s] == ["the", "the"]
    with pytest.raises(ValueError, match=r"skiplist tokens \['notatoken'\]"):
        pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(skiplist=["notatoken"]))
