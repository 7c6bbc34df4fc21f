"""The extractive reader: span arithmetic against brute force, SQuAD metrics against the official script's
behaviour, the network against transformers' BERT, folders and their checks, reading in windows, the transformer,
training and resumption, and the reader behind `pfc search`."""
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from pyterrier_fandom_colbert.reader.calibration import (
    ReaderCalibration,
    expected_calibration_error,
    fit_logistic,
    fit_logistic_features,
    reliability,
)
from pyterrier_fandom_colbert.reader.config import ReaderConfig
from pyterrier_fandom_colbert.reader.metrics import best_over, exact_match, f1_score, normalize_answer
from pyterrier_fandom_colbert.reader.spans import best_span, token_span, windows


# -- span arithmetic ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(5))
def test_best_span_is_the_brute_force_maximum(seed):
    rng = np.random.default_rng(seed)
    n, max_tokens = 17, 4
    start, end = rng.normal(size=n), rng.normal(size=n)
    valid = rng.random(n) < 0.7
    best = (-1, -1, -np.inf)
    for i in range(n):
        for j in range(i, min(n, i + max_tokens)):
            if valid[i] and valid[j] and start[i] + end[j] > best[2]:
                best = (i, j, start[i] + end[j])
    got = best_span(start, end, valid, max_tokens)
    assert got[:2] == best[:2] and got[2] == pytest.approx(best[2])


@pytest.mark.parametrize("n,size,stride", [(0, 5, 2), (5, 5, 2), (6, 5, 2), (23, 8, 3), (100, 10, 10)])
def test_windows_cover_every_token_within_their_size(n, size, stride):
    spans = windows(n, size, stride)
    covered = set()
    for a, b in spans:
        assert 0 <= a <= b <= n and b - a <= size
        covered.update(range(a, b))
    assert covered == set(range(n)) and spans[-1][1] == n
    assert all(b[0] - a[0] == stride for a, b in itertools.pairwise(spans))


def test_token_span_maps_characters_to_the_tokens_that_overlap_them():
    offsets = np.array([[0, 3], [4, 7], [7, 8], [9, 14]])  # "The cat's house" as word pieces
    assert token_span(offsets, 4, 8) == (1, 2)
    assert token_span(offsets, 9, 14) == (3, 3)
    assert token_span(offsets, 3, 4) is None


# -- SQuAD metrics --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("prediction,gold,em,f1", [
    ("Denver Broncos", "Denver Broncos", 1.0, 1.0),
    ("the Denver Broncos", "Denver Broncos", 1.0, 1.0),        # articles dropped
    ("Denver Broncos.", "denver broncos", 1.0, 1.0),            # punctuation and case
    ("Broncos", "Denver Broncos", 0.0, 2 / 3),                  # P 1, R 1/2
    ("in 1990 and 1991", "1990", 0.0, 0.4),                      # P 1/4, R 1: 2 * 1/4 / (5/4)
    ("Carolina Panthers", "Denver Broncos", 0.0, 0.0),
    ("a a b", "a b b", 0.0, 2 / 3),                              # articles removed: "b" vs "b b": P 1, R 1/2
])
def test_exact_match_and_f1_follow_the_official_squad_script(prediction, gold, em, f1):
    assert exact_match(prediction, gold) == em
    assert f1_score(prediction, gold) == pytest.approx(f1)


def test_normalisation_and_the_best_gold_answer():
    assert normalize_answer("  The   Eiffel-Tower!! ") == "eiffeltower"
    assert best_over(f1_score, "Broncos", ["Carolina", "Denver Broncos", "Broncos"]) == 1.0
    with pytest.raises(ValueError, match="no gold answers"):
        best_over(exact_match, "x", [])


# -- calibration ----------------------------------------------------------------------------------------------------
def test_ece_and_reliability_by_hand():
    confidence = np.array([0.15, 0.15, 0.85, 0.85, 0.85, 0.85])
    correct = np.array([0, 1, 1, 1, 1, 0])
    # bin 1: conf 0.15, acc 0.5; bin 8: conf 0.85, acc 0.75 -> 2/6*0.35 + 4/6*0.10
    assert expected_calibration_error(confidence, correct) == pytest.approx(2 / 6 * 0.35 + 4 / 6 * 0.10)
    rows = reliability(confidence, correct)
    assert [(r["count"], r["accuracy"]) for r in rows] == [(2, 0.5), (4, 0.75)]


