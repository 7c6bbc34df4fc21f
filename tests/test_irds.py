"""ir_datasets registration: QA release formats, SQuAD files, dump corpora (download, cache), the bundled sample."""
import bz2
import contextlib
import functools
import hashlib
import http.server
import importlib.util
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import ClassVar

import pytest

import pyterrier_fandom_colbert  # noqa: F401  (registers the datasets)
from pyterrier_fandom_colbert.data import irds, qa_formats
from pyterrier_fandom_colbert.data.passages import dump_passages

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_QA = irds.SAMPLE_DIR / "samplewiki_qa.json"
SAMPLE_XML = irds.SAMPLE_DIR / "samplewiki_pages_current.xml"


@contextlib.contextmanager
def raises(base, name, match):
    """Our error classes are caught by their builtin base and checked by name (see test_wikidump.py)."""
    with pytest.raises(base, match=match) as err:
        yield err
    assert type(err.value).__name__ == name


@pytest.fixture()
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "irds-home"))
    return tmp_path / "irds-home"


def tiny_dump(dbname="tinywiki") -> str:
    prose = " ".join(f"Sentence {i} tells of the old keep by the river." for i in range(30))
    pages = "".join(
        f"<page><title>Page {i}</title><ns>0</ns><id>{i}</id><revision><id>{100 + i}</id>"
        f"<text xml:space=\"preserve\">Intro of page {i}. {prose}\n\n== Lore ==\n{prose}</text></revision></page>"
        for i in range(1, 4))
    return (f'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/"><siteinfo><dbname>{dbname}</dbname>'
            f"<base>https://tiny.fandom.com/wiki/Main_Page</base></siteinfo>{pages}</mediawiki>")


def qa_pages(n_pages=20, with_answers=True):
    """A hand-made study-format release: page p has 2 passages, passage n has n + 1 questions."""
    pages = []
    for p in range(1, n_pages + 1):
        text = [f"Passage {n} of page {p} tells where the silver key {p}-{n} lies." for n in range(2)]
        positive = [[f"Where is key {p}-{n} number {j}?" for j in range(n + 1)] for n in range(2)]
        other = p % n_pages + 1
        negative = [[f"Where is key {other}-{n} number {j}?" for j in range(n + 1)] for n in range(2)]
        page = {"id": p, "revid": 1000 + p, "url": f"https://x.fandom.com/wiki/P{p}", "title": f"P{p}", "text": text,
                "positive": positive, "negative": negative}
        if with_answers:
            page["answers"] = [[{"text": f"{p}-{n}", "start": t.index(f"{p}-{n}")} for _ in qs]
                               for n, (t, qs) in enumerate(zip(text, positive))]
        pages.append(page)
    return pages


def test_page_splits_are_seeded_exact_and_disjoint():
    ids = list(range(100, 135))
    split = irds.page_splits(ids)
    assert split == irds.page_splits(reversed(ids)) == irds.page_splits(ids, seed=qa_formats.SPLIT_SEED)
    assert Counter(split.values()) == {"train": 27, "dev": 4, "test": 4}
    assert split != irds.page_splits(ids, seed=1)
    assert set(split) == set(ids)


def test_qa_json_queries_qrels_docpairs_and_splits(tmp_path):
    path = tmp_path / "toy_qa.json"
    path.write_text(json.dumps(qa_pages()))
    full = irds.qa_json_dataset(path)
    docs = list(full.docs_iter())
    assert len(docs) == 40 and docs[0].doc_id == "toy-1-0" and docs[0].page_id == 1 and docs[0].revid == 1001
    assert full.docs_store().get("toy-3-1").text == "Passage 1 of page 3 tells where the silver key 3-1 lies."
    queries = {q.query_id: q for q in full.queries_iter()}
    assert len(queries) == 60 and queries["toy-3-1-1"].text == "Where is key 3-1 number 1?"
    assert queries["toy-3-1-1"].answers == ("3-1",)
    qrels = list(full.qrels_iter())
    assert sorted(q.query_id for q in qrels) == sorted(queries)  # exactly one qrel per question
    assert all(q.doc_id == q.query_id.rsplit("-", 1)[0] for q in qrels)
    store = full.docs_store()
    for q in qrels:  # the gold answer sits at its offset in the relevant passage
        qq = queries[q.query_id]
        assert store.get(q.doc_id).text[qq.answer_starts[0]:][:len(qq.answers[0])] == qq.answers[0]

    split_of = irds.page_splits(range(1, 21))
    seen = {}
    for split in irds.SPLITS:
        ds = irds.qa_json_dataset(path, split=split)
        pages = {int(q.query_id.split("-")[1]) for q in ds.queries_iter()}
        assert pages == {p for p, s in split_of.items() if s == split}
        assert {int(q.doc_id.split("-")[1]) for q in ds.qrels_iter()} == pages
        for pair in ds.docpairs_iter():  # question, its passage, the passage of another page's question
            assert pair.doc_id_a == pair.query_id.rsplit("-", 1)[0]
            assert split_of[int(pair.doc_id_b.split("-")[1])] == split
            assert pair.doc_id_b.split("-")[1] != pair.doc_id_a.split("-")[1]
        assert ds.docs_count() == 40  # every split searches the whole corpus
        seen[split] = pages
    assert not (seen["train"] & seen["dev"]) and not (seen["train"] & seen["test"]) and not (seen["dev"] & seen["test"])
    pairs = list(full.docpairs_iter())
    assert len(pairs) == 60 and pairs[0] == ("toy-1-0-0", "toy-1-0", "toy-2-0")


