"""The probe on the zoo of architectures (transformer, token ids, LSTM, two in/two out, channels-last, LayerNorm
MLP, softmax head): each exported model, deployed right on one real tritonserver, passes — outputs, batch
invariance and dynamic batching included — whatever its inputs' dtypes and ranks."""

import pytest

from skewgate.common.recording import TrackingOptions
from skewgate.common.triton.repository import write_repository
from skewgate.common.triton.server import triton_server
from skewgate.probe.run import ProbeOptions, run
from tests.zoo import ZOO, export, save

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, installation):
    directory = tmp_path_factory.mktemp("zoo-probe")
    built = {}
    repo = directory / "repository"
    for name in ZOO:
        files = save(name, directory / name)
        built[name] = (files, export(files))
        write_repository(built[name][1], repo, name=name.replace("_", "-"))
    with triton_server(repo, models=tuple(n.replace("_", "-") for n in ZOO), installation=installation) as server:
        yield server, built


@pytest.mark.parametrize("name", list(ZOO))
def test_every_zoo_model_deployed_right_passes_the_probe(deployed, name):
    server, built = deployed
    files, onnx_path = built[name]
    verdict = run(url=server.http_url, model=name.replace("_", "-"), onnx=onnx_path, inputs=files.inputs,
                  repository=server.repository, options=ProbeOptions(requests_per_level=10),
                  tracking=TrackingOptions()).verdict
    assert verdict.status == "pass", verdict.message
    assert {"outputs_match", "batch_invariance", "dynamic_batching"} <= {c.name.split(".")[0] for c in verdict.checks}
