"""Export a PyTorch model to ONNX with the dynamo exporter and judge the result against PyTorch itself.

Checks: outputs match (assert_close semantics, at tolerances grounded in the program's own float32 rounding:
`common/rounding.py`), the batch dimension is dynamic, batch invariance (batch 1, an odd size, the largest;
PyTorch at the grounded tolerance, ONNX Runtime beside PyTorch's own batch-size variation), determinism (two
runs bit-identical), finite example inputs, the input hash chain (`checks/behaviour.py`), and the model lint
(`checks/lint.py`); for a step model (`states`), its contract (`checks/state.py`). The verdict's subject is the ONNX
file: its SHA-256 is what promote checks.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from skewgate.common.batching import BatchRuns, Runner, add_failing, batch_invariance, batch_runs
from skewgate.common.compare import Tolerance, compare_along, compare_close
from skewgate.common.errors import ExportError, InputError
from skewgate.common.io import TensorSpec, load_npz, load_onnx, sha256_file
from skewgate.common.pt2 import load_program, quiet, reexport_hint
from skewgate.common.rounding import REFERENCE_SAMPLES, Rounding, beside, measure, take_samples
from skewgate.common.states import parse_states
from skewgate.common.tensor_stats import sha256_array, summarize
from skewgate.common.verdict import OMIT_IF_NONE, Check, Subject, TensorStats, Verdict
from skewgate.export.checks.behaviour import determinism, dynamic_batch, finite_inputs, hash_chain
from skewgate.export.checks.lint import lint_program
from skewgate.export.checks.state import (
    check_state_inputs,
    resolve_outputs,
    state_batch_invariance,
    state_contract,
    state_feeds,
)
from skewgate.export.run import ExportOptions

if TYPE_CHECKING:
    import onnx
    import torch

log = logging.getLogger(__name__)
STEP = "export"


@dataclass(frozen=True)
class InputHashChain:
    """SHA-256 of the example inputs: the file, each array as loaded, and as each runtime was fed it."""

    file: str
    loaded: Mapping[str, str]
    torch_fed: Mapping[str, str]
    onnxruntime_fed: Mapping[str, str]


@dataclass(frozen=True)
class ExportDetails:
    """export's `details`: how each GELU is approximated in the program and in the ONNX graph (a `tanh` one
    served where `none` was trained shifts outputs), and the input hash chain."""

    gelu_approximations: Mapping[str, int]
    gelu_sites: Mapping[str, str]  # `module:node` → approximation, in the program
    onnx_gelu: Mapping[str, str]  # ONNX node → approximation
    input_hash_chain: InputHashChain
    rounding: Mapping[str, object]  # how the FP32 tolerances were grounded (float64 reference or size-aware)
    # with `--state`: the pairs as IN → ONNX output name, and the state inputs the example file lacked (zeros)
    states: Mapping[str, object] | None = field(default=None, metadata=OMIT_IF_NONE)


def export_model(*, model: str | Path, inputs: str | Path, out: str | Path,
                 options: ExportOptions | None = None) -> Verdict:
    """Export `model` (a `.pt2` ExportedProgram or an MLflow pytorch model URI) to `out` and judge it.

    `options.tolerances` override the dtype-default tolerance per output name. Batch invariance and the
    comparison use the first `options.max_samples` examples (batch invariance runs each of them alone, so this
    bounds its cost). `options.states`: a step model's state pairs (`checks/state.py`); a state input the
    example file lacks starts at zeros.
    """
    options = options or ExportOptions()
    tolerances = parse_tolerances(options.tolerances)  # bad input is refused before any work
    states = parse_states(options.states)
    out = Path(out)
    program, source_sha = load_program(str(model), inputs, allow_pickle=options.allow_pickle)
    specs = _input_specs(program)
    check_state_inputs(specs, states, source=str(model))
    arrays = _load_inputs(model, inputs, [s for s in specs if s.name not in states])
    zero_states: list[str] = []
    if states:
        arrays, zero_states = state_feeds(specs, arrays, states, source=str(model), input_file=str(inputs))
    feeds = {spec.name: arrays[spec.name][:options.max_samples] for spec in specs}
    checks: list[Check] = [finite_inputs(feeds)]
    lint_checks, gelus = lint_program(program)
    checks += lint_checks

    log.info("exporting %s to ONNX (dynamo exporter)", model)
    _export_onnx(program, feeds, out)
    onnx_model = load_onnx(out)
    onnx_gelu = {n.name: _gelu_mode(n) for n in onnx_model.graph.node if n.op_type == "Gelu"}
    run_torch, torch_fed = _torch_runner(program)
    run_ort, ort_fed = _ort_runner(out)

    log.info("comparing PyTorch and ONNX Runtime on %d samples", _batch(feeds))
    torch_out = run_torch(feeds)
    ort_out = run_ort(feeds)
    names = [o.name for o in onnx_model.graph.output]
    if len(names) != len(torch_out):
        raise ExportError(f"{out}: ONNX has {len(names)} outputs but PyTorch returned {len(torch_out)}")
    unknown = sorted(set(tolerances) - set(names))
    if unknown:
        raise InputError("--tolerance", field=", ".join(unknown), expected=f"one of the outputs {names}",
                         found="no such output")
    state_outputs = resolve_outputs(states, names, source=str(out))
    dynamic = dynamic_batch(onnx_model)
    log.info("checking batch invariance and determinism")
    # the whole-batch runs above are also the largest batch size and the first of each determinism pair
    torch_runs = batch_runs(run_torch, feeds, whole=torch_out) if dynamic.passed and _batch(feeds) > 1 else None
    rounding, tols = _grounded(program, run_torch, feeds, names, torch_out, ort_out, tolerances, torch_runs)
    for name, expected, actual in zip(names, torch_out, ort_out, strict=True):
        closeness = compare_close(actual, expected, tols[name])
        checks.append(Check(f"outputs_match.{name}", passed=closeness.ok, value=closeness.worst_ratio, limit=1.0,
                            detail=f"ORT vs torch (rtol {tols[name].rtol:g}, atol {tols[name].atol:g}): "
                                   + closeness.describe()))

    checks.append(dynamic)
    invariance, variation = batch_invariance("torch", run_torch, feeds, names, tols, dynamic=dynamic.passed,
                                             runs=torch_runs)
    # ORT may vary with the batch size as much as PyTorch itself does (its kernels block by batch too)
    ort_tols = {n: tols[n] if n in tolerances else beside(tols[n], variation.get(n, 0.0)) for n in names}
    checks += [invariance, determinism("torch", run_torch, feeds, first=torch_out),
               batch_invariance("onnxruntime", run_ort, feeds, names, ort_tols, dynamic=dynamic.passed,
                                whole=ort_out)[0],
               determinism("onnxruntime", run_ort, feeds, first=ort_out)]
    if states:
        produced = dict(zip(names, ort_out, strict=True))
        contract = state_contract(onnx_model, state_outputs, feeds, produced)
        checks += [contract, state_batch_invariance(run_ort, feeds, state_outputs, produced, names, ort_tols,
                                                    contract=contract.passed, dynamic=dynamic.passed)]

    loaded = {n: sha256_array(a) for n, a in feeds.items()}
    checks.append(hash_chain(loaded, torch_fed, ort_fed))
    details = ExportDetails(gelu_approximations=gelus.approximations, gelu_sites=gelus.sites, onnx_gelu=onnx_gelu,
                            input_hash_chain=InputHashChain(file=sha256_file(inputs), loaded=loaded,
                                                            torch_fed=torch_fed, onnxruntime_fed=ort_fed),
                            rounding=rounding.summary(),
                            states={"pairs": state_outputs, "zeros": zero_states} if states else None)
    stats = _stats(feeds, names, torch_out, ort_out)
    subject = Subject(artifact=str(out), sha256=sha256_file(out), data={"inputs": sha256_file(inputs)},
                      source=str(model), source_sha256=source_sha)
    return Verdict.from_checks(STEP, checks, subject=subject, stats=stats, details=details)


def parse_tolerances(items: Iterable[str]) -> dict[str, Tolerance]:
    """`OUTPUT=RTOL,ATOL` items (each may hold several, `;`-separated; empty ones are skipped) → output →
    tolerance."""
    result = {}
    for item in (part.strip() for text in items for part in text.split(";")):
        if not item:
            continue
        name, _, spec = item.partition("=")
        try:
            result[name] = Tolerance.parse(spec)
        except ValueError as err:
            raise InputError("--tolerance", field=item, expected="OUTPUT=RTOL,ATOL", found=str(err)) from err
    return result


def _load_inputs(model: str | Path, inputs: str | Path, specs: Sequence[TensorSpec]) -> dict[str, np.ndarray]:
    """The example inputs, checked against the program's inputs. When they differ only in the batch size and the
    program's batch axis is fixed, the program is what is wrong (traced without `dynamic_shapes`), and the error
    says so and how to re-export it."""
    try:
        return load_npz(inputs, expected=specs)
    except InputError as err:
        spec = next((s for s in specs if s.name == err.field and s.shape and s.shape[0] is not None), None)
        if spec is None:
            raise
        found = load_npz(inputs).get(spec.name)
        if found is None or found.ndim != len(spec.shape) or found.dtype != np.dtype(spec.dtype) \
                or found.shape[0] == spec.shape[0] \
                or any(want not in (None, got) for want, got in zip(spec.shape[1:], found.shape[1:], strict=True)):
            raise
        raise InputError(model, field=spec.name, expected="a program that takes any batch size",
                         found=f"a program traced with a fixed batch: it takes {spec.describe()} only (axis 0 = "
                               f"{spec.shape[0]}) and {Path(inputs).name} holds {found.shape[0]} samples; "
                               f"re-export it with a dynamic batch: {reexport_hint([s.name for s in specs])}"
                         ) from err


def _input_specs(program: torch.export.ExportedProgram) -> list[TensorSpec]:
    user_inputs = set(program.graph_signature.user_inputs)
    specs = []
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in user_inputs:
            value = node.meta["val"]
            shape = tuple(d if isinstance(d, int) else None for d in value.shape)
            specs.append(TensorSpec(node.name, str(value.dtype).removeprefix("torch."), shape))
    return specs


def _export_onnx(program: torch.export.ExportedProgram, feeds: dict[str, np.ndarray], out: Path) -> None:
    import torch

    out.parent.mkdir(parents=True, exist_ok=True)
    args = tuple(torch.from_numpy(a) for a in feeds.values())
    chatter = io.StringIO()  # the exporter prints progress lines to stdout; stdout is not ours to use
    try:
        with quiet(), contextlib.redirect_stdout(chatter):
            onnx_program = torch.onnx.export(program, args, dynamo=True, verbose=False)
            if onnx_program is not None:
                onnx_program.save(str(out))
    except Exception as err:  # the exporter's boundary: whatever it raises, the export failed
        raise ExportError(f"dynamo ONNX export failed: {type(err).__name__}: {err}") from err
    if onnx_program is None:
        raise ExportError("torch.onnx.export returned no program")


def _torch_runner(program: torch.export.ExportedProgram) -> tuple[Runner, dict[str, str]]:
    import torch
    from torch.utils._pytree import tree_leaves

    module = program.module()
    fed: dict[str, str] = {}

    def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in feeds.values()]
        if not fed:
            fed.update({n: sha256_array(t.numpy()) for n, t in zip(feeds, tensors, strict=True)})
        with torch.no_grad():
            result = module(*tensors)
        return [leaf.detach().cpu().numpy() for leaf in tree_leaves(result)]

    return run, fed


def _grounded(program: torch.export.ExportedProgram, run_torch: Runner, feeds: dict[str, np.ndarray],
              names: Sequence[str], torch_out: Sequence[np.ndarray], ort_out: Sequence[np.ndarray],
              given: Mapping[str, Tolerance], torch_runs: BatchRuns | None) -> tuple[Rounding, dict[str, Tolerance]]:
    """The grounding and the tolerance per output: on the first few samples, then also on the samples that fail
    with those (ORT against PyTorch, or PyTorch batched against alone) while none of the failing ones has been
    grounded (`common/rounding.py`). A tolerance given by the user is used as given."""
    rounding = _rounding(program, run_torch, feeds, names, range(min(REFERENCE_SAMPLES, _batch(feeds))))
    while True:
        tols = {n: given.get(n) or rounding.tolerance(n, Tolerance.for_dtype(t.dtype))
                for n, t in zip(names, torch_out, strict=True)}
        failing = {} if torch_runs is None else torch_runs.failing(names, tols)
        for name, expected, actual in zip(names, torch_out, ort_out, strict=True):
            if name not in given and expected.shape == actual.shape and expected.ndim:  # a given one: no grounding
                add_failing(failing, compare_along(actual, expected, tols[name], axis=0))
        more = rounding.to_ground(failing)
        if not more:
            return rounding, tols
        log.info("grounding %d more samples in float64: they fail with the first ones' rounding", len(more))
        rounding = rounding.widened(_rounding(program, run_torch, feeds, names, more))


def _rounding(program: torch.export.ExportedProgram, run_torch: Runner, feeds: dict[str, np.ndarray],
              names: Sequence[str], samples: Sequence[int]) -> Rounding:
    """PyTorch FP32's distance from a float64 run of the same program, per output, on `samples`."""
    import torch
    from torch.utils._pytree import tree_leaves

    from skewgate.common.layers import float64_module, widen

    sample = take_samples(feeds, samples)
    narrow = dict(zip(names, run_torch(sample), strict=True))

    def float64() -> dict[str, np.ndarray]:
        wide = float64_module(program.module())
        arrays = [widen(a) for a in sample.values()]
        with torch.no_grad():
            result = wide(*[torch.from_numpy(np.ascontiguousarray(a)) for a in arrays])
        return dict(zip(names, [leaf.detach().cpu().numpy() for leaf in tree_leaves(result)], strict=True))

    ops = sum(1 for node in program.graph.nodes if node.op == "call_function")
    return measure(narrow, float64, samples=samples, ops=ops)


