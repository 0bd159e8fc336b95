"""`skewgate promote` end to end against a real embedded MLflow registry: exit codes and what it leaves."""

import pytest
from mlflow import MlflowClient

from skewgate.cli import main
from skewgate.common.io import sha256_file
from skewgate.common.processes import free_port
from skewgate.common.verdict import Check, Subject, Verdict


@pytest.fixture
def setup(tmp_path, tiny_onnx):
    onnx_path = tmp_path / "model.onnx"
    onnx_path.write_bytes(tiny_onnx.read_bytes())
    verdicts = tmp_path / "verdicts"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def write(status_ok=True):
        check = Check("c", passed=status_ok)
        Verdict.from_checks("export", [check], subject=Subject("m", sha256_file(onnx_path))).write(
            verdicts / "export.json")

    return onnx_path, verdicts, uri, write


def _promote(onnx_path, verdicts, uri, *extra):
    return main(["promote", "--model-name", "digits", "--onnx", str(onnx_path), "--verdicts", str(verdicts),
                 "--tracking-uri", uri, "--experiment", "digits", *extra])


def test_pass_promotes_and_exits_0(setup):
    onnx_path, verdicts, uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, uri) == 0
    assert str(MlflowClient(uri).get_model_version_by_alias("digits", "champion").version) == "1"


def test_refusal_exits_1_and_leaves_no_alias(setup, capsys):
    onnx_path, verdicts, uri, write = setup
    write(status_ok=False)
    assert _promote(onnx_path, verdicts, uri) == 1
    assert "refused" in capsys.readouterr().err
    client = MlflowClient(uri)
    assert client.get_registered_model("digits").aliases == {}
    assert client.get_model_version("digits", "1").tags["skewgate.promotion.status"] == "refused"


def test_onnx_changed_after_export_is_refused(setup):
    onnx_path, verdicts, uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, uri) == 0  # champion = v1
    import onnx

    model = onnx.load(str(onnx_path))
    model.producer_name = "tampered"  # valid ONNX, different bytes, same verdicts
    onnx.save(model, str(onnx_path))
    assert _promote(onnx_path, verdicts, uri) == 1
    client = MlflowClient(uri)
    assert str(client.get_model_version_by_alias("digits", "champion").version) == "1"
    assert "the file to promote is" in client.get_model_version("digits", "2").tags["skewgate.promotion.reason"]


def test_promoting_twice_keeps_one_version(setup):
    onnx_path, verdicts, uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, uri) == 0
    assert _promote(onnx_path, verdicts, uri) == 0
    assert [str(v.version) for v in MlflowClient(uri).search_model_versions("name='digits'")] == ["1"]


def test_existing_version_of_unknown_model_exits_2_and_registers_nothing(setup, capsys):
    onnx_path, verdicts, uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, uri, "--version", "1") == 2
    assert "expected a registered model, found no such registered model" in capsys.readouterr().err
    assert MlflowClient(uri).search_registered_models() == []


@pytest.mark.parametrize("case", ["truncated-onnx", "missing-verdicts-dir"])
def test_bad_input_exits_2_and_registers_nothing(setup, case):
    onnx_path, verdicts, uri, write = setup
    write()
    if case == "truncated-onnx":
        data = onnx_path.read_bytes()
        onnx_path.write_bytes(data[: len(data) // 3])
    else:
        verdicts = verdicts.parent / "nowhere"
    assert _promote(onnx_path, verdicts, uri) == 2
    assert MlflowClient(uri).search_registered_models() == []


def test_unreachable_mlflow_exits_2(setup):
    onnx_path, verdicts, _uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, f"http://127.0.0.1:{free_port()}", "--mlflow-deadline", "1") == 2


def test_without_a_tracking_uri_exits_2(setup, monkeypatch):
    onnx_path, verdicts, _uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, "") == 2
