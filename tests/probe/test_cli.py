import json

import pytest

from skewgate.cli import main
from skewgate.common.processes import free_port

pytestmark = pytest.mark.integration


def test_probe_without_url_starts_its_own_server_and_passes(models, tmp_path, installation):
    code = main(["probe", "--model", "mlp", "--onnx", str(models["good"]), "--inputs", str(models["inputs"]),
                 "--report", str(tmp_path / "probe.json")])
    assert code == 0
    report = json.loads((tmp_path / "probe.json").read_text())
    assert report["status"] == "pass" and report["details"]["latency"]


def test_probe_against_a_wrong_deployment_exits_1(served, models):
    assert main(["probe", "--url", served.http_url, "--model", "tampered", "--onnx", str(models["good"]),
                 "--inputs", str(models["inputs"]), "--repository", str(served.repository)]) == 1


def test_unreachable_server_exits_2(models, capsys):
    assert main(["probe", "--url", f"127.0.0.1:{free_port()}", "--model", "m", "--onnx", str(models["good"]),
                 "--inputs", str(models["inputs"]), "--deadline", "1"]) == 2
    assert "failed for 1s" in capsys.readouterr().err


def test_malformed_header_exits_2(models):
    assert main(["probe", "--url", "127.0.0.1:1", "--model", "m", "--onnx", str(models["good"]),
                 "--inputs", str(models["inputs"]), "--header", "novalue"]) == 2