def test_qa_json_without_answers_and_bad_input(tmp_path):
    path = tmp_path / "plain_qa.json"
    path.write_text(json.dumps(qa_pages(3, with_answers=False)))
    ds = irds.qa_json_dataset(path)
    assert ds.queries_cls()._fields == ("query_id", "text")
    bad = qa_pages(3)
    bad[1]["positive"] = bad[1]["positive"][:1]
    path.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="page id=2: text/positive/negative must be parallel"):
        list(irds.qa_json_dataset(path).docs_iter())
    with pytest.raises(ValueError, match="split must be one of"):
        irds.qa_json_dataset(path, split="validation")


def test_qa_json_also_positive_adds_judgements_of_the_same_query(tmp_path):
    pages = qa_pages(3)
    pages[2]["also_positive"] = [[], ["Where is key 1-0 number 0?"]]  # page 3's passage 1 answers it too
    path = tmp_path / "also_qa.json"
    path.write_text(json.dumps(pages))
    ds = irds.qa_json_dataset(path)
    judged = Counter(q.query_id for q in ds.qrels_iter())
    assert sum(judged.values()) == 9 + 1 and judged["also-1-0-0"] == 2  # docnos are named after the file
    qrels = {(q.query_id, q.doc_id) for q in ds.qrels_iter()}
    assert {("also-1-0-0", "also-1-0"), ("also-1-0-0", "also-3-1")} <= qrels
    assert len(list(ds.queries_iter())) == 9  # no new question
    for bad, match in (([["Where is key 1-0 number 0?"]], "also_positive must be parallel to text"),
                       ([[], ["Which key?"]], "names 'Which key\\?', which is not the question")):
        pages[2]["also_positive"] = bad
        path.write_text(json.dumps(pages))
        with pytest.raises(ValueError, match=match):
            list(irds.qa_json_dataset(path).qrels_iter())


def test_tsv_release_layout(tmp_path):
    (tmp_path / "wiki.json").write_text(json.dumps({
        "7": {"revid": 70, "url": "https://x/wiki/A", "title": "A", "PIDs": [0, 1]},
        "8": {"revid": 80, "url": "https://x/wiki/B", "title": "B", "PIDs": [2]}}))
    (tmp_path / "passages.tsv").write_text("PID\tpassage\tWID\n0\tAlpha text.\t7\n1\tBeta text.\t7\n2\tGamma.\t8\n")
    (tmp_path / "queries.tsv").write_text("10\tWhat is alpha?\n11\tWhat is beta?\n12\tWhat is gamma?\n")
    (tmp_path / "triples.tsv").write_text("10\t12\t0\n11\t12\t1\n12\t10\t2\n")
    ds = irds.tsv_release_dataset(tmp_path, wiki="x")
    docs = {d.doc_id: d for d in ds.docs_iter()}
    assert docs["1"].title == "A" and docs["2"].page_id == 8 and docs["2"].revid == 80 and docs["0"].wiki == "x"
    assert next((q.query_id, q.text) for q in ds.queries_iter()) == ("10", "What is alpha?")
    assert sorted((q.query_id, q.doc_id) for q in ds.qrels_iter()) == [("10", "0"), ("11", "1"), ("12", "2")]
    assert sorted(ds.docpairs_iter()) == [("10", "0", "2"), ("11", "1", "2"), ("12", "2", "0")]
    (tmp_path / "triples.tsv").write_text("10\t12\t9\n")
    with pytest.raises(ValueError, match=r"passage 9 is not in passages\.tsv"):
        list(irds.tsv_release_dataset(tmp_path).qrels_iter())