def test_fitted_logistic_is_calibrated_on_its_own_distribution():
    rng = np.random.default_rng(1)
    x = rng.normal(size=40000)
    y = rng.random(40000) < 1 / (1 + np.exp(-(1.5 * x + 0.3)))
    a, b = fit_logistic(x[:20000], y[:20000])
    p = ReaderCalibration(slope=a, intercept=b).probability(x[20000:])
    assert expected_calibration_error(p, y[20000:]) < 0.02
    assert not ReaderCalibration(threshold=0.5).nothing_relevant(0.5)
    assert ReaderCalibration(threshold=0.5).nothing_relevant(0.49)



def test_two_feature_fit_recovers_the_weights_and_the_rank_lowers_confidence():
    rng = np.random.default_rng(3)
    margin = rng.normal(4.0, 4.0, size=60000)
    rank = rng.integers(0, 3, size=60000)
    truth = ReaderCalibration(slope=0.3, intercept=-1.0, rank_slope=-0.8)
    y = rng.random(60000) < truth.probability(margin, rank)
    w, b = fit_logistic_features(np.stack([margin, rank], axis=1)[:30000], y[:30000])
    assert w == pytest.approx([0.3, -0.8], abs=0.05) and b == pytest.approx(-1.0, abs=0.08)
    fitted = ReaderCalibration(slope=float(w[0]), intercept=b, rank_slope=float(w[1]))
    assert expected_calibration_error(fitted.probability(margin[30000:], rank[30000:]), y[30000:]) < 0.02
    # the margin alone, on the same answers, is miscalibrated per rank: rank 2 said too sure
    a, b1 = fit_logistic(margin[:30000], y[:30000])
    alone = ReaderCalibration(slope=a, intercept=b1).probability(margin[30000:])
    low = rank[30000:] == 2
    assert alone[low].mean() - y[30000:][low].mean() > 0.05
    assert abs(fitted.probability(margin[30000:], rank[30000:])[low].mean() - y[30000:][low].mean()) < 0.02
    # equal margins: a lower passage is never more confident; None ranks are the first's
    p = fitted.probability(np.array([5.0, 5.0, 5.0]), np.array([0, 1, 2]))
    assert p[0] > p[1] > p[2] and fitted.probability(np.array([5.0]))[0] == p[0]


def test_calibration_rejects_a_rising_rank_slope_and_reads_files_without_one(tmp_path):
    with pytest.raises(ValueError, match=r"rank_slope=0\.5"):
        ReaderCalibration(rank_slope=0.5)
    with pytest.raises(ValueError, match="one rank >= 0 per margin"):
        ReaderCalibration().probability(np.array([1.0, 2.0]), np.array([0]))
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"slope": 0.2, "intercept": -1.0, "threshold": 0.3}))  # written before ranks
    old = ReaderCalibration.load_json(path)
    assert old.rank_slope == 0.0
    assert old.probability(np.array([2.0, 2.0]), np.array([0, 5])).tolist() == \
        pytest.approx([1 / (1 + np.exp(0.6))] * 2)

