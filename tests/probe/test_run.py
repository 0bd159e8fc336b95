"""The probe's `run` against a real tritonserver: the right deployment passes, each broken one fails by name."""

import pytest

from skewgate.common.processes import free_port
from skewgate.common.recording import TrackingOptions
from skewgate.probe.run import ProbeOptions, run

pytestmark = pytest.mark.integration
QUICK = ProbeOptions(requests_per_level=10)
UNTRACKED = TrackingOptions()


def _probe(served, models, name, **options):
    return run(url=served.http_url, model=name, onnx=models["good"], inputs=models["inputs"],
               repository=served.repository, options=ProbeOptions(**{**vars(QUICK), **options}),
               tracking=UNTRACKED).verdict


def _failed(verdict):
    return {c.name: c.detail for c in verdict.failed_checks}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_gated_model_served_right_passes(served, models, protocol):
    url = served.http_url if protocol == "http" else served.grpc_url
    verdict = run(url=url, model="good", onnx=models["good"], inputs=models["inputs"], repository=served.repository,
                  options=ProbeOptions(protocol=protocol, requests_per_level=10), tracking=UNTRACKED).verdict
    assert verdict.status == "pass", verdict.message
    names = {c.name for c in verdict.checks}
    assert {"server_live", "model_ready", "signature.inputs", "config.dims.inputs", "served_artifact",
            "outputs_match.y", "batch_invariance", "dynamic_batching", "latency_p99_ms"} <= names
    latency = verdict.details["latency"]
    assert [row["concurrency"] for row in latency] == [1, 4]
    assert all(row["p50_ms"] <= row["p99_ms"] for row in latency)
    assert verdict.details["server_statistics"]["v1"]["requests"] > 0


def test_config_dims_that_include_the_batch_dimension(served, models):
    failed = _failed(_probe(served, models, "batchdim"))
    assert "include the batch dimension" in failed["config.dims.inputs"]
    assert "x: shape [-1, -1, 4] but the model has [-1, 4]" in failed["signature.inputs"]


def test_dtype_mismatch_names_the_tensor_and_both_types(served, models):
    failed = _failed(_probe(served, models, "dtype"))
    assert "x: datatype FP64 but the model has FP32" in failed["signature.inputs"]


@pytest.mark.parametrize("name", ["otherfile", "tampered"])
def test_a_different_file_served_is_caught(served, models, name):
    failed = _failed(_probe(served, models, name))
    assert "gated" in failed["served_artifact"]
    assert "out of tolerance" in failed["outputs_match.y"]


def test_without_the_repository_outputs_still_catch_a_different_file(served, models):
    verdict = run(url=served.http_url, model="otherfile", onnx=models["good"], inputs=models["inputs"],
                  options=QUICK, tracking=UNTRACKED).verdict
    assert "served_artifact" not in {c.name for c in verdict.checks}
    assert "not verifiable" in verdict.details["served_artifact"]
    assert "outputs_match.y" in _failed(verdict)


@pytest.mark.parametrize("name", ["ids", "ids_otherfile"])
def test_an_id_per_sample_is_served_as_batch_by_one_and_judged(served, models, name):
    """A rank-1 input and output (shape [batch]) have no per-sample dims; the repository writer serves them as
    `dims: [ 1 ] reshape: { shape: [ ] }` and the probe sends and reads [batch, 1]. Before, Triton refused the
    model and the release blocked; a different table served under the name still fails on both outputs."""
    verdict = run(url=served.http_url, model=name, onnx=models["ids"], inputs=models["id_inputs"],
                  repository=served.repository, options=QUICK, tracking=UNTRACKED).verdict
    failed = _failed(verdict)
    assert {"signature.inputs", "signature.outputs", "config.dims.inputs", "config.dims.outputs",
            "batch_invariance"} & set(failed) == set()
    if name == "ids":
        assert verdict.status == "pass", verdict.message
    else:
        assert {"outputs_match.y", "outputs_match.score", "served_artifact"} <= set(failed)


def test_latency_gate(served, models):
    assert "latency_p99_ms" in _failed(_probe(served, models, "good", max_p99_ms=0.001))


def test_model_that_fails_to_load_fails_with_the_servers_text(models, tmp_path, installation):
    from skewgate.common.triton.repository import write_repository
    from skewgate.common.triton.server import triton_server

    written = write_repository(models["good"], tmp_path / "repo", name="broken")
    written.onnx.write_bytes(written.onnx.read_bytes()[:40])  # truncated
    with triton_server(tmp_path / "repo", installation=installation) as server:
        verdict = run(url=server.http_url, model="broken", onnx=models["good"], inputs=models["inputs"],
                      options=QUICK, tracking=UNTRACKED).verdict
    assert verdict.status == "fail"
    detail = _failed(verdict)["model_ready"]
    assert detail.startswith("broken failed to load: ") and "load failed for model 'broken'" in detail


def test_server_down_is_an_error_within_the_deadline(models):
    import time

    started = time.monotonic()
    verdict = run(url=f"127.0.0.1:{free_port()}", model="good", onnx=models["good"], inputs=models["inputs"],
                  options=ProbeOptions(deadline_s=2), tracking=UNTRACKED).verdict
    assert verdict.status == "error" and "live failed for 2s" in verdict.message
    assert time.monotonic() - started < 10