def _ort_runner(path: Path) -> tuple[Runner, dict[str, str]]:
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as err:
        raise ExportError(f"{path}: ONNX Runtime could not load the exported model: {err}") from err
    input_names = [i.name for i in session.get_inputs()]
    fed: dict[str, str] = {}

    def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        # ONNX inputs follow the program's user inputs in order; names normally match, order always does.
        ort_feeds = {name: np.ascontiguousarray(a) for name, a in zip(input_names, feeds.values(), strict=True)}
        if not fed:
            fed.update({n: sha256_array(a) for n, a in zip(feeds, ort_feeds.values(), strict=True)})
        return [np.asarray(o) for o in session.run(None, ort_feeds)]

    return run, fed


def _batch(feeds: Mapping[str, np.ndarray]) -> int:
    return int(next(iter(feeds.values())).shape[0])


def _gelu_mode(node: onnx.NodeProto) -> str:
    for attr in node.attribute:
        if attr.name == "approximate":
            return attr.s.decode()
    return "none"


def _stats(feeds: Mapping[str, np.ndarray], names: Sequence[str], torch_out: Sequence[np.ndarray],
           ort_out: Sequence[np.ndarray]) -> list[TensorStats]:
    stats = [summarize(n, stage, a) for stage in ("torch.input", "ort.input") for n, a in feeds.items()]
    stats += [summarize(n, "torch.output", a) for n, a in zip(names, torch_out, strict=True)]
    stats += [summarize(n, "ort.output", a) for n, a in zip(names, ort_out, strict=True)]
    return stats
