import json

import numpy as np
from mlflow import MlflowClient

from skewgate.cli import main


def test_cli_writes_model_report_plot_html_and_logs_tables(mlflow_db, calib, tmp_path):
    uri = mlflow_db
    code = main(["calibrate", "--onnx", str(calib["fragile_weights"]), "--calibration", str(calib["calibration"]),
                 "--eval", str(calib["eval_fragile"]), "--out", str(tmp_path / "m.int8.onnx"),
                 "--report", str(tmp_path / "c.json"), "--plot", str(tmp_path / "hist.png"),
                 "--html", str(tmp_path / "c.html"), "--tracking-uri", uri, "--experiment", "calib"])
    assert code == 0
    report = json.loads((tmp_path / "c.json").read_text())
    assert "node_conv2d_1" in report["details"]["excluded_nodes"]
    assert (tmp_path / "hist.png").read_bytes()[:4] == b"\x89PNG"
    assert "accuracy-budget trials" in (tmp_path / "c.html").read_text()
    client = MlflowClient(uri)
    run = client.search_runs([client.get_experiment_by_name("calib").experiment_id])[0]
    assert {"calibration_tensors.json", "calibration_trials.json", "calibration_layers.json", "hist.png",
            "c.html"} <= {a.path for a in client.list_artifacts(run.info.run_id)}
    assert run.data.metrics["calibrate.accuracy_drop"] <= 0.01 + 1e-9


def test_missed_budget_exits_1(calib, tmp_path):
    assert main(["calibrate", "--onnx", str(calib["fragile_weights"]), "--calibration", str(calib["calibration"]),
                 "--eval", str(calib["eval_fragile"]), "--out", str(tmp_path / "m.onnx"),
                 "--max-fallback-layers", "0"]) == 1


def test_bad_input_exits_2_and_names_the_file(calib, tmp_path, capsys):
    small = tmp_path / "small.npz"
    np.savez(small, x=np.load(calib["calibration"])["x"][:4])
    assert main(["calibrate", "--onnx", str(calib["none"]), "--calibration", str(small), "--eval",
                 str(calib["eval"]), "--out", str(tmp_path / "m.onnx"), "--report", str(tmp_path / "r.json")]) == 2
    assert "small.npz: expected at least 32 calibration samples, found 4" in capsys.readouterr().err
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "error"
