"""The accuracy-budget loop on its own: a quantiser that writes which nodes a trial keeps in FP32, a judge that
reads that file back and looks the drop up in a table, and the candidates given — so the search itself (probe each
candidate, combine those that helped best first, stop at the budget, keep the best file at `out`) is what runs.
The real quantiser and ONNX Runtime judge are exercised by tests/calibrate/test_core.py and test_deployed.py."""

import json
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from skewgate.calibrate.int8 import budget as budget_module
from skewgate.calibrate.int8.budget import BestTrial, Budget, budget_loop, trial_row
from skewgate.calibrate.int8.evaluate import Evaluation, Layerwise
from skewgate.calibrate.int8.fallback import Candidate
from skewgate.common.output_tasks import Agreement

FIRST = 0.10  # the deployed drop of the model with nothing kept in FP32


def evaluation(drop, agreement=None, **logits):
    """An evaluation with labels; INT8 agrees with FP32 on 1 - drop of the samples unless `agreement` says."""
    share = 1 - drop if agreement is None else agreement
    return Evaluation(drop=drop, accuracy_fp32=0.9, accuracy_int8=0.9 - drop, logits=logits, sha256=f"sha-{drop}",
                      worst=Agreement("classification", share, round((1 - share) * 1000), 1000, "argmax differs"))


class FakeQuantizer:
    """Writes, as JSON, what a trial asked for; `prepared` and `op_types` as the real one has them."""

    def __init__(self):
        nodes = [helper.make_node("MatMul", ["x", "W"], ["a"], name="fc1"),
                 helper.make_node("Relu", ["a"], ["b"], name="relu"),
                 helper.make_node("Softmax", ["b"], ["c"], name=""),  # unnamed: cannot be excluded by name
                 helper.make_node("Gemm", ["c", "W2"], ["y"], name="head")]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])])
        self.prepared = helper.make_model(graph)
        self.op_types = ["Gemm", "MatMul", "Softmax"]  # Relu is not quantised here
        self.written: list[Path] = []

    def write(self, out, *, exclude=(), reduce_range=False):
        out = Path(out)
        out.write_text(json.dumps({"excluded": list(exclude), "reduce_range": reduce_range}))
        self.written.append(out)
        return out


class Judge:
    """Stands in for `evaluate.judge`: the drop of the file's trial from `drops` (excluded nodes as a frozenset,
    reduce_range) — a trial not in the table changes nothing."""

    def __init__(self, drops):
        self.drops = {(frozenset(nodes), rr): d for (nodes, rr), d in drops.items()}
        self.calls = []

    def __call__(self, ref, path, feeds, *, batch_size):
        trial = json.loads(Path(path).read_text())
        self.calls.append((ref, feeds, batch_size, trial["excluded"], trial["reduce_range"]))
        drop = self.drops.get((frozenset(trial["excluded"]), trial["reduce_range"]), FIRST)
        return evaluation(drop, top1_agreement=1 - drop, kl_divergence=drop / 10)


def cand(label, *nodes, reduce_range=False):
    return Candidate(label, tuple(nodes), f"why {label}", reduce_range)


A, B, C, D = cand("A", "a"), cand("B", "b"), cand("C", "c1", "c2"), cand("D", "d")
SEVEN = cand("7-bit weights", reduce_range=True)


@pytest.fixture
def loop(monkeypatch, tmp_path):
    """run(found, drops, max_drop=…) → (BestTrial, trials, judge, the file at `out` or None)."""

    def run(found, drops, *, max_drop=0.0, max_candidates=10, batch_size=7, unfused=0.04):
        judge = Judge(drops)
        offered = []

        def fake_candidates(model, rows, quantizable, *, fused_gap):
            offered.append((model, rows, quantizable, fused_gap))
            return list(found)

        monkeypatch.setattr(budget_module, "judge", judge)
        monkeypatch.setattr(budget_module, "candidates", fake_candidates)
        quantizer = FakeQuantizer()
        view = Layerwise(layers=[{"node": "fc1", "introduced_db": -3.0, "nodes": ["fc1"]}], uncovered={},
                         drop=unfused)
        out = tmp_path / "model.int8.onnx"
        out.write_text(json.dumps({"excluded": [], "reduce_range": False, "first": True}))
        trials = [trial_row(0, [], evaluation(FIRST), tried="nothing", kept=True)]
        outcome = budget_loop(quantizer, "REF", {"x": "FEEDS"}, evaluation(FIRST), view, out, trials,
                              Budget(max_drop=max_drop, min_agreement=1 - max_drop, max_candidates=max_candidates,
                                     batch_size=batch_size))
        run.quantizer, run.offered, run.view = quantizer, offered, view
        return outcome, trials, judge, json.loads(out.read_text())

    return run


def tried(trials):
    return [(t["tried"], t["excluded"], t["reduce_range"], t["kept"], t["drop"]) for t in trials[1:]]


