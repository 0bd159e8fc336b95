import json

import numpy as np
import pytest

from skewgate.cli import main
from skewgate.common.processes import free_port
from tests.export.models import examples


def _run(*args):
    return main(["export", *map(str, args)])


def test_pass_exits_0_and_writes_the_report(pt2, example_npz, tmp_path, capsys):
    code = _run("--model", pt2("good"), "--inputs", example_npz, "--out", tmp_path / "m.onnx",
                "--report", tmp_path / "r.json")
    assert code == 0
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "pass"
    assert "export: PASS" in capsys.readouterr().err


def test_failed_gate_exits_1(pt2, example_npz, tmp_path, capsys):
    code = _run("--model", pt2("train_mode"), "--inputs", example_npz, "--out", tmp_path / "m.onnx",
                "--report", tmp_path / "r.json")
    assert code == 1
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "fail"
    assert "FAIL lint.batchnorm_eval_mode" in capsys.readouterr().err


def test_bad_input_exits_2_with_a_message_naming_the_field(pt2, tmp_path, capsys):
    npz = tmp_path / "bad.npz"
    np.savez(npz, pixels=examples(3))
    code = _run("--model", pt2("good"), "--inputs", npz, "--out", tmp_path / "m.onnx", "--report",
                tmp_path / "r.json")
    assert code == 2
    err = capsys.readouterr().err
    assert "bad.npz: x: expected model input float32[N, 1, 8, 8], found no such array" in err
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "error"


def test_malformed_tolerance_exits_2(pt2, example_npz, tmp_path):
    assert _run("--model", pt2("good"), "--inputs", example_npz, "--out", tmp_path / "m.onnx",
                "--tolerance", "linear=abc") == 2


def test_unreachable_mlflow_exits_2_within_the_deadline(pt2, example_npz, tmp_path, capsys):
    port = free_port()  # nothing listens there
    code = _run("--model", pt2("good"), "--inputs", example_npz, "--out", tmp_path / "m.onnx",
                "--tracking-uri", f"http://127.0.0.1:{port}", "--mlflow-deadline", "2")
    assert code == 2
    assert "unreachable" in capsys.readouterr().err


def test_logs_to_mlflow_when_a_tracking_uri_is_given(pt2, example_npz, tmp_path):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert _run("--model", pt2("good"), "--inputs", example_npz, "--out", tmp_path / "m.onnx",
                "--tracking-uri", uri, "--experiment", "exp", "--pipeline-run-id", "run-1") == 0
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("exp")
    runs = client.search_runs([experiment.experiment_id], "tags.`skewgate.step` = 'export'")
    assert len(runs) == 1
    assert runs[0].data.metrics["export.outputs_match.linear"] <= 1.0
    assert runs[0].data.tags["skewgate.status"] == "pass"
    artifacts = {a.path for a in client.list_artifacts(runs[0].info.run_id)}
    assert {"export.verdict.json", "checks.json", "tensor_stats.json"} <= artifacts


@pytest.mark.parametrize("argv", [["--help"], ["export", "--help"], ["promote", "--help"],
                                  ["pipeline", "--help"]], ids=" ".join)
def test_help_exits_0(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_unknown_command_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["nope"])
    assert info.value.code == 2
