"""A stateful STEP model on Triton: the state pairs (`IN=OUT`), the initial state, and the model repository that
serves STEP under Triton's sequence batcher.

STEP takes its non-state inputs for one time step plus each state input `IN`, and returns its outputs plus each
next state `OUT`. Deployed, the client sends only the non-state inputs of one step of one sequence (batch 1,
under a correlation id, with sequence start/end flags) and gets only the non-state outputs; the server keeps the
state of each sequence, sets it to the initial state at the sequence's start and feeds `OUT` back as `IN`.

Two flavours, as `repository.write_repository`:
- `python` (the tritonserver of the `nvidia-pytriton` wheel, Python backend only): the Python backend has no
  implicit state (it never calls Triton's backend state API), so `python_backend_sequence_model.py` keeps the
  state itself, keyed by the CORRID control, reset at START, dropped at END; the controls START/END/READY/CORRID
  are mapped to input tensors by the sequence batcher (`oldest` strategy: requests of different sequences are
  batched together);
- `onnxruntime_onnx` (clusters): Triton's implicit state, one `state` entry per pair with its initial state
  (`zero_data`, or a `data_file` under the model's `initial_state/` folder); Triton resets it at START itself, and
  the model has no control inputs (the ONNX has none to map them to).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.io import TensorSpec
from skewgate.common.states import read_initial_state
from skewgate.common.triton.repository import (
    InstanceKind,
    Platform,
    Signature,
    WrittenModel,
    config_pbtxt,
    onnx_signature,
    write_version,
)

CONTROLS = ("START", "END", "READY", "CORRID")  # the sequence batcher's control inputs (python flavour)
STATES_PARAMETER = "skewgate.states"
INITIAL_STATE_FILE = "initial_state.npz"


def check_states(signature: Signature, states: Mapping[str, str], *, source: str | Path) -> None:
    """Each `IN` is an input of STEP and each `OUT` an output of the same data type; at least one input and one
    output are left for the client; no name is one of the sequence batcher's controls."""
    if not states:
        raise InputError("--state", expected="at least one IN=OUT pair for a stateful model", found="none")
    inputs = {t.name: t for t in signature.inputs}
    outputs = {t.name: t for t in signature.outputs}
    for state_in, state_out in states.items():
        if state_in not in inputs:
            raise InputError(source, field=f"state input {state_in!r}", expected=f"one of STEP's inputs "
                             f"{sorted(inputs)}", found="no such input")
        if state_out not in outputs:
            raise InputError(source, field=f"state output {state_out!r}", expected=f"one of STEP's outputs "
                             f"{sorted(outputs)}", found="no such output")
        if inputs[state_in].data_type != outputs[state_out].data_type:
            raise InputError(source, field=f"state output {state_out!r}", expected=f"the state input "
                             f"{state_in!r}'s {inputs[state_in].metadata_type}",
                             found=outputs[state_out].metadata_type)
    served = served_signature(signature, states)
    if not served.inputs or not served.outputs:
        raise InputError(source, field="inputs and outputs", expected="at least one input and one output besides "
                         f"the states {dict(states)}", found=f"inputs {sorted(inputs)}, outputs {sorted(outputs)}")
    clashes = sorted({t.name for t in (*signature.inputs, *signature.outputs)} & set(CONTROLS))
    if clashes:
        raise InputError(source, field=", ".join(clashes), expected=f"no tensor named as a sequence control "
                         f"{list(CONTROLS)}", found="a model tensor of that name")


def served_signature(signature: Signature, states: Mapping[str, str]) -> Signature:
    """What the client sees of STEP served with its state kept on the server: STEP less the state pairs."""
    outs = set(states.values())
    return replace(signature, inputs=tuple(t for t in signature.inputs if t.name not in states),
                   outputs=tuple(t for t in signature.outputs if t.name not in outs))


def initial_state(specs: Mapping[str, TensorSpec], path: str | Path | None = None) -> dict[str, np.ndarray]:
    """One sequence's initial state, by state input: zeros, or the arrays of the .npz at `path` (keyed by state
    input name). Axis 0 (the batch) is 1; other dynamic dimensions take the file's sizes (zeros need them static);
    static dimensions and the dtype must be STEP's."""
    if path is None:
        state = {}
        for name, spec in specs.items():
            if any(d is None for d in spec.shape[1:]):
                raise InputError("--initial-state", field=name, expected=f"an initial state file: STEP's state "
                                 f"{spec.describe()} has dynamic dimensions besides the batch, so zeros have no "
                                 "shape", found="none given")
            state[name] = np.zeros(tuple(1 if d is None else d for d in spec.shape), dtype=spec.dtype)
        return state

    def one_sequence(_name: str, spec: TensorSpec, array: np.ndarray) -> str | None:
        want = [1 if axis == 0 and d is None else d for axis, d in enumerate(spec.shape)]
        if array.ndim == len(want) and all(w is None or w == got for w, got in zip(want, array.shape, strict=True)):
            return None
        wanted = ", ".join("any" if w is None else str(w) for w in want)
        return f"shape [{wanted}] (one sequence's state: batch 1), as STEP's {spec.describe()}"

    return {name: np.ascontiguousarray(array)
            for name, array in read_initial_state(path, specs, shape=one_sequence).items()}


