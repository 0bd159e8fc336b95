"""Policy as evidence against a real `mlflow server`: a signed pass judged with a loosened budget is refused by
promote (naming the setting) and leaves the champion where it was; a policy file that allows the looser setting
promotes it; verify applies its own policy to the stored verdicts; a malformed policy touches nothing."""

import pytest
from mlflow import MlflowClient

from skewgate.calibrate.core import CalibrateOptions
from skewgate.cli import main
from skewgate.common.cli_support import write_report
from skewgate.common.io import sha256_file
from skewgate.common.recording import StepResult
from skewgate.common.verdict import Check, Subject, Verdict
from skewgate.export.run import ExportOptions

pytestmark = pytest.mark.integration
LOOSE = "settings:\n  calibrate:\n    max_accuracy_drop: {at_most: 0.05}\n"


@pytest.fixture(autouse=True)
def _sign_the_decision(keys, monkeypatch):
    monkeypatch.setenv("SKEWGATE_SIGNING_KEY", str(keys[0]))  # promote signs its decision as the pipeline does


def _evidence(folder, onnx, keys, *, accuracy_drop):
    """Export at its defaults and calibrate at `accuracy_drop`, both passing, signed as a step's --report does."""
    subject = Subject("model.onnx", sha256_file(onnx))
    folder.mkdir(parents=True)
    for step, options in (("export", ExportOptions()),
                          ("calibrate", CalibrateOptions(max_accuracy_drop=accuracy_drop))):
        verdict = Verdict.from_checks(step, [Check("c", passed=True)], subject=subject).judged_with(options)
        write_report(StepResult.unrecorded(verdict, str(keys[0])), folder / f"{step}.json")
    return folder


def _promote(url, name, onnx, verdicts, keys, *extra):
    return main(["promote", "--model-name", name, "--onnx", str(onnx), "--verdicts", str(verdicts),
                 "--require", "export,calibrate", "--trusted-key", str(keys[1]), "--tracking-uri", url,
                 "--experiment", name, "-q", *extra])


def _verify(url, name, keys, *extra):
    return main(["verify", "--model-name", name, "--trusted-key", str(keys[1]), "--tracking-uri", url,
                 "--require", "export,calibrate", *extra])


def _tiny_variant(tiny_onnx, path, label):
    import onnx

    model = onnx.load(str(tiny_onnx))
    model.producer_name = label  # a valid model with its own digest
    onnx.save(model, str(path))
    return path


def test_a_loosened_budget_is_refused_unless_the_policy_allows_it(mlflow_url, tiny_onnx, tmp_path, keys, capsys):
    name = "policy-loosened"
    client = MlflowClient(mlflow_url)
    first = _tiny_variant(tiny_onnx, tmp_path / "first.onnx", "first")
    assert _promote(mlflow_url, name, first, _evidence(tmp_path / "v1", first, keys, accuracy_drop=0.01), keys) == 0
    assert str(client.get_model_version_by_alias(name, "champion").version) == "1"

    loose = _tiny_variant(tiny_onnx, tmp_path / "loose.onnx", "loose")
    verdicts = _evidence(tmp_path / "v2", loose, keys, accuracy_drop=0.05)
    capsys.readouterr()
    assert _promote(mlflow_url, name, loose, verdicts, keys) == 1
    err = capsys.readouterr().err
    assert "evidence.calibrate" in err and "max_accuracy_drop = 0.05, the policy accepts at most 0.01" in err
    assert str(client.get_model_version_by_alias(name, "champion").version) == "1"  # the champion stays

    policy = tmp_path / "loose.yaml"
    policy.write_text(LOOSE)
    assert _promote(mlflow_url, name, loose, verdicts, keys, "--policy", str(policy)) == 0
    champion = client.get_model_version_by_alias(name, "champion")
    assert str(champion.version) == "2"

    # verify judges the stored verdicts by its own policy: the defaults refuse what the loose policy let through
    capsys.readouterr()
    assert _verify(mlflow_url, name, keys) == 1
    assert "max_accuracy_drop = 0.05" in capsys.readouterr().err
    assert _verify(mlflow_url, name, keys, "--policy", str(policy)) == 0


def test_a_malformed_policy_exits_2_before_the_registry_is_touched(mlflow_url, tiny_onnx, tmp_path, keys, capsys):
    name = "policy-malformed"
    onnx = _tiny_variant(tiny_onnx, tmp_path / "m.onnx", "malformed")
    policy = tmp_path / "bad.yaml"
    policy.write_text("settings:\n  calibrate:\n    max_accuracy_drop: {below: 0.05}\n")
    verdicts = _evidence(tmp_path / "v", onnx, keys, accuracy_drop=0.01)
    assert _promote(mlflow_url, name, onnx, verdicts, keys, "--policy", str(policy)) == 2
    assert "bad.yaml: settings.calibrate.max_accuracy_drop" in capsys.readouterr().err
    assert MlflowClient(mlflow_url).search_registered_models(f"name = '{name}'") == []
    assert _verify(mlflow_url, name, keys, "--policy", str(policy)) == 2
