"""The probe: is what Triton serves the model we gated, and does it behave?

Checks, in order: server live and ready; model ready (loaded on demand where explicit control allows, the
server's own error text when it will not load); metadata and config match the ONNX signature (names, dtypes,
shapes, the batch dimension); the served version and — where the repository is readable — the SHA-256 of the
served file; outputs equal ONNX Runtime FP32 on the probe inputs; batch sizes 1, odd and max; concurrent
single-sample requests under dynamic batching; latency percentiles and throughput at a few concurrency levels;
the server's own queue and compute time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from skewgate.common.compare import Tolerance, batch_sizes, compare_close
from skewgate.common.io import load_npz, load_onnx, onnx_input_specs, sha256_file
from skewgate.common.triton.client import Protocol, TritonClient
from skewgate.common.triton.repository import Signature, TensorSignature, onnx_signature
from skewgate.common.verdict import Check, Subject, Verdict

log = logging.getLogger(__name__)
STEP = "probe"


@dataclass(frozen=True)
class ProbeOptions:
    protocol: Protocol = "http"
    version: str = ""  # the version that must be served; "" = the latest one the server reports
    headers: Mapping[str, str] = field(default_factory=dict)
    tls: bool = False
    ca_certificate: str | None = None
    deadline_s: float = 20.0
    load_model: bool = True  # ask the server to load the model if it is not ready (explicit model control)
    max_samples: int = 16
    concurrency_levels: tuple[int, ...] = (1, 4)
    requests_per_level: int = 40
    max_p99_ms: float = 1000.0
    tolerances: Mapping[str, Tolerance] = field(default_factory=dict)


def probe(*, url: str, model: str, onnx: str | Path, inputs: str | Path, repository: Path | None = None,
          options: ProbeOptions = ProbeOptions()) -> Verdict:
    """Probe `model` on the server at `url` (host:port). `repository`: the model repository, when readable."""
    from tritonclient.utils import InferenceServerException

    onnx = Path(onnx)
    signature = onnx_signature(onnx)
    arrays = load_npz(inputs, expected=onnx_input_specs(load_onnx(onnx)))
    feeds = {t.name: arrays[t.name][: options.max_samples] for t in signature.inputs}
    subject = Subject(artifact=str(onnx), sha256=sha256_file(onnx), data={"inputs": sha256_file(inputs)})
    client = TritonClient(url, options.protocol, options.headers, options.tls, options.ca_certificate,
                          options.deadline_s)
    details: dict[str, Any] = {"url": url, "protocol": options.protocol, "model": model}
    try:
        live = bool(client.call("live", client.client.is_server_live))
        ready = bool(client.call("ready", client.client.is_server_ready))
        checks = [Check("server_live", passed=live), Check("server_ready", passed=ready,
                                                           detail="" if ready else "a model failed to load")]
        model_check = _model_ready(client, model, options, InferenceServerException)
        checks.append(model_check)
        if not model_check.passed:
            return Verdict.from_checks(STEP, checks, subject=subject, details=details)

        metadata, config = _metadata_and_config(client, model)
        checks += _signature_checks(signature, metadata, config)
        checks += _served_checks(metadata, model, options.version, repository, subject.sha256, details)
        checks += _behaviour_checks(client, model, onnx, signature, feeds, config, options, details,
                                    InferenceServerException)
        details["server_statistics"] = _statistics(client, model)
    finally:
        client.close()
    return Verdict.from_checks(STEP, checks, subject=subject, details=details)


def _model_ready(client: TritonClient, model: str, options: ProbeOptions, server_error: type[Exception]) -> Check:
    if client.call("model ready", client.client.is_model_ready, model, options.version):
        return Check("model_ready", passed=True, detail=f"{model} is ready")
    if not options.load_model:
        return Check("model_ready", passed=False, detail=f"{model} is not ready (loading not allowed)")
    try:
        client.call("load", client.client.load_model, model)
    except server_error as err:  # the server's own reason, e.g. the backend's exception text
        return Check("model_ready", passed=False, detail=f"{model} failed to load: {err}")
    ready = bool(client.call("model ready", client.client.is_model_ready, model, options.version))
    return Check("model_ready", passed=ready, detail=f"{model} loaded on demand" if ready else "not ready after load")


def _metadata_and_config(client: TritonClient, model: str) -> tuple[dict[str, Any], dict[str, Any]]:
    if client.protocol == "http":
        return (client.call("metadata", client.client.get_model_metadata, model),
                client.call("config", client.client.get_model_config, model))
    metadata = client.call("metadata", client.client.get_model_metadata, model, as_json=True)
    config = client.call("config", client.client.get_model_config, model, as_json=True)["config"]
    for tensor in (*metadata.get("inputs", []), *metadata.get("outputs", [])):  # gRPC JSON has string dims
        tensor["shape"] = [int(d) for d in tensor.get("shape", [])]
    for tensor in (*config.get("input", []), *config.get("output", [])):
        tensor["dims"] = [int(d) for d in tensor.get("dims", [])]
    config["max_batch_size"] = int(config.get("max_batch_size", 0))
    return metadata, config


def _shape_matches(served: list[int], expected: tuple[int, ...]) -> bool:
    return len(served) == len(expected) and all(s == e or -1 in (s, e) for s, e in zip(served, expected, strict=True))


def _signature_checks(signature: Signature, metadata: dict[str, Any], config: dict[str, Any]) -> list[Check]:
    batched = int(config.get("max_batch_size", 0)) > 0
    checks = []
    for kind, tensors, served_list, config_list in (
        ("inputs", signature.inputs, metadata.get("inputs", []), config.get("input", [])),
        ("outputs", signature.outputs, metadata.get("outputs", []), config.get("output", [])),
    ):
        served = {t["name"]: t for t in served_list}
        problems = []
        for tensor in tensors:
            found = served.get(tensor.name)
            if found is None:
                problems.append(f"{tensor.name}: not served (served: {sorted(served)})")
                continue
            if found["datatype"] != tensor.metadata_type:
                problems.append(f"{tensor.name}: datatype {found['datatype']} but the model has "
                                f"{tensor.metadata_type}")
            if not _shape_matches(found["shape"], tensor.shape):
                problems.append(f"{tensor.name}: shape {found['shape']} but the model has {list(tensor.shape)}")
        extra = sorted(set(served) - {t.name for t in tensors})
        if extra:
            problems.append(f"served but not in the model: {extra}")
        checks.append(Check(f"signature.{kind}", passed=not problems, value=len(problems), limit=0,
                            detail="; ".join(problems) or f"{len(tensors)} {kind} match"))
        batch_problems = [_batch_dim_problem(t, config_list, batched) for t in tensors]
        batch_problems = [p for p in batch_problems if p]
        checks.append(Check(f"config.dims.{kind}", passed=not batch_problems, value=len(batch_problems), limit=0,
                            detail="; ".join(batch_problems) or "dims agree with max_batch_size"))
    return checks


def _batch_dim_problem(tensor: TensorSignature, config_list: list[dict[str, Any]], batched: bool) -> str:
    entry = next((c for c in config_list if c["name"] == tensor.name), None)
    if entry is None:
        return ""  # reported by the signature check
    dims = [int(d) for d in entry.get("dims", [])]
    expected = tensor.shape[1:] if batched else tensor.shape
    if batched and len(dims) == len(tensor.shape):
        return (f"{tensor.name}: config dims {dims} include the batch dimension; with max_batch_size > 0 they "
                f"must be the per-sample shape {list(expected)}")
    if not _shape_matches(dims, expected):
        return f"{tensor.name}: config dims {dims} but the model's {'per-sample ' if batched else ''}shape is " \
               f"{list(expected)}"
    return ""


def _served_checks(metadata: dict[str, Any], model: str, version: str, repository: Path | None, gated_sha: str,
                   details: dict[str, Any]) -> list[Check]:
    versions = [str(v) for v in metadata.get("versions", [])]
    served = version or (max(versions, key=int) if versions else "")
    checks = [Check("served_version", passed=bool(served) and served in versions,
                    detail=f"served versions {versions}, expected {version or 'the latest'}")]
    details["served_version"] = served
    if repository is None:
        details["served_artifact"] = "not verifiable: the model repository is not readable from here"
        return checks
    served_file = Path(repository) / model / served / "model.onnx"
    served_sha = sha256_file(served_file) if served_file.is_file() else "(missing)"
    checks.append(Check("served_artifact", passed=served_sha == gated_sha,
                        detail=f"{served_file} sha256 {served_sha}; gated {gated_sha}"))
    return checks


def _behaviour_checks(client: TritonClient, model: str, onnx: Path, signature: Signature,
                      feeds: dict[str, np.ndarray], config: dict[str, Any], options: ProbeOptions,
                      details: dict[str, Any], server_error: type[Exception]) -> list[Check]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    outputs = [t.name for t in signature.outputs]
    datatypes = {t.name: t.metadata_type for t in signature.inputs}
    # tritonclient's clients are not thread-safe: every worker thread gets its own connection
    local = threading.local()
    opened: list[TritonClient] = []

    def serve(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if threading.current_thread() is threading.main_thread():
            own = client
        elif (own := getattr(local, "client", None)) is None:
            own = local.client = TritonClient(client.url, client.protocol, client.headers, client.tls,
                                              client.ca_certificate, client.deadline_s)
            opened.append(own)
        return own.infer(model, batch, outputs, datatypes=datatypes, version=options.version)

    try:
        return _run_behaviour(serve, session, outputs, feeds, config, options, details, server_error)
    finally:
        for extra in opened:
            extra.close()


def _run_behaviour(serve: Any, session: Any, outputs: list[str], feeds: dict[str, np.ndarray],
                   config: dict[str, Any], options: ProbeOptions, details: dict[str, Any],
                   server_error: type[Exception]) -> list[Check]:
    expected = dict(zip(outputs, session.run(outputs, feeds), strict=True))
    tols = {n: options.tolerances.get(n, Tolerance.for_dtype(a.dtype)) for n, a in expected.items()}
    max_batch = int(config.get("max_batch_size", 0))
    n = len(next(iter(feeds.values())))
    first = feeds if max_batch == 0 or n <= max_batch else {k: v[:max_batch] for k, v in feeds.items()}
    try:
        served = serve(first)
    except server_error as err:
        return [Check("outputs_match", passed=False, detail=f"inference failed: {err}")]
    checks = []
    for name in outputs:
        closeness = compare_close(served[name], expected[name][: len(served[name])], tols[name])
        checks.append(Check(f"outputs_match.{name}", passed=closeness.ok, value=closeness.worst_ratio, limit=1.0,
                            detail=f"Triton vs ONNX Runtime FP32: {closeness.describe()}"))
    if max_batch == 0:
        return checks
    m = len(next(iter(first.values())))
    alone = [serve({k: v[i : i + 1] for k, v in first.items()}) for i in range(m)]
    checks.append(_compare_to_alone("batch_invariance", [serve({k: v[:s] for k, v in first.items()})
                                                         for s in batch_sizes(m)], alone, outputs, tols))
    with ThreadPoolExecutor(max_workers=min(8, m)) as pool:
        concurrent = list(pool.map(lambda i: serve({k: v[i : i + 1] for k, v in first.items()}), range(m)))
    checks.append(_compare_to_alone("dynamic_batching", concurrent, alone, outputs, tols, one_each=True))
    latency = _latency(lambda: serve({k: v[:1] for k, v in first.items()}), options)
    details["latency"] = latency
    p99 = latency[0]["p99_ms"]
    checks.append(Check("latency_p99_ms", passed=p99 <= options.max_p99_ms, value=p99, limit=options.max_p99_ms,
                        detail="; ".join(f"concurrency {row['concurrency']}: p50 {row['p50_ms']:.2f} ms, p95 "
                                         f"{row['p95_ms']:.2f}, p99 {row['p99_ms']:.2f}, {row['throughput_rps']:.0f} "
                                         "req/s" for row in latency)))
    return checks


def _compare_to_alone(name: str, results: list[dict[str, np.ndarray]], alone: list[dict[str, np.ndarray]],
                      outputs: list[str], tols: Mapping[str, Tolerance], *, one_each: bool = False) -> Check:
    worst, where = 0.0, "every sample matches its batch-1 output"
    for index, result in enumerate(results):
        for out in outputs:
            reference = alone[index][out] if one_each else np.concatenate([a[out] for a in alone[: len(result[out])]])
            closeness = compare_close(result[out], reference, tols[out])
            if closeness.worst_ratio > worst:
                worst = closeness.worst_ratio
                where = f"{'request' if one_each else 'batch of'} {index if one_each else len(result[out])}, " \
                        f"{out}: {closeness.describe()}"
    return Check(name, passed=worst <= 1.0, value=worst, limit=1.0, detail=where)


def _latency(call: Any, options: ProbeOptions) -> list[dict[str, float]]:
    rows = []
    for level in options.concurrency_levels:
        def timed(_: int) -> float:
            started = time.perf_counter()
            call()
            return (time.perf_counter() - started) * 1000

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=level) as pool:
            samples = np.array(list(pool.map(timed, range(options.requests_per_level))))
        elapsed = time.perf_counter() - started
        p50, p95, p99 = np.percentile(samples, [50, 95, 99])
        rows.append({"concurrency": level, "requests": len(samples), "p50_ms": float(p50), "p95_ms": float(p95),
                     "p99_ms": float(p99), "throughput_rps": len(samples) / elapsed})
    return rows


def _statistics(client: TritonClient, model: str) -> dict[str, Any]:
    """Average queue and compute time per request as the server counted them."""
    if client.protocol == "http":
        stats = client.call("statistics", client.client.get_inference_statistics, model)
    else:
        stats = client.call("statistics", client.client.get_inference_statistics, model, as_json=True)
    result = {}
    for entry in stats.get("model_stats", []):
        inference = entry.get("inference_stats", {})
        count = int(inference.get("success", {}).get("count", 0)) or 1
        result[f"v{entry.get('version')}"] = {
            "requests": int(inference.get("success", {}).get("count", 0)),
            "executions": int(entry.get("execution_count", 0)),
            **{f"avg_{part}_us": int(inference.get(part, {}).get("ns", 0)) / count / 1000
               for part in ("queue", "compute_input", "compute_infer", "compute_output")},
        }
    return result
