"""The fact-question benchmark: its answer matching and its question file (no shared data needed)."""
import importlib.util
import json
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "fact_questions.py"


def _load():
    spec = importlib.util.spec_from_file_location("fact_questions", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fq = _load()


@pytest.mark.parametrize("text, expected", [
    ("Sky  Pillar\n\tTOKENS", "sky pillar tokens"),          # case and whitespace runs
    ("1,080,000 tokens", "1080000 tokens"),                  # every thousands separator
    ("2\u00a0500 and 7\u202f000", "2500 and 7000"),          # no-break and narrow no-break spaces
    ("1, 234 and 1,23 and 12,3456", "1, 234 and 1,23 and 12,3456"),  # not thousands groups: kept
    ("1.5 x1,000.25", "1.5 x1000.25"),                       # decimals untouched
    ("113 \u2013 687", "113-687"),                           # dashes unified, spaces around them dropped
    ("Stow-on-Side", "stow-on-side"),
    ("\uff11\uff10\uff10%", "100%"),                         # NFKC: full-width digits
])
def test_normalise_hand_computed(text, expected):
    assert fq.normalise(text) == expected


@pytest.mark.parametrize("text, answers, expected", [
    ("tokens: 34,000; location: Hoenn", ["34000"], True),        # separator in the text only
    ("tokens: 34000", ["34,000"], True),                        # separator in the answer only
    ("it costs 2,500 Quest Points", ["500"], False),            # inside a larger number
    ("it costs 2,500 Quest Points", ["2,50"], False),            # a prefix of a number
    ("Found NORTH of   Laverre City.", ["north of laverre city"], True),
    ("Rustboro", ["rust"], False),                               # inside a word
    ("grows in 9h 18m 0s", ["9h 18m 0s"], True),
    ("range 113–687 quest points", ["113 - 687"], True),
    ("x1.5 Coins Earned", ["x1.5 coins earned"], True),
    ("roaming odds 1/537", ["1/53"], False),
    ("chance: 21.64%", ["21.64%"], True),
    ("chance: 21.64%", ["1.64%"], False),
    ("Hau'oli City", ["Hau'oli City"], True),
    ("nothing here", ["Motostoke", "Hulbury"], False),
    ("sold in Hulbury", ["Motostoke", "Hulbury"], True),          # any answer counts
    ("", ["x"], False),
])
def test_contains_answer_hand_computed(text, answers, expected):
    assert fq.contains_answer(text, answers) is expected


def test_contains_answer_agrees_with_a_brute_force_reference():
    """Against a reference that tries every start position on the normalised text, on random short texts."""
    def reference(text, answer):
        h, n = fq.normalise(text), fq.normalise(answer)
        for i in range(len(h) - len(n) + 1):
            if h[i:i + len(n)] == n and not (i > 0 and h[i - 1].isalnum() and n[0].isalnum()) \
                    and not (i + len(n) < len(h) and h[i + len(n)].isalnum() and n[-1].isalnum()):
                return True
        return False

    rng = random.Random(7)
    alphabet = ["a", "b", "1", "2", "0", ",", " ", "-", "%", "A"]
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        answer = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4)))
        if not fq.normalise(answer):
            continue
        assert fq.contains_answer(text, [answer]) is reference(text, answer), (text, answer)


def test_question_file_is_well_formed():
    questions = fq.load_questions(fq.DEFAULT_QUESTIONS)
    assert len(questions) >= 40
    assert len({q["qid"] for q in questions}) == len(questions)
    assert {q["kind"] for q in questions} == set(fq.KINDS)  # every kind is represented
    for q in questions:
        assert q["answers"] and all(fq.normalise(a) for a in q["answers"])
        # an answer this short or bare would match almost any passage by chance
        assert all(len(fq.normalise(a)) >= 3 for a in q["answers"]), q["qid"]


@pytest.mark.parametrize("line, message", [
    ('{"qid": "a", "question": "q?", "title": "T", "answers": [], "kind": "table", "where": "w"}', "answers"),
    ('{"qid": "a", "question": "q?", "title": "T", "answers": [" "], "kind": "table", "where": "w"}', "answers"),
    ('{"qid": "a", "question": "q?", "title": "T", "answers": ["x"], "kind": "prose", "where": "w"}', "kind='prose'"),
    ('{"qid": "a", "question": "", "title": "T", "answers": ["x"], "kind": "table", "where": "w"}', "question=''"),
    ('{"qid": "a", "question": "q?", "title": "T", "answers": ["x"], "kind": "table"}', "exactly the fields"),
    ('not json', "not JSON"),
])
def test_bad_question_lines_are_refused_with_file_and_line(tmp_path, line, message):
    path = tmp_path / "q.jsonl"
    good = {"qid": "ok", "question": "q?", "title": "T", "answers": ["x"], "kind": "infobox", "where": "w"}
    path.write_text(json.dumps(good) + "\n" + line + "\n")
    with pytest.raises(ValueError, match="line 2") as err:
        fq.load_questions(path)
    assert message in str(err.value)