SQUAD = {"version": "1.1", "data": [
    {"title": "Vel_Amara", "paragraphs": [
        {"context": "Vel Amara was built in the third age by the river folk.",
         "qas": [{"id": "q1", "question": "Who built Vel Amara?",
                  "answers": [{"text": "the river folk", "answer_start": 40},
                              {"text": "river folk", "answer_start": 44}]},
                 {"id": "q2", "question": "When was it built?",
                  "answers": [{"text": "the third age", "answer_start": 23}]}]},
        {"context": "Its towers fell in a storm.", "qas": [
            {"id": "q3", "question": "What felled the towers?", "answers": [{"text": "a storm", "answer_start": 19}]},
            {"id": "q4", "question": "Unanswerable?", "answers": [], "is_impossible": True}]}]},
    {"title": "Orrin", "paragraphs": [
        {"context": "Orrin forged the blade.", "qas": [
            {"id": "q5", "question": "Who forged the blade?", "answers": [{"text": "Orrin", "answer_start": 0}]}]}]}]}


def test_squad_loader_and_registration(tmp_path):
    import pyterrier as pt
    path = tmp_path / "train.json"
    path.write_text(json.dumps(SQUAD))
    irds.register_squad("test-squad/train", path)
    irds.register_squad("test-squad/train", path)  # same file again: a no-op
    with pytest.raises(ValueError, match="already registered"):
        irds.register_squad("test-squad/train", tmp_path / "other.json")
    ds = pt.get_dataset("irds:test-squad/train")
    topics = ds.get_topics("text")
    assert list(topics.columns) == ["qid", "query"] and list(topics.qid) == ["q1", "q2", "q3", "q5"]
    full = ds.get_topics()
    q1 = full.set_index("qid").loc["q1"]
    assert q1.answers == ("the river folk", "river folk") and q1.answer_starts == (40, 44)
    qrels = ds.get_qrels()
    assert dict(zip(qrels.qid, qrels.docno)) == {"q1": "0-0", "q2": "0-0", "q3": "0-1", "q5": "1-0"}
    assert set(qrels.label) == {1}
    corpus = list(ds.get_corpus_iter(verbose=False))
    assert [(d["docno"], d["title"]) for d in corpus] == [("0-0", "Vel_Amara"), ("0-1", "Vel_Amara"), ("1-0", "Orrin")]
    assert [d["docno"] for d in ds.get_corpus_iter(verbose=False, start=1, count=1)] == ["0-1"]
    assert ds.irds_ref().docs_store().get("1-0").text == "Orrin forged the blade."
    bad = json.loads(json.dumps(SQUAD))
    bad["data"][1]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 3
    path.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="'q5': answer 'Orrin' is not at character 3 of paragraph 1-0"):
        list(irds.squad_dataset(path).queries_iter())


def test_squad_loader_reads_bz2_as_the_plain_file(tmp_path):
    import bz2

    from pyterrier_fandom_colbert.training import load_collection

    plain, packed = tmp_path / "train.json", tmp_path / "train.json.bz2"
    plain.write_text(json.dumps(SQUAD))
    packed.write_bytes(bz2.compress(plain.read_bytes()))
    a, b = load_collection(str(plain)), load_collection(str(packed))
    assert (a.queries, a.qrels, dict(a.docs)) == (b.queries, b.qrels, dict(b.docs))
    assert b.qrels == {"q1": ("0-0",), "q2": ("0-0",), "q3": ("0-1",), "q5": ("1-0",)}
    packed.write_bytes(bz2.compress(plain.read_bytes())[:40])  # cut short
    with pytest.raises(ValueError, match=r"train\.json\.bz2: not a readable SQuAD JSON file"):
        list(irds.squad_dataset(packed).queries_iter())


def test_squad_loader_on_shared_data():
    p = ROOT.parent / "shared" / "data" / "squad-v1.1-split" / "dev-v1.1.json"
    if not p.exists():
        pytest.skip(f"shared data not available: {p}")
    ds = irds.squad_dataset(p)
    assert (ds.docs_count(), sum(1 for _ in ds.queries_iter()), sum(1 for _ in ds.qrels_iter())) == (338, 1512, 1512)


class _Handler(http.server.SimpleHTTPRequestHandler):
    requests: ClassVar[list] = []
    md5 = None

    def log_message(self, *args):
        pass

    def end_headers(self):
        if self.md5:
            self.send_header("x-amz-meta-md5", self.md5)
        super().end_headers()

    def do_GET(self):
        type(self).requests.append(self.path)
        super().do_GET()


@pytest.fixture()
def server(tmp_path, monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    served = tmp_path / "served"
    served.mkdir()
    handler = type("Handler", (_Handler,), {"requests": [], "md5": None})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(served)))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()
    httpd.server_close()


