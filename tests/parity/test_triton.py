"""parity against a live Triton server serving the exported model (the Python backend running onnxruntime)."""

import onnx
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


@pytest.fixture(scope="module")
def clip_server(tmp_path_factory):
    """A CLIP-style two-tower model (tests/parity/models.py) and, on a live Triton, the FP16 conversion a
    deployment serves (both towers' normalisation in FP16), beside one whose text tower is stale."""
    from tests.parity.models import fp16_deployment, save_clip_style

    root = tmp_path_factory.mktemp("clip")
    clip = save_clip_style(root, "clip")
    stale = save_clip_style(root, "stale", text_seed=1)
    repo = root / "repository"
    write_repository(fp16_deployment(clip["onnx"], root / "clip16.onnx"), repo, name="clip16")
    write_repository(fp16_deployment(stale["onnx"], root / "stale16.onnx"), repo, name="stale16")
    with triton_server(repo, models=("clip16", "stale16"), installation=Installation(triton_home()).check()) as running:
        yield clip, running


def _clip_parity(clip, server, model, **options):
    from skewgate.parity.core import ParityOptions

    return parity(torch_model=clip["pt2"], onnx=clip["onnx"], inputs=clip["inputs"], triton_url=server.http_url,
                  triton_model=model, options=ParityOptions(**options))


def test_an_fp16_deployment_of_both_towers_agrees_by_cosine_and_says_it_is_not_held_to_fp32(clip_server):
    clip, server = clip_server
    result = _clip_parity(clip, server, "clip16", triton_serves="fp16")
    assert result.verdict.status == "pass", result.verdict.message
    checks = {c.name: c for c in result.verdict.checks if c.name.startswith("triton.")}
    # the image and the text embedding, each judged by cosine; no FP32-tolerance check (not what FP16 is held to)
    assert set(checks) == {f"triton.cosine_agreement.{name}" for name in _outputs(clip)}
    for check in checks.values():
        assert check.value == 1.0 and "embedding (every row has unit L2 norm): 64 of 64" in check.detail
        assert "Triton serving FP16 vs ORT FP32 (not held to FP32's tolerances" in check.detail
    # the same deployment held to FP32's tolerances (the default: an FP32 model is what Triton should serve) fails
    # there, and only there: its FP16 weights round beyond them, its embeddings still agree
    strict = _clip_parity(clip, server, "clip16")
    failed = {c.name for c in strict.verdict.failed_checks}
    assert failed and all(name.startswith("triton.outputs_match.") for name in failed), failed


def test_an_fp16_deployment_with_a_stale_text_tower_fails_on_the_text_embedding_only(clip_server):
    clip, server = clip_server
    result = _clip_parity(clip, server, "stale16", triton_serves="fp16")
    image, text = _outputs(clip)
    failed = {c.name: c for c in result.verdict.failed_checks}
    assert list(failed) == [f"triton.cosine_agreement.{text}"], failed
    assert failed[f"triton.cosine_agreement.{text}"].value < 0.5
    assert result.verdict.check(f"triton.cosine_agreement.{image}").value == 1.0


def _outputs(clip):
    """The model's outputs in order: the image embedding, the text embedding (the exporter names them `div*`)."""
    return [o.name for o in onnx.load(str(clip["onnx"])).graph.output]
