"""parity-diff: compare PyTorch, ONNX Runtime FP32, ONNX Runtime INT8 and a live Triton server on the same
inputs, on the final outputs and (with `layerwise`) on every intermediate value both sides have, and name the
first layer that diverges.

Pairs and their rules: torch vs ORT FP32 and ORT FP32 vs Triton use `assert_close` semantics, with tolerances
grounded in the model's own float32 rounding (`common/rounding.py`: a float64 run of the same program on a few
samples; final outputs never tighter than the dtype defaults, intermediates never tighter than
`LAYER_TOLERANCE`; an explicit tolerance wins); ORT FP32 vs INT8 is judged by SQNR per value and, on outputs,
top-1 agreement and softmax KL. Inputs stream through in batches with running statistics, so memory stays at one
batch of intermediates.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from skewgate.common.compare import Tolerance
from skewgate.common.error_stats import RunningError
from skewgate.common.errors import InputError
from skewgate.common.io import load_npz, load_onnx, onnx_input_specs, sha256_file
from skewgate.common.layers import OnnxValue, TorchRecorder, onnx_values, quantized_counterparts, with_intermediates
from skewgate.common.output_tasks import agreements, check_task_options, describe_agreement, resolve_outputs
from skewgate.common.resolution import smallest_resolvable
from skewgate.common.rounding import MAX_GROUNDED, REFERENCE_SAMPLES, Rounding, first_samples, measure, take_samples
from skewgate.common.runtime import run_by_name, session
from skewgate.common.verdict import OMIT_IF_NONE, Check, Subject, Verdict
from skewgate.parity.internals.matching import Matching, match
from skewgate.parity.run import ParityOptions

log = logging.getLogger(__name__)
STEP = "parity"
FP32, INT8, TRITON = "torch_vs_fp32", "fp32_vs_int8", "fp32_vs_triton"
Served = Literal["fp32", "fp16", "int8"]  # what a Triton server compared serves
# The floor for intermediates (looser than one op's: rounding differences accumulate layer by layer); each value
# is judged at this or at its own float64-grounded tolerance, whichever is looser.
LAYER_TOLERANCE = Tolerance(rtol=1e-4, atol=1e-4)
ISOLATED_SAMPLES = 4  # samples, cut along the batch axis, on which the suspect op is re-run alone


@dataclass(frozen=True)
class ParityDetails:
    """The verdict's `details`: what parity found beyond its checks. A pair that was not judged has no key."""

    pairs: list[str]  # the pairs judged, e.g. torch_vs_fp32, fp32_vs_int8
    samples: int
    timing: dict[str, float]  # seconds: load, match, sessions, reference, streaming, checks
    rounding: dict[str, Any]  # how FP32 tolerances were grounded: float64 reference (per value) or size-aware
    finals: dict[str, dict[str, dict[str, Any]]]  # pair → output → error summary
    # layer reports (coverage, first divergence) per judged pair
    torch_vs_fp32: dict[str, Any] | None = field(default=None, metadata=OMIT_IF_NONE)
    fp32_vs_int8: dict[str, Any] | None = field(default=None, metadata=OMIT_IF_NONE)
    # INT8 vs FP32 on the first output as its task says: the task, its agreement and figures (KL, confidence
    # compression, mIoU, cosine, R²…), the smallest change the sample count resolves
    int8_agreement: dict[str, Any] | None = field(default=None, metadata=OMIT_IF_NONE)
    fp32_vs_fp16: dict[str, Any] | None = field(default=None, metadata=OMIT_IF_NONE)
    triton: str | None = field(default=None, metadata=OMIT_IF_NONE)  # why Triton was not compared
    stream: dict[str, Any] | None = field(default=None, metadata=OMIT_IF_NONE)  # STEP vs FULL, with --stream-onnx


@dataclass(frozen=True)
class ParityResult:
    verdict: Verdict
    layers: dict[str, list[dict[str, Any]]]  # pair → one row per matched value, in topological order


def parity(*, torch_model: str | Path, onnx: str | Path, inputs: str | Path, int8: str | Path | None = None,
           triton_url: str | None = None, triton_model: str | None = None, fp16: str | Path | bool = False,
           fp16_out: str | Path | None = None, options: ParityOptions | None = None) -> ParityResult:
    """`fp16`: True to convert the FP32 model to FP16 and judge that, or the path of a given FP16 model;
    `fp16_out`: where to write the FP16 model with the proposed nodes kept in FP32, once it is checked to pass."""
    options = options or ParityOptions()

    if (options.states or options.initial_state) and not options.stream_onnx:
        raise InputError("--state/--initial-state", expected="--stream-onnx STEP.onnx with them", found="none")
    # before anything runs, and with or without --int8: a mistyped task never passes as "not read"
    check_task_options(task=options.task, class_axis=options.class_axis, output_tasks=options.output_tasks)
    if options.triton_serves not in get_args(Served):  # a KFP parameter arrives as any string
        raise InputError("triton_serves", expected=f"one of {get_args(Served)}", found=repr(options.triton_serves))
    started = time.perf_counter()
    loaded = _load(torch_model, onnx, inputs, int8, options)
    loaded_at = time.perf_counter()
    torch_side = _pair_with_torch(loaded, options)
    matched_at = time.perf_counter()
    backends = _open_backends(loaded, torch_side, triton_url, triton_model, options)
    referencing_at = time.perf_counter()
    setup = _Setup(options, loaded, torch_side, backends, _ground(loaded, torch_side, options))
    streaming_at = time.perf_counter()
    streamed = _stream(setup)
    while more := setup.grounding.to_ground(streamed.failing()):
        # only samples the float64 run has not seen fail: ground the worst of them too and compare again
        log.info("grounding %d more samples in float64: they fail with the first ones' rounding", len(more))
        setup = dataclasses.replace(setup, grounding=setup.grounding.widened(
            _ground(loaded, torch_side, options, samples=more)))
        streamed = _stream(setup)
    timing = {"load_s": loaded_at - started, "match_s": matched_at - loaded_at,
              "sessions_s": referencing_at - matched_at, "reference_s": streaming_at - referencing_at,
              "streaming_s": time.perf_counter() - streaming_at}
    checking = time.perf_counter()
    findings = _judge(setup, streamed, fp16=fp16, fp16_out=fp16_out)
    timing["checks_s"] = time.perf_counter() - checking  # layer report, isolated re-run, FP16, stream
    return _result(setup, streamed, findings, timing)


