"""Encoding on a CPU: the precisions against float32, batching by length against one text at a time, and progress
bars that move within a model batch."""
import numpy as np
import pandas as pd
import pytest
import torch

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.model.colbert import CPU_PRECISIONS
from pyterrier_fandom_colbert.progress import Ticker, paced_ranges

CONFIG = pfc.ColBERTConfig(dim=16, doc_maxlen=32, query_maxlen=16)
WORDS = ["castle", "dragon", "river", "smith", "blade", "crown", "mountain", "harbour", "merchant", "winter",
         "tower", "garden", "bridge", "lantern", "forest", "queen"]
# lengths from 2 to 40 words, in no order, so that length sorting reorders them across batches
TEXTS = [" ".join(WORDS[(7 * i + j) % len(WORDS)] for j in range(2 + (13 * i) % 39)) for i in range(24)]
#: float32 against the other precisions, on the tiny random model's normalised vectors (components <= 1). Measured
#: there: bfloat16 1e-4, int8 5e-4 at most; the real model's deviations are in docs/experiments/app.md.
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-3, "int8": 5e-3}


@pytest.fixture(scope="module")
def reference(tiny_bert_dir):
    torch.set_num_threads(2)
    return pfc.ColBERT.from_pretrained(tiny_bert_dir, config=CONFIG, device="cpu", batch_size=5)


def one_at_a_time(colbert, texts):
    """The reference path: each text alone (no padding, no sorting), through transformers' own BertModel."""
    out = []
    for text in texts:
        batch = colbert.tokenizer.documents([text])
        with torch.inference_mode():
            hidden = colbert.model.backbone(input_ids=torch.as_tensor(batch.input_ids),
                                            attention_mask=torch.as_tensor(batch.attention_mask)).last_hidden_state
            out.append(colbert.model.head(hidden)[0][torch.as_tensor(batch.score_mask[0])].numpy())
    return out


@pytest.mark.parametrize("precision", CPU_PRECISIONS)
def test_length_sorted_batches_match_texts_encoded_alone_in_input_order(reference, precision):
    colbert = pfc.ColBERT(reference.model, reference.tokenizer, device="cpu", batch_size=5, cpu_precision=precision)
    expected = one_at_a_time(reference, TEXTS)
    got = colbert.encode_docs(TEXTS)
    assert [len(g) for g in got] == [len(e) for e in expected]  # each text's own tokens, in input order
    worst = max(float(np.abs(g - e).max()) for g, e in zip(got, expected))
    assert worst <= TOLERANCE[precision]
    if precision != "float32":  # the precision is really applied: the vectors are not float32's
        assert worst > 1e-6
    doc_embs = colbert.doc_encoder()(pd.DataFrame({"docno": [str(i) for i in range(len(TEXTS))], "text": TEXTS}))
    for row, vecs in zip(doc_embs["doc_embs"], got):
        np.testing.assert_array_equal(row, vecs)


def test_int8_copy_runs_through_the_fast_path_as_through_transformers(reference):
    colbert = pfc.ColBERT(reference.model, reference.tokenizer, device="cpu", batch_size=5, cpu_precision="int8")
    fast = colbert.encode_docs(TEXTS)
    copy = colbert._int8_model
    assert copy is not None and copy.fast_inference and reference.model.fast_inference
    assert type(reference.model.backbone.encoder.layer[0].intermediate.dense) is torch.nn.Linear  # not quantized
    copy.fast_inference = False
    try:
        slow = colbert.encode_docs(TEXTS)
    finally:
        copy.fast_inference = True
    for a, b in zip(fast, slow):
        np.testing.assert_allclose(a, b, atol=1e-5)
    colbert.weights_changed()  # training changed the weights: the copy is made again
    assert colbert._int8_model is None


def test_precision_is_part_of_encoder_equality_but_not_of_the_fingerprint(reference):
    int8 = pfc.ColBERT(reference.model, reference.tokenizer, device="cpu", cpu_precision="int8")
    assert int8.fingerprint() == reference.fingerprint()  # an index built in int8 takes float32 queries
    assert int8.query_encoder() != reference.query_encoder()
    assert int8.doc_encoder() == pfc.ColBERT(reference.model, reference.tokenizer, cpu_precision="int8").doc_encoder()
    assert "cpu_precision='int8'" in repr(int8) and "cpu_precision" not in repr(reference)


@pytest.mark.parametrize("kwargs, message", [
    ({"cpu_precision": "fp16"}, "cpu_precision='fp16'; expected one of .* or 'auto'"),
    ({"cpu_precision": "int8", "device": "cuda"}, "the device is cuda; there amp_dtype sets it"),
])
def test_bad_precision_is_refused_naming_it(reference, kwargs, message):
    with pytest.raises(ValueError, match=message):
        pfc.ColBERT(reference.model, reference.tokenizer, **kwargs)


