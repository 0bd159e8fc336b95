"""Every probe check against a fake Triton: the right deployment passes it, one defect blocks it by name."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from skewgate.common.compare import Tolerance
from skewgate.common.errors import Unreachable
from skewgate.common.io import sha256_file
from skewgate.common.verdict import Subject, Verdict
from skewgate.probe.core import probe, signature_checks
from skewgate.probe.run import ProbeOptions
from tests.probe.fake_triton import WEIGHTS, FakeTriton, config, gated, metadata

FEEDS = {"x": np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)}
SUBJECT = Subject(artifact="model.onnx", sha256="a" * 64)
QUICK = ProbeOptions(requests_per_level=5)


def _probe(triton: FakeTriton, *, repository=None, sha256: str = "a" * 64, **options) -> Verdict:
    probing = ProbeOptions(**{**vars(QUICK), **options}).probing()
    return probe(triton, url="fake:8000", protocol="http", model="m", gated=gated(sha256), feeds=FEEDS,
                 subject=SUBJECT, repository=repository, probing=probing)


def _check(verdict: Verdict, name: str):
    return next(c for c in verdict.checks if c.name == name)


def test_the_right_deployment_passes_every_check():
    triton = FakeTriton()
    verdict = _probe(triton)
    assert verdict.status == "pass", verdict.message
    assert [c.name for c in verdict.checks] == [
        "server_live", "server_ready", "model_ready", "signature.inputs", "config.dims.inputs", "signature.outputs",
        "config.dims.outputs", "served_version", "outputs_match.y", "outputs_agree.y", "batch_invariance",
        "dynamic_batching", "latency_p99_ms"]
    agree = _check(verdict, "outputs_agree.y")
    assert agree.value == 1.0 and "classification (a class axis last): 6 of 6 positions kept" in agree.detail
    assert triton.connections > 0 and triton.closed == triton.connections  # every worker's connection closed


def _served_plus(offset: float, when=lambda feeds: True):
    def serve(feeds):
        y = np.asarray(feeds["x"]) @ WEIGHTS
        return {"y": y + offset if when(feeds) else y}
    return serve


def _in_a_worker_thread(_feeds) -> bool:
    return threading.current_thread() is not threading.main_thread()


def _slow(feeds):
    time.sleep(0.002)
    return {"y": np.asarray(feeds["x"]) @ WEIGHTS}


BLOCKED = [
    pytest.param(FakeTriton(live=False), {}, "server_live", "", id="server-not-live"),
    pytest.param(FakeTriton(ready=False), {}, "server_ready", "a model failed to load", id="server-not-ready"),
    pytest.param(FakeTriton(model_ready=False, load_error="onnxruntime: truncated file"), {}, "model_ready",
                 "m failed to load: onnxruntime: truncated file", id="model-fails-to-load-with-the-servers-text"),
    pytest.param(FakeTriton(model_ready=False), {"load_model": False}, "model_ready",
                 "m is not ready (loading not allowed)", id="model-not-ready-loading-not-allowed"),
    pytest.param(FakeTriton(metadata=metadata(datatype="FP64")), {}, "signature.inputs",
                 "x: datatype FP64 but the model has FP32", id="dtype-mismatch"),
    pytest.param(FakeTriton(metadata=metadata(shape=(-1, -1, 4))), {}, "signature.inputs",
                 "x: shape [-1, -1, 4] but the model has [-1, 4]", id="shape-mismatch"),
    pytest.param(FakeTriton(metadata=metadata(extra_output="z")), {}, "signature.outputs",
                 "served but not in the model: ['z']", id="extra-output"),
    pytest.param(FakeTriton(config=config(input_dims=(-1, 4))), {}, "config.dims.inputs",
                 "x: config dims [-1, 4] include the batch dimension; with max_batch_size > 0 they must be the "
                 "per-sample shape [4]", id="config-dims-include-batch"),
    pytest.param(FakeTriton(config=config(input_dims=(5,))), {}, "config.dims.inputs",
                 "x: config dims [5] but the model's per-sample shape is [4]", id="config-dims-wrong"),
    pytest.param(FakeTriton(), {"version": "2"}, "served_version", "served versions ['1'], expected 2",
                 id="required-version-not-served"),
    pytest.param(FakeTriton(serve=_served_plus(0.5)), {}, "outputs_match.y", "out of tolerance",
                 id="outputs-differ-from-onnxruntime"),
    pytest.param(FakeTriton(infer_error="unexpected shape for input 'x'"), {}, "outputs_match",
                 "inference failed: unexpected shape for input 'x'", id="inference-refused"),
    pytest.param(FakeTriton(serve=_served_plus(0.5, lambda feeds: len(feeds["x"]) > 1)), {}, "batch_invariance",
                 "batch of", id="batched-answers-differ"),
    pytest.param(FakeTriton(serve=_served_plus(0.5, _in_a_worker_thread)), {}, "dynamic_batching", "request",
                 id="concurrent-answers-differ"),
    pytest.param(FakeTriton(serve=_slow), {"max_p99_ms": 0.5}, "latency_p99_ms", "concurrency 1: p50",
                 id="latency-over-the-gate"),
]


@pytest.mark.parametrize(("triton", "options", "check", "detail"), BLOCKED)
def test_one_defect_blocks_its_check_by_name(triton, options, check, detail):
    verdict = _probe(triton, **options)
    assert verdict.status == "fail"
    failed = {c.name: c.detail for c in verdict.failed_checks}
    assert check in failed, failed
    assert detail in failed[check]


def _first_sample_flipped(feeds):
    """The first sample's two highest scores swapped (its top-1 changes), the others as the model answers."""
    y = np.asarray(feeds["x"]) @ WEIGHTS
    order = np.argsort(y[0])
    y[0, [order[-1], order[-2]]] = y[0, [order[-2], order[-1]]]
    return {"y": y}