@dataclass(frozen=True)
class _Loaded:
    """The given files, the program and the FP32 model checked against each other, and the samples to compare."""

    torch_model: str | Path
    onnx: str | Path
    inputs: str | Path
    int8: str | Path | None
    program: Any
    fp32_model: Any  # as deployed
    feeds: dict[str, np.ndarray]  # graph input → its samples, at most `max_samples`
    axes: dict[str, int | None]  # graph input → its batch axis
    outputs: list[str]  # the FP32 model's final outputs, in order

    @property
    def samples(self) -> int:
        return len(next(iter(self.feeds.values())))


def _load(torch_model: str | Path, onnx: str | Path, inputs: str | Path, int8: str | Path | None,
          options: ParityOptions) -> _Loaded:
    from skewgate.common.pt2 import load_program

    program, _ = load_program(str(torch_model), inputs, graph_only=True)
    fp32_model = load_onnx(onnx)
    specs = onnx_input_specs(fp32_model)
    torch_inputs = list(program.graph_signature.user_inputs)
    if [s.name for s in specs] != torch_inputs:
        raise InputError(onnx, field="inputs", expected=f"the PyTorch program's inputs {torch_inputs}",
                         found=f"{[s.name for s in specs]}")
    arrays = load_npz(inputs, expected=specs)
    feeds = {s.name: arrays[s.name][: options.max_samples] for s in specs}
    outputs = [o.name for o in fp32_model.graph.output]
    if len(program.graph_signature.user_outputs) != len(outputs):
        raise InputError(onnx, field="outputs", expected=f"{len(program.graph_signature.user_outputs)} outputs "
                         "like the PyTorch program", found=f"{len(outputs)}")
    return _Loaded(torch_model=torch_model, onnx=onnx, inputs=inputs, int8=int8, program=program,
                   fp32_model=fp32_model, feeds=feeds, axes={s.name: batch_axis(s) for s in specs}, outputs=outputs)


@dataclass(frozen=True)
class _TorchSide:
    """What runs the PyTorch program, and how the FP32 model's values pair with the program's."""

    values: dict[str, OnnxValue]  # every value of the FP32 model
    recorder: TorchRecorder | None  # with `layerwise`: runs the program recording the paired values
    plain: Any  # without: the program's module, built once, fed every batch
    matching: Matching  # empty without `layerwise`

    @property
    def counterparts(self) -> dict[str, str]:
        return self.matching.pairs

    @property
    def module_types(self) -> dict[str, str]:
        """A recorded value's module → its nn.Module class (empty without `layerwise`)."""
        recorder = self.recorder
        if recorder is None:
            return {}
        return {recorder.modules[n]: recorder.module_types[n] for n in recorder.recorded}


def _pair_with_torch(loaded: _Loaded, options: ParityOptions) -> _TorchSide:
    values = onnx_values(loaded.fp32_model)
    recorder = TorchRecorder(loaded.program) if options.layerwise else None
    plain = loaded.program.module() if recorder is None else None  # built once, fed every batch
    matching = match(loaded.fp32_model, loaded.program, recorder.recorded) if recorder is not None else Matching()
    if recorder is not None:
        recorder.record(set(matching.pairs.values()))
    return _TorchSide(values=values, recorder=recorder, plain=plain, matching=matching)


@dataclass(frozen=True)
class _Backends:
    """The ONNX Runtime sessions, and the Triton server, the samples stream through."""

    fp32: Any  # the FP32 model as deployed: the final outputs
    fp32_layers: Any  # with `layerwise`: a copy that also outputs the paired values
    int8_model: Any
    int8: Any  # the INT8 model's session
    int8_layers: Any  # with `layerwise`: a copy that also outputs the INT8 values paired with FP32's
    int8_names: dict[str, str]  # INT8 value name → the FP32 value it stands for
    triton: Callable[..., Any] | None