def test_the_candidates_are_asked_of_the_prepared_model_with_the_evidence(loop):
    loop([], {})
    [(model, rows, quantizable, fused_gap)] = loop.offered
    assert model is loop.quantizer.prepared and rows is loop.view.layers
    # the quantised op types only, and only named nodes (a trial excludes nodes by name)
    assert quantizable == {"fc1": "MatMul", "head": "Gemm"}
    assert fused_gap == pytest.approx(FIRST - 0.04)  # deployed drop − the unfused graph's


def test_no_candidate_keeps_the_first_model(loop):
    outcome, trials, judge, written = loop([], {})
    assert (outcome.result.drop, outcome.excluded, outcome.reduce_range) == (FIRST, [], False)
    assert len(trials) == 1 and judge.calls == [] and loop.quantizer.written == []
    assert written["first"]  # `out` untouched: it already holds the best model


def test_each_candidate_is_probed_on_its_own_and_judged_as_written(loop):
    outcome, trials, judge, _ = loop([A, B, C], {})  # nothing helps
    assert tried(trials) == [("A (why A)", ["a"], False, False, FIRST), ("B (why B)", ["b"], False, False, FIRST),
                             ("C (why C)", ["c1", "c2"], False, False, FIRST)]
    assert [t["trial"] for t in trials] == [0, 1, 2, 3]  # numbered on from the rows already there
    assert [(ref, feeds, size) for ref, feeds, size, *_ in judge.calls] == [("REF", {"x": "FEEDS"}, 7)] * 3
    assert outcome.excluded == [] and outcome.result.drop == FIRST


def test_at_most_max_candidates_are_probed(loop):
    _, trials, _, _ = loop([A, B, C, D], {}, max_candidates=2)
    assert [t["tried"] for t in trials[1:]] == ["A (why A)", "B (why B)"]


def test_max_candidates_zero_tries_nothing(loop):
    outcome, trials, judge, _ = loop([A, B], {(("a",), False): 0.0}, max_candidates=0)
    assert len(trials) == 1 and judge.calls == [] and outcome.excluded == []


def test_the_loop_stops_at_the_first_trial_meeting_the_budget(loop):
    drops = {(("a",), False): 0.06, (("b",), False): 0.005, (("d",), False): 0.0}
    outcome, trials, _, written = loop([A, B, D], drops, max_drop=0.01)
    assert [t["tried"] for t in trials[1:]] == ["A (why A)", "B (why B)"]  # D, better still, is never tried
    assert (outcome.excluded, outcome.result.drop) == (["b"], 0.005)
    assert written == {"excluded": ["b"], "reduce_range": False}


def test_helpful_candidates_are_combined_best_first_keeping_only_what_lowers_the_drop(loop):
    drops = {(("a",), False): 0.06, (("b",), False): 0.08, (("c1", "c2"), False): 0.12, (("d",), False): 0.07,
             (("a", "d"), False): 0.04, (("a", "d", "b"), False): 0.05}
    outcome, trials, _, written = loop([A, B, C, D], drops)
    assert tried(trials) == [
        ("A (why A)", ["a"], False, True, 0.06),
        ("B (why B)", ["b"], False, False, 0.08),  # better than the first model, not than the best so far
        ("C (why C)", ["c1", "c2"], False, False, 0.12),
        ("D (why D)", ["d"], False, False, 0.07),
        ("D on top of A", ["a", "d"], False, True, 0.04),  # helpful ones, best first; C made it worse: left out
        ("B on top of A and more", ["a", "d", "b"], False, False, 0.05),
    ]
    assert (outcome.excluded, outcome.result.drop, outcome.reduce_range) == (["a", "d"], 0.04, False)
    assert written == {"excluded": ["a", "d"], "reduce_range": False}  # `out` holds the best model


def test_a_combination_that_does_not_help_is_not_built_on(loop):
    drops = {(("a",), False): 0.06, (("b",), False): 0.07, (("d",), False): 0.08,
             (("a", "b"), False): 0.09, (("a", "d"), False): 0.05}
    outcome, trials, _, _ = loop([A, B, D], drops)
    assert [(t["tried"], t["excluded"]) for t in trials[4:]] == [("B on top of A", ["a", "b"]),
                                                                 ("D on top of A", ["a", "d"])]
    assert outcome.excluded == ["a", "d"]


def test_the_combination_stops_once_the_budget_is_met(loop):
    drops = {(("a",), False): 0.06, (("b",), False): 0.07, (("d",), False): 0.08, (("a", "b"), False): 0.01}
    outcome, trials, _, _ = loop([A, B, D], drops, max_drop=0.01)
    assert trials[-1]["tried"] == "B on top of A" and len(trials) == 1 + 3 + 1
    assert outcome.excluded == ["a", "b"]


