"""The release policy: default bounds are the steps' own defaults, each rule refuses a loosened setting naming it,
and a policy file is read strictly (the file and the field named)."""

import json

import pytest

from skewgate.calibrate.core import CalibrateOptions
from skewgate.common.errors import InputError
from skewgate.common.policy import DEFAULT_BOUNDS, STREAM_CHECKS, Bound, GatePolicy, load_policy
from skewgate.common.steps import RELEASE_GATE_STEPS
from skewgate.common.verdict import Check, Subject, Verdict, settings_json
from skewgate.compare.run import CompareOptions
from skewgate.drift.core import DriftOptions
from skewgate.export.run import ExportOptions
from skewgate.parity.core import ParityOptions
from skewgate.probe.run import ProbeOptions

OPTIONS = {"export": ExportOptions(), "calibrate": CalibrateOptions(), "drift": DriftOptions(),
           "parity": ParityOptions(), "probe": ProbeOptions(), "compare": CompareOptions()}


PASSED = (Check("c", passed=True),)


def _verdict(step, options, checks=PASSED):
    return Verdict.from_checks(step, checks, subject=Subject("m.onnx", "ab" * 32)).judged_with(options)


@pytest.mark.parametrize("bound", DEFAULT_BOUNDS, ids=lambda b: f"{b.step}.{b.setting}")
def test_each_default_bound_is_its_steps_own_default(bound):
    """The release gate's defaults are the loosest acceptable: a verdict judged with them passes every bound,
    and each bound sits exactly at the default (not looser)."""
    settings = _verdict(bound.step, OPTIONS[bound.step]).settings
    assert bound.problem(settings) == ""
    value = settings
    for part in bound.setting.split("."):
        value = value[part]
    assert value == bound.value


def test_every_release_gate_step_is_bounded_and_judged_at_its_defaults():
    assert {b.step for b in DEFAULT_BOUNDS} == set(RELEASE_GATE_STEPS)
    for step, options in OPTIONS.items():
        assert GatePolicy().problems(_verdict(step, options)) == [], step


@pytest.mark.parametrize(("step", "options", "named"), [
    pytest.param("calibrate", CalibrateOptions(max_accuracy_drop=0.05), "max_accuracy_drop = 0.05, the policy "
                 "accepts at most 0.01", id="calibrate-budget-raised"),
    pytest.param("parity", ParityOptions(min_layer_sqnr_db=10.0), "min_layer_sqnr_db = 10.0, the policy accepts "
                 "at least 20.0", id="parity-sqnr-floor-lowered"),
    pytest.param("parity", ParityOptions(layer_tolerance=settings_json({"rtol": 0.1, "atol": 0.1})),
                 "layer_tolerance = {\"rtol\": 0.1, \"atol\": 0.1}, the policy accepts only null",
                 id="parity-layer-tolerance-set"),
    pytest.param("export", ExportOptions(tolerances=("logits=0.1,0.1",)), "tolerances = [\"logits=0.1,0.1\"]",
                 id="export-tolerance-override"),
    pytest.param("export", ExportOptions(max_samples=4), "max_samples = 4, the policy accepts at least 64",
                 id="export-fewer-samples"),
    pytest.param("drift", DriftOptions(alpha_ks=0.001), "alpha_ks = 0.001", id="drift-alpha-lowered"),
    pytest.param("drift", DriftOptions(correction="bonferroni"), "correction = \"bonferroni\"",
                 id="drift-bonferroni"),
    pytest.param("probe", ProbeOptions(max_p99_ms=60_000.0), "max_p99_ms = 60000.0", id="probe-p99-raised"),
    pytest.param("compare", CompareOptions(threshold_specs=("accuracy:max_regression=0.2",)),
                 "thresholds.accuracy.max_regression = 0.2", id="compare-threshold-loosened"),
    pytest.param("compare", CompareOptions(threshold_specs=("accuracy:max_regression=none",)),
                 "thresholds.accuracy.max_regression = null, the policy accepts at most 0.005",
                 id="compare-threshold-removed"),
    pytest.param("compare", CompareOptions(confidence=0.999), "confidence = 0.999", id="compare-wider-interval"),
])
def test_a_loosened_setting_is_refused_naming_it(step, options, named):
    problems = GatePolicy().problems(_verdict(step, options))
    assert len(problems) == 1 and named in problems[0], problems


@pytest.mark.parametrize("options", [
    pytest.param(CalibrateOptions(max_accuracy_drop=0.001), id="tighter-budget"),
    pytest.param(CalibrateOptions(min_calibration_samples=512), id="more-samples"),
])
def test_a_tightened_setting_is_accepted(options):
    assert GatePolicy().problems(_verdict("calibrate", options)) == []


def test_a_verdict_that_does_not_say_its_settings_is_refused_where_the_policy_bounds_them():
    unsaid = Verdict.from_checks("parity", [Check("c", passed=True)], subject=Subject("m.onnx", "ab" * 32))
    (problem,) = GatePolicy().problems(unsaid)
    assert "does not say the settings it was judged with" in problem and "min_layer_sqnr_db" in problem
    assert GatePolicy(bounds=()).problems(unsaid) == []  # a policy that bounds nothing asks nothing