def test_auto_precision_is_bfloat16_only_on_a_cpu_with_native_bf16(reference):
    from pyterrier_fandom_colbert.model.colbert import native_bf16

    auto = pfc.ColBERT(reference.model, reference.tokenizer, device="cpu", cpu_precision="auto")
    assert auto.cpu_precision == ("bfloat16" if native_bf16() else "float32")


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class RecordingBar:
    """A progress bar that records when (on a fake clock) it was moved, and by how much."""

    def __init__(self, clock, **kwargs):
        self.clock, self.moves, self.total = clock, [], kwargs.get("total")

    def update(self, n=1):
        self.moves.append((self.clock(), n))

    def set_postfix(self, *args, **kwargs):
        pass

    def close(self):
        pass


def test_indexing_bar_moves_within_every_model_batch(reference, tmp_path, monkeypatch):
    """A fake slow encoder: each of the two layers takes 0.6 s of a fake clock, so a batch takes 1.2 s. The bar
    must move at least once per second of that work; a bar moved once per model batch would not."""
    from pyterrier_fandom_colbert.index import writer

    colbert = pfc.ColBERT(reference.model, reference.tokenizer, device="cpu", batch_size=8)
    clock, bars = Clock(), []

    def slow_layer(*_):
        clock.now += 0.6

    def recording_progress(**kwargs):
        bars.append(RecordingBar(clock, **kwargs))
        return bars[-1]

    monkeypatch.setattr(writer, "progress", recording_progress)
    monkeypatch.setattr(colbert.model, "fast_inference", False)  # through transformers' layers, which hooks see
    hooks = [layer.register_forward_hook(slow_layer) for layer in colbert.model.backbone.encoder.layer]
    try:
        records = [{"docno": f"d{i}", "text": t} for i, t in enumerate(TEXTS)]
        pfc.ColBERTIndex(tmp_path / "idx").indexer(colbert, verbose=True, ann=None, batch_size=12).index(records)
    finally:
        for hook in hooks:
            hook.remove()
    (bar,) = bars
    assert sum(n for _, n in bar.moves) == len(TEXTS) == bar.total
    times = [0.0] + [t for t, _ in bar.moves]
    assert clock.now >= 1.2 * len(TEXTS) / 8  # every batch took 1.2 s
    assert max(np.diff(times)) <= 1.0, bar.moves


def test_encoder_bar_moves_every_layer_on_the_fast_path(reference, monkeypatch):
    """``ColBERT(verbose=True)``'s own bar, on the fast BERT path: one batch of all the texts moves it after each
    of its two layers, and it ends on the exact count."""
    import pyterrier_fandom_colbert.progress as progress_module

    colbert = pfc.ColBERT(reference.model, reference.tokenizer, device="cpu", batch_size=len(TEXTS), verbose=True)
    assert colbert.model.fast_inference
    bars = []
    monkeypatch.setattr(progress_module, "progress", lambda **kw: bars.append(RecordingBar(Clock(), **kw)) or bars[-1])
    colbert.encode_docs(TEXTS)
    (bar,) = bars
    assert [n for _, n in bar.moves] == [len(TEXTS) // 2, len(TEXTS) // 2]


def test_ticker_counts_whole_units_and_settles_exactly():
    bar = RecordingBar(Clock())
    ticker = Ticker(bar)
    for _ in range(3):
        ticker.add(10 / 3)  # 3.33, 6.67, 10.0 (9.999… in floating point)
    assert [n for _, n in bar.moves] == [3, 3, 4]
    ticker.add(0.5)
    ticker.settle(10)  # the batch is done: back to the exact count, the half unit dropped
    ticker.add(0.6)
    assert sum(n for _, n in bar.moves) == 10
    ticker.add(0.4)
    assert sum(n for _, n in bar.moves) == 11


def test_tfidf_retrieval_in_paced_batches_ranks_as_in_full_batches(tmp_path):
    """With a bar, TF-IDF retrieval may split its query batches (paced_ranges); the results are the same."""
    docs = [{"docno": f"d{i}", "text": t} for i, t in enumerate(TEXTS)]
    index = pfc.TfidfIndex(tmp_path / "tfidf")
    index.indexer().index(docs)
    topics = pd.DataFrame({"qid": [f"q{i}" for i in range(7)], "query": [WORDS[i] + " " + WORDS[i + 3]
                                                                         for i in range(7)]})
    whole = index.retriever(num_results=5, batch_size=256)(topics)
    single = index.retriever(num_results=5, batch_size=1)(topics)
    pd.testing.assert_frame_equal(whole, single)
    assert list(paced_ranges(7, 256, enabled=True, clock=iter(np.arange(0.0, 10.0, 1.0)).__next__)) == \
        [(0, 7)]
    assert list(paced_ranges(7, 4, enabled=True, target=0.5,
                             clock=iter([0.0, 1.0] + [1.0] * 10).__next__)) == [(0, 4), (4, 6), (6, 7)]


@pytest.mark.parametrize("flags, native", [
    (["fpu", "avx2", "avx512f", "avx512_vnni"], False),  # AVX-512 without BF16 (e.g. Ice Lake, Zen 3 has none)
    (["avx2", "avx512f", "avx512_bf16"], True),  # Cooper Lake, Zen 4
    (["avx2", "amx_tile", "amx_bf16", "amx_int8"], True),  # Sapphire Rapids
    (["avx2", "amx_tile", "amx_int8"], False),  # AMX without its bf16 part
    ([], False),
])
def test_native_bf16_is_read_from_the_cpu_flags(flags, native, tmp_path, monkeypatch):
    from pyterrier_fandom_colbert.model import colbert as colbert_module

    assert colbert_module.bf16_is_native(flags) is native
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {' '.join(flags)}\n\nprocessor\t: 1\n"
                       "flags\t\t: avx512_bf16\n")
    assert colbert_module.cpu_flags(cpuinfo) == flags  # the first CPU's
    assert colbert_module.cpu_flags(tmp_path / "missing") is None
    monkeypatch.setattr(colbert_module, "cpu_flags", lambda: flags)
    assert colbert_module.native_bf16() is native


