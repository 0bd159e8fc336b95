import pytest
from kfp import dsl

from skewgate.common.kfp_io import finish, to_markdown
from skewgate.common.recording import StepResult
from skewgate.common.verdict import Check, Subject, Verdict


def _outputs(tmp_path):
    return {"verdict_artifact": dsl.Artifact(uri=str(tmp_path / "v")),
            "metrics": dsl.Metrics(uri=str(tmp_path / "m")),
            "report": dsl.Markdown(uri=str(tmp_path / "r"))}


def test_markdown_has_status_and_a_row_per_check():
    verdict = Verdict.from_checks("export", [Check("a", passed=True, value=1), Check("b|c", passed=False)],
                                  subject=Subject(artifact="m.onnx", sha256="f" * 64))
    text = to_markdown(verdict)
    assert text.startswith("# export: ❌ FAIL")
    assert "| a | yes | 1 |" in text
    assert "| b\\|c | **no** |" in text
    assert "f" * 64 in text


def test_finish_writes_all_outputs_and_returns_status(tmp_path):
    outputs = _outputs(tmp_path)
    verdict = Verdict.from_checks("export", [Check("a", passed=True, value=0.5)], subject=None)
    assert finish(StepResult(verdict), **outputs) == "pass"
    assert Verdict.read(tmp_path / "v") == verdict
    assert outputs["metrics"].metadata == {"a": 0.5, "a.passed": 1.0, "passed": 1.0}
    assert outputs["verdict_artifact"].metadata["status"] == "pass"
    assert (tmp_path / "r").read_text().startswith("# export")


@pytest.mark.parametrize("envelope, written", [
    pytest.param({"payloadType": "application/vnd.in-toto+json", "payload": "e30=", "signatures": []},
                 {"payloadType": "application/vnd.in-toto+json", "payload": "e30=", "signatures": []}, id="signed"),
    pytest.param(None, {}, id="unsigned-is-empty"),
])
def test_the_attestation_output_is_the_envelope_the_verdict_was_recorded_with(tmp_path, envelope, written):
    """Byte for byte what the step run logged (promote reads `{}` as unsigned)."""
    import json

    outputs = _outputs(tmp_path) | {"attestation": dsl.Artifact(uri=str(tmp_path / "a"))}
    verdict = Verdict.from_checks("export", [Check("a", passed=True)], subject=Subject("m.onnx", "f" * 64))
    finish(StepResult(verdict, envelope), **outputs)
    assert json.loads((tmp_path / "a").read_text()) == written


def test_finish_raises_on_error_after_writing(tmp_path):
    with pytest.raises(RuntimeError, match="could not evaluate: boom"):
        finish(StepResult(Verdict.error("export", "boom")), **_outputs(tmp_path))
    assert Verdict.read(tmp_path / "v").status == "error"


@pytest.mark.parametrize(
    "hostile",
    ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "[click](javascript:alert(1))", "a | b"],
    ids=["script", "img-onerror", "link", "pipe"],
)
def test_user_controlled_strings_are_text_in_the_kfp_markdown(hostile):
    import markdown

    verdict = Verdict.from_checks(
        "drift", [Check(f"ks.{hostile}", passed=False, detail=hostile)],
        subject=Subject(artifact=f"/data/{hostile}.onnx", sha256="ab" * 32))
    rendered = markdown.markdown(to_markdown(verdict), extensions=["tables"])
    assert "<script" not in rendered and "<img" not in rendered and "href=" not in rendered
    assert rendered.count("<tr>") == 2  # the pipe did not split the row: header + one check
