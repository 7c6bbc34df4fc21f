"""Made-up "key: value" questions for the reader, in the shape a folder gives a wiki's facts and tables.

A wiki's infobox becomes a facts passage (``"Title — born: 19 BBY; species: Human. Prose ..."``) and each table row
a line of ``"header: cell; header: cell."`` (:mod:`..data.infobox`, :mod:`..data.wikitables`). SQuAD has no such
text, so a reader trained on it alone answers "how much does X cost?" with part of a value, or with a value of the
wrong row. :func:`fact_line_questions` makes such passages and questions from the training file itself: entity
names from its article titles and capitalised answers, text values from its answers, prose from its paragraphs,
numbers, dates and durations drawn at random, and keys from a small generic bank (:data:`KEYS`) with a few
phrasings each. The gold answer is always a whole value (or, for "which ... has ...", a whole row's name).

No text of any evaluation wiki goes in; the key bank is encyclopedic and game vocabulary, some of it written
after reading the PokéClicker fact questions' passages (docs/experiments/reader.md says which). Seeded: the
same questions and seed give the same records.

>>> from pyterrier_fandom_colbert.reader.squad import SquadQuestion
>>> base = [SquadQuestion("q1", "Ember Hall", 0, "Ember Hall is a castle. It was built by Ada Lind in 1902.",
...                       "Who built Ember Hall?", (("Ada Lind", 32),))]
>>> made = fact_line_questions(base, 20, seed=1)
>>> len(made), all(q.context[s:s + len(t)] == t for q in made for t, s in q.answers)
(20, True)
"""
from __future__ import annotations

import random
import re
from typing import Callable, List, Sequence, Tuple

from ..data.infobox import facts_text
from ..reader.squad import SquadQuestion

__all__ = ["KEYS", "fact_line_questions"]

Rng = random.Random


def _count(rng: Rng) -> str:
    return f"{int(10 ** rng.uniform(0, 7)):,}"


def _decimal(rng: Rng) -> str:
    return f"{rng.uniform(0, 100):.{rng.choice([1, 2, 3])}f}"


def _percent(rng: Rng) -> str:
    return f"{rng.uniform(0, 100):.{rng.choice([0, 1, 2])}f}%"


def _duration(rng: Rng) -> str:
    h, m, s = rng.randint(0, 48), rng.randint(0, 59), rng.randint(0, 59)
    return rng.choice([f"{h}h {m}m {s}s", f"{m} minutes {s} seconds", f"{h} hours", f"{rng.uniform(0.1, 9):.2f}s",
                       f"{h}:{m:02d}:{s:02d}", f"{rng.randint(1, 30)} days"])


def _date(rng: Rng) -> str:
    month = rng.choice(["January", "February", "March", "April", "May", "June", "July", "August", "September",
                        "October", "November", "December"])
    year = rng.randint(1500, 2030)
    return rng.choice([f"{rng.randint(1, 28)} {month} {year}", f"{month} {rng.randint(1, 28)}, {year}", str(year),
                       f"{month} {year}"])


def _amount(rng: Rng) -> str:
    unit = rng.choice(["coins", "gold", "credits", "points", "gems", "shards", "tokens", "crystals", "items",
                       "copies", "members", "metres", "kg", "km", "seats", "pieces", "berries", "ore"])
    colour = rng.choice(["", "", "", "Red ", "Blue ", "Green ", "Silver ", "Ancient "])
    return f"{_count(rng)} {colour}{unit}"


def _multiplier(rng: Rng) -> str:
    return rng.choice([f"x{rng.uniform(1, 5):.{rng.choice([1, 2])}f}", f"+{rng.randint(1, 300)}%",
                       f"x{rng.uniform(1, 3):.1f} {rng.choice(['Damage', 'Speed', 'Money Earned', 'Experience'])}"])


def _range(rng: Rng) -> str:
    a = rng.randint(1, 5000)
    return rng.choice([f"{a} - {a + rng.randint(1, 5000)}", f"{a}-{a + rng.randint(1, 500)}",
                       f"1/{rng.randint(2, 9000)}", f"{a} to {a + rng.randint(1, 900)}"])


class _Pools:
    """What the training file lends: entity names, text values, prose."""

    def __init__(self, questions: Sequence[SquadQuestion]):
        titles = {q.title.replace("_", " ") for q in questions}
        answers = {a for q in questions for a, _ in q.answers if 0 < len(a) <= 40 and ";" not in a}
        self.names = sorted(titles | {a for a in answers if re.fullmatch(r"[A-Z][\w'.-]*( [A-Z0-9][\w'.-]*){0,3}",
                                                                          a) and not a[:1].isdigit()})
        self.phrases = sorted(a for a in answers if 1 <= len(a.split()) <= 7)
        self.prose = sorted({q.context for q in questions if 150 <= len(q.context) <= 900})
        if not self.names or not self.phrases:
            raise ValueError("fact_line_questions: the training questions give no names or answers to build from")

    def name(self, rng: Rng) -> str:
        return rng.choice(self.names)

    def phrase(self, rng: Rng) -> str:
        return rng.choice(self.phrases)

    def requirement(self, rng: Rng) -> str:
        verb = rng.choice(["Defeat", "Clear", "Reach", "Capture", "Complete", "Unlock", "Find", "Buy", "Win at"])
        return f"{verb} {self.name(rng)}" if rng.random() < 0.7 else f"{verb} {_count(rng)} {self.phrase(rng)}"


