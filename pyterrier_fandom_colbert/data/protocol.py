"""The evaluation protocol's split of SQuAD-format data by article: train / selection / report.

* **report**: every article of the dev file. Touched only for final tables.
* **selection**: ``n_selection`` articles of the train file, chosen by a seeded hash of their titles (stable across
  machines and Python versions, and independent of the articles' order). Chooses fusion weights and checkpoints.
* **train**: the remaining train articles. The only ones a model may be trained on.

Questions never cross parts: every SQuAD question belongs to one paragraph of one article. See docs/fusion.md.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple, Union

from ..storage import write_json

#: the protocol's defaults: 4 of the 24 shared train articles are held out for selection
SELECTION_ARTICLES = 4
SELECTION_SEED = 0


def selection_articles(titles: Sequence[str], n: int = SELECTION_ARTICLES, seed: int = SELECTION_SEED) -> List[str]:
    """The ``n`` titles with the smallest SHA-256 of ``f"{seed}:{title}"``, in that order.

    >>> selection_articles(["Rhine", "Oxygen", "Kenya", "Force"], n=2)
    ['Force', 'Rhine']
    >>> selection_articles(["Force", "Kenya", "Oxygen", "Rhine"], n=2)  # the input order does not matter
    ['Force', 'Rhine']
    """
    titles = list(titles)
    if len(set(titles)) != len(titles):
        dup = sorted({t for t in titles if titles.count(t) > 1})
        raise ValueError(f"article titles must be unique to split by article; repeated: {dup[:5]}")
    if not 0 <= n <= len(titles):
        raise ValueError(f"n={n} selection articles requested from {len(titles)} articles")
    return sorted(titles, key=lambda t: hashlib.sha256(f"{seed}:{t}".encode()).hexdigest())[:n]


@dataclass(frozen=True)
class ProtocolSplit:
    """Article titles of each part, and where they come from."""

    train: Tuple[str, ...]
    selection: Tuple[str, ...]
    report: Tuple[str, ...]
    train_file: str
    dev_file: str
    seed: int

    def part_of(self, title: str) -> str:
        for part in ("train", "selection", "report"):
            if title in getattr(self, part):
                return part
        raise KeyError(f"article {title!r} is in neither {self.train_file} nor {self.dev_file}")


def _titles(path: Path) -> List[str]:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ValueError(f"{path}: not SQuAD format (expected an object with a 'data' list of articles)")
    return [str(a.get("title", "")) for a in data["data"]]


def squad_protocol(train_file: Union[str, Path], dev_file: Union[str, Path], n_selection: int = SELECTION_ARTICLES,
                   seed: int = SELECTION_SEED) -> ProtocolSplit:
    """Split the articles of a SQuAD train file and a dev file into the protocol's three parts."""
    train_titles, dev_titles = _titles(Path(train_file)), _titles(Path(dev_file))
    shared = set(train_titles) & set(dev_titles)
    if shared:
        raise ValueError(f"articles {sorted(shared)[:5]} are in both {train_file} and {dev_file}")
    selection = selection_articles(train_titles, n_selection, seed)
    return ProtocolSplit(tuple(t for t in train_titles if t not in selection), tuple(selection), tuple(dev_titles),
                         str(train_file), str(dev_file), seed)


def write_squad_subset(source: Union[str, Path], titles: Sequence[str], target: Union[str, Path]) -> Path:
    """Write the articles of ``source`` whose titles are in ``titles`` as a SQuAD-format file (e.g. the protocol's
    train part, for ``pfc-train --dataset``)."""
    with open(source, encoding="utf-8") as f:
        data = json.load(f)
    wanted = set(titles)
    articles = [a for a in data["data"] if a.get("title") in wanted]
    missing = wanted - {a.get("title") for a in articles}
    if missing:
        raise ValueError(f"{source} has no article(s) titled {sorted(missing)[:5]}")
    return write_json(target, {**{k: v for k, v in data.items() if k != "data"}, "data": articles})


def write_training_parts(split: ProtocolSplit, folder: Union[str, Path]) -> Tuple[Path, Path]:
    """The train and selection parts of ``split`` written as SQuAD-format files ``train-part.json`` and
    ``selection-part.json`` in ``folder`` (created if missing), for ``pfc-train --dataset`` / ``--dev``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return (write_squad_subset(split.train_file, split.train, folder / "train-part.json"),
            write_squad_subset(split.train_file, split.selection, folder / "selection-part.json"))


def part_counts(split: ProtocolSplit) -> Dict[str, Dict[str, int]]:
    """Articles, paragraphs and questions of each part (reads the two files)."""
    counts: Dict[str, Dict[str, int]] = {}
    for path in (split.train_file, split.dev_file):
        with open(path, encoding="utf-8") as f:
            for article in json.load(f)["data"]:
                part = counts.setdefault(split.part_of(article.get("title", "")),
                                         {"articles": 0, "paragraphs": 0, "questions": 0})
                part["articles"] += 1
                part["paragraphs"] += len(article["paragraphs"])
                part["questions"] += sum(len(p["qas"]) for p in article["paragraphs"])
    return counts
