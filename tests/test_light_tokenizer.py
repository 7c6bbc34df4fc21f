"""The light tokenizer (``tokenizers`` alone) against transformers' own, and the rule that falls back to it."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.model.colbert import DEFAULT_CHECKPOINT
from pyterrier_fandom_colbert.model.light_tokenizer import (
    LightTokenizer,
    light_tokenizer_refusal,
    load_light_tokenizer,
)
from pyterrier_fandom_colbert.model.tokenization import ColBERTTokenizer

TEXTS = [
    "Who forged the blade of Vel Amara?",
    "",
    "   ",
    "Héloïse visited Zürich and São Paulo; naïve café, CAFÉ, cafe\u0301 (combining accent).",
    "東京 and 北京: 日本語のテキスト, emoji 🐉🔥, Ελληνικά, русский, العربية, \u200b zero width, tab\tnew\nline",
    "[CLS] [SEP] [MASK] [PAD] <s> </s> <mask> [unused0] [unused1] [Q] [D] ##ing",
    "don't stop—it's 3.14159, e.g. U.S.A.; $100,000 @user #tag http://x.org/a?b=c&d=e",
    " ".join(f"word{i} supercalifragilisticexpialidocious" for i in range(300)),  # very long
    "x" * 150 + " " + "y" * 99,  # words past and at WordPiece's 100-character limit
]


def _folders(tiny_bert_dir, tiny_roberta_dir):
    return {"shipped": str(DEFAULT_CHECKPOINT / "backbone"), "tiny-bert": tiny_bert_dir,
            "tiny-roberta": tiny_roberta_dir}


@pytest.fixture(scope="module", params=["shipped", "tiny-bert", "tiny-roberta"])
def pair(request, tiny_bert_dir, tiny_roberta_dir):
    """(light tokenizer, transformers' AutoTokenizer) of one backbone folder."""
    from transformers import AutoTokenizer

    folder = _folders(tiny_bert_dir, tiny_roberta_dir)[request.param]
    assert light_tokenizer_refusal(folder) is None
    light = load_light_tokenizer(folder)
    assert isinstance(light, LightTokenizer)
    return light, AutoTokenizer.from_pretrained(folder, use_fast=True, local_files_only=True)


def _listed(offsets):
    return [[tuple(o) for o in row] for row in offsets]


def test_same_ids_offsets_and_truncation_as_transformers(pair):
    light, hf = pair
    for kwargs in ({}, {"return_offsets_mapping": True}, {"truncation": True, "max_length": 5},
                   {"truncation": True, "max_length": 29, "return_offsets_mapping": True}):
        want = hf(TEXTS, add_special_tokens=False, **kwargs)
        got = light(TEXTS, add_special_tokens=False, **kwargs)
        assert got["input_ids"] == want["input_ids"], kwargs
        if "return_offsets_mapping" in kwargs:
            assert _listed(got["offset_mapping"]) == _listed(want["offset_mapping"]), kwargs
    assert max(len(ids) for ids in light(TEXTS, add_special_tokens=False)["input_ids"]) > 512


def test_same_vocabulary_special_tokens_and_strings_as_transformers(pair):
    light, hf = pair
    for name in ("cls_token_id", "sep_token_id", "mask_token_id", "pad_token_id", "unk_token_id"):
        assert getattr(light, name) == getattr(hf, name) is not None, name
    assert light.get_vocab() == hf.get_vocab()
    assert (len(light), light.vocab_size) == (len(hf), hf.vocab_size)
    assert set(light.all_special_tokens) == set(hf.all_special_tokens)
    ids = list(range(len(hf)))
    tokens = hf.convert_ids_to_tokens(ids)
    assert light.convert_ids_to_tokens(ids) == tokens
    assert light.convert_ids_to_tokens(7) == hf.convert_ids_to_tokens(7)
    assert [light.convert_tokens_to_string([t]) for t in tokens] == [hf.convert_tokens_to_string([t]) for t in tokens]
    assert json.loads(light.backend_tokenizer.to_str())["model"] == json.loads(hf.backend_tokenizer.to_str())["model"]
    assert Path(light.name_or_path) == Path(hf.name_or_path)


def test_colbert_layouts_are_the_same_over_either_tokenizer(pair):
    light, hf = pair
    config = pfc.ColBERTConfig(query_maxlen=12, doc_maxlen=24, skip_punctuation=True)
    if "[unused0]" not in hf.get_vocab():  # RoBERTa: the markers a saved ColBERT checkpoint would have added
        pytest.skip("this vocabulary has no marker tokens (a RoBERTa checkpoint adds them; tested below)")
    a, b = ColBERTTokenizer(light, config), ColBERTTokenizer(hf, config)
    qa, qb = a.queries(TEXTS), b.queries(TEXTS)
    da, db = a.documents(TEXTS, offsets=True), b.documents(TEXTS, offsets=True)
    for x, y in ((qa, qb), (da, db)):
        for field in ("input_ids", "attention_mask", "score_mask", "lengths"):
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field))
    assert all(np.array_equal(x, y) for x, y in zip(da.offsets, db.offsets))
    assert a.whole_document_content(TEXTS, offsets=True)[1] == b.whole_document_content(TEXTS, offsets=True)[1]
    assert a.document_pieces(TEXTS) == b.document_pieces(TEXTS)
    np.testing.assert_array_equal(a.skipped_ids(), b.skipped_ids())
    assert a.tokens(da.input_ids[3]) == b.tokens(db.input_ids[3])


