"""SQuAD-format question files (``.json`` or ``.json.bz2``) as answer-span records."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, List, NamedTuple, Tuple, Union

from ..storage.files import read_input_json


class SquadQuestion(NamedTuple):
    """One question with its paragraph and gold answers (``(text, character start)`` each)."""

    qid: str
    title: str
    paragraph: int       # index of the paragraph within its article
    context: str
    question: str
    answers: Tuple[Tuple[str, int], ...]


def read_squad_questions(path: Union[str, Path]) -> List[SquadQuestion]:
    """Every question of a SQuAD v1.1 file, in file order. Errors name the file and what was expected."""
    return list(iter_squad_questions(path))


def iter_squad_questions(path: Union[str, Path]) -> Iterator[SquadQuestion]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SQuAD file not found: {path}")
    data = read_input_json(path, "SQuAD JSON file")
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list):
        raise ValueError(f"{path}: expected a SQuAD JSON object with a 'data' list of articles")
    for article in articles:
        title = str(article.get("title", ""))
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            context = paragraph["context"]
            for qa in paragraph.get("qas", []):
                answers = []
                for answer in qa.get("answers", []):
                    text, start = answer["text"], int(answer["answer_start"])
                    if context[start:start + len(text)] != text:
                        raise ValueError(f"{path}: question {qa['id']!r}: answer {text!r} is not at character "
                                         f"{start} of its paragraph")
                    answers.append((text, start))
                yield SquadQuestion(str(qa["id"]), title, p, context, qa["question"], tuple(answers))