def _open_backends(loaded: _Loaded, torch_side: _TorchSide, triton_url: str | None, triton_model: str | None,
                   options: ParityOptions) -> _Backends:
    # Final outputs come from the model as deployed. Intermediates come from a copy that also outputs them: ORT
    # cannot optimise an exposed value away, so that copy may compute differently (e.g. a Dropout node left in
    # training mode, which ORT drops from the deployed graph, runs in it) — a finding, not noise, but never
    # allowed to change the verdict on the final outputs.
    fp32 = session(loaded.fp32_model)
    int8_model = None
    if loaded.int8:
        int8_model = load_onnx(loaded.int8)
        if [o.name for o in int8_model.graph.output] != loaded.outputs:
            raise InputError(loaded.int8, field="outputs", expected=f"the FP32 model's outputs {loaded.outputs}",
                             found=f"{[o.name for o in int8_model.graph.output]}")
    int8_session = int8_layers = None
    int8_names: dict[str, str] = {}  # INT8 value name → the FP32 value it stands for
    if int8_model is not None:
        int8_session = session(int8_model)
        if options.layerwise:
            int8_names = quantized_counterparts(torch_side.values, onnx_values(int8_model))
            int8_layers = session(with_intermediates(int8_model, list(int8_names)), arena=False)
    # Only the paired values are exposed while streaming (PyTorch's twins and INT8's): every exposed value is an
    # allocation per run and a node ORT may no longer fuse — exposing all of them made this session 3.5× the
    # deployed one's time. With only those, ORT's arena may keep them (it holds one batch of paired values,
    # as the PyTorch side does; fresh allocations each run cost 2× the run). The isolated re-run, which may
    # need any value, exposes everything on its 4 samples.
    fp32_layers = session(with_intermediates(loaded.fp32_model, [*torch_side.counterparts, *int8_names.values()])) \
        if options.layerwise else None
    triton = _triton_runner(triton_url, triton_model, loaded.fp32_model, options) if triton_url else None
    return _Backends(fp32=fp32, fp32_layers=fp32_layers, int8_model=int8_model, int8=int8_session,
                     int8_layers=int8_layers, int8_names=int8_names, triton=triton)


@dataclass(frozen=True)
class _Grounding:
    """The tolerances, grounded in PyTorch FP32's distance from float64 (`_rounding`); an explicit one wins."""

    finals_rounding: Rounding
    layers_rounding: Rounding
    tols: dict[str, Tolerance]  # final output → its tolerance
    explicit_layer_tolerance: Tolerance | None
    counterparts: Mapping[str, str]  # FP32 value → program node (`layers_rounding` is by program node)
    explicit_tolerances: Mapping[str, Tolerance]  # final output → the tolerance the user gave

    def layer_tolerance(self, value: str) -> Tolerance:
        return self.explicit_layer_tolerance or self.layers_rounding.tolerance(self.counterparts.get(value, ""),
                                                                              LAYER_TOLERANCE)

    def to_ground(self, failing: tuple[dict[str, dict[int, float]], dict[int, float]]) -> list[int]:
        """The samples to ground next (`Rounding.to_ground`), given the failing samples of each final output
        and of the layers; those judged with a tolerance the user gave do not count."""
        by_output, layers = failing
        finals = {i: r for name, samples in by_output.items() if name not in self.explicit_tolerances
                  for i, r in samples.items()}
        more = set(self.finals_rounding.to_ground(finals))
        if self.explicit_layer_tolerance is None:
            more.update(self.layers_rounding.to_ground(layers))
        return sorted(more)[: max(MAX_GROUNDED - self.finals_rounding.samples, 0)]

    def widened(self, more: _Grounding) -> _Grounding:
        """This grounding and `more`'s (on other samples) together, and the tolerances they give."""
        finals_rounding = self.finals_rounding.widened(more.finals_rounding)
        return dataclasses.replace(self, finals_rounding=finals_rounding,
                                   layers_rounding=self.layers_rounding.widened(more.layers_rounding),
                                   tols=_final_tolerances(finals_rounding, list(self.tols), self.explicit_tolerances))


def _ground(loaded: _Loaded, torch_side: _TorchSide, options: ParityOptions,
            samples: Sequence[int] | None = None) -> _Grounding:
    """The grounding on `samples` (the first `REFERENCE_SAMPLES` unless given)."""
    samples = range(min(REFERENCE_SAMPLES, loaded.samples)) if samples is None else samples
    finals_rounding, layers_rounding = _rounding(torch_side.recorder, torch_side.plain,
                                                 take_samples(loaded.feeds, samples, axes=loaded.axes), samples,
                                                 loaded.outputs, len(loaded.program.graph.nodes))
    return _Grounding(finals_rounding=finals_rounding, layers_rounding=layers_rounding,
                      tols=_final_tolerances(finals_rounding, loaded.outputs, options.tolerances),
                      explicit_layer_tolerance=options.layer_tolerance, counterparts=torch_side.counterparts,
                      explicit_tolerances=options.tolerances)


def _final_tolerances(rounding: Rounding, outputs: Sequence[str],
                      given: Mapping[str, Tolerance]) -> dict[str, Tolerance]:
    return {n: given.get(n) or rounding.tolerance(n, Tolerance.for_dtype(np.float32)) for n in outputs}


@dataclass(frozen=True)
class _Setup:
    """What parity prepares before streaming, phase by phase."""

    options: ParityOptions
    loaded: _Loaded
    torch: _TorchSide
    backends: _Backends
    grounding: _Grounding


@dataclass(frozen=True)
class _Streamed:
    """What streaming the samples through every backend accumulated."""

    finals: dict[str, dict[str, RunningError]]  # pair → final output → its error
    layers: dict[str, dict[str, RunningError]]  # pair → paired intermediate value → its error
    kept: dict[str, dict[str, list[np.ndarray]]]  # "fp32"/"int8" → final output (small) → its batches
    full_kept: list[dict[str, np.ndarray]]  # with --stream-onnx: FULL's outputs, batch by batch

    def failing(self) -> tuple[dict[str, dict[int, float]], dict[int, float]]:
        """The samples out of tolerance, ORT FP32 against PyTorch: per final output, and over all layers."""
        layers: dict[int, float] = {}
        for err in self.layers[FP32].values():
            for index, ratio in err.failing.items():
                layers[index] = max(layers.get(index, 0.0), ratio)
        return {name: err.failing for name, err in self.finals[FP32].items()}, layers


