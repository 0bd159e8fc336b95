"""A step model's own contract (`--state IN=OUT`): each next state `OUT` can be fed back as its state input `IN`
(same shape, same dtype), and batch invariance holds with a state in the batch (each sample alone, with its own
slice of the state, gives its outputs and next states as in the batch)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from skewgate.common.batching import Runner, batch_invariance
from skewgate.common.compare import Tolerance
from skewgate.common.errors import InputError
from skewgate.common.io import TensorSpec
from skewgate.common.verdict import Check

if TYPE_CHECKING:
    import onnx


def resolve_outputs(states: Mapping[str, str], outputs: Sequence[str], *, source: str) -> dict[str, str]:
    """IN → the ONNX output name of OUT, given by name or as `#K` (its position among `outputs`); an unknown
    output is an `InputError` naming the graph's outputs."""
    listed = ", ".join(f"#{k} {name}" for k, name in enumerate(outputs))
    resolved = {}
    for state_in, state_out in states.items():
        if state_out.startswith("#") and state_out[1:].isdigit() and int(state_out[1:]) < len(outputs):
            resolved[state_in] = outputs[int(state_out[1:])]
        elif state_out in outputs:
            resolved[state_in] = state_out
        else:
            raise InputError("--state", field=f"{state_in}={state_out}", expected=f"an output of {source} by name "
                             f"or position ({listed})", found="no such output")
    return resolved


def state_contract(model: onnx.ModelProto, states: Mapping[str, str], fed: Mapping[str, np.ndarray],
                   produced: Mapping[str, np.ndarray]) -> Check:
    """Each OUT has its IN's declared dtype and shape in the graph (static dimensions equal, a dynamic one where
    the other is dynamic too) and, run, the shape and dtype of the state it was fed (dynamic dimensions compared
    by the batch)."""
    from skewgate.common.io import onnx_input_specs

    # the graph's inputs follow the program's in order (`fed`'s); their names normally match, their order always does
    declared = {name: spec for name, spec in zip(fed, onnx_input_specs(model), strict=False)}
    declared.update({s.name: s for s in _output_specs(model)})
    wrong = []
    for state_in, state_out in states.items():
        want, got = declared[state_in], declared[state_out]
        if want.dtype != got.dtype or len(want.shape) != len(got.shape) or any(
                (w is None) != (g is None) or (w is not None and w != g)
                for w, g in zip(want.shape, got.shape, strict=False)):
            wrong.append(f"{state_out} is declared {got.describe()} but {state_in} {want.describe()}")
        fed_in, made = fed[state_in], produced[state_out]
        if made.shape != fed_in.shape or made.dtype != fed_in.dtype:
            wrong.append(f"fed {state_in} {fed_in.dtype}{list(fed_in.shape)}, it returns {state_out} "
                         f"{made.dtype}{list(made.shape)}")
    pairs = ", ".join(f"{i}→{o}" for i, o in states.items())
    return Check("state.contract", passed=not wrong, value=len(wrong), limit=0,
                 detail=f"each next state can be fed back as its state input ({pairs}): same shape and dtype, "
                        "declared and run" if not wrong else
                        "a next state cannot be fed back as its state input: " + "; ".join(wrong))


def state_batch_invariance(run: Runner, feeds: Mapping[str, np.ndarray], states: Mapping[str, str],
                           produced: Mapping[str, np.ndarray], names: Sequence[str],
                           tols: Mapping[str, Tolerance], *, contract: bool, dynamic: bool) -> Check:
    """Batch invariance (`common/batching.py`) of ONNX Runtime with the state the model itself produced after
    one step fed back (a zero state, as an example file without one starts from, would hide an op that mixes
    the samples' states): every output, next states included. Not evaluated (fail) when the contract fails."""
    if not contract:
        return Check("state.batch_invariance", passed=False,
                     detail="not evaluated: a next state cannot be fed back (state.contract)")
    stepped = {**feeds, **{state_in: produced[state_out] for state_in, state_out in states.items()}}
    check, _ = batch_invariance("onnxruntime", run, stepped, names, tols, dynamic=dynamic)
    return Check("state.batch_invariance", passed=check.passed, value=check.value, limit=check.limit,
                 detail="ONNX Runtime fed the state it returned after one step, outputs and next states: "
                        + check.detail)


def check_state_inputs(specs: Sequence[TensorSpec], states: Mapping[str, str], *, source: str) -> None:
    """A state that is not an input of the program is an `InputError` naming its inputs."""
    names = [s.name for s in specs]
    for state_in in states:
        if state_in not in names:
            raise InputError("--state", field=state_in, expected=f"a state input of {source}: one of its inputs "
                             f"{names}", found="no such input")


def state_feeds(specs: Sequence[TensorSpec], arrays: Mapping[str, np.ndarray], states: Mapping[str, str],
                *, source: str, input_file: str) -> tuple[dict[str, np.ndarray], list[str]]:
    """The example inputs (`arrays`, every input but the states already checked) in the program's order, each
    state input the file lacks set to zeros of the program's shape (dynamic dimensions take the batch of the
    other inputs); also the state inputs so set."""
    from skewgate.common.io import check_array
    from skewgate.common.states import zero_state

    names = [s.name for s in specs]
    batch = next((len(arrays[s.name]) for s in specs if s.name not in states), None)
    if batch is None:
        raise InputError(source, field="inputs", expected="at least one input besides the states, to take the "
                         "batch from", found=f"inputs {names}, all states")
    feeds, zeros = {}, []
    for spec in specs:
        if spec.name in arrays:  # the other inputs were checked as they were loaded
            check_array(arrays[spec.name], spec, source=input_file)
            feeds[spec.name] = arrays[spec.name]
        else:
            feeds[spec.name] = zero_state(spec, batch)
            zeros.append(spec.name)
    return feeds, zeros


def _output_specs(model: onnx.ModelProto) -> list[TensorSpec]:
    import onnx

    specs = []
    for value in model.graph.output:
        tensor_type = value.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)).name
        shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim)
        specs.append(TensorSpec(value.name, dtype, shape))
    return specs
