import json

from mlflow import MlflowClient

from skewgate.cli import main
from tests.parity.models import plant


def test_layerwise_cli_writes_report_plot_html_and_logs_tables(mlflow_db, parity_model, tmp_path):
    uri = mlflow_db
    onnx_path = plant(parity_model["onnx"], tmp_path / "t.onnx", "tanh_gelu")
    code = main(["parity", "--torch", str(parity_model["pt2"]), "--onnx", str(onnx_path), "--inputs",
                 str(parity_model["inputs"]), "--layerwise", "--report", str(tmp_path / "p.json"), "--plot",
                 str(tmp_path / "layers.png"), "--html", str(tmp_path / "p.html"), "--tracking-uri", uri,
                 "--experiment", "parity"])
    assert code == 1
    report = json.loads((tmp_path / "p.json").read_text())
    assert report["details"]["torch_vs_fp32"]["first_divergence"]["module"] == "blocks.0.act"
    assert (tmp_path / "layers.png").read_bytes()[:4] == b"\x89PNG"
    assert "blocks.0.act" in (tmp_path / "p.html").read_text()
    client = MlflowClient(uri)
    run = client.search_runs([client.get_experiment_by_name("parity").experiment_id])[0]
    assert {"layers_torch_vs_fp32.json", "layers.png", "p.html"} <= {a.path for a in
                                                                     client.list_artifacts(run.info.run_id)}


def test_clean_model_exits_0(parity_model):
    assert main(["parity", "--torch", str(parity_model["pt2"]), "--onnx", str(parity_model["onnx"]),
                 "--inputs", str(parity_model["inputs"])]) == 0
