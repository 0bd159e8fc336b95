import pytest
from kfp import dsl

from skewgate.common.verdict import Verdict
from skewgate.export.component import export_op


def _outputs(tmp_path):
    return {
        "onnx_model": dsl.Model(uri=str(tmp_path / "onnx_model")),
        "verdict": dsl.Artifact(uri=str(tmp_path / "verdict")),
        "metrics": dsl.Metrics(uri=str(tmp_path / "metrics")),
        "report": dsl.Markdown(uri=str(tmp_path / "report")),
        "attestation": dsl.Artifact(uri=str(tmp_path / "attestation")),
    }


@pytest.mark.parametrize(("variant", "status"), [("good", "pass"), ("train_mode", "fail")])
def test_component_writes_verdict_metrics_report_and_returns_status(pt2, example_npz, tmp_path, variant, status):
    outputs = _outputs(tmp_path)
    returned = export_op.python_func(model=dsl.Model(uri=str(pt2(variant))),
                                     example_inputs=dsl.Dataset(uri=str(example_npz)), **outputs)
    assert returned == status
    verdict = Verdict.read(tmp_path / "verdict")
    assert verdict.status == status
    assert outputs["verdict"].metadata["sha256"] == verdict.subject.sha256
    assert outputs["metrics"].metadata["passed"] == float(status == "pass")
    assert "export: " in (tmp_path / "report").read_text()


def test_component_signs_its_verdict_when_the_pipeline_has_a_key(pt2, example_npz, tmp_path, monkeypatch):
    import json

    from skewgate.common import attest

    key, public = attest.generate_keys(tmp_path / "keys")
    outputs = _outputs(tmp_path)
    monkeypatch.delenv(attest.SIGNING_KEY_ENV, raising=False)
    export_op.python_func(model=dsl.Model(uri=str(pt2("good"))), example_inputs=dsl.Dataset(uri=str(example_npz)),
                          **outputs)
    assert json.loads((tmp_path / "attestation").read_text()) == {}  # no key: promote will read it as unsigned
    monkeypatch.setenv(attest.SIGNING_KEY_ENV, str(key))
    export_op.python_func(model=dsl.Model(uri=str(pt2("good"))), example_inputs=dsl.Dataset(uri=str(example_npz)),
                          **outputs)
    verdict = Verdict.read(tmp_path / "verdict")
    envelope = json.loads((tmp_path / "attestation").read_text())
    trusted = attest.load_trusted_keys([public])
    assert attest.verify_verdict(verdict, envelope, trusted, artifact_sha256=verdict.subject.sha256)


def test_component_raises_when_it_cannot_evaluate(example_npz, tmp_path):
    outputs = _outputs(tmp_path)
    with pytest.raises(RuntimeError, match="could not evaluate"):
        export_op.python_func(model=dsl.Model(uri=str(tmp_path / "missing.pt2")),
                              example_inputs=dsl.Dataset(uri=str(example_npz)), **outputs)
    assert Verdict.read(tmp_path / "verdict").status == "error"
