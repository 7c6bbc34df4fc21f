"""ColBERT encoders and re-rankers: batch independence, checkpoints, bad input, a real re-ranking check."""
import json
import math

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.model.config import default_backbone

TINY = dict(dim=16, query_maxlen=16, doc_maxlen=48, score_query_masks=True)  # N_q vectors per query
PASSAGES = [
    "The castle of Vel Amara was built in the third age by the river folk.",
    "Emberfall was released in March 2011 for consoles and later for computers.",
    "Dragons breathe fire over the northern mountains every winter.",
    "Orrin the smith forged the silver blade from a fallen star.",
    "Zoë ruled Ørnvik for forty years — a peaceful reign!",
]


@pytest.fixture(scope="module", params=["bert", "roberta"])
def tiny(request, tiny_bert_dir, tiny_roberta_dir):
    folder = tiny_bert_dir if request.param == "bert" else tiny_roberta_dir
    return pfc.ColBERT.from_pretrained(folder, config=pfc.ColBERTConfig(**TINY), batch_size=4)


def _frame(queries, passages):
    rows = [{"qid": str(i), "query": q, "docno": f"d{j}", "text": p}
            for i, q in enumerate(queries) for j, p in enumerate(passages)]
    return pd.DataFrame(rows)


def test_score_independent_of_batch_composition(tiny):
    rng = np.random.default_rng(0)
    words = " ".join(PASSAGES).split()
    fillers = [" ".join(rng.choice(words, size=rng.integers(1, 40))) for _ in range(49)]
    target = pd.DataFrame([{"qid": "q", "query": "who forged the blade", "docno": "t", "text": PASSAGES[3]}])
    alone = tiny.text_scorer()(target)["score"].iloc[0]
    crowd = _frame(["who forged the blade"], [*fillers, PASSAGES[3]])
    crowd.loc[crowd.index[-1], "docno"] = "t"
    together = tiny.text_scorer()(crowd).set_index("docno")["score"]["t"]
    assert abs(alone - together) < 1e-5


def test_text_scorer_equals_encoders_then_embedding_scorer(tiny):
    frame = _frame(["when was it released", "who forged the blade"], PASSAGES)
    direct = tiny.text_scorer()(frame).set_index(["qid", "docno"])["score"]
    pipe = tiny.query_encoder() >> tiny.doc_encoder() >> tiny.scorer()
    staged = pipe(frame).set_index(["qid", "docno"])["score"]
    np.testing.assert_allclose(staged.loc[direct.index].to_numpy(), direct.to_numpy(), atol=1e-5)


def test_ranks_follow_scores_and_input_columns_kept(tiny):
    frame = _frame(["castle builders"], PASSAGES).assign(extra=list(range(len(PASSAGES))))
    out = tiny.text_scorer()(frame)
    assert list(out["rank"]) == list(range(len(PASSAGES)))
    assert out["score"].is_monotonic_decreasing
    assert sorted(out["extra"]) == list(range(len(PASSAGES)))
    assert list(out.columns) == pt.inspect.transformer_outputs(tiny.text_scorer(), list(frame.columns))


def test_encoder_shapes_and_tokens(tiny):
    q = tiny.query_encoder()(pd.DataFrame({"qid": ["1"], "query": ["castle"]}))
    assert q["query_embs"][0].shape == (16, 16)
    d = tiny.doc_encoder()(pd.DataFrame({"docno": ["a", "b"], "text": ["castle", "word " * 500]}))
    assert d["doc_embs"][0].shape == (len(d["doc_toks"][0]), 16)
    assert d["doc_embs"][1].shape[0] == 48, "long texts are truncated to doc_maxlen, not an error"
    assert d["doc_toks"][0][1] == "[D]"
    norms = np.linalg.norm(d["doc_embs"][0], axis=1)
    np.testing.assert_allclose(norms, 1.0, rtol=1e-5)


def test_config_defaults_match_the_shipped_checkpoint():
    from pyterrier_fandom_colbert.model.colbert import DEFAULT_CHECKPOINT

    shipped = pfc.ColBERTConfig.load(DEFAULT_CHECKPOINT)
    fresh = pfc.ColBERTConfig()
    differ = {k for k, v in fresh.to_dict().items() if v != shipped.to_dict()[k]}
    assert differ == {"backbone"}  # a fresh model and the shipped one encode alike (one vector per real token)


def test_unscored_masks_are_left_out_of_query_embs(tiny_bert_dir):
    c = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(**{**TINY, "score_query_masks": False}))
    q = c.query_encoder()(pd.DataFrame({"qid": ["1"], "query": ["the castle"]}))
    assert q["query_toks"][0] == ["[CLS]", "[Q]", "the", "castle", "[SEP]"]
    assert q["query_embs"][0].shape == (5, 16)