def test_duplicate_qids_are_refused(tmp_path):
    path = tmp_path / "q.jsonl"
    good = {"qid": "same", "question": "q?", "title": "T", "answers": ["x"], "kind": "infobox", "where": "w"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(ValueError, match="'same' is used twice"):
        fq.load_questions(path)


def test_subset_export_keeps_question_pages_and_seeded_distractors(tmp_path):
    """A hand-made export: the subset holds the named pages plus exactly N other articles (never a redirect,
    another namespace or a translation), the same N for the same seed."""
    def page(title, text, ns=0):
        return (f"<page><title>{title}</title><ns>{ns}</ns><id>1</id><revision><id>1</id>"
                f"<text>{text}</text></revision></page>")

    pages = [page("Alpha", "fact"), page("Beta", "#REDIRECT [[Alpha]]"), page("Gamma", "x"),
             page("Delta", "y"), page("Alpha/de", "z"), page("Talk:Alpha", "t", ns=1), page("Eps &amp; Co", "e")]
    dump = tmp_path / "wiki.xml"
    dump.write_text("<mediawiki><siteinfo><sitename>W</sitename></siteinfo>" + "".join(pages) + "</mediawiki>")

    def titles(out):
        import re
        return re.findall(r"<title>(.*?)</title>", out.read_text())

    info = fq.write_subset(dump, tmp_path / "a.xml", {"Alpha"}, 2, seed=3)
    kept = titles(tmp_path / "a.xml")
    assert info["distractor_pages"] == 2 and kept[0] == "Alpha" and len(kept) == 3
    assert set(kept[1:]) <= {"Gamma", "Delta", "Eps &amp; Co"}
    fq.write_subset(dump, tmp_path / "b.xml", {"Alpha"}, 2, seed=3)
    assert titles(tmp_path / "b.xml") == kept
    assert (tmp_path / "a.xml").read_text().startswith("<mediawiki><siteinfo>")
    assert (tmp_path / "a.xml").read_text().rstrip().endswith("</mediawiki>")
    with pytest.raises(ValueError, match="Omega"):
        fq.write_subset(dump, tmp_path / "c.xml", {"Omega"}, 1, seed=0)


def test_ceiling_and_summary_hand_computed():
    """Three questions over four passages: q1's answer on its page, q2's only on another page, q3's nowhere."""
    questions = [
        {"qid": "q1", "question": "?", "title": "Sky Pillar", "answers": ["34,000"], "kind": "infobox", "where": "w"},
        {"qid": "q2", "question": "?", "title": "Relic Castle", "answers": ["166,500"], "kind": "infobox",
         "where": "w"},
        {"qid": "q3", "question": "?", "title": "Gyms", "answers": ["1,354"], "kind": "table", "where": "w"},
    ]
    passages = [("Relic Castle", "a dungeon in Unova"), ("Sky pillar", "Sky Pillar — tokens: 34000"),
                ("Other", "it once cost 166500 tokens"), ("Gyms", "min attack 11,354")]
    ceil = fq.ceiling(passages, questions)
    assert ceil == {"q1": {"anywhere": True, "on_page": True}, "q2": {"anywhere": True, "on_page": False},
                    "q3": {"anywhere": False, "on_page": False}}
    hits = {"q1": {"answer": True, "answer_on_page": True, "page": True},
            "q2": {"answer": True, "answer_on_page": False, "page": False},
            "q3": {"answer": False, "answer_on_page": False, "page": True}}
    summary = fq.summarise(questions, {"tfidf": hits}, ceil, 10)
    assert summary["questions"] == {"all": 3, "infobox": 2, "table": 1, "template": 0}
    assert summary["ceiling"]["all"] == {"answerable": round(2 / 3, 3), "answerable_on_page": round(1 / 3, 3)}
    assert summary["tfidf"]["infobox"] == {"answer@10": 1.0, "answer_on_page@10": 0.5, "page@10": 0.5}
    assert summary["tfidf"]["table"] == {"answer@10": 0.0, "answer_on_page@10": 0.0, "page@10": 1.0}
    assert "template" not in summary["tfidf"]
    rows = fq.table(summary, ["tfidf"], 10).splitlines()
    assert rows[0] == "| system | measure | all (n=3) | infobox (n=2) | table (n=1) |"
    assert rows[2] == "| tfidf | answer@10 | 2/3 | 2/2 | 0/1 |"
    assert rows[-1] == "| (indexed text) | answerable_on_page | 1/3 | 1/2 | 0/1 |"


def test_docstring_examples():
    """The script's docstring examples (benchmarks/ is outside pytest's doctest collection)."""
    import doctest

    result = doctest.testmod(fq, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 3 and result.failed == 0
