"""The release policy: default bounds are the steps' own defaults, each rule refuses a loosened setting naming it,
and a policy file is read strictly (the file and the field named)."""

import dataclasses
import json
import re

import pytest

from skewgate.calibrate.core import CalibrateOptions
from skewgate.common.errors import InputError
from skewgate.common.policy import DEFAULT_BOUNDS, STREAM_CHECKS, Bound, GatePolicy, load_policy
from skewgate.common.steps import RELEASE_GATE_STEPS, STEPS
from skewgate.common.verdict import Check, Subject, Verdict, settings_json
from skewgate.compare.run import CompareOptions
from skewgate.drift.core import DriftOptions
from skewgate.export.run import ExportOptions
from skewgate.parity.core import ParityOptions
from skewgate.probe.run import ProbeOptions
from tests.support.verdicts import DEFAULT_OPTIONS as OPTIONS

PASSED = (Check("c", passed=True),)


def _verdict(step, options, checks=PASSED):
    return Verdict.from_checks(step, checks, subject=Subject("m.onnx", "ab" * 32)).judged_with(options)


@pytest.mark.parametrize("bound", [b for b in DEFAULT_BOUNDS if b.rule != "any"],
                         ids=lambda b: f"{b.step}.{b.setting}")
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
    assert {b.step for b in DEFAULT_BOUNDS} == set(STEPS)
    for step, options in OPTIONS.items():
        assert GatePolicy().problems(_verdict(step, options)) == [], step


@pytest.mark.parametrize("step", sorted(OPTIONS))
def test_every_setting_a_step_records_has_exactly_one_default_rule(step):
    """Default deny holds only if the table is complete: an option without a rule would be refused in every
    release, and a rule without an option names nothing."""
    recorded = set(_leaves(_verdict(step, OPTIONS[step]).settings))
    ruled = [b.setting for b in DEFAULT_BOUNDS if b.step == step]
    assert len(ruled) == len(set(ruled))
    assert set(ruled) == recorded


