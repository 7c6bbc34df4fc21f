"""Training: losses go down, QQP negatives, in-batch masks, exact resumption, checkpoints, self-supervised pairs,
frozen lower layers with cached outputs, hard negatives mined by a ColBERT."""
import json
import re

import numpy as np
import pandas as pd
import pytest
import torch

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.model import fast_bert
from pyterrier_fandom_colbert.training import examples as D
from pyterrier_fandom_colbert.training.evaluation import colbert_rankings, evaluate
from pyterrier_fandom_colbert.training.frozen import FrozenLower
from pyterrier_fandom_colbert.training.losses import cross_entropy, pairwise_scores
from pyterrier_fandom_colbert.training.selfsup import SelfSupConfig, selfsup_collection
from pyterrier_fandom_colbert.training.trainer import COLBERT_NEGATIVES_FILE, PRESETS, STATE_FILE, TrainConfig, Trainer

TINY = dict(dim=16, query_maxlen=12, doc_maxlen=40)
PLACES = ["Vel Amara", "Ørnvik", "Emberfall", "Dunmere", "Kaldor", "Sunspire", "Greywater", "Halvard"]
THINGS = ["castle", "blade", "crown", "bridge", "library", "harbour"]


def _collection(n_docs=12, per_doc=2) -> D.QAData:
    """Hand-made passages, each answering ``per_doc`` questions."""
    docs, queries, qrels = {}, {}, {}
    for i in range(n_docs):
        place, thing = PLACES[i % len(PLACES)], THINGS[i % len(THINGS)]
        docs[f"d{i}"] = (f"The {thing} of {place} was built in year {100 + i} by the river folk. "
                         f"Travellers say the {thing} still stands beside the old road to {place}.")
        for j in range(per_doc):
            qid = f"q{i}-{j}"
            queries[qid] = f"who built the {thing} of {place}" if j == 0 else f"when was the {place} {thing} built"
            qrels[qid] = (f"d{i}",)
    return D.QAData(queries, qrels, docs)


@pytest.fixture()
def colbert(tiny_bert_dir):
    return pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(**TINY), device="cpu")


def _config(**kw) -> TrainConfig:
    base = dict(lr=5e-3, backbone_lr=5e-3, warmup=0.0, epochs=1, batch_size=4, negatives=2,
                negative_source="random", in_batch=False, seed=0, eval_every=0)
    return TrainConfig(**{**base, **kw})


# -- losses decrease ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("form,loss,in_batch", [("qpp", "ce", False), ("qpp", "ce", True), ("qqp", "ce", False),
                                                ("qqp", "ce", True), ("qpp", "mse", False), ("qqp", "mse", False)])
def test_one_step_lowers_the_loss_on_a_fixed_batch(colbert, tmp_path, form, loss, in_batch):
    data = _collection()
    trainer = Trainer(colbert, _config(form=form, loss=loss, in_batch=in_batch), data, tmp_path / "run")
    examples = trainer.source.epoch(0)[:6]
    batch = D.collate(examples, data, in_batch)
    colbert.model.eval()  # no dropout: the loss is a function of the weights only
    with torch.no_grad():
        before = float(trainer.loss(batch))
    trainer.optimizer_step([examples])
    with torch.no_grad():
        after = float(trainer.loss(batch))
    assert after < before - 1e-4, (before, after)


def test_qqp_cross_entropy_is_ce_over_the_two_queries():
    from pyterrier_fandom_colbert.training.losses import qqp_cross_entropy

    pos, neg = torch.tensor([0.3, 0.8, -0.1]), torch.tensor([0.5, 0.1, -0.2])
    pair = cross_entropy(torch.stack([pos, neg], 1), torch.zeros(3, dtype=torch.long), scale=32.0)
    assert torch.allclose(qqp_cross_entropy(pos, neg, scale=32.0), pair)


