"""Command-line tools: a user error is one line on stderr and exit status 2, no traceback (``--debug`` shows it).
The tools run in-process (``main(argv)``); every case fails before any data or model is loaded, or, for the
missing dump, while only the dump is looked for (no network: the dump is named by its environment variable)."""
import os
import subprocess
import sys

import pytest

from pyterrier_fandom_colbert.app.compare import main as compare
from pyterrier_fandom_colbert.cli_errors import UserError, run
from pyterrier_fandom_colbert.training.cli import main as train


def one_line_error(capsys, prog: str, status: int) -> str:
    """The single stderr line of a user error, after checking the exit status and that no traceback was shown."""
    err = capsys.readouterr().err
    assert status == 2, err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture()
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "irds"))
    (tmp_path / "a-file").write_text("not a folder")
    return tmp_path


def test_compare_unknown_dataset(folder, capsys):
    line = one_line_error(capsys, "pfc-compare", compare(["--dataset", "no-such/dataset", "--out", str(folder / "o")]))
    assert "--dataset no-such/dataset: unknown dataset" in line and "fandom-qa/sample/test" in line


def test_compare_dataset_without_questions(folder, capsys):
    line = one_line_error(capsys, "pfc-compare", compare(["--dataset", "fandom-qa/starwars", "--out",
                                                         str(folder / "o")]))
    assert "has no queries or qrels" in line and "fandom-qa/sample/test" in line


@pytest.mark.parametrize("metrics, expected", [("RR@10,Bogus@3", "'Bogus@3' is not an ir_measures measure"),
                                               ("R@", "'R@' is not an ir_measures measure"),
                                               ("", "names no measure"), (" , ", "names no measure")])
def test_compare_bad_metrics(folder, capsys, metrics, expected):
    line = one_line_error(capsys, "pfc-compare", compare(["--metrics", metrics, "--out", str(folder / "o")]))
    assert expected in line and "RR@10" in line  # says what would do


def test_compare_missing_checkpoint(folder, capsys):
    missing = folder / "runs" / "best"
    line = one_line_error(capsys, "pfc-compare", compare(["--checkpoint", str(missing), "--out", str(folder / "o")]))
    assert f"--checkpoint {missing}: no such folder" in line and "leave --checkpoint out" in line


def test_compare_output_is_a_file(folder, capsys):
    line = one_line_error(capsys, "pfc-compare", compare(["--out", str(folder / "a-file")]))
    assert "is a file; give a folder" in line
    assert one_line_error(capsys, "pfc-compare", compare(["--k", "0"])).endswith("expected a positive number of "
                                                                                 "results")


def test_train_unknown_or_missing_data(folder, capsys):
    out = str(folder / "run")
    line = one_line_error(capsys, "pfc-train", train(["--dataset", "no-such/dataset", "--out", out]))
    assert "unknown dataset" in line and "SQuAD-format .json" in line
    line = one_line_error(capsys, "pfc-train", train(["--dataset", str(folder / "train.json"), "--out", out]))
    assert "no such SQuAD-format .json file" in line
    line = one_line_error(capsys, "pfc-train", train(["--dataset", "fandom-qa/sample/train", "--dev",
                                                      "fandom-qa/starwars", "--out", out]))
    assert "--dev fandom-qa/starwars: the dataset has no queries or qrels" in line
    assert "give training data with --dataset" in one_line_error(capsys, "pfc-train", train(["--out", out]))
    assert not (folder / "run").exists()  # nothing was started


def test_train_missing_dump(folder, capsys, monkeypatch):
    monkeypatch.setenv("FANDOM_QA_DUMP_STARWARS", str(folder / "starwars_pages_current.xml.7z"))
    line = one_line_error(capsys, "pfc-train", train(["--selfsup", "fandom-qa/starwars", "--out",
                                                      str(folder / "run")]))
    assert "FANDOM_QA_DUMP_STARWARS=" in line and "names no file; point it at" in line


def test_train_missing_selfsup_dump_file(folder, capsys):
    line = one_line_error(capsys, "pfc-train", train(["--selfsup", str(folder / "mywiki_pages_current.xml.bz2"),
                                                      "--out", str(folder / "run")]))
    assert "--selfsup" in line and "mywiki_pages_current.xml.bz2: no such dump file" in line
    assert not (folder / "run").exists()


def test_train_missing_checkpoint(folder, capsys):
    line = one_line_error(capsys, "pfc-train", train(["--dataset", "fandom-qa/sample/train", "--init",
                                                      str(folder / "nope"), "--out", str(folder / "run")]))
    assert "--init" in line and "no such folder" in line


