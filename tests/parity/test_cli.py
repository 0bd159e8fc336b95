import json

import numpy as np
import pytest
from mlflow import MlflowClient

from skewgate.cli import main
from tests.parity.models import plant

M = "tests.parity.preprocessing_fns"


def test_layerwise_cli_writes_report_plot_html_and_logs_tables(parity_model, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
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


@pytest.mark.parametrize(
    ("serve", "code", "failed"),
    [
        pytest.param("serve_same", 0, set(), id="same-preprocessing"),
        pytest.param("serve_unscaled", 1, {"preprocess_match"}, id="serving-forgot-to-scale"),
        pytest.param("serve_augmented", 1, {"determinism.serve", "preprocess_match"}, id="augmentation-left-on"),
    ],
)
def test_preprocess_parity(tmp_path, serve, code, failed):
    np.savez(tmp_path / "raw.npz", images=np.random.default_rng(0).integers(0, 17, (20, 1, 8, 8)).astype(np.float64))
    args = ["parity", "preprocess", "--train", f"{M}:train", "--serve", f"{M}:{serve}", "--raw",
            str(tmp_path / "raw.npz"), "--report", str(tmp_path / "r.json")]
    assert main(args) == code
    report = json.loads((tmp_path / "r.json").read_text())
    assert {c["name"] for c in report["checks"] if not c["passed"]} == failed
    assert set(report["details"]["hash_chain"]) == {"raw", "train", "serve"}
    if serve == "serve_unscaled":
        detail = next(c["detail"] for c in report["checks"] if c["name"] == "preprocess_match")
        assert "first difference at" in detail
        assert len(report["details"]["channels"]["train"]["mean"]) == 1


def test_preprocess_with_an_unimportable_callable_exits_2(tmp_path):
    np.savez(tmp_path / "raw.npz", images=np.zeros((2, 3)))
    assert main(["parity", "preprocess", "--train", "nope.module:fn", "--serve", f"{M}:serve_same", "--raw",
                 str(tmp_path / "raw.npz")]) == 2
