"""`pfc verify`: the full content check from the command line, for each artifact and for a search folder."""
import numpy as np

from pyterrier_fandom_colbert.app.cli import main
from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
from pyterrier_fandom_colbert.lexical.tfidf import TfidfIndex
from pyterrier_fandom_colbert.model.config import ColBERTConfig

DOCS = [{"docno": f"d{i}", "text": f"the castle of king {w} stands by the river"} for i, w in
        enumerate(["orrin", "vel", "amara", "emberfall"])]


def _folder(tmp_path):
    tfidf = TfidfIndex(tmp_path / "tfidf")
    tfidf.indexer(store_text=True).index(DOCS)
    with ColBERTIndex(tmp_path / "colbert").writer(ColBERTConfig(dim=8), fingerprint="synthetic") as writer:
        rng = np.random.default_rng(0)
        for doc in DOCS:
            writer.add(doc["docno"], rng.normal(size=(5, 8)).astype(np.float32), np.arange(5))
    return tmp_path


def _flip_last_byte(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_verify_an_intact_search_folder_and_each_index(tmp_path, capsys):
    folder = _folder(tmp_path)
    assert main(["verify", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "tfidf intact" in out and "colbert intact" in out
    assert main(["verify", str(folder / "colbert")]) == 0


def test_verify_names_the_damaged_file_in_one_line(tmp_path, capsys):
    folder = _folder(tmp_path)
    _flip_last_byte(folder / "colbert" / "vectors.f16")  # same size: only the full check can see it
    assert main(["verify", str(folder), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "vectors.f16" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_verify_refuses_a_folder_without_artifacts(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    assert main(["verify", str(tmp_path)]) == 2
    assert "holds no ColBERT index" in capsys.readouterr().err