def test_dump_download_build_and_cache(home, server, tmp_path):
    import ir_datasets
    import pyterrier as pt
    served, base, handler = server
    data = bz2.compress(tiny_dump().encode())
    (served / "tinywiki_pages_current.xml.bz2").write_bytes(data)
    handler.md5 = hashlib.md5(data).hexdigest()
    url = f"{base}/tinywiki_pages_current.xml.bz2"
    name = irds.register_fandom_wiki("tiny", dbname="tinywiki", url=url, prefix="fandom-qa-test")
    ds = ir_datasets.load(name)
    local = tmp_path / "local.xml"
    local.write_text(tiny_dump())
    expected = list(dump_passages(local))
    assert list(ds.docs_iter()) == expected and ds.docs_count() == len(expected) == 15  # 3 pages x (3 + 2)
    assert handler.requests == ["/tinywiki_pages_current.xml.bz2"]
    assert ds.docs_store().get("tinywiki-2-1") == expected[6]
    folder = home / "fandom-qa" / "tiny"
    stores = [p for p in folder.iterdir() if p.name.startswith("passages-")]
    assert sorted(p.name for p in folder.iterdir()) == sorted(["tinywiki_pages_current.xml.bz2", stores[0].name])
    meta = json.loads((stores[0] / "config.json").read_text())
    assert meta["stats"]["passages"] == 15 and meta["config"]["target_words"] == 120
    again = irds.fandom_dataset("tiny", dbname="tinywiki", url=url)  # cached dump and passages: no request
    assert [d.doc_id for d in again.docs_iter()][5:7] == ["tinywiki-2-0", "tinywiki-2-1"]
    assert len(handler.requests) == 1
    corpus = pt.get_dataset(f"irds:{name}").get_corpus_iter(verbose=False, start=5, count=2)
    assert [(d["docno"], d["page_id"], d["section"]) for d in corpus] == [("tinywiki-2-0", 2, ""),
                                                                          ("tinywiki-2-1", 2, "")]
    assert expected[3].section == "Lore" and expected[3].text.startswith("Lore. Sentence 0 tells")


def test_download_failures_leave_nothing(home, server):
    served, base, handler = server
    missing = irds.fandom_dataset("gone", dbname="gonewiki", url=f"{base}/gonewiki_pages_current.xml.7z")
    with raises(OSError, "DumpUnavailableError", "404.*Put the dump at .*gonewiki_pages_current.xml.7z"):
        list(missing.docs_iter())
    (served / "bad_pages_current.xml.bz2").write_bytes(bz2.compress(tiny_dump("bad").encode()))
    handler.md5 = "0" * 32
    corrupt = irds.fandom_dataset("bad", url=f"{base}/bad_pages_current.xml.bz2")
    with raises(OSError, "DumpUnavailableError", "does not match x-amz-meta-md5"):
        list(corrupt.docs_iter())
    for wiki in ("gone", "bad"):
        folder = home / "fandom-qa" / wiki
        assert not folder.exists() or not list(folder.iterdir())