def _stream(setup: _Setup) -> _Streamed:
    """Every batch through PyTorch, ORT FP32 and, where given, INT8 and Triton, into running errors: memory holds
    one batch of intermediates."""
    options, torch_side, backends, grounding = setup.options, setup.torch, setup.backends, setup.grounding
    feeds, outputs, tols = setup.loaded.feeds, setup.loaded.outputs, grounding.tols
    recorder, counterparts = torch_side.recorder, torch_side.counterparts
    rng = np.random.default_rng(options.seed)
    finals: dict[str, dict[str, RunningError]] = {FP32: {n: RunningError(tols[n]) for n in outputs}}
    layers: dict[str, dict[str, RunningError]] = {FP32: {}, INT8: {}}
    # every final output (small), for the INT8 and Triton judgements of each as its task says
    kept: dict[str, dict[str, list[np.ndarray]]] = {side: {n: [] for n in outputs}
                                                    for side in ("fp32", "int8", "triton")}
    full_kept: list[dict[str, np.ndarray]] = []
    n = setup.loaded.samples
    log.info("comparing %d samples in batches of %d%s", n, options.batch_size, " layer by layer" * options.layerwise)
    for start in range(0, n, options.batch_size):
        batch = {k: v[start : start + options.batch_size] for k, v in feeds.items()}
        if recorder is not None:
            torch_out, recorded = recorder.run(batch)
        else:
            torch_out, recorded = _torch_outputs(torch_side.plain, batch), {}
        fp32_values = run_by_name(backends.fp32, batch)
        fp32_inner = run_by_name(backends.fp32_layers, batch) if backends.fp32_layers is not None else {}
        samples = range(start, min(start + options.batch_size, n))
        for index, name in enumerate(outputs):
            finals[FP32][name].update(fp32_values[name], torch_out[index], rng, samples=samples)
        for name, node in counterparts.items():
            if name in outputs or name not in fp32_inner or node not in recorded:
                continue
            # a pair whose shapes differ is recorded as such (RunningError.shape_mismatch), never dropped
            layers[FP32].setdefault(name, RunningError(grounding.layer_tolerance(name))).update(
                fp32_inner[name], recorded[node], rng, samples=samples)
        for name in outputs:
            kept["fp32"][name].append(fp32_values[name])
        if options.stream_onnx:  # stream mode's reference: FULL's outputs, every one, run once here
            full_kept.append(fp32_values)
        if backends.int8 is not None:
            int8_values = run_by_name(backends.int8, batch)
            for name in outputs:
                finals.setdefault(INT8, {}).setdefault(name, RunningError(tols[name])).update(
                    int8_values[name], fp32_values[name], rng)
            int8_inner = run_by_name(backends.int8_layers, batch) if backends.int8_layers is not None else {}
            for int8_name, name in backends.int8_names.items():
                if int8_name in int8_inner and name in fp32_inner and name not in outputs:
                    layers[INT8].setdefault(name, RunningError(options.layer_tolerance or LAYER_TOLERANCE)).update(
                        int8_inner[int8_name], fp32_inner[name], rng)
            for name in outputs:
                kept["int8"][name].append(int8_values[name])
            del int8_inner  # see below
        if backends.triton is not None:
            served = backends.triton(batch)
            for index, name in enumerate(outputs):
                finals.setdefault(TRITON, {}).setdefault(name, RunningError(tols[name])).update(
                    served[index], fp32_values[name], rng)
                kept["triton"][name].append(served[index])
        # drop this batch's intermediates before the next batch allocates its own: else the peak holds two
        del recorded, fp32_inner
    return _Streamed(finals=finals, layers=layers, kept=kept, full_kept=full_kept)


@dataclass
class _Findings:
    """The checks, in the verdict's order, and what judging adds to the verdict's details and the layer tables."""

    checks: list[Check]
    pairs: list[str]  # the pairs judged
    reports: dict[str, Any] = field(default_factory=dict)  # pair → its layer report
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # pair → one row per matched value
    int8_agreement: dict[str, Any] | None = None
    stream: dict[str, Any] | None = None


