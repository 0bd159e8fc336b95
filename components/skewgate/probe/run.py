"""The one entry the CLI and the KFP component call: the gated model, its inputs and options in, a recorded (and
signed) verdict out. It probes a given Triton URL, or — when none is given (local runs, CI, a pod with
tritonserver inside) — writes the repository, starts a local tritonserver, and probes that."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import get_args

import numpy as np

from skewgate.common.compare import Tolerance
from skewgate.common.errors import InputError
from skewgate.common.io import load_npz, sha256_file
from skewgate.common.output_tasks import Task, check_task_options
from skewgate.common.recording import StepResult, TrackingOptions, evaluate_and_record
from skewgate.common.triton.client import Protocol, TritonClient
from skewgate.common.verdict import Subject, Verdict
from skewgate.probe.core import GatedModel, OutputJudging, Probing, load_gated, probe
from skewgate.probe.internals.stream import StreamProbing, sequence_feeds

STEP = "probe"


@dataclass(frozen=True, kw_only=True)
class ProbeOptions:
    """Every default of `skewgate probe` and `triton_probe_op` lives here (the server, the model and the files are
    `run`'s arguments). `check` refuses a protocol that is not one and state options that contradict each other;
    `run` calls it first, so that a bad pipeline parameter is an `error` verdict recorded like any other bad
    input."""

    protocol: Protocol = "http"
    version: str = ""  # the version that must be served; "" = the latest one the server reports
    headers: Mapping[str, str] = field(default_factory=dict)
    tls: bool = False
    ca_certificate: str | None = None
    deadline_s: float = 20.0  # per call, retries of a server that cannot be reached included
    load_model: bool = True  # ask the server to load the model if it is not ready (explicit model control)
    max_samples: int = 16
    concurrency_levels: tuple[int, ...] = (1, 4)
    requests_per_level: int = 40
    max_p99_ms: float = 1000.0  # gates the first concurrency level's p99
    tolerances: Mapping[str, Tolerance] = field(default_factory=dict)  # by output; default: by dtype
    # each output's agreement with ONNX Runtime FP32, judged as calibrate and `parity --int8` judge INT8's
    task: Task = "auto"
    class_axis: int | None = None
    output_tasks: Mapping[str, str] = field(default_factory=dict)  # output name → "TASK[:AXIS]", over `task`
    min_top1_agreement: float = 0.99
    min_cosine_similarity: float = 0.99
    max_regression_error: float = 0.05
    # stateful STEP (`--stream`): the model keeps a state per sequence under Triton's sequence batcher
    stream: bool = False
    states: Mapping[str, str] = field(default_factory=dict)  # state input → state output (`--state IN=OUT`)
    initial_state: str | None = None  # .npz keyed by state input (batch 1); None = zeros
    max_sequences: int = 4  # samples of the inputs probed as sequences (each run three times)
    first_correlation_id: int | None = None  # None = random, so a live server's own sequences are not hit

    def check(self) -> ProbeOptions:
        """These options, or an `InputError` naming the one that cannot be."""
        if self.protocol not in get_args(Protocol):  # a pipeline parameter arrives as any string
            raise InputError("protocol", expected=f"one of {get_args(Protocol)}", found=repr(self.protocol))
        if self.stream and not self.states:
            raise InputError("--state", expected="at least one IN=OUT pair with --stream", found="none")
        if not self.stream and (self.states or self.initial_state):
            raise InputError("--stream", expected="--stream with --state/--initial-state (a stateful model)",
                             found="state options without --stream")
        check_task_options(task=self.task, class_axis=self.class_axis, output_tasks=self.output_tasks)
        return self

    def probing(self) -> Probing:
        judging = OutputJudging(task=self.task, class_axis=self.class_axis, output_tasks=self.output_tasks,
                                min_agreement=self.min_top1_agreement, min_cosine=self.min_cosine_similarity,
                                max_error=self.max_regression_error)
        return Probing(version=self.version, load_model=self.load_model,
                       concurrency_levels=self.concurrency_levels, requests_per_level=self.requests_per_level,
                       max_p99_ms=self.max_p99_ms, tolerances=self.tolerances, judging=judging)


def run(*, url: str, model: str, onnx: str | Path, inputs: str | Path, options: ProbeOptions,
        tracking: TrackingOptions, repository: Path | None = None) -> StepResult:
    """Probe `model` on the server at `url` (host:port), or on a local tritonserver when `url` is empty, against
    the gated `onnx` on `inputs`, inside the step's MLflow run. `repository`: the model repository, when
    readable (for a local server, the one written here). Never raises: `error` verdict."""
    return evaluate_and_record(
        STEP, lambda _run: _probe(url=url, model=model, onnx=onnx, inputs=inputs, repository=repository,
                                  options=options),
        tracking, settings=options, inputs={"onnx": onnx, "inputs": inputs, "initial_state": options.initial_state})


def _probe(*, url: str, model: str, onnx: str | Path, inputs: str | Path, repository: Path | None,
           options: ProbeOptions) -> Verdict:
    from skewgate.common.triton.repository import write_repository
    from skewgate.common.triton.sequence import write_sequence_repository
    from skewgate.common.triton.server import triton_server

    options.check()
    gated = load_gated(onnx)  # bad files fail before any server starts
    stream = _stream_probing(gated, options) if options.stream else None
    if stream is None:
        arrays = load_npz(inputs, expected=gated.input_specs)
        feeds = {t.name: arrays[t.name][: options.max_samples] for t in gated.signature.inputs}
    else:
        by_name = {spec.name: spec for spec in gated.input_specs if spec.name not in options.states}
        # one step's input, with a time axis after the batch
        arrays = load_npz(inputs, expected=[replace(spec, shape=(spec.shape[0], None, *spec.shape[1:]))
                                            for spec in by_name.values()])
        feeds = {name: arrays[name][: options.max_sequences] for name in by_name}
        sequence_feeds(feeds, str(inputs))
    data = {"inputs": sha256_file(inputs)}
    if options.initial_state:
        data["initial_state"] = sha256_file(options.initial_state)
    subject = Subject(artifact=str(gated.path), sha256=gated.sha256, data=data)
    if url:
        return _probe_at(url, model, gated, feeds, subject, repository, options, stream)
    with tempfile.TemporaryDirectory(prefix="skewgate-triton-") as tmp:
        repo = Path(tmp) / "repository"
        if stream is None:
            write_repository(gated.path, repo, name=model, signature=gated.signature)
        else:
            write_sequence_repository(gated.path, repo, name=model, states=stream.states, initial=stream.initial,
                                      signature=gated.signature)
        with triton_server(repo, models=(model,), log_path=Path(tmp) / "tritonserver.log") as server:
            address = server.http_url if options.protocol == "http" else server.grpc_url
            return _probe_at(address, model, gated, feeds, subject, repo, options, stream)


def _stream_probing(gated: GatedModel, options: ProbeOptions) -> StreamProbing:
    """The state pairs checked against STEP, and one sequence's initial state (zeros, or the file's)."""
    import secrets

    from skewgate.common.triton.sequence import check_states, initial_state

    check_states(gated.signature, options.states, source=gated.path)
    specs = {spec.name: spec for spec in gated.input_specs}
    first = options.first_correlation_id or 1 + secrets.randbelow(2**62)
    return StreamProbing(states=dict(options.states),
                         initial=initial_state({name: specs[name] for name in options.states}, options.initial_state),
                         initial_source=str(options.initial_state or "zeros"), first_correlation_id=first)


def _probe_at(url: str, model: str, gated: GatedModel, feeds: dict[str, np.ndarray], subject: Subject,
              repository: Path | None, options: ProbeOptions, stream: StreamProbing | None) -> Verdict:
    client = TritonClient(url, options.protocol, options.headers, options.tls, options.ca_certificate,
                          options.deadline_s)
    try:
        return probe(client, url=url, protocol=options.protocol, model=model, gated=gated, feeds=feeds,
                     subject=subject, repository=repository, probing=replace(options.probing(), stream=stream)
                     ).judged_with(options)
    finally:
        client.close()
