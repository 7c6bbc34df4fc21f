"""Long documents: the indexer counts and reports truncated texts, and long_docs="windows" stores every word piece
as overlapping windows of one document, checked against the tokenizer and per-window encodings computed here."""
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.model.scoring import maxsim

CONFIG = pfc.ColBERTConfig(dim=16, doc_maxlen=16, query_maxlen=16)  # 13 word pieces per window
WORDS = [
    "castle", "dragon", "river", "smith", "blade", "crown", "mountain", "harbour", "merchant", "winter", "tower",
    "garden", "bridge", "lantern", "forest",
]
TEXTS = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(n)) for i, n in enumerate([3, 13, 14, 30, 41, 8])]
TOPICS = pd.DataFrame({"qid": ["q1", "q2"], "query": ["the dragon of the mountain", "a lantern on the bridge"]})


@pytest.fixture(scope="module")
def colbert(tiny_bert_dir):
    torch.set_num_threads(2)
    return pfc.ColBERT.from_pretrained(tiny_bert_dir, config=CONFIG, device="cpu", batch_size=4)


def corpus():
    return [{"docno": f"d{i}", "text": t} for i, t in enumerate(TEXTS)]


def pieces(colbert, text):
    """Word pieces of the whole text, by the Hugging Face tokenizer itself."""
    return colbert.tokenizer.hf(text, add_special_tokens=False)["input_ids"]


def spans(length, size, stride):
    """Window spans written out: starts every stride pieces, and a last window that ends at the text's end."""
    if length <= size:
        return [(0, length)]
    out, start = [], 0
    while start + size < length:
        out.append((start, start + size))
        start += stride
    return [*out, (length - size, length)]


@pytest.fixture(scope="module")
def windowed(colbert, tmp_path_factory):
    return pfc.ColBERTIndex(tmp_path_factory.mktemp("w") / "idx").indexer(colbert, long_docs="windows",
                                                                         stride=5).index(corpus())


def test_truncated_documents_are_counted_stored_and_warned(colbert, tmp_path):
    longer = sum(len(pieces(colbert, t)) > 13 for t in TEXTS)
    assert 0 < longer < len(TEXTS)
    with pytest.warns(UserWarning, match=f"{longer} of {len(TEXTS)} documents .* truncated.*long_docs='windows'"):
        index = pfc.ColBERTIndex(tmp_path / "t").indexer(colbert, long_docs="truncate").index(corpus())
    meta = pfc.ColBERTIndex(tmp_path / "t").meta  # read back from pt_meta.json
    assert (meta.truncated_docs, meta.windowed_docs, meta.long_docs, meta.num_parts) == (longer, 0, "truncate", 6)
    assert not (index.path / "parts.i64").exists()
    np.testing.assert_array_equal(index.part_offsets, index.offsets)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing truncated: nothing to say
        short = pfc.ColBERTIndex(tmp_path / "s").indexer(colbert, long_docs="truncate").index(corpus()[:2])
    assert short.meta.truncated_docs == 0