def _leaves(settings, prefix=""):
    for key, value in settings.items():
        if key == "thresholds" or (prefix and isinstance(value, dict)):  # compare's: a rule per metric and field
            yield from _leaves(value, prefix=f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


LOOSE_TOLERANCE = {"rtol": 1.0, "atol": 1.0}
# For each `equals` rule, a value other than the default: an override set, a second draw, another alias or output
OTHER_VALUE = {("export", "tolerances"): ["logits=0.1,0.1"], ("export", "allow_pickle"): True,
               ("drift", "correction"): "bonferroni", ("drift", "id_selection_share"): 0.5,
               ("drift", "min_expected"): 1.0, ("drift", "seed"): 7,
               ("parity", "tolerances"): {"logits": LOOSE_TOLERANCE}, ("parity", "layer_tolerance"): LOOSE_TOLERANCE,
               ("parity", "seed"): 7, ("parity", "triton_serves"): "fp16",
               ("probe", "tolerances"): {"logits": LOOSE_TOLERANCE}, ("compare", "seed"): 7,
               ("compare", "alias"): "staging", ("compare", "output"): "logits_2",
               ("preprocess", "tolerance"): LOOSE_TOLERANCE, ("estimate", "seed"): 1,
               ("estimate", "output"): "probabilities"}


def _loosened(bound):
    """A value of `bound`'s setting looser than its default: a limit moved by a factor of two, or another value."""
    if bound.rule == "at_most":
        return bound.value * 2
    if bound.rule == "at_least":
        return bound.value / 2 if isinstance(bound.value, float) else bound.value // 2
    return OTHER_VALUE[bound.step, bound.setting]


def _with_settings(verdict, **changes):
    settings = settings_json(verdict.settings)
    for path, value in changes.items():
        *parents, last = path.split(".")
        holder = settings
        for part in parents:
            holder = holder[part]
        holder[last] = value
    return dataclasses.replace(verdict, settings=settings)


@pytest.mark.parametrize("bound", [b for b in DEFAULT_BOUNDS if b.rule != "any"],
                         ids=lambda b: f"{b.step}.{b.setting}")
def test_every_option_loosened_alone_is_refused_at_the_defaults(bound):
    """Each judged setting, loosened by itself (a limit moved by a factor of two, an override set, a second
    seed), makes an otherwise default verdict one the default policy refuses, naming that setting."""
    verdict = _with_settings(_verdict(bound.step, OPTIONS[bound.step]), **{bound.setting: _loosened(bound)})
    (problem,) = GatePolicy().problems(verdict)
    assert problem.startswith(f"judged with {bound.setting} = "), problem


@pytest.mark.parametrize(("step", "changes", "named"), [
    pytest.param("drift", {"permutations": 1}, "permutations = 1", id="drift-one-permutation"),
    pytest.param("parity", {"max_samples": 1}, "max_samples = 1", id="parity-one-sample"),
    pytest.param("drift", {"new_knob": 3}, "new_knob = 3, which no rule", id="unknown-setting"),
    pytest.param("compare", {"thresholds.accuracy.ceiling": 2}, "thresholds.accuracy.ceiling = 2, which no rule",
                 id="unknown-threshold-field"),
    pytest.param("compare", {"thresholds.top5": {"floor": 0.1}}, "thresholds.top5 = {", id="unknown-metric"),
])
def test_a_setting_outside_the_defaults_is_refused(step, changes, named):
    problems = GatePolicy().problems(_with_settings(_verdict(step, OPTIONS[step]), **changes))
    assert len(problems) == 1 and named in problems[0], problems


def test_compare_must_have_judged_against_the_alias_being_promoted():
    staged = _verdict("compare", CompareOptions(alias="staging"))
    (problem,) = GatePolicy().problems(staged)
    assert 'alias = "staging", the policy accepts only "champion"' in problem
    assert GatePolicy().promoting("staging").problems(staged) == []
    assert GatePolicy().promoting("staging").problems(_verdict("compare", CompareOptions()))


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
    assert "does not say the settings it was judged with" in problem
    assert GatePolicy(bounds=()).problems(unsaid) == [problem]  # default deny: nothing to judge is no pass


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
    pytest.param("settings:\n  calibrate: {max_accuracy_drop: {at_most: 0.01}}\n  calibrate-int8: {}\n",
                 "settings.calibrate-int8", "both 'calibrate' and 'calibrate-int8'", id="one-step-two-names"),
    pytest.param("checks:\n  probe: [a]\n  triton-probe: [b]\n", "checks.triton-probe", "one entry for the step",
                 id="checks-one-step-two-names"),
    pytest.param("allow_warn: false\nallow_warn: true\n", None, "the key 'allow_warn' twice", id="duplicate-key"),
    pytest.param("a: &a [1, 2]\nb: [*a, *a]\n", None, "aliases and anchors are not accepted", id="yaml-anchor"),
    pytest.param("required: " + "[" * 20_000 + "]" * 20_000 + "\n", None, "nesting deeper than 64",
                 id="20000-deep"),
    pytest.param("schema_version: " + "1" * 5000 + "\n", None, "an integer of 5000 digits", id="5000-digit-int"),
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


KEY_A, KEY_B, KEY_C = "a" * 64, "b" * 64, "c" * 64


def test_a_policy_revokes_keys_and_bounds_their_validity(tmp_path, caplog):
    """#32 item 9: a trusted key can be revoked, and trusted only within a window; an instant just inside each
    bound is trusted and one just outside is not."""
    from datetime import UTC, datetime, timedelta

    path = _policy_file(tmp_path, f"keys:\n  revoked: [{KEY_A}]\n  valid:\n    {KEY_B}: "
                                  "{not_before: '2026-01-01T00:00:00Z', not_after: '2027-01-01T00:00:00+00:00'}\n")
    policy = load_policy(path)
    keys = {KEY_A: "pub-a", KEY_B: "pub-b", KEY_C: "pub-c"}
    start, end = datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)
    second = timedelta(seconds=1)
    for now, trusted in ((start, {KEY_B, KEY_C}), (end, {KEY_B, KEY_C}), (start - second, {KEY_C}),
                         (end + second, {KEY_C})):
        caplog.clear()
        assert set(policy.trusted(keys, now=now)) == trusted, now
        assert f"key {KEY_A[:16]}… is revoked by the policy ({path})" in caplog.text
    assert "is valid from 2026-01-01 00:00:00+00:00 to 2027-01-01 00:00:00+00:00" in caplog.text
    with pytest.raises(InputError, match=r"--trusted-key: expected a key the policy trusts, found key aaaa"):
        policy.trusted({KEY_A: "pub-a"})  # keys were given, and none is left
    assert GatePolicy().trusted(keys) == keys  # no policy file: every key given is trusted
    assert policy.describe()["revoked_keys"] == [KEY_A]


@pytest.mark.parametrize(("text", "field"), [
    pytest.param("keys: {revoked: [abc]}\n", "keys.revoked", id="not-a-key-id"),
    pytest.param("keys: {expired: []}\n", "keys", id="unknown-field"),
    pytest.param(f"keys: {{valid: {{{KEY_B}: {{not_after: '2027-01-01T00:00:00'}}}}}}\n",
                 f"keys.valid.{KEY_B}.not_after", id="no-offset"),
    pytest.param(f"keys: {{valid: {{{KEY_B}: {{not_after: tomorrow}}}}}}\n", f"keys.valid.{KEY_B}.not_after",
                 id="not-a-time"),
])
def test_a_malformed_keys_section_names_the_field(tmp_path, text, field):
    with pytest.raises(InputError, match=rf"policy\.yaml: {re.escape(field)}:"):
        load_policy(_policy_file(tmp_path, text))


def test_the_documented_defaults_are_the_default_bounds():
    """docs/policy.md's table of defaults lists exactly `DEFAULT_BOUNDS`, in order."""
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "policy.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\w+) \| `([\w.]+)` \| (\w+) \| (.+) \|$", text, flags=re.MULTILINE)
    assert [(step, setting, rule) for step, setting, rule, _ in rows] == \
        [(b.step, b.setting, b.rule) for b in DEFAULT_BOUNDS]
    assert [value for *_, value in rows] == [
        "(any value)" if b.rule == "any" else f"`{json.dumps(b.value)}`" for b in DEFAULT_BOUNDS]