def test_7_bit_weights_carry_into_the_combinations(loop):
    drops = {((), True): 0.05, (("a",), False): 0.07, (("a",), True): 0.03}
    outcome, trials, _, written = loop([SEVEN, A], drops)
    assert tried(trials) == [("7-bit weights (why 7-bit weights)", [], True, True, 0.05),
                             ("A (why A)", ["a"], False, False, 0.07),
                             ("A on top of 7-bit weights", ["a"], True, True, 0.03)]
    assert (outcome.excluded, outcome.reduce_range) == (["a"], True)
    assert written == {"excluded": ["a"], "reduce_range": True}


def test_a_probe_only_as_good_as_the_best_is_not_kept(loop):
    drops = {(("a",), False): 0.06, (("b",), False): 0.06}
    outcome, trials, _, _ = loop([A, B], drops)
    assert [t["kept"] for t in trials[1:3]] == [True, False]
    assert outcome.excluded == ["a"]


def test_trial_files_are_written_apart_from_out_and_removed(loop, tmp_path):
    loop([A, B], {(("a",), False): 0.06})
    paths = set(loop.quantizer.written)
    assert len(paths) == 1  # one scratch file, rewritten per trial
    [scratch] = paths
    assert scratch.parent != tmp_path and not scratch.parent.exists()


# --- Budget, trial_row ---


@pytest.mark.parametrize("max_drop, drop, met", [
    pytest.param(0.01, 0.01, True, id="at-the-budget"),
    pytest.param(0.01, 0.95 - 0.94, True, id="accuracy-difference-rounded-above"),
    pytest.param(0.01, 0.0101, False, id="one-sample-in-10000-over"),
    pytest.param(0.0, 0.0, True, id="zero-budget-zero-drop"),
    pytest.param(0.0, 0.005, False, id="zero-budget-any-drop"),
    pytest.param(0.01, -0.02, True, id="int8-better"),
])
def test_the_budget_is_met_up_to_float_rounding(max_drop, drop, met):
    budget = Budget(max_drop=max_drop, min_agreement=0.0, max_candidates=5, batch_size=32)
    assert budget.met(evaluation(drop)) is met


@pytest.mark.parametrize("agreement, met", [
    pytest.param(0.99, True, id="at-the-limit"),
    pytest.param(0.9899, False, id="one-sample-in-10000-under"),
    pytest.param(1.0, True, id="every-sample-agrees"),
])
def test_the_budget_holds_the_agreement_parity_judges_even_when_accuracy_holds(agreement, met):
    # labels: accuracy did not drop (flips cancel out), but INT8 disagrees with FP32 on more samples than allowed
    budget = Budget(max_drop=0.01, min_agreement=0.99, max_candidates=5, batch_size=32)
    assert budget.met(evaluation(0.0, agreement)) is met
    assert budget.shortfall(evaluation(0.0, agreement)) == pytest.approx(0.99 - agreement)


def test_a_trial_that_brings_the_deciding_limit_closer_is_kept(loop):
    # every trial within the accuracy budget; only the one that raises the agreement is kept
    budget = Budget(max_drop=0.05, min_agreement=0.99, max_candidates=5, batch_size=32)
    assert budget.shortfall(evaluation(0.0, 0.98)) < budget.shortfall(evaluation(0.0, 0.97))
    assert budget.shortfall(evaluation(0.04, 0.995)) < budget.shortfall(evaluation(0.0, 0.98))


def test_a_trial_row_holds_what_was_tried_and_its_figures():
    excluded = ["n1", "n2"]
    result = Evaluation(drop=0.02, accuracy_fp32=0.95, accuracy_int8=0.93,
                        logits={"top1_agreement": 0.97, "kl_divergence": 0.01, "other": 1.0})
    row = trial_row(3, excluded, result, tried="n2 on top of n1", kept=True, reduce_range=True)
    assert row == {"trial": 3, "tried": "n2 on top of n1", "excluded": ["n1", "n2"], "reduce_range": True,
                   "kept": True, "drop": 0.02, "accuracy_fp32": 0.95, "accuracy_int8": 0.93, "agreement": 0.0,
                   "top1_agreement": 0.97, "kl_divergence": 0.01}
    excluded.append("n3")
    assert row["excluded"] == ["n1", "n2"]  # a copy: later trials extend their own lists


def test_a_trial_row_without_labels_or_classifier_figures_holds_none():
    row = trial_row(0, [], Evaluation(drop=0.0, accuracy_fp32=None, accuracy_int8=None, logits={}),
                    tried="nothing", kept=True)
    assert (row["accuracy_fp32"], row["top1_agreement"], row["kl_divergence"], row["reduce_range"]) == (
        None, None, None, False)


def test_an_outcome_starts_with_nothing_excluded():
    first, second = BestTrial(evaluation(0.1)), BestTrial(evaluation(0.2))
    first.excluded.append("n")
    assert second.excluded == [] and not second.reduce_range  # each outcome its own list