def test_native_bf16_asks_torch_where_there_are_no_cpu_flags(monkeypatch):
    from pyterrier_fandom_colbert.model import colbert as colbert_module

    monkeypatch.setattr(colbert_module, "cpu_flags", lambda: None)
    for answer in (True, False):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda answer=answer: answer, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
        assert colbert_module.native_bf16() is answer


def autocast_over_float32(model, batch):
    """What bfloat16 encoding computed before the bf16 copy: autocast rounding the float32 weights every pass."""
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = model.hidden(torch.as_tensor(batch.input_ids), torch.as_tensor(batch.attention_mask))
    with torch.inference_mode():
        return model.head(hidden.float())


def test_bfloat16_weight_copy_gives_exactly_autocasts_vectors_and_follows_weight_changes(reference):
    import copy

    model = copy.deepcopy(reference.model)  # its weights are changed below
    colbert = pfc.ColBERT(model, reference.tokenizer, device="cpu", batch_size=5, cpu_precision="bfloat16")
    for batch in (colbert.tokenizer.queries(TEXTS[:3]), colbert.tokenizer.documents(TEXTS[:7])):
        assert torch.equal(colbert._forward(batch), autocast_over_float32(model, batch))
    bf16 = colbert._bf16_model[0]
    dense = bf16.backbone.encoder.layer[0].intermediate.dense
    assert dense.weight.dtype == torch.bfloat16 and model.backbone.encoder.layer[0].intermediate.dense.weight.dtype \
        == torch.float32  # the model itself is unchanged
    assert bf16.backbone.embeddings.word_embeddings.weight is model.backbone.embeddings.word_embeddings.weight
    assert bf16.projection.weight is model.projection.weight  # only the Linear layers of the backbone are copied
    batch = colbert.tokenizer.queries(TEXTS[:3])
    before = colbert._forward(batch)
    with torch.no_grad():  # an optimizer step changes weights in place
        model.backbone.encoder.layer[1].output.dense.weight.mul_(1.5)
    after = colbert._forward(batch)
    assert colbert._bf16_model[0] is not bf16 and not torch.equal(after, before)
    assert torch.equal(after, autocast_over_float32(model, batch))


def test_repeated_windows_are_encoded_once_and_get_the_same_vectors(reference):
    """Texts that repeat (whole, or one window of a long text repeating another text) are encoded once; every
    text gets exactly the vectors it gets when encoded on its own (batch size 1: no padding either way)."""
    colbert = pfc.ColBERT(reference.model, reference.tokenizer, device="cpu", batch_size=1)
    long = " ".join(TEXTS[20:24])  # several windows at the tiny model's 29 pieces
    texts = [TEXTS[3], long, TEXTS[3], TEXTS[5], long, TEXTS[3]]
    pieces = colbert.tokenizer.document_pieces(texts)
    stride = 10
    alone = [colbert.encode_pieces([p], stride)[0] for p in pieces]
    before, shares = colbert.encode_stats.copy(), []
    together = colbert.encode_pieces(pieces, stride, done=shares.append)
    spent = colbert.encode_stats - before
    windows_of_long = len(alone[1][2])
    assert windows_of_long >= 3
    assert spent.sequences == 2 + windows_of_long  # TEXTS[3], TEXTS[5] and the long text's windows, once each
    assert spent.texts == len(texts) and sum(shares) == pytest.approx(len(texts))
    for (v, i, rows), (v1, i1, rows1) in zip(together, alone):
        np.testing.assert_array_equal(v, v1)
        np.testing.assert_array_equal(i, i1)
        assert rows == rows1
    assert together[0][0] is not together[2][0]  # a repeat has its own copy
    batched = pfc.ColBERT(reference.model, reference.tokenizer, device="cpu", batch_size=4)
    for (v, _, _), (v1, _, _) in zip(batched.encode_pieces(pieces, stride), alone):  # padding: float32 noise only
        np.testing.assert_allclose(v, v1, atol=1e-5)
