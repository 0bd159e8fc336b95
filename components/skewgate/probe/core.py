"""The probe: is what Triton serves the model we gated, and does it behave?

Checks, in order: server live and ready; model ready (loaded on demand where explicit control allows, the
server's own error text when it will not load); metadata and config match the ONNX signature (names, dtypes,
shapes, the batch dimension); the served version and — where the repository is readable — the SHA-256 of the
served file; outputs equal ONNX Runtime FP32 on the probe inputs, and agree with it as each output's task says
(`common/output_tasks.py`: top-1 per sample or pixel, an embedding's cosine, a regressor's error — what a
deployment computing in FP16 where ONNX Runtime's CPU does not is judged by); batch sizes 1, odd and max; concurrent
single-sample requests under dynamic batching; latency percentiles and throughput at a few concurrency levels;
the server's own queue and compute time. A stateful STEP model (`Probing.stream`) is judged on sequences instead of
single requests (`internals/stream.py`): the signature less its state tensors, the sequence batcher, and sequences
one after another, interleaved and restarted against STEP run alone from the initial state.

The server is reached through the `Triton` seam only (a fake in the unit tests); the gated model is loaded once
(`load_gated`): one parse and check of the ONNX, one ONNX Runtime session, opened on first use.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from skewgate.common.compare import Tolerance, batch_sizes, compare_close
from skewgate.common.errors import Rejected
from skewgate.common.io import TensorSpec, load_onnx, onnx_input_specs, sha256_file
from skewgate.common.output_tasks import agreements, describe_agreement, resolve_outputs
from skewgate.common.triton.client import ServerRefused, Triton
from skewgate.common.triton.repository import Signature, TensorSignature, from_served, signature_of, to_served
from skewgate.common.triton.sequence import served_signature
from skewgate.common.verdict import Check, Subject, Verdict
from skewgate.probe.internals.stream import StreamProbing, stream_checks

STEP = "probe"
Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class GatedModel:
    """The gated ONNX as the probe needs it; `reference` answers with ONNX Runtime FP32's outputs by name."""

    path: Path
    sha256: str
    signature: Signature
    input_specs: tuple[TensorSpec, ...]
    reference: Callable[[Mapping[str, np.ndarray]], Arrays]


def load_gated(onnx: str | Path) -> GatedModel:
    """Parse and check the ONNX once; the ONNX Runtime session opens on the first reference call (a model that
    never becomes ready on the server costs none)."""
    path = Path(onnx)
    model = load_onnx(path)
    signature = signature_of(model, source=path)
    outputs = [t.name for t in signature.outputs]

    @functools.cache
    def session() -> Any:
        import onnxruntime as ort

        return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def reference(feeds: Mapping[str, np.ndarray]) -> Arrays:
        return dict(zip(outputs, session().run(outputs, dict(feeds)), strict=True))

    return GatedModel(path=path, sha256=sha256_file(path), signature=signature,
                      input_specs=tuple(onnx_input_specs(model)), reference=reference)


@dataclass(frozen=True)
class OutputJudging:
    """How each output's agreement with ONNX Runtime FP32 is judged: its task (`auto`: from its shape and values)
    and the limits calibrate and `parity --int8` apply (the defaults live in `run.ProbeOptions`)."""

    task: str = "auto"
    class_axis: int | None = None
    output_tasks: Mapping[str, str] = field(default_factory=dict)
    min_agreement: float = 0.99
    min_cosine: float = 0.99
    max_error: float = 0.05


@dataclass(frozen=True)
class Probing:
    """What the checks judge against (the defaults live in `run.ProbeOptions`)."""

    version: str  # the version that must be served; "" = the latest one the server reports
    load_model: bool  # ask the server to load the model if it is not ready (explicit model control)
    concurrency_levels: tuple[int, ...]
    requests_per_level: int
    max_p99_ms: float
    tolerances: Mapping[str, Tolerance] = field(default_factory=dict)
    judging: OutputJudging = field(default_factory=OutputJudging)
    stream: StreamProbing | None = None  # a stateful STEP under the sequence batcher: the stream checks instead