Values = Callable[[Rng, _Pools], str]
#: (key labels, value maker, question phrasings): ``{e}`` the entity, ``{k}`` the key as shown
KEYS: List[Tuple[Tuple[str, ...], Values, Tuple[str, ...]]] = [
    (("cost", "price", "Cost", "Price"), lambda r, p: _pick(r, _count, _amount),
     ("How much does {e} cost?", "What's the price of {e}?", "How expensive is {e}?", "How much is {e}?")),
    (("location", "Location", "found in", "where"), lambda r, p: _pick(r, p.name, lambda q: _where(q, p)),
     ("Where is {e}?", "Where can I find {e}?", "Where is {e} located?", "Where do I find {e}?")),
    (("region", "Region", "area"), lambda r, p: p.name(r), ("Which region is {e} in?", "In what area is {e}?")),
    (("released", "release date", "Release date", "first appeared"), lambda r, p: _date(r),
     ("When was {e} released?", "When did {e} come out?", "When did {e} first appear?")),
    (("born", "Born", "date of birth"), lambda r, p: _date(r), ("When was {e} born?", "What's {e}'s birthday?")),
    (("developer", "Developer", "author", "creator", "Created by"), lambda r, p: p.name(r),
     ("Who made {e}?", "Who created {e}?", "Who developed {e}?", "Who is the author of {e}?")),
    (("leader", "Leader", "owner", "ruler"), lambda r, p: p.name(r), ("Who leads {e}?", "Who owns {e}?")),
    (("duration", "time", "Time", "growth time", "cooldown"), lambda r, p: _duration(r),
     ("How long does {e} take?", "How long is the {k} of {e}?", "How long until {e} is ready?")),
    (("chance", "Chance", "rate", "drop rate", "odds"), lambda r, p: _pick(r, _percent, _range),
     ("What's the chance of {e}?", "How likely is {e}?", "What are the odds of getting {e}?")),
    (("HP", "health", "Health", "hit points"), lambda r, p: _count(r),
     ("How much HP does {e} have?", "How much health does {e} have?")),
    (("attack", "Attack", "damage", "power", "Min. Attack"), lambda r, p: _count(r),
     ("How strong is {e}?", "How much damage does {e} do?", "What attack does {e} need?")),
    (("level", "Level", "required level"), lambda r, p: str(r.randint(1, 100)),
     ("What level is {e}?", "At what level is {e} unlocked?")),
    (("reward", "Reward", "rewards", "yield", "harvest"), lambda r, p: _pick(r, _amount, _range, _count),
     ("What does {e} give?", "How much does {e} reward?", "What do I get from {e}?", "How many does {e} give?")),
    (("effect", "Effect", "use", "bonus", "ability"), lambda r, p: _pick(r, _multiplier, p.phrase),
     ("What does {e} do?", "What is {e} for?", "What's the bonus of {e}?", "What is {e} used for?")),
    (("obtain", "Obtained by", "unlock", "requirement", "Requirement"), lambda r, p: p.requirement(r),
     ("How do I get {e}?", "How do you unlock {e}?", "What do I need to do to get {e}?", "How is {e} obtained?")),
    (("type", "Type", "genre", "species", "class"), lambda r, p: p.phrase(r),
     ("What type is {e}?", "What kind of thing is {e}?", "What species is {e}?")),
    (("population", "members", "capacity"), lambda r, p: _count(r),
     ("How many people live in {e}?", "How many members does {e} have?", "How big is {e}?")),
    (("height", "weight", "size", "length"), lambda r, p: f"{_decimal(r)} {r.choice(['m', 'kg', 'cm', 'ft', 'lb'])}",
     ("How tall is {e}?", "How heavy is {e}?", "How big is {e}?")),
    (("multiplier", "boost", "Bonus"), lambda r, p: _multiplier(r),
     ("What's the {k} of {e}?", "How much does {e} boost?")),
    (("drops", "Drops", "loot", "held item"), lambda r, p: p.name(r),
     ("What does {e} drop?", "What item does {e} hold?", "What loot does {e} give?")),
]


def _pick(rng: Rng, *makers: Callable[[Rng], str]) -> str:
    return rng.choice(makers)(rng)


def _where(rng: Rng, pools: _Pools) -> str:
    return f"{rng.choice(['North', 'South', 'East', 'West'])} of {pools.name(rng)}" if rng.random() < 0.5 else \
        f"In {pools.name(rng)}"


_GENERIC = ("What is the {k} of {e}?", "What's {e}'s {k}?", "{e} {k}?", "What {k} does {e} have?",
            "Tell me the {k} of {e}")
