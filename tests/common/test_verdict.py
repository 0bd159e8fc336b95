import json

import pytest

from skewgate.common.errors import InputError
from skewgate.common.tensor_stats import summarize
from skewgate.common.verdict import SCHEMA_VERSION, Check, Subject, Verdict

SUBJECT = Subject(artifact="model.onnx", sha256="ab" * 32, data={"inputs": "cd" * 32})


@pytest.mark.parametrize(
    ("checks", "status"),
    [
        pytest.param([Check("a", passed=True)], "pass", id="all-passed"),
        pytest.param([Check("a", passed=True), Check("b", passed=False)], "fail", id="one-failed"),
        pytest.param([Check("a", passed=True), Check("b", passed=False, severity="warn")], "warn", id="warn-only"),
        pytest.param([Check("a", passed=False, severity="warn"), Check("b", passed=False)], "fail",
                     id="fail-beats-warn"),
        pytest.param([], "fail", id="empty-means-fail"),
    ],
)
def test_status_follows_from_checks(checks, status):
    assert Verdict.from_checks("export", checks, subject=SUBJECT).status == status


def test_json_round_trip_keeps_every_field(tmp_path):
    import numpy as np

    verdict = Verdict.from_checks(
        "export",
        [Check("outputs_match.y", passed=True, value=0.5, limit=1.0, detail="fine")],
        subject=SUBJECT,
        stats=[summarize("x", "torch.input", np.arange(6, dtype=np.float32).reshape(2, 3))],
        details={"gelu": {"none": 2}, "list": [1, 2]},
    )
    path = verdict.write(tmp_path / "v.json")
    again = Verdict.read(path)
    assert again == verdict
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION


def test_non_finite_check_values_become_null_in_json():
    verdict = Verdict.from_checks("s", [Check("c", passed=False, value=float("inf"), limit=1.0)], subject=None)
    assert json.loads(verdict.to_json())["checks"][0]["value"] is None


def test_verdict_is_frozen():
    verdict = Verdict.from_checks("s", [Check("c", passed=True)], subject=None)
    with pytest.raises(AttributeError):
        verdict.status = "fail"  # type: ignore[misc]
    with pytest.raises(TypeError):
        verdict.details["x"] = 1  # type: ignore[index]


def test_unknown_status_is_rejected():
    with pytest.raises(ValueError, match="status"):
        Verdict(step="s", status="ok", checks=(), subject=None)  # type: ignore[arg-type]


def test_other_schema_version_is_an_input_error_naming_file_and_field(tmp_path):
    path = tmp_path / "v.json"
    data = Verdict.from_checks("s", [Check("c", passed=True)], subject=None).to_dict()
    path.write_text(json.dumps({**data, "schema_version": 99}))
    with pytest.raises(InputError, match=r"v\.json: schema_version: expected 1, 2, 3, found 99"):
        Verdict.read(path)


@pytest.mark.parametrize(
    ("content", "found"),
    [
        pytest.param("{not json", "invalid JSON", id="invalid-json"),
        pytest.param("[1, 2]", "list", id="not-an-object"),
        pytest.param('{"schema_version": 1, "step": "s"}', "no such field", id="missing-fields"),
        pytest.param('{"schema_version": ' + "3" * 5000 + "}", "an integer of 5000 digits", id="5000-digit-int"),
        pytest.param('{"details": ' + "[" * 20_000 + "]" * 20_000 + "}", "nesting deeper than 64",
                     id="20000-deep"),
        pytest.param('{"status": "fail", "status": "pass"}', "the key 'status' twice", id="duplicate-key"),
    ],
)
def test_malformed_verdict_files_are_input_errors(tmp_path, content, found):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InputError, match=found) as info:
        Verdict.read(path)
    assert "bad.json" in str(info.value)


def test_error_verdict_has_error_status_and_message():
    verdict = Verdict.error("export", "model.pt2: expected a .pt2")
    assert verdict.status == "error"
    assert verdict.checks == ()
    assert "expected" in verdict.message