@dataclass(frozen=True)
class LatencyRow:
    concurrency: int
    requests: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    throughput_rps: float


@dataclass(frozen=True)
class VersionStatistics:
    """Per request, as the server counted them."""

    requests: int
    executions: int
    avg_queue_us: float
    avg_compute_input_us: float
    avg_compute_infer_us: float
    avg_compute_output_us: float


@dataclass(frozen=True)
class ProbeDetails:
    """The verdict's `details`. A field left None was not reached (a model that never became ready has no served
    version, an unbatched model no latency) and its key is absent from the JSON, as it always was."""

    url: str
    protocol: str
    model: str
    served_version: str | None = None
    served_artifact: str | None = None  # only when the repository is not readable: why the file was not checked
    latency: tuple[LatencyRow, ...] | None = None
    server_statistics: Mapping[str, VersionStatistics] | None = None
    stream: Mapping[str, Any] | None = None  # the stream checks' runs (`internals/stream.py`)

    def present(self) -> dict[str, Any]:
        """Plain JSON-able fields, the ones left None omitted (`Verdict` would write them as null)."""
        return asdict(self, dict_factory=lambda items: {k: v for k, v in items if v is not None})


def probe(triton: Triton, *, url: str, protocol: str, model: str, gated: GatedModel,
          feeds: Mapping[str, np.ndarray], subject: Subject, repository: Path | None, probing: Probing) -> Verdict:
    """Probe `model` as served by `triton` (reached at `url`) against `gated`, fed `feeds` (at most a batch).
    `repository`: the model repository, when readable (the served file's digest is then checked)."""
    details = ProbeDetails(url=url, protocol=protocol, model=model)
    live, ready = triton.is_server_live(), triton.is_server_ready()
    checks = [Check("server_live", passed=live),
              Check("server_ready", passed=ready, detail="" if ready else "a model failed to load")]
    checks.append(model_ready(triton, model, probing))
    if not checks[-1].passed:
        return Verdict.from_checks(STEP, checks, subject=subject, details=details.present())
    metadata, config = triton.model_metadata(model), triton.model_config(model)
    stream = probing.stream
    served = gated.signature if stream is None else served_signature(gated.signature, stream.states)
    checks += signature_checks(served, metadata, config)
    served_version, version_check = served_version_check(metadata, probing.version)
    checks.append(version_check)
    details = replace(details, served_version=served_version)
    if repository is None:
        details = replace(details, served_artifact="not verifiable: the model repository is not readable from here")
    else:
        checks.append(served_artifact_check(repository / model / served_version / "model.onnx", gated.sha256))
    if stream is not None:
        checks.append(sequence_batching_check(config))
        behaviour, found = stream_checks(triton, model=model, step=gated.reference, served=served, feeds=feeds,
                                         stream=stream, tolerances=probing.tolerances, version=probing.version)
        details = replace(details, stream=found, server_statistics=server_statistics(
            triton.inference_statistics(model)))
        return Verdict.from_checks(STEP, [*checks, *behaviour], subject=subject, details=details.present())
    behaviour, latency = behaviour_checks(triton, model, gated, feeds, config, probing)
    details = replace(details, latency=latency,
                      server_statistics=server_statistics(triton.inference_statistics(model)))
    return Verdict.from_checks(STEP, [*checks, *behaviour], subject=subject, details=details.present())


def model_ready(triton: Triton, model: str, probing: Probing) -> Check:
    if triton.is_model_ready(model, probing.version):
        return Check("model_ready", passed=True, detail=f"{model} is ready")
    if not probing.load_model:
        return Check("model_ready", passed=False, detail=f"{model} is not ready (loading not allowed)")
    try:
        triton.load_model(model)
    except Rejected as err:  # the server's own reason, e.g. the backend's exception text
        return Check("model_ready", passed=False, detail=f"{model} failed to load: {_server_text(err)}")
    ready = triton.is_model_ready(model, probing.version)
    return Check("model_ready", passed=ready, detail=f"{model} loaded on demand" if ready else "not ready after load")