def test_train_bad_levers(folder, capsys, tiny_roberta_dir):
    base = ["--dataset", "fandom-qa/sample/train", "--out", str(folder / "run")]
    line = one_line_error(capsys, "pfc-train", train([*base, "--negative-checkpoint", str(folder / "nope"),
                                                         "--negative-source", "colbert"]))
    assert "--negative-checkpoint" in line and "no such folder" in line
    line = one_line_error(capsys, "pfc-train", train([*base, "--teacher", "hybrid", "--distill-weight", "1",
                                                         "--teacher-checkpoint", str(folder / "nope")]))
    assert "--teacher-checkpoint" in line and "no such folder" in line
    line = one_line_error(capsys, "pfc-train", train([*base, "--teacher-weight", "0.3"]))
    assert "only used with teacher='hybrid'" in line
    line = one_line_error(capsys, "pfc-train", train([*base, "--freeze-layers", "-2"]))
    assert "freeze_layers=-2; expected 0 or more" in line
    line = one_line_error(capsys, "pfc-train", train([*base, "--init", tiny_roberta_dir, "--freeze-layers", "1",
                                                         "--negatives", "1", "--negative-source", "random"]))
    assert "needs a BERT backbone" in line and "RobertaModel" in line


def test_train_resume_and_existing_runs(folder, capsys):
    run_dir = folder / "run"
    args = ["--dataset", "fandom-qa/sample/train", "--out", str(run_dir)]
    line = one_line_error(capsys, "pfc-train", train([*args, "--resume"]))
    assert "holds no training run to continue" in line and "leave out --resume" in line
    run_dir.mkdir()
    (run_dir / "trainer_state.pt").write_bytes(b"")  # what marks a run (trainer.STATE_FILE)
    line = one_line_error(capsys, "pfc-train", train(args))
    assert "already holds a training run; add --resume" in line
    line = one_line_error(capsys, "pfc-train", train(["--dataset", "fandom-qa/sample/train", "--out",
                                                      str(folder / "a-file")]))
    assert "is a file; give a folder" in line


def test_debug_shows_the_traceback(folder, capsys):
    status = compare(["--metrics", "", "--out", str(folder / "o"), "--debug"])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" in err and "UserError" in err
    assert err.strip().split("\n")[-1].startswith("pfc-compare: error: --metrics '' names no measure")


def test_other_errors_keep_their_traceback(capsys):
    def broken(argv):
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        run(broken, [], "pfc-demo")

    def os_error(argv):
        raise FileNotFoundError(2, "No such file or directory", "/x/y.json")

    assert run(os_error, [], "pfc-demo") == 2
    assert capsys.readouterr().err == ("pfc-demo: error: /x/y.json: No such file or directory (--debug shows the "
                                       "traceback)\n")

    def interrupted(argv):
        raise KeyboardInterrupt

    assert run(interrupted, [], "pfc-demo") == 130
    assert capsys.readouterr().err == "pfc-demo: interrupted\n"
    with pytest.raises(UserError):  # the exception class is what main() raises, for callers that want it
        raise UserError("x")


def test_cli_errors_imports_nothing_heavy():
    # what importing the module adds to what importing the package loads anyway
    code = ("import sys, pyterrier_fandom_colbert; before = set(sys.modules); "
            "import pyterrier_fandom_colbert.cli_errors; "
            "print(sorted(m for m in set(sys.modules) - before if m.startswith('pyterrier_fandom_colbert')), "
            "sorted(m for m in ('torch', 'transformers', 'faiss') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # (the package may load it already: its optional parts name their extra through require_extra)
    assert done.stdout in ("['pyterrier_fandom_colbert.cli_errors'] []\n", "[] []\n")


@pytest.mark.parametrize("name", ["ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"])
@pytest.mark.parametrize("given", [None, "64"])
def test_pfc_bounds_the_kernel_caches_unless_told_otherwise(folder, capsys, monkeypatch, given, name):
    """``pfc`` sets oneDNN's and ideep's cache capacities (build memory, docs/folder.md) only where the user has
    not."""
    from pyterrier_fandom_colbert.app.cli import main
    from pyterrier_fandom_colbert.heap import KERNEL_CACHES

    monkeypatch.setenv(name, given or "")  # restored after the test
    if given is None:
        monkeypatch.delenv(name)
    one_line_error(capsys, "pfc search", main(["search", str(folder / "no-such-folder"), "a question"]))
    assert os.environ[name] == (given or str(KERNEL_CACHES[name])) == (given or "32")