@pytest.mark.parametrize("make, cols", [
    (lambda c: c.query_encoder(), ["qid", "query"]),
    (lambda c: c.doc_encoder(), ["docno", "text"]),
    (lambda c: c.text_scorer(), ["qid", "query", "docno", "text"]),
    (lambda c: c.scorer(), ["qid", "query_embs", "doc_embs"]),
])
def test_empty_frames_give_declared_columns(tiny, make, cols):
    t = make(tiny)
    out = t(pd.DataFrame(columns=[*cols, "kept"]))
    assert len(out) == 0
    assert list(out.columns) == pt.inspect.transformer_outputs(t, [*cols, "kept"])
    assert set(out.columns) > {*cols, "kept"}


def test_bad_input_errors_name_the_problem(tiny):
    with pytest.raises(ValueError, match="'q7'"):
        tiny.query_encoder(strict=True)(pd.DataFrame({"qid": ["q1", "q7"], "query": ["castle", "   "]}))
    with pytest.warns(UserWarning, match=r"1 unusable query .*\['q7'\]"):
        kept = tiny.query_encoder()(pd.DataFrame({"qid": ["q1", "q7"], "query": ["castle", "   "]}))
    assert kept["qid"].tolist() == ["q1"]
    with pytest.raises(pt.validate.InputValidationError, match=r"text.*get_text"):
        tiny.text_scorer()(pd.DataFrame({"qid": ["1"], "query": ["x"], "docno": ["d"]}))
    with pytest.raises(ValueError, match="'d2'"):
        tiny.doc_encoder()(pd.DataFrame({"docno": ["d1", "d2"], "text": ["fine", math.nan]}))


def test_save_load_round_trip_identical_scores(tiny, tmp_path):
    frame = _frame(["who built the castle"], PASSAGES)
    before = tiny.text_scorer()(frame)["score"].to_numpy()
    tiny.save_pretrained(tmp_path / "ckpt")
    again = pfc.ColBERT.from_pretrained(tmp_path / "ckpt", batch_size=4)
    after = again.text_scorer()(frame)["score"].to_numpy()
    np.testing.assert_array_equal(before, after)
    assert again.fingerprint() == tiny.fingerprint()
    assert again.config == tiny.config


def test_fp16_checkpoint_close_and_same_fingerprint(tiny_bert_dir, tmp_path):
    c = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(**TINY))
    c.save_pretrained(tmp_path / "half", dtype="float16")
    again = pfc.ColBERT.from_pretrained(tmp_path / "half")
    frame = _frame(["who built the castle"], PASSAGES)
    np.testing.assert_allclose(again.text_scorer()(frame)["score"], c.text_scorer()(frame)["score"], atol=2e-3)
    assert next(again.model.parameters()).dtype.is_floating_point and next(again.model.parameters()).dtype.itemsize == 4


def test_config_not_matching_weights_is_an_error(tiny_bert_dir, tmp_path):
    c = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(**TINY))
    folder = c.save_pretrained(tmp_path / "ckpt")
    cfg = json.loads((folder / "colbert_config.json").read_text())
    cfg["dim"] = 32
    (folder / "colbert_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"colbert_config\.json (is \d+ bytes|does not match)"):  # the manifest
        pfc.ColBERT.from_pretrained(folder)
    (folder / "manifest.json").unlink()  # as a checkpoint saved before manifests: refused, and opened unchecked
    with pytest.raises(ValueError, match=r"manifest\.json records no file manifest"):  # the shapes still disagree
        pfc.ColBERT.from_pretrained(folder)
    with pytest.raises(ValueError, match=r"dim=32.*does not match"), pytest.warns(UserWarning, match="unchecked"):
        pfc.ColBERT.from_pretrained(folder, unchecked=True)


def test_different_seeds_differ_in_fingerprint(tiny_bert_dir):
    a = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(**TINY), seed=0)
    b = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(**TINY), seed=1)
    assert a.fingerprint() != b.fingerprint()


def test_not_a_model_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a ColBERT checkpoint"):
        pfc.ColBERT.from_pretrained(tmp_path)


QA = [
    ("When was Emberfall released?", 1),
    ("Who forged the silver blade?", 3),
    ("Who built the castle of Vel Amara?", 0),
    ("How long did Zoë rule Ørnvik?", 4),
    ("What do dragons do in winter?", 2),
]


def test_reranking_pipeline_with_minilm_puts_answer_first():
    colbert = pfc.ColBERT.from_pretrained(default_backbone(), config=pfc.ColBERTConfig(score_query_masks=False))
    corpus = pd.DataFrame({"docno": [f"d{j}" for j in range(len(PASSAGES))], "text": PASSAGES})
    topics = pd.DataFrame({"qid": [str(i) for i in range(len(QA))], "query": [q for q, _ in QA]})
    first_stage = pt.Transformer.from_df(topics.merge(corpus, how="cross").assign(score=0.0, rank=0))
    run = (first_stage >> colbert.text_scorer())(topics)
    top = run[run["rank"] == 0].set_index("qid")["docno"]
    for i, (_, answer) in enumerate(QA):
        assert top[str(i)] == f"d{answer}", QA[i]


