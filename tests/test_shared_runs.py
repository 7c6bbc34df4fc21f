"""Fusions share their inputs with the other systems of an experiment: ``pfc.Experiment`` runs each distinct
system once however many fusions use it, and gives the same table as ``pt.Experiment``."""
import pandas as pd
import pyterrier as pt
import pytest
from ir_measures import RR, R, nDCG

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.fusion.experiment import RunOnce, frame_key

TOPICS = pd.DataFrame({"qid": ["q1", "q2", "q3"], "query": ["alpha", "beta", "gamma"]})
QRELS = pd.DataFrame({"qid": ["q1", "q2", "q3"], "docno": ["d1", "d4", "d2"], "label": [1, 1, 1]})


class Counting(pt.Transformer):
    """A retriever from a fixed run that counts its calls on queries (PyTerrier also calls it on an empty frame to
    learn its output columns: not counted) and the queries it was asked."""

    def __init__(self, name, scores):
        self.name, self.scores, self.calls, self.queries = name, scores, 0, 0

    def transform(self, inp):
        self.calls += len(inp) > 0
        self.queries += len(inp)
        rows = [(q, f"d{d}", s) for q in inp["qid"] for d, s in enumerate(self.scores[q])]
        out = inp.merge(pd.DataFrame(rows, columns=["qid", "docno", "score"]), on="qid")
        return pt.model.add_ranks(out)

    def __repr__(self):
        return f"Counting({self.name!r})"


def _systems():
    neural = Counting("neural", {"q1": [0.1, 0.9, 0.3, 0.2, 0.0], "q2": [0.5, 0.1, 0.2, 0.3, 0.8],
                                 "q3": [0.2, 0.3, 0.1, 0.6, 0.0]})
    lexical = Counting("lexical", {"q1": [1.0, 3.0, 0.0, 2.0, 0.5], "q2": [0.0, 0.0, 1.0, 2.0, 1.5],
                                   "q3": [0.5, 4.0, 0.0, 1.0, 2.0]})
    systems = [neural, lexical,
               pfc.Hybrid(lexical, neural, weight=0.5),
               pfc.RRF([lexical, neural], k=10),
               pfc.LinearFusion([neural, lexical], [0.7, 0.3]) % 3]
    return neural, lexical, systems


@pytest.mark.parametrize("plan", ["linear", "tree"])
def test_each_system_runs_once_however_many_fusions_use_it(plan):
    neural, lexical, systems = _systems()
    measures = [RR @ 10, R @ 3, nDCG @ 5]
    plain = pt.Experiment(systems, TOPICS, QRELS, measures, plan=plan)
    assert (neural.calls, lexical.calls) == (4, 4)  # alone and inside the three fusions
    neural.calls = lexical.calls = 0
    shared = pfc.Experiment(systems, TOPICS, QRELS, measures, plan=plan)
    assert (neural.calls, lexical.calls) == (1, 1)
    pd.testing.assert_frame_equal(shared, plain)
    assert isinstance(systems[2].neural, Counting)  # the given systems are not changed


def test_batches_of_topics_each_run_once_and_equal_systems_share_a_run():
    neural, lexical, systems = _systems()
    pfc.Experiment(systems, TOPICS, QRELS, [RR @ 10], batch_size=2)
    assert (neural.calls, lexical.calls) == (2, 2) and neural.queries == 3  # two batches, each query once
    a, b = lexical >> pfc.Normalise("zscore"), lexical >> pfc.Normalise("zscore")  # equal, not the same object
    assert a is not b and a == b
    shared = pfc.share_inputs([a, pfc.Hybrid(b, neural)])
    assert shared[1].lexical is shared[0] and isinstance(shared[0], RunOnce)  # equal by ==, one run


def test_run_once_hands_out_copies_keyed_by_content():
    neural, _, _ = _systems()
    once = RunOnce(neural)
    first = once(TOPICS)
    first["score"] = 0.0  # a caller changing its frame does not change the stored run
    again = once(TOPICS.copy())
    assert neural.calls == 1 and again["score"].max() > 0
    once(TOPICS.iloc[:2])
    assert neural.calls == 2
    assert frame_key(TOPICS) != frame_key(TOPICS.assign(query=["alpha", "beta", "delta"]))


def test_fusion_inputs_inside_pipelines_are_shared_and_other_stages_left_to_the_tree_plan():
    neural, lexical, _ = _systems()
    rerank = lexical >> pfc.Normalise("zscore")
    systems = [lexical, rerank, lexical >> pfc.Normalise("minmax"), pfc.Hybrid(lexical, neural)]
    plain = pt.Experiment(systems, TOPICS, QRELS, [RR @ 10, nDCG @ 5], plan="tree")
    neural.calls = lexical.calls = 0
    shared = pfc.Experiment(systems, TOPICS, QRELS, [RR @ 10, nDCG @ 5], plan="tree")
    assert (neural.calls, lexical.calls) == (1, 1)  # alone, first stage of two pipelines, and fused
    pd.testing.assert_frame_equal(shared, plain)
    untouched = neural >> pfc.Normalise("zscore")  # no fusion here: nothing to share, the system is kept
    assert pfc.share_inputs([untouched])[0] is untouched


class Slow(Counting):
    """A :class:`Counting` retriever that takes ``delay`` seconds per call on queries."""

    def __init__(self, name, scores, delay):
        super().__init__(name, scores)
        self.delay = delay

    def transform(self, inp):
        import time

        if len(inp):
            time.sleep(self.delay)
        return super().transform(inp)


def test_mrt_charges_a_shared_run_to_every_system_that_uses_it():
    neural, lexical, _ = _systems()
    # 900 ms per call: 300 ms per query over the three queries, far above what load adds to the others
    slow = Slow("slow", neural.scores, 0.9)
    hybrid = pfc.Hybrid(lexical, slow, weight=0.5)
    alone = pt.Experiment([hybrid], TOPICS, QRELS, [RR @ 10, "mrt"])["mrt"].iloc[0]
    table = pfc.Experiment([slow, lexical, hybrid], TOPICS, QRELS, [RR @ 10, "mrt"])
    assert slow.calls == 2  # (one for pt.Experiment alone above, one shared run here)
    mrt = dict(zip(table["name"], table["mrt"]))
    assert mrt[repr(slow)] >= 295 and mrt[repr(lexical)] < mrt[repr(slow)] - 150  # not charged the slow run
    # the hybrid's figure holds the slow system's run it got as a copy: about what it costs alone
    assert mrt[repr(hybrid)] >= 295 and abs(mrt[repr(hybrid)] - alone) < 0.25 * alone


def test_a_dict_of_systems_names_them_as_in_pt_experiment():
    neural, lexical, systems = _systems()
    named = {"neural": neural, "lexical": lexical, "hybrid": systems[2]}
    table = pfc.Experiment(named, TOPICS, QRELS, [RR @ 10])
    plain = pt.Experiment(named, TOPICS, QRELS, [RR @ 10])
    pd.testing.assert_frame_equal(table, plain)
    assert table["name"].tolist() == ["neural", "lexical", "hybrid"]
    with pytest.raises(ValueError, match="names"):
        pfc.Experiment(named, TOPICS, QRELS, [RR @ 10], names=["a", "b", "c"])