@pytest.mark.parametrize(("limit", "status"), [
    pytest.param(5 / 6, "pass", id="one-flip-in-six-at-a-limit-of-five-sixths"),
    pytest.param(5 / 6 + 1e-9, "fail", id="one-flip-in-six-just-above-it"),
])
def test_outputs_agree_counts_the_samples_whose_answer_changed_at_its_limit(limit, status):
    # the raw comparison let through (a tolerance as wide as the scores): the agreement decides
    verdict = _probe(FakeTriton(serve=_first_sample_flipped), min_top1_agreement=limit,
                     tolerances={"y": Tolerance(rtol=0.0, atol=100.0)})
    check = _check(verdict, "outputs_agree.y")
    assert check.value == pytest.approx(5 / 6) and check.passed is (status == "pass")
    assert "5 of 6 positions kept" in check.detail and "1/6 samples changed" in check.detail
    assert _check(verdict, "outputs_match.y").passed


def test_an_output_declared_an_embedding_agrees_by_cosine():
    verdict = _probe(FakeTriton(serve=_served_plus(1e-7)), task="embedding")
    check = _check(verdict, "outputs_agree.y")
    assert check.passed and "embedding (declared): 6 of 6 positions kept (cosine similarity below 0.99" in \
        check.detail


def test_a_model_loaded_on_demand_passes():
    verdict = _probe(FakeTriton(model_ready=False))
    assert _check(verdict, "model_ready").detail == "m loaded on demand"
    assert verdict.status == "pass", verdict.message


def test_a_model_that_never_gets_ready_stops_the_probe_with_only_the_health_checks():
    verdict = _probe(FakeTriton(model_ready=False, load_error="no such model"))
    assert [c.name for c in verdict.checks] == ["server_live", "server_ready", "model_ready"]
    assert dict(verdict.details) == {"url": "fake:8000", "protocol": "http", "model": "m"}


@pytest.mark.parametrize("same_file", [True, False], ids=["served-file-is-the-gated-one", "served-file-differs"])
def test_served_artifact_compares_the_served_files_digest(tmp_path, same_file):
    served = tmp_path / "m" / "1" / "model.onnx"
    served.parent.mkdir(parents=True)
    served.write_bytes(b"gated model")
    gated_sha = sha256_file(served) if same_file else "b" * 64
    check = _check(_probe(FakeTriton(), repository=tmp_path, sha256=gated_sha), "served_artifact")
    assert check.passed is same_file
    assert f"gated {gated_sha}" in check.detail


def test_a_missing_served_file_blocks(tmp_path):
    check = _check(_probe(FakeTriton(), repository=tmp_path), "served_artifact")
    assert not check.passed and "sha256 (missing)" in check.detail


def test_the_latest_served_version_is_the_one_probed():
    verdict = _probe(FakeTriton(metadata=metadata(versions=("1", "10", "9"))))
    assert verdict.details["served_version"] == "10"


def test_an_unbatched_model_is_judged_on_outputs_only():
    verdict = _probe(FakeTriton(config=config(max_batch_size=0), metadata=metadata()))
    names = {c.name for c in verdict.checks}
    assert "outputs_match.y" in names and not names & {"batch_invariance", "dynamic_batching", "latency_p99_ms"}
    assert "latency" not in verdict.details


def test_details_keep_their_json_keys_and_values():
    verdict = _probe(FakeTriton(), concurrency_levels=(1, 2))
    details = json.loads(json.dumps(verdict.to_dict()))["details"]
    assert list(details) == ["url", "protocol", "model", "served_version", "served_artifact", "latency",
                             "server_statistics"]
    assert details["served_artifact"] == "not verifiable: the model repository is not readable from here"
    assert [row["concurrency"] for row in details["latency"]] == [1, 2]
    assert list(details["latency"][0]) == ["concurrency", "requests", "p50_ms", "p95_ms", "p99_ms", "throughput_rps"]
    stats = details["server_statistics"]["v1"]
    assert stats["requests"] == stats["executions"] > 0
    assert stats["avg_queue_us"] == 2.0 and stats["avg_compute_infer_us"] == 5.0 and stats["avg_compute_input_us"] == 0


def test_an_unreachable_server_is_an_error_not_a_verdict():
    with pytest.raises(Unreachable, match="live failed"):
        _probe(FakeTriton(unreachable=True))


def test_a_reshape_that_does_not_fit_the_model_is_named():
    """`dims: [ 1 ] reshape: { shape: [ ] }` is right for an id per sample only: on x [batch, 4] the model would
    be fed [batch], and the config and the served shape are both reported."""
    served = {**config(input_dims=(1,)), "input": [{"name": "x", "dims": [1], "reshape": {}}]}
    checks = {c.name: c for c in signature_checks(gated().signature, metadata(shape=(-1, 1)), served)}
    assert not checks["signature.inputs"].passed
    assert "x: shape [-1, 1] but the model has [-1, 4]" in checks["signature.inputs"].detail
    assert not checks["config.dims.inputs"].passed
    assert "x: config reshape [] but the model's per-sample shape is [4]" in checks["config.dims.inputs"].detail