@pytest.mark.slow
def test_shipped_default_checkpoint_loads_offline_and_ranks_answers_first():
    from pyterrier_fandom_colbert.model.colbert import DEFAULT_CHECKPOINT

    colbert = pfc.ColBERT.from_pretrained()
    assert colbert.config == pfc.ColBERTConfig.load(DEFAULT_CHECKPOINT)
    assert colbert.fingerprint() == pfc.ColBERT.from_pretrained(DEFAULT_CHECKPOINT).fingerprint()
    corpus = pd.DataFrame({"docno": [f"d{j}" for j in range(len(PASSAGES))], "text": PASSAGES})
    topics = pd.DataFrame({"qid": [str(i) for i in range(len(QA))], "query": [q for q, _ in QA]})
    run = colbert.text_scorer()(topics.merge(corpus, how="cross"))
    top = run[run["rank"] == 0].set_index("qid")["docno"]
    assert [top[str(i)] for i in range(len(QA))] == [f"d{a}" for _, a in QA]


def test_packed_bf16_pass_equals_the_autocast_pass(tiny):
    """The bf16 copy of a BERT backbone runs the packed pass (one joined Q/K/V product, weights packed once); its
    hidden states are the autocast pass's on every real token, padded or not, layer callbacks included; a
    ColBERT that has used it still pickles, and encodes the same after. RoBERTa keeps the plain pass."""
    import pickle

    import torch

    from pyterrier_fandom_colbert.model import fast_bert
    from pyterrier_fandom_colbert.model.network import bf16_copy

    if not fast_bert.packing_available():
        pytest.skip("this torch build has no packed oneDNN bf16 Linear")
    clone = bf16_copy(tiny.model)
    is_bert = type(tiny.model.backbone).__name__ == "BertModel"
    assert (clone.packed is not None) == is_bert and tiny.model.packed is None
    if not is_bert:
        return
    docs = tiny.tokenizer.documents(PASSAGES)
    assert not bool(torch.as_tensor(docs.attention_mask).all())
    layers: list = []

    def tick() -> None:
        layers.append(1)

    for batch in (tiny.tokenizer.queries(["who forged the blade", "when"]), docs):
        ids, attn = torch.as_tensor(batch.input_ids), torch.as_tensor(batch.attention_mask)
        layers.clear()
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            want = fast_bert.forward(clone.backbone, ids, attn)
            got = clone.hidden(ids, attn, tick)
        real = attn.bool()
        assert got.dtype == torch.float32 and len(layers) == tiny.model.num_layers()
        torch.testing.assert_close(got[real], want[real].float(), atol=1e-2, rtol=1e-2)
        assert float((got[real] - want[real].float()).abs().mean()) < 1e-3
    encoder = pfc.ColBERT(tiny.model, tiny.tokenizer, device="cpu", cpu_precision="bfloat16")
    before = encoder.encode_queries(["who forged the blade"])[0]
    assert encoder._bf16_model is not None
    again = pickle.loads(pickle.dumps(encoder))
    assert again._bf16_model is None
    torch.testing.assert_close(again.encode_queries(["who forged the blade"])[0], before, atol=0, rtol=0)
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(clone.packed)


def test_fast_bert_inference_equals_transformers(tiny, monkeypatch):
    """The BERT inference path (model/fast_bert.py) gives transformers' hidden states on every real token, with
    and without padding; RoBERTa, and training passes, go through transformers."""
    import torch

    from pyterrier_fandom_colbert.model import fast_bert

    model = tiny.model
    is_bert = type(model.backbone).__name__ == "BertModel"
    assert model.fast_inference == fast_bert.supports(model.backbone) == is_bert
    docs = tiny.tokenizer.documents(PASSAGES)
    assert not bool(torch.as_tensor(docs.attention_mask).all())  # the padded case is exercised
    calls = []
    original = fast_bert.forward
    monkeypatch.setattr(fast_bert, "forward", lambda *a: calls.append(1) or original(*a))
    for batch in (tiny.tokenizer.queries(["who forged the blade", "when"]), docs):
        ids, attn = torch.as_tensor(batch.input_ids), torch.as_tensor(batch.attention_mask)
        with torch.inference_mode():
            reference = model.backbone(input_ids=ids, attention_mask=attn).last_hidden_state
            used = len(calls)
            model(ids, attn)
            assert len(calls) == used + is_bert
            if is_bert:
                fast = original(model.backbone, ids, attn)
                real = attn.bool()
                torch.testing.assert_close(fast[real], reference[real], atol=1e-5, rtol=1e-5)
    model.train()
    try:
        used = len(calls)
        model(ids, attn)
        assert len(calls) == used  # dropout on: transformers' forward
    finally:
        model.eval()