def _judge(setup: _Setup, streamed: _Streamed, *, fp16: str | Path | bool,
           fp16_out: str | Path | None) -> _Findings:
    """Every check, in the verdict's order: final outputs, FP32 layers, INT8, FP16, Triton, stream."""
    options, loaded, grounding, finals = setup.options, setup.loaded, setup.grounding, streamed.finals
    checks = [Check(f"outputs_match.{name}", passed=err.ok, value=err.worst_ratio, limit=1.0,
                    detail=f"ORT FP32 vs torch: {_describe(err)} (rtol {err.tolerance.rtol:.3g}, atol "
                           f"{err.tolerance.atol:.3g}, {grounding.finals_rounding.summary()['method']})")
              for name, err in finals[FP32].items()]
    # Batch invariance is export's fact (ORT) and probe's (Triton): each fact has one owner step.
    triton = setup.backends.triton
    found = _Findings(checks=checks, pairs=[p for p in (FP32, INT8 if loaded.int8 else None,
                                                        TRITON if triton else None) if p])
    # a value is labelled with the nn.Module that made it and its class: `features.1 (BatchNorm2d)`, which
    # the ONNX op alone (a Conv with the BatchNorm folded in) would misname
    module_types = setup.torch.module_types
    if options.layerwise:
        found.rows[FP32], fp32_checks, found.reports[FP32] = _fp32_layer_report(setup, streamed, module_types)
        found.checks += fp32_checks
    probabilities = {o for n in loaded.fp32_model.graph.node if n.op_type == "Softmax" for o in n.output}
    if setup.backends.int8_model is not None:
        int8_list, found.int8_agreement = _int8_checks(finals[INT8], streamed.kept, options,
                                                       probabilities=probabilities)
        found.checks += int8_list
        if options.layerwise:
            found.rows[INT8], int8_checks, found.reports[INT8] = _layer_report(
                INT8, streamed.layers[INT8], setup.torch.values, loaded.outputs,
                lambda e: e.sqnr_db < options.min_layer_sqnr_db, None, None, module_types)
            found.checks += int8_checks
    if fp16 is not False:
        from skewgate.parity.internals.fp16 import PAIR, Fp16Options, fp16_checks

        given = None if fp16 is True else fp16
        fp16_options = Fp16Options(batch_size=options.batch_size, cuda=options.fp16_cuda,
                                   min_top1_agreement=options.min_top1_agreement, task=options.task,
                                   class_axis=options.class_axis, output_tasks=options.output_tasks,
                                   min_cosine_similarity=options.min_cosine_similarity,
                                   max_regression_error=options.max_regression_error)
        fp16_list, found.reports[PAIR], found.rows[PAIR] = fp16_checks(loaded.fp32_model, given, loaded.feeds,
                                                                       fp16_options, write_fixed=fp16_out)
        found.checks += fp16_list
        found.pairs.append(PAIR)
    if triton is not None:
        found.checks += _triton_checks(finals[TRITON], streamed.kept, options, probabilities=probabilities)
    if options.stream_onnx:
        from skewgate.parity.internals.stream import stream_checks

        stream_list, found.stream = stream_checks(
            step_onnx=options.stream_onnx, states=options.states, feeds=loaded.feeds,
            full={name: np.concatenate([values[name] for values in streamed.full_kept]) for name in loaded.outputs},
            full_outputs=loaded.outputs, tolerances=grounding.tols, initial_state=options.initial_state,
            full_onnx=loaded.onnx, layerwise=options.layerwise)
        found.checks += stream_list
    return found


def _fp32_layer_report(setup: _Setup, streamed: _Streamed, module_types: Mapping[str, str],
                       ) -> tuple[list[dict[str, Any]], list[Check], dict[str, Any]]:
    """torch vs ORT FP32 value by value; the first divergence is re-run alone (`_isolated`) on a few samples."""
    loaded, torch_side, matching = setup.loaded, setup.torch, setup.torch.matching
    recorder = torch_side.recorder
    assert recorder is not None
    assert setup.backends.fp32_layers is not None

    def isolate(name: str) -> str:
        small = first_samples(loaded.feeds, ISOLATED_SAMPLES, axes=loaded.axes)
        exposed = session(with_intermediates(loaded.fp32_model), arena=False)
        ort_values = {**small, **run_by_name(exposed, small)}  # graph inputs too: an op may read them
        return _isolated(name, matching, recorder.run(small)[1], ort_values, loaded.fp32_model,
                         setup.grounding.layer_tolerance(name), min(ISOLATED_SAMPLES, loaded.samples))

    rows, checks, report = _layer_report(FP32, streamed.layers[FP32], torch_side.values, loaded.outputs,
                                         lambda e: not e.ok, matching, isolate, module_types)
    for row in rows:
        row["torch_node"] = torch_side.counterparts[row["value"]]
        row["matched_by"] = matching.how[row["value"]]
    return rows, checks, report


def _result(setup: _Setup, streamed: _Streamed, found: _Findings, timing: dict[str, float]) -> ParityResult:
    options, loaded, grounding = setup.options, setup.loaded, setup.grounding
    # the INT8 file judged beside the FP32 one is named by digest, so that promote can register exactly it
    data = {"inputs": sha256_file(loaded.inputs), **({"int8": sha256_file(loaded.int8)} if loaded.int8 else {}),
            **({"stream_onnx": sha256_file(options.stream_onnx)} if options.stream_onnx else {}),
            **({"initial_state": sha256_file(options.initial_state)} if options.stream_onnx and options.initial_state
               else {})}
    subject = Subject(artifact=str(loaded.onnx), sha256=sha256_file(loaded.onnx), data=data,
                      source=str(loaded.torch_model))
    rounding = {"outputs": grounding.finals_rounding.summary(),
                "layers": grounding.layers_rounding.summary() if setup.torch.recorder else None}
    details = ParityDetails(pairs=found.pairs, samples=loaded.samples, timing=timing, rounding=rounding,
                            finals={pair: {k: e.summary() for k, e in errs.items()}
                                    for pair, errs in streamed.finals.items()},
                            torch_vs_fp32=found.reports.get(FP32), fp32_vs_int8=found.reports.get(INT8),
                            int8_agreement=found.int8_agreement, fp32_vs_fp16=found.reports.get("fp32_vs_fp16"),
                            triton=None if setup.backends.triton else "not compared: no Triton URL given",
                            stream=found.stream)
    return ParityResult(Verdict.from_checks(STEP, found.checks, subject=subject, details=details), found.rows)