def test_a_roberta_checkpoint_loads_its_markers_and_layouts_without_transformers(tmp_path, tiny_roberta_dir):
    pfc.ColBERT.from_pretrained(tiny_roberta_dir).save_pretrained(tmp_path / "ckpt")
    light = pfc.ColBERT.from_pretrained(tmp_path / "ckpt", inference_only=True)
    full = pfc.ColBERT.from_pretrained(tmp_path / "ckpt")
    assert isinstance(light.tokenizer.hf, LightTokenizer) and not isinstance(full.tokenizer.hf, LightTokenizer)
    a, b = light.tokenizer, full.tokenizer
    assert (a.q_marker_id, a.d_marker_id) == (b.q_marker_id, b.d_marker_id)
    np.testing.assert_array_equal(a.queries(TEXTS).input_ids, b.queries(TEXTS).input_ids)
    da, db = a.documents(TEXTS, offsets=True), b.documents(TEXTS, offsets=True)
    np.testing.assert_array_equal(da.input_ids, db.input_ids)
    assert all(np.array_equal(x, y) for x, y in zip(da.offsets, db.offsets))


def test_the_readers_question_and_passage_pairs_read_the_same(tiny_reader_dir):
    from pyterrier_fandom_colbert.reader.network import load_reader, load_tokenizer
    from pyterrier_fandom_colbert.reader.reading import read_pairs

    model = load_reader(tiny_reader_dir)
    light, full = load_tokenizer(model.config.base, light=True), load_tokenizer(model.config.base)
    assert isinstance(light, LightTokenizer) and not isinstance(full, LightTokenizer)
    questions = ["Who forged the blade?", "Où est Zürich?", "", "Who forged the blade?"] * 2
    passages = TEXTS[:len(questions)]
    a, b = read_pairs(model, light, questions, passages), read_pairs(model, full, questions, passages)
    for field in ("start", "end", "span_score", "null_score"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_what_it_does_not_implement_is_an_error_not_other_ids(pair):
    light, _ = pair
    with pytest.raises(ValueError, match="without special tokens"):
        light(["x"])
    with pytest.raises(ValueError, match="explicit max_length"):
        light(["x"], add_special_tokens=False, truncation=True)
    with pytest.raises(AttributeError):
        light.save_pretrained  # noqa: B018  (training and saving keep transformers' tokenizer)


def _copy(tiny_bert_dir, tmp_path, **config_changes) -> Path:
    folder = tmp_path / "bb"
    shutil.copytree(tiny_bert_dir, folder)
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config.update(config_changes)
    path.write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("changes, why", [
    ({"do_lower_case": False}, "normalizer"),  # tokenizer.json lowercases; transformers would not
    ({"strip_accents": True}, "normalizer"),
    ({"truncation_side": "left"}, "truncation_side"),
    ({"tokenizer_class": "DistilBertTokenizer"}, "tokenizer_class"),
    ({"some_new_option": 1}, "some_new_option"),
    ({"additional_special_tokens": ["[unused5]"]}, "additional_special_tokens"),
    ({"mask_token": "[unused7]"}, "special tokens"),
])
def test_anything_it_cannot_prove_equal_falls_back_to_transformers(tiny_bert_dir, tmp_path, changes, why):
    from transformers import AutoTokenizer

    from pyterrier_fandom_colbert.reader.network import load_tokenizer

    folder = _copy(tiny_bert_dir, tmp_path, **changes)
    assert why in light_tokenizer_refusal(folder)
    assert load_light_tokenizer(folder) is None
    assert not isinstance(load_tokenizer(str(folder), light=True), LightTokenizer)
    if changes == {"do_lower_case": False}:  # what reading tokenizer.json as it is would have got wrong
        from tokenizers import Tokenizer

        raw = Tokenizer.from_file(str(folder / "tokenizer.json")).encode("CASTLE", add_special_tokens=False).ids
        assert raw != AutoTokenizer.from_pretrained(folder, local_files_only=True)("CASTLE", add_special_tokens=False)[
            "input_ids"]


def _slow_only(backbone: Path) -> None:
    """Turn a BERT backbone folder into one with ``vocab.txt`` and no ``tokenizer.json``."""
    vocab = json.loads((backbone / "tokenizer.json").read_text())["model"]["vocab"]
    (backbone / "vocab.txt").write_text("".join(f"{t}\n" for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])))
    (backbone / "tokenizer.json").unlink()


