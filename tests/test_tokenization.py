"""Query/document layouts of docs/method.md §1.2-§1.3 for BERT and RoBERTa vocabularies."""
import pytest

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.model.tokenization import ColBERTTokenizer


def _tokenizer(folder, **cfg):
    from transformers import AutoTokenizer

    config = pfc.ColBERTConfig(**cfg)
    hf = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    added = ColBERTTokenizer.add_marker_tokens(hf, config)
    return ColBERTTokenizer(hf, config), hf, added


@pytest.fixture(params=["bert", "roberta"])
def tok(request, tiny_bert_dir, tiny_roberta_dir):
    folder = tiny_bert_dir if request.param == "bert" else tiny_roberta_dir
    return _tokenizer(folder, query_maxlen=12, doc_maxlen=10)


def test_bert_uses_unused_ids_roberta_adds_tokens(tiny_bert_dir, tiny_roberta_dir):
    t, hf, added = _tokenizer(tiny_bert_dir)
    assert added == 0
    assert hf.convert_ids_to_tokens([t.q_marker_id, t.d_marker_id]) == ["[unused0]", "[unused1]"]
    t, hf, added = _tokenizer(tiny_roberta_dir)
    assert added == 2
    assert hf.convert_ids_to_tokens([t.q_marker_id, t.d_marker_id]) == ["[Q]", "[D]"]
    assert {t.q_marker_id, t.d_marker_id}.isdisjoint({hf.cls_token_id, hf.sep_token_id, hf.mask_token_id})


def test_query_layout_is_exactly_nq_with_mask_padding(tok):
    t, hf, _ = tok
    batch = t.queries(["when was it released", "who"])
    assert batch.input_ids.shape == (2, 12)
    assert batch.attention_mask.all(), "query augmentation masks are attended to"
    for row, text in zip(batch.input_ids, ["when was it released", "who"]):
        content = hf(text, add_special_tokens=False)["input_ids"]
        n = len(content)
        assert row[0] == hf.cls_token_id and row[1] == t.q_marker_id
        assert list(row[2:2 + n]) == content
        assert row[2 + n] == hf.sep_token_id
        assert (row[3 + n:] == hf.mask_token_id).all()


def test_long_query_truncated_keeping_sep(tok):
    t, hf, _ = tok
    batch = t.queries(["word " * 50])
    row = batch.input_ids[0]
    assert len(row) == 12 and row[-1] == hf.sep_token_id
    assert hf.mask_token_id not in row


def test_unscored_masks_option(tiny_bert_dir):
    t, hf, _ = _tokenizer(tiny_bert_dir, query_maxlen=12, score_query_masks=False)
    batch = t.queries(["a castle"])
    n = 3 + len(hf("a castle", add_special_tokens=False)["input_ids"])
    assert batch.score_mask[0].tolist() == [True] * n + [False] * (12 - n)


def test_document_layout_unpadded_length(tok):
    t, hf, _ = tok
    texts = ["short", "a somewhat longer passage about the castle and its river folk builders"]
    batch = t.documents(texts)
    for i, text in enumerate(texts):
        content = hf(text, add_special_tokens=False)["input_ids"]
        expect_len = min(len(content) + 3, 10)
        assert batch.lengths[i] == expect_len
        row = batch.input_ids[i]
        assert row[0] == hf.cls_token_id and row[1] == t.d_marker_id
        assert row[expect_len - 1] == hf.sep_token_id, "truncation keeps the closing separator"
        assert list(row[2:expect_len - 1]) == content[:expect_len - 3]
        assert batch.attention_mask[i].sum() == expect_len
        assert not batch.score_mask[i, expect_len:].any(), "padding never scores"


def test_empty_and_non_ascii_documents(tiny_bert_dir):
    t, _, _ = _tokenizer(tiny_bert_dir)
    batch = t.documents(["", "Héloïse visited Zürich — naïve café"], offsets=True)
    assert batch.lengths[0] == 3
    text = "Héloïse visited Zürich — naïve café"
    spans = [text[s:e] for s, e in batch.offsets[1] if e > s]
    assert "".join(spans).replace(" ", "") == text.replace(" ", "")


def test_punctuation_skipping(tiny_bert_dir):
    t, _, _ = _tokenizer(tiny_bert_dir, skip_punctuation=True)
    batch = t.documents(["Wait, what?! Yes."])
    toks = t.tokens(batch.input_ids[0][batch.score_mask[0]])
    assert toks == ["[CLS]", "[D]", "wait", "what", "yes", "[SEP]"]


def test_offset_free_path_gives_the_wrappers_pieces_whatever_its_truncation_state(tok):
    t, hf, _ = tok
    texts = ["The Ember Crown was forged in the year 412, after the flood.", "", "   ", "naïve café — 東京 🐉!",
             " ".join(["word"] * 40), "[Q] and [D] written out in text", "tabs\tand\nnewlines"]
    for max_content in (3, 7, 50):
        wrapper = hf(texts, add_special_tokens=False, truncation=True, max_length=max_content)["input_ids"]
        assert t._content_ids(texts, max_content, offsets=False) == (wrapper, None)
    # a wrapper call with a short max_length leaves truncation set on hf's backend; the fast path is unaffected
    hf(texts, add_special_tokens=False, truncation=True, max_length=2)
    assert t._content_ids(texts[:1], 50, offsets=False)[0][0] == hf(texts[:1], add_special_tokens=False)["input_ids"][0]
    with_offsets, offsets = t._content_ids(texts, 7, offsets=True)
    assert with_offsets == t._content_ids(texts, 7, offsets=False)[0] and len(offsets) == len(texts)