def _server_text(err: Rejected) -> str:
    return err.answer if isinstance(err, ServerRefused) else str(err)


def _shape_matches(served: list[int], expected: tuple[int, ...]) -> bool:
    return len(served) == len(expected) and all(s == e or -1 in (s, e) for s, e in zip(served, expected, strict=True))


def signature_checks(signature: Signature, metadata: Mapping[str, Any], config: Mapping[str, Any]) -> list[Check]:
    """`signature.inputs|outputs` (names, dtypes, shapes as the metadata reports them) and `config.dims.*` (the
    config's dims against `max_batch_size`)."""
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
            api_shape = _api_shape(tensor, _config_entry(config_list, tensor.name), batched)
            if not _shape_matches(found["shape"], api_shape):
                problems.append(f"{tensor.name}: shape {found['shape']} but the model has {list(tensor.shape)}"
                                + (f" (served as {list(api_shape)})" if api_shape != tensor.shape else ""))
        extra = sorted(set(served) - {t.name for t in tensors})
        if extra:
            problems.append(f"served but not in the model: {extra}")
        checks.append(Check(f"signature.{kind}", passed=not problems, value=len(problems), limit=0,
                            detail="; ".join(problems) or f"{len(tensors)} {kind} match"))
        batch_problems = [p for t in tensors if (p := _batch_dim_problem(t, config_list, batched))]
        checks.append(Check(f"config.dims.{kind}", passed=not batch_problems, value=len(batch_problems), limit=0,
                            detail="; ".join(batch_problems) or "dims agree with max_batch_size"))
    return checks