def sequence_batching_pbtxt(signature: Signature, states: Mapping[str, str], initial: Mapping[str, np.ndarray], *,
                            platform: Platform, max_batch_size: int, idle_timeout_s: float) -> str:
    """The `sequence_batching` block (and, for the python flavour, the `parameters` entry naming the states)."""
    lines = ["sequence_batching {", f"  max_sequence_idle_microseconds: {int(idle_timeout_s * 1_000_000)}",
             f"  oldest {{ max_candidate_sequences: {max(1, max_batch_size)} max_queue_delay_microseconds: 1000 }}"]
    if platform == "python":
        kinds = {"START": "CONTROL_SEQUENCE_START", "END": "CONTROL_SEQUENCE_END",
                 "READY": "CONTROL_SEQUENCE_READY"}
        controls = [f'    {{ name: "{name}" control [ {{ kind: {kind} int32_false_true: [ 0, 1 ] }} ] }}'
                    for name, kind in kinds.items()]
        controls.append('    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }')
        lines += ["  control_input [", ",\n".join(controls), "  ]", "}",
                  f"parameters {{ key: \"{STATES_PARAMETER}\" value: {{ string_value: "
                  f"{json.dumps(json.dumps(dict(states)))} }} }}"]
        return "\n".join(lines) + "\n"
    inputs = {t.name: t for t in signature.inputs}
    entries = []
    for state_in, state_out in states.items():
        tensor = inputs[state_in]
        dims = ", ".join(map(str, tensor.shape[1:] if max_batch_size > 0 else tensor.shape))
        array = initial[state_in]
        zero = not np.any(array)
        init_dims = ", ".join(map(str, array.shape[1:] if max_batch_size > 0 else array.shape))
        source = "zero_data: true" if zero else f'data_file: "{state_in}"'
        entries.append(f'    {{ input_name: "{state_in}" output_name: "{state_out}" data_type: {tensor.data_type} '
                       f'dims: [ {dims} ] initial_state: {{ name: "{state_in}_initial" data_type: '
                       f'{tensor.data_type} dims: [ {init_dims} ] {source} }} }}')
    lines += ["  state [", ",\n".join(entries), "  ]", "}"]
    return "\n".join(lines) + "\n"


def write_sequence_repository(onnx_path: str | Path, repository: str | Path, *, name: str,
                              states: Mapping[str, str], initial: Mapping[str, np.ndarray], version: int = 1,
                              platform: Platform = "python", max_batch_size: int = 64,
                              instance_kind: InstanceKind = "CPU", instance_count: int = 1,
                              idle_timeout_s: float = 60.0, signature: Signature | None = None) -> WrittenModel:
    """Write (or overwrite) one stateful model of the repository: STEP served under the sequence batcher, its
    state kept on the server (see the module's docstring for the two flavours). `initial`: one sequence's initial
    state by state input (`initial_state`). `max_batch_size` is 0 when STEP has no batch dimension.
    `idle_timeout_s`: a sequence idle that long is ended by the server."""
    signature = signature or onnx_signature(onnx_path)
    check_states(signature, states, source=onnx_path)
    served = served_signature(signature, states)
    batch = max_batch_size if signature.batched else 0
    written = write_version(onnx_path, repository, name=name, version=version)
    model_dir, version_dir = written.directory, written.onnx.parent
    if platform == "python":
        shutil.copyfile(Path(__file__).with_name("python_backend_sequence_model.py"), version_dir / "model.py")
        arrays = {state_in: initial[state_in] for state_in in states}
        np.savez(version_dir / INITIAL_STATE_FILE, **arrays)  # type: ignore[arg-type]  # numpy's stub: **kwds
    else:
        files = model_dir / "initial_state"
        shutil.rmtree(files, ignore_errors=True)
        for state_in in states:
            if np.any(initial[state_in]):
                files.mkdir(exist_ok=True)
                (files / state_in).write_bytes(np.ascontiguousarray(initial[state_in]).tobytes())
    config = config_pbtxt(name, served, platform=platform, max_batch_size=batch, dynamic_batching=False,
                          instance_kind=instance_kind, instance_count=instance_count)
    config += sequence_batching_pbtxt(signature, states, initial, platform=platform, max_batch_size=batch,
                                      idle_timeout_s=idle_timeout_s)
    (model_dir / "config.pbtxt").write_text(config, encoding="utf-8")
    return written