def test_the_default_indexer_keeps_long_texts_whole_without_a_warning(colbert, windowed, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is cut, so nothing to warn about
        index = pfc.ColBERTIndex(tmp_path / "d").indexer(colbert).index(corpus())
    meta = index.meta
    assert (meta.long_docs, meta.truncated_docs, meta.windowed_docs) == ("windows", 0, windowed.meta.windowed_docs)
    assert meta.stride == 8  # two thirds of a 13-piece window, rounded down
    with pytest.warns(UserWarning, match="truncated"):
        truncated = pfc.ColBERTIndex(tmp_path / "t").indexer(colbert, long_docs="truncate").index(corpus())
    assert meta.num_tokens > truncated.meta.num_tokens  # every piece of the long texts is stored


def test_windows_hold_every_piece_encoded_window_by_window(colbert, windowed):
    cls, sep, marker = colbert.tokenizer.hf.cls_token_id, colbert.tokenizer.hf.sep_token_id, \
        colbert.tokenizer.d_marker_id
    meta = windowed.meta
    assert (meta.long_docs, meta.stride, meta.truncated_docs) == ("windows", 5, 0)
    assert meta.windowed_docs == sum(len(pieces(colbert, t)) > 13 for t in TEXTS)
    parts = np.asarray(windowed.part_offsets)
    assert meta.num_parts == len(parts) - 1 and parts[0] == 0 and parts[-1] == meta.num_tokens
    for i, text in enumerate(TEXTS):
        whole = pieces(colbert, text)
        windows = spans(len(whole), 13, 5)
        expected_ids = [t for a, b in windows for t in [cls, marker, *whole[a:b], sep]]
        vectors, ids = windowed.doc_vectors(f"d{i}")
        assert ids.tolist() == expected_ids  # every piece is stored, window after window
        # the document's rows split into its windows at the stored part boundaries
        start, end = windowed.offsets[i], windowed.offsets[i + 1]
        inside = parts[(parts >= start) & (parts <= end)]
        assert np.diff(inside).tolist() == [b - a + 3 for a, b in windows]
        # each window is encoded on its own, exactly as a text of those pieces would be
        fresh = [None] * len(windows)
        for batch in colbert.piece_batches([whole[a:b] for a, b in windows]):
            for pos, v, _ in batch.per_document():
                fresh[pos] = v
        np.testing.assert_allclose(vectors, np.concatenate(fresh), atol=2e-3)
        # and the first window is what encoding the text (truncated) gives
        _, first, _ = next(next(colbert.doc_batches([text])).per_document())
        np.testing.assert_allclose(vectors[:len(first)], first, atol=2e-3)


def test_short_texts_are_stored_alike_in_both_modes(colbert, windowed, tmp_path):
    short = [d for d in corpus() if len(pieces(colbert, d["text"])) <= 13]
    a = pfc.ColBERTIndex(tmp_path / "a").indexer(colbert, long_docs="truncate").index(short)
    b = pfc.ColBERTIndex(tmp_path / "b").indexer(colbert, long_docs="windows").index(short)
    np.testing.assert_array_equal(np.asarray(a.vectors), np.asarray(b.vectors))
    np.testing.assert_array_equal(np.asarray(a.offsets), np.asarray(b.part_offsets))


def test_a_windowed_document_is_one_result_scored_over_all_its_windows(colbert, windowed):
    """One row per docno; the score is MaxSim over the tokens of all its windows (each query token takes its best
    match anywhere in the document), by brute force over the stored vectors."""
    res = windowed.retriever(colbert, num_results=100, lam=1, faiss="exact")(TOPICS)
    Q, mask = colbert.encode_queries(TOPICS["query"].tolist())
    for i, qid in enumerate(TOPICS.qid):
        got = res[res.qid == qid]
        assert sorted(got.docno) == sorted(f"d{j}" for j in range(len(TEXTS)))  # each document once
        expected = {f"d{j}": float(maxsim(Q[i:i + 1], torch.as_tensor(windowed.doc_vectors(j)[0])[None],
                                          mask[i:i + 1], None, CONFIG.similarity, CONFIG.reduction))
                    for j in range(len(TEXTS))}
        np.testing.assert_allclose(got.score.to_numpy(), [expected[d] for d in got.docno], atol=1e-5)
    rescored = windowed.scorer(colbert)(res.drop(columns=["score", "rank", "query_embs", "query_toks"]))
    merged = res.merge(rescored, on=["qid", "docno"], suffixes=("", "_again"))
    np.testing.assert_allclose(merged.score, merged.score_again, atol=1e-5)


@pytest.mark.parametrize("options, message", [
    (dict(long_docs="truncate", stride=5), "stride=5 applies only to long_docs='windows'"),
    (dict(stride=14), r"stride=14; expected an integer from 1 to 13 \(word pieces"),  # windows by default
    (dict(long_docs="windows", stride=14), r"stride=14; expected an integer from 1 to 13 \(word pieces"),
    (dict(long_docs="windows", stride=0), "stride=0"),
    (dict(long_docs="chunks"), "long_docs='chunks'; expected one of"),
])
def test_bad_long_document_options_are_refused(colbert, tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        pfc.ColBERTIndex(tmp_path / "x").indexer(colbert, **options)


@pytest.mark.parametrize("options, message", [
    (dict(long_docs="truncate", stride=5), "stride=5 applies only to long_docs='windows'"),
    (dict(stride=14), r"stride=14; expected an integer from 1 to 13 \(word pieces"),
    (dict(long_docs="chunks"), "long_docs='chunks'; expected one of"),
])
def test_bad_text_scorer_options_are_refused(colbert, options, message):
    with pytest.raises(ValueError, match=message):
        colbert.text_scorer(**options)


def candidates():
    """Every (topic, document) pair with the document's text: a re-ranker's input."""
    frame = TOPICS.merge(pd.DataFrame(corpus()), how="cross")
    return frame[["qid", "query", "docno", "text"]]


def test_text_scorer_reads_long_texts_whole_as_the_windowed_index_stores_them(colbert, windowed):
    """From text, window by window (batches of 4 windows here), the same scores as the windowed index's scorer gives
    from its stored (fp16) vectors; truncated, the same as a truncating index; and the two modes differ exactly on
    the texts longer than one window."""
    frame = candidates()
    by_text = colbert.text_scorer(stride=5)(frame).set_index(["qid", "docno"])["score"]
    by_index = windowed.scorer(colbert)(frame.drop(columns="text")).set_index(["qid", "docno"])["score"]
    np.testing.assert_allclose(by_text.loc[by_index.index], by_index, atol=2e-3)

    with pytest.warns(UserWarning, match="truncated"):
        cut_index = pfc.ColBERTIndex(windowed.path.parent / "cut").indexer(colbert, long_docs="truncate").index(
            corpus())
    cut_text = colbert.text_scorer(long_docs="truncate")(frame).set_index(["qid", "docno"])["score"]
    cut = cut_index.scorer(colbert)(frame.drop(columns="text")).set_index(["qid", "docno"])["score"]
    np.testing.assert_allclose(cut_text.loc[cut.index], cut, atol=2e-3)

    long = {f"d{i}" for i, t in enumerate(TEXTS) if len(pieces(colbert, t)) > 13}
    for (qid, docno), score in by_text.items():
        if docno in long:  # more tokens to match: MaxSim over a superset of the first window's tokens
            assert score >= cut_text[qid, docno] - 1e-5
        else:
            assert score == pytest.approx(cut_text[qid, docno], abs=2e-3)
    assert any(by_text[q, d] > cut_text[q, d] + 1e-4 for q, d in by_text.index if d in long)


def test_text_scorer_settings_are_part_of_its_identity(colbert):
    default = colbert.text_scorer()
    assert default == colbert.text_scorer(stride=8) and default.stride == 8  # two thirds of 13 pieces
    assert default != colbert.text_scorer(long_docs="truncate") and default != colbert.text_scorer(stride=5)
    assert "long_docs='truncate'" in repr(colbert.text_scorer(long_docs="truncate")) and "stride=8" in repr(default)
    assert colbert.text_scorer()(candidates().iloc[:0]).empty


# -- explanations of long texts -------------------------------------------------------------------------------------
def explain_frame(docs=None):
    docs = corpus() if docs is None else docs
    return TOPICS.merge(pd.DataFrame(docs), how="cross")[["qid", "query", "docno", "text"]]


def test_explainer_lays_every_window_over_the_whole_text(colbert):
    """Each layout position's similarity is its best window's, computed here window by window; every piece of the
    text is explained, and the explanation's MaxSim is the text scorer's score of the whole text."""
    from pyterrier_fandom_colbert.explain.transformer import Explainer
    from pyterrier_fandom_colbert.model.scoring import similarity_matrix

    frame = explain_frame()
    out = Explainer(colbert, stride=5)(frame)
    scores = colbert.text_scorer(stride=5)(frame).set_index(["qid", "docno"])["score"]
    tok = colbert.tokenizer
    for _, row in out.iterrows():
        p = pieces(colbert, row["text"])
        assert len(row["expl_tokens"]) == len(p) + 3          # [CLS] [D] every piece [SEP]
        q, q_mask = colbert.encode_queries([row["query"]])
        q = q[0][q_mask[0]]
        want = np.full((len(q), len(p) + 3), -np.inf)
        for a, b in spans(len(p), 13, 5):
            (vecs, ids, _), = colbert.encode_pieces([p[a:b]])
            packed = tok.pack_documents([p[a:b]])
            where = np.array([0, 1, *range(2 + a, 2 + b), len(p) + 2])[packed.score_mask[0, :b - a + 3]]
            np.testing.assert_array_equal(packed.input_ids[0, :b - a + 3][packed.score_mask[0, :b - a + 3]], ids)
            sim = similarity_matrix(q, torch.from_numpy(vecs), colbert.config.similarity).numpy()
            for r, pos in enumerate(where):
                want[:, pos] = np.maximum(want[:, pos], sim[:, r])
        shown = np.where(np.isinf(want), np.nan, want)
        np.testing.assert_allclose(row["expl_sim"], shown, atol=1e-5)
        maxsim_mean = np.nanmax(row["expl_sim"], axis=1).mean()
        assert maxsim_mean == pytest.approx(scores[row["qid"], row["docno"]], abs=1e-5)
        np.testing.assert_array_equal(row["expl_offsets"][2:-1],
                                      tok.hf(row["text"], add_special_tokens=False,
                                             return_offsets_mapping=True)["offset_mapping"])


def test_explainer_truncating_reads_the_first_window_only(colbert):
    from pyterrier_fandom_colbert.explain.transformer import Explainer

    frame = explain_frame()
    out = Explainer(colbert, long_docs="truncate")(frame)
    cut = colbert.text_scorer(long_docs="truncate")(frame).set_index(["qid", "docno"])["score"]
    for _, row in out.iterrows():
        assert len(row["expl_tokens"]) == min(len(pieces(colbert, row["text"])), 13) + 3
        assert np.nanmax(row["expl_sim"], axis=1).mean() == pytest.approx(cut[row["qid"], row["docno"]], abs=1e-5)


def test_explainer_over_a_windowed_index_equals_the_text_path(colbert, windowed, tmp_path):
    """The index's settings are followed (its vectors are what is explained): stored fp16 windows give the text
    path's similarities; options that disagree with the index are refused, naming both."""
    from pyterrier_fandom_colbert.explain.transformer import Explainer

    frame = explain_frame()
    from_index = Explainer(colbert, index=windowed)(frame)
    from_text = Explainer(colbert, stride=5)(frame)
    for (_, a), (_, b) in zip(from_index.iterrows(), from_text.iterrows()):
        assert a["expl_tokens"] == b["expl_tokens"]
        np.testing.assert_allclose(a["expl_sim"], b["expl_sim"], atol=5e-3)
    assert Explainer(colbert, index=windowed) == Explainer(colbert, index=windowed, long_docs="windows", stride=5)
    with pytest.raises(ValueError, match=r"long_docs='truncate'.*disagree with the index.*long_docs='windows', "
                                         r"stride=5"):
        Explainer(colbert, index=windowed, long_docs="truncate")
    with pytest.raises(ValueError, match=r"stride=7.*disagree"):
        Explainer(colbert, index=windowed, stride=7)
    with pytest.warns(UserWarning, match="truncated"):
        cut = pfc.ColBERTIndex(tmp_path / "cut").indexer(colbert, long_docs="truncate").index(corpus())
    truncated = Explainer(colbert, index=cut)(frame)
    plain = Explainer(colbert, long_docs="truncate")(frame)
    for (_, a), (_, b) in zip(truncated.iterrows(), plain.iterrows()):
        assert a["expl_tokens"] == b["expl_tokens"]
        np.testing.assert_allclose(a["expl_sim"], b["expl_sim"], atol=5e-3)
    # a text other than the one indexed: named, with how the index reads texts
    wrong = frame.assign(text=lambda f: f["text"] + " river")
    with pytest.raises(ValueError, match=r"docno 'd0'.*as windows 5 pieces apart.*give the text that was indexed"):
        Explainer(colbert, index=windowed)(wrong)


def test_explainer_settings_are_part_of_its_identity(colbert):
    from pyterrier_fandom_colbert.explain.transformer import Explainer

    default = Explainer(colbert)
    assert default == Explainer(colbert, stride=8) and default.stride == 8
    assert default != Explainer(colbert, long_docs="truncate") and default != Explainer(colbert, stride=5)
    assert "long_docs='truncate'" in repr(Explainer(colbert, long_docs="truncate")) and "stride=8" in repr(default)
    with pytest.raises(ValueError, match="stride=99"):
        Explainer(colbert, stride=99)


@pytest.mark.parametrize("backbone", ["bert", "roberta"])
def test_whole_texts_are_tokenised_past_the_models_maximum_length(backbone, tiny_bert_dir, tiny_roberta_dir):
    """Whole-text pieces with offsets are every piece (not cut at the tokenizer's model_max_length) and agree with
    the pieces the indexer counts, and with the truncating path on the first window."""
    folder = tiny_bert_dir if backbone == "bert" else tiny_roberta_dir
    tok = pfc.ColBERT.from_pretrained(folder, config=CONFIG).tokenizer
    text = " ".join(WORDS[i % len(WORDS)] + ("," if i % 7 == 0 else "") for i in range(700))
    (ids,), (offsets,) = tok.whole_document_content([text], offsets=True)
    assert list(ids) == tok.document_pieces([text])[0]
    assert len(ids) > max(700, tok.hf.model_max_length if tok.hf.model_max_length < 10**6 else 0)
    (cut,), (cut_offsets,) = tok.document_content([text], offsets=True)
    assert list(ids[:13]) == list(cut) and [tuple(o) for o in offsets[:13]] == [tuple(o) for o in cut_offsets]
    want = tok.hf(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]  # the wrapper's own
    assert [tuple(o) for o in offsets] == [tuple(o) for o in want]


def test_encoding_reports_its_work_after_every_layer_of_every_batch(colbert):
    """The indexer's progress bar moves by this hook after every encoder layer, not once per batch (nor per 1,024
    texts): each call is one layer's share of a batch's texts (a window counts as its share of its text)."""
    all_pieces = colbert.tokenizer.document_pieces(TEXTS)
    size = colbert.tokenizer.max_doc_pieces
    # the distinct windows: one that repeats another's pieces is encoded once
    windows = len({tuple(p[a:b]) for p in all_pieces for a, b in spans(len(p), size, 5)})
    assert windows > colbert.batch_size  # several batches, long texts spread over them
    calls = []
    reported = colbert.encode_pieces(all_pieces, 5, done=calls.append)
    assert sum(calls) == pytest.approx(len(TEXTS))
    layers = colbert.model.num_layers()
    assert layers == 2 and len(calls) == layers * -(-windows // colbert.batch_size)
    assert calls[0] == calls[1]  # a batch's layers report equal shares
    for (v, i, p), (v2, i2, p2) in zip(reported, colbert.encode_pieces(all_pieces, 5)):
        np.testing.assert_array_equal(v, v2)
        np.testing.assert_array_equal(i, i2)
        assert p == p2


def test_fp16_encoding_is_the_float32_result_rounded_window_by_window(colbert):
    """``encode_pieces(dtype=np.float16)``, what index builds ask (no float32 copy of a whole chunk held): the same
    bits as rounding the float32 result, for windowed texts (concatenated windows) and repeated ones alike."""
    all_pieces = colbert.tokenizer.document_pieces(TEXTS + TEXTS[:2])  # the repeats get their own copies
    assert any(len(p) > colbert.tokenizer.max_doc_pieces for p in all_pieces)
    half = colbert.encode_pieces(all_pieces, 5, dtype=np.float16)
    full = colbert.encode_pieces(all_pieces, 5)
    assert len(half) == len(full) == len(all_pieces)
    for (v, i, p), (v2, i2, p2) in zip(half, full):
        assert v.dtype == np.float16 and v2.dtype == np.float32
        np.testing.assert_array_equal(v.view(np.uint16), v2.astype(np.float16).view(np.uint16))
        np.testing.assert_array_equal(i, i2)
        assert p == p2
    assert half[-1][0] is not half[0][0] and not np.shares_memory(half[-1][0], half[0][0])