def test_pairwise_scores_match_one_pair_at_a_time():
    from pyterrier_fandom_colbert.model.scoring import maxsim

    g = torch.Generator().manual_seed(0)
    q, d = torch.randn(3, 5, 4, generator=g), torch.randn(4, 7, 4, generator=g)
    qm, dm = torch.rand(3, 5, generator=g) > 0.3, torch.rand(4, 7, generator=g) > 0.3
    qm[:, 0], dm[:, 0] = True, True
    full = pairwise_scores(q, qm, d, dm)
    for i in range(3):
        for j in range(4):
            one = maxsim(q[i:i + 1], d[j:j + 1], qm[i:i + 1], dm[j:j + 1])
            assert torch.allclose(full[i, j], one[0], atol=1e-6)


# -- examples ------------------------------------------------------------------------------------------------

def test_qqp_negative_queries_never_come_from_the_positive_passage():
    rng = np.random.default_rng(1)
    for trial in range(20):
        n_docs = int(rng.integers(2, 9))
        qrels = {f"q{k}": (f"d{int(rng.integers(n_docs))}",) for k in range(int(rng.integers(3, 30)))}
        if len({d for v in qrels.values() for d in v}) < 2:
            continue
        data = D.QAData({q: q for q in qrels}, qrels, {f"d{i}": "x" for i in range(n_docs)})
        source = D.QQPSource(data, seed=trial)
        negs = []
        for epoch in range(5):
            examples = source.epoch(epoch)
            assert len(examples) == len(qrels)
            for e in examples:
                assert e.docno in data.qrels[e.qid]
                assert e.docno not in data.qrels[e.neg_qid], "a negative question from the positive's own passage"
            negs.append([e.neg_qid for e in examples])
        assert source.epoch(3) == source.epoch(3), "an epoch's examples depend on (seed, epoch) only"


def test_qpp_negatives_come_from_the_ranking_minus_positives():
    data = _collection(n_docs=10, per_doc=1)
    rankings = {q: [data.qrels[q][0], "d9", "d8", "d7", "d6"] for q in data.qrels}
    for e in D.QPPSource(data, negatives=2, rankings=rankings, depth=3).epoch(0):
        assert e.positive not in e.negatives and len(set(e.negatives)) == 2
        allowed = [d for d in ["d9", "d8", "d7", "d6"] if d != e.positive][:3]  # the 3 best non-answers
        assert set(e.negatives) <= set(allowed)


def test_tfidf_rankings_put_the_answering_passage_first(tmp_path):
    data = _collection(n_docs=8, per_doc=1)
    ranked = D.tfidf_rankings(data, tmp_path / "tfidf", depth=3)
    assert all(ranked[q][0] == data.qrels[q][0] for q in ["q0-0", "q3-0"])
    for e in D.QPPSource(data, negatives=1, rankings=ranked, depth=3).epoch(0):
        assert e.negatives[0] in ranked[e.qid][:4] and e.negatives[0] != e.positive


def test_in_batch_mask_hides_other_answers_of_the_same_question():
    data = D.QAData({"a": "qa", "b": "qb"}, {"a": ("d1", "d2"), "b": ("d2",)}, {"d1": "x", "d2": "y", "d3": "z"})
    batch = D.collate([D.QPP("a", "d1", ("d3",)), D.QPP("b", "d2", ("d3",))], data, in_batch=True)
    assert batch.docs == ["x", "z", "y", "z"] and list(batch.labels) == [0, 2]
    # row a: d2 (column 2) also answers a, so it must not count as a negative; row b: d1 is a fair negative
    assert batch.valid.tolist() == [[True, True, False, True], [True, True, True, True]]


# -- checkpoints and resumption --------------------------------------------------------------------------

class _Interrupted(Exception):
    pass


class _StopAfter(Trainer):
    stop_at = 2

    def _save_state(self):
        super()._save_state()
        if self.step == self.stop_at:
            raise _Interrupted