def _rounding(recorder: TorchRecorder | None, plain: Any, sample: dict[str, np.ndarray], indices: Sequence[int],
              outputs: list[str], ops: int) -> tuple[Rounding, Rounding]:
    """PyTorch FP32's distance from float64 on `sample` (the samples at `indices`): for the final outputs (by
    ONNX output name) and for the recorded intermediates (by program node name). One float64 run serves both."""
    from skewgate.common.layers import float64_module

    if recorder is not None:
        narrow_out, narrow_inner = recorder.run(sample)
    else:
        narrow_out, narrow_inner = _torch_outputs(plain, sample), {}
    wide: list[tuple[list[np.ndarray], dict[str, np.ndarray]]] = []

    def float64() -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
        if not wide:
            wide.append(recorder.run(sample, float64=True) if recorder is not None
                        else (_torch_outputs(float64_module(plain), sample, float64=True), {}))
        return wide[0]

    finals = measure(dict(zip(outputs, narrow_out, strict=True)),
                     lambda: dict(zip(outputs, float64()[0], strict=True)), samples=indices, ops=ops)
    layers = measure(narrow_inner, lambda: float64()[1], samples=indices, ops=ops)
    return finals, layers


def _torch_outputs(module: Any, batch: dict[str, np.ndarray], *, float64: bool = False) -> list[np.ndarray]:
    import torch
    from torch.utils._pytree import tree_leaves

    from skewgate.common.layers import widen

    with torch.no_grad():
        arrays = [widen(a) if float64 else a for a in batch.values()]
        result = module(*[torch.from_numpy(np.ascontiguousarray(a)) for a in arrays])
    return [leaf.detach().cpu().numpy() for leaf in tree_leaves(result)]


def _triton_runner(url: str, model: str | None, onnx_model: Any, options: ParityOptions) -> Callable[..., Any]:
    from skewgate.common.triton.client import TritonClient
    from skewgate.common.triton.repository import TRITON_TYPES, from_served, to_served

    if not model:
        raise InputError("--triton-model", expected="the model name on the Triton server", found="nothing")
    client = TritonClient(url, protocol=options.triton_protocol, deadline_s=options.triton_deadline_s)
    client.is_server_live()  # a server that is down is "could not evaluate"
    initializers = {i.name for i in onnx_model.graph.initializer}
    datatypes = {i.name: TRITON_TYPES[i.type.tensor_type.elem_type].removeprefix("TYPE_")
                 for i in onnx_model.graph.input if i.name not in initializers}
    outputs = [o.name for o in onnx_model.graph.output]
    config = client.model_config(model)  # its reshapes: an id per sample is served as [batch, 1]

    def run(batch: dict[str, np.ndarray]) -> list[np.ndarray]:
        served = from_served(client.infer(model, to_served(batch, config), outputs, datatypes=datatypes), config)
        return [served[name] for name in outputs]

    return run


def _describe(err: RunningError) -> str:
    if err.shape_mismatch:
        return err.shape_mismatch
    s = err.summary()
    return (f"max |a-e| {s['max_abs']:.3g}, mean {s['mean_abs']:.3g}, median {s['median_abs']:.3g}, p99 "
            f"{s['p99_abs']:.3g}, max rel {s['max_rel']:.3g}, worst/tolerance {err.worst_ratio:.3g}")


def _int8_checks(finals: dict[str, RunningError], kept: dict[str, dict[str, list[np.ndarray]]],
                 options: ParityOptions, *, probabilities: set[str]) -> tuple[list[Check], dict[str, Any]]:
    """INT8 vs FP32 on the final outputs, every one judged as its task says — the judgement and the limits
    calibrate uses (common/output_tasks.py). `probabilities`: the outputs that are a Softmax's."""
    checks = [Check(f"int8.sqnr_db.{name}", passed=err.sqnr_db >= options.min_output_sqnr_db,
                    value=err.sqnr_db, limit=options.min_output_sqnr_db, detail=f"INT8 vs FP32: {_describe(err)}")
              for name, err in finals.items()]
    agreement, figures = _agreement_checks("int8", kept, options, probabilities=probabilities, label="INT8 vs FP32")
    for name, check in agreement.items():
        checks.append(check)
        one = figures[name]
        if "kl_divergence" in one:
            kl = one["kl_divergence"] or 0.0
            checks.append(Check(f"int8.kl_divergence.{name}", passed=kl <= options.max_kl_divergence, value=kl,
                                limit=options.max_kl_divergence,
                                detail=f"softmax KL(FP32 ‖ INT8); entropy shift {one['entropy_shift']:+.3f} "
                                       f"nats; top-1/top-2 gap shrank by {one['gap_shrinkage']:.3f}"))
    return checks, figures