def _policy_file(tmp_path, document, suffix=".yaml"):
    path = tmp_path / f"policy{suffix}"
    path.write_text(json.dumps(document) if suffix == ".json" else document)
    return path


def test_a_policy_file_loosens_one_setting_and_keeps_every_other_default(tmp_path):
    path = _policy_file(tmp_path, "required: [export, calibrate]\nsettings:\n  calibrate-int8:\n"
                                  "    max_accuracy_drop: {at_most: 0.05}\n")
    policy = load_policy(path)
    assert policy.required == ("export", "calibrate") and policy.source == str(path)
    assert policy.problems(_verdict("calibrate", CalibrateOptions(max_accuracy_drop=0.05))) == []
    (problem,) = policy.problems(_verdict("calibrate", CalibrateOptions(max_accuracy_drop=0.05,
                                                                         max_fallback_layers=50)))
    assert "max_fallback_layers = 50" in problem
    assert policy.problems(_verdict("calibrate", CalibrateOptions(max_accuracy_drop=0.06)))


def test_a_json_policy_lifts_a_bound_with_any_and_requires_checks(tmp_path):
    path = _policy_file(tmp_path, {"schema_version": 1, "allow_warn": True,
                                   "settings": {"probe": {"max_p99_ms": {"any": True}}},
                                   "checks": {"parity": ["stream.*"]}}, suffix=".json")
    policy = load_policy(path)
    assert policy.allow_warn and policy.required == RELEASE_GATE_STEPS
    assert policy.problems(_verdict("probe", ProbeOptions(max_p99_ms=1e9))) == []
    assert policy.problems(_verdict("parity", ParityOptions())) == \
        [f"no check 'stream.*', which the policy ({path}) requires"]
    streamed = [Check("stream.matches_batch", passed=True), Check("stream.reset", passed=False, severity="warn")]
    assert policy.problems(_verdict("parity", ParityOptions(), streamed)) == \
        ["check stream.reset failed, which the policy requires"]


@pytest.mark.parametrize(("text", "field", "expected"), [
    pytest.param("settings:\n  parity:\n    min_layer_sqnr_db: {at_least: loose}\n",
                 "settings.parity.min_layer_sqnr_db.at_least", "a finite number", id="rule-value-not-a-number"),
    pytest.param("settings:\n  parity:\n    min_layer_sqnr_db: {above: 3}\n",
                 "settings.parity.min_layer_sqnr_db", "one rule", id="unknown-rule"),
    pytest.param("settings:\n  pariti: {}\n", None, "did you mean 'parity'", id="unknown-step"),
    pytest.param("requried: [export]\n", "requried", "schema_version, required", id="unknown-field"),
    pytest.param("required: []\n", "required", "a non-empty list", id="nothing-required"),
    pytest.param("schema_version: 2\n", "schema_version", "1", id="future-schema"),
    pytest.param("- export\n", None, "a policy: a mapping", id="not-a-mapping"),
    pytest.param("settings: {parity: [1]\n", None, "a policy file (JSON or YAML)", id="not-yaml"),
])
def test_a_malformed_policy_is_an_input_error_naming_the_file_and_field(tmp_path, text, field, expected):
    path = _policy_file(tmp_path, text)
    with pytest.raises(InputError, match=r"policy\.yaml") as caught:
        load_policy(path)
    assert expected in str(caught.value)
    if field is not None:
        assert f"policy.yaml: {field}:" in str(caught.value)


def test_a_fifo_is_not_read_as_a_policy(tmp_path):
    import os

    fifo = tmp_path / "policy.yaml"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"not a regular file|FIFO"):
        load_policy(fifo)


def test_bound_rules_treat_null_and_booleans_as_no_number():
    assert Bound("s", "x", "at_most", 1.0).problem({"x": None}) == "x = null, the policy accepts at most 1.0"
    assert Bound("s", "x", "at_least", 1).problem({"x": True})
    assert Bound("s", "a.b", "one_of", ["bh"]).problem({"a": {"b": "bh"}}) == ""
    assert Bound("s", "x", "any").problem({}) == ""
    assert Bound("s", "x", "equals", 3).problem({}) == "x is not among the settings it was judged with"


def test_a_stateful_release_requires_parity_and_probe_stream_checks():
    policy = GatePolicy().requiring(STREAM_CHECKS)
    batch_only = policy.problems(_verdict("parity", ParityOptions()))
    assert [p.split("'")[1] for p in batch_only] == ["stream.matches_batch", "stream.state_used", "stream.reset"]
    streamed = [Check(name, passed=True) for name in STREAM_CHECKS["parity"]]
    assert policy.problems(_verdict("parity", ParityOptions(), streamed)) == []
    assert policy.problems(_verdict("probe", ProbeOptions())) == \
        [f"no check 'stream.*', which the policy ({policy.source}) requires"]
    assert GatePolicy().problems(_verdict("parity", ParityOptions())) == []  # a stateless release asks none