@pytest.mark.slow
@pytest.mark.parametrize("freeze", [0, 1])
def test_resume_takes_the_same_steps_as_an_uninterrupted_run(tiny_bert_dir, tmp_path, freeze):
    data = _collection(n_docs=8, per_doc=2)  # 16 examples / batch 4 = 4 steps
    cfg = _config(eval_every=1, dropout=0.1, lr=1e-3, backbone_lr=5e-4, warmup=0.25, freeze_layers=freeze)

    def fresh():
        return pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(**TINY), device="cpu")

    with pytest.warns(UserWarning, match="holds no training run yet"):  # nothing to resume: a new run, said
        whole = Trainer(fresh(), cfg, data, tmp_path / "whole", resume=True).train()
    with pytest.raises(_Interrupted):
        _StopAfter(fresh(), cfg, data, tmp_path / "cut").train()
    with pytest.raises(FileExistsError):
        Trainer(fresh(), cfg, data, tmp_path / "cut")
    with pytest.raises(ValueError, match="different settings"):
        Trainer(fresh(), cfg.replace(lr=2e-3), data, tmp_path / "cut", resume=True).train()
    resumed = Trainer(fresh(), cfg, data, tmp_path / "cut", resume=True).train()
    assert [h["step"] for h in resumed.history] == [1, 2, 3, 4]
    np.testing.assert_allclose([h["loss"] for h in resumed.history], [h["loss"] for h in whole.history],
                               rtol=1e-5)
    assert [p.name for p in (tmp_path / "cut" / "checkpoints").iterdir()] == ["step-0000004"]


def test_trainer_checkpoint_loads_and_scores_like_the_trained_model(colbert, tmp_path):
    data = _collection()
    dev = data.limit(6)
    result = Trainer(colbert, _config(max_steps=3, eval_every=3), data, tmp_path / "run", dev=dev).train()
    assert result.steps == 3 and result.start is not None
    assert (tmp_path / "run" / STATE_FILE).exists()
    frame = pd.DataFrame([{"qid": "1", "query": "who built the castle of Vel Amara", "docno": d, "text": data.docs[d]}
                          for d in ["d0", "d1", "d2"]])
    loaded = pfc.ColBERT.from_pretrained(tmp_path / "run" / "checkpoints" / "step-0000003", device="cpu")
    np.testing.assert_allclose(loaded.text_scorer()(frame)["score"], colbert.text_scorer()(frame)["score"],
                               atol=1e-5)
    best = pfc.ColBERT.from_pretrained(tmp_path / "run" / "best", device="cpu")
    assert evaluate(best, dev) == result.best
    assert TrainConfig.load(tmp_path / "run") == _config(max_steps=3, eval_every=3)


def test_evaluate_matches_a_brute_force_ranking(colbert):
    data = _collection(n_docs=6, per_doc=1)
    metrics = evaluate(colbert, data, k=3)
    scorer = colbert.text_scorer()
    rr = []
    for qid in sorted(data.qrels):
        frame = pd.DataFrame([{"qid": qid, "query": data.queries[qid], "docno": d, "text": t}
                              for d, t in data.docs.items()])
        ranked = list(scorer(frame)["docno"])[:3]
        rr.append(next((1 / (r + 1) for r, d in enumerate(ranked) if d in data.qrels[qid]), 0.0))
    assert metrics["RR@3"] == pytest.approx(np.mean(rr))


def test_config_validation_and_presets():
    assert PRESETS["study"].lr == 3e-6 and PRESETS["study"].negatives == 9
    assert PRESETS["fresh"].lr == 1e-4 and PRESETS["fresh"].in_batch
    with pytest.raises(ValueError, match="form='pairs'"):
        TrainConfig(form="pairs")
    with pytest.raises(ValueError, match="warmup"):
        TrainConfig(warmup=1.5)


# -- self-supervised pairs and the command line ----------------------------------------------------------

