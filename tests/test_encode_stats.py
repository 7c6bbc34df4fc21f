"""The encoder's own count of its work (``ColBERT.encode_stats``) and the indexer's (``ColBERTIndexer.stats``): the
hooks benchmarks time encoding by, checked against counts worked out here from the corpus and the batch size."""
import math

import pytest
import torch

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.index.writer import IndexingStats
from pyterrier_fandom_colbert.model.colbert import EncodeStats
from pyterrier_fandom_colbert.model.tokenization import windows

CONFIG = pfc.ColBERTConfig(dim=16, doc_maxlen=16, query_maxlen=16)  # 13 word pieces per window
WORDS = ["castle", "dragon", "river", "smith", "blade", "crown", "mountain", "harbour", "merchant", "winter"]
TEXTS = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(n)) for i, n in enumerate([3, 13, 14, 30, 41, 8, 2])]
BATCH = 4
pytestmark = pytest.mark.filterwarnings("ignore:.*were truncated:UserWarning")


@pytest.fixture(scope="module")
def colbert(tiny_bert_dir):
    torch.set_num_threads(2)
    return pfc.ColBERT.from_pretrained(tiny_bert_dir, config=CONFIG, device="cpu", batch_size=BATCH)


def corpus():
    return [{"docno": f"d{i}", "text": t} for i, t in enumerate(TEXTS)]


def expected_windows(colbert, stride):
    """The distinct windows of the corpus (a window whose pieces repeat another's is encoded once) and the number
    of texts read as several windows."""
    size = colbert.tokenizer.max_doc_pieces
    pieces = colbert.tokenizer.document_pieces(TEXTS)
    distinct = {tuple(p[a:b]) for p in pieces for a, b in windows(len(p), size, stride)}
    return len(distinct), sum(len(p) > size for p in pieces)


@pytest.mark.parametrize("long_docs", ["windows", "truncate"])
def test_indexer_stats_count_the_corpus(colbert, tmp_path, long_docs):
    indexer = pfc.ColBERTIndex(tmp_path / "idx").indexer(colbert, long_docs=long_docs)
    assert indexer.stats is None
    indexer.index(corpus())
    stats = indexer.stats
    assert isinstance(stats, IndexingStats)
    n_windows, n_long = expected_windows(colbert, indexer.stride) if long_docs == "windows" else (len(TEXTS), 0)
    assert long_docs == "truncate" or n_long >= 2  # the corpus does have texts read as several windows
    assert stats.passages == len(TEXTS) == len(indexer.index_ref)
    assert stats.windows == n_windows
    assert 0 < stats.forward_seconds <= stats.encode_seconds
    assert stats.tokenise_seconds > 0
    assert stats.tokenise_seconds + stats.encode_seconds <= stats.seconds
    assert stats.after_encoding_seconds >= 0


def test_indexer_stats_are_per_call(colbert, tmp_path):
    """A second index() reports its own work, not the encoder's running total."""
    indexer = pfc.ColBERTIndex(tmp_path / "idx").indexer(colbert, long_docs="truncate", overwrite=True)
    indexer.index(corpus())
    indexer.index(corpus()[:3])
    assert (indexer.stats.passages, indexer.stats.windows) == (3, 3)


def test_encode_stats_count_every_public_path(colbert):
    """encode_pieces (windows), doc_batches and encode_docs all report to the same counter: texts, model inputs and
    forward passes (length-bucketed batches of BATCH inputs)."""
    stride = 9
    before = colbert.encode_stats.copy()
    colbert.encode_pieces(colbert.tokenizer.document_pieces(TEXTS), stride)
    work = colbert.encode_stats - before
    n_windows, _ = expected_windows(colbert, stride)
    assert (work.texts, work.sequences, work.batches) == (len(TEXTS), n_windows, math.ceil(n_windows / BATCH))
    assert work.forward_seconds > 0

    before = colbert.encode_stats.copy()
    list(colbert.doc_batches(TEXTS[:5]))
    colbert.encode_docs(TEXTS[:3])
    work = colbert.encode_stats - before
    assert (work.texts, work.sequences, work.batches) == (8, 8, 2 + 1)

    before = colbert.encode_stats.copy()
    colbert.encode_queries(["a query is not a document"])
    assert colbert.encode_stats - before == EncodeStats()