def test_a_folder_without_tokenizer_json_loads_transformers_tokenizer(tiny_bert_dir, tmp_path):
    from pyterrier_fandom_colbert.reader.network import load_tokenizer

    pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(dim=8)).save_pretrained(tmp_path / "ckpt")
    before = pfc.ColBERT.from_pretrained(tmp_path / "ckpt", inference_only=True)
    assert isinstance(before.tokenizer.hf, LightTokenizer)
    _slow_only(tmp_path / "ckpt" / "backbone")
    (tmp_path / "ckpt" / "manifest.json").unlink()
    assert "no tokenizer.json" in light_tokenizer_refusal(tmp_path / "ckpt" / "backbone")
    assert not isinstance(load_tokenizer(str(tmp_path / "ckpt" / "backbone"), light=True), LightTokenizer)
    with pytest.warns(UserWarning):
        after = pfc.ColBERT.from_pretrained(tmp_path / "ckpt", inference_only=True, unchecked=True)
    assert not isinstance(after.tokenizer.hf, LightTokenizer)
    np.testing.assert_array_equal(after.tokenizer.queries(TEXTS).input_ids, before.tokenizer.queries(TEXTS).input_ids)


def test_a_search_through_searcher_never_imports_transformers(tmp_path, tiny_bert_dir, tiny_reader_dir):
    from pyterrier_fandom_colbert.app.folder import build_folder

    colbert = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(dim=16))
    colbert.save_pretrained(tmp_path / "ckpt")
    records = [{"docno": f"d{i}", "text": t, "title": f"T{i}", "url": f"https://example.org/{i}", "section": "",
                "page_id": i} for i, t in enumerate(TEXTS[:7]) if t.strip()]
    build_folder(records, tmp_path / "wiki", colbert=colbert, checkpoint=str(tmp_path / "ckpt"))
    code = ("import sys\nfrom pyterrier_fandom_colbert.app.search import Searcher\n"
            f"s = Searcher({str(tmp_path / 'wiki')!r}, reader={tiny_reader_dir!r})\n"
            "for system in ('tfidf', 'colbert', 'hybrid'):\n"
            "    assert s.search('who forged the blade', system=system)['results']\n"
            "print(type(s.colbert.tokenizer.hf).__name__,\n"
            "      sorted(m for m in sys.modules if m.startswith('transformers')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "LightTokenizer []"