def test_selfsup_pairs_hold_out_a_sentence_and_strip_headings():
    passages = [{"docno": "w-1-0", "title": "Orrin", "section": "Trivia",
                 "text": "Trivia. Orrin forged the silver blade. He was left-handed all his life. "
                         "His hammer is kept in Dunmere today."},
                {"docno": "w-1-1", "title": "Orrin", "section": "Trivia", "text": "Trivia. Orrin disliked rain."}]
    data = selfsup_collection(passages, SelfSupConfig(seed=3, min_query_words=3))
    heading = "h:Orrin\x1fTrivia"
    assert data.queries[heading] == "Orrin Trivia"
    assert data.qrels[heading] == ("w-1-0#h", "w-1-1#h")
    assert data.docs["w-1-1#h"] == "Orrin disliked rain."
    (doc,) = data.qrels["s:w-1-0"]
    sentence = data.queries["s:w-1-0"]
    assert sentence in passages[0]["text"] and sentence not in data.docs[doc]
    assert len(data.docs[doc].split()) + len(sentence.split()) == len(passages[0]["text"].split()) - 1
    assert "s:w-1-1" not in data.qrels, "a one-sentence passage cannot give a sentence away"


def test_selfsup_from_a_dump_file_equals_the_same_dump_as_a_dataset(tmp_path, monkeypatch):
    """--selfsup takes a dump file directly: the same passages, hence the same pairs, as the dump registered as a
    fandom-qa corpus; an ir_datasets id still works, and a missing dump file is named."""
    from pyterrier_fandom_colbert.data import irds
    from pyterrier_fandom_colbert.training.selfsup import looks_like_dump, selfsup_from_source

    dump = irds.SAMPLE_DIR / "samplewiki_pages_current.xml"
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "irds-home"))
    monkeypatch.setenv("FANDOM_QA_DUMP_SAMPLEDUMP", str(dump))
    name = irds.register_fandom_wiki("sampledump", dbname="samplewiki", prefix="fandom-qa-test")
    config = SelfSupConfig(seed=1)
    from_file, from_id = selfsup_from_source(str(dump), config), selfsup_from_source(name, config)
    assert len(from_file.qrels) > 100
    assert (from_file.queries, from_file.qrels, from_file.docs) == (from_id.queries, from_id.qrels, from_id.docs)
    assert looks_like_dump(str(tmp_path / "other_pages_current.xml.7z")) and not looks_like_dump(name)
    with pytest.raises(FileNotFoundError, match=re.escape("other_pages_current.xml.7z: no such dump file")):
        selfsup_from_source(str(tmp_path / "other_pages_current.xml.7z"))


def test_cli_trains_on_a_squad_file(tiny_bert_dir, tmp_path, capsys):
    from pyterrier_fandom_colbert.training.cli import main

    data = _collection(n_docs=6, per_doc=2)
    paragraphs = [{"context": data.docs[f"d{i}"],
                   "qas": [{"id": f"q{i}-{j}", "question": data.queries[f"q{i}-{j}"],
                            "answers": [{"text": "river folk", "answer_start": data.docs[f"d{i}"].index("river folk")}]}
                           for j in range(2)]} for i in range(6)]
    squad = tmp_path / "tiny-squad.json"
    squad.write_text(json.dumps({"data": [{"title": "Places", "paragraphs": paragraphs}]}))
    out = tmp_path / "run"
    code = main(["--dataset", str(squad), "--dev", str(squad), "--dev-limit", "4", "--out", str(out),
                 "--init", tiny_bert_dir, "--dim", "16", "--query-maxlen", "12", "--doc-maxlen", "40",
                 "--preset", "fresh", "--batch-size", "4", "--max-steps", "2", "--negatives", "1"])
    assert code == 0
    summary = json.loads((out / "result.json").read_text())
    assert summary["steps"] == 2 and set(summary["start"]) == {"RR@10", "R@1", "R@10"}
    assert pfc.ColBERT.from_pretrained(out / "best").config.dim == 16
    assert "at the start; best" in capsys.readouterr().out


# -- levers: frozen lower layers, ColBERT-mined negatives ------------------------------------------------------