def _agreement_checks(side: str, kept: dict[str, dict[str, list[np.ndarray]]], options: ParityOptions, *,
                      probabilities: set[str], label: str) -> tuple[dict[str, Check], dict[str, Any]]:
    """`<side>.<agreement>.<output>`: the share of positions `side`'s final outputs leave unharmed against ORT
    FP32's, each output as its task says (`common/output_tasks.py`), with what the sample count resolves."""
    reference = {name: np.concatenate(parts) for name, parts in kept["fp32"].items()}
    candidate = {name: np.concatenate(parts) for name, parts in kept[side].items()}
    specs = resolve_outputs(reference, task=options.task, class_axis=options.class_axis,
                            output_tasks=options.output_tasks)
    judged = agreements(reference, candidate, specs, probabilities=probabilities,
                        min_cosine=options.min_cosine_similarity, max_error=options.max_regression_error)
    checks, figures = {}, {}
    for name, spec in specs.items():
        one = judged[name]
        figures[name] = {"task": spec.task, "class_axis": spec.class_axis, "why": spec.why, **one.figures,
                         "smallest_resolvable": smallest_resolvable(one.positions)}
        checks[name] = Check(f"{side}.{one.check}.{name}", passed=one.meets(options.min_top1_agreement),
                             value=one.agreement, limit=options.min_top1_agreement,
                             detail=f"{label}, {describe_agreement(spec, one, options.min_top1_agreement)}")
    return checks, figures


def _triton_checks(finals: dict[str, RunningError], kept: dict[str, dict[str, list[np.ndarray]]],
                   options: ParityOptions, *, probabilities: set[str]) -> list[Check]:
    """Triton against ORT FP32: within FP32's tolerances when it serves the FP32 model (`triton_serves`), and in
    any case agreeing as each output's task says. A deployment serving FP16 or INT8 is judged by the agreement
    alone, as its candidate is: FP32's tolerances are not its rounding, and the checks say so."""
    served = options.triton_serves
    checks = [Check(f"triton.outputs_match.{name}", passed=err.ok, value=err.worst_ratio, limit=1.0,
                    detail=f"Triton vs ORT FP32: {_describe(err)}") for name, err in finals.items()] \
        if served == "fp32" else []
    label = "Triton vs ORT FP32" if served == "fp32" else \
        f"Triton serving {served.upper()} vs ORT FP32 (not held to FP32's tolerances: triton_serves={served})"
    agreement, _ = _agreement_checks("triton", kept, options, probabilities=probabilities, label=label)
    return checks + list(agreement.values())


_EXPECTED_UNPAIRED = ("final output", "shape arithmetic", "inside an op's lowering")


def _coverage_by_module(matched: list[str], unmatched: Mapping[str, str], matching: Matching,
                        values: Mapping[str, OnnxValue]) -> dict[str, dict[str, int]]:
    """Per module: ONNX values paired, ONNX values left unpaired that PyTorch has a value for (a rewrite, no twin;
    shape arithmetic and values inside one op's lowering have none to pair with), PyTorch values removed. Low
    coverage fails nothing: it says where a defect would be found on a later layer only."""
    table: dict[str, dict[str, int]] = {}

    def count(module: str, kind: str) -> None:
        table.setdefault(module, {"paired": 0, "unpaired": 0, "removed": 0})[kind] += 1

    for name in matched:
        count(values[name].module, "paired")
    for name, why in unmatched.items():
        if name in values and not why.startswith(_EXPECTED_UNPAIRED):
            count(values[name].module, "unpaired")
    for node in matching.removed:
        count(matching.modules.get(node, "<root>"), "removed")
    return dict(sorted(table.items()))


def _layer_report(pair: str, errors: dict[str, RunningError], values: dict[str, OnnxValue], outputs: list[str],
                  bad: Callable[[RunningError], bool], matching: Matching | None,
                  isolate: Callable[[str], str] | None,
                  module_types: Mapping[str, str]) -> tuple[list[dict[str, Any]], list[Check], dict[str, Any]]:
    matched = sorted((name for name in errors if name in values), key=lambda v: values[v].depth)
    rows = [{"value": name, "node": values[name].node, "op": values[name].op_type, "module": values[name].module,
             "module_type": module_types.get(values[name].module, ""), "depth": values[name].depth,
             **errors[name].summary(), "diverged": bad(errors[name]),
             # what it was judged with: its program node's grounded tolerance, or the floor (a renamed value too)
             "rtol": errors[name].tolerance.rtol, "atol": errors[name].tolerance.atol}
            for name in matched]
    coverage: dict[str, Any] = {"matched": len(matched)}
    if matching is not None:  # every ONNX value: paired and observed, or why not
        unmatched = {v: why for v, why in matching.unmatched.items() if v not in outputs}
        unmatched.update({v: f"not observed: paired with {node!r} but ORT cannot expose it (no inferred type)"
                          for v, node in matching.pairs.items() if v not in errors and v not in outputs})
        coverage["matched_by"] = dict(Counter(matching.how[v] for v in matched))
        coverage["unmatched_onnx_values"] = dict(sorted(unmatched.items()))
        coverage["unmatched_by_reason"] = dict(Counter(why.split(":")[0] for why in unmatched.values()))
        # PyTorch values with no ONNX twin: folded (a Conv into its BatchNorm), fused, or aliases the exporter drops
        coverage["removed_by_optimisation"] = list(matching.removed)
        coverage["removed_ops"] = dict(Counter(matching.removed.values()))
        # identical PyTorch ops the exporter computes once (a mask per layer): judged through their twin's value
        coverage["merged_into_twin"] = dict(matching.merged)
        coverage["by_module"] = _coverage_by_module(matched, unmatched, matching, values)
    else:
        coverage["unmatched_onnx_values"] = sorted(set(values) - set(outputs) - set(matched))
    coverage["shape_mismatches"] = {v: errors[v].shape_mismatch for v in matched if errors[v].shape_mismatch}
    first = first_divergence(values, errors, bad)
    info: dict[str, Any] = {"coverage": coverage, "first_divergence": None}
    label = "torch vs ORT FP32" if pair == FP32 else "ORT FP32 vs INT8"
    checks = [Check(f"layers.{pair}.coverage", passed=bool(matched), value=len(matched), limit=1,
                    detail=f"{len(matched)} values matched, {len(coverage['unmatched_onnx_values'])} ONNX values "
                           f"unmatched, {len(coverage.get('removed_by_optimisation', []))} PyTorch values removed "
                           "by graph optimisation")]
    if first is None:
        checks.append(Check(f"layers.{pair}", passed=True, value=0, limit=0,
                            detail=f"{label}: every matched value within bounds"))
        return rows, checks, info
    where = values[first]
    diverged = sum(1 for r in rows if r["diverged"])
    module_type = module_types.get(where.module, "")
    info["first_divergence"] = {"value": first, "node": where.node, "op": where.op_type, "module": where.module,
                                "module_type": module_type, **errors[first].summary()}
    module = f"{where.module} ({module_type})" if module_type else where.module
    text = (f"{label}: first divergence at {first!r} (node {where.node}, op {where.op_type}, module {module}); "
            f"{_describe(errors[first]) if pair == FP32 else f'SQNR {errors[first].sqnr_db:.1f} dB'}")
    if isolate is not None:
        isolated = isolate(first)
        info["first_divergence"]["isolated"] = isolated
        text += f"; {isolated}"
    checks.append(Check(f"layers.{pair}", passed=False, value=diverged, limit=0, detail=text))
    return rows, checks, info