def _edited(tmp_path, edit):
    """A real passing verdict, written, then edited by hand the way a careless or hostile user would."""
    verdict = Verdict.from_checks("export", [Check("outputs_match.y", passed=True, value=0.5, limit=1.0),
                                             Check("lint.dropout_inactive", passed=False)], subject=SUBJECT)
    data = verdict.to_dict()
    edit(data)
    path = tmp_path / "export.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("edit", "found"),
    [
        pytest.param(lambda d: d.update(status="pass"), "does not follow from the checks", id="status-edited"),
        pytest.param(lambda d: d.update(checks=[], status="pass"), "does not follow", id="empty-checks-pass"),
        pytest.param(lambda d: d.update(schema_version=True), "schema_version: expected an integer",
                     id="schema-version-bool"),
        pytest.param(lambda d: d["checks"][1].update(passed="true"), r"checks\[1\]\.passed: expected true or false",
                     id="passed-as-string"),
        pytest.param(lambda d: d["checks"][0].update(value="0.5"), r"checks\[0\]\.value: expected a finite number",
                     id="value-as-string"),
        pytest.param(lambda d: d.update(signature="x"), "unknown field", id="unknown-top-field"),
        pytest.param(lambda d: d["checks"][0].update(extra=1), r"checks\[0\]\.extra", id="unknown-check-field"),
        pytest.param(lambda d: d["subject"].update(sha256="AB" * 32), "64 lowercase hex", id="bad-digest"),
        pytest.param(lambda d: d.update(step="promotion"), "reserved", id="reserved-step-name"),
        pytest.param(lambda d: d.update(step="export.status"), "step", id="dotted-step-name"),
    ],
)
def test_hand_edited_verdicts_are_refused_naming_the_field(tmp_path, edit, found):
    path = _edited(tmp_path, edit)
    with pytest.raises(InputError, match=found) as info:
        Verdict.read(path)
    assert "export.json" in str(info.value)


def test_an_honest_failing_verdict_still_reads_back_as_fail(tmp_path):
    assert Verdict.read(_edited(tmp_path, lambda d: None)).status == "fail"


def test_an_oversized_verdict_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    import skewgate.common.verdict as verdict_module

    monkeypatch.setattr(verdict_module, "MAX_VERDICT_BYTES", 1000)
    path = _edited(tmp_path, lambda d: d["details"].update(padding="x" * 2000))
    with pytest.raises(InputError, match="at most 1000 bytes"):
        Verdict.read(path)


def test_the_shipped_json_schema_accepts_real_verdicts_and_rejects_edited_ones(tmp_path):
    import jsonschema

    from skewgate.common.verdict import json_schema

    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    good = json.loads(_edited(tmp_path, lambda d: None).read_text())
    jsonschema.validate(good, schema)
    jsonschema.validate(Verdict.error("probe", "down").to_dict(), schema)
    for edit in (lambda d: d.update(schema_version=True), lambda d: d["checks"][1].update(passed="false"),
                 lambda d: d.update(extra=1)):
        bad = json.loads(_edited(tmp_path, edit).read_text())
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_a_schema_1_verdict_reads_and_writes_back_byte_for_byte(tmp_path):
    """Version 1 kept registry tags in `details`; stored v1 verdicts must keep their digests (and signatures)."""
    v2 = Verdict.from_checks("calibrate", [Check("a", passed=True)], subject=None,
                             details={"accuracy": 0.9}, registry_tags={"skewgate.calibrate.int8_sha256": "ab"})
    v1 = v2.to_dict() | {"schema_version": 1}
    del v1["registry_tags"], v1["settings"]
    v1["details"] = {"accuracy": 0.9, "registry_tags": {"skewgate.calibrate.int8_sha256": "ab"}}
    raw = (json.dumps(v1, indent=2, sort_keys=True) + "\n").encode()
    path = tmp_path / "v1.json"
    path.write_bytes(raw)
    read = Verdict.read(path)
    assert read.registry_tags == {"skewgate.calibrate.int8_sha256": "ab"}
    assert dict(read.details) == {"accuracy": 0.9}
    assert read.to_bytes() == raw