def _batch(colbert, texts):
    tok = colbert.tokenizer.documents(texts)
    return torch.as_tensor(tok.input_ids), torch.as_tensor(tok.attention_mask)


TEXTS = ["The castle of Vel Amara was built by the river folk.", "Ørnvik", "A bridge, a crown and a blade."]


def test_layers_split_anywhere_compose_to_the_whole_forward(colbert):
    backbone = colbert.model.backbone.eval()
    ids, attn = _batch(colbert, TEXTS)
    whole = fast_bert.forward(backbone, ids, attn)
    n = len(backbone.encoder.layer)
    for cut in range(n + 1):
        lower = fast_bert.layers(backbone, fast_bert.embed(backbone, ids), attn, 0, cut)
        upper = fast_bert.layers(backbone, lower, attn, cut, None)
        real = attn.bool()
        torch.testing.assert_close(upper[real], whole[real], atol=1e-5, rtol=1e-5)


def test_frozen_forward_without_dropout_equals_the_model(colbert):
    model = colbert.model
    ids, attn = _batch(colbert, TEXTS)
    frozen = FrozenLower(model, 1)
    model.eval()
    with torch.no_grad():
        expected = model(ids, attn)
        got = frozen(ids, attn, dropout=0.0)
    real = attn.bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)
    assert (frozen.misses, frozen.hits) == (3, 0)
    # the same texts in another batch (other padding, other order): cache hits, bit-identical rows
    ids2, attn2 = _batch(colbert, [TEXTS[2], TEXTS[0]])
    with torch.no_grad():
        again = frozen(ids2, attn2, dropout=0.0)
    assert (frozen.misses, frozen.hits) == (3, 2)
    n0 = int(attn[0].sum())
    torch.testing.assert_close(again[1, :n0], got[0, :n0], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="right-padded"):  # a left-padded row would cache the padding
        frozen(ids, attn.flip(1))


def test_frozen_layers_get_no_gradient_and_upper_layers_do(colbert):
    model = colbert.model.train()
    frozen = FrozenLower(model, 1)
    ids, attn = _batch(colbert, TEXTS)
    frozen(ids, attn, dropout=0.1).sum().backward()
    backbone = model.backbone
    lower = [backbone.embeddings, backbone.encoder.layer[0]]
    assert all(p.grad is None and not p.requires_grad for m in lower for p in m.parameters())
    upper = backbone.encoder.layer[1:]
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for m in upper for p in m.parameters())
    assert model.projection.weight.grad.abs().sum() > 0


def test_cache_cap_recomputes_instead_of_storing(colbert):
    frozen = FrozenLower(colbert.model, 1, max_cache_bytes=0)
    ids, attn = _batch(colbert, TEXTS)
    with torch.no_grad():
        frozen(ids, attn)
        frozen(ids, attn)
    assert (frozen.misses, frozen.hits, frozen.uncached, len(frozen.cache)) == (6, 0, 6, 0)


def test_freezing_refuses_bad_layer_counts_and_non_bert_backbones(colbert, tiny_roberta_dir):
    n = len(colbert.model.backbone.encoder.layer)
    with pytest.raises(ValueError, match=f"freeze_layers={n + 1}; the backbone has {n} layers"):
        FrozenLower(colbert.model, n + 1)
    roberta = pfc.ColBERT.from_pretrained(tiny_roberta_dir, config=pfc.ColBERTConfig(**TINY), device="cpu")
    with pytest.raises(ValueError, match="RobertaModel"):
        FrozenLower(roberta.model, 1)
    with pytest.raises(ValueError, match="freeze_layers=-1"):
        TrainConfig(freeze_layers=-1)