def _config_entry(config_list: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((c for c in config_list if c.get("name") == name), None)


def _api_shape(tensor: TensorSignature, entry: Mapping[str, Any] | None, batched: bool) -> tuple[int, ...]:
    """The shape the inference API serves `tensor` in: the model's, or, where the config reshapes it to the
    model's own shape (`dims: [ 1 ] reshape: { shape: [ ] }` for an id per sample), its `dims`."""
    if entry is None or "reshape" not in entry:
        return tensor.shape
    dims = tuple(int(d) for d in entry.get("dims", []))
    model_dims = tuple(int(d) for d in entry["reshape"].get("shape", []))
    per_sample = tensor.shape[1:] if batched else tensor.shape
    if not _shape_matches(list(model_dims), per_sample) or math.prod(dims) != math.prod(model_dims):
        return tensor.shape  # a reshape that does not fit the model: the shapes then disagree, and say so
    return ((-1,) if batched else ()) + dims


def _batch_dim_problem(tensor: TensorSignature, config_list: list[dict[str, Any]], batched: bool) -> str:
    entry = _config_entry(config_list, tensor.name)
    if entry is None:
        return ""  # reported by the signature check
    # where the config reshapes, the model sees the reshape's shape: that is what must fit the model
    dims = [int(d) for d in (entry["reshape"].get("shape", []) if "reshape" in entry else entry.get("dims", []))]
    what = "config reshape" if "reshape" in entry else "config dims"
    expected = tensor.shape[1:] if batched else tensor.shape
    if batched and len(dims) == len(tensor.shape):
        return (f"{tensor.name}: {what} {dims} include the batch dimension; with max_batch_size > 0 they "
                f"must be the per-sample shape {list(expected)}")
    if not _shape_matches(dims, expected):
        return f"{tensor.name}: {what} {dims} but the model's {'per-sample ' if batched else ''}shape is " \
               f"{list(expected)}"
    return ""


def served_version_check(metadata: Mapping[str, Any], version: str) -> tuple[str, Check]:
    """The version the probe talks to (`version`, or the latest served) and whether the server serves it."""
    versions = [str(v) for v in metadata.get("versions", [])]
    served = version or (max(versions, key=int) if versions else "")
    return served, Check("served_version", passed=bool(served) and served in versions,
                         detail=f"served versions {versions}, expected {version or 'the latest'}")


def sequence_batching_check(config: Mapping[str, Any]) -> Check:
    """`config.sequence_batching`: a stateful model is served under the sequence batcher (else no correlation id
    keeps a sequence's requests together); the detail says its strategy, controls and implicit states."""
    batcher = config.get("sequence_batching")
    if not batcher:
        return Check("config.sequence_batching", passed=False,
                     detail="the model's config has no sequence_batching: the server keeps no state per sequence")
    strategy = "oldest" if "oldest" in batcher else "direct"
    controls = [c.get("name") for c in batcher.get("control_input", [])]
    states = [f"{s.get('input_name')}={s.get('output_name')}" for s in batcher.get("state", [])]
    kept = ", ".join(states) or "none (the model keeps it)"
    return Check("config.sequence_batching", passed=True,
                 detail=f"strategy {strategy}; controls {controls}; implicit state {kept}")


def served_artifact_check(served_file: Path, gated_sha: str) -> Check:
    served_sha = sha256_file(served_file) if served_file.is_file() else "(missing)"
    return Check("served_artifact", passed=served_sha == gated_sha,
                 detail=f"{served_file} sha256 {served_sha}; gated {gated_sha}")


def behaviour_checks(triton: Triton, model: str, gated: GatedModel, feeds: Mapping[str, np.ndarray],
                     config: Mapping[str, Any], probing: Probing) -> tuple[list[Check], tuple[LatencyRow, ...] | None]:
    """Outputs against the reference, then (batched models) batch invariance, dynamic batching and latency."""
    outputs = [t.name for t in gated.signature.outputs]
    datatypes = {t.name: t.metadata_type for t in gated.signature.inputs}
    local = threading.local()  # tritonclient's clients are not thread-safe: every worker gets its own connection
    opened: list[Triton] = []

    def serve(batch: Mapping[str, np.ndarray]) -> Arrays:
        own: Triton | None  # this thread's client: the given one on the main thread, else its own
        if threading.current_thread() is threading.main_thread():
            own = triton
        elif (own := getattr(local, "client", None)) is None:
            own = local.client = triton.connect_again()
            opened.append(own)
        return from_served(own.infer(model, to_served(batch, config), outputs, datatypes=datatypes,
                                     version=probing.version), config)

    try:
        return _run_behaviour(serve, gated.reference(feeds), outputs, feeds, int(config.get("max_batch_size", 0)),
                              probing)
    finally:
        for extra in opened:
            extra.close()


def _run_behaviour(serve: Callable[[Mapping[str, np.ndarray]], Arrays], expected: Arrays, outputs: list[str],
                   feeds: Mapping[str, np.ndarray], max_batch: int, probing: Probing
                   ) -> tuple[list[Check], tuple[LatencyRow, ...] | None]:
    tols = {n: probing.tolerances.get(n, Tolerance.for_dtype(a.dtype)) for n, a in expected.items()}
    n = len(next(iter(feeds.values())))
    first = dict(feeds) if max_batch == 0 or n <= max_batch else {k: v[:max_batch] for k, v in feeds.items()}
    try:
        served = serve(first)
    except Rejected as err:
        return [Check("outputs_match", passed=False, detail=f"inference failed: {_server_text(err)}")], None
    checks = []
    for name in outputs:
        closeness = compare_close(served[name], expected[name][: len(served[name])], tols[name])
        checks.append(Check(f"outputs_match.{name}", passed=closeness.ok, value=closeness.worst_ratio, limit=1.0,
                            detail=f"Triton vs ONNX Runtime FP32: {closeness.describe()}"))
    checks += _agreement_checks({n: expected[n][: len(served[n])] for n in outputs},
                               {n: served[n] for n in outputs}, probing.judging)
    if max_batch == 0:
        return checks, None
    m = len(next(iter(first.values())))
    alone = [serve({k: v[i : i + 1] for k, v in first.items()}) for i in range(m)]
    checks.append(_compare_to_alone("batch_invariance", [serve({k: v[:s] for k, v in first.items()})
                                                         for s in batch_sizes(m)], alone, outputs, tols))
    with ThreadPoolExecutor(max_workers=min(8, m)) as pool:
        concurrent = list(pool.map(lambda i: serve({k: v[i : i + 1] for k, v in first.items()}), range(m)))
    checks.append(_compare_to_alone("dynamic_batching", concurrent, alone, outputs, tols, one_each=True))
    latency = measure_latency(lambda: serve({k: v[:1] for k, v in first.items()}), probing)
    checks.append(latency_check(latency, probing.max_p99_ms))
    return checks, latency


def _agreement_checks(expected: Arrays, served: Arrays, judging: OutputJudging) -> list[Check]:
    """`outputs_agree.<output>`: the share of positions Triton's outputs leave unharmed against ONNX Runtime
    FP32's, each output as its task says, with what the probe's sample count can resolve."""
    specs = resolve_outputs(expected, task=judging.task, class_axis=judging.class_axis,
                            output_tasks=judging.output_tasks)
    judged = agreements(expected, served, specs, min_cosine=judging.min_cosine, max_error=judging.max_error)
    checks = []
    for name, spec in specs.items():
        one = judged[name]
        shown = ", ".join(f"{k} {v:.4g}" for k, v in one.figures.items() if v is not None and k != one.check)
        detail = f"Triton vs ONNX Runtime FP32, {describe_agreement(spec, one, judging.min_agreement)}"
        checks.append(Check(f"outputs_agree.{name}", passed=one.meets(judging.min_agreement), value=one.agreement,
                            limit=judging.min_agreement, detail=detail + (f"; {shown}" if shown else "")))
    return checks


def _compare_to_alone(name: str, results: list[Arrays], alone: list[Arrays], outputs: list[str],
                      tols: Mapping[str, Tolerance], *, one_each: bool = False) -> Check:
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


def measure_latency(call: Callable[[], object], probing: Probing) -> tuple[LatencyRow, ...]:
    rows = []
    for level in probing.concurrency_levels:
        def timed(_: int) -> float:
            started = time.perf_counter()
            call()
            return (time.perf_counter() - started) * 1000

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=level) as pool:
            samples = np.array(list(pool.map(timed, range(probing.requests_per_level))))
        elapsed = time.perf_counter() - started
        p50, p95, p99 = np.percentile(samples, [50, 95, 99])
        rows.append(LatencyRow(concurrency=level, requests=len(samples), p50_ms=float(p50), p95_ms=float(p95),
                               p99_ms=float(p99), throughput_rps=len(samples) / elapsed))
    return tuple(rows)