_REVERSE = ("Which {noun} has {k} {v}?", "Which {noun} has a {k} of {v}?", "What has {k} {v}?")


def _question(rng: Rng, key: str, phrasings: Tuple[str, ...], entity: str) -> str:
    template = rng.choice(phrasings if rng.random() < 0.65 else _GENERIC)
    return template.format(e=entity, k=key.lower())


Field = Tuple[str, str, Tuple[str, ...], Values]


def _fields(rng: Rng, pools: _Pools, n: int) -> List[Field]:
    """``n`` distinct keys with a value each: (label, value, phrasings, value maker)."""
    out, seen = [], set()
    for keys, make, phrasings in rng.sample(KEYS, n):
        label = rng.choice(keys)
        if label.lower() in seen:
            continue
        seen.add(label.lower())
        out.append((label, _value(rng, pools, make), phrasings, make))
    return out


def _value(rng: Rng, pools: _Pools, make: Values) -> str:
    return make(rng, pools).replace(";", ",")


def _infobox(rng: Rng, pools: _Pools, title: str) -> Tuple[str, List[Tuple[str, str, int]]]:
    """A facts passage (optionally followed by prose) and its (question, answer, start) triples."""
    fields = _fields(rng, pools, rng.randint(2, 9))
    text = facts_text(title, [(k, v) for k, v, _, _ in fields])
    starts, at = [], len(title) + 3
    for k, v, _, _ in fields:
        starts.append(at + len(k) + 2)
        at += len(k) + 2 + len(v) + 2
    if pools.prose and rng.random() < 0.6:
        text += ". " + rng.choice(pools.prose)
    qas = [(_question(rng, k, ph, title), v, s) for (k, v, ph, _), s in zip(fields, starts)]
    return text, qas


def _table(rng: Rng, pools: _Pools) -> Tuple[str, List[Tuple[str, str, int]]]:
    """Rows of ``"header: cell; ..."`` under a heading (the first column names the row) and questions on cells."""
    name_header = rng.choice(["Name", "Item", "Location", "Character", "Trainer", "Area", "Stage", ""])
    fields = _fields(rng, pools, rng.randint(2, 5))
    headers = [k for k, _, _, _ in fields]
    names = list(dict.fromkeys(pools.name(rng) for _ in range(rng.randint(2, 8))))
    heading = rng.choice(["Details", "Table", "Overview", "Stats", "List", pools.name(rng)]) + ". "
    text, qas = heading, []
    for name in names:
        values = [_value(rng, pools, make) for _, _, _, make in fields]  # (fields' own values unused,
        # but drawn: a seed keeps giving the same questions)
        labelled = rng.random() < 0.3 or not name_header
        line = f"{name} \u2014 " if labelled else f"{name_header}: {name}; "
        name_at = len(text) + (0 if labelled else len(name_header) + 2)
        starts, at = [], len(text) + len(line)
        for h, v in zip(headers, values):
            starts.append(at + len(h) + 2)
            at += len(h) + 2 + len(v) + 2
        text += line + "; ".join(f"{h}: {v}" for h, v in zip(headers, values)) + ". "
        for (h, _, ph, _), v, s in zip(fields, values, starts):
            qas.append((_question(rng, h, ph, name), v, s))
        if rng.random() < 0.3 and text.count(values[0]) == 1:
            noun = rng.choice(["one", "item", "place", "character", name_header.lower() or "entry"])
            qas.append((rng.choice(_REVERSE).format(noun=noun, k=headers[0].lower(), v=values[0]), name, name_at))
    return text.rstrip(), qas


def fact_line_questions(questions: Sequence[SquadQuestion], n: int, seed: int = 0) -> List[SquadQuestion]:
    """``n`` made-up questions on facts passages and table rows, drawn from ``questions``' names, answers and
    prose (module docstring); articles of two or three passages, so that a question has passages of its article
    that do not answer it (the trainer's negatives)."""
    if n < 0:
        raise ValueError(f"fact_line_questions: n={n}; expected a count >= 0")
    rng = random.Random(f"fact-lines:{seed}")
    pools = _Pools(questions)
    made: List[SquadQuestion] = []
    article = 0
    while len(made) < n:
        title = pools.name(rng)
        article_id = f"facts:{article}:{title}"
        passages: List[Tuple[str, List[Tuple[str, str, int]]]] = [_infobox(rng, pools, title)]
        passages += [_table(rng, pools) for _ in range(rng.randint(1, 2))]
        for p, (text, qas) in enumerate(passages):
            picked = rng.sample(qas, min(len(qas), rng.randint(1, 3)))
            for k, (question, answer, start) in enumerate(picked):
                if len(made) >= n:
                    break
                assert text[start:start + len(answer)] == answer, (text, answer, start)
                made.append(SquadQuestion(f"facts-{article}-{p}-{k}", article_id, p, text, question,
                                          ((answer, start),)))
        article += 1
    return made