def test_trainer_with_frozen_layers_moves_only_the_upper_part(colbert, tmp_path):
    data = _collection()
    before = {k: v.clone() for k, v in colbert.model.state_dict().items()}
    trainer = Trainer(colbert, _config(freeze_layers=1), data, tmp_path / "run")
    optimised = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    assert not any(id(p) in optimised for p in colbert.model.backbone.embeddings.parameters())
    trainer.train()
    after = colbert.model.state_dict()
    lower = [k for k in after if k.startswith(("backbone.embeddings.", "backbone.encoder.layer.0."))]
    upper = [k for k in after if k.startswith("backbone.encoder.layer.1.") and "weight" in k]
    assert lower and upper
    assert all(torch.equal(before[k], after[k]) for k in lower)
    assert all(not torch.equal(before[k], after[k]) for k in upper)
    assert not torch.equal(before["projection.weight"], after["projection.weight"])
    cache = trainer.history[-1]["frozen_cache"]
    assert cache["misses"] == len(data.docs) + len(data.qrels)   # every distinct text once
    assert cache["hits"] > 0 and cache["uncached"] == 0


def test_colbert_rankings_match_brute_force_and_feed_negatives(colbert, tmp_path):
    data = _collection(n_docs=6, per_doc=1)
    rankings = colbert_rankings(colbert, data, depth=3)
    scorer = colbert.text_scorer()
    for qid in sorted(data.qrels):
        frame = pd.DataFrame([{"qid": qid, "query": data.queries[qid], "docno": d, "text": t}
                              for d, t in data.docs.items()])
        scored = scorer(frame).sort_values("score", ascending=False)
        assert rankings[qid] == list(scored["docno"])[:4]   # depth + one answer
    cfg = _config(negative_source="colbert", negatives=1, negative_depth=3)
    trainer = Trainer(colbert, cfg, data, tmp_path / "run")
    saved = (tmp_path / "run" / COLBERT_NEGATIVES_FILE)
    assert saved.exists()
    for ex in trainer.source.epoch(0):
        pool = [d for d in rankings[ex.qid] if d not in data.qrels[ex.qid]][:3]
        assert set(ex.negatives) <= set(pool)
    # a run folder keeps its pools; asking for other ones there is refused
    with pytest.raises(ValueError, match="depth=3"):
        Trainer(colbert, cfg.replace(negative_depth=2), data, tmp_path / "run")


def test_negative_checkpoint_needs_colbert_negatives():
    with pytest.raises(ValueError, match="negative_checkpoint"):
        TrainConfig(negative_checkpoint="runs/x/best")
    assert np.isfinite(TrainConfig(negative_source="colbert").lr)


# -- distillation from the hybrid ---------------------------------------------------------------------------

def _top_by_score(frame: pd.DataFrame, depth: int) -> pd.DataFrame:
    frame = frame.sort_values(["qid", "score"], ascending=[True, False]).groupby("qid").head(depth).copy()
    frame["rank"] = frame.groupby("qid").cumcount()
    return frame


def test_hybrid_teacher_scores_are_pfc_hybrid_scores(colbert, tmp_path):
    import pyterrier as pt

    from pyterrier_fandom_colbert.training.teacher import HybridTeacher

    data = _collection(n_docs=6, per_doc=1)
    depth, weight = 4, 0.3
    teacher = HybridTeacher.build(data, colbert, tmp_path / "run", weight, depth)
    # the reference: pfc.Hybrid over TF-IDF's top 4 and ColBERT's top 4 (the text scorer over every passage)
    pairs = pd.DataFrame([{"qid": q, "query": data.queries[q], "docno": d, "text": t}
                          for q in sorted(data.qrels) for d, t in data.docs.items()])
    scored = colbert.text_scorer()(pairs)
    neural = pt.apply.generic(lambda topics: _top_by_score(scored[scored["qid"].isin(topics["qid"])], depth))
    lexical = pfc.TfidfIndex(str(tmp_path / "run" / "tfidf")).retriever(num_results=depth)
    topics = pd.DataFrame({"qid": sorted(data.qrels), "query": [data.queries[q] for q in sorted(data.qrels)]})
    fused = pfc.Hybrid(lexical, neural, weight=weight)(topics)
    assert len(fused) > len(topics) * depth // 2
    got = teacher([data.queries[q] for q in fused["qid"]], [data.docs[d] for d in fused["docno"]])
    diagonal = got.diagonal().numpy()
    np.testing.assert_allclose(diagonal, fused["score"].to_numpy(), rtol=1e-3, atol=1e-3)
    with pytest.raises(KeyError, match="hybrid teacher has no score"):
        teacher(["a question it never saw"], [data.docs["d0"]])


