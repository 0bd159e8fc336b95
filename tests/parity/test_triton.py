"""parity against a live Triton server serving the exported model (the Python backend running onnxruntime)."""

import pytest

from skewgate.common.triton.repository import write_repository
from skewgate.common.triton.server import Installation, triton_home, triton_server
from skewgate.parity.core import parity
from tests.parity.models import plant

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(parity_model, tmp_path_factory):
    repo = tmp_path_factory.mktemp("triton") / "repository"
    write_repository(parity_model["onnx"], repo, name="blocks")
    write_repository(plant(parity_model["onnx"], repo.parent / "tanh.onnx", "tanh_gelu"), repo, name="tanh")
    with triton_server(repo, models=("blocks", "tanh"), installation=Installation(triton_home()).check()) as running:
        yield running


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_triton_serving_the_gated_model_agrees(parity_model, server, protocol):
    from skewgate.parity.core import ParityOptions

    url = server.http_url if protocol == "http" else server.grpc_url
    result = parity(torch_model=parity_model["pt2"], onnx=parity_model["onnx"], inputs=parity_model["inputs"],
                    triton_url=url, triton_model="blocks", options=ParityOptions(triton_protocol=protocol))
    assert result.verdict.status == "pass", result.verdict.message
    names = {c.name for c in result.verdict.checks}
    assert "triton.outputs_match.linear" in names
    assert not any(n.startswith("batch_invariance") for n in names)  # export's and probe's facts, not parity's


def test_triton_serving_another_computation_fails(parity_model, server):
    result = parity(torch_model=parity_model["pt2"], onnx=parity_model["onnx"], inputs=parity_model["inputs"],
                    triton_url=server.http_url, triton_model="tanh")
    assert {c.name for c in result.verdict.failed_checks} == {"triton.outputs_match.linear"}