# -- the network ----------------------------------------------------------------------------------------------------
def test_reader_network_equals_transformers_bert_with_token_types(tiny_bert_dir):
    from transformers import BertModel

    from pyterrier_fandom_colbert.reader.network import ReaderModel, load_base

    base, _ = load_base(tiny_bert_dir)
    model = ReaderModel(base, ReaderConfig(base=tiny_bert_dir, frozen_layers=1, max_length=48,
                                           question_maxlen=12, stride=16)).eval()
    reference = BertModel.from_pretrained(tiny_bert_dir, local_files_only=True, add_pooling_layer=False).eval()
    ids = torch.tensor([[101, 2043, 2001, 102, 1996, 2208, 2207, 102, 0, 0]])
    mask = (ids != 0).long()
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1, 0, 0]])
    start, end = model(ids, mask, types)
    hidden = reference(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    logits = model.qa(hidden)
    n = int(mask.sum())
    assert torch.allclose(start[0, :n], logits[0, :n, 0], atol=1e-5)
    assert torch.allclose(end[0, :n], logits[0, :n, 1], atol=1e-5)


def test_reader_folder_round_trip_and_its_checks(tiny_reader_dir, tmp_path):
    import shutil

    from pyterrier_fandom_colbert.reader.network import load_reader
    from pyterrier_fandom_colbert.storage import DamagedFileError

    model = load_reader(tiny_reader_dir)
    assert json.loads((Path(tiny_reader_dir) / "calibration.json").read_text())["threshold"] == 0.3
    copy = tmp_path / "r"
    shutil.copytree(tiny_reader_dir, copy)
    again = load_reader(copy)
    assert all(torch.equal(a, b) for a, b in zip(model.own_state().values(), again.own_state().values()))
    weights = copy / "reader.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x10
    weights.write_bytes(bytes(data))
    with pytest.raises(DamagedFileError, match=r"reader\.safetensors"):
        load_reader(copy)
    shutil.rmtree(copy)
    shutil.copytree(tiny_reader_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["files"]["reader.safetensors"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DamagedFileError, match="does not list"):
        load_reader(copy)


def test_a_reader_over_another_base_is_refused(tiny_reader_dir, tmp_path):
    import shutil

    from pyterrier_fandom_colbert.reader.network import load_reader
    from pyterrier_fandom_colbert.storage import build_manifest, folder_files

    copy = tmp_path / "r"
    shutil.copytree(tiny_reader_dir, copy)
    config = json.loads((copy / "reader_config.json").read_text())
    config["base_digest"] = "0" * 32
    (copy / "reader_config.json").write_text(json.dumps(config))
    (copy / "manifest.json").write_text(json.dumps({"files": build_manifest(copy, folder_files(
        copy, exclude=["manifest.json"]))}))
    with pytest.raises(ValueError, match="retrain the reader"):
        load_reader(copy)


# -- reading --------------------------------------------------------------------------------------------------------
def test_long_passages_are_read_in_windows_and_the_best_span_wins(tiny_reader_dir):
    from pyterrier_fandom_colbert.reader.network import load_base, load_reader
    from pyterrier_fandom_colbert.reader.reading import read_pairs

    model = load_reader(tiny_reader_dir)
    _, tok = load_base(model.config.base)
    question = "who forged the blade"
    passage = " ".join(f"word{i} smith orrin forged" for i in range(20))  # far longer than a 48-token window
    got = read_pairs(model, tok, [question], [passage], batch_size=3)
    # brute force: every window on its own, the best span over all of them, the lowest null score
    q = tok(question, add_special_tokens=False)["input_ids"]
    enc = tok(passage, add_special_tokens=False, return_offsets_mapping=True)
    budget = model.config.max_length - len(q) - 3
    best, nulls = (-np.inf, None), []
    for w0, w1 in windows(len(enc["input_ids"]), budget, min(model.config.stride, budget)):
        ids = [tok.cls_token_id, *q, tok.sep_token_id, *enc["input_ids"][w0:w1], tok.sep_token_id]
        types = [0] * (len(q) + 2) + [1] * (w1 - w0 + 1)
        with torch.no_grad():
            s, e = model(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long), torch.tensor([types]))
        s, e = s[0].numpy(), e[0].numpy()
        valid = np.zeros(len(ids), bool)
        valid[len(q) + 2:len(ids) - 1] = True
        i, j, score = best_span(s, e, valid, model.config.max_answer_tokens)
        nulls.append(s[0] + e[0])
        if score > best[0]:
            off = len(q) + 2
            best = (score, (enc["offset_mapping"][w0 + i - off][0], enc["offset_mapping"][w0 + j - off][1]))
    assert got.span_score[0] == pytest.approx(best[0], abs=1e-4)
    assert (got.start[0], got.end[0]) == best[1]
    assert got.null_score[0] == pytest.approx(min(nulls), abs=1e-4)
    assert len(windows(len(enc["input_ids"]), budget, min(model.config.stride, budget))) > 2


def _frame():
    return pd.DataFrame({"qid": ["1", "1", "2"], "query": ["who forged the blade", "who forged the blade",
                                                           "when was the game released"],
                         "docno": ["a", "b", "c"], "extra": [1, 2, 3],
                         "text": ["The smith Orrin forged it from fallen stars.", "Dragons fight over the crown.",
                                  "It came out in the spring of 2011."]})


def test_reader_transformer_adds_spans_and_keeps_columns(tiny_reader_dir):
    import pyterrier_fandom_colbert as pfc

    reader = pfc.Reader(tiny_reader_dir, batch_size=2)
    out = reader(_frame())
    assert list(out.columns[:5]) == ["qid", "query", "docno", "extra", "text"]
    assert out["extra"].tolist() == [1, 2, 3]
    for _, row in out.iterrows():
        assert row["text"][row["answer_start"]:row["answer_end"]] == row["answer"] != ""
    cal = ReaderCalibration(slope=0.5, threshold=0.3)
    assert np.allclose(out["answer_confidence"], cal.probability(out["answer_score"].to_numpy()))
    assert reader.transform_outputs(list(_frame().columns)) == list(out.columns)
    empty = reader(_frame().iloc[:0])
    assert len(empty) == 0 and "answer" in empty.columns



def test_confidence_takes_the_rank_column_or_the_row_order(tiny_reader_dir):
    import pyterrier_fandom_colbert as pfc

    cal = ReaderCalibration(slope=0.5, rank_slope=-1.0, threshold=0.3)
    reader = pfc.Reader(tiny_reader_dir, calibration=cal)
    by_order = reader(_frame())  # no rank column: the position among the query's rows
    assert by_order["answer_confidence"].to_numpy() == pytest.approx(
        cal.probability(by_order["answer_score"].to_numpy(), np.array([0, 1, 0])))
    ranked = reader(_frame().assign(rank=[2, 0, 1]))
    assert ranked["answer_score"].tolist() == pytest.approx(by_order["answer_score"].tolist())
    assert ranked["answer_confidence"].to_numpy() == pytest.approx(
        cal.probability(ranked["answer_score"].to_numpy(), np.array([2, 0, 1])))
    per_query = pfc.Reader(tiny_reader_dir, calibration=cal, per_query=True)(_frame().assign(rank=[2, 0, 1]))
    mine = ranked[ranked["qid"] == "1"]
    assert per_query["docno"].iloc[0] == mine.loc[mine["answer_confidence"].idxmax(), "docno"]
    with pytest.raises(ValueError, match="rank column: -1"):
        reader(_frame().assign(rank=[0, -1, 0]))

def test_per_query_rows_take_the_most_confident_passage(tiny_reader_dir):
    import pyterrier_fandom_colbert as pfc

    passages = pfc.Reader(tiny_reader_dir)(_frame())
    per_query = pfc.Reader(tiny_reader_dir, per_query=True)(_frame())
    assert per_query["qid"].tolist() == ["1", "2"]
    for _, row in per_query.iterrows():
        mine = passages[passages["qid"] == row["qid"]]
        top = mine.loc[mine["answer_confidence"].idxmax()]
        assert row["qanswer"] == top["answer"] and row["docno"] == top["docno"]
        assert row["nothing_relevant"] == (top["answer_confidence"] < 0.3)
    assert list(pfc.Reader(tiny_reader_dir, per_query=True)(_frame().iloc[:0]).columns)[:3] == \
        ["qid", "query", "qanswer"]


def test_reader_equality_parameters_and_an_uncalibrated_reader(tiny_reader_dir, tmp_path):
    import shutil

    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.reader.network import load_reader, save_reader

    a, b = pfc.Reader(tiny_reader_dir), pfc.Reader(tiny_reader_dir)
    assert a == b and hash(a) == hash(b) and a != pfc.Reader(tiny_reader_dir, per_query=True)
    assert a.get_parameter("batch_size") == 16
    a.set_parameter("per_query", True)
    assert a.per_query and a == pfc.Reader(tiny_reader_dir, per_query=True)
    with pytest.raises(ValueError, match="precision='half'"):
        pfc.Reader(tiny_reader_dir, precision="half")
    with pytest.raises(FileNotFoundError, match="not a reader folder"):
        pfc.Reader(tmp_path)
    bare = tmp_path / "bare"
    save_reader(load_reader(tiny_reader_dir), bare)
    with pytest.warns(UserWarning, match="no calibration.json"):
        out = pfc.Reader(bare)(_frame())
    assert out["answer_confidence"].isna().all()
    shutil.rmtree(bare)


def test_set_calibration_rewrites_the_folder_with_a_valid_manifest(tiny_reader_dir, tmp_path):
    import shutil

    from pyterrier_fandom_colbert.reader.network import load_reader, reader_integrity, set_calibration

    copy = tmp_path / "r"
    shutil.copytree(tiny_reader_dir, copy)
    set_calibration(copy, ReaderCalibration(slope=2.0, intercept=-1.0, threshold=0.4, fitted_on="x"))
    assert json.loads((copy / "calibration.json").read_text())["slope"] == 2.0
    reader_integrity(copy)
    load_reader(copy)


# -- training -------------------------------------------------------------------------------------------------------
def _squad_file(path, n=12):
    paragraphs = []
    for i in range(n):
        year = 1990 + i
        context = (f"The tower number {i} was built in {year} by the guild. It stands near the river and the old "
                   f"bridge of the town.")
        start = context.index(str(year))
        paragraphs.append({"context": context, "qas": [
            {"id": f"q{i}", "question": f"when was tower number {i} built?",
             "answers": [{"text": str(year), "answer_start": start}]}]})
    path.write_text(json.dumps({"data": [{"title": "Towers", "paragraphs": paragraphs}]}))
    return path


def test_training_resumes_to_the_same_weights_as_an_uninterrupted_run(tiny_bert_dir, tmp_path):
    from pyterrier_fandom_colbert.reader.network import load_reader
    from pyterrier_fandom_colbert.training.reader import ReaderTrainConfig, train_reader

    data = _squad_file(tmp_path / "train.json")
    config = ReaderConfig(base=tiny_bert_dir, frozen_layers=1, max_length=48, question_maxlen=12, stride=16)
    train = ReaderTrainConfig(epochs=3, batch_size=4, checkpoint_every=3, lr=1e-3, amp_dtype=None)
    whole = train_reader(data, tmp_path / "whole", config, train)
    assert train_reader(data, tmp_path / "parts", config, train, stop_after=3) is None
    assert (tmp_path / "parts" / "state.pt").is_file() and not (tmp_path / "parts" / "reader").exists()
    parts = train_reader(data, tmp_path / "parts", config, train)
    a, b = load_reader(whole).own_state(), load_reader(parts).own_state()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    log = [json.loads(line) for line in (tmp_path / "whole" / "log.jsonl").read_text().splitlines()]
    assert log[-1]["loss"] < log[0]["loss"]
    with pytest.raises(ValueError, match="other settings"):
        train_reader(data, tmp_path / "parts", config, ReaderTrainConfig(epochs=1, amp_dtype=None))


def test_pfc_train_reader_refuses_a_missing_file_in_one_line(capsys, tmp_path):
    from pyterrier_fandom_colbert.training.cli import main

    assert main(["reader", "--train", str(tmp_path / "nope.json"), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.json" in err and "file not found" in err


@pytest.mark.parametrize("device", ["cuda:7", "bogus"])
def test_pfc_train_reader_refuses_a_device_it_cannot_use_in_one_line(capsys, tmp_path, device):
    from pyterrier_fandom_colbert.training.cli import main

    data = _squad_file(tmp_path / "train.json")
    assert main(["reader", "--train", str(data), "--out", str(tmp_path / "run"), "--device", device]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and repr(device) in err
    assert not (tmp_path / "run" / "state.pt").exists()


def test_a_warm_start_puts_a_trained_readers_layers_on_top(tiny_reader_dir, tiny_bert_dir):
    from pyterrier_fandom_colbert.reader.network import ReaderModel, base_digest, load_base, load_reader
    from pyterrier_fandom_colbert.training.reader import warm_start

    trained = load_reader(tiny_reader_dir)  # frozen_layers=1: one layer of its own
    base, _ = load_base(tiny_bert_dir)
    config = trained.config.replace(frozen_layers=0)
    model = ReaderModel(base, config)  # two layers of its own
    first = {k: v.clone() for k, v in model.upper[0].state_dict().items()}
    warm_start(model, tiny_reader_dir)
    assert all(torch.equal(v, trained.upper[0].state_dict()[k]) for k, v in model.upper[1].state_dict().items())
    assert all(torch.equal(v, first[k]) for k, v in model.upper[0].state_dict().items())  # still the base's
    assert torch.equal(model.qa.weight, trained.qa.weight)
    with pytest.raises(ValueError, match="more than"):
        warm_start(_one_layer_fewer(base, trained.config), tiny_reader_dir)
    other = ReaderModel(base, config.replace(base_digest="0" * 32))
    with pytest.raises(ValueError, match="another base"):
        warm_start(other, tiny_reader_dir)
    assert base_digest(tiny_bert_dir) == trained.config.base_digest


def _one_layer_fewer(base, config):
    """A reader model with no layer of its own (fewer than the tiny trained reader's one): a config cannot ask
    for it (a reader needs one layer), so its layer list is emptied."""
    from pyterrier_fandom_colbert.reader.network import ReaderModel

    model = ReaderModel(base, config)
    model.upper = model.upper[:0]
    return model


# -- a reader over a loaded ColBERT's backbone ---------------------------------------------------------------------
def _fresh_colbert(tiny_bert_dir):
    import pyterrier_fandom_colbert as pfc

    return pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(dim=16), device="cpu")


def _answers(out):
    return out[["answer_start", "answer_end", "answer_score", "answer_confidence"]].to_numpy()


def test_a_reader_over_its_bases_colbert_shares_the_backbone_with_the_same_answers(tiny_reader_dir, tiny_bert_dir):
    import pyterrier_fandom_colbert as pfc

    colbert = _fresh_colbert(tiny_bert_dir)
    backbone = colbert.model.backbone
    before = {n: t.clone() for n, t in backbone.state_dict().items()}
    alone, shared = pfc.Reader(tiny_reader_dir), pfc.Reader(tiny_reader_dir, colbert=colbert)
    assert shared == alone and not alone.shared
    expected, got = alone(_frame()), shared(_frame())
    assert np.array_equal(_answers(got), _answers(expected)) and got["answer"].tolist() == expected["answer"].tolist()
    model, tokenizer, _ = shared._loaded()
    assert shared.shared and model.base is backbone and tokenizer is colbert.tokenizer.hf
    # borrowed, not owned: not among the reader's parameters or state, and left as it was
    assert not any(p is q for p in model.parameters() for q in backbone.parameters())
    assert all(k.startswith(("upper.", "qa.")) for k in model.state_dict())
    assert all(torch.equal(before[n], t) for n, t in backbone.state_dict().items())
    assert all(torch.equal(a, b) for a, b in zip(model.own_state().values(), alone._loaded()[0].own_state().values()))
    per_query = pfc.Reader(tiny_reader_dir, per_query=True, colbert=colbert)(_frame())
    assert per_query["qanswer"].tolist() == pfc.Reader(tiny_reader_dir, per_query=True)(_frame())["qanswer"].tolist()


def test_a_colbert_whose_lower_layers_differ_is_not_shared(tiny_reader_dir, tiny_bert_dir):
    import copy

    import pyterrier_fandom_colbert as pfc
    from pyterrier_fandom_colbert.reader.network import shares_base

    expected = _answers(pfc.Reader(tiny_reader_dir)(_frame()))
    config = ReaderConfig.load_json(Path(tiny_reader_dir) / "reader_config.json")
    assert config.frozen_layers == 1
    changes = {  # what was done to the encoder's backbone → whether the reader may run on it
        "nothing": (lambda b: None, True),
        "a word embedding, by 1e-6": (lambda b: b.embeddings.word_embeddings.weight[7, 3].add_(1e-6), False),
        "the frozen layer's value bias": (lambda b: b.encoder.layer[0].attention.self.value.bias[0].add_(1e-3), False),
        "the embeddings' layer norm epsilon": (lambda b: setattr(b.embeddings.LayerNorm, "eps", 1e-5), False),
        "a layer the reader has its own copy of": (lambda b: b.encoder.layer[1].output.dense.weight.mul_(2), True),
        "cast to bfloat16": (lambda b: b.to(torch.bfloat16), False),
    }
    colbert = _fresh_colbert(tiny_bert_dir)
    pristine = colbert.model.backbone
    for what, (change, share) in changes.items():
        colbert.model.backbone = copy.deepcopy(pristine)
        with torch.no_grad():
            change(colbert.model.backbone)
        assert shares_base(colbert.model.backbone, config) is share, what
        reader = pfc.Reader(tiny_reader_dir, colbert=colbert)
        assert np.array_equal(_answers(reader(_frame())), expected), what  # either way: the reader's own answers
        assert reader.shared is share and (reader._loaded()[0].base is colbert.model.backbone) is share, what


def test_only_the_bases_own_unchanged_tokenizer_is_shared(tiny_bert_dir, tmp_path):
    import shutil

    from pyterrier_fandom_colbert.reader.network import load_tokenizer
    from pyterrier_fandom_colbert.reader.transformer import shares_tokenizer

    assert shares_tokenizer(load_tokenizer(tiny_bert_dir), tiny_bert_dir)
    added = load_tokenizer(tiny_bert_dir)
    added.add_tokens(["zorblaxian"])
    assert not shares_tokenizer(added, tiny_bert_dir)
    copy = tmp_path / "copy"
    shutil.copytree(tiny_bert_dir, copy)
    assert not shares_tokenizer(load_tokenizer(str(copy)), tiny_bert_dir)