def test_hybrid_teacher_files_are_reused_checked_and_refused_when_they_differ(colbert, tmp_path, monkeypatch):
    from pyterrier_fandom_colbert.storage import DamagedFileError
    from pyterrier_fandom_colbert.training import evaluation
    from pyterrier_fandom_colbert.training import teacher as teacher_module
    from pyterrier_fandom_colbert.training.teacher import HYBRID_MATRIX_FILE, HybridTeacher

    data = _collection(n_docs=5, per_doc=1)
    first = HybridTeacher.build(data, colbert, tmp_path, 0.2, 3)

    def fail(*args, **kwargs):
        raise AssertionError("the saved teacher should have been read, not computed again")
    monkeypatch.setattr(evaluation, "exhaustive_scores", fail)
    again = HybridTeacher.build(data, colbert, tmp_path, 0.2, 3)
    assert torch.equal(first.matrix, again.matrix)
    with pytest.raises(ValueError, match=re.escape("'weight': 0.2")):
        HybridTeacher.build(data, colbert, tmp_path, 0.5, 3)
    monkeypatch.setattr(teacher_module, "MAX_HYBRID_CELLS", 5 * 5 - 1)
    with pytest.raises(ValueError, match="5 x 5 is more than 24 pairs"):
        HybridTeacher.build(data, colbert, tmp_path / "other", 0.2, 3)
    monkeypatch.undo()
    path = tmp_path / HYBRID_MATRIX_FILE
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(DamagedFileError, match=HYBRID_MATRIX_FILE):
        HybridTeacher.build(data, colbert, tmp_path, 0.2, 3)


def test_distilling_the_hybrid_adds_its_weighted_kl_to_the_loss(colbert, tmp_path):
    from pyterrier_fandom_colbert.training.losses import kl_distillation

    data = _collection(n_docs=6, per_doc=1)
    base = _config(in_batch=True, negatives=1)
    plain = Trainer(colbert, base, data, tmp_path / "plain")
    taught = Trainer(colbert, base.replace(distill_weight=0.5, distill_temperature=0.7, teacher="hybrid",
                                           teacher_depth=4), data, tmp_path / "taught")
    batch = D.collate(taught.source.epoch(0)[:4], data, True)
    colbert.model.eval()
    with torch.no_grad():
        q, qm = taught._encode(colbert.tokenizer.queries(batch.queries))
        d, dm = taught._encode(colbert.tokenizer.documents(batch.docs))
        scores = pairwise_scores(q, qm, d, dm, colbert.config.similarity, colbert.config.reduction)
        kl = kl_distillation(scores, taught.teacher(batch.queries, batch.docs), torch.as_tensor(batch.valid),
                             float(colbert.config.query_maxlen), 0.7)
        difference = float(taught.loss(batch)) - float(plain.loss(batch))
    assert float(kl) > 0
    assert difference == pytest.approx(0.5 * float(kl), rel=1e-4, abs=1e-6)


def test_teacher_settings_are_validated():
    with pytest.raises(ValueError, match="teacher='oracle'"):
        TrainConfig(teacher="oracle")
    with pytest.raises(ValueError, match="only used with teacher='hybrid'"):
        TrainConfig(teacher_weight=0.3)
    with pytest.raises(ValueError, match=re.escape("teacher_weight=1.5")):
        TrainConfig(teacher="hybrid", teacher_weight=1.5)
    with pytest.raises(ValueError, match="distill_temperature=0"):
        TrainConfig(distill_temperature=0)