def latency_check(latency: tuple[LatencyRow, ...], max_p99_ms: float) -> Check:
    """Gated on the first level's p99 (concurrency 1 by default); every level is described."""
    p99 = latency[0].p99_ms
    return Check("latency_p99_ms", passed=p99 <= max_p99_ms, value=p99, limit=max_p99_ms,
                 detail="; ".join(f"concurrency {row.concurrency}: p50 {row.p50_ms:.2f} ms, p95 {row.p95_ms:.2f}, "
                                  f"p99 {row.p99_ms:.2f}, {row.throughput_rps:.0f} req/s" for row in latency))


def server_statistics(stats: Mapping[str, Any]) -> dict[str, VersionStatistics]:
    """Average queue and compute time per request, by version, from the statistics endpoint's JSON."""
    result = {}
    for entry in stats.get("model_stats", []):
        inference = entry.get("inference_stats", {})
        requests = int(inference.get("success", {}).get("count", 0))
        average = {part: int(inference.get(part, {}).get("ns", 0)) / (requests or 1) / 1000
                   for part in ("queue", "compute_input", "compute_infer", "compute_output")}
        result[f"v{entry.get('version')}"] = VersionStatistics(
            requests=requests, executions=int(entry.get("execution_count", 0)), avg_queue_us=average["queue"],
            avg_compute_input_us=average["compute_input"], avg_compute_infer_us=average["compute_infer"],
            avg_compute_output_us=average["compute_output"])
    return result