def test_a_schema_2_verdict_without_settings_reads_and_writes_back_byte_for_byte(tmp_path):
    v2 = Verdict.from_checks("parity", [Check("a", passed=True)], subject=None).to_dict() | {"schema_version": 2}
    del v2["settings"]
    raw = (json.dumps(v2, indent=2, sort_keys=True) + "\n").encode()
    path = tmp_path / "v2.json"
    path.write_bytes(raw)
    read = Verdict.read(path)
    assert dict(read.settings) == {}
    assert read.to_bytes() == raw


def test_settings_say_what_the_step_was_judged_with_and_round_trip(tmp_path):
    from dataclasses import dataclass, field
    from pathlib import Path

    @dataclass(frozen=True)
    class Tol:
        rtol: float
        atol: float

    @dataclass(frozen=True)
    class Options:
        tolerance: float = 1e-4
        tolerances: dict = field(default_factory=lambda: {"logits": Tol(1e-3, 1e-5)})
        levels: tuple = (1, 4)
        stream: Path | None = Path("/tmp/step.onnx")
        ceiling: float = float("inf")

    verdict = Verdict.from_checks("parity", [Check("a", passed=True)], subject=None).judged_with(Options())
    assert dict(verdict.settings) == {"tolerance": 1e-4, "tolerances": {"logits": {"rtol": 1e-3, "atol": 1e-5}},
                                      "levels": [1, 4], "stream": "/tmp/step.onnx", "ceiling": "inf"}
    path = verdict.write(tmp_path / "parity.json")
    assert Verdict.read(path).to_bytes() == verdict.to_bytes()
    assert json.loads(path.read_text())["settings"]["tolerance"] == 1e-4


def test_typed_details_serialise_field_by_field():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Inner:
        layer: str
        error: float

    @dataclass(frozen=True)
    class Details:
        worst: Inner
        rows: tuple[Inner, ...]

    verdict = Verdict.from_checks("parity", [Check("a", passed=True)], subject=None,
                                  details=Details(Inner("conv1", 0.5), (Inner("a", 1.0),)))
    assert verdict.to_dict()["details"] == {"worst": {"layer": "conv1", "error": 0.5},
                                            "rows": [{"layer": "a", "error": 1.0}]}
    assert Verdict.from_dict(json.loads(verdict.to_json())) == verdict


def test_a_details_field_marked_omit_if_none_is_left_out_while_none():
    from dataclasses import dataclass, field

    from skewgate.common.verdict import OMIT_IF_NONE

    @dataclass(frozen=True)
    class Details:
        judged: str
        skipped: str | None = field(default=None, metadata=OMIT_IF_NONE)
        nothing: str | None = None  # an ordinary None stays, as null

    as_json = Verdict.from_checks("parity", [Check("a", passed=True)], subject=None,
                                  details=Details("fp32")).to_dict()["details"]
    assert as_json == {"judged": "fp32", "nothing": None}
    with_it = Verdict.from_checks("parity", [Check("a", passed=True)], subject=None,
                                  details=Details("fp32", skipped="no Triton URL")).to_dict()["details"]
    assert with_it["skipped"] == "no Triton URL"


def test_a_verdict_file_of_exactly_the_documented_limit_is_read_and_one_byte_more_is_refused(tmp_path):
    from skewgate.common.verdict import MAX_VERDICT_BYTES

    assert MAX_VERDICT_BYTES == 16 * 1024 * 1024  # the documented 16 MiB
    text = Verdict.from_checks("s", [Check("c", passed=True)], subject=None).to_json()
    path = tmp_path / "big.json"
    path.write_text(text + " " * (MAX_VERDICT_BYTES - len(text.encode())))
    assert Verdict.read(path).step == "s"
    path.write_text(text + " " * (MAX_VERDICT_BYTES - len(text.encode()) + 1))
    with pytest.raises(InputError, match=r"big\.json: expected a verdict JSON file"):
        Verdict.read(path)
