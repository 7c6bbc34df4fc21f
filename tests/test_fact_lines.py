"""Made-up "key: value" questions for the reader (training/fact_lines.py): every gold answer is a whole field of
its passage, at its offset, in articles that give the trainer negatives; seeded; mixed into reader training."""
import json
from collections import defaultdict

import pytest

from pyterrier_fandom_colbert.reader.squad import SquadQuestion
from pyterrier_fandom_colbert.training.fact_lines import fact_line_questions


def _base():
    rows = []
    for i, (title, who, year) in enumerate([("Ember Hall", "Ada Lind", "1902"), ("North Gate", "Oskar Brun", "1871"),
                                            ("Grey Mill", "Tove Ek", "1950")]):
        context = f"{title} is an old building in the valley. It was built by {who} in {year} for the town council."
        rows.append(SquadQuestion(f"q{i}", title, 0, context, f"Who built {title}?", ((who, context.index(who)),)))
    return rows


def test_every_answer_is_a_whole_field_at_its_offset():
    made = fact_line_questions(_base(), 300, seed=2)
    assert len(made) == 300
    for q in made:
        (text, start), = q.answers
        assert q.context[start:start + len(text)] == text
        before, after = q.context[max(0, start - 2):start], q.context[start + len(text):start + len(text) + 2]
        # a value follows "key: "; a row's name (the "which ... has" questions) opens its row or follows "Header: "
        assert before in (": ", ". ") or start == 0, (q.context, text)
        assert after in ("", ";", "; ", ". ", ".", " \u2014") or after.startswith(";"), (q.context, text)
        assert ";" not in text


def test_articles_have_passages_that_do_not_answer_and_the_draw_is_seeded():
    made = fact_line_questions(_base(), 200, seed=5)
    passages = defaultdict(set)
    for q in made:
        passages[q.title].add(q.paragraph)
    last = made[-1].title
    assert all(len(p) >= 2 for t, p in passages.items() if t != last)
    assert [(q.question, q.context) for q in fact_line_questions(_base(), 200, seed=5)] == \
        [(q.question, q.context) for q in made]
    assert [q.context for q in fact_line_questions(_base(), 200, seed=6)] != [q.context for q in made]


def test_bad_counts_and_empty_pools_are_refused():
    assert fact_line_questions(_base(), 0) == []
    with pytest.raises(ValueError, match="n=-1"):
        fact_line_questions(_base(), -1)
    with pytest.raises(ValueError, match="no names"):
        fact_line_questions([], 3)


def test_reader_training_mixes_them_in(tiny_bert_dir, tmp_path):
    from pyterrier_fandom_colbert.reader.config import ReaderConfig
    from pyterrier_fandom_colbert.training.reader import ReaderTrainConfig, train_reader

    paragraphs = [{"context": q.context, "qas": [{"id": q.qid, "question": q.question,
                                                  "answers": [{"text": q.answers[0][0],
                                                               "answer_start": q.answers[0][1]}]}]} for q in _base()]
    data = tmp_path / "train.json"
    data.write_text(json.dumps({"data": [{"title": "Buildings", "paragraphs": paragraphs}]}))
    config = ReaderConfig(base=tiny_bert_dir, frozen_layers=1, max_length=64, question_maxlen=16, stride=24)
    folder = train_reader(data, tmp_path / "run", config,
                          ReaderTrainConfig(epochs=1, batch_size=4, fact_lines=9, amp_dtype=None))
    assert folder is not None
    assert json.loads((folder / "training.json").read_text())["questions"] == 3 + 9
    assert json.loads((tmp_path / "run" / "train_config.json").read_text())["train"]["fact_lines"] == 9