@pytest.mark.parametrize("damage", ["malformed", "truncated"])
def test_local_dump_env_var_and_failed_build_leaves_no_cache(home, tmp_path, monkeypatch, damage):
    import gzip
    if damage == "malformed":  # the error comes after the first page's passages were stored
        broken = tmp_path / "broken.xml"
        broken.write_text(tiny_dump().replace("<title>Page 2</title>", "<title>Page 2</titel>"))
        expected = r"broken\.xml: malformed XML \(mismatched tag\) \(line 4, column 1475"
    else:
        data = gzip.compress(tiny_dump().encode())
        broken = tmp_path / "broken.xml.gz"
        broken.write_bytes(data[: len(data) * 3 // 4])
        expected = r"broken\.xml\.gz: truncated or corrupt archive .*after [1-9][0-9,]* bytes of XML"
    monkeypatch.setenv("FANDOM_QA_DUMP_BROKEN", str(broken))
    ds = irds.fandom_dataset("broken", url="http://127.0.0.1:9/never-used")
    with raises(ValueError, "DumpError", expected):
        list(ds.docs_iter())
    folder = home / "fandom-qa" / "broken"
    assert not folder.exists() or not list(folder.iterdir())
    monkeypatch.setenv("FANDOM_QA_DUMP_BROKEN", str(tmp_path / "nope.xml.7z"))
    with raises(OSError, "DumpUnavailableError", "FANDOM_QA_DUMP_BROKEN=.*nope.xml.7z names no file"):
        irds.fandom_dataset("broken").docs_iter()


def test_registration_is_cheap_idempotent_and_via_pyterrier():
    import ir_datasets
    irds.register()  # again: no error
    names = set(ir_datasets.registry)
    assert {f"fandom-qa/{w}" for w in irds.WIKIS} | {"fandom-qa/sample/test", "fandom-qa/sample/train"} <= names
    assert irds.dump_url(irds.WIKIS["marvel"]).endswith("/e/en/enmarveldatabase_pages_current.xml.7z")
    # importing pyterrier alone registers them (pyterrier.modules entry point) and opens no data file
    code = ("import sys; opened = []\n"
            "sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == 'open' else None)\n"
            "import ir_datasets, pyterrier\n"
            "print('fandom-qa/sample/test' in set(ir_datasets.registry), any('samplewiki' in f for f in opened))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True)
    assert out.stdout.split() == ["True", "False"]


@pytest.fixture(scope="module")
def sample():
    if not SAMPLE_QA.exists():
        pytest.fail(f"{SAMPLE_QA} missing: run python datasets/build_sample_qa.py")
    import pyterrier as pt
    return {split: pt.get_dataset(f"irds:fandom-qa/sample{'/' + split if split else ''}")
            for split in (None, "train", "dev", "test")}


def test_sample_topics_qrels_consistent(sample):
    docnos = {d["docno"] for d in sample[None].get_corpus_iter(verbose=False)}
    assert len(docnos) >= 150
    pages_by_split = {}
    for split in irds.SPLITS:
        topics, qrels = sample[split].get_topics("text"), sample[split].get_qrels()
        assert len(topics) > 0 and topics.qid.is_unique and topics["query"].str.len().min() > 0
        assert set(topics.qid) == set(qrels.qid) and set(qrels.docno) <= docnos
        own = qrels[[docno == qid.rsplit("-", 1)[0] for qid, docno in zip(qrels.qid, qrels.docno)]]
        assert sorted(own.qid) == sorted(topics.qid)  # each question's own passage, plus the extra judgements
        pages_by_split[split] = {d.rsplit("-", 1)[0] for d in own.docno}
    assert sum(len(sample[s].get_topics("text")) for s in irds.SPLITS) == len(sample[None].get_topics("text")) >= 150
    train, dev, test = (pages_by_split[s] for s in irds.SPLITS)
    assert not (train & dev) and not (dev & test) and not (train & test)


def test_sample_corpus_is_the_parsed_dump_and_answers_line_up(sample):
    ds = sample[None].irds_ref()
    assert list(ds.docs_iter()) == list(dump_passages(SAMPLE_XML))
    store = ds.docs_store()
    for q in ds.queries_iter():  # in the question's own passage (its query id is the docno and a number)
        text = store.get(q.query_id.rsplit("-", 1)[0]).text
        assert text[q.answer_starts[0]:q.answer_starts[0] + len(q.answers[0])] == q.answers[0]


def test_sample_json_is_up_to_date():
    spec = importlib.util.spec_from_file_location("build_sample_qa", ROOT / "datasets" / "build_sample_qa.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0


@pytest.mark.slow
def test_top_level_datasets_folder_does_not_shadow_hf_datasets(tmp_path):
    """The documented ways of running from the repo root (console scripts, ``python path/to/script.py``,
    ``python -P``) do not put the root on sys.path, so ``datasets/`` cannot pose as Hugging Face's package."""
    code = ("import importlib.util, transformers.utils as u; "
            "print(importlib.util.find_spec('datasets') is not None, u.is_datasets_available())")
    script = tmp_path / "probe.py"
    script.write_text(code.replace("; ", "\n"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    elsewhere = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env,
                               check=True).stdout.split()
    for command in ([sys.executable, "-P", "-c", code], [sys.executable, str(script)]):
        at_root = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, check=True).stdout.split()
        assert at_root == elsewhere, f"{command[:2]} from the repo root: {at_root}, elsewhere: {elsewhere}"
    assert not (ROOT / "datasets" / "__init__.py").exists()

def test_text_loader_works_on_the_sample():
    """pt.text.get_text needs the docs class to declare its text fields as real ``str`` annotations."""
    import pandas as pd
    import pyterrier as pt


    dataset = pt.get_dataset("irds:fandom-qa/sample/test")
    first = next(iter(dataset.get_corpus_iter(verbose=False)))
    got = pt.text.get_text(dataset, ["text", "title"])(pd.DataFrame({"qid": ["1"], "docno": [first["docno"]]}))
    assert got["text"][0] == first["text"] and got["title"][0] == first["title"]