def first_divergence(values: dict[str, OnnxValue], errors: Mapping[str, RunningError],
                     bad: Callable[[RunningError], bool]) -> str | None:
    """The earliest value out of bounds whose upstream matched values are all within bounds (unmatched values in
    between inherit the state of their own matched ancestors); else the earliest value out of bounds."""
    memo: dict[str, bool] = {}

    def clean(name: str) -> bool:  # is this value, as far as we can see, within bounds?
        if name in memo:
            return memo[name]
        memo[name] = True  # graph inputs, initializers, and cycle guard
        if name in errors:
            memo[name] = not bad(errors[name])
        elif name in values:
            memo[name] = all(clean(i) for i in values[name].inputs if i)
        return memo[name]

    ordered = sorted((v for v in errors if v in values), key=lambda v: values[v].depth)
    offenders = [v for v in ordered if bad(errors[v])]
    for name in offenders:
        if all(clean(i) for i in values[name].inputs if i):
            return name
    return offenders[0] if offenders else None


def batch_axis(spec: Any) -> int | None:
    """The axis of a graph input that the model leaves dynamic: its batch axis (None: all static)."""
    return next((axis for axis, size in enumerate(spec.shape or ()) if size is None), None)


def _isolated(name: str, matching: Matching, torch_values: dict[str, np.ndarray], fp32_values: dict[str, np.ndarray],
              model: Any, tolerance: Tolerance, samples: int) -> str:
    """Re-run the op that makes `name` alone, on PyTorch's values of its inputs (ORT's own for values PyTorch
    has no twin of, such as shape arithmetic), all from the same few samples cut along the batch axis: error the
    op introduces vs error it inherits."""
    from onnx import helper

    nodes = [model.graph.node[i] for i in matching.lowering.get(name, [])]
    reference = torch_values.get(matching.pairs.get(name, ""))
    if not nodes or reference is None:
        return "isolated run not possible: the value has no recorded PyTorch twin"
    produced_inside = {o for n in nodes for o in n.output}
    initializers = {i.name: i for i in model.graph.initializer}
    by_value = {v: torch_values[t] for v, t in matching.pairs.items() if t in torch_values}
    feeds, graph_inputs, used = {}, [], []
    for input_name in dict.fromkeys(i for n in nodes for i in n.input if i and i not in produced_inside):
        if input_name in initializers:
            used.append(initializers[input_name])
            continue
        value = by_value.get(input_name, fp32_values.get(input_name))
        if value is None:
            return "isolated run not possible: an input of the op was not recorded"
        feeds[input_name] = value
        graph_inputs.append(helper.make_tensor_value_info(
            input_name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape)))
    outputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(reference.dtype), None)]
    graph = helper.make_graph(nodes, "isolated", graph_inputs, outputs, initializer=used)
    single = helper.make_model(graph, opset_imports=model.opset_import, functions=model.functions)
    single.ir_version = model.ir_version
    try:
        produced = run_by_name(session(single), feeds)[name]
    except Exception as err:  # an op that cannot run alone: say so, do not guess
        return f"isolated run not possible: {type(err).__name__}"
    rng = np.random.default_rng(0)
    whole, alone = RunningError(tolerance), RunningError(tolerance)
    alone.update(produced, reference, rng)
    if name in fp32_values:
        whole.update(fp32_values[name], reference, rng)
    if name in fp32_values and whole.ok:
        return f"isolated run inconclusive: on the {samples} samples re-run, the value does not diverge"
    if alone.ok or alone.max_abs == 0:  # a zero difference is never a divergence
        return (f"isolated on PyTorch's inputs it matches (max |a-e| {alone.max_abs:.3g}, {samples} samples): the "
                "error is inherited")
    return (f"isolated on PyTorch's inputs it still diverges (max |a-e| {alone.max_abs:.3g}, {samples} samples): "
            "the error is introduced here")
